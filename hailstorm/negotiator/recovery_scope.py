"""Local or global recovery: which instances failed, and whether they could restart alone
while the rest of the topology keeps running (issue 42; the design is in docs/deployment.md,
"Local recovery"). Pure.

:func:`recovery_scope` is the decision a local recovery is built on, made and recorded for
every recovery (:class:`RecoveryScope`, in the recovery record and the leader's log), so
that runs show how many recoveries could have been local. The machine acts on it
(:mod:`hailstorm.negotiator.local`) only behind
:attr:`~hailstorm.negotiator.decision.Config.local_recovery`, which is off: the processors
cannot restart one instance alone yet, so a local decision is recorded as "global: local
recovery is off".

An instance can restart alone when what it needs can be replayed to it: a bolt whose inputs
are all spouts loads its state at the committed clock; its upstream spouts re-read from
that clock and send it, on their connections to it only, what is routed to it; its
downstream instances drop by origin what they already have.

Not so (the whole topology restarts, the reason naming the instance):

* a spout: it would re-read its partition from the committed clock, and its downstream
  bolts drop what they already have by origin; but they absorbed what it sent past that
  clock, so a round may start only once the replacement passed it, which nothing reports
  yet;
* a sink: its upstream bolts keep no output, so nothing can resend what it had not
  committed;
* a bolt reading another bolt: likewise, the upstream bolt's output since the committed
  round is gone;
* a failure while a recovery is under way (Initialize, SpoutsRewind): everything restarts
  anyway; or more than half of the instances at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hailstorm.protocol.layout import (
    LayoutError,
    ProcessorReport,
    ProcessorState,
    Role,
    parse_processor_id,
)
from hailstorm.protocol.states import Flowing, MasterState, SpoutsPaused

__all__ = ["RecoveryScope", "failed_instances", "graph_edges", "recovery_scope"]

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
    noticed their connection break (the one that noticed did not fail)."""
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
    return frozenset(failed)


def graph_edges(graph: Mapping[str, object] | None) -> frozenset[tuple[str, str]]:
    """``(source, target)`` node names of the DAG the driver publishes in the expected
    record (``graph["edges"]``); empty when there is none (an older driver)."""
    edges = (graph or {}).get("edges")
    if not isinstance(edges, list):
        return frozenset()
    return frozenset((str(e["source"]), str(e["target"])) for e in edges
                     if isinstance(e, dict) and "source" in e and "target" in e)


def _why_not_alone(instance: str, kinds: Mapping[str, Role],
                   edges: frozenset[tuple[str, str]]) -> str | None:
    """Why ``instance`` cannot restart alone (None: it can)."""
    try:
        pid = parse_processor_id(instance)
    except LayoutError:
        return f"{instance} is no processor id"
    if pid.role is Role.SPOUT:
        return (f"{instance} is a spout: its bolts downstream absorbed what it sent past "
                "the committed clock, and a round may start only once its replacement "
                "passed that, which nobody reports yet")
    if pid.role is Role.SINK:
        return (f"{instance} is a sink: its upstream bolts keep no output to resend what it "
                "had not committed")
    if pid.role is Role.BOLT:
        inputs = sorted(s for s, t in edges if t == pid.name)
        if not inputs:
            return f"{instance}'s inputs are unknown (the expected record has no graph)"
        bolts = [s for s in inputs if kinds.get(s) is not Role.SPOUT]
        if bolts:
            return (f"{instance} reads {', '.join(bolts)}, whose output since the committed "
                    "round is not kept")
    return None


def recovery_scope(state: MasterState, failed: Iterable[str], expected: Iterable[str],
                   edges: Iterable[tuple[str, str]], *, enabled: bool) -> RecoveryScope:
    """Whether the recovery from ``failed`` in ``state`` can be local (see the module
    docstring); local only when ``enabled`` too, and the reason says what it would be."""
    failed = tuple(sorted(set(failed)))
    expected = frozenset(expected)
    edges = frozenset(edges)
    kinds: dict[str, Role] = {}
    for name in expected:
        try:
            pid = parse_processor_id(name)
        except LayoutError:
            continue
        kinds[pid.name] = pid.role
    why: str | None
    if not failed:
        why = "no instance failed (a deadline or a protocol violation)"
    elif not isinstance(state, LOCAL_STATES):
        why = f"a recovery is under way ({type(state).__name__})"
    elif len(failed) * 2 > len(expected):
        why = f"{len(failed)} of {len(expected)} instances failed"
    else:
        why = next((w for f in failed if (w := _why_not_alone(f, kinds, edges))), None)
    if why is not None:
        return RecoveryScope(False, failed, why)
    alone = f"{', '.join(failed)} can restart alone (their inputs replay from Kafka)"
    if not enabled:
        return RecoveryScope(False, failed, f"local recovery is off; {alone}")
    return RecoveryScope(True, failed, alone)
