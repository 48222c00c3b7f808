"""Scalar monoids: :class:`Sum`, :class:`Count`, :class:`Min`, :class:`Max`,
:class:`Mean` and :class:`Last`. Pure.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from functools import reduce
from typing import Any, ClassVar

from hailstorm.monoids.avro import (
    LONG_MAX,
    LONG_MIN,
    PRIMITIVE_CLASSES,
    check_kind,
    check_kinds,
    check_number,
    codec,
    record,
)
from hailstorm.monoids.avro_columns import check_length
from hailstorm.monoids.base import DEFAULT_NAMESPACE, Monoid

__all__ = ["Count", "Last", "Max", "Mean", "Min", "Sum"]


class Sum(Monoid[Any]):
    """Sum of numbers; ``kind`` is ``"long"`` (exact ints) or ``"double"`` (floats).

    Float addition is not exactly associative: ``"double"`` sums may differ in the last bits
    depending on merge order. Use ``"long"`` (e.g. cents, milliseconds) for exact totals.
    """

    name = "Sum"
    immutable_state = True
    avro_as_is = True

    def __init__(self, kind: str = "long") -> None:
        if kind not in ("long", "double"):
            raise ValueError(f"Sum kind must be 'long' or 'double', not {kind!r}")
        self.kind = kind
        self._zero: int | float = 0 if kind == "long" else 0.0
        self._classes = PRIMITIVE_CLASSES[kind]

    def empty(self) -> Any:
        return self._zero

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def absorb(self, acc: Any, value: Any) -> Any:
        return acc + value

    def combine_all(self, values: Iterable[Any]) -> Any:
        if self.kind == "long" and self._merges_as(Sum):
            return sum(values)
        # Doubles are added onto the first as the default fold does: ``sum`` would start
        # from 0 (an int sum turned float, -0.0 turned 0.0) and may compensate float
        # rounding (other last bits).
        return super().combine_all(values)

    def copy(self, state: Any) -> Any:
        return state

    def check(self, value: Any) -> None:
        check_number(value, self.kind, self)

    def check_many(self, values: Sequence[Any]) -> None:
        check_kinds(values, self._classes, self, frozenset(self._classes))
        if not values or values.count(1) == len(values):  # counts: ones only
            return
        if (not all(map(math.isfinite, values)) if self.kind == "double"
                else not LONG_MIN <= min(values) <= max(values) <= LONG_MAX):
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
        self._codec = codec(kind, hashable=True)

    def empty(self) -> Any:
        return None

    def copy(self, state: Any) -> Any:
        return state

    def check(self, value: Any) -> None:
        if value is not None:
            check_kind(value, self._codec.classes, self)

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


_TUPLE, _PAIR, _INT = frozenset({tuple}), frozenset({2}), frozenset({int})
_NUMBER_TYPES = frozenset({int, float})


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

    def combine_all(self, values: Iterable[tuple[float, int]]) -> tuple[float, int]:
        if not self._merges_as(Mean):
            return super().combine_all(values)
        states = values if isinstance(values, Sequence) else list(values)
        if not states:
            return self.empty()
        sums = map(operator.itemgetter(0), states)
        first = next(sums)  # the sums added onto the first, as in Sum("double")
        return (reduce(operator.add, sums, first), sum(map(operator.itemgetter(1), states)))

    def copy(self, state: tuple[float, int]) -> tuple[float, int]:
        return state

    def check(self, value: Any) -> None:
        if not (isinstance(value, tuple) and len(value) == 2):
            raise TypeError(f"Mean takes (sum, count) pairs (Mean.lift(x)), not {value!r:.80}")
        check_kind(value[0], (int, float), "Mean's sum")
        check_kind(value[1], (int,), "Mean's count")

    def check_many(self, values: Sequence[Any]) -> None:
        # By the sets of types and lengths, C loops; value by value (naming the refused
        # one) unless every value is a plain pair of a float or int and an int, or when a
        # subclass checks its own way.
        if (type(self).check is Mean.check
                and set(map(type, values)) <= _TUPLE and set(map(len, values)) <= _PAIR
                and set(map(type, map(operator.itemgetter(0), values))) <= _NUMBER_TYPES
                and set(map(type, map(operator.itemgetter(1), values))) <= _INT):
            return
        super().check_many(values)

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
        return record(namespace, "Mean", [("sum", "double"), ("count", "long")])

    def to_avro(self, state: tuple[float, int]) -> Any:
        return {"sum": state[0], "count": state[1]}

    def avro_column(self, states: Sequence[tuple[float, int]]) -> Any:
        return {"sum": [s for s, _ in states], "count": [n for _, n in states]}

    def from_avro_column(self, column: Any, size: int) -> list[tuple[float, int]]:
        sums, counts = column["sum"], column["count"]
        check_length(sums, size)
        check_length(counts, size)
        return list(zip(map(float, sums), map(int, counts), strict=True))

    def from_avro(self, data: Any) -> tuple[float, int]:
        return (float(data["sum"]), int(data["count"]))


def canonical_text(value: Any) -> str:
    """``repr(value)`` with every dict's items sorted (by their text) and tuples written as
    lists: the same for a value and for what it becomes after a round trip through a
    snapshot, whatever order its dicts' keys were inserted in."""
    if isinstance(value, dict):
        items = sorted(f"{canonical_text(k)}: {canonical_text(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(canonical_text(v) for v in value) + "]"
    return repr(value)


class Last(Monoid[Any]):
    """Latest value wins: state ``None`` or ``(order, value)``; the greatest ``order`` wins.

    ``order`` is any comparable value, typically ``(event_time_or_offset, tiebreak)``.
    When two orders are equal the value whose canonical text is greater wins (its ``repr``
    with dict items sorted and tuples written as lists: :func:`canonical_text`), so the
    result depends neither on merge order nor on whether a value came back from a snapshot
    (the JSON codec sorts keys and turns tuples into lists, Avro records come back in field
    order). Values are treated as immutable (never mutate them).

    ``value_type`` is an Avro type (``"string"``, ``"double"``, ``"long"``, any schema dict or
    union list) or ``"json"`` (any JSON data stored as a JSON string; arrays come back as
    lists). ``order_type`` uses the same specs as :class:`KeyedMap` keys (default two longs).
    """

    name = "Last"
    immutable_state = True

    def __init__(self, value_type: Any = "string", order_type: Any = ("long", "long")) -> None:
        self.value_type = value_type
        self.order_type = order_type
        self._value = codec(value_type, hashable=False)
        self._order = codec(order_type, hashable=True)

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
        return a if canonical_text(a[1]) >= canonical_text(b[1]) else b

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
        rec = record(
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
