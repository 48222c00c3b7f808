"""Timestamped messages to a table: the topology of ``bench/latency.py``.

Each message of the topic ``bench-latency`` is ``"<seq> <sent_ns>"``: a sequence number,
unique per message, and the producer's ``time.time_ns()`` when it handed the message to the
Kafka client. The ``seen`` bolt (2 instances) counts per sequence number and emits
``(seq, sent_ns, count)``; the sink upserts it into ``bench_latency(seq, sent_ns, count)``.
A row appears in the table once the sink wrote the round that covers its message, so the
row's arrival time minus ``sent_ns`` is the produce-to-sink latency.

With ``$BENCH_LATENCY_SINK=kafka`` the sink writes the same rows as JSON records keyed by
``seq`` to the upsert topic ``bench-latency-out`` instead (Kafka transactions).
"""

import os

from hailstorm import Count, Table, Topic, Topology, per_key

OUTPUT_TOPIC = "bench-latency-out"


def parse(line: str) -> list[tuple[int, int]]:
    seq, sent_ns = line.split()
    return [(int(seq), int(sent_ns))]


topology = Topology("latency")

messages = topology.spout("messages", topic="bench-latency", decoder="text", explode=parse)

seen = topology.bolt(
    "seen",
    inputs=[messages],
    key=lambda t: str(t[0]),
    state=per_key(Count()),
    lift=lambda t: 1,
    emit=lambda t, n: [(t[0], t[1], n)],
    parallelism=2,
)

topology.sink(
    "bench_latency",
    inputs=[seen],
    target=Topic(
        OUTPUT_TOPIC,
        key=lambda t: t[0],
        value=lambda t: {"seq": t[0], "sent_ns": t[1], "count": t[2]},
        partitions=4,
    )
    if os.environ.get("BENCH_LATENCY_SINK") == "kafka"
    else Table(
        "bench_latency",
        columns={"seq": "bigint", "sent_ns": "bigint", "count": "bigint"},
        key=["seq"],
        mode="upsert",
    ),
)
