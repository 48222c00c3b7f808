"""What a snapshot round's saves mean when nodes catch up on their own clock
(:mod:`hailstorm.protocol.catchup`): which label each bolt or sink instance must save
``Flowing(e, K, backfill, catching_up)`` at, and what the commit records. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from hailstorm.protocol.catchup import commit_clocks, label_accepted
from hailstorm.protocol.clock import Clock, clock_to_json, dominates, same_clock
from hailstorm.protocol.layout import CommittedRecord, ProcessorId, Role, SnapshotReport
from hailstorm.protocol.states import Flowing

__all__ = ["commit_of", "not_committed", "wrong_label"]


def wrong_label(pid: ProcessorId, snap: SnapshotReport, state: Flowing) -> str | None:
    """Why ``pid``'s save of round ``state`` is a protocol violation (None: it is not).

    A node that does not catch up saves at exactly the round's clock ``K``; a sink catching
    up at exactly the backfill clock; a bolt catching up at its label: the backfill clock
    raised by what it loaded, so between the two (:func:`label_accepted`)."""
    assert state.clock is not None
    e, clock = state.epoch, state.clock
    if pid.role is Role.BOLT and pid.name in state.catching_up and state.backfill is not None:
        if label_accepted(snap.clock, clock, state.backfill):
            return None
        return (f"{pid} (catching up) saved round {e} at {clock_to_json(snap.clock)}, not "
                f"between its backfill clock {clock_to_json(state.backfill)} and "
                f"{clock_to_json(clock)}")
    want = state.clock_for(pid.name)
    assert want is not None
    if same_clock(snap.clock, want):
        return None
    return f"{pid} saved round {e} at {clock_to_json(snap.clock)}, not at {clock_to_json(want)}"


def commit_of(saved: Mapping[ProcessorId, SnapshotReport], state: Flowing
              ) -> dict[str, Clock] | str:
    """The committed record's ``clocks`` for round ``state`` once every instance ``saved``
    (each at an accepted label): the nodes still behind the round's clock, each at its
    label. A reason instead when two instances of one bolt catching up saved different
    labels (they read the same cursors and loaded the same clock, so they cannot)."""
    assert state.clock is not None
    labels: dict[str, Clock] = {}
    for pid, snap in sorted(saved.items()):
        if pid.name not in state.catching_up:
            continue
        label = dict(snap.clock)
        other = labels.setdefault(pid.name, label)
        if not same_clock(other, label):
            return (f"instances of {pid.name} (catching up) saved round {state.epoch} at "
                    f"different clocks: {clock_to_json(other)} and {clock_to_json(label)}")
    return commit_clocks(labels, state.clock)


def not_committed(clock: Mapping[tuple[str, int], int], clocks: Mapping[str, Clock],
                  committed: CommittedRecord | None) -> str | None:
    """Why a round at ``clock`` whose nodes catching up are at ``clocks`` must not replace
    ``committed`` (None: it may): committed clocks never go backwards, the round's nor any
    node's own."""
    if committed is None:
        return None
    if not dominates(clock, committed.clock):
        return (f"{clock_to_json(clock)} does not dominate the committed clock "
                f"{clock_to_json(committed.clock)}")
    for node, old in sorted(committed.clocks.items()):
        new = clocks.get(node, clock)
        if not dominates(new, old):
            return (f"{node} would be at {clock_to_json(new)}, below its committed clock "
                    f"{clock_to_json(old)}")
    return None
