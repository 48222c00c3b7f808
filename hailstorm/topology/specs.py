"""Nodes: :class:`SpoutSpec`, :class:`BoltSpec` and :class:`SinkSpec`, with the pure
per-tuple functions the distributed runtime and the sequential reference model
(:mod:`hailstorm.model`) share: :meth:`SpoutSpec.tuples_of`, :meth:`BoltSpec.contribution`,
:meth:`BoltSpec.absorb`, :meth:`BoltSpec.value_for_emit`, :meth:`BoltSpec.outputs` and the
batch helpers built on them. Build nodes with :class:`~hailstorm.topology.Topology`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, ClassVar, Generic, Literal, TypeVar

from hailstorm.decoders import DecodeError, Decoder
from hailstorm.monoids import Count, EventTimed, KeyedMap, Monoid
from hailstorm.routing import KeyRouter, itself, partition_by_instance
from hailstorm.topology.errors import RecordFailed, mapped
from hailstorm.topology.tables import SinkTarget, Table

__all__ = [
    "BoltSpec",
    "Combined",
    "Edge",
    "Emit",
    "Explode",
    "Inputs",
    "Node",
    "NodeRef",
    "Routing",
    "SinkSpec",
    "SpoutSpec",
    "Stream",
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

    def tuples_of(self, raw: bytes | None) -> list[Any]:
        """Decode a message value and explode it into tuples.

        Raises :class:`~hailstorm.decoders.DecodeError` when the decoder or the explode
        function fails, a generator explode included (the message belongs in the
        dead-letter topic). An explode function returning something that is not a
        collection of tuples is a bug in the topology and raises ``TypeError``.
        """
        value = self.decoder.decode(raw)
        if self.explode is None:
            return [value]
        try:
            exploded = _drained(self.explode(value))
        except Exception as exc:
            raise DecodeError(
                f"spout {self.name!r}: explode failed: {type(exc).__name__}: {exc}",
                exc,
                stage="explode",
            ) from exc
        return _as_output_list(exploded, f"spout {self.name!r}: explode")

    def tuples_of_many(self, raws: Sequence[bytes | None]) -> list[list[Any] | DecodeError]:
        """:meth:`tuples_of` for a batch: each failed message yields its DecodeError.

        The batch is decoded and exploded a batch at a time (no per-message Python of
        hailstorm's own); when anything fails, or an explode returns something other
        than a list, it is done again message by message, which tells the failures apart
        (so the decoder and explode must be deterministic, as replays need anyway)."""
        fast = self._tuples_of_batch(raws)
        if fast is not None:
            return list(fast)
        results: list[list[Any] | DecodeError] = []
        for raw in raws:
            try:
                results.append(self.tuples_of(raw))
            except DecodeError as exc:
                results.append(exc)
        return results

    def _tuples_of_batch(self, raws: Sequence[bytes | None]) -> list[list[Any]] | None:
        """Every message's tuples when nothing fails and every explode returns a list
        (else None: the caller takes them one by one)."""
        if None in raws:  # a tombstone: its DecodeError is for tuples_of to make
            return None
        try:
            values = self.decoder.decode_all(raws)  # type: ignore[arg-type]
            if self.explode is None:
                return [[value] for value in values]
            exploded = mapped(self.explode, values)
        except Exception:
            return None
        if not set(map(type, exploded)) <= {list}:
            return None
        return exploded  # type: ignore[return-value]  # every one a list


def _drained(produced: Any) -> Any:
    """A generator's (or other iterator's) items as a list, so that an exception it raises
    while producing them is the user function's failure; anything else unchanged."""
    return list(produced) if isinstance(produced, Iterator) else produced


def _as_output_list(produced: Any, what: str) -> list[Any]:
    kind = type(produced)
    if kind is list:
        return produced
    if produced is None:
        return []
    if kind is tuple or isinstance(produced, str | bytes | bytearray | Mapping):
        raise TypeError(
            f"{what} returned {produced!r}; it must return a list of tuples, e.g. "
            f"[{produced!r}] for a single tuple (or None/[] for none)"
        )
    try:
        return list(produced)
    except TypeError:
        raise TypeError(
            f"{what} returned {produced!r}; it must return a list of tuples (or None/[] for none)"
        ) from None


@dataclass(frozen=True, eq=False)
class BoltSpec(Stream[T_co], Generic[T, T_co]):
    """Keeps commutative-monoid state and emits tuples: reads tuples ``T``, sends ``T_co``.

    Per tuple ``t`` the runtime:

    1. computes the state contribution (:meth:`contribution`): for keyed state (a
       ``KeyedMap``) the pair ``(key(t), v)``, otherwise ``(None, v)``, where
       ``v = lift(t)``, or ``window.lift(event_time(t), lift(t))`` for window (or ttl)
       state;
    2. absorbs it into the state it belongs to (:meth:`absorb`);
    3. reads the value to emit from the state(s) (:meth:`value_for_emit`: the merged
       value for that key, or the whole state) and calls ``emit(t, value)``
       (:meth:`outputs`).

    With ``parallelism > 1`` each instance holds the part of the state for the keys it
    owns (see :mod:`hailstorm.routing`); emit sees that instance's state.

    With ``preaggregate`` the spouts feeding the bolt do steps 1 and the combining part of 2
    for a whole fetched batch (:meth:`combine_contributions`): the bolt receives one
    contribution per key (and window) per batch, and emit runs once per contribution with
    the batch's last tuple of that group.
    """

    name: str
    inputs: tuple[str, ...]
    state: Monoid[Any]
    lift: Callable[[T], Any]
    emit: Callable[[T, Any], Iterable[T_co] | None] | None
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
    additive: bool = field(init=False, repr=False)
    """Keyed sums and counts: contributions are numbers added in place."""
    instance_of_key: KeyRouter = field(init=False, repr=False)
    """The instance that owns a routing key (memoized :func:`~hailstorm.routing.route`)."""
    _check_value: Callable[[Any], None] | None = field(init=False, repr=False)
    _check_key: Callable[[Any], None] | None = field(init=False, repr=False)
    _key_classes: tuple[type, ...] | None = field(init=False, repr=False)
    kind: ClassVar[str] = "bolt"

    def __post_init__(self) -> None:
        keyed_map = self.state if isinstance(self.state, KeyedMap) else None
        value_monoid = keyed_map.inner if keyed_map is not None else self.state
        window = value_monoid if isinstance(value_monoid, EventTimed) else None
        object.__setattr__(self, "keyed", keyed_map is not None)
        object.__setattr__(self, "additive", keyed_map is not None and keyed_map.additive)
        object.__setattr__(self, "value_monoid", value_monoid)
        object.__setattr__(self, "window", window)
        object.__setattr__(self, "emits_state",
                           window is None or type(window).emitted is EventTimed.emitted)
        object.__setattr__(self, "instance_of_key", KeyRouter(max(1, self.parallelism), 1 << 18))
        lifted = window.inner if window is not None else value_monoid
        checks = type(lifted).check is not Monoid.check
        object.__setattr__(self, "_check_value", lifted.check if checks else None)
        object.__setattr__(self, "_check_key",
                           keyed_map.check_key if keyed_map is not None else None)
        object.__setattr__(self, "_key_classes",
                           keyed_map.key_classes if keyed_map is not None else None)

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

    # -- the shared per-tuple functions -------------------------------------------------

    def instance_for(self, t: Any) -> int:
        """The instance (``0 <= i < parallelism``) that receives tuple ``t``: instance 0
        when ``key`` fails on it (that instance then quarantines it, see
        :meth:`contribution`)."""
        if self.parallelism == 1 or self.key is None:
            return 0
        try:
            return self.instance_of_key(self.key(t))
        except Exception:
            return 0

    def split_by_instance(self, tuples: Sequence[Any]) -> list[list[Any]]:
        """Tuples grouped per receiving instance (order kept within each group)."""
        return partition_by_instance(tuples, self.key, self.parallelism)

    def contribution(self, t: Any) -> tuple[Any, Any]:
        """``(state key or None, value)``: what tuple ``t`` adds to the state.

        Raises :class:`RecordFailed` when a user function fails on ``t`` (``key``, ``lift``,
        ``event_time``) or the state's monoid refuses the lifted value or the key
        (``monoid``, see :meth:`~hailstorm.monoids.Monoid.check`); nothing is absorbed then.
        """
        key = None
        value = _NO_VALUE
        if self.key is not None and (self.keyed or self.parallelism > 1):
            try:
                key = self.key(t)
                if type(key) not in _PLAIN_KEYS:
                    self._check_routable(key)
            except Exception as exc:
                raise RecordFailed(self.name, "key", exc) from exc
            if self._key_classes is not None and not isinstance(key, self._key_classes):
                self._refused_by_monoid(self._check_key, key)  # type: ignore[arg-type]
        try:
            value = self.lift(t)
            if self._check_value is not None:
                self._check_value(value)
        except Exception as exc:
            raise RecordFailed(self.name, "lift" if value is _NO_VALUE else "monoid",
                               exc) from exc
        if self.window is not None:
            try:
                event_time = self.event_time(t)  # type: ignore[misc]
                self.window.check_time(event_time)
                value = (self.window.lift(event_time, value) if self.late is None
                         else self.window.lift_unexpiring(event_time, value))
            except Exception as exc:
                raise RecordFailed(self.name, "event_time", exc) from exc
        return (key if self.keyed else None), value

    def _check_routable(self, key: Any) -> None:
        """Raise ``TypeError`` for a key that cannot be a dict key or be routed."""
        hash(key)
        if self.parallelism > 1:
            self.instance_of_key(key)

    def _keys_and_values(
        self, tuples: Sequence[Any]
    ) -> tuple[list[Any] | None, list[Any], set[type]]:
        """``key(t)`` (None when the bolt neither keys nor routes by key), ``lift(t)`` of
        every tuple and the keys' types, checked as :meth:`contribution` checks them but a
        batch at a time (no window state); raises what a function or check raises first."""
        if self.lift is Count.lift:  # every tuple lifts to the same 1: check it once
            values = [Count.one] * len(tuples)
            if self._check_value is not None and values:
                self._check_value(Count.one)
        else:
            values = mapped(self.lift, tuples)
            if self._check_value is not None:
                self.value_monoid.check_many(values)
        if self.key is None or not (self.keyed or self.parallelism > 1):
            return None, values, set()
        keys = list(tuples) if self.key is itself else mapped(self.key, tuples)
        key_types = set(map(type, keys))
        if not key_types <= _PLAIN_KEYS:
            for key in keys:
                self._check_routable(key)
        if self._key_classes is not None and not key_types <= set(self._key_classes):
            self.state.check_keys(keys)  # type: ignore[attr-defined]
        return keys, values, key_types

    def _unwindowed_contributions(self, tuples: Sequence[Any]) -> list[tuple[Any, Any]]:
        """:meth:`contribution` of every tuple (no window state), a batch at a time."""
        keys, values, _types = self._keys_and_values(tuples)
        if keys is not None and self.keyed:
            return list(zip(keys, values, strict=True))
        return list(zip(repeat(None), values))

    def _refused_by_monoid(self, check: Callable[[Any], None], item: Any) -> None:
        try:
            check(item)
        except Exception as exc:
            raise RecordFailed(self.name, "monoid", exc) from exc

    def contributions(
        self, tuples: Sequence[Any]
    ) -> tuple[list[tuple[Any, Any]], Sequence[int], list[tuple[int, RecordFailed]]]:
        """:meth:`contribution` of a batch: ``(contributions, the index of the tuple of
        each, (index, failure) of the other tuples)``."""
        contribution = self.contribution
        try:
            if self.window is None:  # functions mapped, values checked, a batch at a time
                return self._unwindowed_contributions(tuples), range(len(tuples)), []
            return [contribution(t) for t in tuples], range(len(tuples)), []
        except Exception:
            pass  # one by one: the failing tuples are named
        kept: list[tuple[Any, Any]] = []
        indices: list[int] = []
        failures: list[tuple[int, RecordFailed]] = []
        for index, t in enumerate(tuples):
            try:
                kept.append(contribution(t))
            except RecordFailed as failure:
                failures.append((index, failure))
                continue
            indices.append(index)
        return kept, indices, failures

    def absorb(self, state: Any, key: Any, value: Any) -> Any:
        """Merge a contribution into ``state`` (owned by the caller; may be mutated)."""
        if self.keyed:
            return self.state.absorb(state, {key: value})
        return self.state.absorb(state, value)

    def value_for_emit(self, key: Any, states: Sequence[Any]) -> Any:
        """What ``emit`` receives: the merged value of ``key`` (keyed state; with ttl its
        latest session's) or the merged whole state, across ``states`` (e.g. ``(A, B)``
        while a snapshot is pending). Do not mutate the result."""
        if self.keyed:
            present = [s[key] for s in states if key in s]
            if len(present) == 1:
                value = present[0]
            elif not present:
                value = self.value_monoid.empty()
            else:
                value = self.value_monoid.combine_all(present)
            return value if self.emits_state else self.window.emitted(value)  # type: ignore[union-attr]
        merged = states[0] if len(states) == 1 else self.state.combine_all(states)
        return merged if self.emits_state else self.window.emitted(merged)  # type: ignore[union-attr]

    def outputs(self, t: Any, value: Any) -> list[Any]:
        """``emit(t, value)`` as a list of output tuples (empty without emit); raises
        :class:`RecordFailed` when emit fails."""
        if self.emit is None:
            return []
        try:
            produced = self.emit(t, value)
            if type(produced) is list:
                return produced
            produced = _drained(produced)
        except Exception as exc:
            raise RecordFailed(self.name, "emit", exc) from exc
        return _as_output_list(produced, f"bolt {self.name!r}: emit")

    # -- single-state conveniences (the model; a runtime with no snapshot pending) -------

    def process(self, state: Any, t: Any) -> tuple[Any, list[Any], RecordFailed | None]:
        """Absorb ``t`` into ``state``; return ``(state, output tuples, failure)``.

        A failure before absorbing (:meth:`contribution`) leaves the state as it was; a
        failing emit keeps the absorbed state and outputs nothing.
        """
        try:
            key, value = self.contribution(t)
        except RecordFailed as failure:
            return state, [], failure
        state = self.absorb(state, key, value)
        if self.emit is None:
            return state, [], None
        try:
            return state, self.outputs(t, self.value_for_emit(key, (state,))), None
        except RecordFailed as failure:
            return state, [], failure

    def process_batch(self, state: Any, tuples: Sequence[Any]) -> tuple[Any, list[tuple[int, Any]]]:
        """Absorb ``tuples`` in order; return ``(state, [(tuple index, output), ...])``.

        Without ``emit`` the batch is pre-aggregated and absorbed once. Failing tuples are
        skipped (see :meth:`process`).
        """
        if self.emit is None:
            return self.absorb_all(state, tuples), []
        emitted: list[tuple[int, Any]] = []
        for index, t in enumerate(tuples):
            state, produced, _failure = self.process(state, t)
            emitted.extend((index, out) for out in produced)
        return state, emitted

    def absorb_all(self, state: Any, tuples: Sequence[Any]) -> Any:
        """Absorb many tuples without emitting (pre-aggregates per key); failing tuples
        are skipped."""
        return self.absorb_contributions(state, self.contributions(tuples)[0])

    def absorb_contributions(self, state: Any, contributions: Iterable[tuple[Any, Any]]) -> Any:
        """Absorb many ``(key, value)`` contributions without emitting (pre-aggregates per
        key; the values are not mutated)."""
        if self.additive:  # numbers: add in place
            get = state.get
            for key, value in contributions:
                state[key] = get(key, 0) + value
            return state
        if isinstance(self.state, KeyedMap):
            inner = self.value_monoid
            update: dict[Any, Any] = {}
            for key, value in contributions:
                if key in update:
                    update[key] = inner.absorb(update[key], value)
                else:  # lift may return a shared value: copy it once, then own it
                    update[key] = value if inner.immutable_state else inner.copy(value)
            return self.state.absorb_owned(state, update) if update else state
        monoid = self.state
        for _key, value in contributions:
            state = monoid.absorb(state, value)
        return state

    @property
    def groups_by_key(self) -> bool:
        """The group of a contribution (:meth:`group_of`) is its state key."""
        return self.keyed and self.window is None

    def group_of(self, t: Any, key: Any) -> Any:
        """What pre-aggregation combines and compaction emits once: the state key ``key``
        of ``t``; for unkeyed state routed by ``key`` (``parallelism > 1``) the routing
        key; otherwise one group. With window state the windows of ``t`` are part of it,
        so emit still sees a tuple of every window touched."""
        if not self.keyed:
            key = self.key(t) if self.key is not None and self.parallelism > 1 else None
        if self.window is not None:
            return key, self.window.groups(self.event_time(t))  # type: ignore[misc]
        return key

    def combine_contributions(self, tuples: Sequence[Any]) -> Combined:
        """Pre-aggregate ``tuples`` (what a spout does for a ``preaggregate`` bolt): one
        combined contribution per group, in the order each group was last seen (keyed
        sums and counts without windows, whose groups are independent: first seen).

        For keyed state the group is the state key; for unkeyed state routed by ``key``
        (``parallelism > 1``) it is the routing key and the state key is ``None``;
        otherwise everything is one group. With window state, tuples of different windows
        are also different groups, so emit still sees a tuple of every window touched.
        Absorbing the result gives exactly the state that absorbing ``tuples`` one by one
        gives; tuples failing :meth:`contribution` are left out and listed in ``failures``.
        """
        if self.groups_by_key and self.additive and tuples:
            combined = _combine_sums_of(self, tuples)
            if combined is not None:
                return combined
        inner = self.value_monoid
        copy = None if inner.immutable_state else inner.copy
        absorb = inner.absorb
        contributions, indices, failures = self.contributions(tuples)
        values: dict[Any, Any] = {}
        last: dict[Any, Any] = {}
        by_key = self.groups_by_key
        group_of = self.group_of
        for index, (key, value) in zip(indices, contributions, strict=True):
            t = tuples[index]
            group = key if by_key else group_of(t, key)
            current = values.get(group, _NO_VALUE)
            if current is _NO_VALUE:  # the first value may be shared: copy before mutating
                values[group] = value if copy is None else copy(value)
            else:
                values[group] = absorb(current, value)
            last.pop(group, None)
            last[group] = t
        window = self.window
        if not self.keyed:
            state_keys: list[Any] = [None] * len(last)
        elif window is None:
            state_keys = list(last)
        else:
            state_keys = [group[0] for group in last]
        return Combined(list(last.values()), state_keys, [values[g] for g in last], failures)


_NO_VALUE: Any = object()

_PLAIN_KEYS = frozenset({str, int, float, bytes, bool, type(None)})
"""Key types that are hashable and routable as they are (others are checked)."""

_INTERCHANGEABLE_KEYS = frozenset({str, int, bytes})
"""Types whose equal values are interchangeable (unlike ``float``'s ``0.0``, ``-0.0``)."""


def _combine_sums_of(spec: BoltSpec[Any, Any], tuples: Sequence[Any]) -> Combined | None:
    """:meth:`BoltSpec.combine_contributions` for keyed sums and counts without windows,
    a batch at a time: keys and values as :meth:`BoltSpec._keys_and_values` gives them,
    the sums taken by C code (``Counter`` when every value is 1). Groups come in
    first-seen order, each with its last tuple. None when a function fails or the monoid
    refuses a key or value (the caller takes the tuple-by-tuple path, which names them).
    With ``key=itself`` and keys of one type in ``_INTERCHANGEABLE_KEYS``, a group's last
    tuple equals its key and has its type, so the key stands for it."""
    try:
        keys, values, key_types = spec._keys_and_values(tuples)
        assert keys is not None  # keyed state
        if spec.lift is Count.lift or (
                set(map(type, values)) == {int} and values.count(1) == len(values)):
            sums: dict[Any, Any] = Counter(keys)
        else:
            sums = {}
            get = sums.get
            for key, value in zip(keys, values, strict=True):
                sums[key] = get(key, 0) + value
        if spec.key is itself and len(key_types) == 1 and key_types <= _INTERCHANGEABLE_KEYS:
            return Combined(list(sums), list(sums), list(sums.values()))
        last = dict(zip(keys, tuples, strict=True))
    except Exception:
        return None
    return Combined(list(last.values()), list(last), list(sums.values()))


@dataclass(frozen=True, slots=True)
class Combined:
    """Contributions pre-aggregated by :meth:`BoltSpec.combine_contributions`: for each
    group, the last tuple seen (what emit receives), the state key (``None`` for unkeyed
    state) and the combined value (for the bolt's value monoid)."""

    tuples: list[Any]
    keys: list[Any]
    values: list[Any]
    failures: list[tuple[int, RecordFailed]] = field(default_factory=list)
    """``(index in the input, failure)`` of the tuples left out."""

    def __len__(self) -> int:
        return len(self.tuples)


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
