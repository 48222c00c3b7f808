"""Local recovery in the negotiator's machine: restart the failed instances alone while
the rest of the topology keeps flowing (issue 42; docs/deployment.md, "Local recovery").
Pure.

Transitions (``r`` a new epoch, ``J`` the run the survivors joined, ``K`` the committed
clock, ``F`` the failed instances)::

    Flowing(e, None), SpoutsPaused(e), Flowing(e, C)
                      -> Restarting(r, J, F, K)     an instance failed and
                                                    :func:`scope_of` says it can restart
                                                    alone (a pending round is abandoned)
    Restarting(r,J,F,K) -> Replaying(r, J, F, K)    every instance of F reports ready in r,
                                                    its bolts loaded exactly K
    Replaying(r,J,F,K)  -> SpoutsPaused(new)        every spout upstream of an instance of
                                                    F reports its replay to it joined the
                                                    live stream (``replayed``), in r: a
                                                    round commits the recovered state
    Restarting(r,J,F,K) -> Restarting(r, J, F+G, K)  instances G failed meanwhile that can
                                                    restart alone too (nothing else did)
    Replaying(r,J,F,K)  -> Restarting(new, J, F+G, K)  the same, once F are replayed to:
                                                    F restart again, and every spout
                                                    replays to all of them from K
    Restarting, Replaying -> Initialize(new)        a survivor failed, a restarted instance
                                                    failed again, a bolt loaded another
                                                    clock, or the wait timed out: the whole
                                                    topology restarts, as without it
    Restarting, Replaying -> Stopped(r, K, by)      a stop is requested: the next run
                                                    replays from the committed clock

No round starts meanwhile; one starts as soon as the recovery is done. Whether a failure
can be recovered locally is :func:`scope_of`, which every recovery records.
"""

from __future__ import annotations

from dataclasses import replace

from hailstorm.negotiator.decision import Config, Decision, View
from hailstorm.negotiator.recovery_scope import RecoveryScope, failed_instances, recovery_scope
from hailstorm.negotiator.roster import Roster, casualty_of, names, restart, secs, wait_until
from hailstorm.protocol.clock import clock_to_json
from hailstorm.protocol.layout import ProcessorId, ProcessorState, Role, parse_processor_id
from hailstorm.protocol.states import (
    Flowing,
    MasterState,
    Replaying,
    Restarting,
    SpoutsPaused,
    Stopped,
)

__all__ = ["recover", "replaying", "restarting", "scope_of"]


def _run_of_survivors(roster: Roster, failed: frozenset[str]) -> int | None:
    """The run every instance but ``failed`` joined (None: unknown or not one run)."""
    runs = {r.run for pid, r in roster.reports.items() if str(pid) not in failed}
    if len(runs) != 1:
        return None
    (run,) = runs
    return run


def scope_of(state: MasterState, view: View, config: Config, roster: Roster) -> RecoveryScope:
    """Whether a failure in ``state`` restarts only the failed instances: what
    :func:`~hailstorm.negotiator.recovery_scope.recovery_scope` says of the instances and
    the graph, and what the view allows (another instance reporting an error failed
    too, even one that only noticed the failure through its connection; an instance only
    others say failed, whose node shows no new incarnation: its Spark task may be gone,
    and nothing would restart it alone; a stage attempt of the driver ended: its
    processors are gone; nodes catching up keep clocks of their own; with no committed
    round there is nothing to load; the survivors must have joined one run). In
    ``Restarting`` or ``Replaying``, whether the instances failed since can join that
    recovery."""
    restarting = isinstance(state, Restarting | Replaying)
    failed = failed_instances(view.expected or (), view.living)
    scope = recovery_scope(state, failed, view.expected or (), view.shape,
                           enabled=view.local_recovery, restarting=restarting)
    if not scope.local:
        return scope
    why = None
    noticed = sorted(str(p) for p, r in roster.reports.items()
                     if r.error is not None and str(p) not in failed)
    told = sorted(name for name in failed if (name not in getattr(state, "instances", ()))
                  and (r := view.living.get(name)) is not None and r.error is None
                  and r.state is not ProcessorState.JOINING)
    if noticed:  # it noticed through a broken connection, and failed with it
        why = f"{names(noticed)} failed too (reporting an error of its own)"
    elif told:
        why = (f"no new incarnation of {names(told)} registered (others say it failed): its "
               "Spark task may be gone")
    elif roster.stale:
        why = f"the driver started another stage attempt ({names(roster.stale)} of the old)"
    elif getattr(state, "catching_up", frozenset()):
        why = "nodes are catching up on clocks of their own"
    elif view.committed is None:
        why = "no round committed yet: nothing to load"
    elif _run_of_survivors(roster, failed) is None:
        why = "the other instances did not all say which run they joined"
    return scope if why is None else RecoveryScope(False, scope.failed, why)


def recover(state: Flowing | SpoutsPaused, view: View, config: Config, roster: Roster,
            casualty: str) -> Decision:
    """Recover from ``casualty``: :class:`Restarting` the failed instances when
    :func:`scope_of` allows, else ``Initialize`` (everything restarts)."""
    scope = scope_of(state, view, config, roster)
    if not scope.local:
        return restart(state, view, roster, casualty, scope)
    assert view.committed is not None
    failed = frozenset(scope.failed)
    run = _run_of_survivors(roster, failed)
    assert run is not None
    epoch = max(state.epoch, view.highest_epoch) + 1
    abandoned = "" if isinstance(state, Flowing) and state.clock is None else \
        f"; round {state.epoch} is abandoned"
    return Decision(Restarting(epoch, run, scope.failed, view.committed.clock), roster.notes,
                    f"{casualty}; {', '.join(scope.failed)} restart alone from committed "
                    f"round {view.committed.epoch}{abandoned}", scope=scope)


def _stop(state: Restarting | Replaying, view: View, roster: Roster, by: str) -> Decision:
    return Decision(Stopped(state.epoch, state.clock, by), roster.notes,
                    f"stop requested by {by} during the local recovery of "
                    f"{', '.join(state.instances)}: the next run replays from the committed "
                    f"clock {clock_to_json(state.clock)}")


def _casualty_restart(state: Restarting | Replaying, view: View, roster: Roster,
                      casualty: str) -> Decision:
    """A failure during the local recovery: everything restarts."""
    return restart(state, view, roster, f"during the local recovery of "
                   f"{', '.join(state.instances)}: {casualty}")


def _wait_or_abandon(state: Restarting | Replaying, view: View, roster: Roster,
                     timeout: float, missing: str, waiting: str) -> Decision:
    """Wait (``waiting`` for what) until ``timeout`` after entering ``state``, then
    restart everything, saying what is ``missing``."""
    deadline = view.entered_at + timeout
    if view.now >= deadline:
        return restart(state, view, roster, f"local recovery of epoch {state.epoch} "
                       f"abandoned after {secs(timeout)}: {missing}")
    return wait_until(roster, view, deadline,
                      f"local recovery of epoch {state.epoch}: {waiting}")


def restarting(state: Restarting, view: View, config: Config, roster: Roster) -> Decision:
    """Wait for the restarted instances to load the committed round; anything else that
    fails makes the recovery global."""
    e, restarted = state.epoch, frozenset(state.instances)
    if view.stop is not None:
        return _stop(state, view, roster, view.stop.by)
    casualty = casualty_of(roster, exempt=restarted, since=e)
    if casualty:
        return _extended(state, view, config, roster, casualty) or \
            _casualty_restart(state, view, roster, casualty)
    pending = []
    for name in state.instances:
        report = roster.reports.get(parse_processor_id(name))
        if report is None or report.state is not ProcessorState.READY or report.epoch != e:
            pending.append(name)
        elif report.run != state.run:
            return restart(state, view, roster, f"{name} joined the run of Initialize("
                           f"{report.run}), not that of Initialize({state.run})")
        elif report.role is Role.BOLT and (report.loaded or {}) != state.clock:
            return restart(state, view, roster,
                           f"{name} loaded {clock_to_json(report.loaded or {})}, not the "
                           f"committed clock {clock_to_json(state.clock)}")
    if not pending:
        return Decision(Replaying(e, state.run, state.instances, state.clock), roster.notes,
                        f"{', '.join(state.instances)} loaded the committed clock "
                        f"{clock_to_json(state.clock)}; the spouts upstream replay to them")
    return _wait_or_abandon(state, view, roster, config.initialize_timeout,
                            f"{names(pending)} not ready",
                            f"waiting for {names(pending)} to load")


def _extended(state: Restarting | Replaying, view: View, config: Config, roster: Roster,
              casualty: str) -> Decision | None:
    """Instances that failed during ``state``'s local recovery, when they can restart
    alone too and nothing else failed: the same recovery restarts them (two instances
    killed at once are seen one after the other). While ``Restarting``, in its epoch; once
    ``Replaying``, in a new one, where the instances already replayed to restart again (a
    replay restarts from the committed clock for all of them). None: they cannot."""
    scope = scope_of(state, view, config, roster)
    more = frozenset(scope.failed) - frozenset(state.instances)
    everyone = frozenset(state.instances) | more
    if not scope.local or not more or len(everyone) * 2 > len(view.expected or ()) \
            or _run_of_survivors(roster, everyone) != state.run \
            or casualty_of(roster, exempt=everyone, since=state.epoch):
        return None
    instances = tuple(sorted(everyone))
    if isinstance(state, Restarting):
        return Decision(replace(state, instances=instances), roster.notes,
                        f"{casualty}; {', '.join(sorted(more))} restart alone too, in the "
                        f"local recovery of epoch {state.epoch}", scope=scope)
    epoch = max(state.epoch, view.highest_epoch) + 1
    return Decision(Restarting(epoch, state.run, instances, state.clock), roster.notes,
                    f"during the local recovery of {', '.join(state.instances)}: {casualty}; "
                    f"{', '.join(instances)} restart alone from the committed clock "
                    f"{clock_to_json(state.clock)}", scope=scope)


def upstream_spouts(instance: str, view: View, roster: Roster) -> tuple[ProcessorId, ...]:
    """The spout instances feeding ``instance`` (by the graph's inputs)."""
    inputs = view.inputs.get(parse_processor_id(instance).name, frozenset())
    return tuple(s for s in roster.of(Role.SPOUT) if s.name in inputs)


def replaying(state: Replaying, view: View, config: Config, roster: Roster) -> Decision:
    """Wait for the spouts' replays to reach their live positions, then start a round;
    anything that fails makes the recovery global."""
    e = state.epoch
    if view.stop is not None:
        return _stop(state, view, roster, view.stop.by)
    casualty = casualty_of(roster, replayed_to=frozenset(state.instances))
    if casualty:
        return _extended(state, view, config, roster, casualty) or \
            _casualty_restart(state, view, roster, casualty)
    pending = sorted({
        f"{spout} to {name}" for name in state.instances
        for spout in upstream_spouts(name, view, roster)
        if (report := roster.reports.get(spout)) is None or report.epoch != e
        or name not in report.replayed})
    if not pending:  # a round at once commits the recovered state
        return Decision(SpoutsPaused(max(e, view.highest_epoch) + 1), roster.notes,
                        f"{', '.join(state.instances)} caught up: local recovery done; a "
                        f"round commits it")
    return _wait_or_abandon(state, view, roster, config.rewind_timeout,
                            f"the replay of {names(pending)} did not reach the live stream",
                            f"replaying {names(pending)}")
