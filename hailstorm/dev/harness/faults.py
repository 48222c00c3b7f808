"""What a fault is: the kinds (:data:`FAULT_KINDS`) and the master states one can be timed
for (:data:`MASTER_PHASES`), the record of one injected (:class:`Fault`, with the evidence
that it happened) and of the recovery from it (:class:`Recovery`), what else may explain a
recovery (:class:`Explanation`), and how a zombie sink ended, read from its log lines
(:func:`zombie_outcome`). :class:`~hailstorm.dev.harness.run.TopologyRun` injects them;
:mod:`~hailstorm.dev.harness.evidence` judges whether they bit."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hailstorm.dev.services.processes import stat_fields
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import RecoveryRecord

FaultKind = Literal["processor", "task", "negotiator", "zk-session", "zombie", "stall",
                    "pair", "broker", "deploy"]
FAULT_KINDS: tuple[FaultKind, ...] = ("processor", "task", "negotiator", "zk-session", "zombie",
                                      "stall", "pair", "broker")
"""Every fault kind the harness draws at random. ``deploy`` (changed code deployed mid-run:
:meth:`~hailstorm.dev.harness.run.TopologyRun.deploy`) is planned only with the module to
deploy (``hailstorm chaos --deploy``)."""
DEFAULT_FAULT_KINDS: tuple[FaultKind, ...] = ("processor", "task", "negotiator", "zk-session",
                                              "zombie", "stall")
"""What a :class:`ChaosSchedule` draws from unless told: the kinds every stack supports
(``broker`` needs a :class:`BrokerControl` and a cluster of :data:`MIN_KAFKA_NODES`;
``pair``, two processes killed at once, is asked for by name)."""
ZOMBIE_SPARK_CONF = (("spark.python.task.killTimeout", "1h"),)
"""Spark settings of a run with zombie faults: Spark leaves the Python worker of a killed
task alone (as it cannot reach one on a partitioned host), so a stopped sink outlives its
stage and resumes after its replacement ran; the run gets a spare task slot for it."""
MasterPhase = Literal["Flowing", "SpoutsPaused", "RoundPending", "Initialize", "SpoutsRewind"]
MASTER_PHASES: tuple[MasterPhase, ...] = ("Flowing", "SpoutsPaused", "RoundPending",
                                          "Initialize", "SpoutsRewind")
"""The master states a fault can be timed to hit (:func:`phase_name`). ``SpoutsPaused`` and
``RoundPending`` (``Flowing(e, C)``: the spouts paused, the bolts and sinks saving the round
at ``C``) come with every snapshot round; ``Initialize`` and ``SpoutsRewind`` only while the
topology recovers, so a fault timed for them follows a *trigger* (a processor kill) that
starts a recovery: two faults at once."""
RECOVERY_PHASES: frozenset[str] = frozenset({"Initialize", "SpoutsRewind"})
ROUND_PHASES: frozenset[str] = frozenset({"SpoutsPaused", "RoundPending"})
"""The phases of a snapshot round: a fault waits up to a few intervals for one."""


def phase_name(state: object) -> str:
    """The phase of a master state as faults are timed and reported: its class name, but
    ``RoundPending`` for ``Flowing`` with a round's clock (``none`` without a master)."""
    if state is None:
        return "none"
    if type(state).__name__ == "Flowing" and getattr(state, "clock", None) is not None:
        return "RoundPending"
    return type(state).__name__


@dataclass
class Fault:
    """One fault the harness injected."""

    kind: FaultKind
    target: str
    """Processor id, negotiator label, Kafka node (``kafka-<id>``), or the module a deploy
    started."""
    pid: int
    at: float
    """``time.time()`` when it was injected."""
    epoch: int
    """The master's epoch just before."""
    position: dict[str, int]
    """The furthest position the topology had reached before (``"topic:p" -> offset``)."""
    detail: str = ""
    """More about the victim (a broker: how many partitions it led, how long it is down)."""
    acked: dict[str, int] | None = None
    """A broker fault while a producer ran: the offsets acknowledged before the kill
    (``"topic:p" -> offset``); the recovery needs a commit past them."""
    uncommitted: int | None = None
    """Messages in Kafka that no committed round covered when the fault hit (log end minus
    committed clock, summed over the source partitions; None: unknown): a fault on a topology
    with nothing uncommitted proves little."""
    producing: bool | None = None
    """Whether the run's producer was still writing when the fault hit (None: no producer)."""
    phase: str = ""
    """The master's state when the fault hit, read just before it (``""``: not read)."""
    trigger: bool = False
    """Injected only to start a recovery that the next fault is timed to hit."""
    evidence: dict[str, bool] = field(default_factory=dict)
    """What the harness saw of the fault, by the names of
    :mod:`~hailstorm.dev.harness.evidence` (``"victim gone": True``...)."""
    lethal_at: float | None = None
    """A stall that ended in a SIGKILL: when the kill struck (the recovery is timed from
    it)."""
    incarnations: dict[str, str] = field(default_factory=dict)
    """Each living processor's incarnation (``host:pid``) just before the fault: what
    :func:`restarted_processors` compares the end of its recovery with."""
    others: tuple[str, ...] = ()
    """A ``pair``: the other processor killed at the same moment as ``target`` (a recovery
    naming either is the pair's)."""

    def add_detail(self, more: str) -> None:
        """Append ``more`` to :attr:`detail` (``"; "`` between)."""
        self.detail = f"{self.detail}; {more}" if self.detail else more

    @property
    def victims(self) -> tuple[str, ...]:
        """Every processor the fault hit: ``target`` and the ``others``."""
        return (self.target, *self.others)

    @property
    def effective(self) -> bool:
        """It hit a topology with uncommitted data while data kept coming."""
        return bool(self.uncommitted) and self.producing is not False


@dataclass
class Recovery:
    """How long the topology took to recover from one fault (None: did not within bounds)."""

    fault: Fault
    flowing_after: float | None
    committed_after: float | None
    restored_after: float | None = None
    """A broker fault: seconds until the killed node was back in the cluster metadata."""
    record: RecoveryRecord | None = None
    """The recovery ZooKeeper recorded for the fault (see
    :func:`~hailstorm.dev.harness.evidence.account`; None: none was, or none was due)."""
    apart: RecoveryRecord | None = None
    """A ``pair`` whose victims restarted alone one after the other: the second's recovery
    (:attr:`~hailstorm.dev.harness.evidence.Accounting.apart`)."""
    missing: list[str] = field(default_factory=list)
    """The evidence the fault lacks (:func:`~hailstorm.dev.harness.evidence.missing_evidence`):
    anything here means it may not have happened as planned."""
    restarted: list[str] | None = None
    """The processors that restarted for it: a new incarnation at the end of its recovery
    (:func:`restarted_processors`; None: not measured). A recovery restarts all of them
    today; a local recovery restarts the failed one alone."""

    @property
    def bit(self) -> bool:
        """The fault hit data in flight and left every piece of its evidence."""
        return self.fault.effective and not self.missing


def restarted_processors(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The processors whose incarnation (``host:pid``) differs between ``before`` and
    ``after`` (a processor in only one of them restarted too: it was gone at one end)."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def describe_restarts(restarted: Sequence[str] | None, processors: int) -> str:
    """``restarted all 7``, ``restarted 1 of 7: bolt:counts:1``, ``restarted none of 7``
    (``processors``: how many were living at the fault)."""
    if restarted is None:
        return "restarts not measured"
    if not restarted:
        return f"restarted none of {processors}"
    if len(restarted) >= processors:
        return f"restarted all {len(restarted)}"
    shown = ", ".join(restarted[:5]) + (f" and {len(restarted) - 5} more"
                                         if len(restarted) > 5 else "")
    return f"restarted {len(restarted)} of {processors}: {shown}"


VICTIM_ROLES = ("spout", "bolt", "sink")
"""The processors a processor kill or a session expiry may hit: every kind, sinks too (their
table writer's fencing and replay are part of what a run proves)."""

@dataclass(frozen=True, order=True)
class Explanation:
    """A restart a test caused on purpose (or a failpoint that fired): it may explain a
    recovery without a fault of the harness."""

    at: float
    """``time.time()``."""
    why: str


#: Master states of a topology recovering from a failure (SpoutsPaused is a snapshot round).
_RECOVERING = frozenset({"NegotiatorDisconnected", "Initialize", "SpoutsRewind"})


ZOMBIE_FENCED = ("resumed after its replacement committed; fenced by its table or topic, wrote "
                 "nothing")
ZOMBIE_ENDED = "resumed after its replacement committed; ended on its own, not fenced"


def process_stopped(pid: int) -> bool:
    """True when process ``pid`` is stopped (SIGSTOP: state ``T`` in ``/proc``)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] == "T"


def zombie_outcome(log: str, pid: int) -> str:
    """How the zombie sink ``pid`` ended, from its lines in ``log`` (a logged traceback's
    lines belong to the line that starts it): fenced by its table (:data:`ZOMBIE_FENCED`:
    it tried to commit), or on its own (:data:`ZOMBIE_ENDED`: its lost session, the newer
    run or its closed upstreams ended it; had it written, only the final comparison would
    tell)."""
    mine: list[str] = []
    owned = False
    for line in log.splitlines():
        if _LOG_LINE.match(line):
            owned = f" pid={pid}]" in line
        if owned:
            mine.append(line)
    if any("a zombie of an older run" in line for line in mine):
        return ZOMBIE_FENCED
    raised = [line for line in mine if _EXCEPTION_LINE.match(line)]
    why = raised[-1] if raised else next(
        (line.split("] ", 1)[-1] for line in reversed(mine)
         if " ERROR " in line or " WARNING " in line), "no log line")
    return f"{ZOMBIE_ENDED} ({why[:160]})"


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*: ")
"""The last line of a logged traceback: ``module.ExceptionName: message``."""
_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
"""The start of a log line (not of a traceback's continuation)."""


def _clock_key(partition: Partition) -> str:
    """A :attr:`Fault.position` key: ``"topic:p"``."""
    return f"{partition[0]}:{partition[1]}"
