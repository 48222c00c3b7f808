"""A bolt's execution: the per-tuple and batch code the distributed runtime
(:mod:`hailstorm.processors`) and the sequential reference model (:mod:`hailstorm.model`)
share. :func:`execution_of` compiles a :class:`~hailstorm.topology.BoltSpec` once into a
:class:`BoltExecution`: its functions and checks bound, its key routing memoized, and the
batch fast paths its declaration allows (:class:`~hailstorm.topology.BatchPaths`) chosen.
Pure.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from operator import is_
from typing import Any, cast

from hailstorm.engine.calls import as_output_list, drained, mapped
from hailstorm.engine.combining import (
    _NO_VALUE,
    _PLAIN_KEYS,
    Combined,
    Combining,
)
from hailstorm.monoids import Count, KeyedMap
from hailstorm.routing import KEY_INT_BITS, KeyRouter, partition_by_instance
from hailstorm.topology import BoltSpec, EmitByKey, RecordFailed

__all__ = ["BoltExecution", "Combined", "execution_of"]


def _plain_tuples(keys: list[Any], key_types: set[type]) -> bool:
    """Every one of ``keys`` is a ``tuple`` of :data:`_PLAIN_KEYS` values, its ints of at
    most :data:`~hailstorm.routing.KEY_INT_BITS`: hashable and routable without hashing
    each (a composite key such as ``(country, user)``)."""
    if key_types != {tuple}:
        return False
    part_types = set(map(type, chain.from_iterable(keys)))
    if not part_types <= _PLAIN_KEYS:
        return False
    return int not in part_types or all(
        part.bit_length() <= KEY_INT_BITS
        for part in chain.from_iterable(keys) if type(part) is int)


_compiled: weakref.WeakKeyDictionary[BoltSpec[Any, Any], BoltExecution] = (
    weakref.WeakKeyDictionary())
_compiling = threading.Lock()


def execution_of(spec: BoltSpec[Any, Any]) -> BoltExecution:
    """The one :class:`BoltExecution` of ``spec`` in this process (compiled on first use),
    so that its key-routing memo is shared by the router and the bolt's core."""
    execution = _compiled.get(spec)
    if execution is None:
        with _compiling:
            execution = _compiled.get(spec)
            if execution is None:
                execution = _compiled[spec] = BoltExecution(spec)
    return execution


class BoltExecution(Combining):
    """What the engine runs for one bolt, per tuple ``t``:

    1. the state contribution (:meth:`contribution`): for keyed state (a ``KeyedMap``) the
       pair ``(key(t), v)``, otherwise ``(None, v)``, where ``v = lift(t)``, or
       ``window.lift(event_time(t), lift(t))`` for window (or ttl) state;
    2. absorbing it into the state it belongs to (:meth:`absorb`);
    3. the value to emit from the state(s) (:meth:`value_for_emit`: the merged value for
       that key, or the whole state) and ``emit(t, value)`` (:meth:`outputs`).

    With ``parallelism > 1`` each instance holds the part of the state for the keys it
    owns (see :mod:`hailstorm.routing`); emit sees that instance's state. With
    ``preaggregate`` the spouts feeding the bolt do steps 1 and the combining part of 2 for
    a whole fetched batch (:meth:`combine_contributions`).
    """

    def __init__(self, spec: BoltSpec[Any, Any]) -> None:
        self.spec = spec
        self.name = spec.name
        self.state = spec.state
        self.key = spec.key
        self.lift = spec.lift
        emit = spec.emit
        self.emits_by_key = isinstance(emit, EmitByKey)
        self.emit: Callable[[Any, Any], Iterable[Any] | None] | None = (
            emit.function if isinstance(emit, EmitByKey) else emit)
        """What to call: ``emit(t, value)``, or with :attr:`emits_by_key` ``(key, value)``."""
        self.event_time = spec.event_time
        self.late = spec.late
        self.parallelism = spec.parallelism
        self.keyed = spec.keyed
        self.value_monoid = spec.value_monoid
        self.window = spec.window
        self.emits_state = spec.emits_state
        self.groups_by_key = spec.groups_by_key
        self.paths = paths = spec.paths
        self.instance_of_key = KeyRouter(max(1, spec.parallelism), 1 << 18)
        """The instance that owns a routing key (memoized :func:`~hailstorm.routing.route`)."""
        keyed_map = spec.state if isinstance(spec.state, KeyedMap) else None
        self._lifted = lifted = (spec.window.inner if spec.window is not None
                                 else spec.value_monoid)
        """The monoid of what ``lift`` returns (with window state, the window's inner)."""
        self._check_value = lifted.check if paths.checks_values else None
        self._check_key = keyed_map.check_key if keyed_map is not None else None
        self._key_classes = keyed_map.key_classes if keyed_map is not None else None
        self._absorb_key = (keyed_map.absorb_key if keyed_map is not None and self.keyed
                            else None)
        self.adds_keys = (keyed_map is not None and self.keyed and keyed_map.additive
                          and self.emits_state)
        """Keyed state of numbers combined by ``+`` (``Count``, ``Sum``) whose value is
        what emit receives: absorbing ``(key, v)`` is ``state[key] = state.get(key, 0) +
        v`` (:meth:`KeyedMap.absorb_key`), which a bolt may do in its own loop."""
        self.merges_views = (keyed_map is not None and self.keyed and self.window is None
                             and not keyed_map.additive
                             and not self.value_monoid.immutable_state)
        """Keyed state of values merged by copying (containers, sketches, records; not
        windows or ttl, whose closed parts a sweep drops between tuples): while a round is
        pending, a bolt may keep each touched key's merged value and absorb into it
        (:class:`~hailstorm.processors.bolt_core.BoltCore`), rather than merge the key's
        segments per tuple."""

    def instance_for(self, t: Any) -> int:
        """The instance (``0 <= i < parallelism``) that receives tuple ``t``: instance 0
        when ``key`` fails on it (that instance then quarantines it, see
        :meth:`contribution`)."""
        if self.parallelism == 1 or self.key is None:
            return 0
        try:
            return self.instance_of_key(self.key(t))
        except Exception:  # the user's key may raise anything: instance 0 names the failure
            return 0

    def split_by_instance(self, tuples: Sequence[Any]) -> list[list[Any]]:
        """Tuples grouped per receiving instance (order kept within each group)."""
        return partition_by_instance(tuples, self.key, self.parallelism)

    def contribution(self, t: Any) -> tuple[Any, Any]:
        """``(state key or None, value)``: what tuple ``t`` adds to the state.

        Raises :class:`RecordFailed` when a user function fails on ``t`` (``key``, ``lift``,
        ``event_time``) or the state's monoid refuses the lifted value or the key
        (``monoid``, see :meth:`~hailstorm.monoids.Monoid.check`); nothing is absorbed then.
        A user function may raise anything, so each stage catches any error and names it.
        """
        key = None
        value = _NO_VALUE
        if self.key is not None and (self.keyed or self.parallelism > 1):
            try:
                key = self.key(t)
                if type(key) not in _PLAIN_KEYS:
                    self._check_routable(key)
            except Exception as exc:  # any error of the user's key is the record's failure
                raise RecordFailed(self.name, "key", exc) from exc
            if self._key_classes is not None and not isinstance(key, self._key_classes):
                self._refused_by_monoid(self._check_key, key)  # type: ignore[arg-type]
        try:
            value = self.lift(t)
            if self._check_value is not None:
                self._check_value(value)
        except Exception as exc:  # the user's lift, or the monoid refusing what it made
            raise RecordFailed(self.name, "lift" if value is _NO_VALUE else "monoid",
                               exc) from exc
        if self.window is not None:
            try:
                event_time = self.event_time(t)  # type: ignore[misc]
                self.window.check_time(event_time)
                value = (self.window.lift(event_time, value) if self.late is None
                         else self.window.lift_unexpiring(event_time, value))
            except Exception as exc:  # the user's event_time, or a time the window refuses
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
        if self.paths.lift_is_one:  # every tuple lifts to the same 1: check it once
            values = [Count.one] * len(tuples)
            if self._check_value is not None and values:
                self._check_value(Count.one)
        else:
            values = mapped(self.lift, tuples)
            if self._check_value is not None:
                self._lifted.check_many(values)
        if self.key is None or not (self.keyed or self.parallelism > 1):
            return None, values, set()
        keys = list(tuples) if self.paths.key_is_tuple else mapped(self.key, tuples)
        key_types = set(map(type, keys))
        if not key_types <= _PLAIN_KEYS and not _plain_tuples(keys, key_types):
            for key in keys:
                self._check_routable(key)
        if self._key_classes is not None and not key_types <= set(self._key_classes):
            self.state.check_keys(keys)  # type: ignore[attr-defined]
        return keys, values, key_types

    def _unwindowed_contributions(self, tuples: Sequence[Any]) -> list[tuple[Any, Any]]:
        """:meth:`contribution` of every tuple (no window state), a batch at a time."""
        keys, values, _types = self._keys_and_values(tuples)
        return self._paired(keys, values)

    def _paired(self, keys: list[Any] | None, values: list[Any]) -> list[tuple[Any, Any]]:
        """``(state key or None, value)`` pairs, as :meth:`contribution` returns them."""
        if keys is not None and self.keyed:
            return list(zip(keys, values, strict=True))
        return list(zip(repeat(None), values))

    def _windowed_contributions(self, tuples: Sequence[Any]) -> list[tuple[Any, Any]]:
        """:meth:`contribution` of every tuple of a bolt with window (or ttl) state, a batch
        at a time: keys, lifted values and event times mapped and checked as batches."""
        keys, values, _types = self._keys_and_values(tuples)
        window = self.window
        assert window is not None and self.event_time is not None
        event_times = mapped(self.event_time, tuples)
        window.check_times(event_times)
        lift = window.lift if self.late is None else window.lift_unexpiring
        return self._paired(keys, list(map(lift, event_times, values)))

    def _refused_by_monoid(self, check: Callable[[Any], None], item: Any) -> None:
        try:
            check(item)
        except Exception as exc:  # a monoid's check may refuse with any error: it is named
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
            return self._windowed_contributions(tuples), range(len(tuples)), []
        except Exception:  # a user function or check failed on some tuple (any error):
            pass           # one by one, the failing tuples are named
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
        if self._absorb_key is not None:
            return self._absorb_key(state, key, value)
        if self.keyed:
            return self.state.absorb(state, {key: value})
        return self.state.absorb(state, value)

    def value_for_emit(self, key: Any, states: Sequence[Any]) -> Any:
        """What ``emit`` receives: the merged value of ``key`` (keyed state; with ttl its
        latest session's) or the merged whole state, across ``states`` (e.g. ``(A, B)``
        while a snapshot is pending). Do not mutate the result."""
        if self.keyed:
            if len(states) == 1:  # no snapshot pending
                present = [states[0][key]] if key in states[0] else []
            else:
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

    def merged_value(self, key: Any, states: Sequence[Any]) -> Any:
        """The value of ``key`` (keyed state) merged across ``states``, as a state the
        caller owns (:meth:`value_for_emit` may hand out a state itself)."""
        return self.value_monoid.combine_all([s[key] for s in states if key in s])

    def values_for_emit(self, keys: Sequence[Any], states: Sequence[Any]) -> list[Any]:
        """:meth:`value_for_emit` of each of ``keys`` (keyed state), a batch at a time: each
        segment's values looked up together, and a Python step only for a key that more
        than one segment holds (a key changed on both sides of a pending round's clock)."""
        if not self.keyed or len(states) != 2:
            return list(map(self.value_for_emit, keys, repeat(states)))
        a, b = (list(map(s.get, keys, repeat(_NO_VALUE))) for s in states)
        combine_all = self.value_monoid.combine_all
        values = [x if y is _NO_VALUE else y if x is _NO_VALUE else combine_all((x, y))
                  for x, y in zip(a, b, strict=True)]
        if any(map(is_, values, repeat(_NO_VALUE))):  # held by neither: the identity
            empty = self.value_monoid.empty
            values = [empty() if v is _NO_VALUE else v for v in values]
        return values if self.emits_state else list(map(
            self.window.emitted, values))  # type: ignore[union-attr]

    def outputs(self, t: Any, key: Any, value: Any) -> list[Any]:
        """``emit(t, value)`` (``emit(key, value)`` for :func:`~hailstorm.topology.by_key`)
        as a list of output tuples (empty without emit); raises :class:`RecordFailed` when
        emit fails."""
        if self.emit is None:
            return []
        try:
            produced = self.emit(key if self.emits_by_key else t, value)
            if type(produced) is list:
                return produced
            produced = drained(produced)
        except Exception as exc:  # any error of the user's emit is the record's failure
            raise RecordFailed(self.name, "emit", exc) from exc
        return as_output_list(produced, f"bolt {self.name!r}: emit")

    def outputs_many(self, tuples: Sequence[Any], keys: Sequence[Any], values: Sequence[Any]
                     ) -> list[list[Any]] | None:
        """:meth:`outputs` of every ``(tuples[i], keys[i], values[i])``, a batch at a time;
        None when emit fails on one or returns anything but a list (the caller then takes
        them one by one, which names the failure: so emit must be deterministic, as replays
        need)."""
        if self.emit is None:
            return [[] for _ in tuples]
        try:
            produced = list(map(self.emit, keys if self.emits_by_key else tuples, values))
        except Exception:  # the user's emit failed on some tuple (any error): one by one
            return None
        if len(produced) != len(tuples) or not set(map(type, produced)) <= {list}:
            return None  # StopIteration ended map early, or a generator or None returned
        return cast(list[list[Any]], produced)

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
            return state, self.outputs(t, key, self.value_for_emit(key, (state,))), None
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
        if self.paths.adds_numbers:  # numbers: add in place
            get = state.get
            for key, value in contributions:
                state[key] = get(key, 0) + value
            return state
        if self.paths.adds_records:  # Records of numbers absorb in place: straight in
            inner = self.value_monoid
            absorb, copy = inner.absorb, inner.copy
            get = state.get
            for key, value in contributions:
                current = get(key)
                if current is None:  # lift may return a shared value: copied, then owned
                    state[key] = copy(value)
                else:
                    absorb(current, value)
            return state
        if self.keyed:
            inner = self.value_monoid
            update: dict[Any, Any] = {}
            for key, value in contributions:
                if key in update:
                    update[key] = inner.absorb(update[key], value)
                else:  # lift may return a shared value: copy it once, then own it
                    update[key] = value if inner.immutable_state else inner.copy(value)
            return self.state.absorb_owned(state, update) if update else state  # type: ignore[attr-defined]
        monoid = self.state
        for _key, value in contributions:
            state = monoid.absorb(state, value)
        return state

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
