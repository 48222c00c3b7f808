"""The master states of a topology (the paper's names, each tagged with an epoch).

A *round* is numbered by its **epoch**. A new epoch starts whenever the master enters
:class:`Initialize` (a new run after a failure or a negotiator start),
:class:`SpoutsPaused` (a new snapshot round) or :class:`Restarting` (a local recovery);
every other transition keeps the epoch.
Processors tag every report with the epoch it answers, so a stale report is never taken for
a current one. Epochs only increase, also across negotiator failover (the master record
survives in ZooKeeper).

The legal transition relation is data (:data:`LEGAL_TRANSITIONS`, :func:`is_legal`), so the
machine and its property tests check the same thing.

Pure data: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from hailstorm.protocol.clock import Clock, Partition, clock_to_json


class Phase(enum.Enum):
    """The kind of a master state, for the transition relation and for logs."""

    DISCONNECTED = "NegotiatorDisconnected"
    INITIALIZE = "Initialize"
    SPOUTS_REWIND = "SpoutsRewind"
    FLOWING = "Flowing(None)"
    SPOUTS_PAUSED = "SpoutsPaused"
    FLOWING_SNAPSHOT = "Flowing(C)"
    STOPPED = "Stopped"
    RESTARTING = "Restarting"
    REPLAYING = "Replaying"


def _frozen_clock(clock: Mapping[Partition, int]) -> Clock:
    return {p: int(o) for p, o in sorted(clock.items())}


@dataclass(frozen=True)
class NegotiatorDisconnected:
    """No master node: the topology has never been (or is no longer) driven by a negotiator.

    ``epoch`` is the highest epoch known when the state was observed (0 for a fresh topology).
    """

    epoch: int = 0

    @property
    def phase(self) -> Phase:
        return Phase.DISCONNECTED


@dataclass(frozen=True)
class Initialize:
    """Processors (re)start: every processor registers, bolts load their snapshots."""

    epoch: int

    @property
    def phase(self) -> Phase:
        return Phase.INITIALIZE


def _frozen_backfill(state: SpoutsRewind | Flowing) -> None:
    """Normalize a state's ``backfill`` clock and ``catching_up`` names (see
    :class:`SpoutsRewind`)."""
    backfill = state.backfill
    if backfill is not None:
        object.__setattr__(state, "backfill", _frozen_clock(backfill))
    object.__setattr__(state, "catching_up", frozenset(state.catching_up))


@dataclass(frozen=True)
class SpoutsRewind:
    """Spouts seek to ``clock`` (read ``clock[p] + 1`` next) and wait, not emitting.

    ``catching_up`` names the bolts and sinks catching up on their own clock
    (docs/upgrading.md): every spout partition then has a second cursor, rewound to
    ``backfill`` and read only for them, until it reaches the live one. Empty (and
    ``backfill`` None) when every bolt is at the committed round."""

    epoch: int
    clock: Clock = field(default_factory=dict)
    backfill: Clock | None = None
    catching_up: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "clock", _frozen_clock(self.clock))
        _frozen_backfill(self)

    @property
    def phase(self) -> Phase:
        return Phase.SPOUTS_REWIND


@dataclass(frozen=True)
class SpoutsPaused:
    """Spouts report their positions: the next snapshot clock (and, for the nodes
    ``catching_up``, their backfill cursors' positions).

    With ``barrier`` each spout marks its position in the streams it sends (a CLOCK_PART)
    and reads on; downstream instances split their state at the marks. Without (a stop's
    last round), and while nodes catch up, spouts stop emitting until ``Flowing``."""

    epoch: int
    catching_up: frozenset[str] = frozenset()
    barrier: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "catching_up", frozenset(self.catching_up))

    @property
    def phase(self) -> Phase:
        return Phase.SPOUTS_PAUSED


@dataclass(frozen=True)
class Flowing:
    """Data flows. With a ``clock``, bolts snapshot state A at that clock (the go signal for
    spouts to resume after :class:`SpoutsPaused`); without, no snapshot is requested.

    The nodes ``catching_up`` save the round at ``backfill`` (their cursors' clock, at or
    below ``clock``) instead: :meth:`clock_for`."""

    epoch: int
    clock: Clock | None = None
    backfill: Clock | None = None
    catching_up: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.clock is not None:
            object.__setattr__(self, "clock", _frozen_clock(self.clock))
        _frozen_backfill(self)

    def clock_for(self, node: str) -> Clock | None:
        """The round's clock as bolt or sink ``node`` sees it: ``backfill`` for a node
        catching up, else ``clock``."""
        if node in self.catching_up and self.clock is not None:
            return self.backfill if self.backfill is not None else self.clock
        return self.clock

    @property
    def phase(self) -> Phase:
        return Phase.FLOWING if self.clock is None else Phase.FLOWING_SNAPSHOT


@dataclass(frozen=True)
class Stopped:
    """Stopped on request: the last round committed ``clock`` (what was read, or the
    committed clock when the stop came before anything flowed) and every processor left.
    ``by`` names who asked (``hailstorm stop`` or a signal to ``hailstorm run``). The next
    run starts from it as a start, not a recovery."""

    epoch: int
    clock: Clock = field(default_factory=dict)
    by: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "clock", _frozen_clock(self.clock))

    @property
    def phase(self) -> Phase:
        return Phase.STOPPED


@dataclass(frozen=True)
class _LocalRecovery:
    """What both states of a local recovery say: its ``epoch``, the ``run`` (the epoch of
    the ``Initialize``) the other instances joined, the failed ``instances`` that restart
    alone and join it, and the committed ``clock`` they load."""

    epoch: int
    run: int
    instances: tuple[str, ...]
    clock: Clock = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", tuple(sorted(set(self.instances))))
        object.__setattr__(self, "clock", _frozen_clock(self.clock))


class Restarting(_LocalRecovery):
    """A local recovery (docs/deployment.md, "Local recovery"): only ``instances`` restart,
    each loading the committed round at ``clock``, and join the run the others joined in
    ``Initialize(run)``; the others keep flowing, no round starts, and a round pending when
    the failure came is abandoned (the spouts resume without its clock)."""

    @property
    def phase(self) -> Phase:
        return Phase.RESTARTING


class Replaying(_LocalRecovery):
    """The restarted ``instances`` loaded ``clock``: the spouts upstream of each replay to
    it, on its connections only, what they read after ``clock`` up to their live position,
    and report when the replay joined the live stream. The others keep flowing, no round
    starts."""

    @property
    def phase(self) -> Phase:
        return Phase.REPLAYING


MasterState = (NegotiatorDisconnected | Initialize | SpoutsRewind | SpoutsPaused | Flowing
               | Stopped | Restarting | Replaying)
"""Any master state."""


LEGAL_TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.DISCONNECTED: frozenset({Phase.INITIALIZE}),
    Phase.INITIALIZE: frozenset({Phase.INITIALIZE, Phase.SPOUTS_REWIND, Phase.STOPPED}),
    Phase.SPOUTS_REWIND: frozenset({Phase.INITIALIZE, Phase.FLOWING, Phase.STOPPED}),
    Phase.FLOWING: frozenset({Phase.INITIALIZE, Phase.SPOUTS_PAUSED, Phase.RESTARTING}),
    Phase.SPOUTS_PAUSED: frozenset({Phase.INITIALIZE, Phase.FLOWING_SNAPSHOT, Phase.FLOWING,
                                    Phase.RESTARTING}),
    Phase.FLOWING_SNAPSHOT: frozenset({Phase.INITIALIZE, Phase.FLOWING, Phase.STOPPED,
                                       Phase.RESTARTING}),
    Phase.STOPPED: frozenset({Phase.INITIALIZE}),
    Phase.RESTARTING: frozenset({Phase.INITIALIZE, Phase.REPLAYING, Phase.STOPPED}),
    Phase.REPLAYING: frozenset({Phase.INITIALIZE, Phase.SPOUTS_PAUSED, Phase.STOPPED,
                                Phase.RESTARTING}),
}
"""Phase -> the phases the master may move to next. A stop drains: Flowing(None) starts a
last round at once, whose commit enters Stopped; before anything flows (Initialize,
SpoutsRewind) nothing was read past the committed clock, so Stopped follows at once. A
round whose spouts paused at the committed clock with nothing new goes from SpoutsPaused
straight back to Flowing(None): skipped, no snapshot written. A local recovery
(Restarting, then Replaying) starts from any state the topology flows in and ends in a
round (SpoutsPaused) that commits what it recovered, or in Initialize when it cannot
finish. More instances failing meanwhile may join it: ``Restarting`` again, with them (in
its epoch, or a new one after ``Replaying``: what was replayed is loaded over again)."""

START_PHASES: frozenset[Phase] = frozenset({Phase.DISCONNECTED, Phase.STOPPED})
"""Leaving one of these for Initialize is a start, not a recovery."""

NEW_EPOCH_PHASES: frozenset[Phase] = frozenset({Phase.INITIALIZE, Phase.SPOUTS_PAUSED,
                                                Phase.RESTARTING})
"""Entering one of these phases starts a new (strictly larger) epoch; others keep it."""


def is_legal(old: MasterState, new: MasterState) -> bool:
    """True when ``old -> new`` is in the transition relation, with the epoch rule. A local
    recovery that more instances join keeps its run, its clock and its instances
    (``Restarting`` with more of them): in its epoch while restarting, in a new one once
    replaying."""
    if isinstance(old, Restarting | Replaying) and isinstance(new, Restarting):
        joined = ((new.run, new.clock) == (old.run, old.clock)
                  and set(old.instances) < set(new.instances))
        return joined and (new.epoch == old.epoch if isinstance(old, Restarting)
                           else new.epoch > old.epoch)
    if new.phase not in LEGAL_TRANSITIONS[old.phase]:
        return False
    if new.phase in NEW_EPOCH_PHASES:
        return new.epoch > old.epoch
    return new.epoch == old.epoch


def label(state: MasterState) -> str:
    """Short form for logs: ``Initialize``, ``Flowing(None)``, ``Flowing({'t:0': 41})``."""
    match state:
        case Flowing(clock=None):
            return "Flowing(None)"
        case Stopped(clock=clock):
            return f"Stopped({clock_to_json(clock)})"
        case Flowing(clock=clock) | SpoutsRewind(clock=clock) if clock is not None:
            return f"{type(state).__name__}({clock_to_json(clock)})"
        case Restarting(instances=instances) | Replaying(instances=instances):
            return f"{type(state).__name__}({', '.join(instances)})"
        case _:
            return type(state).__name__
