"""Local or global recovery: which instances failed, and whether they could restart alone
while the rest of the topology keeps running (issue 42; the design is in docs/deployment.md,
"Local recovery"). Pure.

:func:`recovery_scope` is the decision a local recovery is built on, made and recorded for
every recovery (:class:`RecoveryScope`, in the recovery record and the leader's log), so
that runs show how many recoveries could have been local. The machine acts on it
(:mod:`hailstorm.negotiator.local`) only when the run turned it on (``hailstorm run
--local-recovery``, in the expected record); otherwise a local decision is recorded as
"global: local recovery is off".

Whether an instance can restart alone is :func:`hailstorm.protocol.alone.why_not_alone`,
the rule the processors follow too. Besides, the whole topology restarts on a failure while
a recovery is under way (Initialize, SpoutsRewind: everything restarts anyway) or of more
than half of the instances at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hailstorm.protocol.alone import Shape, kinds_of, why_not_alone
from hailstorm.protocol.layout import ProcessorReport, ProcessorState
from hailstorm.protocol.states import Flowing, MasterState, SpoutsPaused

__all__ = ["RecoveryScope", "failed_instances", "recovery_scope"]

LOCAL_STATES = (Flowing, SpoutsPaused)
"""States a local recovery may start in: flowing, or a round pending (which it abandons:
rounds pause while an instance recovers, and a new one starts once it caught up)."""


@dataclass(frozen=True)
class RecoveryScope:
    """How a recovery restarts the topology: ``local`` (only ``failed`` restart) or global
    (every instance), and why."""

    local: bool
    failed: tuple[str, ...]
    """The instances that failed (sorted)."""
    reason: str

    def __str__(self) -> str:
        return f"{'local' if self.local else 'global'}: {self.reason}"


def failed_instances(expected: Iterable[str],
                     living: Mapping[str, ProcessorReport | None]) -> frozenset[str]:
    """The expected instances that failed: without a living node, a new incarnation
    (``joining``), failed by themselves (``error``), or named as a ``lost_peer`` by whoever
    noticed their connection break (the one that noticed did not fail), or as a peer it
    goes on without (``detached``)."""
    expected = frozenset(expected)
    failed = {p for p in expected if p not in living}
    for name, report in living.items():
        if name not in expected or report is None or report.processor != name:
            continue
        failed_itself = report.error is not None and report.lost_peer is None
        if report.state is ProcessorState.JOINING or failed_itself:
            failed.add(name)
        elif report.error is not None and report.lost_peer in expected:
            failed.add(str(report.lost_peer))
        failed.update(peer for peer in report.detached if peer in expected)
    return frozenset(failed)


def recovery_scope(state: MasterState, failed: Iterable[str], expected: Iterable[str],
                   shape: Shape, *, enabled: bool, restarting: bool = False) -> RecoveryScope:
    """Whether the recovery from ``failed`` in ``state`` can be local (see the module
    docstring); local only when ``enabled`` too, and the reason says what it would be.
    ``restarting``: ``state`` is a local recovery that ``failed`` would extend (instances
    failing one after the other, as two killed at once are seen)."""
    failed = tuple(sorted(set(failed)))
    expected = frozenset(expected)
    kinds = kinds_of(expected)
    why: str | None
    if not failed:
        why = "no instance failed (a deadline or a protocol violation)"
    elif not isinstance(state, LOCAL_STATES) and not restarting:
        why = f"a recovery is under way ({type(state).__name__})"
    elif len(failed) * 2 > len(expected):
        why = f"{len(failed)} of {len(expected)} instances failed"
    else:
        why = next((w for f in failed if (w := why_not_alone(f, kinds, shape))), None)
    if why is not None:
        return RecoveryScope(False, failed, why)
    alone = (f"{', '.join(failed)} can restart alone (their inputs replay from Kafka, "
             "their sinks keep what they promised)")
    if not enabled:
        return RecoveryScope(False, failed, f"local recovery is off; {alone}")
    return RecoveryScope(True, failed, alone)
