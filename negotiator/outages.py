"""The negotiator's deadlines while a processor waits out an outage. Pure.

A processor that waits for a service (a database, a broker) says so in its report
(``waiting``, :class:`~hailstorm.protocol.layout.ProcessorReport`): it is alive and goes on
by itself once the service answers, and the rest of the topology is held up by it (back
pressure), not broken. Restarting the topology would not help and would cost every
processor's work. So while any processor of the topology reports a wait,
:func:`step` lets no deadline expire: a move the machine makes for another reason (a
failure, a lost processor, every processor ready) is made as usual; a deadline that passes
starts over (the state is entered again, which processors ignore), so after the outage every
wait has its whole timeout again.
"""

from __future__ import annotations

from dataclasses import replace

from hailstorm.protocol.states import MasterState, NegotiatorDisconnected, label
from negotiator.machine import Config, Decision, View
from negotiator.machine import step as machine_step

__all__ = ["OUTAGE_RECHECK", "step", "waiting_in"]

OUTAGE_RECHECK = 5.0
"""Seconds between two looks at a topology that waits out an outage (reports wake the
negotiator sooner)."""


def waiting_in(view: View, epoch: int) -> str | None:
    """``"<processor>: <what it waits for>"`` of the first expected processor that reports
    a wait in this run (None: nobody waits)."""
    for name, report in sorted(view.living.items()):
        if (report is not None and report.waiting and report.processor == name
                and report.epoch <= epoch
                and (view.expected is None or name in view.expected)):
            return f"{name}: waiting for {report.waiting}"
    return None


def step(state: MasterState, view: View, config: Config) -> Decision:
    """:func:`negotiator.machine.step`, with no deadline expiring during an outage."""
    waiting = waiting_in(view, state.epoch)
    if waiting is None or isinstance(state, NegotiatorDisconnected):
        return machine_step(state, view, config)
    # As if the state had just been entered: only moves no deadline forced are made.
    unforced = machine_step(state, replace(view, now=view.entered_at), config)
    if unforced.next_state is not None:
        return unforced
    if machine_step(state, view, config).next_state is not None:
        return Decision(state, unforced.actions,
                        f"{label(state)}: its deadline starts over after the wait ({waiting})")
    return Decision(None, unforced.actions, f"{unforced.reason}; {waiting}",
                    wake_at=view.now + OUTAGE_RECHECK)
