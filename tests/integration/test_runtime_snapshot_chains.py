"""A keyed bolt's snapshot chains in a real run: a large state of which little changes ends
its chains of deltas with differential snapshots on its last whole one, not whole ones;
the negotiator's garbage collection drops the deltas a differential one replaced, and a
killed bolt loads its committed state through one, exactly the model's. Word count on real
ZooKeeper, Kafka and Spark (:mod:`hailstorm.dev.harness`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deployments import WORDCOUNT, deployed

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
from hailstorm.dev.harness.evidence import VICTIM_GONE
from hailstorm.dev.harness.producing import zipf_text_lines
from hailstorm.model import run_model
from hailstorm.processors.deltas import DELTA_CHAIN_MAX, DIFFERENTIAL_MAX
from hailstorm.snapshots import DirectorySnapshotStore, SnapshotError, SnapshotRef

pytestmark = pytest.mark.integration

TOPIC = "words"
PARTITIONS = 4
VICTIM = "bolt:counts:1"


def differentials(run: TopologyRun) -> list[tuple[SnapshotRef, SnapshotRef]]:
    """``(differential, whole)`` of every differential snapshot of ``counts`` in the store,
    while no incarnation loaded a round: a delta on a whole snapshot with a delta between
    the two that builds on that whole one too (a first delta on it is the next file)."""
    store = DirectorySnapshotStore(run.stack.snapshots)
    refs = {ref.key: ref for ref in store.list(run.name) if ref.bolt == "counts"}
    found = []
    for ref in refs.values():
        base = refs.get(ref.base) if ref.base is not None else None
        if base is None or base.base is not None:
            continue
        if any(other.instance == ref.instance and base.epoch < other.epoch < ref.epoch
               and other.base == base.key for other in refs.values()):
            found.append((ref, base))
    return found


def test_a_stable_state_ends_its_chains_with_differential_snapshots_and_loads_through_them(
        stack_env: dict[str, str], tmp_path: Path) -> None:
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], TOPIC, PARTITIONS)
    stack = StackAddresses.from_env(stack_env)
    with deployed(stack, WORDCOUNT, tmp_path / "logs", snapshot_interval=0.2,
                  snapshot_retention=5.0) as run:
        partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
        produced = Produced(TOPIC)
        # Thousands of distinct words first, then a trickle of lines over a few hundred.
        produce(run.stack.kafka, produced, zipf_text_lines(20_000, seed=5), partitions)
        run.start()
        wait_for("a first commit", run.committed, 240, run.alive)
        with BackgroundProducer(run.stack.kafka, produced, wordcount_lines(2_000, seed=6),
                                partitions, rate=40, chunk=4) as producer:
            instance = int(VICTIM.rsplit(":", 1)[1])
            seen: dict[str, SnapshotRef] = {}  # the victim's, by key: found before collected

            def differential_of_the_victim() -> list[tuple[SnapshotRef, SnapshotRef]]:
                found = [(d, w) for d, w in differentials(run) if d.instance == instance]
                seen.update((d.key, d) for d, _w in found)
                return found

            [(differential, whole), *_] = wait_for(
                f"a differential snapshot of {VICTIM}", differential_of_the_victim, 180,
                run.alive)
            store = DirectorySnapshotStore(run.stack.snapshots)
            between = set(range(whole.epoch + 1, differential.epoch))
            assert len(between) >= DELTA_CHAIN_MAX  # the chain of deltas it ended
            monoid = run.topology.node("counts").state  # type: ignore[union-attr]
            at_differential = store.load(differential, monoid)[1]
            assert differential.records <= DIFFERENTIAL_MAX * len(at_differential)
            # The deltas it replaced go once no kept round builds on them.
            wait_for("the deltas a differential snapshot replaced to be collected",
                     lambda: not between & {r.epoch for r in store.list(run.name)
                                            if r.bolt == "counts" and r.instance == instance},
                     120, run.alive)

            def loads_through_a_differential() -> bool:
                """The victim's committed round builds on a differential snapshot."""
                differential_of_the_victim()
                committed = run.committed()
                if committed is None:
                    return False
                [ref] = [r for r in committed.snapshots.values()
                         if f"/counts/{instance}/" in r]
                try:
                    return any(link.key in seen for link in store.chain(ref))
                except (SnapshotError, OSError):  # collected while read: a newer round committed
                    return False

            wait_for(f"{VICTIM}'s committed round to build on a differential snapshot",
                     loads_through_a_differential, 180, run.alive)
            pid = int(run.processors()[VICTIM].info["pid"])
            fault = run.kill_processor(pid=pid)
            assert fault.target == VICTIM and fault.evidence[VICTIM_GONE]
            producer.join(180)
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        wait_for("the victim's next incarnation",
                 lambda: (r := run.processors().get(VICTIM)) is not None
                 and int(r.info["pid"]) != pid, 180, run.alive)
        committed = run.wait_committed(target, 240)
        states = run.committed_bolt_states(committed)
        produced.fill_before(run.stack.kafka, committed.clock)
        model = run_model(run.topology, produced.model_messages())
        for i, state in enumerate(states["counts"].instances):
            assert state == model.instance_states("counts")[i], f"instance {i} differs"
        comparison = compare_with_model(model, states, run.sink_tables())
        assert comparison.ok and comparison.lost == comparison.duplicated == \
            comparison.wrong == 0
        run.check_recoveries()  # the kill explains every restart
