"""Whether the faults of a run really bit, from what the harness saw (pure).

Every fault must leave evidence that it happened: what the shells observed
(:attr:`Fault.evidence`: the victim's pid gone, its ZooKeeper session expired, the zombie
fenced...) and, for a fault that fails a processor, a recovery the negotiator recorded in
ZooKeeper after the fault, whose reason names the victim. :func:`account` matches the
recorded recoveries to the faults (each recovery to at most one fault, each fault to at
most one recovery, inside :func:`recovery_window` of the fault), :func:`missing_evidence`
says what a fault lacks, and :func:`planned_restarts` how many restarts a plan of faults
must cause."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hailstorm.dev.harness.faults import RECOVERY_PHASES, Explanation, Fault, FaultKind
from hailstorm.protocol.layout import RecoveryRecord
from hailstorm.protocol.states import Replaying, Restarting

VICTIM_GONE = "victim gone"
"""The victim's pid no longer runs after the SIGKILL (a Kafka node: its process; a pair:
both)."""
RECOVERY_NAMES_VICTIM = "a recovery names the victim"
"""A recovery recorded after the fault (within :func:`recovery_window`) whose reason names
the victim (a pair: either), or, for a fault timed for a recovery state, a recovery that
started that one over."""
JOINED_RECOVERY = "its next incarnation joined the recovery under way"
"""A processor failed in ``Initialize(e)`` (killed, or its session expired: also a zombie's,
whenever it was stopped) and the next incarnation its Spark task started joined that same
recovery: the master went on to
``SpoutsRewind(e)`` with no newer recovery recorded. The negotiator waits for a joining
processor in ``Initialize`` (a restart would load the same round), so such a fault is
absorbed: no recovery of its own."""
COINCIDENT_RECOVERY = "a global recovery something else started restarted it"
"""A processor killed (not in ``Initialize``) at the moment something else (a failpoint, a
crash of another processor) made the negotiator restart everything: the victims'
replacements joined that recovery, which names another processor, and no recovery names
them (:func:`coincident_recovery`). Such a fault is absorbed too, with
:data:`JOINED_RECOVERY`."""
SESSION_EXPIRED = "session expired"
"""The victim's ``living`` node existed when it was stopped and ZooKeeper removed it (or
another session owns it now): its session really expired."""
STOPPED_BEFORE_COMMIT = "stopped before a commit"
"""The zombie stopped itself at its pause point, about to commit rows."""
FENCED = "fenced"
"""The zombie tried to commit after its replacement had, and its table or topic refused."""
VICTIM_STOPPED = "victim stopped"
"""The stalled bolt was seen stopped (state ``T``)."""
VICTIM_RESUMED = "victim resumed"
"""The stalled bolt still ran after its SIGCONT (a stall without a crash restarts nothing)."""
NEW_LEADER = "another negotiator leads"
"""After the leader's SIGKILL, another negotiator wrote the master."""
NODE_BACK = "node back"
"""The killed Kafka node answered again (see :attr:`Recovery.restored_after`)."""
DRAINED = "drained"
"""A deploy: the old driver's stop committed a last round and the master recorded
``Stopped`` before the new driver started (no processor failed)."""
DEPLOYED = "deployed"
"""A deploy: the new driver's processors started from ``Stopped`` (a start, recorded in
ZooKeeper after the fault)."""

_REQUIRED: dict[FaultKind, tuple[str, ...]] = {
    "processor": (VICTIM_GONE, RECOVERY_NAMES_VICTIM),
    "task": (VICTIM_GONE, RECOVERY_NAMES_VICTIM),
    "pair": (VICTIM_GONE, RECOVERY_NAMES_VICTIM),
    "zk-session": (SESSION_EXPIRED, RECOVERY_NAMES_VICTIM),
    "zombie": (STOPPED_BEFORE_COMMIT, FENCED, RECOVERY_NAMES_VICTIM),
    "negotiator": (VICTIM_GONE, NEW_LEADER),
    "broker": (VICTIM_GONE, NODE_BACK),
    "deploy": (VICTIM_GONE, DRAINED, DEPLOYED),
}

SESSION_EXPIRY_SLACK = 5.0
"""Seconds past a session timeout within which the negotiator has recorded the recovery:
ZooKeeper expires sessions on its ticks (2 s by default), the negotiator reacts to the
watch and writes the record, on a machine whose cores other jobs share."""
BROKER_RECOVERY_WINDOW = 60.0
"""Seconds after a broker fault within which a processor may fail because of it: a dead
node keeps leading its partitions until the controller fences it (9 s by default), it is
down for up to :attr:`~hailstorm.dev.harness.deployment.Deployment.broker_downtime`, and
clients retry before they give up."""
DECLARED_WINDOW = 120.0
"""Seconds after a restart a test declared (or a failpoint that fired) within which
recoveries count as its doing: the harness has nothing but the test's word for those, so
they get the old, lenient window and may explain several recoveries."""


def recovery_window(session_timeout: float) -> float:
    """Seconds after a fault within which the recovery it causes is recorded.

    A killed processor is noticed at once by the peers whose connection to it breaks, and
    at the latest when ZooKeeper expires its session; a stopped one (a session expiry, a
    zombie) only then. So the window is the processors' session timeout plus
    :data:`SESSION_EXPIRY_SLACK`, doubled for a slow machine: 22 s with the harness's 6 s
    sessions. Chaos faults come 10-15 s apart, each after the previous recovery: a window
    this short cannot cover a restart that the fault before or after caused (the 120 s
    window it replaces covered the whole CI run)."""
    return 2 * (session_timeout + SESSION_EXPIRY_SLACK)


def absorbed(fault: Fault) -> bool:
    """Whether ``fault`` hit a recovery under way that its victim's next incarnation joined
    (:data:`JOINED_RECOVERY`): a process that ended in ``Initialize``, or a zombie whose
    session expired in a recovery that something else had started (no recovery named it
    between its stop and its replacement's first round)."""
    return (fault.phase == "Initialize" or fault.kind == "zombie"
            or bool(fault.evidence.get(COINCIDENT_RECOVERY))) \
        and bool(fault.evidence.get(JOINED_RECOVERY))


COINCIDENCE_WINDOW = 2.0
"""Seconds after a kill within which a global recovery that names another processor may
have restarted the victim before the negotiator noticed it gone (its peers notice a broken
connection within a few hundred milliseconds on a busy machine)."""


def coincident_recovery(fault: Fault, recoveries: Iterable[RecoveryRecord],
                        restarted: Iterable[str]) -> RecoveryRecord | None:
    """The global recovery that absorbed ``fault``, a SIGKILL of processors
    (:data:`COINCIDENT_RECOVERY`): recorded from a second before the kill to
    :data:`COINCIDENCE_WINDOW` after it, restarting everything (its scope is global); no
    recovery recorded from then on names a victim, and every victim restarted since the
    fault (``restarted``: the processors whose incarnation changed). None otherwise: the
    fault then needs a recovery of its own, or lacks its evidence."""
    if fault.kind not in ("processor", "pair", "task") or not fault.evidence.get(VICTIM_GONE):
        return None
    if not set(fault.victims) <= set(restarted):
        return None
    since = sorted((r for r in recoveries if r.at >= fault.at - 1.0 and not r.is_start),
                   key=lambda r: r.epoch)
    if any(names(r.reason, victim) for r in since for victim in fault.victims):
        return None
    return next((r for r in since
                 if r.at <= fault.at + COINCIDENCE_WINDOW and r.scope.startswith("global")),
                None)


def expects_recovery(fault: Fault) -> bool:
    """Whether ``fault`` must make the topology recover: it fails a processor (a kill, an
    expired session, a zombie, a stall that ends in a SIGKILL) and was not absorbed by the
    recovery under way (:func:`absorbed`)."""
    if absorbed(fault):
        return False
    if fault.kind == "stall":
        return fault.lethal_at is not None
    return fault.kind in ("processor", "task", "pair", "zk-session", "zombie")


def required_evidence(fault: Fault) -> tuple[str, ...]:
    """What ``fault`` must leave to count as having happened."""
    if fault.kind == "stall":
        return (VICTIM_STOPPED, VICTIM_GONE, RECOVERY_NAMES_VICTIM) \
            if fault.lethal_at is not None else (VICTIM_STOPPED, VICTIM_RESUMED)
    if absorbed(fault):
        return tuple(e if e != RECOVERY_NAMES_VICTIM else JOINED_RECOVERY
                     for e in _REQUIRED[fault.kind])
    return _REQUIRED[fault.kind]


def missing_evidence(fault: Fault, recovered: bool) -> list[str]:
    """The evidence ``fault`` lacks (none: it bit), given whether a recovery was matched to
    it (:func:`account`)."""
    seen = dict(fault.evidence, **{RECOVERY_NAMES_VICTIM: recovered})
    return [need for need in required_evidence(fault) if not seen.get(need, False)]


def names(reason: str, target: str) -> bool:
    """Whether a recovery's ``reason`` names the processor ``target`` (not merely one whose
    id starts like it: ``bolt:counts:1`` is not named by ``bolt:counts:10``)."""
    return re.search(re.escape(target) + r"(?![\w:])", reason) is not None


def _state_name(previous: str) -> str:
    """The master state a recovery left, by name (``Replaying(bolt:c:1)``: ``Replaying``)."""
    return previous.split("(", 1)[0]


def _in_recovery(previous: str) -> bool:
    """Whether a recovery left a recovery state (it started a recovery in progress over)."""
    return _state_name(previous) in RECOVERY_PHASES


_LOCAL_RECOVERY = frozenset({Restarting.__name__, Replaying.__name__})
"""The master states of a local recovery under way."""


def _joins_local_recovery(recovery: RecoveryRecord) -> bool:
    """Whether ``recovery`` is a local recovery under way that more failed instances
    joined (in a new epoch once it was replaying: two instances killed at once may be seen
    that far apart)."""
    return _state_name(recovery.previous) in _LOCAL_RECOVERY \
        and recovery.scope.startswith("local")


@dataclass
class Accounting:
    """Which fault, declared restart or earlier recovery each recovery of a run is due to."""

    matched: dict[int, RecoveryRecord] = field(default_factory=dict)
    """Index of a fault in the run's list -> the recovery it caused."""
    retries: list[RecoveryRecord] = field(default_factory=list)
    """Recoveries that started the recovery in progress over (it never flowed in between)
    with no fault of their own: a timed-out ``Initialize``, a fallback to an older round, a
    local recovery that the fault's other victim joined."""
    apart: dict[int, RecoveryRecord] = field(default_factory=dict)
    """Index of a ``pair`` fault -> the local recovery of its other victim, whose new
    incarnation registered only once the recovery of the first was done
    (:func:`_other_victim_of`)."""
    declared: list[RecoveryRecord] = field(default_factory=list)
    """Recoveries a restart the test declared (or a failpoint) explains."""
    unexplained: list[RecoveryRecord] = field(default_factory=list)
    starts: list[RecoveryRecord] = field(default_factory=list)
    """The deployment's start and its own retries."""

    @property
    def restarts(self) -> int:
        """Recoveries after the start, whatever caused them."""
        return len(self.matched) + len(self.apart) + len(self.retries) \
            + len(self.declared) + len(self.unexplained)


def fault_window(fault: Fault, window: float, state_wait: float) -> tuple[float, float]:
    """When a recovery due to ``fault`` may be recorded (``time.time()`` from, to): from a
    second before it struck (the negotiator's clock and the harness's are one host's, read
    at different moments) to ``window`` after; a fault timed for a recovery state may be
    noticed only when that state's wait times out (``state_wait``, the negotiator's
    ``--timeout``), a broker fault within :data:`BROKER_RECOVERY_WINDOW`. A stall that
    ended in a SIGKILL counts from the kill."""
    start = fault.lethal_at if fault.lethal_at is not None else fault.at
    if fault.kind == "broker":
        return start - 1.0, start + BROKER_RECOVERY_WINDOW
    extra = state_wait if fault.phase in RECOVERY_PHASES else 0.0
    return start - 1.0, start + window + extra


def _fault_for(recovery: RecoveryRecord, faults: Sequence[Fault], taken: Iterable[int],
               window: float, state_wait: float) -> int | None:
    """The fault ``recovery`` is due to: the earliest unmatched one whose window holds it
    and whose victim it names; else one timed for a recovery state that it started over;
    else a broker fault (it may fail any processor that talks to Kafka)."""
    taken = set(taken)
    open_ = []
    for i, f in enumerate(faults):
        low, high = fault_window(f, window, state_wait)
        if i not in taken and (expects_recovery(f) or f.kind == "broker") \
                and low <= recovery.at <= high:
            open_.append(i)
    for accept in (
        lambda f: f.kind != "broker" and any(names(recovery.reason, v) for v in f.victims),
        lambda f: f.phase in RECOVERY_PHASES and not f.trigger and f.kind != "broker"
        and _in_recovery(recovery.previous),
        lambda f: f.kind == "broker",
    ):
        found = [i for i in open_ if accept(faults[i])]
        if found:
            return min(found, key=lambda i: faults[i].at)
    return None


def _other_victim_of(recovery: RecoveryRecord, faults: Sequence[Fault],
                     result: Accounting, window: float, state_wait: float) -> int | None:
    """The ``pair`` fault whose other victim ``recovery`` restarts alone, after the local
    recovery matched to the fault restarted the first victim alone and was done: the
    negotiator learns of a death only when the victim's next incarnation registers, and two
    killed at once may register further apart than one local recovery lasts (a fraction
    of a second; seen on a loaded 2-core machine). It must be local, within the fault's
    window, and name a victim the first recovery did not name and none that it did (a
    victim failing again is no part of the pair). One that started from a recovery state
    (joining one under way) is no such recovery."""
    if not recovery.scope.startswith("local") or _in_recovery(recovery.previous) \
            or _state_name(recovery.previous) in _LOCAL_RECOVERY:
        return None
    for i, first in sorted(result.matched.items(), key=lambda m: faults[m[0]].at):
        fault = faults[i]
        if fault.kind != "pair" or i in result.apart or first.epoch >= recovery.epoch \
                or not first.scope.startswith("local"):
            continue
        low, high = fault_window(fault, window, state_wait)
        first_named = {v for v in fault.victims if names(first.reason, v)}
        named = {v for v in fault.victims if names(recovery.reason, v)}
        if low <= recovery.at <= high and named and not named & first_named:
            return i
    return None


def account(recoveries: Iterable[RecoveryRecord], faults: Sequence[Fault],
            declared: Sequence[Explanation] = (), window: float = recovery_window(6.0),
            state_wait: float = 30.0, declared_window: float = DECLARED_WINDOW) -> Accounting:
    """Match every recovery (oldest first) to its cause.

    A deployment's start is no recovery, nor are the start's own retries (Initialize timed
    out before every processor registered, and nothing ever flowed in between). Any other
    recovery is matched to at most one fault (:func:`_fault_for`, within
    :func:`fault_window`), each fault to at most one recovery; a recovery that no fault
    claims and that restarts the other victim of a ``pair`` alone is that pair's second
    (:func:`_other_victim_of`); one that started a recovery in progress over, or joined a
    local one, is a retry of it (unless that one was unexplained too); else a restart the
    test declared (or a failpoint) within ``declared_window`` before it explains it; else
    it is unexplained."""
    result = Accounting()
    starting = False
    cause_known = False  # the recovery in progress is explained
    for r in sorted(recoveries, key=lambda r: r.epoch):
        if r.is_start or (starting and r.previous == "Initialize"):
            starting = True
            result.starts.append(r)
            continue
        starting = False
        i = _fault_for(r, faults, result.matched, window, state_wait)
        if i is not None:
            result.matched[i] = r
            cause_known = True
        elif (pair := _other_victim_of(r, faults, result, window, state_wait)) is not None:
            result.apart[pair] = r
            cause_known = True
        elif (_in_recovery(r.previous) or _joins_local_recovery(r)) and cause_known:
            result.retries.append(r)
        elif any(e.at - 1.0 <= r.at <= e.at + declared_window for e in declared):
            result.declared.append(r)
            cause_known = True
        else:
            result.unexplained.append(r)
            cause_known = False
    return result


ABSORBABLE: tuple[FaultKind, ...] = ("processor", "pair", "task", "zk-session")
"""The faults a recovery under way can absorb (:func:`absorbed`) that a schedule may time
for ``Initialize``: they end a process whose Spark task starts the next incarnation, or
(``task``) fail the stage, whose next attempt's processors take over the nodes of the
failed one's while ``Initialize`` waits for them (docs/negotiator.md, stage attempts). A
zombie is never timed for it, but may still land in one that a failpoint started."""
_RESTARTS: dict[FaultKind, tuple[int, int]] = {
    "processor": (1, 1), "task": (1, 1), "zk-session": (1, 1), "zombie": (1, 1),
    # Both killed at once: one recovery restarts them (with local recovery, maybe one
    # each: see planned_restarts).
    "pair": (1, 1),
    "stall": (0, 1),  # a coin toss decides whether it ends in a SIGKILL
    "negotiator": (0, 0),  # the standby takes over the master state as it is
    "broker": (0, 1),  # spouts usually ride out a leader move
    "deploy": (0, 0),  # a drain, then a start from Stopped: no recovery
}


def planned_restarts(plan: Iterable[tuple[FaultKind, str]],
                     local_recovery: bool = False) -> tuple[int, int]:
    """The least and most recoveries a plan of ``(kind, phase)`` faults causes (retries of a
    recovery in progress not counted: see :class:`Accounting`): one per processor kill,
    session expiry, zombie and pair (with ``local_recovery``, one or two per pair: its
    victims may restart alone one after the other, :attr:`Accounting.apart`; a global
    recovery waits for both), none per negotiator kill and deploy, at most one per stall
    and broker fault, and one more for the trigger of each fault timed for a recovery
    state. A process kill or session expiry timed for ``Initialize`` causes none when its
    victim's next incarnation joins that recovery (:func:`absorbed`), one when the recovery
    had moved on by then."""
    low = high = 0
    for kind, phase in plan:
        least, most = _RESTARTS[kind]
        most += int(local_recovery and kind == "pair")
        if phase == "Initialize" and kind in ABSORBABLE:
            least = 0
        trigger = int(phase in RECOVERY_PHASES and kind != "broker")
        low += least + trigger
        high += most + trigger
    return low, high
