"""Monoids holding items: :class:`SetUnion` (distinct items, exact), :class:`Events`
(distinct events by id, with their values) and :class:`TopK` (the ``k`` best items by
score). Pure.
"""

from __future__ import annotations

import heapq
from typing import Any

from hailstorm.monoids.avro import check_kind, codec, record, sorted_items
from hailstorm.monoids.base import DEFAULT_NAMESPACE, MISSING, Monoid
from hailstorm.monoids.scalars import canonical_text

__all__ = ["Events", "SetUnion", "TopK"]


class SetUnion(Monoid[set[Any]]):
    """Set of distinct items (exact). State: a mutable ``set`` (``absorb`` is in place)."""

    name = "SetUnion"

    def __init__(self, item_type: Any = "string") -> None:
        self.item_type = item_type
        self._item = codec(item_type, hashable=True)

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


class _DictState(Monoid[dict[Any, Any]]):
    """A state held as a ``dict``, merged by absorbing the smaller into a copy of the larger
    (subclasses define ``absorb``)."""

    def empty(self) -> dict[Any, Any]:
        return {}

    def combine(self, a: dict[Any, Any], b: dict[Any, Any]) -> dict[Any, Any]:
        if len(a) < len(b):
            a, b = b, a
        return self.absorb(dict(a), b)


class Events(_DictState):
    """Distinct events by id, with their values: state ``dict`` id -> value.

    Merging is the union of the ids. Should two states hold different values under one id
    (the same event seen twice with different content), the value with the greater
    canonical text wins (:func:`~hailstorm.monoids.scalars.canonical_text`: its ``repr``
    with dict items sorted, the same before and after a snapshot), so the result never
    depends on merge order; ids are meant to identify
    events (a Kafka ``(partition, offset)``, an event id), and then this never happens.
    Values are treated as immutable (never mutate them). ``id_type`` uses the key specs of
    :class:`~hailstorm.monoids.KeyedMap` (``"string"``, ``"long"``, tuples of those);
    ``value_type`` is an Avro type or ``"json"`` (any JSON data, stored as a JSON string).

    >>> e = Events("json", id_type="long")
    >>> e.combine(e.lift(2, {"page": "b"}), e.lift(1, {"page": "a"}))
    {2: {'page': 'b'}, 1: {'page': 'a'}}
    >>> Events.ordered({2: "b", 1: "a"})
    [(1, 'a'), (2, 'b')]
    """

    name = "Events"

    def __init__(self, value_type: Any = "json", id_type: Any = "string") -> None:
        self.value_type = value_type
        self.id_type = id_type
        self._id = codec(id_type, hashable=True)
        self._value = codec(value_type, hashable=False)

    def absorb(self, acc: dict[Any, Any], value: dict[Any, Any]) -> dict[Any, Any]:
        for event_id, v in value.items():
            current = acc.get(event_id, MISSING)
            if current is MISSING or (current is not v
                                      and canonical_text(v) > canonical_text(current)):
                acc[event_id] = v
        return acc

    def copy(self, state: dict[Any, Any]) -> dict[Any, Any]:
        return dict(state)

    def check(self, value: Any) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"{self.describe()} takes dicts id -> value (Events.lift(id, value)),"
                            f" not {value!r:.80}")
        id_classes, value_classes = self._id.classes, self._value.classes
        as_json = self.value_type == "json"
        for event_id, v in value.items():
            check_kind(event_id, id_classes, self)
            check_kind(v, value_classes, self)
            if as_json and self._round_trip(v) != v:
                raise ValueError(f"{self.describe()}: the value {v!r:.80} does not survive a "
                                 "snapshot as JSON (use dicts, lists, strings, numbers, "
                                 "booleans and None)")

    def _round_trip(self, v: Any) -> Any:
        try:
            return self._value.decode(self._value.encode(v))
        except (TypeError, ValueError):
            return MISSING

    @staticmethod
    def lift(event_id: Any, value: Any) -> dict[Any, Any]:
        """The state of one event: ``{event_id: value}``."""
        return {event_id: value}

    @staticmethod
    def ordered(state: dict[Any, Any]) -> list[tuple[Any, Any]]:
        """``[(id, value), ...]`` sorted by id: the events in an order independent of how
        the state was built."""
        return sorted_items(state)

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        entry = record(namespace, "Event", [
            ("id", self._id.schema(namespace, "EventId")),
            ("value", self._value.schema(namespace, "EventValue")),
        ])
        return {"type": "array", "items": entry}

    def to_avro(self, state: dict[Any, Any]) -> Any:
        enc_id, enc_value = self._id.encode, self._value.encode
        return [{"id": enc_id(k), "value": enc_value(v)} for k, v in sorted_items(state)]

    def from_avro(self, data: Any) -> dict[Any, Any]:
        dec_id, dec_value = self._id.decode, self._value.decode
        return {dec_id(e["id"]): dec_value(e["value"]) for e in data}

    def describe(self) -> str:
        return f"Events({self._value.describe()} by {self._id.describe()})"


def _rank(kv: tuple[Any, Any]) -> tuple[Any, Any]:
    """Sort key of a TopK entry: best first (score descending, then item ascending)."""
    return (-kv[1], kv[0])


class TopK(_DictState):
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
        self._item = codec(item_type, hashable=True)

    def absorb(self, acc: dict[Any, Any], value: dict[Any, Any]) -> dict[Any, Any]:
        if len(value) == 1 and len(acc) == self.k:  # one lifted item against a full top
            ((item, score),) = value.items()
            cur = acc.get(item, MISSING)
            if cur is MISSING:
                if score < min(acc.values()):
                    return acc  # all k entries rank above it: it would be dropped at once
            elif not score > cur:
                return acc  # its entry keeps the higher score
        get = acc.get
        for item, score in value.items():
            cur = get(item, MISSING)
            if cur is MISSING or score > cur:
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
        entry = record(
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
