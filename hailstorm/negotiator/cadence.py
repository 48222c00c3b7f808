"""When the negotiator starts the next snapshot round, and whether a round is needed at
all. Pure: functions of the master state, the :class:`~hailstorm.negotiator.decision.View`
and the :class:`~hailstorm.negotiator.decision.Config`.

- The cadence: a round every snapshot interval from the previous one's start
  (:func:`next_round_due`), early when the spouts caught up with a backlog
  (:func:`early_round_due`), a little later while they read one
  (:data:`BEHIND_WAIT_SHARE`).
- The skip: a round that would change nothing is not taken (:func:`nothing_new`), so that an
  idle topology writes no snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable

from hailstorm.negotiator.decision import Config, View
from hailstorm.protocol.clock import Clock, same_clock
from hailstorm.protocol.layout import CommittedRecord, ProcessorReport, ProcessorState
from hailstorm.protocol.states import Flowing, SpoutsPaused

__all__ = [
    "BEHIND_WAIT_SHARE",
    "CAUGHT_UP_SHARE",
    "MIN_FLOWING_SHARE",
    "behind",
    "caught_up",
    "early_round_due",
    "next_round_due",
    "nothing_new",
]


MIN_FLOWING_SHARE = 0.5
"""Flowing(None) lasts at least this share of the snapshot interval, however long the round
before it took: rounds slower than the interval do not run back to back."""


def next_round_due(state: Flowing, view: View, config: Config) -> float:
    """When Flowing(e, None) starts the next round: a snapshot interval after round ``e``
    started (its ``pause_s`` and ``snapshot_s`` before the commit that entered this state),
    so rounds keep the interval's cadence instead of drifting by each round's duration;
    but never sooner than :data:`MIN_FLOWING_SHARE` of the interval after that commit.
    Where the round's durations are unknown (another negotiator ran it, or no round
    committed in this epoch) the whole interval counts from entering the state."""
    took = _round_took(state, view)
    flowing = max(config.snapshot_interval - (took or 0.0),
                  MIN_FLOWING_SHARE * config.snapshot_interval)
    return view.entered_at + flowing


def _round_took(state: Flowing, view: View) -> float | None:
    """How long round ``e`` took from its start to the commit that entered Flowing(e, None)
    (its pause and save times), if the committed record says."""
    committed = view.committed
    if (committed is not None and committed.epoch == state.epoch
            and committed.pause_s is not None and committed.snapshot_s is not None):
        return committed.pause_s + committed.snapshot_s
    return None


CAUGHT_UP_SHARE = 0.1
"""Flowing(None) lasts at least this share of the snapshot interval before a round that the
spouts catching up with a backlog starts early."""


def early_round_due(state: Flowing, view: View, config: Config) -> float:
    """When Flowing(e, None) may start the next round because the spouts caught up (see
    :func:`caught_up`): :data:`CAUGHT_UP_SHARE` of the interval after entering it, and no
    sooner than :data:`MIN_FLOWING_SHARE` of it after round ``e`` started (where the
    committed record says when), so that bursts at most double the rate of rounds."""
    interval = config.snapshot_interval
    due = view.entered_at + CAUGHT_UP_SHARE * interval
    took = _round_took(state, view)
    if took is not None:
        due = max(due, view.entered_at - took + MIN_FLOWING_SHARE * interval)
    return due


BEHIND_WAIT_SHARE = 0.5
"""A round falling due while a spout reads a backlog waits up to this share of the snapshot
interval for the spouts to catch up, so that one round commits the backlog's end instead of
one just before it and another after (under a long backlog: a round every 1.5 intervals)."""


SpoutReports = Iterable[ProcessorReport | None]
"""The spouts' reports (None: a spout without a usable one)."""


def _spout_states(state: Flowing, spouts: SpoutReports) -> set[ProcessorState]:
    """What the spouts report in epoch ``e`` (reports of earlier epochs are stale)."""
    return {report.state for report in spouts
            if report is not None and report.epoch == state.epoch}


def caught_up(state: Flowing, spouts: SpoutReports) -> bool:
    """A spout reports it read a backlog to its partition's end in epoch ``e``, and none
    reports being behind in it: a round now commits the backlog's results. (A trickling
    stream never fills a fetch, so its spouts are never behind: it keeps the interval.)"""
    states = _spout_states(state, spouts)
    return ProcessorState.CAUGHT_UP in states and ProcessorState.BEHIND not in states


def behind(state: Flowing, spouts: SpoutReports) -> bool:
    """A spout reports it is reading a backlog in epoch ``e`` (its last fetch came back
    full and it has not reached its partition's end since)."""
    return ProcessorState.BEHIND in _spout_states(state, spouts)


def nothing_new(state: SpoutsPaused, view: View, clock: Clock, backfill: Clock | None,
                swept: Iterable[int | None] = ()) -> CommittedRecord | None:
    """The committed round, when a round at ``clock`` would change nothing and is skipped:
    the spouts paused at its clock (nothing read since it), it was itself at its previous
    round's clock, and no bolt reports a sweep of closed windows that dropped what no
    committed snapshot holds (``swept``: each bolt's ``swept_after``, the round of its last
    snapshot before the drop; a sweep takes several seconds after the last tuple). An idle
    topology thus writes a round after its last record, one after each sweep that dropped
    something since, then none. Never while a stop drains (its last round enters
    ``Stopped``) or a node catches up on its own clock: its entry in the committed record,
    or a backfill cursor (``backfill``, the paused backfill clock) that has not joined the
    live one."""
    committed = view.committed
    if (committed is None or committed.previous is None or view.stop is not None
            or committed.clocks):
        return None
    if any(after is not None and after >= committed.epoch for after in swept):
        return None
    if state.catching_up and (backfill is None or not same_clock(backfill, clock)):
        return None
    if same_clock(clock, committed.clock) and same_clock(committed.clock,
                                                           committed.previous.clock):
        return committed
    return None
