"""The negotiator's view screened against the expected processors, and what every state
of its machine (:mod:`hailstorm.negotiator.machine`) asks of it: who is registered, ready,
of a stale stage attempt or failed, the reason to restart, and the decisions to restart or
wait. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hailstorm.negotiator.decision import SAVERS, Decision, Ignored, View
from hailstorm.negotiator.recovery_scope import RecoveryScope
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import (
    LayoutError,
    ProcessorId,
    ProcessorReport,
    ProcessorState,
    Role,
    SnapshotReport,
    parse_processor_id,
)
from hailstorm.protocol.states import Initialize, MasterState

__all__ = ["Roster", "casualty_of", "first_break", "names", "restart", "screen", "secs",
           "wait_until"]


@dataclass(frozen=True)
class Roster:
    """The view screened against the expected processors."""

    expected: tuple[ProcessorId, ...]
    reports: Mapping[ProcessorId, ProcessorReport]
    """Usable reports of expected processors."""
    registered: frozenset[ProcessorId]
    """Expected processors with a living node (usable report or not)."""
    stale: frozenset[ProcessorId]
    """Expected processors whose living node is of an earlier stage attempt (it failed;
    the node goes with its session)."""
    snapshots: Mapping[ProcessorId, SnapshotReport]
    notes: tuple[Ignored, ...]

    @property
    def partitions(self) -> frozenset[Partition]:
        return frozenset(p.partition for p in self.expected if p.partition is not None)

    def of(self, role: Role) -> tuple[ProcessorId, ...]:
        return tuple(p for p in self.expected if p.role is role)


def screen(view: View, epoch: int) -> Roster:
    notes: list[Ignored] = []
    expected: set[ProcessorId] = set()
    for text in sorted(view.expected or ()):
        try:
            expected.add(parse_processor_id(text))
        except LayoutError as exc:
            notes.append(Ignored(text, f"unparseable expected processor id: {exc}"))
    by_name = {str(p): p for p in expected}

    reports: dict[ProcessorId, ProcessorReport] = {}
    registered: set[ProcessorId] = set()
    stale: set[ProcessorId] = set()
    for name in sorted(view.living):
        report = view.living[name]
        pid = by_name.get(name)
        if pid is None:
            notes.append(Ignored(name, "unknown processor (not in the expected list)"))
            continue
        registered.add(pid)
        if report is None:
            notes.append(Ignored(name, "unreadable report"))
        elif report.processor != name:
            notes.append(Ignored(name, f"report claims to be {report.processor}"))
        elif report.epoch > epoch:
            notes.append(Ignored(name, f"report for future epoch {report.epoch} > {epoch}"))
        elif not report.of_attempt(view.attempt):
            stale.add(pid)
        else:
            reports[pid] = report

    snapshots: dict[ProcessorId, SnapshotReport] = {}
    for name in sorted(view.snapshots):
        snap = view.snapshots[name]
        pid = by_name.get(name)
        if pid is None or pid.role not in SAVERS:
            notes.append(Ignored(f"snapshot {name}", "not an expected bolt or sink instance"))
        elif snap is None:
            notes.append(Ignored(f"snapshot {name}", "unreadable snapshot report"))
        elif snap.processor != name:
            notes.append(Ignored(f"snapshot {name}", f"report claims to be {snap.processor}"))
        elif snap.epoch > epoch:
            notes.append(Ignored(f"snapshot {name}", f"future epoch {snap.epoch} > {epoch}"))
        else:
            snapshots[pid] = snap
    return Roster(tuple(sorted(expected)), reports, frozenset(registered), frozenset(stale),
                   snapshots, tuple(notes))


def names(pids: Iterable[ProcessorId | str], limit: int = 5) -> str:
    items = sorted(str(p) for p in pids)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def secs(seconds: float) -> str:
    return f"{seconds:g} s"


def restart(state: MasterState, view: View, roster: Roster, reason: str,
            scope: RecoveryScope | None = None) -> Decision:
    """Restart every processor (``Initialize`` of a new epoch), for ``reason``; ``scope``
    says why the recovery is not local, where a failure was weighed for one."""
    epoch = max(state.epoch, view.highest_epoch) + 1
    return Decision(Initialize(epoch), roster.notes, reason, scope=scope)


def wait_until(roster: Roster, view: View, deadline: float, what: str) -> Decision:
    return Decision(None, roster.notes, what, wake_at=deadline)


def first_break(reports: Mapping[ProcessorId, ProcessorReport], noticed: str,
                 report: ProcessorReport) -> tuple[str, ProcessorReport]:
    """Follow ``lost_peer`` from ``noticed``'s report: a peer named lost that reports a
    broken connection of its own only passed a failure on (it failed, then closed its
    connections), so the last report of the chain names the processor whose connection
    broke first. Stops at a cycle."""
    by_name = {str(p): r for p, r in reports.items()}
    seen = {noticed}
    while report.lost_peer is not None and report.lost_peer not in seen:
        peer = by_name.get(report.lost_peer)
        if peer is None or peer.error is None or peer.lost_peer is None:
            break
        seen.add(report.lost_peer)
        noticed, report = report.lost_peer, peer
    return noticed, report


def casualty_of(roster: Roster, exempt: frozenset[str] = frozenset(),
                since: int = 0, replayed_to: frozenset[str] = frozenset()) -> str | None:
    """Reason to restart when a member of the running topology is gone, restarted or failed
    (only valid after Initialize: every expected processor was ready for this run), or
    named by another as a peer it goes on without (``detached``).

    The ``exempt`` instances are restarting (a local recovery of epoch ``since``): their
    node missing, a new incarnation joining or an error reported before ``since`` is
    their restart under way, not a casualty; an error in ``since`` or later, or of a new
    incarnation (joining: it failed before it was ready), is one. Others going on without
    them, or without ``replayed_to`` (being replayed to), is no casualty either."""
    if not roster.expected:
        return "the expected processor list is gone"
    reports = {p: r for p, r in roster.reports.items()
               if str(p) not in exempt or (r.error is not None and (
                   r.epoch >= since or r.state is ProcessorState.JOINING))}
    if roster.stale:  # first: its processors end, so nodes go as a consequence
        return (f"the driver started another stage attempt: {names(roster.stale)} "
                f"{'is' if len(roster.stale) == 1 else 'are'} of the one that failed")
    lost = [p for p in roster.expected if p not in roster.registered and str(p) not in exempt]
    if lost:
        return f"{names(lost)} lost (living node gone)"
    # A processor's own failure first: its peers' broken connections follow from it.
    failed = sorted(((r.lost_peer is not None, str(p)), p, r)
                    for p, r in reports.items() if r.error is not None)
    if failed:
        _, pid, report = failed[0]
        if report.lost_peer is not None:
            noticed, report = first_break(reports, str(pid), report)
            return (f"{report.lost_peer} lost: {noticed} reports its connection broke: "
                    f"{report.error}")
        return f"{pid} failed: {report.error}"
    restarted = [p for p, r in reports.items() if r.state is ProcessorState.JOINING]
    if restarted:
        return f"{names(restarted)} restarted (reports joining)"
    members = {str(p) for p in roster.expected}
    gone = sorted((peer, str(p)) for p, r in reports.items() for peer in r.detached
                  if peer in members and peer not in exempt | replayed_to)
    if gone:
        peer, noticed = gone[0]
        return f"{peer} lost: {noticed} reports its connection broke and goes on without it"
    return None
