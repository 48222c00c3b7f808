"""Beyond word count: a bolt feeding a bolt (both with parallelism 2) stays exact across a
kill, a bolt instance that receives no data still snapshots every round, and an idle
topology skips its rounds."""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    BackgroundProducer,
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.model import run_model
from hailstorm.protocol.layout import CommittedRecord
from hailstorm.routing import route
from hailstorm.snapshots import DirectorySnapshotStore

pytestmark = pytest.mark.integration

PARTITIONS = 4

TWO_LEVEL = '''
"""Per-word counts feeding per-length counts: bolt 'words' emits (word, 1) for every
occurrence, bolt 'lengths' counts occurrences by word length. Order-insensitive."""
import re

from hailstorm import Count, Topology, per_key

WORD = re.compile(r"[a-z]+")

topology = Topology("twolevel")
lines = topology.spout("lines", topic="{topic}", decoder="text",
                       explode=lambda line: WORD.findall(line.lower()))
words = topology.bolt("words", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                      lift=lambda w: 1, emit=lambda w, count: [(w, 1)], parallelism=2)
topology.bolt("lengths", inputs=[words], key=lambda t: len(t[0]),
              state=per_key(Count(), key_type="long"), lift=lambda t: 1, parallelism=2)
'''

ONE_BOLT = '''
from hailstorm import Count, Topology, per_key

topology = Topology("lonely")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
topology.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
              lift=lambda w: 1, parallelism=2)
'''


def _module(tmp_path: Path, text: str, topic: str) -> Path:
    module = tmp_path / f"topo_{uuid.uuid4().hex[:8]}.py"
    module.write_text(text.replace("{topic}", topic))
    return module


def _target(produced: Produced) -> dict[tuple[str, int], int]:
    return {(produced.topic, p): o for p, o in produced.last_offsets().items()}


def test_two_level_topology_is_exact_across_a_kill(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"twolevel-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    partitions = kafka.partitions_of(stack.kafka, topic)
    produced = Produced(topic)
    produce(stack.kafka, produced, wordcount_lines(20_000, seed=5), partitions)
    with TopologyRun(stack, _module(tmp_path, TWO_LEVEL, topic), log_dir=tmp_path / "logs") as run:
        run.start()
        first = wait_for("a first commit", run.committed, 240, run.alive)
        with BackgroundProducer(stack.kafka, produced, wordcount_lines(30_000, seed=6),
                                partitions, rate=5_000) as producer:
            wait_for("the producer to be half-way", lambda: producer.sent >= 15_000, 60)
            fault = run.kill_processor(role="bolt", rng=random.Random(4))
            producer.join(120)
        recovery = run.measure_recovery(fault, 180)
        assert recovery.committed_after is not None, run.log("driver")[-3000:]
        committed = run.wait_committed(_target(produced), 240)
        assert committed.epoch > first.epoch
        assert dict(committed.clock) == _target(produced)
        states = run.committed_bolt_states(committed)
        model = run_model(run.topology, produced.model_messages())
        for bolt in ("words", "lengths"):
            assert states[bolt].instances == model.instance_states(bolt), bolt
            assert all(c == committed.clock for c in states[bolt].instance_clocks)
        comparison = compare_with_model(model, states)
        assert comparison.ok, comparison
        assert sum(states["lengths"].merged.values()) == sum(states["words"].merged.values())
        assert sum(states["words"].merged.values()) > 150_000
        run.check_recoveries()


def test_a_bolt_instance_without_data_still_snapshots_and_an_idle_topology_writes_none(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """Every word routes to instance 0; instance 1 must still save at every newer clock.
    Once nothing is read, one more round is taken (at the same clock), then rounds are
    skipped: no snapshot file is written until records arrive again."""
    stack = StackAddresses.from_env(stack_env)
    topic = f"lonely-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    partitions = kafka.partitions_of(stack.kafka, topic)
    vocabulary = [w for w in (f"w{i}" for i in range(400)) if route(w, 2) == 0][:40]
    assert len(vocabulary) == 40
    rng = random.Random(9)

    def batch(n: int) -> list[bytes]:
        return [" ".join(rng.choices(vocabulary, k=5)).encode() for _ in range(n)]

    produced = Produced(topic)
    with TopologyRun(stack, _module(tmp_path, ONE_BOLT, topic), log_dir=tmp_path / "logs",
                     negotiators=1) as run:
        run.start()
        run.wait_flowing(240)
        produce(stack.kafka, produced, batch(2_000), partitions)
        earlier = run.wait_committed(_target(produced), 120)
        produce(stack.kafka, produced, batch(2_000), partitions)
        later = run.wait_committed(_target(produced), 120)
        assert all(later.clock[p] > earlier.clock[p] for p in later.clock)
        # Idle: the round after the last records is taken, then the next ones are skipped.
        settled: CommittedRecord = wait_for(
            "a skipped round", lambda: (c := run.committed()) and c.confirmed_at and c,
            60, run.alive)
        assert settled.clock == later.clock and settled.previous is not None
        assert settled.previous.clock == later.clock
        store = DirectorySnapshotStore(stack.snapshots)
        files = {ref.key for ref in store.list(run.topology.name)}
        assert settled.confirmed_at is not None
        confirmed = settled.confirmed_at
        idle: CommittedRecord = wait_for(
            "three more skipped rounds",
            lambda: (c := run.committed()) and (c.confirmed_at or 0) > confirmed + 2.5 and c,
            60, run.alive)
        assert idle.epoch == settled.epoch, "an idle topology committed another round"
        assert {ref.key for ref in store.list(run.topology.name)} == files, \
            "an idle topology wrote snapshot files"
        master = run.master()
        assert master is not None
        assert "skipped" in master.reason, master.reason
        # Records again: rounds start again, and instance 1 saves in them.
        produce(stack.kafka, produced, batch(500), partitions)
        last = run.wait_committed(_target(produced), 120)
        assert last.epoch > settled.epoch and last.confirmed_at is None
        seen_refs = set()
        for committed in (earlier, later, settled, last):
            ref = committed.snapshot_for("bolt:counts:1")
            assert ref is not None
            seen_refs.add(ref)
            clock, state = store.load(ref, run.topology.node("counts").state)  # type: ignore[union-attr]
            assert clock == committed.clock
            assert state == {}
        assert len(seen_refs) == 4  # a new snapshot of instance 1 in every round taken
        states = run.committed_bolt_states(last)
        model = run_model(run.topology, produced.model_messages())
        assert states["counts"].instances == model.instance_states("counts")
        assert states["counts"].instances[1] == {}
        assert sum(states["counts"].merged.values()) == 4_500 * 5
        run.check_recoveries()


def test_partitions_added_while_running_are_picked_up(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """A topic grows from 2 to 3 partitions under a running topology: the driver restarts
    the stage with a spout for the new partition, which reads it from offset 0; the state is
    exactly the model's over every partition."""
    stack = StackAddresses.from_env(stack_env)
    topic = f"growing-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, 2)
    produced = Produced(topic)
    produce(stack.kafka, produced, wordcount_lines(2_000, seed=21), [0, 1])
    with TopologyRun(stack, _module(tmp_path, ONE_BOLT, topic), log_dir=tmp_path / "logs") as run:
        run.start()
        first = run.wait_committed(_target(produced), 240)
        run.expect_restart(time.time(), "a partition added: the stage restarts with its spout")
        kafka.add_partitions(stack.kafka, topic, 3)
        produce(stack.kafka, produced, wordcount_lines(3_000, seed=22), [0, 1, 2])
        assert produced.last_offsets().keys() == {0, 1, 2}
        committed = run.wait_committed(_target(produced), 240)
        assert committed.epoch > first.epoch
        assert dict(committed.clock) == _target(produced)
        expected = json.loads(run.zk.get(run.paths.expected)[0])["processors"]
        assert f"spout:lines:{topic}:2" in expected
        assert f"new source partitions {topic}:2" in run.log("driver")
        states = run.committed_bolt_states(committed)
        model = run_model(run.topology, produced.model_messages())
        assert states["counts"].instances == model.instance_states("counts")
        assert compare_with_model(model, states).ok
        run.check_recoveries()
