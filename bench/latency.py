"""Produce-to-sink latency (p50/p99) at half the maximum throughput.

    .venv/bin/python bench/latency.py [--duration 30] [--max-rate R] [--snapshot-interval 1]
        [--sink postgresql|sqlite|kafka] [--dump FILE.csv] [--runs N]

Starts an embedded stack of its own (brought down afterwards) and deploys
``bench/latency_topology.py`` (4 spout instances on ``bench-latency``, 2 bolt instances, one
upsert sink into a PostgreSQL database of the run's own on the stack's server, or the run's
SQLite file; one negotiator). Every message is
``"<seq> <sent_ns>"``: ``sent_ns`` is ``time.time_ns()`` just before the message is handed to
the Kafka client (``linger.ms`` 5), and the sink writes it into the row of ``seq``.

1. **maximum throughput** (unless ``--max-rate`` is given): ``--burst`` messages are produced
   as fast as possible; max rate = 0.9 x burst / (seconds from the first message produced
   until the sink table holds rows for 90% of them), i.e. written end to end. (The last
   rows of a burst can wait for the next snapshot round once the spouts are idle, which
   would tie a full-burst figure to the snapshot interval.)
2. **latency**: messages are produced at half that rate, paced every 2 ms, for
   ``--duration`` seconds. A reader polls the table every 10 ms, on the same machine and
   clock (SQLite: ``SELECT ... WHERE rowid > last``; PostgreSQL: the rows above the least
   per-partition ``seq`` seen, see :class:`PostgresTableReader`) and takes, for every new
   row, ``time.time_ns()`` at the poll that first returned it minus the row's ``sent_ns``.
   Rows appear when the sink commits through its low-water mark (as soon as it has read
   the frames that arrived during its last commit, at least 50 ms after that one began:
   "What a row waits for" in ``docs/performance.md``), so the latency includes the
   producer's batching, the spout, the bolt, the sink's buffering and its transaction;
   the poll adds up to 10 ms. With ``--sink kafka`` the sink writes the rows
   to the upsert topic ``bench-latency-out`` in Kafka transactions instead, and a
   ``read_committed`` consumer takes the time each record first reaches it.

Prints one JSON line of figures (p50, p90, p99, max, the rates; the p99 of each second's
messages, least, median and greatest; the snapshot rounds taken while the latency was
measured and how long each took on average to fix its clock, from ``SpoutsPaused`` to
``Flowing(e, C)``, the ``pause_*`` figures: the spouts read on meanwhile, since rounds are
barriers, where they stood paused before; p50 and p99 by when in its round a message was
sent, ``by_round_phase_ms``, see :mod:`latency_rounds`; the CPU the processors and the
whole machine used per message while the load ran, and how busy the cores were then,
``cores_busy_pct``: the bench's producer and reader, the broker and PostgreSQL share them;
``cores_stolen_pct``: the time the hypervisor gave another guest, a slower VM)
and a human summary. With
``--runs N`` it measures N times, each on a stack of its own, prints each run so, then a
``latency_runs`` line: the median, least and greatest of the max rate, p50, p90, p99, max,
the median second's p99 and the mean time to fix a clock.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import (  # noqa: E402
    ROLES,
    cpu_by_role,
    cpu_figures,
    embedded_stack,
    machine,
    machine_cpu,
    machine_used,
    pause_figures,
    pause_reading,
    percentile,
    processor_cpu,
    report,
    run_logs,
)
from latency_rounds import RoundStarts, by_round_phase, describe_phases  # noqa: E402
from latency_topology import OUTPUT_TOPIC  # noqa: E402

from hailstorm import kafka  # noqa: E402
from hailstorm.dev.harness import SQLITE, HarnessError, StackAddresses, TopologyRun  # noqa: E402

TOPIC = "bench-latency"
TABLE = "bench_latency"
PARTITIONS = 4
TOPOLOGY = REPO / "bench" / "latency_topology.py"
WARM_TOPIC = "bench-latency-warm"
"""A topic of its own for the message that connects a producer before it is timed."""
SINK_NAMES = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "kafka": "Kafka (transactional)"}
BURST_FRACTION = 0.9
"""The max rate is taken when this fraction of the burst is in the table: the last rows of a
burst can wait for the next snapshot round (idle spouts), which would tie it to the interval."""


def warm_producer(bootstrap: str) -> Any:
    """A Kafka producer connected to the broker leading the topic's partitions: the first
    messages of a phase must not wait for the client to connect (that is the producer's
    start, not hailstorm's latency)."""
    out = kafka.producer(bootstrap, **{"linger.ms": 5})
    out.list_topics(TOPIC, timeout=30)
    out.produce(WARM_TOPIC, value=b"warm")  # a connection to the broker that leads TOPIC
    if out.flush(30):
        raise HarnessError("the warm-up message was not delivered")
    return out


class PacedProducer(threading.Thread):
    """Produce ``count`` messages ``"<seq> <sent_ns>"`` from ``first`` at ``rate`` per second
    (``rate`` <= 0: as fast as possible), round-robin over the partitions, with ``out``
    (:func:`warm_producer`)."""

    def __init__(self, out: Any, first: int, count: int, rate: float) -> None:
        super().__init__(name="paced-producer", daemon=True)
        self.out = out
        self.first, self.count, self.rate = first, count, rate
        self.started_ns = 0
        self.finished_ns = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            out = self.out
            self.started_ns = time.time_ns()
            started = time.monotonic()
            sent = 0
            while sent < self.count:
                due = self.count if self.rate <= 0 else min(
                    self.count, int((time.monotonic() - started) * self.rate) + 1)
                while sent < due:
                    seq = self.first + sent
                    try:
                        out.produce(TOPIC, value=f"{seq} {time.time_ns()}".encode(),
                                    partition=seq % PARTITIONS)
                    except BufferError:
                        out.poll(0.05)
                        continue
                    sent += 1
                out.poll(0)
                if self.rate > 0 and sent < self.count:
                    time.sleep(0.002)
            if out.flush(60):
                raise HarnessError("messages left undelivered")
            self.finished_ns = time.time_ns()
        except BaseException as exc:  # reported by the caller
            self.error = exc


class Reader:
    """New rows of the sink's output, with the wall time of the poll that first saw them."""

    def __init__(self) -> None:
        self.arrived: dict[int, tuple[int, int]] = {}
        """seq -> (sent_ns, seen_ns)"""

    def poll(self) -> list[int]:
        """The sequence numbers seen for the first time since the last poll."""
        raise NotImplementedError

    def wait_for(self, seqs: range, timeout: float, alive: Callable[[], None],
                 poll: float = 0.01) -> None:
        """Poll until a row of every sequence number of ``seqs`` arrived."""
        deadline = time.monotonic() + timeout
        got = sum(1 for s in seqs if s in self.arrived)
        while got < len(seqs):
            if time.monotonic() > deadline:
                raise HarnessError(f"{len(seqs) - got} of {len(seqs)} rows still missing "
                                   f"after {timeout:.0f} s")
            alive()
            got += sum(1 for s in self.poll() if s in seqs)
            time.sleep(poll)

    def close(self) -> None:
        """Release what the reader holds."""

    def _seen(self, rows: list[tuple[int, int]], seen_ns: int) -> list[int]:
        new = []
        for seq, sent_ns in rows:
            if seq not in self.arrived:
                self.arrived[seq] = (sent_ns, seen_ns)
                new.append(seq)
        return new


class TopicReader(Reader):
    """Records of the output topic as a ``read_committed`` consumer sees them."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.bootstrap, self.topic = bootstrap, topic
        self.consumer: Any = None

    def poll(self) -> list[int]:
        from confluent_kafka import TopicPartition

        if self.consumer is None:
            try:
                parts = kafka.partitions_of(self.bootstrap, self.topic, timeout=2)
            except LookupError:
                return []  # the sink has not created it yet
            self.consumer = kafka.consumer(self.bootstrap)
            self.consumer.assign([TopicPartition(self.topic, p, 0) for p in parts])
        messages = self.consumer.consume(10_000, timeout=0.01)
        seen_ns = time.time_ns()
        rows = []
        for message in messages:
            if message.error() is None and message.value():
                record = json.loads(message.value())
                rows.append((int(record["seq"]), int(record["sent_ns"])))
        return self._seen(rows, seen_ns)

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


class TableReader(Reader):
    """New rows of the sink table (SQLite, polled by rowid)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.db: sqlite3.Connection | None = None
        self.last_rowid = 0

    def poll(self) -> list[int]:
        """Read the rows added since the last poll; the sequence numbers seen for the first
        time."""
        if self.db is None:
            if not self.path.exists():
                return []
            self.db = sqlite3.connect(self.path, timeout=5)
        try:
            rows = self.db.execute(
                f"SELECT rowid, seq, sent_ns FROM {TABLE} WHERE rowid > ? ORDER BY rowid",
                (self.last_rowid,)).fetchall()
        except sqlite3.OperationalError:  # table not created yet, or locked
            return []
        seen_ns = time.time_ns()
        self.last_rowid = max([self.last_rowid, *(rowid for rowid, _s, _n in rows)])
        return self._seen([(int(seq), int(sent_ns)) for _r, seq, sent_ns in rows], seen_ns)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


class PostgresTableReader(Reader):
    """New rows of the sink table in PostgreSQL.

    A row has no insertion order there, but a partition's rows become visible as a prefix
    (the sink commits every row at or below its low-water mark at once) and the producer
    sends ``seq`` to partition ``seq % PARTITIONS`` in order; so each poll asks only for
    the rows above the least, over the partitions, of the highest ``seq`` seen, through
    the primary-key index."""

    def __init__(self, url: str) -> None:
        super().__init__()
        from hailstorm.sinks.db import Database

        self.db = Database(url)
        self.highest = dict.fromkeys(range(PARTITIONS), -1)

    def poll(self) -> list[int]:
        low = min(self.highest.values())
        try:
            with self.db.transaction() as db:
                rows = db.execute(f"SELECT seq, sent_ns FROM {TABLE} WHERE seq > %s", (low,))
        except Exception:  # the table appears when the sink first opens
            return []
        seen_ns = time.time_ns()
        for seq, _sent in rows:
            part = seq % PARTITIONS
            self.highest[part] = max(self.highest[part], seq)
        return self._seen([(int(seq), int(sent_ns)) for seq, sent_ns in rows], seen_ns)

    def close(self) -> None:
        self.db.close()


def reader_for(sink: str, run: TopologyRun, stack: StackAddresses) -> Reader:
    """The reader of ``sink``'s output in ``run``."""
    if sink == "kafka":
        return TopicReader(stack.kafka, OUTPUT_TOPIC)
    if sink == "postgresql":
        return PostgresTableReader(run.database)
    return TableReader(Path(run.database.removeprefix("sqlite:///")))


def produce_and_wait(stack: StackAddresses, run: TopologyRun, reader: Reader, first: int,
                     count: int, rate: float, timeout: float) -> PacedProducer:
    producer = PacedProducer(warm_producer(stack.kafka), first, count, rate)
    producer.start()
    reader.wait_for(range(first, first + count), timeout, run.alive)
    producer.join(60)
    if producer.error is not None:
        raise HarnessError(f"producer failed: {producer.error!r}")
    return producer


def p99_per_second(arrived: list[tuple[int, int]]) -> dict[str, float]:
    """The p99 latency (ms) of the messages sent in each whole second of the load, by the
    second they were sent in: the least, the median and the greatest. A tail made by a few
    seconds (the first, or those of a snapshot round) shows as a median well below the run's
    p99."""
    start = min(sent for sent, _ in arrived)
    by_second: dict[int, list[float]] = {}
    for sent, seen in arrived:
        by_second.setdefault((sent - start) // 1_000_000_000, []).append((seen - sent) / 1e6)
    last = max(by_second)  # a part of a second at the end
    p99s = sorted(percentile(values, 0.99) for second, values in by_second.items()
                  if second != last or len(by_second) == 1)
    return {"min": round(p99s[0], 1), "median": round(percentile(p99s, 0.5), 1),
            "max": round(p99s[-1], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0,
                        help="Seconds of producing at half the maximum rate.")
    parser.add_argument("--max-rate", type=float, default=None,
                        help="Messages/s taken as the maximum (skips measuring it).")
    parser.add_argument("--burst", type=int, default=100_000,
                        help="Messages of the maximum-throughput measurement.")
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--sink", choices=("postgresql", "sqlite", "kafka"),
                        default="postgresql",
                        help="The sink's target: an upsert table in a database of the run's "
                        "own on the stack's PostgreSQL, in the run's SQLite file, or an "
                        "upsert topic written in Kafka transactions.")
    parser.add_argument("--dump", type=Path, default=None,
                        help="Write every measured message's seq, sent_ns and seen_ns "
                        "(CSV) here, to see where in the run the tail comes from (with "
                        "--runs, one file per run: NAME-1.csv, ...).")
    parser.add_argument("--runs", type=int, default=1,
                        help="Measure this many times, each on a stack of its own, then "
                        "print the median and range of each figure.")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    os.environ["BENCH_LATENCY_SINK"] = args.sink  # the topology module reads it
    runs = []
    for number in range(1, args.runs + 1):
        dump = args.dump
        if dump is not None and args.runs > 1:
            dump = dump.with_name(f"{dump.stem}-{number}{dump.suffix}")
        figures = measure(args, dump)
        report("latency", figures, describe(figures, args))
        runs.append(figures)
    if args.runs > 1:
        summary = summarize(runs)
        report("latency_runs", {**summary, "snapshot_interval_s": args.snapshot_interval,
                                "sink": args.sink, "duration_s": args.duration, **machine()},
               describe_runs(summary))
    return 0


def measure(args: argparse.Namespace, dump: Path | None) -> dict[str, Any]:
    """One measurement on a stack of its own (see the module): its figures."""
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        kafka.create_topic(stack.kafka, TOPIC, PARTITIONS)
        kafka.create_topic(stack.kafka, WARM_TOPIC, 1)
        kafka.delete_topic(stack.kafka, OUTPUT_TOPIC)
        with run_logs("hailstorm-bench-latency-") as logs, TopologyRun(
                stack, TOPOLOGY, log_dir=logs, negotiators=1,
                snapshot_interval=args.snapshot_interval, timeout=60,
                database=SQLITE if args.sink == "sqlite" else None) as run:
            reader = reader_for(args.sink, run, stack)
            run.start()
            run.wait_flowing(300)
            rounds = RoundStarts(run)
            first = 0
            burst_s: float | None = None
            burst90_s: float | None = None
            if args.max_rate is None:
                producer = produce_and_wait(stack, run, reader, 0, args.burst, 0, args.timeout)
                seen = sorted(reader.arrived[s][1] for s in range(args.burst))
                burst_s = (seen[-1] - producer.started_ns) / 1e9
                most = int(len(seen) * BURST_FRACTION)
                burst90_s = (seen[most - 1] - producer.started_ns) / 1e9
                max_rate = most / burst90_s
                first = args.burst
            else:
                max_rate = args.max_rate
            rate = max_rate / 2
            count = int(rate * args.duration)
            paused = pause_reading(run)
            cpu_before, machine_before = processor_cpu(run), machine_cpu()
            load_started = time.monotonic()
            producer = produce_and_wait(stack, run, reader, first, count, rate, args.timeout)
            load_s = time.monotonic() - load_started
            cpu = cpu_by_role(cpu_before, processor_cpu(run))
            whole_machine = machine_used(machine_before, machine_cpu())
            pauses = pause_figures(run, since=paused)
            starts = rounds.stop()
            produced_rate = count / ((producer.finished_ns - producer.started_ns) / 1e9)
            latencies = [(reader.arrived[s][1] - reader.arrived[s][0]) / 1e6
                         for s in range(first, first + count)]
            arrived = [reader.arrived[s] for s in range(first, first + count)]
            seconds = p99_per_second(arrived)
            phases = by_round_phase(arrived, starts, args.snapshot_interval)
            reader.close()
            run.stop()
    if dump is not None:
        with dump.open("w", newline="") as out:
            rows = csv.writer(out)
            rows.writerow(("seq", "sent_ns", "seen_ns"))
            rows.writerows((s, *reader.arrived[s]) for s in range(first, first + count))
    figures: dict[str, Any] = {
        "snapshot_interval_s": args.snapshot_interval, "sink": args.sink,
        "max_rate_msgs_per_s": round(max_rate), "max_rate_measured": args.max_rate is None,
        "burst": args.burst if burst_s is not None else None,
        "burst_committed_s": None if burst_s is None else round(burst_s, 2),
        "burst_90pct_committed_s": None if burst90_s is None else round(burst90_s, 2),
        "rate_msgs_per_s": round(rate), "produced_msgs_per_s": round(produced_rate),
        "messages": count, "duration_s": args.duration,
        "latency_ms": {
            "p50": round(percentile(latencies, 0.5), 1),
            "p90": round(percentile(latencies, 0.9), 1),
            "p99": round(percentile(latencies, 0.99), 1),
            "max": round(max(latencies), 1), "min": round(min(latencies), 1),
        },
        "p99_per_second_ms": seconds,
        "by_round_phase_ms": phases,
        **pauses,
        **machine(),
    }
    figures |= cpu_figures(cpu, count, "message", whole_machine)[0]
    cores_s = load_s * figures["cores"]
    figures["cores_busy_pct"] = round(100 * whole_machine["machine"] / cores_s)
    figures["cores_stolen_pct"] = round(100 * whole_machine["stolen"] / cores_s)
    return figures


def describe(figures: dict[str, Any], args: argparse.Namespace) -> str:
    """The human summary of one measurement."""
    lat, seconds = figures["latency_ms"], figures["p99_per_second_ms"]
    burst_s, burst90_s = figures["burst_committed_s"], figures["burst_90pct_committed_s"]
    how = (f"measured: 90% of {args.burst:,} messages in the table after {burst90_s:.2f} s, "
           f"all after {burst_s:.2f} s" if burst_s is not None and burst90_s is not None
           else "given")
    return (
        f"snapshot every {args.snapshot_interval:g} s, {PARTITIONS} partitions, 2 bolt "
        f"instances, {SINK_NAMES[args.sink]} upsert "
        f"sink, {figures['cores']} cores\n"
        f"  max throughput {figures['max_rate_msgs_per_s']:,} msgs/s ({how})\n"
        f"  at {figures['rate_msgs_per_s']:,} msgs/s for {args.duration:g} s "
        f"({figures['messages']:,} messages, produced at "
        f"{figures['produced_msgs_per_s']:,}/s): produce-to-sink-row latency p50 "
        f"{lat['p50']} ms, p90 {lat['p90']} ms, p99 {lat['p99']} ms, max {lat['max']} ms\n"
        f"  p99 of each second's messages: {seconds['min']}-{seconds['max']} ms, median "
        f"{seconds['median']} ms\n"
        f"  rounds meanwhile: {figures['rounds']}, each fixing its clock in "
        f"{figures['pause_mean_ms']} ms on average ({figures['pause_max_ms']} ms at most in "
        "the run; SpoutsPaused to Flowing)\n"
        f"  p50/p99 (ms) by when in its round a message was sent (seconds after the round "
        f"began): {describe_phases(figures['by_round_phase_ms'])}\n"
        f"{cpu_line(figures)}\n"
        f"             the {figures['cores']} cores were {figures['cores_busy_pct']}% busy while "
        f"the load ran (the bench's producer and reader included), "
        f"{figures['cores_stolen_pct']}% more stolen by the hypervisor")


def cpu_line(figures: dict[str, Any]) -> str:
    """The CPU line of one measurement's figures (:func:`common.cpu_figures`'s)."""
    used = {role: figures[f"cpu_s_{role}s"] for role in ROLES}
    whole = {"machine": figures["cpu_s_machine"], "stolen": figures["cpu_s_stolen"]}
    return cpu_figures(used, figures["messages"], "message", whole)[1]


SUMMARIZED = {
    "max_rate_msgs_per_s": ("max_rate_msgs_per_s",),
    "p50_ms": ("latency_ms", "p50"), "p90_ms": ("latency_ms", "p90"),
    "p99_ms": ("latency_ms", "p99"), "max_ms": ("latency_ms", "max"),
    "p99_per_second_median_ms": ("p99_per_second_ms", "median"),
    "pause_mean_ms": ("pause_mean_ms",),
    "cores_busy_pct": ("cores_busy_pct",),
    "cores_stolen_pct": ("cores_stolen_pct",),
    "cpu_us_per_message_machine": ("cpu_us_per_message_machine",),
}
"""The figures :func:`summarize` gives the median and range of (name: where in a run)."""


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median, least and greatest of each of :data:`SUMMARIZED` over ``runs`` (each a
    measurement's figures); a figure a run lacks (None) is left out of its summary."""
    summary: dict[str, Any] = {"runs": len(runs)}
    for name, where in SUMMARIZED.items():
        values = []
        for run in runs:
            value: Any = run
            for key in where:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                values.append(float(value))
        summary[name] = ({"median": round(statistics.median(values), 1),
                          "min": round(min(values), 1), "max": round(max(values), 1)}
                         if values else None)
    return summary


def describe_runs(summary: dict[str, Any]) -> str:
    """The human summary of several measurements: median (least-greatest) of each."""
    def figure(name: str) -> str:
        value = summary[name]
        return "-" if value is None else f"{value['median']:g} ({value['min']:g}-{value['max']:g})"

    return (f"{summary['runs']} runs, median (least-greatest): max rate "
            f"{figure('max_rate_msgs_per_s')} msgs/s; p50 {figure('p50_ms')} ms, "
            f"p90 {figure('p90_ms')} ms, p99 {figure('p99_ms')} ms, max {figure('max_ms')} ms; "
            f"p99 of a median second {figure('p99_per_second_median_ms')} ms; a round's clock "
            f"fixed in {figure('pause_mean_ms')} ms on average; the cores busy (%) "
            f"{figure('cores_busy_pct')}, stolen (%) {figure('cores_stolen_pct')}; the "
            f"machine's CPU {figure('cpu_us_per_message_machine')} us a message")


if __name__ == "__main__":
    sys.exit(main())
