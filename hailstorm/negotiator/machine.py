"""The negotiator's master-state machine as one pure function.

:func:`step` takes the current master state, an immutable :class:`View` of everything the
shell re-read from ZooKeeper, and the :class:`Config`, and returns a :class:`Decision`: the
next state (or None to stay), the actions to apply atomically with it, a human reason, and
when to wake up if nothing changes. No I/O, no clocks, no randomness: same inputs, same
decision.

Transitions (``e`` is the epoch; ``new`` is ``max(e, highest epoch recorded anywhere) + 1``)::

    NegotiatorDisconnected(e) -> Initialize(new)            on becoming leader
    Initialize(e)     -> SpoutsRewind(e, LWM)               every expected processor ready
                                                            for e; LWM = min of bolt loads
    SpoutsRewind(e,C) -> Flowing(e, None)                   every spout rewound to C for e
    Flowing(e, None)  -> SpoutsPaused(new)                  snapshot interval since round e
                                                            started (>= half a one after its
                                                            commit; up to half a one more
                                                            while a spout is behind), or the
                                                            spouts caught up with a backlog
                                                            (>= a tenth of an interval after
                                                            the commit, half a one after
                                                            round e started)
    SpoutsPaused(e)   -> Flowing(e, C)                      every spout paused for e;
                                                            C = max of their positions
                                                            (a barrier round: the spouts
                                                            marked them in their streams
                                                            and read on)
    SpoutsPaused(e)   -> Flowing(e, None)                   ... at the committed clock,
                         + ConfirmCommitted                 which the round before it had
                                                            too: nothing changed, the round
                                                            is skipped (no snapshot written)
    Flowing(e, C)     -> Flowing(e, None) + CommitClock     every bolt instance durably
                                                            saved at exactly C in round e
    any but Disconnected -> Initialize(new)                 processor lost/restarted/failed,
                                                            or a wait timed out
    Initialize(e)     -> Initialize(new) + FallBack         a bolt found a snapshot of the
                                                            committed round corrupt: its
                                                            previous round becomes committed

A stop request (the ``stop`` node, :attr:`View.stop`) drains the topology::

    Flowing(e, None)  -> SpoutsPaused(new, barrier=False)   a stop is requested: a last round
                                                            (the spouts stop at its clock)
    Flowing(e, C)     -> Stopped(e, C, by) + CommitClock    ... commits what was read
    Initialize(e), SpoutsRewind(e, C) -> Stopped(e, K, by)  a stop is requested; nothing
                                                            flowed past the committed clock K
    Stopped(e, C, by) -> Initialize(new)                    no stop request (a new run cleared
                                                            it) and a processor registered

A failure while the topology flows (Flowing, SpoutsPaused) restarts only the failed
instances where it can: Restarting, Replaying, back to Flowing (:mod:`hailstorm.negotiator.local`,
when the run turned it on: :attr:`View.local_recovery`).

In Stopped the processors leave; losing them is no failure. Leaving Stopped (or
NegotiatorDisconnected) for Initialize is a start; every other move to Initialize is a
recovery.
"""

from __future__ import annotations

from collections.abc import Iterable

from hailstorm.negotiator.cadence import (
    BEHIND_WAIT_SHARE,
    behind,
    caught_up,
    early_round_due,
    next_round_due,
    nothing_new,
)
from hailstorm.negotiator.decision import (
    SAVERS,
    CommitClock,
    Config,
    ConfirmCommitted,
    Decision,
    FallBack,
    ForgetSnapshots,
    Ignored,
    NegotiatorAction,
    View,
)
from hailstorm.negotiator.local import recover, replaying, restarting
from hailstorm.negotiator.roster import (
    Roster,
    casualty_of,
    names,
    restart,
    screen,
    secs,
    wait_until,
)
from hailstorm.negotiator.rounds import commit_of, not_committed, wrong_label
from hailstorm.protocol.catchup import plan_rewind
from hailstorm.protocol.clock import (
    NOTHING,
    Clock,
    clock_to_json,
    merge_max,
)
from hailstorm.protocol.layout import (
    CommittedRecord,
    ProcessorId,
    ProcessorReport,
    ProcessorState,
    Role,
    SnapshotReport,
    StopRequest,
)
from hailstorm.protocol.states import (
    Flowing,
    Initialize,
    MasterState,
    NegotiatorDisconnected,
    Replaying,
    Restarting,
    SpoutsPaused,
    SpoutsRewind,
    Stopped,
)

__all__ = [
    "SAVERS",
    "CommitClock",
    "Config",
    "ConfirmCommitted",
    "Decision",
    "FallBack",
    "ForgetSnapshots",
    "Ignored",
    "NegotiatorAction",
    "View",
    "step",
]

# --------------------------------------------------------------------------- step


def step(state: MasterState, view: View, config: Config) -> Decision:
    """The next move of the negotiator, given ``state`` and a fresh ``view``."""
    roster = screen(view, state.epoch)
    match state:
        case NegotiatorDisconnected():
            epoch = max(state.epoch, view.highest_epoch) + 1
            return Decision(Initialize(epoch), (), "leader elected; no master state")
        case Initialize():
            return _initialize(state, view, config, roster)
        case SpoutsRewind():
            return _rewind(state, view, config, roster)
        case SpoutsPaused():
            return _paused(state, view, config, roster)
        case Flowing(clock=None):
            return _flowing(state, view, config, roster)
        case Flowing():
            return _snapshotting(state, view, config, roster)
        case Stopped():
            return _stopped(state, view, config, roster)
        case Restarting():
            return restarting(state, view, config, roster)
        case Replaying():
            return replaying(state, view, config, roster)
    raise TypeError(f"not a master state: {state!r}")  # pragma: no cover


def _stop_now(state: Initialize | SpoutsRewind, view: View, roster: Roster,
              stop: StopRequest) -> Decision:
    """Stopped before anything flowed in epoch ``e``: at the committed clock."""
    clock = view.committed.clock if view.committed is not None else {}
    return Decision(Stopped(state.epoch, clock, stop.by), roster.notes,
                    f"stop requested by {stop.by}: nothing flowed since the committed clock "
                    f"{clock_to_json(clock)}")


def _stopped(state: Stopped, view: View, config: Config, roster: Roster) -> Decision:
    """Stay stopped while the request stands; start when a new run cleared it and one of
    its processors registered. (No deadline: the wake-up only looks again.)"""
    look_again = view.now + config.initialize_timeout
    if view.stop is not None:
        return Decision(None, roster.notes, f"stopped by {state.by}; the stop request stands",
                        wake_at=look_again)
    registered = sorted(roster.registered - roster.stale, key=str)
    if registered:
        epoch = max(state.epoch, view.highest_epoch) + 1
        return Decision(Initialize(epoch), roster.notes,
                        f"a new run started after the stop ({registered[0]} registered)")
    return Decision(None, roster.notes, f"stopped by {state.by}; waiting for a new run",
                    wake_at=look_again)


def _initialize(state: Initialize, view: View, config: Config, roster: Roster) -> Decision:
    e = state.epoch
    if view.stop is not None:
        return _stop_now(state, view, roster, view.stop)
    deadline = view.entered_at + config.initialize_timeout
    if not roster.expected:
        pending = "no expected processors (the driver writes the list)"
    else:
        failed = [(pid, r) for pid, r in roster.reports.items()
                  if r.error is not None and r.epoch >= e]
        # A corrupt snapshot first: the other processors of the stage fail with it, and
        # restarting for one of them would only meet the same file again.
        for pid, report in sorted(failed, key=lambda f: f[1].corrupt is None):
            assert report.error is not None
            if report.corrupt is not None:
                return _corrupt(state, view, roster, pid, report.corrupt, report.error)
            return restart(state, view, roster, f"{pid} failed: {report.error}")
        unregistered = [p for p in roster.expected if p not in roster.registered]
        not_ready = [
            p for p in roster.expected
            if p in roster.registered and p not in roster.stale
            and not _ready(roster.reports.get(p), e)
        ]
        if not unregistered and not not_ready and not roster.stale:
            bolts = roster.of(Role.BOLT)
            loads: dict[str, list[Clock]] = {}
            for b in bolts:
                loads.setdefault(b.name, []).append(roster.reports[b].loaded or {})
            rewind = plan_rewind(loads, view.committed.clock if view.committed else None,
                                 view.inputs, roster.partitions)
            catching = (f"; {', '.join(sorted(rewind.catching_up))} catch up from "
                        f"{clock_to_json(rewind.backfill)}" if rewind.backfill is not None
                        else "")
            return Decision(
                SpoutsRewind(e, rewind.live, rewind.backfill, rewind.catching_up),
                roster.notes,
                f"all {len(roster.expected)} processors ready; low water mark over "
                f"{len(bolts)} bolt instances is {clock_to_json(rewind.live)}{catching}",
            )
        parts = []
        if unregistered:
            parts.append(f"{names(unregistered)} not registered")
        if not_ready:
            parts.append(f"{names(not_ready)} not ready for epoch {e}")
        if roster.stale:
            parts.append(f"{names(roster.stale)} still of the failed stage attempt (the "
                         f"node goes with its session)")
        pending = "; ".join(parts)
    if view.now >= deadline:
        return restart(
            state, view, roster,
            f"initialize of epoch {e} abandoned after "
            f"{secs(config.initialize_timeout)}: {pending}",
        )
    return wait_until(roster, view, deadline, f"initialize epoch {e}: waiting, {pending}")


def _corrupt(state: Initialize, view: View, roster: Roster, pid: ProcessorId, ref: str,
             error: str) -> Decision:
    """A bolt could not load ``ref``: fall back to the previous committed round when
    ``ref`` is of the committed round and there is one, else restart naming the file."""
    committed = view.committed
    if committed is None or ref not in committed.snapshots.values():
        return restart(state, view, roster, f"{pid} failed: {error}")
    if committed.previous is None:
        return restart(state, view, roster,
                        f"{pid} cannot load {ref} of committed round {committed.epoch}, and "
                        f"there is no earlier committed round to fall back to: {error}")
    epoch = max(state.epoch, view.highest_epoch) + 1
    return Decision(
        Initialize(epoch), (*roster.notes, FallBack(committed.epoch, ref)),
        f"{pid} cannot load {ref} of committed round {committed.epoch}: falling back to the "
        f"previous committed round {committed.previous.epoch} "
        f"({clock_to_json(committed.previous.clock)}): {error}")


def _ready(report: ProcessorReport | None, epoch: int) -> bool:
    if report is None or report.state is not ProcessorState.READY or report.epoch != epoch:
        return False
    if report.error is not None:
        return False
    return report.role is not Role.BOLT or report.loaded is not None


def _rewind(state: SpoutsRewind, view: View, config: Config, roster: Roster) -> Decision:
    e, clock = state.epoch, state.clock
    if view.stop is not None:
        return _stop_now(state, view, roster, view.stop)
    casualty = casualty_of(roster)
    if casualty:
        return restart(state, view, roster, casualty)
    waiting = []
    for spout in roster.of(Role.SPOUT):
        report = roster.reports.get(spout)
        if report is None or report.state is not ProcessorState.REWOUND or report.epoch != e:
            waiting.append(spout)
            continue
        assert spout.partition is not None
        want = clock.get(spout.partition, NOTHING)
        got = (report.position or {}).get(spout.partition)
        if got != want:
            return restart(
                state, view, roster,
                f"{spout} rewound to offset {got} but epoch {e} rewinds to {want}",
            )
    if not waiting:
        return Decision(
            Flowing(e, None, catching_up=state.catching_up), roster.notes,
            f"all {len(roster.of(Role.SPOUT))} spouts rewound to {clock_to_json(clock)}",
        )
    deadline = view.entered_at + config.rewind_timeout
    if view.now >= deadline:
        return restart(
            state, view, roster,
            f"rewind of epoch {e} abandoned after {secs(config.rewind_timeout)}: "
            f"{names(waiting)} did not report",
        )
    return wait_until(roster, view, deadline, f"rewind epoch {e}: waiting for {names(waiting)}")


def _spout_reports(roster: Roster) -> list[ProcessorReport | None]:
    return [roster.reports.get(spout) for spout in roster.of(Role.SPOUT)]


def _flowing(state: Flowing, view: View, config: Config, roster: Roster) -> Decision:
    casualty = casualty_of(roster)
    if casualty:
        return recover(state, view, config, roster, casualty)
    if view.stop is not None:
        epoch = max(state.epoch, view.highest_epoch) + 1
        return Decision(SpoutsPaused(epoch, state.catching_up, barrier=False), roster.notes,
                        f"stop requested by {view.stop.by}: a last round commits what was read")
    due = next_round_due(state, view, config)
    reason = f"snapshot interval {config.snapshot_interval:.1f}s elapsed"
    spouts = _spout_reports(roster)
    if view.now < due and caught_up(state, spouts):
        due = min(due, early_round_due(state, view, config))
        reason = "the spouts caught up with a backlog"
    elif view.now >= due and behind(state, spouts):
        wait = BEHIND_WAIT_SHARE * config.snapshot_interval
        if view.now < due + wait:
            return wait_until(roster, view, due + wait,
                         f"flowing; the next snapshot round is due and waits up to "
                         f"{secs(round(due + wait - view.now, 3))} for the spouts to catch "
                         f"up with a backlog")
        reason += f", and a spout still behind after waiting {secs(wait)} more"
    if view.now >= due:
        epoch = max(state.epoch, view.highest_epoch) + 1
        return Decision(SpoutsPaused(epoch, state.catching_up), roster.notes, reason)
    return wait_until(roster, view, due, f"flowing; next snapshot round in "
                 f"{secs(round(due - view.now, 3))}")


def _paused(state: SpoutsPaused, view: View, config: Config, roster: Roster) -> Decision:
    e = state.epoch
    casualty = casualty_of(roster)
    if casualty:
        return recover(state, view, config, roster, casualty)
    waiting = []
    positions: list[Clock] = []
    backfills: list[Clock] = []
    notes = list(roster.notes)
    for spout in roster.of(Role.SPOUT):
        report = roster.reports.get(spout)
        assert spout.partition is not None
        if report is None or report.state is not ProcessorState.PAUSED or report.epoch != e:
            waiting.append(spout)
            continue
        offset = (report.position or {}).get(spout.partition)
        if offset is None or offset < NOTHING:
            notes.append(Ignored(str(spout), f"paused report without a valid position for "
                                             f"{spout.partition}"))
            waiting.append(spout)
            continue
        positions.append({spout.partition: offset})
        back = (report.backfill or {}).get(spout.partition, offset)
        backfills.append({spout.partition: min(back, offset)})
    if not waiting:
        clock = {p: NOTHING for p in roster.partitions} | merge_max(*positions)
        backfill = None
        if state.catching_up:  # the backfill cursors' positions; the live ones' if joined
            backfill = {p: NOTHING for p in roster.partitions} | merge_max(*backfills)
        swept = [report.swept_after for bolt in roster.of(Role.BOLT)
                 if (report := roster.reports.get(bolt)) is not None]
        idle = nothing_new(state, view, clock, backfill, swept)
        if idle is not None:  # and the garbage its commit left to the retention goes now
            forget = _forget(idle.epoch, idle.snapshots.values(), idle.previous)
            return Decision(Flowing(e, None, catching_up=state.catching_up),
                            (*notes, ConfirmCommitted(idle.epoch), forget),
                            f"snapshot round {e} skipped: the spouts paused at the clock of "
                            f"committed round {idle.epoch} {clock_to_json(clock)}, and no "
                            f"record was read since the round before it")
        return Decision(
            Flowing(e, clock, backfill, state.catching_up), tuple(notes),
            f"all {len(positions)} spouts paused; snapshot clock {clock_to_json(clock)}"
            + ("" if backfill is None else f", backfill clock {clock_to_json(backfill)}"),
        )
    deadline = view.entered_at + config.pause_timeout
    if view.now >= deadline:
        return restart(
            state, view, roster,
            f"pause of snapshot round {e} abandoned after {secs(config.pause_timeout)}: "
            f"{names(waiting)} did not report",
        )
    return Decision(None, tuple(notes),
                    f"snapshot round {e}: waiting for {names(waiting)} to pause",
                    wake_at=deadline)


def _forget(epoch: int, refs: Iterable[str], previous: CommittedRecord | None
            ) -> ForgetSnapshots:
    """What the committed round ``epoch`` (its ``refs``, ``previous`` the one before it)
    makes garbage: every other snapshot of a round at or below it."""
    keep = frozenset(refs) | frozenset(previous.snapshots.values() if previous else ())
    return ForgetSnapshots(epoch, keep,
                           frozenset({epoch} | ({previous.epoch} if previous else set())))


def _snapshotting(state: Flowing, view: View, config: Config, roster: Roster) -> Decision:
    e = state.epoch
    assert state.clock is not None
    clock = state.clock
    casualty = casualty_of(roster)
    if casualty:
        return recover(state, view, config, roster, casualty)
    committed = view.committed
    stop = view.stop
    if committed is not None and committed.epoch >= e:
        done = f"round {e} already committed (committed epoch {committed.epoch})"
        if stop is not None:
            return Decision(Stopped(e, committed.clock, stop.by), roster.notes,
                            f"stop requested by {stop.by}: {done}")
        return Decision(Flowing(e, None, catching_up=state.catching_up), roster.notes, done)
    waiting = []
    refs: dict[str, str] = {}
    saved: dict[ProcessorId, SnapshotReport] = {}
    for bolt in (pid for role in SAVERS for pid in roster.of(role)):
        snap = roster.snapshots.get(bolt)
        if snap is None or snap.epoch != e:
            waiting.append(bolt)
            continue
        wrong = wrong_label(bolt, snap, state)
        if wrong is not None:
            return restart(state, view, roster, wrong)
        refs[str(bolt)] = snap.ref
        saved[bolt] = snap
    if not waiting:
        clocks = commit_of(saved, state)
        if isinstance(clocks, str):
            return restart(state, view, roster, clocks)
        backwards = not_committed(clock, clocks, committed)
        if backwards is not None:
            return Decision(Flowing(e, None, catching_up=state.catching_up), roster.notes,
                            f"round {e} not committed: {backwards}")
        commit = CommitClock(e, dict(clock), refs, clocks)
        forget = _forget(e, refs.values(), committed)
        actions: tuple[NegotiatorAction, ...] = (*roster.notes, commit, forget)
        done = (f"round {e} committed at {clock_to_json(clock)}: all {len(refs)} bolt and "
                f"sink instances saved")
        if clocks:
            done += "; catching up: " + ", ".join(
                f"{node} at {clock_to_json(c)}" for node, c in clocks.items())
        elif state.catching_up:
            done += f"; {', '.join(sorted(state.catching_up))} caught up"
        if stop is not None:
            return Decision(Stopped(e, clock, stop.by), actions,
                            f"stop requested by {stop.by}: {done}")
        return Decision(Flowing(e, None, catching_up=state.catching_up), actions, done)
    deadline = view.entered_at + config.snapshot_timeout
    if view.now >= deadline:
        return restart(
            state, view, roster,
            f"snapshot round {e} abandoned after {secs(config.snapshot_timeout)}: "
            f"{names(waiting)} did not report",
        )
    return wait_until(roster, view, deadline,
                 f"snapshot round {e}: waiting for {names(waiting)} to save")
