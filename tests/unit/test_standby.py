"""A bolt instance's warm standby (:mod:`hailstorm.runtime.standby`): it holds the
committed state of its instance round after round, reading only each round's delta, and
hands it over only when it is exactly what the next incarnation would load."""

from __future__ import annotations

from pathlib import Path

import pytest

from hailstorm import Count, Sum, Topology, itself, per_key
from hailstorm.protocol.clock import Clock
from hailstorm.protocol.layout import CommittedRecord
from hailstorm.runtime.standby import WarmState
from hailstorm.snapshots import DirectorySnapshotStore, SnapshotRef
from hailstorm.topology import BoltSpec

CLOCK: Clock = {("words", 0): 41}


def counts(parallelism: int = 2, state: object = None) -> BoltSpec:
    topology = Topology("wordcount")
    lines = topology.spout("lines", topic="words", decoder="text", explode=str.split)
    bolt = topology.bolt("counts", inputs=[lines], key=itself,
                         state=state or per_key(Count()), lift=Count.lift,
                         emit=lambda word, count: [(word, count)], parallelism=parallelism)
    spec = topology.node(bolt.name)
    assert isinstance(spec, BoltSpec)
    return spec


@pytest.fixture
def store(tmp_path: Path) -> DirectorySnapshotStore:
    return DirectorySnapshotStore(tmp_path)


def committed(epoch: int, *refs: SnapshotRef) -> CommittedRecord:
    return CommittedRecord(epoch, CLOCK, {f"bolt:{r.bolt}:{r.instance}": r.key for r in refs},
                           1000.0 + epoch)


def put(store: DirectorySnapshotStore, state: dict[str, int], epoch: int,
        base: SnapshotRef | None = None, instance: int = 1, parallelism: int = 2,
        monoid: object = None) -> SnapshotRef:
    return store.put(topology="wordcount", bolt="counts", instance=instance,
                     parallelism=parallelism, epoch=epoch, clock=CLOCK,
                     monoid=monoid or per_key(Count()), state=state, base=base)  # type: ignore[arg-type]


def test_it_follows_the_rounds_reading_only_their_deltas(store: DirectorySnapshotStore) -> None:
    warm = WarmState(store, counts(), 1)
    first = put(store, {"a": 1, "b": 2}, 1)
    other = put(store, {"z": 9}, 1, instance=0)
    assert "whole" in warm.follow(committed(1, other, first))
    second = put(store, {"a": 3}, 2, base=first)
    third = put(store, {"c": 1}, 3, base=second)
    assert "deltas after" in warm.follow(committed(3, third))  # two deltas at once
    assert warm.follow(committed(3, third)) == "held already"
    assert warm.take(first) is None, "only the state of the round held"
    assert warm.take(third) == {"a": 3, "b": 2, "c": 1} == store.load(third, per_key(Count()))[1]
    assert warm.take(third) is None, "handed over once"


def test_a_round_it_cannot_build_on_is_read_whole(store: DirectorySnapshotStore) -> None:
    warm = WarmState(store, counts(), 1)
    first = put(store, {"a": 1}, 1)
    warm.follow(committed(1, first))
    again = put(store, {"a": 2, "b": 1}, 2)  # a whole snapshot, not a delta of the first
    assert "whole" in warm.follow(committed(2, again))
    assert warm.take(again) == {"a": 2, "b": 1}


@pytest.mark.parametrize("other", [
    {"parallelism": 3, "instance": 1},  # re-sharded: the incarnation merges files itself
    {"monoid": per_key(Sum())},  # another state type: migrated or resolved by the load
])
def test_state_the_bolt_does_not_load_as_it_is_is_not_held(
        store: DirectorySnapshotStore, other: dict[str, object]) -> None:
    warm = WarmState(store, counts(), 1)
    ref = put(store, {"a": 1}, 1, **other)  # type: ignore[arg-type]
    assert warm.follow(committed(1, ref)).startswith("nothing to hold")
    assert warm.take(ref) is None
    assert warm.follow(committed(1)).startswith("nothing to hold")  # no file of it at all
