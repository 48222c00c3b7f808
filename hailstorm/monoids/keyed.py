"""Monoids made of monoids: :class:`KeyedMap` (``per_key``: one inner state per key) and
:class:`Record` (a product: one state per named field). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from typing import Any, Generic, Literal, TypeVar, cast, overload

from hailstorm.monoids.avro import check_kind, check_kinds, codec, record, sorted_keys
from hailstorm.monoids.avro_columns import columns_schema
from hailstorm.monoids.base import DEFAULT_NAMESPACE, MISSING, Monoid, S
from hailstorm.monoids.keyed_copies import KeyedChunks, KeyedColumns, KeyedCopy, KeyedValues
from hailstorm.monoids.scalars import Count, Sum
from hailstorm.monoids.ttl import Ttl
from hailstorm.monoids.windows import EventTimed, V, Window, WindowState

__all__ = ["K", "KeyedMap", "L", "Record", "per_key"]

K = TypeVar("K")
"""The keys of a :class:`KeyedMap` (``per_key`` types them ``str`` for the default
``key_type="string"``)."""
L = TypeVar("L")
"""What a bolt's ``lift`` returns for a :class:`KeyedMap`: an inner state, or for windows
the window's inner state."""


def _adds(monoid: Monoid[Any]) -> bool:
    """States of ``monoid`` are plain numbers combined by ``+`` (exactly a Count or a Sum)."""
    return type(monoid) in (Count, Sum)


class KeyedMap(Monoid[dict[K, S]], Generic[K, S, L]):
    """One ``inner`` state per key: state ``dict`` key -> inner state.

    Typed ``KeyedMap[K, S, L]``: keys ``K``, inner states ``S`` (what a bolt's emit
    receives) and the values ``L`` a bolt's ``lift`` returns (``S``, or ``V`` for windows
    over ``Monoid[V]``); build it with :func:`per_key`, whose overloads fill them in. With
    ttl (:class:`~hailstorm.monoids.ttl.Ttl` over ``Monoid[V]``) both are ``V``: emit
    receives the latest session's state, while the stored states are the sessions.

    A missing key means the inner identity. Entries are never removed, even when their value
    equals the identity (a present key records that the key was seen; the laws hold
    structurally either way). ``absorb(acc, {k: v})`` costs one inner ``absorb`` per key of
    the value and copies ``v`` only when ``k`` is new (and the inner state is mutable).

    ``key_type``: an Avro primitive (``"string"``, ``"long"``, ``"int"``, ``"double"``,
    ``"boolean"``, ``"bytes"``), a tuple of such specs for tuple keys, or ``"json"`` (keys
    stored as canonical JSON strings, arrays decoded as tuples).

    Avro: an array of ``PerKeyEntry {key, value}`` records sorted by key; a tuple key is a
    ``PerKeyKey {k0, k1, ...}`` record, so ``("fr", 3)`` reads offline as
    ``{"key": {"k0": "fr", "k1": 3}, "value": ...}``.
    """

    name = "per_key"

    def __init__(self: KeyedMap[Any, S, Any], inner: Monoid[S], key_type: Any = "string"
                 ) -> None:
        self.inner = inner
        self.key_type = key_type
        self._key = codec(key_type, hashable=True)
        self._additive = _adds(inner)
        self._immutable = inner.immutable_state
        self._columns_of: Record | None = (
            inner if isinstance(inner, Record) and inner.flat_columns else None)
        """The inner Record whose states :meth:`copy_keys` copies as their Avro column."""

    @property
    def additive(self) -> bool:
        """Values are numbers combined by ``+`` (the inner monoid is a Count or a Sum)."""
        return self._additive

    def empty(self) -> dict[Any, Any]:
        return {}

    def combine(self, a: dict[Any, Any], b: dict[Any, Any]) -> dict[Any, Any]:
        if len(a) < len(b):
            a, b = b, a
        return self.absorb(self.copy(a), b)

    def absorb(self, acc: dict[Any, Any], value: dict[Any, Any]) -> dict[Any, Any]:
        if self._additive:
            get = acc.get
            for k, v in value.items():
                acc[k] = get(k, 0) + v
            return acc
        absorb_key = self.absorb_key
        for k, v in value.items():
            absorb_key(acc, k, v)
        return acc

    def absorb_key(self, acc: dict[Any, Any], key: Any, inner_value: Any) -> dict[Any, Any]:
        """:meth:`absorb` of ``{key: inner_value}``, without building that dict (a bolt's
        step per tuple)."""
        if self._additive:
            acc[key] = acc.get(key, 0) + inner_value
            return acc
        cur = acc.get(key, MISSING)
        if self._immutable:
            acc[key] = inner_value if cur is MISSING else self.inner.combine(cur, inner_value)
        else:
            inner = self.inner
            acc[key] = (inner.copy(inner_value) if cur is MISSING
                        else inner.absorb(cur, inner_value))
        return acc

    def absorb_owned(self, acc: dict[Any, Any], value: dict[Any, Any]) -> dict[Any, Any]:
        """:meth:`absorb` of a ``value`` the caller hands over: its inner states become
        ``acc``'s as they are (never copied), so ``value`` must not be used afterwards."""
        if self._additive or self._immutable:
            return self.absorb(acc, value)
        inner_absorb = self.inner.absorb
        get = acc.get
        for k, v in value.items():
            cur = get(k, MISSING)
            acc[k] = v if cur is MISSING else inner_absorb(cur, v)
        return acc

    def copy(self, state: dict[Any, Any]) -> dict[Any, Any]:
        if self._immutable:
            return dict(state)
        copy = self.inner.copy
        return {k: copy(v) for k, v in state.items()}

    def copy_keys(self, state: dict[Any, Any], keys: Sequence[Any] | None = None
                  ) -> Mapping[Any, Any]:
        """An independent copy of ``keys`` of ``state`` (an absent key: the inner
        identity; None: every key), for a snapshot to write. Where the inner states' Avro
        column shares nothing with them (:attr:`~Monoid.avro_column_copies`), the copy is
        that column, which the snapshot writes as it is (:mod:`~hailstorm.monoids.
        keyed_copies`): records of numbers as the column of each field, in about a third
        of the time a ``dict`` per key takes; other mutable states (windows, sketches) as
        the nested column of each chunk of keys, instead of a copy of every state
        and then its column; immutable states as the list of the keys and the list of
        their values, which the snapshot slices. The rest as :meth:`copy` copies them."""
        record = self._columns_of
        if record is not None:
            keys = list(state) if keys is None else list(keys)
            values: list[Any] = list(map(state.get, keys))
            if None in values:  # a Record state is a dict, never None: some key is absent
                values = [record.empty() if v is None else v for v in values]
            return KeyedColumns(record, keys, record.avro_column(values))
        if self._copies_as_chunks:
            return KeyedChunks.of(self.inner, state, list(state) if keys is None else keys)
        inner = self.inner
        if self._immutable:  # the values themselves, looked up by C code, as two lists
            if keys is None:
                return KeyedValues(inner, list(state), list(state.values()))
            keys = keys if isinstance(keys, list) else list(keys)
            values = list(map(state.get, keys, repeat(MISSING)))
            if MISSING in values:
                values = [inner.empty() if v is MISSING else v for v in values]
            return KeyedValues(inner, keys, values)
        if keys is None:
            return self.copy(state)
        copy = inner.copy
        return {k: copy(state[k]) if k in state else inner.empty() for k in keys}

    @cached_property
    def _copies_as_chunks(self) -> bool:
        """:meth:`copy_keys` gives a :class:`~hailstorm.monoids.keyed_copies.KeyedChunks`:
        mutable inner states whose Avro column is a copy of them and which snapshots write
        as nested columns (a record or an array)."""
        inner = self.inner
        return (not self._immutable and inner.avro_column_copies
                and columns_schema(inner.avro_schema()) is not None)

    @staticmethod
    def lift(key: Any, inner_value: Any) -> dict[Any, Any]:
        """The state of one keyed inner value."""
        return {key: inner_value}

    @property
    def key_classes(self) -> tuple[type, ...] | None:
        """The Python types a key of ``key_type`` may have (None: not checked)."""
        return self._key.classes

    def check_key(self, key: Any) -> None:
        """Raise ``TypeError`` when ``key`` does not have the declared ``key_type``."""
        check_kind(key, self._key.classes, f"{self.describe()}'s key")

    def check_keys(self, keys: Sequence[Any]) -> None:
        """:meth:`check_key` for a batch."""
        classes = self._key.classes
        if classes is not None:
            check_kinds(keys, classes, f"{self.describe()}'s key", frozenset(classes))

    def get(self, state: dict[Any, Any], key: Any) -> Any:
        """The inner state of ``key`` (a fresh identity when absent)."""
        v = state.get(key, MISSING)
        return self.inner.empty() if v is MISSING else v

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        entry = record(
            namespace,
            "PerKeyEntry",
            [
                ("key", self._key.schema(namespace, "PerKeyKey")),
                ("value", self.inner.avro_schema_in(f"{namespace}.per_key")),
            ],
        )
        return {"type": "array", "items": entry}

    def to_avro(self, state: dict[Any, Any]) -> Any:
        return list(self.avro_entries(state, sorted_keys(state)))

    def avro_entries(self, state: dict[Any, Any], keys: Iterable[Any]) -> Iterator[Any]:
        """The ``{key, value}`` Avro records of ``keys`` of ``state``, in their order: one
        item of :meth:`to_avro` at a time (snapshots stream a state's keys through this)."""
        if self._key.as_is and self.inner.avro_as_is:
            return ({"key": k, "value": state[k]} for k in keys)
        enc = self._key.encode
        to_avro = self.inner.to_avro
        return ({"key": enc(k), "value": to_avro(state[k])} for k in keys)

    def avro_columns(self, state: Mapping[Any, Any], keys: Sequence[Any], *,
                     key_columns: bool = False) -> tuple[Any, list[Any]]:
        """The Avro keys and values of ``keys`` of ``state``, in their order: the
        :meth:`avro_entries` of ``keys`` as two columns (snapshots write them so); with
        ``key_columns`` the keys as their nested column (:meth:`avro_key_column`)."""
        values = list(map(state.__getitem__, keys))
        if not self.inner.avro_as_is:
            values = list(map(self.inner.to_avro, values))
        return self._avro_keys(keys, key_columns), values

    def avro_column_chunks(self, state: Mapping[Any, Any], size: int, *,
                           key_columns: bool = False) -> Iterator[tuple[Any, list[Any]]]:
        """:meth:`avro_columns` of ``state``'s keys in its own order, ``size`` keys at a
        time (a snapshot's records), the slices of a copy of immutable values
        :meth:`copy_keys` made (:class:`~hailstorm.monoids.keyed_copies.KeyedValues`) as
        they are."""
        if isinstance(state, KeyedValues):
            to_avro = None if self.inner.avro_as_is else self.inner.to_avro
            for keys, values in state.value_chunks(size):
                yield (self._avro_keys(keys, key_columns),
                       values if to_avro is None else list(map(to_avro, values)))
            return
        keys = list(state)
        for start in range(0, len(keys), size):
            yield self.avro_columns(state, keys[start:start + size], key_columns=key_columns)

    def avro_nested_chunks(self, state: Mapping[Any, Any], size: int, *,
                           key_columns: bool = False) -> Iterator[tuple[Any, Any]]:
        """The Avro keys and nested column of ``state``'s keys in its own order, ``size``
        keys at a time (a snapshot's records): :meth:`avro_nested_columns` of each chunk,
        or the columns of a copy :meth:`copy_keys` made
        (:class:`~hailstorm.monoids.keyed_copies.KeyedCopy`)."""
        if isinstance(state, KeyedCopy):
            for keys, column in state.column_chunks(size):
                yield self._avro_keys(keys, key_columns), column
            return
        keys = list(state)
        for start in range(0, len(keys), size):
            yield self.avro_nested_columns(state, keys[start:start + size],
                                           key_columns=key_columns)

    def avro_nested_columns(self, state: Mapping[Any, Any], keys: Sequence[Any], *,
                            key_columns: bool = False) -> tuple[Any, Any]:
        """:meth:`avro_columns` with the values as one nested column
        (:meth:`Monoid.avro_column`)."""
        return (self._avro_keys(keys, key_columns),
                self.inner.avro_column(list(map(state.__getitem__, keys))))

    def avro_key_column(self, keys: Sequence[Any]) -> Any:
        """The nested column (:func:`hailstorm.monoids.avro_columns.stripe`) of the Avro
        data of ``keys``: for tuple keys one list per position, built from the tuples
        without a record per key."""
        return self._key.column(keys)

    def _avro_keys(self, keys: Sequence[Any], key_columns: bool = False) -> Any:
        if key_columns:
            return self._key.column(keys)
        return list(keys) if self._key.as_is else list(map(self._key.encode, keys))

    def from_avro(self, data: Any) -> dict[Any, Any]:
        if self._key.as_is and self.inner.avro_as_is:  # no call per key (a reload's bulk)
            return {e["key"]: e["value"] for e in data}
        dec = self._key.decode
        from_avro = self.inner.from_avro
        return {dec(e["key"]): from_avro(e["value"]) for e in data}

    def from_avro_nested_columns(self, keys: Sequence[Any], column: Any) -> dict[Any, Any]:
        """:meth:`from_avro_columns` of the values' nested column
        (:meth:`avro_nested_columns`)."""
        if not self._key.as_is:
            keys = list(map(self._key.decode, keys))
        return dict(zip(keys, self.inner.from_avro_column(column, len(keys)), strict=True))

    def from_avro_columns(self, keys: Sequence[Any], values: Sequence[Any]) -> dict[Any, Any]:
        """:meth:`from_avro` of entries given as two columns (:meth:`avro_columns`)."""
        if not self._key.as_is:
            keys = list(map(self._key.decode, keys))
        if not self.inner.avro_as_is:
            values = list(map(self.inner.from_avro, values))
        return dict(zip(keys, values, strict=True))

    def describe(self) -> str:
        key = "" if self.key_type == "string" else f", key={self._key.describe()}"
        return f"per_key({self.inner.describe()}{key})"


@overload
def per_key(inner: Window[V], key_type: Literal["string"] = ...
            ) -> KeyedMap[str, WindowState[V], V]: ...
@overload
def per_key(inner: Ttl[V], key_type: Literal["string"] = ...) -> KeyedMap[str, V, V]: ...
@overload
def per_key(inner: Monoid[S], key_type: Literal["string"] = ..., *, ttl: Any
            ) -> KeyedMap[str, S, S]: ...
@overload
def per_key(inner: Monoid[S], key_type: Literal["string"] = ...) -> KeyedMap[str, S, S]: ...
@overload
def per_key(inner: Window[V], key_type: Any) -> KeyedMap[Any, WindowState[V], V]: ...
@overload
def per_key(inner: Ttl[V], key_type: Any) -> KeyedMap[Any, V, V]: ...
@overload
def per_key(inner: Monoid[S], key_type: Any, *, ttl: Any) -> KeyedMap[Any, S, S]: ...
@overload
def per_key(inner: Monoid[S], key_type: Any) -> KeyedMap[Any, S, S]: ...


def per_key(inner: Monoid[Any], key_type: Any = "string", *, ttl: Any = None
            ) -> KeyedMap[Any, Any, Any]:
    """``KeyedMap(inner, key_type)``: one ``inner`` state per key (typed by ``key_type``:
    see :data:`K`).

    ``ttl``: a key not updated for longer than ``ttl`` (in event time) starts afresh, and
    the bolt drops keys idle long enough (``KeyedMap(Ttl(inner, ttl), key_type)``, see
    :class:`~hailstorm.monoids.ttl.Ttl`; the bolt needs ``event_time=`` and ``late=``).
    """
    if ttl is not None:
        if isinstance(inner, EventTimed):
            raise ValueError(f"ttl= applies to a plain monoid, not {inner.describe()}: "
                             "keep windows, or a ttl, not both")
        inner = Ttl(inner, ttl)
    if isinstance(inner, Ttl):  # typed by what emit receives (see KeyedMap)
        return cast(KeyedMap[Any, Any, Any], KeyedMap(inner, key_type))
    return KeyedMap(inner, key_type)


def _accept(value: Any) -> None:
    """The check of a monoid that checks nothing."""


class Record(Monoid[dict[str, Any]]):
    """A product of monoids: state ``dict`` field -> that field's state, merged fieldwise.

    ``Record({"views": Count(), "users": HyperLogLog(10), "latency": Mean()})`` keeps three
    aggregates side by side; :meth:`lift` builds a state from per-field values (missing
    fields are the identity).
    """

    name = "Record"

    def __init__(self, fields: dict[str, Monoid[Any]]) -> None:
        if not fields:
            raise ValueError("Record needs at least one field")
        for name in fields:
            if not name.isidentifier():
                raise ValueError(f"Record field {name!r} is not a valid Avro field name")
        self.fields = dict(fields)
        self._checks = [(name, m.check if type(m).check is not Monoid.check else _accept)
                        for name, m in self.fields.items()]
        """Every field with its check (each is looked up, so a missing one is refused)."""
        self._flat = all(m.immutable_state for m in self.fields.values())
        """Every field's state is immutable: a state's copy is a shallow ``dict`` copy."""
        self._additive = all(map(_adds, self.fields.values()))
        """Every field is a Count or a Sum: fields absorb by ``+``."""
        self._names = tuple(self.fields)
        self.avro_as_is = all(m.avro_as_is for m in self.fields.values())
        """Every field's state is its Avro value: a state is its own record."""

    @property
    def additive(self) -> bool:
        """Every field is a Count or a Sum: a state absorbs a value by adding each field."""
        return self._additive

    @property
    def flat_columns(self) -> bool:
        """Every field's state is immutable and its Avro value neither a record nor an
        array: the :meth:`avro_column` of states is one plain list per field, sharing
        nothing that absorbing into them changes."""
        return self._flat and not any(
            isinstance(schema, dict) and schema.get("type") in ("record", "array")
            for schema in (m.avro_schema() for m in self.fields.values()))

    def empty(self) -> dict[str, Any]:
        return {name: m.empty() for name, m in self.fields.items()}

    def combine(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {name: m.combine(a[name], b[name]) for name, m in self.fields.items()}

    def absorb(self, acc: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
        if self._additive:
            for name in self._names:
                acc[name] += value[name]
            return acc
        for name, m in self.fields.items():
            acc[name] = m.absorb(acc[name], value[name])
        return acc

    def combine_all(self, values: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Fold many states into a new one, a field at a time (each field's
        :meth:`~Monoid.combine_all` over the column of that field)."""
        states = values if isinstance(values, Sequence) else list(values)
        fields = self.fields
        if not self._merges_as(Record) or set(map(len, states)) != {len(fields)}:
            return super().combine_all(states)  # also a state with keys of its own, as is
        return {name: fields[name].combine_all(list(map(itemgetter(name), states)))
                for name in states[0]}  # the first state's order of its fields

    def copy(self, state: dict[str, Any]) -> dict[str, Any]:
        if self._flat:
            return dict(state)
        return {name: m.copy(state[name]) for name, m in self.fields.items()}

    def check(self, value: Any) -> None:
        for name, check in self._checks:
            try:
                field_value = value[name]
            except (KeyError, TypeError, IndexError):
                raise TypeError(
                    f"{self.describe()} takes dicts with the fields {sorted(self.fields)} "
                    f"(Record.lift(...)), not {value!r:.80}") from None
            check(field_value)

    def check_many(self, values: Sequence[Any]) -> None:
        try:
            columns = [list(map(itemgetter(name), values)) for name in self.fields]
        except (KeyError, TypeError, IndexError):
            super().check_many(values)  # names the value refused
            return
        for m, column in zip(self.fields.values(), columns, strict=True):
            m.check_many(column)

    def lift(self, **values: Any) -> dict[str, Any]:
        """A state from per-field states; fields not given are the identity."""
        if tuple(values) == self._names:  # every field given, in order: the call's own dict
            return values
        if len(values) == len(self._names) and values.keys() == self.fields.keys():
            return {name: values[name] for name in self._names}  # every field given
        unknown = set(values) - set(self.fields)
        if unknown:
            raise KeyError(f"Record has no field(s) {sorted(unknown)}")
        return {
            name: values[name] if name in values else m.empty() for name, m in self.fields.items()
        }

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return record(
            namespace,
            "Record",
            [(name, m.avro_schema_in(f"{namespace}.{name}")) for name, m in self.fields.items()],
        )

    def to_avro(self, state: dict[str, Any]) -> Any:
        if self.avro_as_is:
            return state
        return {name: m.to_avro(state[name]) for name, m in self.fields.items()}

    def avro_column(self, states: Sequence[dict[str, Any]]) -> Any:
        return {name: m.avro_column(list(map(itemgetter(name), states)))
                for name, m in self.fields.items()}

    @property
    def avro_column_copies(self) -> bool:
        """Every field's column is a copy (a dict of them is a new one)."""
        return type(self).avro_column is Record.avro_column and all(
            m.avro_column_copies for m in self.fields.values())

    def from_avro_column(self, column: Any, size: int) -> list[dict[str, Any]]:
        fields = [m.from_avro_column(column[name], size) for name, m in self.fields.items()]
        if not fields:
            return [{} for _ in range(size)]
        names = self._names
        return [dict(zip(names, row, strict=True)) for row in zip(*fields, strict=True)]

    def from_avro(self, data: Any) -> dict[str, Any]:
        if self.avro_as_is:
            return data
        return {name: m.from_avro(data[name]) for name, m in self.fields.items()}

    def describe(self) -> str:
        inner = ", ".join(f"{name}={m.describe()}" for name, m in self.fields.items())
        return f"Record({inner})"
