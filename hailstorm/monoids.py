"""Commutative monoids: the only kind of state a hailstorm bolt keeps.

A :class:`Monoid` describes a *type* of state (it holds configuration, never data):
``empty()`` is the identity, ``combine(a, b)`` must be associative and commutative, and
``combine`` never mutates its arguments. ``absorb(acc, value)`` is the hot-path variant that
may update ``acc`` in place and returns the result; the runtime only calls it on state it
owns. Every monoid knows the Avro schema of its state, because snapshots are Avro files
anyone can read with fastavro.

States are plain Python data (``int``, ``float``, ``tuple``, ``dict``, ``set``,
``bytearray``, ``None``) so they compare with ``==`` and pickle cheaply. Library monoids
offer a ``lift(...)`` method that turns one input tuple into a state, e.g.
``per_key(Count()).lift("page-1", Count.one)``.

The library:

=============================  ==========================================================
monoid                         state
=============================  ==========================================================
``Sum(kind)``                  ``int`` (``"long"``) or ``float`` (``"double"``)
``Count()``                    ``int``
``Min(kind)``, ``Max(kind)``   ``None`` (identity) or the value
``Mean()``                     ``(sum: float, count: int)``
``Last(value_type)``           ``None`` or ``(order, value)``
``SetUnion(item_type)``        ``set`` of items
``TopK(k)``                    ``dict`` item -> score, at most ``k`` entries
``HyperLogLog(precision)``     ``bytearray`` of ``2**precision`` registers
``CountMinSketch(w, d)``       ``dict`` cell index -> non-zero counter (sparse d x w grid)
``KeyedMap(inner)``            ``dict`` key -> inner state
``TumblingWindow``,            ``(max_event_time_seen or None, dict window_start -> inner
``SlidingWindow``              state)``
=============================  ==========================================================

User-defined monoids are ordinary subclasses. For example a boolean "any" flag:

>>> class AnyTrue(Monoid[bool]):
...     name = "AnyTrue"
...     immutable_state = True
...     def empty(self) -> bool:
...         return False
...     def combine(self, a: bool, b: bool) -> bool:
...         return a or b
...     def avro_schema(self) -> str:
...         return "boolean"
...     def to_avro(self, state: bool) -> bool:
...         return state
...     def from_avro(self, data: bool) -> bool:
...         return data
>>> flags = per_key(AnyTrue())
>>> flags.combine({"a": False}, {"a": True, "b": False})
{'a': True, 'b': False}
>>> flags.describe()
'per_key(AnyTrue)'

Check it with :func:`hailstorm.testing.check_monoid_laws` before trusting it.

Avro names: library monoids build their schema with :meth:`Monoid.avro_schema_in`, which puts
every record under a namespace derived from its position in the nesting
(``hailstorm.state.PerKeyEntry``, ``hailstorm.state.per_key.Tumbling``,
``hailstorm.state.per_key.tumbling.Mean``...), so nested schemas never redefine a name.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any, ClassVar, Generic, TypeVar

S = TypeVar("S")

__all__ = [
    "Count",
    "CountMinSketch",
    "HyperLogLog",
    "KeyedMap",
    "Last",
    "Max",
    "Mean",
    "Min",
    "Monoid",
    "SetUnion",
    "SlidingWindow",
    "Sum",
    "TopK",
    "TumblingWindow",
    "per_key",
    "stable_hash",
]

#: Namespace of the records of a top-level state schema.
DEFAULT_NAMESPACE = "hailstorm.state"


class Monoid(ABC, Generic[S]):
    """A commutative monoid over states of type ``S``."""

    #: Short name shown by ``hailstorm show`` and used in Avro schema names.
    name: str = "monoid"

    #: True when states are never mutated in place (ints, tuples, frozensets...): containers
    #: such as :class:`KeyedMap` then store values without copying them.
    immutable_state: ClassVar[bool] = False

    @abstractmethod
    def empty(self) -> S:
        """The identity element (a fresh value each call)."""

    @abstractmethod
    def combine(self, a: S, b: S) -> S:
        """Associative, commutative merge; must not mutate ``a`` or ``b``."""

    def absorb(self, acc: S, value: S) -> S:
        """Merge ``value`` into ``acc`` (which the caller owns and may be mutated)."""
        return self.combine(acc, value)

    def combine_all(self, values: Iterable[S]) -> S:
        """Fold many states into one."""
        acc = self.empty()
        for v in values:
            acc = self.absorb(acc, v)
        return acc

    def copy(self, state: S) -> S:
        """An independent copy of ``state`` (for handing state ``A`` to a snapshot writer)."""
        return self.combine(self.empty(), state)

    def check(self, value: Any) -> None:
        """Raise ``TypeError``/``ValueError`` when ``value`` (what a bolt's lift returned) is
        not a state of this monoid. Bolts call it before absorbing, so a bad record is
        quarantined instead of breaking the state or its snapshot. The default accepts
        anything; a user-defined monoid may override it."""

    def check_many(self, values: Sequence[Any]) -> None:
        """:meth:`check` for a batch: raise if any value is refused (which one is for
        :meth:`check` to tell). Override it when a batch can be checked faster."""
        if type(self).check is Monoid.check:
            return
        check = self.check
        for value in values:
            check(value)

    @abstractmethod
    def avro_schema(self) -> Any:
        """Avro schema (fastavro form) of the serialized state."""

    def avro_schema_in(self, namespace: str) -> Any:
        """Avro schema with named types placed under ``namespace`` (used when nested).

        The default ignores ``namespace``: a user-defined monoid whose schema defines named
        types must keep those names unique itself.
        """
        return self.avro_schema()

    @abstractmethod
    def to_avro(self, state: S) -> Any:
        """State -> a value matching :meth:`avro_schema`."""

    @abstractmethod
    def from_avro(self, data: Any) -> S:
        """Inverse of :meth:`to_avro`."""

    def describe(self) -> str:
        """Human description for ``hailstorm show`` (e.g. ``per_key(Count)``)."""
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


# --------------------------------------------------------------------------- helpers

_MISSING: Any = object()

_PRIMITIVES = frozenset({"string", "long", "int", "double", "boolean", "bytes"})


def stable_hash(item: Any, digest_size: int = 8) -> bytes:
    """A hash of ``item`` that is identical across processes and runs (blake2b).

    ``str`` hashes its UTF-8 bytes, ``bytes`` itself; anything else hashes a type tag plus its
    ``repr`` (fine for ints, floats and tuples of those; avoid objects with address-based
    reprs).
    """
    if isinstance(item, str):
        data = item.encode()
    elif isinstance(item, bytes | bytearray):
        data = bytes(item)
    else:
        data = b"\x00" + type(item).__name__.encode() + b"\x00" + repr(item).encode()
    return hashlib.blake2b(data, digest_size=digest_size).digest()


def _record(namespace: str, name: str, fields: list[tuple[str, Any]]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": f"{namespace}.{name}",
        "fields": [{"name": n, "type": t} for n, t in fields],
    }


def _sorted_items(d: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """Items sorted by key when keys are comparable (deterministic snapshots), else as is."""
    try:
        return sorted(d.items(), key=lambda kv: kv[0])
    except TypeError:
        return list(d.items())


def _tuplify(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    return x


_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
"""The range of Avro's ``long``."""

_PRIMITIVE_CLASSES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "long": (int,),
    "int": (int,),
    "double": (int, float),
    "boolean": (bool,),
    "bytes": (bytes, bytearray),
}


def _accept(value: Any) -> None:
    """The check of a monoid that checks nothing."""


def _check_kinds(values: Sequence[Any], classes: tuple[type, ...] | None, what: Any,
                 allowed: frozenset[type]) -> None:
    """:func:`_check_kind` for a batch: by the set of their types when it is ``allowed``,
    else value by value."""
    if classes is not None and not set(map(type, values)) <= allowed:
        for value in values:
            _check_kind(value, classes, what)


def _check_number(value: Any, kind: str, what: Any) -> None:
    """Raise unless ``value`` fits Avro's ``kind``: ``"long"`` an int within 64 bits,
    ``"double"`` a finite int or float (``what`` as for :func:`_check_kind`)."""
    _check_kind(value, _PRIMITIVE_CLASSES[kind], what)
    if kind == "long" and not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{_taker(what)}: {value} is out of the 64-bit range")
    if kind == "double" and not math.isfinite(value):
        raise ValueError(f"{_taker(what)}: {value} is not finite")


def _taker(what: Any) -> str:
    return what if isinstance(what, str) else what.describe()


def _check_kind(value: Any, classes: tuple[type, ...] | None, what: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is one of ``classes`` (None: anything);
    ``what`` names the taker: a string, or a monoid (described only on failure)."""
    if classes is not None and not isinstance(value, classes):
        names = " or ".join(c.__name__ for c in classes)
        raise TypeError(
            f"{_taker(what)} takes {names} values, not {type(value).__name__} {value!r:.80}")


class _Codec:
    """Maps Python values (keys, items, orders, values) to and from Avro data."""

    classes: tuple[type, ...] | None = None
    """The Python types a value must have (None: not checked)."""

    def schema(self, namespace: str, name: str) -> Any:
        raise NotImplementedError

    def encode(self, x: Any) -> Any:
        return x

    def decode(self, d: Any) -> Any:
        return d

    def describe(self) -> str:
        raise NotImplementedError


class _Primitive(_Codec):
    def __init__(self, avro_type: str) -> None:
        self.avro_type = avro_type
        self.classes = _PRIMITIVE_CLASSES[avro_type]

    def schema(self, namespace: str, name: str) -> Any:
        return self.avro_type

    def describe(self) -> str:
        return self.avro_type


class _Json(_Codec):
    """Any JSON data, stored as a canonical JSON string.

    For keys/items (``hashable``) JSON arrays decode as tuples, otherwise as lists.
    """

    def __init__(self, hashable: bool) -> None:
        self.hashable = hashable

    def schema(self, namespace: str, name: str) -> Any:
        return "string"

    def encode(self, x: Any) -> Any:
        return json.dumps(x, sort_keys=True, separators=(",", ":"))

    def decode(self, d: Any) -> Any:
        v = json.loads(d)
        return _tuplify(v) if self.hashable else v

    def describe(self) -> str:
        return "json"


class _Tuple(_Codec):
    """A tuple stored as a record with fields ``k0, k1, ...``."""

    def __init__(self, parts: list[_Codec]) -> None:
        self.parts = parts
        self.fields = [f"k{i}" for i in range(len(parts))]

    def schema(self, namespace: str, name: str) -> Any:
        pairs = zip(self.fields, self.parts, strict=True)
        return _record(namespace, name, [(f, p.schema(namespace, f"{name}_{f}")) for f, p in pairs])

    def encode(self, x: Any) -> Any:
        if len(x) != len(self.parts):
            raise ValueError(f"expected a {len(self.parts)}-tuple, got {x!r}")
        return {f: p.encode(v) for f, p, v in zip(self.fields, self.parts, x, strict=True)}

    def decode(self, d: Any) -> Any:
        return tuple(p.decode(d[f]) for f, p in zip(self.fields, self.parts, strict=True))

    def describe(self) -> str:
        return "(" + ", ".join(p.describe() for p in self.parts) + ")"


class _Raw(_Codec):
    """An explicit Avro schema; values pass through unchanged."""

    def __init__(self, schema: Any) -> None:
        self.raw = schema

    def schema(self, namespace: str, name: str) -> Any:
        return self.raw

    def describe(self) -> str:
        return "avro"


def _codec(spec: Any, *, hashable: bool) -> _Codec:
    """Build a codec from a type spec.

    ``spec`` is an Avro primitive name (``"string"``, ``"long"``, ``"int"``, ``"double"``,
    ``"boolean"``, ``"bytes"``), ``"json"``, a tuple of specs (a tuple value stored as a
    record ``{k0, k1, ...}``), or, for non-key values only, any other Avro schema (dict or
    union list) whose values pass through fastavro unchanged.
    """
    if isinstance(spec, str):
        if spec in _PRIMITIVES:
            return _Primitive(spec)
        if spec == "json":
            return _Json(hashable)
    elif isinstance(spec, tuple):
        if not spec:
            raise ValueError("a tuple type needs at least one element")
        return _Tuple([_codec(s, hashable=True) for s in spec])
    elif isinstance(spec, dict | list) and not hashable:
        return _Raw(spec)
    kinds = "an Avro primitive, 'json', or a tuple of those"
    raise ValueError(f"unsupported type {spec!r}: use {kinds}")


# --------------------------------------------------------------------------- scalars


class Sum(Monoid[Any]):
    """Sum of numbers; ``kind`` is ``"long"`` (exact ints) or ``"double"`` (floats).

    Float addition is not exactly associative: ``"double"`` sums may differ in the last bits
    depending on merge order. Use ``"long"`` (e.g. cents, milliseconds) for exact totals.
    """

    name = "Sum"
    immutable_state = True

    def __init__(self, kind: str = "long") -> None:
        if kind not in ("long", "double"):
            raise ValueError(f"Sum kind must be 'long' or 'double', not {kind!r}")
        self.kind = kind
        self._zero: int | float = 0 if kind == "long" else 0.0
        self._classes = _PRIMITIVE_CLASSES[kind]

    def empty(self) -> Any:
        return self._zero

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def absorb(self, acc: Any, value: Any) -> Any:
        return acc + value

    def copy(self, state: Any) -> Any:
        return state

    def check(self, value: Any) -> None:
        _check_number(value, self.kind, self)

    def check_many(self, values: Sequence[Any]) -> None:
        _check_kinds(values, self._classes, self, frozenset(self._classes))
        if not values or values.count(1) == len(values):  # counts: ones only
            return
        if (not all(map(math.isfinite, values)) if self.kind == "double"
                else not _LONG_MIN <= min(values) <= max(values) <= _LONG_MAX):
            for value in values:
                self.check(value)

    @staticmethod
    def lift(x: Any) -> Any:
        """The state of one number: itself."""
        return x

    def avro_schema(self) -> Any:
        return self.kind

    def avro_schema_in(self, namespace: str) -> Any:
        return self.kind

    def to_avro(self, state: Any) -> Any:
        return state

    def from_avro(self, data: Any) -> Any:
        return data

    def describe(self) -> str:
        return f"Sum({self.kind})"


class Count(Sum):
    """Number of tuples: every tuple lifts to :attr:`one` (a ``Sum("long")`` of ones)."""

    name = "Count"
    #: The state of a single tuple.
    one: ClassVar[int] = 1

    def __init__(self) -> None:
        super().__init__("long")

    @staticmethod
    def lift(*_tuple: Any) -> int:
        """The state of one tuple (whatever it is): ``1``."""
        return 1

    def describe(self) -> str:
        return self.name


class _Extremum(Monoid[Any]):
    """Shared code of :class:`Min` and :class:`Max`: state ``None`` (identity) or a value."""

    immutable_state = True

    def __init__(self, kind: Any = "long") -> None:
        self.kind = kind
        self._codec = _codec(kind, hashable=True)

    def empty(self) -> Any:
        return None

    def copy(self, state: Any) -> Any:
        return state

    def check(self, value: Any) -> None:
        if value is not None:
            _check_kind(value, self._codec.classes, self)

    def check_many(self, values: Sequence[Any]) -> None:
        classes = self._codec.classes
        if classes is not None and not set(map(type, values)) <= {*classes, type(None)}:
            super().check_many(values)

    @staticmethod
    def lift(x: Any) -> Any:
        """The state of one value: itself."""
        return x

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return ["null", self._codec.schema(namespace, f"{self.name}Value")]

    def to_avro(self, state: Any) -> Any:
        return None if state is None else self._codec.encode(state)

    def from_avro(self, data: Any) -> Any:
        return None if data is None else self._codec.decode(data)

    def describe(self) -> str:
        return f"{self.name}({self._codec.describe()})"


class Min(_Extremum):
    """Smallest value seen (``None`` until a value arrives). Values must be ordered (no NaN)."""

    name = "Min"

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return a if a <= b else b

    def absorb(self, acc: Any, value: Any) -> Any:
        return self.combine(acc, value)


class Max(_Extremum):
    """Largest value seen (``None`` until a value arrives). Values must be ordered (no NaN)."""

    name = "Max"

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return a if a >= b else b

    def absorb(self, acc: Any, value: Any) -> Any:
        return self.combine(acc, value)


class Mean(Monoid[tuple[float, int]]):
    """Arithmetic mean: state ``(sum, count)``; :meth:`value` gives the mean."""

    name = "Mean"
    immutable_state = True

    def empty(self) -> tuple[float, int]:
        return (0.0, 0)

    def combine(self, a: tuple[float, int], b: tuple[float, int]) -> tuple[float, int]:
        return (a[0] + b[0], a[1] + b[1])

    def absorb(self, acc: tuple[float, int], value: tuple[float, int]) -> tuple[float, int]:
        return (acc[0] + value[0], acc[1] + value[1])

    def copy(self, state: tuple[float, int]) -> tuple[float, int]:
        return state

    def check(self, value: Any) -> None:
        if not (isinstance(value, tuple) and len(value) == 2):
            raise TypeError(f"Mean takes (sum, count) pairs (Mean.lift(x)), not {value!r:.80}")
        _check_kind(value[0], (int, float), "Mean's sum")
        _check_kind(value[1], (int,), "Mean's count")

    @staticmethod
    def lift(x: float) -> tuple[float, int]:
        """The state of one observation."""
        return (float(x), 1)

    @staticmethod
    def value(state: tuple[float, int]) -> float | None:
        """The mean, or ``None`` when nothing was observed."""
        return state[0] / state[1] if state[1] else None

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return _record(namespace, "Mean", [("sum", "double"), ("count", "long")])

    def to_avro(self, state: tuple[float, int]) -> Any:
        return {"sum": state[0], "count": state[1]}

    def from_avro(self, data: Any) -> tuple[float, int]:
        return (float(data["sum"]), int(data["count"]))


class Last(Monoid[Any]):
    """Latest value wins: state ``None`` or ``(order, value)``; the greatest ``order`` wins.

    ``order`` is any comparable value, typically ``(event_time_or_offset, tiebreak)``.
    When two orders are equal the value with the greater ``repr`` wins, so the result never
    depends on merge order. Values are treated as immutable (never mutate them).

    ``value_type`` is an Avro type (``"string"``, ``"double"``, ``"long"``, any schema dict or
    union list) or ``"json"`` (any JSON data stored as a JSON string; arrays come back as
    lists). ``order_type`` uses the same specs as :class:`KeyedMap` keys (default two longs).
    """

    name = "Last"
    immutable_state = True

    def __init__(self, value_type: Any = "string", order_type: Any = ("long", "long")) -> None:
        self.value_type = value_type
        self.order_type = order_type
        self._value = _codec(value_type, hashable=False)
        self._order = _codec(order_type, hashable=True)

    def empty(self) -> Any:
        return None

    def combine(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        oa, ob = a[0], b[0]
        if oa != ob:
            return a if oa > ob else b
        return a if repr(a[1]) >= repr(b[1]) else b

    def absorb(self, acc: Any, value: Any) -> Any:
        return self.combine(acc, value)

    def copy(self, state: Any) -> Any:
        return state

    @staticmethod
    def lift(order: Any, value: Any) -> Any:
        """The state of one observation of ``value`` at ``order``."""
        return (order, value)

    @staticmethod
    def value(state: Any) -> Any:
        """The winning value, or ``None``."""
        return None if state is None else state[1]

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        rec = _record(
            namespace,
            "Last",
            [
                ("order", self._order.schema(namespace, "LastOrder")),
                ("value", self._value.schema(namespace, "LastValue")),
            ],
        )
        return ["null", rec]

    def to_avro(self, state: Any) -> Any:
        if state is None:
            return None
        return {"order": self._order.encode(state[0]), "value": self._value.encode(state[1])}

    def from_avro(self, data: Any) -> Any:
        if data is None:
            return None
        return (self._order.decode(data["order"]), self._value.decode(data["value"]))

    def describe(self) -> str:
        return f"Last({self._value.describe()})"


# --------------------------------------------------------------------------- collections


class SetUnion(Monoid[set[Any]]):
    """Set of distinct items (exact). State: a mutable ``set`` (``absorb`` is in place)."""

    name = "SetUnion"

    def __init__(self, item_type: Any = "string") -> None:
        self.item_type = item_type
        self._item = _codec(item_type, hashable=True)

    def empty(self) -> set[Any]:
        return set()

    def combine(self, a: set[Any], b: set[Any]) -> set[Any]:
        return a | b

    def absorb(self, acc: set[Any], value: set[Any]) -> set[Any]:
        acc |= value
        return acc

    def copy(self, state: set[Any]) -> set[Any]:
        return set(state)

    @staticmethod
    def lift(item: Any) -> set[Any]:
        """The state of one item."""
        return {item}

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return {"type": "array", "items": self._item.schema(namespace, "SetUnionItem")}

    def to_avro(self, state: set[Any]) -> Any:
        try:
            items = sorted(state)
        except TypeError:
            items = list(state)
        enc = self._item.encode
        return [enc(x) for x in items]

    def from_avro(self, data: Any) -> set[Any]:
        dec = self._item.decode
        return {dec(x) for x in data}

    def describe(self) -> str:
        return f"SetUnion({self._item.describe()})"


def _rank(kv: tuple[Any, Any]) -> tuple[Any, Any]:
    """Sort key of a TopK entry: best first (score descending, then item ascending)."""
    return (-kv[1], kv[0])


class TopK(Monoid[dict[Any, Any]]):
    """The ``k`` best items by score: state ``dict`` item -> score with at most ``k`` entries.

    Merging takes, per item, the maximum score, then keeps the ``k`` best entries ordered by
    score descending and item ascending (ties are broken on the item, so merge order never
    matters). This is associative and commutative: an entry dropped by a partial merge has
    ``k`` entries ranked above it whose scores can only grow.

    With monotonically growing scores (lift each item with its *running total*, e.g. the
    output of an upstream ``per_key(Count)`` bolt) the state is exactly the top ``k`` of the
    current totals. Lifting per-tuple increments instead gives the top ``k`` single
    increments, not totals.
    """

    name = "TopK"

    def __init__(self, k: int, item_type: Any = "string", score_type: str = "double") -> None:
        if k < 1:
            raise ValueError("TopK needs k >= 1")
        if score_type not in ("long", "double"):
            raise ValueError("score_type must be 'long' or 'double'")
        self.k = k
        self.item_type = item_type
        self.score_type = score_type
        self._item = _codec(item_type, hashable=True)

    def empty(self) -> dict[Any, Any]:
        return {}

    def combine(self, a: dict[Any, Any], b: dict[Any, Any]) -> dict[Any, Any]:
        if len(a) < len(b):
            a, b = b, a
        return self.absorb(dict(a), b)

    def absorb(self, acc: dict[Any, Any], value: dict[Any, Any]) -> dict[Any, Any]:
        get = acc.get
        for item, score in value.items():
            cur = get(item, _MISSING)
            if cur is _MISSING or score > cur:
                acc[item] = score
        excess = len(acc) - self.k
        if excess > 0:
            if excess == 1:
                del acc[max(acc.items(), key=_rank)[0]]
            else:
                keep = heapq.nsmallest(self.k, acc.items(), key=_rank)
                acc.clear()
                acc.update(keep)
        return acc

    def copy(self, state: dict[Any, Any]) -> dict[Any, Any]:
        return dict(state)

    @staticmethod
    def lift(item: Any, score: float) -> dict[Any, Any]:
        """The state of one scored item."""
        return {item: score}

    @staticmethod
    def top(state: dict[Any, Any]) -> list[tuple[Any, Any]]:
        """``[(item, score), ...]`` best first."""
        return sorted(state.items(), key=_rank)

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        entry = _record(
            namespace,
            "TopKEntry",
            [("item", self._item.schema(namespace, "TopKItem")), ("score", self.score_type)],
        )
        return {"type": "array", "items": entry}

    def to_avro(self, state: dict[Any, Any]) -> Any:
        enc = self._item.encode
        return [{"item": enc(i), "score": s} for i, s in self.top(state)]

    def from_avro(self, data: Any) -> dict[Any, Any]:
        dec = self._item.decode
        return {dec(e["item"]): e["score"] for e in data}

    def describe(self) -> str:
        return f"TopK({self.k})"


# --------------------------------------------------------------------------- sketches

_NONZERO = re.compile(rb"[^\x00]")


class HyperLogLog(Monoid[bytearray]):
    """Approximate distinct count (HyperLogLog with a 64-bit blake2b hash).

    State: ``bytearray`` of ``m = 2**precision`` registers (``m`` bytes; the relative error is
    about ``1.04 / sqrt(m)``, 1.6% at the default precision 12). Merge is register-wise max.
    ``absorb`` of a lifted item only touches its one register. For ``per_key`` use consider a
    lower precision: every key costs ``m`` bytes.
    """

    name = "HyperLogLog"

    def __init__(self, precision: int = 12) -> None:
        if not 4 <= precision <= 18:
            raise ValueError("HyperLogLog precision must be in 4..18")
        self.precision = precision
        self.m = 1 << precision
        self._rest_bits = 64 - precision
        self._rest_mask = (1 << self._rest_bits) - 1
        m = self.m
        self._alpha = {16: 0.673, 32: 0.697, 64: 0.709}.get(m, 0.7213 / (1 + 1.079 / m))

    def empty(self) -> bytearray:
        return bytearray(self.m)

    def _register(self, item: Any) -> tuple[int, int]:
        h = int.from_bytes(stable_hash(item), "big")
        rest = h & self._rest_mask
        return h >> self._rest_bits, self._rest_bits - rest.bit_length() + 1

    def lift(self, item: Any) -> bytearray:
        """The state of one item."""
        regs = bytearray(self.m)
        idx, rank = self._register(item)
        regs[idx] = rank
        return regs

    def add(self, state: bytearray, item: Any) -> bytearray:
        """``absorb(state, lift(item))`` without allocating (mutates ``state``)."""
        idx, rank = self._register(item)
        if rank > state[idx]:
            state[idx] = rank
        return state

    def combine(self, a: bytearray, b: bytearray) -> bytearray:
        if a.count(0) > b.count(0):
            a, b = b, a  # copy the denser one, absorb the sparser one
        return self.absorb(bytearray(a), b)

    def absorb(self, acc: bytearray, value: bytearray) -> bytearray:
        nonzero = len(value) - value.count(0)
        if nonzero == 1:  # a lifted item: the hot path
            i = len(value.rstrip(b"\x00")) - 1
            r = value[i]
            if r > acc[i]:
                acc[i] = r
        elif nonzero <= len(value) >> 4:
            for match in _NONZERO.finditer(value):
                i = match.start()
                r = value[i]
                if r > acc[i]:
                    acc[i] = r
        else:
            acc[:] = bytes(map(max, acc, value))
        return acc

    def copy(self, state: bytearray) -> bytearray:
        return bytearray(state)

    def estimate(self, state: bytearray) -> float:
        """Estimated number of distinct items (bias-corrected, linear counting when small)."""
        m = self.m
        total = math.fsum(2.0**-r for r in state)
        est = self._alpha * m * m / total
        zeros = state.count(0)
        if est <= 2.5 * m and zeros:
            return m * math.log(m / zeros)
        return est

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return _record(namespace, "HyperLogLog", [("precision", "int"), ("registers", "bytes")])

    def to_avro(self, state: bytearray) -> Any:
        return {"precision": self.precision, "registers": bytes(state)}

    def from_avro(self, data: Any) -> bytearray:
        if data["precision"] != self.precision or len(data["registers"]) != self.m:
            raise ValueError(f"snapshot has precision {data['precision']}, not {self.precision}")
        return bytearray(data["registers"])

    def describe(self) -> str:
        return f"HyperLogLog(p={self.precision})"


class CountMinSketch(Monoid[dict[int, int]]):
    """Approximate per-item counts; never underestimates non-negative counts.

    The state is the ``depth x width`` counter grid stored sparsely: ``dict`` flat cell index
    (``row * width + column``) -> counter, zero counters omitted (so equal grids are equal
    dicts). Snapshots store the dense row-major grid. Row ``i`` of an item is
    ``(h1 + i * h2) % width`` with ``h1, h2`` from a stable 128-bit blake2b hash. Error: at
    most ``e / width * total`` with probability ``1 - exp(-depth)``.
    """

    name = "CountMinSketch"

    def __init__(self, width: int = 2048, depth: int = 5) -> None:
        if width < 1 or depth < 1:
            raise ValueError("CountMinSketch needs width >= 1 and depth >= 1")
        self.width = width
        self.depth = depth

    def cells(self, item: Any) -> list[int]:
        """Flat indexes of the ``depth`` counters of ``item``."""
        digest = stable_hash(item, 16)
        h1 = int.from_bytes(digest[:8], "big")
        h2 = int.from_bytes(digest[8:], "big") | 1
        w = self.width
        return [i * w + (h1 + i * h2) % w for i in range(self.depth)]

    def empty(self) -> dict[int, int]:
        return {}

    def lift(self, item: Any, count: int = 1) -> dict[int, int]:
        """The state of ``count`` occurrences of ``item``."""
        return dict.fromkeys(self.cells(item), count) if count else {}

    def add(self, state: dict[int, int], item: Any, count: int = 1) -> dict[int, int]:
        """``absorb(state, lift(item, count))`` (mutates ``state``)."""
        return self.absorb(state, self.lift(item, count))

    def estimate(self, state: dict[int, int], item: Any) -> int:
        """Estimated count of ``item`` (an upper bound when all counts are non-negative)."""
        get = state.get
        return min(get(c, 0) for c in self.cells(item))

    def combine(self, a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
        if len(a) < len(b):
            a, b = b, a
        return self.absorb(dict(a), b)

    def absorb(self, acc: dict[int, int], value: dict[int, int]) -> dict[int, int]:
        get = acc.get
        for cell, v in value.items():
            n = get(cell, 0) + v
            if n:
                acc[cell] = n
            else:
                acc.pop(cell, None)
        return acc

    def copy(self, state: dict[int, int]) -> dict[int, int]:
        return dict(state)

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return _record(
            namespace,
            "CountMinSketch",
            [
                ("width", "int"),
                ("depth", "int"),
                ("counters", {"type": "array", "items": "long"}),
            ],
        )

    def to_avro(self, state: dict[int, int]) -> Any:
        get = state.get
        grid = [get(i, 0) for i in range(self.width * self.depth)]
        return {"width": self.width, "depth": self.depth, "counters": grid}

    def from_avro(self, data: Any) -> dict[int, int]:
        if data["width"] != self.width or data["depth"] != self.depth:
            got = f"{data['width']}x{data['depth']}"
            raise ValueError(f"snapshot sketch is {got}, not {self.width}x{self.depth}")
        return {i: c for i, c in enumerate(data["counters"]) if c}

    def describe(self) -> str:
        return f"CountMinSketch({self.width}x{self.depth})"


# --------------------------------------------------------------------------- per key


class KeyedMap(Monoid[dict[Any, Any]]):
    """One ``inner`` state per key: state ``dict`` key -> inner state.

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

    def __init__(self, inner: Monoid[Any], key_type: Any = "string") -> None:
        self.inner = inner
        self.key_type = key_type
        self._key = _codec(key_type, hashable=True)
        self._additive = type(inner) in (Count, Sum)
        self._immutable = inner.immutable_state

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
        elif self._immutable:
            get = acc.get
            combine = self.inner.combine
            for k, v in value.items():
                cur = get(k, _MISSING)
                acc[k] = v if cur is _MISSING else combine(cur, v)
        else:
            inner = self.inner
            for k, v in value.items():
                cur = acc.get(k, _MISSING)
                acc[k] = inner.copy(v) if cur is _MISSING else inner.absorb(cur, v)
        return acc

    def copy(self, state: dict[Any, Any]) -> dict[Any, Any]:
        if self._immutable:
            return dict(state)
        copy = self.inner.copy
        return {k: copy(v) for k, v in state.items()}

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
        _check_kind(key, self._key.classes, f"{self.describe()}'s key")

    def check_keys(self, keys: Sequence[Any]) -> None:
        """:meth:`check_key` for a batch."""
        classes = self._key.classes
        if classes is not None:
            _check_kinds(keys, classes, f"{self.describe()}'s key", frozenset(classes))

    def get(self, state: dict[Any, Any], key: Any) -> Any:
        """The inner state of ``key`` (a fresh identity when absent)."""
        v = state.get(key, _MISSING)
        return self.inner.empty() if v is _MISSING else v

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        entry = _record(
            namespace,
            "PerKeyEntry",
            [
                ("key", self._key.schema(namespace, "PerKeyKey")),
                ("value", self.inner.avro_schema_in(f"{namespace}.per_key")),
            ],
        )
        return {"type": "array", "items": entry}

    def to_avro(self, state: dict[Any, Any]) -> Any:
        enc = self._key.encode
        to_avro = self.inner.to_avro
        return [{"key": enc(k), "value": to_avro(v)} for k, v in _sorted_items(state)]

    def from_avro(self, data: Any) -> dict[Any, Any]:
        dec = self._key.decode
        from_avro = self.inner.from_avro
        return {dec(e["key"]): from_avro(e["value"]) for e in data}

    def describe(self) -> str:
        key = "" if self.key_type == "string" else f", key={self._key.describe()}"
        return f"per_key({self.inner.describe()}{key})"


def per_key(inner: Monoid[Any], key_type: Any = "string") -> KeyedMap:
    """``KeyedMap(inner, key_type)``: one ``inner`` state per key."""
    return KeyedMap(inner, key_type)


# --------------------------------------------------------------------------- windows

WindowState = tuple[Any, dict[Any, Any]]
"""``(max_event_time_seen or None, {window_start: inner_state})``."""


class Window(Monoid[WindowState]):
    """Event-time windows over ``inner``.

    State ``(max_event_time_seen, {window_start: inner_state})``; the identity is
    ``(None, {})``. Window ``s`` covers ``[s, s + size)``. Event times come from the caller
    (:meth:`lift`) in any unit, consistently with ``size`` (integers recommended: epoch
    seconds or milliseconds; ``time_type="double"`` allows floats).

    Expiry: after a merge, a bucket whose end ``s + size <= max_event_time_seen -
    retention`` is dropped, and so is incoming data for such a window (it is too late).
    ``retention`` defaults to ``size``, which keeps the current and the previous window.
    Merge stays associative and commutative: the threshold only grows with the maximum
    time and filtering by key commutes with merging, so any merge order ends with the same
    buckets. A single far-future event time expires everything older; sanitize times
    upstream.
    """

    _kind = "window"
    _record_name = "Window"

    def __init__(
        self,
        size: float,
        inner: Monoid[Any],
        retention: float | None,
        time_type: str,
        unit: str,
    ) -> None:
        if size <= 0:
            raise ValueError("window size must be > 0")
        if retention is not None and retention < 0:
            raise ValueError("retention must be >= 0")
        if time_type not in ("long", "double"):
            raise ValueError("time_type must be 'long' or 'double'")
        self.size = size
        self.inner = inner
        self.retention = size if retention is None else retention
        self.time_type = time_type
        self.unit = unit
        self._immutable = inner.immutable_state

    def window_starts(self, event_time: float) -> list[Any]:
        """Starts of the windows covering ``event_time``."""
        raise NotImplementedError

    def check_time(self, event_time: Any) -> None:
        """Raise ``TypeError``/``ValueError`` for an event time the state (and its Avro
        snapshot) cannot hold: ``time_type="long"`` takes 64-bit ints, ``"double"`` finite
        numbers."""
        if self.time_type == "long" and isinstance(event_time, bool):
            raise TypeError(f"{self.describe()}'s event time is a bool")
        _check_number(event_time, self.time_type, f"{self.describe()}'s event time")

    def empty(self) -> WindowState:
        return (None, {})

    def lift(self, event_time: float, inner_value: Any) -> WindowState:
        """The state of ``inner_value`` observed at ``event_time`` (in every covering window)."""
        starts = self.window_starts(event_time)
        buckets = {starts[0]: inner_value}
        copy = self.inner.copy
        for s in starts[1:]:
            buckets[s] = copy(inner_value)
        return (event_time, buckets)

    def combine(self, a: WindowState, b: WindowState) -> WindowState:
        if len(a[1]) < len(b[1]):
            a, b = b, a
        return self.absorb(self.copy(a), b)

    def absorb(self, acc: WindowState, value: WindowState) -> WindowState:
        t_acc, buckets = acc
        t_val, incoming = value
        if t_val is None:
            return acc
        if t_acc is None or t_val > t_acc:
            t = t_val
            horizon = t - self.retention - self.size  # a start <= horizon is expired
            if buckets:
                for s in [s for s in buckets if s <= horizon]:
                    del buckets[s]
        else:
            t = t_acc
            horizon = t - self.retention - self.size
        inner = self.inner
        for s, v in incoming.items():
            if s <= horizon:
                continue
            cur = buckets.get(s, _MISSING)
            if cur is _MISSING:
                buckets[s] = v if self._immutable else inner.copy(v)
            else:
                buckets[s] = inner.absorb(cur, v)
        return (t, buckets)

    def copy(self, state: WindowState) -> WindowState:
        t, buckets = state
        if self._immutable:
            return (t, dict(buckets))
        copy = self.inner.copy
        return (t, {s: copy(v) for s, v in buckets.items()})

    def windows(self, state: WindowState) -> list[tuple[Any, Any, Any]]:
        """``[(start, end, inner_state), ...]`` sorted by start."""
        return [(s, s + self.size, v) for s, v in sorted(state[1].items())]

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        name = self._record_name
        bucket = _record(
            namespace,
            f"{name}Bucket",
            [
                ("start", self.time_type),
                ("value", self.inner.avro_schema_in(f"{namespace}.{self._kind}")),
            ],
        )
        return _record(
            namespace,
            name,
            [
                ("max_event_time", ["null", self.time_type]),
                ("buckets", {"type": "array", "items": bucket}),
            ],
        )

    def to_avro(self, state: WindowState) -> Any:
        t, buckets = state
        to_avro = self.inner.to_avro
        return {
            "max_event_time": t,
            "buckets": [{"start": s, "value": to_avro(v)} for s, v in sorted(buckets.items())],
        }

    def from_avro(self, data: Any) -> WindowState:
        from_avro = self.inner.from_avro
        return (
            data["max_event_time"],
            {b["start"]: from_avro(b["value"]) for b in data["buckets"]},
        )

    def _extra(self) -> str:
        if self.retention == self.size:
            return ""
        return f", retention={self.retention}{self.unit}"


class TumblingWindow(Window):
    """Fixed, non-overlapping windows ``[n * size, (n + 1) * size)`` over ``inner``.

    See :class:`Window` for state, expiry (``retention``, default ``size``) and laws.

    >>> w = TumblingWindow(60, Count())
    >>> w.combine(w.lift(59, 1), w.lift(61, 1))
    (61, {0: 1, 60: 1})
    >>> w.combine(w.lift(130, 1), w.lift(59, 1))  # [0, 60) ended at 60 <= 130 - 60
    (130, {120: 1})
    """

    name = "tumbling"
    _kind = "tumbling"
    _record_name = "Tumbling"

    def __init__(
        self,
        size: float,
        inner: Monoid[Any],
        retention: float | None = None,
        *,
        time_type: str = "long",
        unit: str = "s",
    ) -> None:
        super().__init__(size, inner, retention, time_type, unit)

    def window_starts(self, event_time: float) -> list[Any]:
        return [event_time - event_time % self.size]

    def describe(self) -> str:
        return f"tumbling({self.size}{self.unit}, {self.inner.describe()}{self._extra()})"


class SlidingWindow(Window):
    """Overlapping windows ``[n * slide, n * slide + size)`` over ``inner``.

    A value lands in every window covering its event time (``ceil(size / slide)`` of them).
    See :class:`Window` for state, expiry (``retention``, default ``size``) and laws.
    """

    name = "sliding"
    _kind = "sliding"
    _record_name = "Sliding"

    def __init__(
        self,
        size: float,
        slide: float,
        inner: Monoid[Any],
        retention: float | None = None,
        *,
        time_type: str = "long",
        unit: str = "s",
    ) -> None:
        if slide <= 0:
            raise ValueError("slide must be > 0")
        super().__init__(size, inner, retention, time_type, unit)
        self.slide = slide

    def window_starts(self, event_time: float) -> list[Any]:
        s = event_time - event_time % self.slide
        low = event_time - self.size
        starts = []
        while s > low:
            starts.append(s)
            s -= self.slide
        return starts

    def describe(self) -> str:
        return (
            f"sliding({self.size}{self.unit} every {self.slide}{self.unit}, "
            f"{self.inner.describe()}{self._extra()})"
        )


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

    def empty(self) -> dict[str, Any]:
        return {name: m.empty() for name, m in self.fields.items()}

    def combine(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {name: m.combine(a[name], b[name]) for name, m in self.fields.items()}

    def absorb(self, acc: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
        for name, m in self.fields.items():
            acc[name] = m.absorb(acc[name], value[name])
        return acc

    def copy(self, state: dict[str, Any]) -> dict[str, Any]:
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
        unknown = set(values) - set(self.fields)
        if unknown:
            raise KeyError(f"Record has no field(s) {sorted(unknown)}")
        return {
            name: values[name] if name in values else m.empty() for name, m in self.fields.items()
        }

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return _record(
            namespace,
            "Record",
            [(name, m.avro_schema_in(f"{namespace}.{name}")) for name, m in self.fields.items()],
        )

    def to_avro(self, state: dict[str, Any]) -> Any:
        return {name: m.to_avro(state[name]) for name, m in self.fields.items()}

    def from_avro(self, data: Any) -> dict[str, Any]:
        return {name: m.from_avro(data[name]) for name, m in self.fields.items()}

    def describe(self) -> str:
        inner = ", ".join(f"{name}={m.describe()}" for name, m in self.fields.items())
        return f"Record({inner})"
