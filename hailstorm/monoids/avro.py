"""The Avro codec layer of the library monoids (private to :mod:`hailstorm.monoids`).

A :class:`Codec` maps Python keys, items, orders and values to and from Avro data, built
from a type spec by :func:`codec`; :func:`record` builds a named record schema; the checks
(:func:`check_kind`, :func:`check_number`) refuse values an Avro type cannot hold, so a bad
record is quarantined instead of breaking a state's snapshot. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

__all__ = [
    "LONG_MAX",
    "LONG_MIN",
    "PRIMITIVE_CLASSES",
    "Codec",
    "check_kind",
    "check_kinds",
    "check_number",
    "codec",
    "record",
    "sorted_items",
    "sorted_keys",
]

_PRIMITIVES = frozenset({"string", "long", "int", "double", "boolean", "bytes"})


def record(namespace: str, name: str, fields: list[tuple[str, Any]]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": f"{namespace}.{name}",
        "fields": [{"name": n, "type": t} for n, t in fields],
    }


def sorted_keys(d: Mapping[Any, Any]) -> list[Any]:
    """Keys sorted when they are comparable (deterministic snapshots), else as they are.

    Tuples of one length sort one position at a time, last first (stable sorts, so the
    order is the tuples' own): comparing whole tuples whose first parts repeat (a country
    before each user) re-compares the equal parts every time, 2-3 times slower. (A NaN
    part, equal to nothing, may place its key elsewhere than ``sorted`` does; the order
    is still the same for the same keys in the same order.)"""
    keys = list(d)
    if keys and type(keys[0]) is tuple and _one_tuple_length(keys):
        try:
            for position in reversed(range(len(keys[0]))):
                keys.sort(key=itemgetter(position))
            return keys
        except TypeError:  # a position mixes types the whole tuples may never compare
            keys = list(d)
    try:
        keys.sort()
    except TypeError:
        return list(d)
    return keys


def _one_tuple_length(keys: list[Any]) -> bool:
    """Every one of ``keys`` is a plain ``tuple`` of the same length."""
    return set(map(type, keys)) == {tuple} and len(set(map(len, keys))) == 1


def sorted_items(d: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """Items in the order of :func:`sorted_keys`."""
    return [(k, d[k]) for k in sorted_keys(d)]


def _tuplify(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    return x


LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
"""The range of Avro's ``long``."""

PRIMITIVE_CLASSES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "long": (int,),
    "int": (int,),
    "double": (int, float),
    "boolean": (bool,),
    "bytes": (bytes, bytearray),
}


def check_kinds(values: Sequence[Any], classes: tuple[type, ...] | None, what: Any,
                 allowed: frozenset[type]) -> None:
    """:func:`check_kind` for a batch: by the set of their types when it is ``allowed``,
    else value by value."""
    if classes is not None and not set(map(type, values)) <= allowed:
        for value in values:
            check_kind(value, classes, what)


def check_number(value: Any, kind: str, what: Any) -> None:
    """Raise unless ``value`` fits Avro's ``kind``: ``"long"`` an int within 64 bits,
    ``"double"`` a finite int or float (``what`` as for :func:`check_kind`)."""
    check_kind(value, PRIMITIVE_CLASSES[kind], what)
    if kind == "long" and not LONG_MIN <= value <= LONG_MAX:
        raise ValueError(f"{_taker(what)}: {value} is out of the 64-bit range")
    if kind == "double" and not math.isfinite(value):
        raise ValueError(f"{_taker(what)}: {value} is not finite")


def _taker(what: Any) -> str:
    return what if isinstance(what, str) else what.describe()


def check_kind(value: Any, classes: tuple[type, ...] | None, what: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is one of ``classes`` (None: anything);
    ``what`` names the taker: a string, or a monoid (described only on failure)."""
    if classes is not None and not isinstance(value, classes):
        names = " or ".join(c.__name__ for c in classes)
        raise TypeError(
            f"{_taker(what)} takes {names} values, not {type(value).__name__} {value!r:.80}")


class Codec:
    """Maps Python values (keys, items, orders, values) to and from Avro data."""

    classes: tuple[type, ...] | None = None
    """The Python types a value must have (None: not checked)."""

    def schema(self, namespace: str, name: str) -> Any:
        raise NotImplementedError

    def encode(self, x: Any) -> Any:
        return x

    def decode(self, d: Any) -> Any:
        return d

    def column(self, xs: Sequence[Any]) -> Any:
        """The nested column (:func:`hailstorm.monoids.avro_columns.stripe`) of the Avro
        data of ``xs``, built from the values directly."""
        return list(xs) if self.as_is else list(map(self.encode, xs))

    @property
    def as_is(self) -> bool:
        """Values are their own Avro data (:meth:`encode` and :meth:`decode` do nothing)."""
        return type(self).encode is Codec.encode and type(self).decode is Codec.decode

    def describe(self) -> str:
        raise NotImplementedError


class _Primitive(Codec):
    def __init__(self, avro_type: str) -> None:
        self.avro_type = avro_type
        self.classes = PRIMITIVE_CLASSES[avro_type]

    def schema(self, namespace: str, name: str) -> Any:
        return self.avro_type

    def describe(self) -> str:
        return self.avro_type


class _Json(Codec):
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


class _Tuple(Codec):
    """A tuple stored as a record with fields ``k0, k1, ...``."""

    def __init__(self, parts: list[Codec]) -> None:
        self.parts = parts
        self.fields = [f"k{i}" for i in range(len(parts))]
        self._parts_as_is = all(p.as_is for p in parts)
        """Every part is its own Avro data: a tuple and its record map field by field."""

    def schema(self, namespace: str, name: str) -> Any:
        pairs = zip(self.fields, self.parts, strict=True)
        return record(namespace, name, [(f, p.schema(namespace, f"{name}_{f}")) for f, p in pairs])

    def encode(self, x: Any) -> Any:
        if len(x) != len(self.parts):
            raise ValueError(f"expected a {len(self.parts)}-tuple, got {x!r}")
        if self._parts_as_is:
            return dict(zip(self.fields, x, strict=True))
        return {f: p.encode(v) for f, p, v in zip(self.fields, self.parts, x, strict=True)}

    def decode(self, d: Any) -> Any:
        if self._parts_as_is:
            return tuple(map(d.__getitem__, self.fields))
        return tuple(p.decode(d[f]) for f, p in zip(self.fields, self.parts, strict=True))

    def column(self, xs: Sequence[Any]) -> Any:
        """One column per field, each part's own (no record per tuple)."""
        if any(len(x) != len(self.parts) for x in xs):
            wrong = next(x for x in xs if len(x) != len(self.parts))
            raise ValueError(f"expected a {len(self.parts)}-tuple, got {wrong!r}")
        parts = list(zip(*xs, strict=True)) if xs else [() for _ in self.parts]
        return {f: p.column(part) for f, p, part in zip(self.fields, self.parts, parts,
                                                         strict=True)}

    def describe(self) -> str:
        return "(" + ", ".join(p.describe() for p in self.parts) + ")"


class _Raw(Codec):
    """An explicit Avro schema; values pass through unchanged."""

    def __init__(self, schema: Any) -> None:
        self.raw = schema

    def schema(self, namespace: str, name: str) -> Any:
        return self.raw

    def describe(self) -> str:
        return "avro"


def codec(spec: Any, *, hashable: bool) -> Codec:
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
        return _Tuple([codec(s, hashable=True) for s in spec])
    elif isinstance(spec, dict | list) and not hashable:
        return _Raw(spec)
    kinds = "an Avro primitive, 'json', or a tuple of those"
    raise ValueError(f"unsupported type {spec!r}: use {kinds}")
