"""What the negotiator's machine reads and decides: :class:`Config`, :class:`View` (inputs),
:class:`Decision` and its actions (outputs). Pure data: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hailstorm.negotiator.recovery_scope import RecoveryScope
from hailstorm.protocol.alone import Shape
from hailstorm.protocol.clock import Clock
from hailstorm.protocol.layout import (
    CommittedRecord,
    ProcessorReport,
    Role,
    SnapshotReport,
    StopRequest,
)
from hailstorm.protocol.states import MasterState

# --------------------------------------------------------------------------- inputs


SAVERS = (Role.BOLT, Role.SINK)
"""Roles that must save a round at exactly its clock before it commits: bolts write their
state A to the snapshot store; sinks commit their table through the clock (their progress
must cover it, because bolts never re-emit what the committed round already holds)."""

@dataclass(frozen=True)
class Config:
    """Timing of the machine, in seconds."""

    snapshot_interval: float = 5.0
    """Time from one snapshot round's start to the next's: Flowing(None) lasts this long
    minus how long the round it follows took, and up to half of it more while the spouts
    read a backlog (:mod:`hailstorm.negotiator.cadence`)."""
    initialize_timeout: float = 60.0
    """Initialize: every processor registered and ready (bolts loaded their snapshots)."""
    rewind_timeout: float = 60.0
    """SpoutsRewind: every spout seeked to the rewind clock."""
    pause_timeout: float = 60.0
    """SpoutsPaused: every spout paused and reported its position."""
    snapshot_timeout: float = 60.0
    """Flowing(C): every bolt instance reported a durable snapshot at C."""
    def __post_init__(self) -> None:
        for name in ("snapshot_interval", "initialize_timeout", "rewind_timeout",
                     "pause_timeout", "snapshot_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")

    @classmethod
    def uniform(cls, snapshot_interval: float = 5.0, timeout: float = 60.0) -> Config:
        """Same timeout for every wait."""
        return cls(snapshot_interval, timeout, timeout, timeout, timeout)


@dataclass(frozen=True)
class View:
    """Everything the machine may look at, re-read from ZooKeeper for every step.

    ``living`` maps each ``living/`` node name to its report (None when unreadable);
    ``snapshots`` maps each bolt instance id to its latest snapshot report (None when
    unreadable); ``expected`` is None when the driver has not written the list yet;
    ``highest_epoch`` is the largest epoch recorded anywhere for this topology (master,
    committed record, any report); ``entered_at`` is when the current state was entered;
    ``stop`` is the pending stop request, if any.
    """

    now: float
    entered_at: float
    expected: frozenset[str] | None
    living: Mapping[str, ProcessorReport | None] = field(default_factory=dict)
    snapshots: Mapping[str, SnapshotReport | None] = field(default_factory=dict)
    committed: CommittedRecord | None = None
    highest_epoch: int = 0
    stop: StopRequest | None = None
    """The ``stop`` node: someone asked the topology to stop (None: nobody, or a run
    started since and cleared it)."""
    inputs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Each bolt's and sink's input nodes (from the driver's graph in ``expected``; empty
    for an older driver: then no node catches up on its own clock)."""
    attempt: str | None = None
    """The driver's current stage attempt (``expected``): reports of another attempt are
    left over from processors that failed with theirs (None: every report counts)."""
    shape: Shape = field(default_factory=Shape)
    """The graph as a local recovery looks at it (``expected``)."""
    local_recovery: bool = False
    """The run restarts a failed instance alone where it can (``expected``;
    :mod:`hailstorm.negotiator.local`)."""


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class CommitClock:
    """Write the committed record for round ``epoch`` (its predecessor becomes
    ``previous``), in the same ZooKeeper transaction as the next master state."""

    epoch: int
    clock: Clock
    snapshots: Mapping[str, str]
    clocks: Mapping[str, Clock] = field(default_factory=dict)
    """The nodes still catching up, each at its own clock (below ``clock`` somewhere)."""


@dataclass(frozen=True)
class ForgetSnapshots:
    """Snapshots written in rounds ``<= up_to_epoch`` whose ref is not in ``keep`` (the new
    committed round and the previous one, whose epochs are ``keep_epochs``) are garbage and
    may be deleted: rounds abandoned or superseded, never loaded again."""

    up_to_epoch: int
    keep: frozenset[str]
    keep_epochs: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ConfirmCommitted:
    """A snapshot round was skipped: nothing was read past committed round ``epoch``, so it
    still holds everything read. Record when (its ``confirmed_at``), in the same
    transaction as the next state, instead of writing a round nothing changed."""

    epoch: int


@dataclass(frozen=True)
class FallBack:
    """The committed round ``epoch`` cannot be loaded (``corrupt`` failed its checks):
    make its ``previous`` the committed record, in the same transaction as the next
    ``Initialize``, so the recovery loads the round before and replays from its clock."""

    epoch: int
    corrupt: str


@dataclass(frozen=True)
class Ignored:
    """Something in the view the machine ignored (unknown processor, malformed or
    future-epoch report...). The shell logs each distinct one once."""

    subject: str
    why: str


NegotiatorAction = CommitClock | ConfirmCommitted | ForgetSnapshots | FallBack | Ignored
"""What a decision asks the shell to do with its next state (a processor core's are
:data:`hailstorm.processors.Action`, a sink core's
:data:`hailstorm.processors.sink_core.SinkAction`)."""


@dataclass(frozen=True)
class Decision:
    """What to do: move to ``next_state`` (None: stay) applying ``actions`` atomically."""

    next_state: MasterState | None
    actions: tuple[NegotiatorAction, ...] = ()
    reason: str = ""
    wake_at: float | None = None
    """When to step again if nothing changes (the current wait's deadline)."""
    scope: RecoveryScope | None = None
    """A recovery from a failure: whether it restarts only the failed instances, and why
    (None: no failure was weighed, e.g. a deadline; the recovery record says it)."""

    @property
    def commits(self) -> tuple[CommitClock, ...]:
        return tuple(a for a in self.actions if isinstance(a, CommitClock))

    @property
    def confirms(self) -> ConfirmCommitted | None:
        return next((a for a in self.actions if isinstance(a, ConfirmCommitted)), None)

    @property
    def fallback(self) -> FallBack | None:
        return next((a for a in self.actions if isinstance(a, FallBack)), None)


