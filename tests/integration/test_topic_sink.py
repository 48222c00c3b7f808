"""Results back into Kafka exactly once: topic sinks on the real broker, through kills.

The ``wordstream`` example writes running word totals (upsert, JSON) and one Avro record
per line (append) to two topics. The run makes a sink die with its records sent but the
transaction not committed, and again after committing but before telling ZooKeeper
(failpoints: those windows are too narrow for a random kill), SIGKILLs the negotiator
leader and a sink, and makes a sink a zombie (stopped before a commit until its
replacement committed a round, then resumed: it must be fenced). A ``read_committed``
consumer of the outputs must then see exactly the model's records: every line's record
once, and the newest total per word equal to the model's.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    ZOMBIE_FENCED,
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    produce,
    topic_records,
    wordcount_lines,
)
from hailstorm.model import run_model
from hailstorm.sinks.topic import ORIGIN_HEADER, progress_topic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordstream.py"
TOPIC = "words"
OUTPUTS = ("word-totals", "line-sizes")
FAILPOINTS = ("sink.before_kafka_commit", "sink.after_commit")


def test_topic_sinks_are_exactly_the_model_through_kills_and_a_zombie(
    stack_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HAILSTORM_FAILPOINTS", "sink.before_kafka_commit@3,sink.after_commit@6")
    monkeypatch.setenv("HAILSTORM_FAILPOINTS_DIR", str(tmp_path / "failpoints"))

    def fired(name: str) -> bool:
        return (tmp_path / "failpoints" / name).exists()

    stack = StackAddresses.from_env(stack_env)
    for topic in (*OUTPUTS, progress_topic("wordstream", "totals"),
                  progress_topic("wordstream", "line_sizes")):
        kafka.delete_topic(stack.kafka, topic)
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    lines = wordcount_lines(30000, seed=23)
    rng = random.Random(9)

    with TopologyRun(stack, TOPOLOGY, log_dir=tmp_path / "logs", zombies=True) as run:
        run.start()
        run.wait_flowing(timeout=300)
        produce(stack.kafka, produced, lines[:8000], partitions)
        run.wait_committed({(TOPIC, p): o for p, o in produced.last_offsets().items()}, 300)
        produce(stack.kafka, produced, lines[8000:14000], partitions)
        leader = run.kill_negotiator_leader()
        run.require_recovery(leader, 180)
        produce(stack.kafka, produced, lines[14000:20000], partitions)
        zombie = run.zombie_sink(rng=rng)
        assert ZOMBIE_FENCED in zombie.detail or "stopped before a commit" not in zombie.detail, \
            zombie.detail
        produce(stack.kafka, produced, lines[20000:24000], partitions)
        # A sink killed as a failpoint crashes the other one lands in the recovery the
        # failpoint starts, which names only the failpoint's victim: the kill waits until
        # both failpoints had crashed their sink before a part that committed since (so
        # their recoveries are over), then hits the next part in flight.
        killed, settled = None, False
        for start in range(24000, 30000, 1000):  # the tail in parts: each sink commits often
            fired_before = all(fired(name) for name in FAILPOINTS)
            produce(stack.kafka, produced, lines[start:start + 1000], partitions)
            if settled and killed is None:
                run.wait_flowing(timeout=300)
                killed = run.kill_processor(role="sink", rng=rng)
                run.require_recovery(killed, 180)
            run.wait_committed({(TOPIC, p): o for p, o in produced.last_offsets().items()},
                               timeout=300)
            settled = fired_before
        committed = run.wait_committed(
            {(TOPIC, p): o for p, o in produced.last_offsets().items()}, 300)
        for name in FAILPOINTS:
            assert fired(name), f"{name} never fired"
        assert killed is not None, "the failpoints fired too late for the sink's kill"
        run.check_recoveries()
        states = run.committed_bolt_states(committed)
        outputs = run.sink_tables()

    model = run_model(run.topology, produced.model_messages())
    comparison = compare_with_model(model, states, outputs)
    assert comparison.ok, comparison.first()
    assert len(outputs["line_sizes"]) == len(lines)

    # Every appended record once, straight from the log: one per line, nothing aborted.
    records = topic_records(stack.kafka, "line-sizes")
    origins = [(r.headers or {})[ORIGIN_HEADER] for r in records]
    assert len(origins) == len(set(origins)) == len(lines)
