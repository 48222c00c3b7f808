"""Nodes: :class:`SpoutSpec`, :class:`BoltSpec` and :class:`SinkSpec`, what a topology
declares, with the facts the engine reads off a declaration once (a bolt's state shape and
its :class:`BatchPaths`). Build nodes with :class:`~hailstorm.topology.Topology`; the code
that runs them is :mod:`hailstorm.engine`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

from hailstorm.decoders import Decoder
from hailstorm.monoids import Count, EventTimed, KeyedMap, Monoid, Record
from hailstorm.routing import itself
from hailstorm.topology.tables import SinkTarget, Table

__all__ = [
    "BatchPaths",
    "BoltSpec",
    "Edge",
    "Emit",
    "EmitByKey",
    "Explode",
    "Inputs",
    "Node",
    "NodeRef",
    "Routing",
    "SinkSpec",
    "SpoutSpec",
    "Stream",
    "by_key",
]

T = TypeVar("T")
"""The tuples a bolt reads."""
T_co = TypeVar("T_co", covariant=True)
"""The tuples a node sends."""

Routing = Literal["key", "all"]
"""How a node's inputs reach its instances: ``"key"`` by the key function, ``"all"``
otherwise."""


class Stream(Generic[T_co]):
    """A node other nodes can read, typed by the tuples it sends: a spout or a bolt.

    Only types use the parameter (as Bytewax's ``Stream[X]``): :meth:`Topology.spout
    <hailstorm.topology.Topology.spout>` returns a ``SpoutSpec[T]`` and
    :meth:`~hailstorm.topology.Topology.bolt` a ``BoltSpec[T, U]``, so a type checker
    matches the ``key``, ``lift`` and ``emit`` functions of a bolt against the tuples of
    its inputs and its state, and the tuples ``emit`` returns against its readers."""

    __slots__ = ()


D = TypeVar("D")
E = TypeVar("E")
U = TypeVar("U")

Inputs = Sequence[Stream[T] | str] | Stream[T] | str
"""What a bolt or a sink reads: its input nodes (or their names), or a single one."""

Explode = Callable[[D], Iterable[T] | None]
"""A spout's ``explode``: a decoded value ``D`` -> the tuples ``T`` it becomes."""

Emit = Callable[[T, E], Iterable[U] | None]
"""A bolt's ``emit``: a tuple ``T`` and the value ``E`` of its key (or the whole state) ->
the tuples ``U`` to send."""

K = TypeVar("K")


@dataclass(frozen=True)
class EmitByKey(Generic[K, E, U]):
    """A keyed bolt's ``emit`` that reads the key, not the tuple: ``function(key, value)``
    (make it with :func:`by_key`)."""

    function: Callable[[K, E], Iterable[U] | None]


def by_key(function: Callable[[K, E], Iterable[U] | None]) -> EmitByKey[K, E, U]:
    """Declare a keyed bolt's ``emit`` as a function of the key and its value, not of the
    tuple: ``emit=by_key(lambda user, figures: [(user, figures["spent"])])``.

    What it returns for a key is what ``emit=lambda t, value: function(key(t), value)``
    returns for a tuple of that key. With ``preaggregate=True`` the spouts then send the
    bolt each key and its combined value without the tuple, a third fewer bytes to
    pickle and unpickle for small events; a tuple the bolt quarantines is then named by
    its key."""
    if not callable(function):
        raise TypeError(f"by_key takes a function of (key, value), not {function!r}")
    return EmitByKey(function)


@dataclass(frozen=True, eq=False)
class SpoutSpec(Stream[T_co]):
    """Reads one Kafka topic; one instance per partition at run time. Its tuples are
    ``T_co``: what ``explode`` returns a list of, or the decoded value."""

    name: str
    topic: str
    decoder: Decoder
    explode: Callable[[Any], Iterable[T_co] | None] | None
    dead_letter: str
    kind: ClassVar[str] = "spout"


@dataclass(frozen=True, slots=True)
class BatchPaths:
    """Which batch fast paths a bolt's declaration allows: read off the functions and the
    state it names once, when it is declared, so the engine reads flags per batch instead
    of recognising functions."""

    lift_is_one: bool
    """``lift=Count.lift``: every tuple lifts to the same ``1`` (checked once a batch)."""
    key_is_tuple: bool
    """``key=itself``: a batch's keys are its tuples, and with keys of one plain type a
    group's last tuple is its key."""
    adds_numbers: bool
    """Keyed sums and counts (``KeyedMap.additive``): contributions are numbers added in
    place, and without windows a batch is summed by C code."""
    checks_values: bool
    """The lifted values' monoid checks them (it overrides ``Monoid.check``)."""
    adds_records: bool
    """Keyed Records of sums and counts (``Record.additive``), which absorb in place: a
    batch's contributions go straight into the state."""


@dataclass(frozen=True, eq=False)
class BoltSpec(Stream[T_co], Generic[T, T_co]):
    """Keeps commutative-monoid state and emits tuples: reads tuples ``T``, sends ``T_co``.

    Per tuple ``t`` the engine (:class:`~hailstorm.engine.BoltExecution`) adds ``lift(t)``
    (for window or ttl state, placed at ``event_time(t)``) to the state, under ``key(t)``
    for keyed state (a ``KeyedMap``), then calls ``emit(t, value)`` with the merged value of
    that key (or the whole state).

    With ``parallelism > 1`` each instance holds the part of the state for the keys it
    owns (see :mod:`hailstorm.routing`); emit sees that instance's state.

    With ``preaggregate`` the spouts feeding the bolt combine the contributions of a whole
    fetched batch: the bolt receives one contribution per key (and window) per batch, and
    emit runs once per contribution with the batch's last tuple of that group.
    """

    name: str
    inputs: tuple[str, ...]
    state: Monoid[Any]
    lift: Callable[[T], Any]
    emit: Callable[[T, Any], Iterable[T_co] | None] | EmitByKey[Any, Any, T_co] | None
    key: Callable[[T], Any] | None
    parallelism: int
    event_time: Callable[[T], Any] | None
    preaggregate: bool = False
    """Spouts combine contributions per key and batch before sending them (declared safe
    by the topology's author; checked by :meth:`Topology.validate`)."""
    late: str | Table | None = None
    """Where late tuples go (window or ttl state fed by spouts): a topic, or a table
    written by the sink :attr:`late_sink`. The spouts decide lateness per partition
    and the windows expire nothing themselves (see :mod:`hailstorm.lateness`)."""
    keyed: bool = field(init=False)
    """True when the state is a ``KeyedMap`` (state = dict key -> value)."""
    value_monoid: Monoid[Any] = field(init=False, repr=False)
    """The monoid of one contribution: the ``KeyedMap``'s inner monoid, or the state."""
    window: EventTimed[Any] | None = field(init=False, repr=False)
    """The window (or ttl) monoid when contributions carry an event time."""
    emits_state: bool = field(init=False, repr=False)
    """Emit receives a key's state as it is (not, as with ttl, a part of it)."""
    emits_by_key: bool = field(init=False, repr=False)
    """``emit`` reads the key, not the tuple (:func:`by_key`): pre-aggregating spouts
    send the key in the tuple's place."""
    paths: BatchPaths = field(init=False, repr=False)
    """The batch fast paths this declaration allows, decided here once."""
    kind: ClassVar[str] = "bolt"

    def __post_init__(self) -> None:
        keyed_map = self.state if isinstance(self.state, KeyedMap) else None
        value_monoid = keyed_map.inner if keyed_map is not None else self.state
        window = value_monoid if isinstance(value_monoid, EventTimed) else None
        object.__setattr__(self, "keyed", keyed_map is not None)
        object.__setattr__(self, "value_monoid", value_monoid)
        object.__setattr__(self, "window", window)
        object.__setattr__(self, "emits_state",
                           window is None or type(window).emitted is EventTimed.emitted)
        object.__setattr__(self, "emits_by_key", isinstance(self.emit, EmitByKey))
        lifted = window.inner if window is not None else value_monoid
        object.__setattr__(self, "paths", BatchPaths(
            lift_is_one=self.lift is Count.lift,
            key_is_tuple=self.key is itself,
            adds_numbers=keyed_map is not None and keyed_map.additive,
            checks_values=type(lifted).check is not Monoid.check,
            adds_records=keyed_map is not None and isinstance(value_monoid, Record)
            and value_monoid.additive,
        ))

    @property
    def routing(self) -> Routing:
        """``"key"`` when tuples are routed by the key function, else ``"all"``."""
        return "key" if self.key is not None else "all"

    @property
    def late_topic(self) -> str | None:
        """The topic late tuples go to (``late="<topic>"``)."""
        return self.late if isinstance(self.late, str) else None

    @property
    def drops_keys(self) -> bool:
        """Keyed state of a bolt routing late data: its sweep drops keys left without
        windows or sessions, and a delta snapshot records such a key with an empty value,
        which whoever loads it forgets (:func:`hailstorm.lateness.forget_dropped`)."""
        return self.late is not None and self.keyed

    @property
    def late_sink(self) -> str | None:
        """The name of the sink writing late tuples to a table (``late=Table(...)``)."""
        return f"{self.name}_late" if isinstance(self.late, Table) else None

    @property
    def groups_by_key(self) -> bool:
        """The group of a contribution (what pre-aggregation combines and compaction emits
        once) is its state key."""
        return self.keyed and self.window is None

    @property
    def compacting(self) -> bool:
        """Emits once per key and flush, not once per tuple
        (:mod:`~hailstorm.processors.compaction`): a ``preaggregate`` bolt with ``emit``
        whose group is its state key (the key's value then changes only with the group's
        own tuples: windows expire with other windows' tuples, unkeyed state with every
        tuple, so emitting later could give other rows)."""
        return self.preaggregate and self.emit is not None and self.groups_by_key


@dataclass(frozen=True, eq=False)
class SinkSpec:
    """Writes the tuples of its inputs to a :class:`SinkTarget`."""

    name: str
    inputs: tuple[str, ...]
    target: SinkTarget
    late_of: str | None = None
    """The bolt whose late tuples this sink writes, as
    :func:`~hailstorm.lateness.late_row` dicts; it receives nothing else."""
    kind: ClassVar[str] = "sink"
    routing: ClassVar[Routing] = "all"


Node = SpoutSpec[Any] | BoltSpec[Any, Any] | SinkSpec
NodeRef = SpoutSpec[Any] | BoltSpec[Any, Any] | SinkSpec | str


@dataclass(frozen=True)
class Edge:
    """A connection ``source -> target``; ``routing`` is ``"key"`` or ``"all"``."""

    source: str
    target: str
    routing: Routing
