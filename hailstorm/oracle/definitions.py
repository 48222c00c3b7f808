"""The definitions :mod:`hailstorm.oracle` computes by: windows, time to live, lateness
spans, routable keys, column checks, topic records, decoding and what a user function may
return, each written out from ``docs/writing-topologies.md`` and ``docs/sinks.md`` again,
sharing no code with the engine. Pure.
"""

from __future__ import annotations

import io
import json
import math
from bisect import insort
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import fastavro

from hailstorm.decoders import Avro, BytesDecoder, CallableDecoder, JsonDecoder, TextDecoder
from hailstorm.errors import DefinitionError, RecordError
from hailstorm.monoids import Monoid, SlidingWindow, Ttl, TumblingWindow
from hailstorm.topic import Topic
from hailstorm.topology import SpoutSpec, Table

__all__ = ["Failed", "OracleUnsupported", "Timed", "Timing", "as_list", "combine_all",
           "decoded", "open_part", "routable", "table_row", "timing_of", "topic_record"]

LONG_RANGE = (-(2 ** 63), 2 ** 63 - 1)


class OracleUnsupported(DefinitionError, ValueError):
    """A topology whose meaning depends on something the oracle does not model."""


class Failed(RecordError):
    """A user function (or a check) failed on one record at ``stage``."""

    def __init__(self, stage: str, error: BaseException | str) -> None:
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        super().__init__(text)
        self.stage = stage
        self.error = text


# ------------------------------------------------------------------ event-time definitions


@dataclass(frozen=True)
class Timing:
    """A bolt's windows or ttl as declared: ``kind`` is ``"tumbling"``, ``"sliding"`` or
    ``"ttl"``; ``inner`` the monoid of each window or session."""

    kind: str
    inner: Monoid[Any]
    size: Any
    slide: Any
    retention: Any
    time_type: str

    def starts(self, t: Any) -> list[Any]:
        """Every window start ``s = n * step`` with ``s <= t < s + size``, ascending."""
        step = self.size if self.kind == "tumbling" else self.slide
        n = t // step
        starts = []
        while n * step > t - self.size:
            if n * step <= t:
                starts.append(n * step)
            n -= 1
        return starts[::-1]

    def check_event_time(self, t: Any) -> None:
        """A 64-bit int (``time_type="long"``) or a finite number (``"double"``)."""
        if self.time_type == "long":
            if type(t) is bool or not isinstance(t, int):
                raise TypeError(f"event time {t!r} is not an int")
            if not LONG_RANGE[0] <= t <= LONG_RANGE[1]:
                raise ValueError(f"event time {t} is out of the 64-bit range")
        elif not isinstance(t, int | float) or not math.isfinite(t):
            raise TypeError(f"event time {t!r} is not a finite number")

    def late_span(self, t: Any) -> tuple[Any, Any, Any]:
        """``(start, end, closes)`` of what a tuple at ``t`` would change first: the earliest
        window covering it (ttl: ``[t, t + ttl)``), and the stream time at which that is
        late (window end + retention; ttl: ``t + retention``)."""
        if self.kind == "ttl":
            return t, t + self.size, t + self.retention
        start = self.starts(t)[0]
        return start, start + self.size, start + self.size + self.retention


def timing_of(monoid: Monoid[Any]) -> Timing | None:
    if isinstance(monoid, TumblingWindow):
        return Timing("tumbling", monoid.inner, monoid.size, None, monoid.retention,
                       monoid.time_type)
    if isinstance(monoid, SlidingWindow):
        return Timing("sliding", monoid.inner, monoid.size, monoid.slide, monoid.retention,
                       monoid.time_type)
    if isinstance(monoid, Ttl):
        return Timing("ttl", monoid.inner, monoid.ttl, None, monoid.retention, monoid.time_type)
    if hasattr(monoid, "closes"):  # another event-timed monoid
        raise OracleUnsupported(f"{monoid.describe()}: event-timed state the oracle does not "
                                "know")
    return None


def combine_all(monoid: Monoid[Any], values: Iterable[Any]) -> Any:
    state = monoid.empty()
    for value in values:
        state = monoid.combine(state, value)
    return state


class Timed:
    """One key's (or a whole non-keyed bolt's) event-timed contributions: every
    ``(event time, value)``, kept apart per window, or sorted by time for ttl."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.newest: Any = None
        self.windows: dict[Any, Any] = {}
        self.points: list[tuple[Any, int, Any]] = []

    def add(self, t: Any, value: Any, seq: int) -> None:
        inner = self.timing.inner
        if self.timing.kind == "ttl":
            insort(self.points, (t, seq, value), key=lambda p: (p[0], p[1]))
        else:
            for s in self.timing.starts(t):
                self.windows[s] = inner.combine(self.windows.get(s, inner.empty()), value)
        self.newest = t if self.newest is None else max(self.newest, t)

    def window_state(self, expiring: bool) -> tuple[Any, dict[Any, Any]]:
        """``(newest event time, {start: inner})``. ``expiring`` (no ``late=``): without
        the windows whose end is ``retention`` or more behind the newest event time (what
        arrived for them was dropped too); with ``late=`` every window, and no time."""
        if not expiring:
            return None, dict(sorted(self.windows.items()))
        timing = self.timing
        return self.newest, {s: v for s, v in sorted(self.windows.items())
                             if s + timing.size + timing.retention > self.newest}

    def sessions(self) -> tuple[Any, ...]:
        """``(start, end, inner, ...)``: the contributions split where two event times
        (sorted) are more than ``ttl`` apart."""
        ttl, inner = self.timing.size, self.timing.inner
        groups: list[list[tuple[Any, int, Any]]] = []
        for point in self.points:
            if groups and point[0] - groups[-1][-1][0] <= ttl:
                groups[-1].append(point)
            else:
                groups.append([point])
        return tuple(x for g in groups
                     for x in (g[0][0], g[-1][0], combine_all(inner, (p[2] for p in g))))

    def latest_session(self) -> Any:
        """The inner state of the latest session (what emit receives)."""
        ttl, inner, points = self.timing.size, self.timing.inner, self.points
        i = len(points) - 1
        while i > 0 and points[i][0] - points[i - 1][0] <= ttl:
            i -= 1
        return combine_all(inner, (p[2] for p in points[i:]))

    def state(self, late: bool) -> Any:
        return self.sessions() if self.timing.kind == "ttl" else self.window_state(not late)

    def seen_by_emit(self, late: bool) -> Any:
        return self.latest_session() if self.timing.kind == "ttl" else self.window_state(not late)


def open_part(timing: Timing, value: Any, watermark: Any) -> Any:
    """A window state ``(time, {start: inner})`` without the windows with ``start + size +
    retention <= watermark``; sessions ``(start, end, inner, ...)`` without those with
    ``end + ttl + retention <= watermark``."""
    closing = timing.size + timing.retention
    if timing.kind == "ttl":
        return tuple(x for i in range(0, len(value), 3) if value[i + 1] + closing > watermark
                     for x in value[i:i + 3])
    newest, windows = value
    return newest, {s: v for s, v in windows.items() if s + closing > watermark}


# ------------------------------------------------------------------ keys and columns


def routable(key: Any) -> bool:
    """None, bool, int, float, str, bytes or tuples of those."""
    if key is None or isinstance(key, bool | int | float | str | bytes | bytearray | memoryview):
        return True
    return isinstance(key, tuple) and all(routable(k) for k in key)


_COLUMN_CLASSES: dict[str, tuple[type, ...]] = {
    "smallint": (int,), "integer": (int,), "int": (int,), "bigint": (int,),
    "real": (int, float), "double precision": (int, float), "float": (int, float),
    "numeric": (int, float, Decimal), "decimal": (int, float, Decimal),
    "text": (str,), "varchar": (str,), "boolean": (bool,),
    "bytea": (bytes, bytearray, memoryview), "date": (date, str),
    "timestamp": (datetime, str), "timestamptz": (datetime, str),
    "json": (str,), "jsonb": (str,),
}  # fmt: skip
"""What each declarable column type holds (docs/writing-topologies.md, column checks)."""

_INT_BITS = {"smallint": 16, "integer": 32, "int": 32, "bigint": 64}


def _base_type(sql_type: str) -> str:
    base = sql_type.lower().split("(")[0]
    return " ".join(base.split())


def _column_problem(sql_type: str, value: Any, nullable: bool) -> str | None:
    if value is None:
        return None if nullable else "is null"
    base = _base_type(sql_type)
    classes = _COLUMN_CLASSES[base]
    a_number_column = int in classes  # takes numbers, and a bool is no number
    if not isinstance(value, classes) or (a_number_column and isinstance(value, bool)):
        return f"{value!r:.40} does not fit {sql_type}"
    bits = _INT_BITS.get(base)
    if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        return f"{value} is out of the range of {sql_type}"
    return None


def table_row(table: Table, t: Any) -> dict[str, Any]:
    """The row of ``t``: ``row(t)``, a dict as it is, a tuple or list by position; each
    value checked against its column; raises :class:`Failed` (stage ``row``)."""
    try:
        value = t if table.row is None else table.row(t)
    except Exception as exc:  # broad: the user's row function may raise anything
        raise Failed("row", exc) from exc
    columns = list(table.columns)
    if isinstance(value, Mapping):
        row = dict(value)
        if set(row) != set(columns):
            raise Failed("row", f"the row's columns {sorted(row)} are not {columns}")
    elif isinstance(value, tuple | list):
        if len(value) != len(columns):
            raise Failed("row", f"{len(value)} values for {len(columns)} columns")
        row = dict(zip(columns, value, strict=True))
    else:
        raise Failed("row", f"no row in {value!r:.80}")
    added = set(columns) - set(table.key) if table.mode == "merge" else set()
    for column, sql_type in table.columns.items():
        problem = _column_problem(sql_type, row[column],
                                  column not in table.key and column not in added)
        if problem is not None:
            raise Failed("row", f"column {column}: {problem}")
    try:
        hash(tuple(row[c] for c in table.key))
    except TypeError as exc:
        raise Failed("row", exc) from exc
    return row


def _canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False,
                      ensure_ascii=False).encode("utf-8")


def topic_record(topic: Topic, t: Any) -> dict[str, Any]:
    """``{"key": bytes or None, "value": bytes}`` of ``t`` (docs/sinks.md, topic sinks)."""
    try:
        key = None if topic.key is None else topic.key(t)
        if key is not None and not isinstance(key, bytes):
            key = key.encode("utf-8") if isinstance(key, str) else _canonical_json(key)
        if key is None and topic.mode == "upsert":
            raise ValueError("an upsert record needs a key")
        value = t if topic.value is None else topic.value(t)
        if callable(topic.partitioner):
            partition = topic.partitioner(t)
            if type(partition) is not int or partition < 0:
                raise ValueError(f"partition {partition!r}")
        if topic.encoder == "json":
            encoded = _canonical_json(value)
        elif topic.encoder == "bytes":
            if not isinstance(value, bytes | bytearray):
                raise TypeError("not bytes")
            encoded = bytes(value)
        else:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, fastavro.parse_schema(dict(topic.schema or {})),
                                       value, strict=True)
            encoded = out.getvalue()
    except Exception as exc:  # broad: user functions and fastavro: any error
        raise Failed("row", exc) from exc
    return {"key": key, "value": encoded}


def decoded(spout: SpoutSpec[Any], raw: bytes | None) -> Any:
    decoder = spout.decoder
    if raw is None:
        raise Failed("decode", "a tombstone has no value")
    try:
        if isinstance(decoder, BytesDecoder):
            return bytes(raw)
        if isinstance(decoder, TextDecoder):
            return raw.decode("utf-8")
        if isinstance(decoder, JsonDecoder):
            return json.loads(raw)
        if isinstance(decoder, Avro):
            schema = decoder.schema
            parsed = fastavro.parse_schema(json.loads(schema) if isinstance(schema, str)
                                           else dict(schema))
            buffer = io.BytesIO(raw)
            value = fastavro.schemaless_reader(buffer, parsed, None)
            if buffer.tell() != len(raw):
                raise ValueError("trailing bytes after the record")
            return value
        if isinstance(decoder, CallableDecoder):
            return decoder.function(raw)
        return decoder._decode(raw)  # the user's own Decoder subclass
    except Exception as exc:  # broad: user decoders and fastavro: any error
        raise Failed("decode", exc) from exc


def as_list(produced: Any, what: str) -> list[Any]:
    """What ``explode`` or ``emit`` returned, as a list (None: none). A bare tuple, a
    string or a dict is a bug in the topology (``TypeError``)."""
    if produced is None:
        return []
    if isinstance(produced, list):
        return list(produced)
    if isinstance(produced, tuple | str | bytes | bytearray | Mapping):
        raise TypeError(f"{what} returned {produced!r:.80}, not a list of tuples")
    if isinstance(produced, Iterator):
        return list(produced)  # (the caller counts what raises here as the function's)
    try:
        return list(produced)
    except TypeError:
        raise TypeError(f"{what} returned {produced!r:.80}, not a list of tuples") from None
