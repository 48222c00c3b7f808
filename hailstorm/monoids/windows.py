"""Event-time monoids: :class:`TumblingWindow` and :class:`SlidingWindow`, both a
:class:`Window` over an inner monoid, and :class:`EventTimed`, what they share with
:class:`~hailstorm.monoids.ttl.Ttl`. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from hailstorm.monoids.avro import LONG_MAX, LONG_MIN, check_number, record
from hailstorm.monoids.avro_columns import check_length, list_ends
from hailstorm.monoids.base import DEFAULT_NAMESPACE, MISSING, Monoid

__all__ = ["TIME_UNITS", "EventTimed", "SlidingWindow", "TumblingWindow", "Window", "WindowState",
           "WindowValue"]


V = TypeVar("V")
"""The inner monoid's states."""

WindowState = tuple[Any, dict[Any, V]]
"""``(max_event_time_seen or None, {window_start: inner_state})``."""

TIME_UNITS = ("ns", "us", "ms", "s", "min", "h", "d")
"""What ``unit=`` may say: the unit of event times, sizes and retentions (they are numbers
in that unit; ``hailstorm show`` prints them with it)."""


class WindowValue(NamedTuple, Generic[V]):
    """What a window bolt's ``emit`` receives (for a key, with ``per_key``): the windows
    holding data, by start. Still the ``(newest_event_time, {start: inner_state})`` tuple
    it was (``value[1].get(start)`` reads as before).

    >>> value = WindowValue(61, {0: 1, 60: 1})
    >>> value.get(60), value.get(120), value[1][0]
    (1, None, 1)
    """

    newest_event_time: Any
    """The newest event time absorbed (None when only a bolt routing late data fed it)."""
    windows: dict[Any, V]
    """``{window_start: inner_state}`` of the windows still held."""

    def get(self, start: Any, default: V | None = None) -> V | None:
        """The inner state of the window starting at ``start`` (``default`` if none)."""
        return self.windows.get(start, default)


ES = TypeVar("ES")
"""The states of an :class:`EventTimed` monoid."""


def _no_groups(_value: Any) -> tuple[Any, ...]:
    return ()


def _bucket_starts(value: WindowState[Any]) -> tuple[Any, ...]:
    return tuple(value[1])


class EventTimed(Monoid[ES]):
    """State over an ``inner`` monoid whose contributions carry an event time (a bolt's
    ``event_time=``): windows and time to live. What lateness and the dropping of closed
    state (:mod:`hailstorm.lateness`, :mod:`hailstorm.processors.expiry`) ask of it."""

    inner: Monoid[Any]
    retention: Any
    time_type: str
    unit: str

    def _init_time(self, time_type: str, unit: str) -> None:
        if time_type not in ("long", "double"):
            raise ValueError("time_type must be 'long' or 'double'")
        if unit not in TIME_UNITS:
            raise ValueError(f"unit must be one of {', '.join(TIME_UNITS)}, got {unit!r}")
        self.time_type = time_type
        self.unit = unit
        self._time_label = _EventTimeOf(self)

    def check_time(self, event_time: Any) -> None:
        """Raise ``TypeError``/``ValueError`` for an event time the state (and its Avro
        snapshot) cannot hold: ``time_type="long"`` takes 64-bit ints, ``"double"`` finite
        numbers."""
        if self.time_type == "long" and isinstance(event_time, bool):
            raise TypeError(f"{self.describe()}'s event time is a bool")
        check_number(event_time, self.time_type, self._time_label)

    def check_times(self, event_times: Sequence[Any]) -> None:
        """:meth:`check_time` for a batch: by the set of their types and their range when
        that suffices, else time by time (which names the one refused); time by time
        always for a subclass checking its own way."""
        if type(self).check_time is not EventTimed.check_time:
            for event_time in event_times:
                self.check_time(event_time)
            return
        kinds = set(map(type, event_times))
        if self.time_type == "long":
            fine = kinds <= {int} and (not event_times or (
                min(event_times) >= LONG_MIN and max(event_times) <= LONG_MAX))
        else:
            fine = kinds <= {int, float} and all(map(math.isfinite, event_times))
        if not fine:
            for event_time in event_times:
                self.check_time(event_time)

    def lift(self, event_time: Any, inner_value: Any) -> ES:
        """The state of ``inner_value`` observed at ``event_time``."""
        raise NotImplementedError

    def lift_unexpiring(self, event_time: Any, inner_value: Any) -> ES:
        """:meth:`lift` for a bolt routing late data: absorbing it expires nothing."""
        return self.lift(event_time, inner_value)

    def groups(self, event_time: Any) -> tuple[Any, ...]:
        """What, besides the key, tells pre-aggregated contributions apart (so emit sees a
        tuple of each): the starts of the windows covering ``event_time``."""
        return ()

    def lifted_groups(self) -> Callable[[ES], tuple[Any, ...]] | None:
        """A function giving :meth:`groups` of the event time a value was lifted at (by
        :meth:`lift` or :meth:`lift_unexpiring`), read from the value; None when this
        class cannot tell (the caller asks :meth:`groups`). Without ``groups`` of its own
        a class has no groups."""
        return _no_groups if type(self).groups is EventTimed.groups else None

    def closes(self, event_time: Any) -> Any:
        """The stream time at which a tuple at ``event_time`` is late (``closes <= stream
        time``): the state it would change may have been dropped by then."""
        raise NotImplementedError

    def span(self, event_time: Any) -> tuple[Any, Any]:
        """``(start, end)`` a late tuple at ``event_time`` is reported with."""
        raise NotImplementedError

    def reached(self, value: ES) -> Any:
        """The latest event time a contribution (from one partition) shows, that
        partition's stream time being at or above it; None for an empty one."""
        raise NotImplementedError

    def cut(self, values: Sequence[ES], bound: Any) -> Any:
        """What closed at ``bound`` in one key's state, the merge of ``values`` (its parts
        in a bolt's segments): its windows (or sessions) starting at or before the cut (no
        tuple that is not late can change them any more); None when nothing closed."""
        raise NotImplementedError

    def open_part(self, value: ES, cut: Any) -> ES:
        """``value`` without its windows (or sessions) starting at or before ``cut`` (from
        :meth:`cut`); ``value`` itself (not a copy) when it has none. A new state otherwise:
        ``value`` is never modified."""
        raise NotImplementedError

    def parts(self, value: ES) -> int:
        """How many windows (or sessions) ``value`` holds."""
        raise NotImplementedError

    def emitted(self, value: ES) -> Any:
        """What a bolt's emit receives of a key's state: the state itself."""
        return value


class Window(EventTimed[WindowState[V]]):
    """Event-time windows over ``inner``.

    State ``(max_event_time_seen, {window_start: inner_state})``; the identity is
    ``(None, {})``. Window ``s`` covers ``[s, s + size)``. Event times come from the caller
    (:meth:`lift`) in any unit, consistently with ``size`` (integers recommended: epoch
    seconds or milliseconds; ``time_type="double"`` allows floats).

    Expiry: after a merge, a bucket whose end ``s + size <= max_event_time_seen -
    retention`` is dropped, and so is incoming data for such a window (it is too late).
    A value whose time slot is ``None`` (what :meth:`lift_unexpiring` makes, for a bolt
    that routes late data, see :mod:`hailstorm.lateness`) adds its buckets without moving
    that time; a state only ever fed such values expires nothing.
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
        inner: Monoid[V],
        retention: float | None,
        time_type: str,
        unit: str,
    ) -> None:
        if size <= 0:
            raise ValueError("window size must be > 0")
        if retention is not None and retention < 0:
            raise ValueError("retention must be >= 0")
        self._init_time(time_type, unit)
        self.size = size
        self.inner = inner
        self.retention = size if retention is None else retention
        self._immutable = inner.immutable_state

    def window_starts(self, event_time: float) -> list[Any]:
        """Starts of the windows covering ``event_time``, latest first."""
        raise NotImplementedError

    def groups(self, event_time: Any) -> tuple[Any, ...]:
        return tuple(self.window_starts(event_time))

    def lifted_groups(self) -> Callable[[WindowState[Any]], tuple[Any, ...]] | None:
        cls = type(self)
        if (cls.groups is Window.groups and cls.lift is Window.lift
                and cls.lift_unexpiring is Window.lift_unexpiring):
            return _bucket_starts  # lift fills the buckets in window_starts' order
        return None

    def closes(self, event_time: Any) -> Any:
        """``start + size + retention`` of the earliest window covering ``event_time`` (the
        first to close: a tuple is late once any of its windows closed)."""
        return self.window_starts(event_time)[-1] + (self.size + self.retention)

    def span(self, event_time: Any) -> tuple[Any, Any]:
        """The earliest window covering ``event_time``."""
        start = self.window_starts(event_time)[-1]
        return start, start + self.size

    def reached(self, value: WindowState[Any]) -> Any:
        """The latest window start in ``value``."""
        buckets = value[1]
        return max(buckets) if buckets else None

    def cut(self, values: Sequence[WindowState[Any]], bound: Any) -> Any:
        """The latest start of a window with ``start + size + retention <= bound`` (the
        expression :meth:`closes` judges by, so float times round alike)."""
        closing = self.size + self.retention
        closed = [s for value in values for s in value[1] if s + closing <= bound]
        return max(closed) if closed else None

    def open_part(self, value: WindowState[Any], cut: Any) -> WindowState[Any]:
        t, buckets = value
        if cut is None or min(buckets, default=cut) > cut:
            return value
        return (t, {s: v for s, v in buckets.items() if s > cut})

    def parts(self, value: WindowState[Any]) -> int:
        return len(value[1])

    def empty(self) -> WindowState[Any]:
        return (None, {})

    def lift(self, event_time: Any, inner_value: Any) -> WindowState[Any]:
        """The state of ``inner_value`` observed at ``event_time`` (in every covering window)."""
        starts = self.window_starts(event_time)
        buckets = {starts[0]: inner_value}
        copy = self.inner.copy
        for s in starts[1:]:
            buckets[s] = copy(inner_value)
        return (event_time, buckets)

    def lift_unexpiring(self, event_time: Any, inner_value: Any) -> WindowState[Any]:
        """:meth:`lift` without the event time in the time slot: absorbing it expires
        nothing (lateness is then decided before the state, by the spouts)."""
        return (None, self.lift(event_time, inner_value)[1])

    def combine(self, a: WindowState[Any], b: WindowState[Any]) -> WindowState[Any]:
        if len(a[1]) < len(b[1]):
            a, b = b, a
        return self.absorb(self.copy(a), b)

    def absorb(self, acc: WindowState[Any], value: WindowState[Any]) -> WindowState[Any]:
        t_acc, buckets = acc
        t_val, incoming = value
        if not incoming and t_val is None:
            return acc
        if t_val is not None and (t_acc is None or t_val > t_acc):
            t = t_val
            horizon = t - self.retention - self.size  # a start <= horizon is expired
            if buckets:
                for s in [s for s in buckets if s <= horizon]:
                    del buckets[s]
        else:
            t = t_acc
            horizon = -math.inf if t is None else t - self.retention - self.size
        inner = self.inner
        for s, v in incoming.items():
            if s <= horizon:
                continue
            cur = buckets.get(s, MISSING)
            if cur is MISSING:
                buckets[s] = v if self._immutable else inner.copy(v)
            else:
                buckets[s] = inner.absorb(cur, v)
        return (t, buckets)

    def combine_all(self, values: Iterable[WindowState[Any]]) -> WindowState[Any]:
        """Fold many states into a new one. Values without an event time (what
        :meth:`lift_unexpiring` makes: nothing expires) are folded a window at a time, each
        window's states by the inner monoid's :meth:`~Monoid.combine_all`."""
        states = values if isinstance(values, Sequence) else list(values)
        if not self._merges_as(Window) or any(t is not None for t, _buckets in states):
            return super().combine_all(states)
        parts: dict[Any, list[Any]] = {}
        for _t, buckets in states:
            for start, inner_state in buckets.items():
                part = parts.get(start)
                if part is None:
                    parts[start] = [inner_state]
                else:
                    part.append(inner_state)
        combine = self.inner.combine_all
        return (None, {start: combine(part) for start, part in parts.items()})

    def copy(self, state: WindowState[Any]) -> WindowState[Any]:
        t, buckets = state
        if self._immutable:
            return (t, dict(buckets))
        copy = self.inner.copy
        return (t, {s: copy(v) for s, v in buckets.items()})

    def emitted(self, value: WindowState[V]) -> WindowValue[V]:
        """What a bolt's emit receives: the state as a :class:`WindowValue`."""
        return WindowValue(*value)

    def windows(self, state: WindowState[Any]) -> list[tuple[Any, Any, Any]]:
        """``[(start, end, inner_state), ...]`` sorted by start."""
        return [(s, s + self.size, v) for s, v in sorted(state[1].items())]

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        name = self._record_name
        bucket = record(
            namespace,
            f"{name}Bucket",
            [
                ("start", self.time_type),
                ("value", self.inner.avro_schema_in(f"{namespace}.{self._kind}")),
            ],
        )
        return record(
            namespace,
            name,
            [
                ("max_event_time", ["null", self.time_type]),
                ("buckets", {"type": "array", "items": bucket}),
            ],
        )

    def to_avro(self, state: WindowState[Any]) -> Any:
        t, buckets = state
        to_avro = self.inner.to_avro
        return {
            "max_event_time": t,
            "buckets": [{"start": s, "value": to_avro(v)} for s, v in sorted(buckets.items())],
        }

    def avro_column(self, states: Sequence[WindowState[Any]]) -> Any:
        starts: list[Any] = []
        values: list[Any] = []
        for _, buckets in states:
            for s in sorted(buckets):
                starts.append(s)
                values.append(buckets[s])
        return {
            "max_event_time": [t for t, _ in states],
            "buckets": {"lengths": [len(b) for _, b in states],
                        "items": {"start": starts, "value": self.inner.avro_column(values)}},
        }

    @property
    def avro_column_copies(self) -> bool:
        """The inner states' column is a copy (the starts and times are new lists)."""
        return type(self).avro_column is Window.avro_column and self.inner.avro_column_copies

    def from_avro_column(self, column: Any, size: int) -> list[WindowState[Any]]:
        times = column["max_event_time"]
        check_length(times, size)
        buckets = column["buckets"]
        lengths, ends = list_ends(buckets, size)
        items = buckets["items"]
        starts = items["start"]
        values = self.inner.from_avro_column(items["value"], ends[-1] if ends else 0)
        check_length(starts, len(values))
        return [(t, dict(zip(starts[end - n:end], values[end - n:end], strict=True)))
                for t, n, end in zip(times, lengths, ends, strict=True)]

    def from_avro(self, data: Any) -> WindowState[Any]:
        from_avro = self.inner.from_avro
        return (
            data["max_event_time"],
            {b["start"]: from_avro(b["value"]) for b in data["buckets"]},
        )

    def _extra(self) -> str:
        if self.retention == self.size:
            return ""
        return f", retention={self.retention}{self.unit}"


class _EventTimeOf:
    """Names a window's event time in an error, described only when one is raised (the
    check runs for every tuple)."""

    __slots__ = ("window",)

    def __init__(self, window: EventTimed[Any]) -> None:
        self.window = window

    def describe(self) -> str:
        return f"{self.window.describe()}'s event time"


class TumblingWindow(Window[V]):
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
        inner: Monoid[V],
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


class SlidingWindow(Window[V]):
    """Overlapping windows ``[n * slide, n * slide + size)`` over ``inner``.

    A value lands in every window covering its event time (``ceil(size / slide)`` of them);
    ``slide`` must be at most ``size`` (a longer one would leave gaps no window covers).
    See :class:`Window` for state, expiry (``retention``, default ``size``) and laws.
    """

    name = "sliding"
    _kind = "sliding"
    _record_name = "Sliding"

    def __init__(
        self,
        size: float,
        slide: float,
        inner: Monoid[V],
        retention: float | None = None,
        *,
        time_type: str = "long",
        unit: str = "s",
    ) -> None:
        if slide <= 0:
            raise ValueError("slide must be > 0")
        if slide > size:
            raise ValueError(
                f"slide {slide}{unit} is longer than the windows' size {size}{unit}: an event "
                "time in the gap between two windows would belong to no window, and its value "
                "would be dropped without a word. Use a slide of at most the size (equal to it: "
                "TumblingWindow)")
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
