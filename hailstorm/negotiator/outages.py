"""The negotiator's deadlines while a processor waits out an outage. Pure.

A processor that waits for a service (a database, a broker) says so in its report
(``waiting``, :class:`~hailstorm.protocol.layout.ProcessorReport`): it is alive and goes on
by itself once the service answers, and the rest of the topology is held up by it (back
pressure), not broken. Restarting the topology would not help and would cost every
processor's work. So while any processor of the topology reports a wait, :func:`step` makes
no restart that only a deadline forced: the state is entered again (the same state, a new
``entered_at``; processors act on each state once, so they ignore it) and the deadline starts
over. Every other move is the machine's own: a failure or a lost processor restarts as
usual, a round starts when it is due.
"""

from __future__ import annotations

from dataclasses import replace

from hailstorm.negotiator.machine import Config, Decision, View
from hailstorm.negotiator.machine import step as machine_step
from hailstorm.protocol.states import Initialize, MasterState, NegotiatorDisconnected, label

__all__ = ["deadline_origin", "step", "waiting_in"]


def waiting_in(view: View, epoch: int) -> str | None:
    """``"<processor>: waiting for <what>"`` of the first expected processor that reports
    a wait in this run (None: nobody waits)."""
    for name, report in sorted(view.living.items()):
        if (report is not None and report.waiting and report.processor == name
                and report.epoch <= epoch and report.of_attempt(view.attempt)
                and (view.expected is None or name in view.expected)):
            return f"{name}: waiting for {report.waiting}"
    return None


def deadline_origin(entered_at: float, leader_since: float | None,
                    reconnected_at: float, wait_ended_at: float = 0.0) -> float:
    """When the leader counts the current state's deadline from: its entry, or later when
    this negotiator took over (an earlier leader wrote ``entered_at`` with its own clock),
    its ZooKeeper connection came back (a ZooKeeper outage: nobody could report meanwhile,
    so the wait is not the processors' fault), or the processors stopped reporting an
    outage they waited out (the deadline renewed during it may be nearly spent, and the
    processor that waited has work to catch up on). A standby (``leader_since`` None): the
    entry."""
    if leader_since is None:
        return entered_at
    return max(entered_at, leader_since, reconnected_at, wait_ended_at)


def step(state: MasterState, view: View, config: Config) -> Decision:
    """:func:`hailstorm.negotiator.machine.step`, except that a restart only a deadline
    forced is not made while a processor waits out an outage: the state is entered again
    instead."""
    decision = machine_step(state, view, config)
    if not isinstance(decision.next_state, Initialize) or isinstance(
            state, NegotiatorDisconnected):
        return decision
    waiting = waiting_in(view, state.epoch)
    if waiting is None:
        return decision
    # As if the state had just been entered: a restart then is a failure's, not a deadline's.
    unforced = machine_step(state, replace(view, now=view.entered_at), config)
    if isinstance(unforced.next_state, Initialize):
        return decision
    return Decision(state, unforced.actions,
                    f"{label(state)}: its deadline starts over, not a restart ({waiting}; "
                    f"the deadline's reason: {decision.reason})")
