"""Time to live in event time: :class:`Ttl`, a key's state that starts afresh after a gap.
Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import add, itemgetter
from typing import Any, Generic, TypeVar

from hailstorm.monoids.avro import record
from hailstorm.monoids.base import DEFAULT_NAMESPACE, Monoid
from hailstorm.monoids.scalars import Count, Sum
from hailstorm.monoids.windows import EventTimed

__all__ = ["Sessions", "Ttl"]

V = TypeVar("V")
"""The inner monoid's states."""

Sessions = tuple[Any, ...]
"""``(start_1, end_1, inner_1, start_2, end_2, inner_2, ...)``: flat, sorted by start; each
session holds contributions whose event times lie in ``[start, end]``, each within ``ttl`` of
the next, and starts more than ``ttl`` after the previous one ends."""


class Ttl(EventTimed[Sessions], Generic[V]):
    """``inner`` that lives ``ttl`` past its latest contribution, in event time.

    A key's value is the aggregate of its contributions since the last gap of more than
    ``ttl`` between their event times (sorted): a key not updated for longer than ``ttl``
    starts afresh. The state is the flat tuple of such *sessions*, ``(start, end,
    inner_state, ...)`` sorted by start (:data:`Sessions`; one session, the usual case, is
    three items); emit receives the inner state of the latest (:meth:`emitted`). The
    identity is ``()``.

    Merging joins the sessions that come within ``ttl`` of each other: the result depends
    only on the contributions (their event times and values), never on their order, so the
    laws hold. Declared with ``per_key(inner, ttl=...)`` on a bolt with ``event_time=``
    and ``late=``: a tuple is late when its event time is ``retention`` or more behind its
    partition's newest (:meth:`closes`), and a session ending ``ttl + retention`` before
    every partition's stream time can change no more, so the bolt drops it, and a key left
    without sessions (:mod:`hailstorm.lateness`). ``retention`` (> 0) defaults to ``ttl``.
    States are immutable when the inner monoid's are.

    >>> m = Ttl(Count(), 60)
    >>> m.combine_all([m.lift(0, 1), m.lift(50, 1), m.lift(200, 1)])
    (0, 50, 2, 200, 200, 1)
    >>> m.emitted(_)
    1
    """

    name = "ttl"

    def __init__(self, inner: Monoid[V], ttl: Any, retention: Any = None, *,
                 time_type: str = "long", unit: str = "s") -> None:
        for name, value in (("ttl", ttl), ("retention", retention)):
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, int | float)):
                raise TypeError(f"{name} must be a number in the event times' unit (e.g. "
                                f"3600 for an hour in seconds), not {value!r}")
        if ttl <= 0:
            raise ValueError("ttl must be > 0")
        if retention is not None and retention <= 0:
            raise ValueError("retention must be > 0 (a tuple `retention` behind its "
                             "partition's newest event time is late)")
        self._init_time(time_type, unit)
        self.inner = inner
        self.ttl = ttl
        self.retention = ttl if retention is None else retention
        setattr(self, "immutable_state", inner.immutable_state)  # noqa: B010 (a ClassVar)
        self._owned: Any = None if inner.immutable_state else inner.copy
        """How to own an incoming inner state (None: states are immutable)."""
        self._merge: Any = add if type(inner) in (Count, Sum) else inner.absorb
        """Merges an owned inner state with another."""

    def empty(self) -> Sessions:
        return ()

    def lift(self, event_time: Any, inner_value: V) -> Sessions:
        return (event_time, event_time, inner_value)

    def combine(self, a: Sessions, b: Sessions) -> Sessions:
        return self.absorb(self.copy(a), b)

    def absorb(self, acc: Sessions, value: Sessions) -> Sessions:
        if not value:
            return acc
        if not acc:
            return self.copy(value)
        if len(acc) == 3 and len(value) == 3:  # one session each: the usual case
            s1, e1, v1 = acc
            s2, e2, v2 = value
            if s2 >= s1:
                if s2 - e1 <= self.ttl:
                    return (s1, e2 if e2 > e1 else e1, self._merge(v1, v2))
                return acc + self.copy(value)
            if s1 - e2 <= self.ttl:
                return (s2, e1 if e1 > e2 else e2, self._merge(v1, v2))
            return self.copy(value) + acc
        return self._coalesced(acc, self.copy(value))

    def _coalesced(self, acc: Sessions, owned: Sessions) -> Sessions:
        """The sessions of ``acc`` and ``owned`` (both owned), those within ``ttl`` joined."""
        ttl, merge = self.ttl, self._merge
        sessions = sorted((both[i:i + 3] for both in (acc, owned) for i in range(0, len(both), 3)),
                          key=itemgetter(0))
        out: list[list[Any]] = []
        for start, end, v in sessions:
            if out and start - out[-1][1] <= ttl:
                last = out[-1]
                if end > last[1]:
                    last[1] = end
                last[2] = merge(last[2], v)
            else:
                out.append([start, end, v])
        return tuple(x for session in out for x in session)

    def copy(self, state: Sessions) -> Sessions:
        owned = self._owned
        if owned is None:
            return state
        return tuple(owned(x) if i % 3 == 2 else x for i, x in enumerate(state))

    def emitted(self, value: Sessions) -> V:
        """The inner state of the latest session (the identity for none)."""
        return value[-1] if value else self.inner.empty()

    def closes(self, event_time: Any) -> Any:
        """``event_time + retention``: a tuple that far behind may belong to a dropped
        session."""
        return event_time + self.retention

    def span(self, event_time: Any) -> tuple[Any, Any]:
        """``(event_time, event_time + ttl)``: how long the tuple would have kept its key."""
        return event_time, event_time + self.ttl

    def reached(self, value: Sessions) -> Any:
        """The latest session's end."""
        return value[-2] if value else None

    def cut(self, values: Sequence[Sessions], bound: Any) -> Any:
        """The end of the last session with ``end + ttl + retention <= bound`` in the merge
        of ``values`` (a session split across a bolt's segments closes as a whole)."""
        closing = self.ttl + self.retention
        value = values[0] if len(values) == 1 else self.combine_all(values)
        last = None
        for i in range(1, len(value), 3):  # sorted: the closed ones come first
            if value[i] + closing > bound:
                break
            last = value[i]
        return last

    def open_part(self, value: Sessions, cut: Any) -> Sessions:
        if cut is None:
            return value
        i = 0
        while i < len(value) and value[i] <= cut:
            i += 3
        return value if i == 0 else value[i:]

    def parts(self, value: Sessions) -> int:
        return len(value) // 3

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        session = record(namespace, "TtlSession", [
            ("start", self.time_type),
            ("end", self.time_type),
            ("value", self.inner.avro_schema_in(f"{namespace}.ttl")),
        ])
        return {"type": "array", "items": session}

    def to_avro(self, state: Sessions) -> Any:
        to_avro = self.inner.to_avro
        return [{"start": state[i], "end": state[i + 1], "value": to_avro(state[i + 2])}
                for i in range(0, len(state), 3)]

    def from_avro(self, data: Any) -> Sessions:
        from_avro = self.inner.from_avro
        return tuple(x for d in data for x in (d["start"], d["end"], from_avro(d["value"])))

    def describe(self) -> str:
        extra = "" if self.retention == self.ttl else f", retention={self.retention}{self.unit}"
        return f"ttl({self.ttl}{self.unit}, {self.inner.describe()}{extra})"
