"""Late data: which tuples reach a window bolt too late, decided per source partition. Pure.

A bolt with window state may declare ``late="<topic>"``; one with ttl state
(``per_key(..., ttl=)``) must. Every spout feeding it keeps, for its Kafka partition, the
bolt's *stream time*: the largest event time among the tuples of the partition it handed to
the bolt so far (tuples before this one, in offset order; a message's tuples in explode
order). A tuple is **late** when what it would change may have closed at that stream time
(:meth:`~hailstorm.monoids.EventTimed.closes`)::

    window start + size + retention <= stream time      (windows: the earliest covering it)
    event time + retention <= stream time                (ttl)

A tuple of sliding windows late for its earliest window goes whole: none of its windows
count it, so each window holds exactly the tuples that were on time for all of theirs.

A late tuple does not reach the bolt: it is written to the late topic as a
:class:`~hailstorm.model.DeadLetter` of stage ``"late"``, its window and event time in the
headers (:meth:`~hailstorm.model.DeadLetter.of_late`), and counted; or, with
``late=Table(...)`` (e.g. :func:`late_table`), the spouts send it as a
:func:`~hailstorm.model.late_row` to the bolt's late sink, which writes it exactly once like
any sink. The decision depends only on the partition's content up to the tuple, so the same
input gives the same late tuples whatever the interleaving of partitions, the kills,
restarts and replays; :func:`~hailstorm.model.run_model` decides it the same way.

Since lateness is decided before the state, the bolt's windows expire nothing themselves
(contributions are lifted with :meth:`~hailstorm.monoids.Window.lift_unexpiring`): a key's
own latest event time, which depends on how partitions interleave, would otherwise drop
data that is not late.

Closed windows (and ttl sessions) are dropped from memory nonetheless: a bolt instance
knows, per source partition, the latest window start (session end) it received, and the
smallest of those over every partition (once each sent a tuple) is at or below every
partition's stream time. A window that closed at that bound can receive no tuple that is
not late, so :meth:`~hailstorm.processors.BoltCore.expire` drops it (and a key left without
windows): no row changes, also in a bolt restored from a snapshot, since a pending round is
cut only by the bound its clock covers (:mod:`hailstorm.processors.expiry`).
:func:`without_closed_windows` (through :meth:`~hailstorm.model.ModelResult.comparable`) is
how a state is compared with the model's, which keeps everything.

Spouts keep their stream times across restarts in ZooKeeper, one entry per position a round
paused them at (:meth:`~hailstorm.protocol.records.TopologyRecords.write_stream_times`);
after a rewind a spout reads the records between the nearest entry and its position again
to rebuild them (:class:`StreamTimes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hailstorm.engine.calls import mapped
from hailstorm.monoids import EventTimed
from hailstorm.topology import BoltSpec, Table
from hailstorm.topology.tables import LATE_COLUMNS

__all__ = ["LATE_COLUMNS", "LATE_STAGE", "Late", "StreamTime", "StreamTimes",
           "forget_dropped", "late_table", "without_closed_windows"]

LATE_STAGE = "late"
"""The dead-letter stage of a late tuple (never a reason to halt with ``on_error="fail"``)."""


@dataclass(frozen=True, slots=True)
class Late:
    """Why a tuple is late: its window ``[start, end)``, its event time, and the stream
    time of its partition when it came."""

    start: Any
    end: Any
    event_time: Any
    stream_time: Any

    def fields(self) -> dict[str, Any]:
        """``window_start``, ``window_end``, ``event_time``, ``stream_time``: what a late
        record carries (as headers in a late topic, as columns in a late table)."""
        return {"window_start": self.start, "window_end": self.end,
                "event_time": self.event_time, "stream_time": self.stream_time}


def late_table(name: str, *, time_type: str = "bigint", url: str | None = None) -> Table:
    """An append table for ``late=``: the :data:`LATE_COLUMNS`, times as ``time_type``
    (``"bigint"``, or ``"double precision"`` for windows of ``time_type="double"``)."""
    columns = {"topic": "text", "partition": "integer", "offset": "bigint"}
    columns |= {c: time_type for c in ("window_start", "window_end", "event_time",
                                       "stream_time")}
    columns["record"] = "text"
    return Table(name, columns=columns, mode="append", url=url)


class StreamTime:
    """One partition's stream time for one bolt declaring ``late=``; judges its tuples in
    partition order."""

    __slots__ = ("_closes", "_event_time", "_window", "bolt", "time")

    def __init__(self, bolt: BoltSpec[Any, Any], time: Any = None) -> None:
        window = bolt.window
        if window is None or bolt.late is None or bolt.event_time is None:
            raise ValueError(f"bolt {bolt.name!r} does not route late data")
        self.bolt = bolt
        self._window = window
        self._event_time = bolt.event_time
        self._closes = window.closes
        self.time = time
        """The largest event time seen so far (None before any)."""

    def judge(self, t: Any) -> Late | None:
        """Whether ``t`` (the partition's next tuple for the bolt) is late; moves the
        stream time. A tuple whose event time fails is not late: the bolt quarantines it."""
        try:
            event_time = self._event_time(t)
            self._window.check_time(event_time)
            closes = self._closes(event_time)
        except Exception:  # broad: the user's event_time may raise anything; not late
            return None
        _on_time, late = self._decide([event_time], [closes])
        return late[0][1] if late else None

    def split(self, tuples: Sequence[Any]) -> tuple[list[int], list[tuple[int, Late]]]:
        """Judge ``tuples`` in order: the indices of those on time, and ``(index, why)``
        of the late ones. Event times are taken and checked a batch at a time; tuple by
        tuple (:meth:`judge`) when one fails."""
        try:
            times = mapped(self._event_time, tuples)
            self._window.check_times(times)
            closes = mapped(self._closes, times)
        except Exception:  # broad: the user's event_time may raise anything (judge names it)
            return self._split_each(tuples)
        return self._decide(times, closes)

    def _decide(self, times: Sequence[Any], closes: Sequence[Any],
                ) -> tuple[list[int], list[tuple[int, Late]]]:
        """The rule, for checked event times and their closing times in partition order: a
        tuple is late when its window closed at the stream time (``closes <= time``), else
        on time, and a later event time moves the stream time."""
        on_time: list[int] = []
        late: list[tuple[int, Late]] = []
        now = self.time
        for i, (event_time, closing) in enumerate(zip(times, closes, strict=True)):
            if now is not None:
                if closing <= now:
                    late.append((i, Late(*self._window.span(event_time), event_time, now)))
                    continue
                if event_time <= now:
                    on_time.append(i)
                    continue
            now = event_time
            on_time.append(i)
        self.time = now
        return on_time, late

    def _split_each(self, tuples: Sequence[Any]) -> tuple[list[int], list[tuple[int, Late]]]:
        """:meth:`split` by :meth:`judge`, tuple by tuple."""
        on_time: list[int] = []
        late: list[tuple[int, Late]] = []
        judge = self.judge
        for i, t in enumerate(tuples):
            why = judge(t)
            if why is None:
                on_time.append(i)
            else:
                late.append((i, why))
        return on_time, late


class StreamTimes:
    """A partition's stream times for every bolt it feeds that declares ``late=``."""

    def __init__(self, bolts: Iterable[BoltSpec[Any, Any]]) -> None:
        self.by_bolt: dict[str, StreamTime] = {
            b.name: StreamTime(b) for b in bolts if b.late is not None}

    def __bool__(self) -> bool:
        return bool(self.by_bolt)

    def snapshot(self) -> dict[str, Any]:
        """``{bolt: stream time or None}`` (JSON-able)."""
        return {name: s.time for name, s in sorted(self.by_bolt.items())}

    def covers(self, times: Mapping[str, Any]) -> bool:
        """Whether ``times`` (a :meth:`snapshot`) has every bolt's stream time: one kept
        before a bolt declared ``late=`` has not."""
        return set(self.by_bolt) <= set(times)

    def restore(self, times: Mapping[str, Any]) -> None:
        """Set the stream times to ``times`` (a :meth:`snapshot`)."""
        for name, s in self.by_bolt.items():
            s.time = times.get(name)

    def observe(self, tuples: Iterable[Any]) -> None:
        """Move the stream times over ``tuples`` without emitting (re-reading the records
        between a stored entry and a rewind's position)."""
        judges = [s.judge for s in self.by_bolt.values()]
        for t in tuples:
            for judge in judges:
                judge(t)



def without_closed_windows(bolt: BoltSpec[Any, Any], state: Any, watermark: Any) -> Any:
    """``state`` of ``bolt`` (a bolt routing late data) without what closed at
    ``watermark`` (:meth:`~hailstorm.monoids.EventTimed.open_part`: windows with
    ``start + size + retention <= watermark``, ttl sessions with ``end + ttl + retention
    <= watermark``) and the keys left with none; ``state`` itself when ``watermark`` is
    None. The state is not modified."""
    if watermark is None:
        return state
    window = bolt.window
    assert window is not None
    if not bolt.keyed:
        return window.open_part(state, window.cut([state], watermark))
    kept = {k: window.open_part(v, window.cut([v], watermark)) for k, v in state.items()}
    forget_dropped(window, kept)
    return kept


def forget_dropped(window: EventTimed[Any], state: dict[Any, Any]) -> None:
    """Remove from ``state`` (keyed state over ``window``, of a bolt routing late data, as
    loaded from a snapshot) the keys without windows or sessions: a delta snapshot records a
    key the bolt dropped so (:mod:`hailstorm.processors.expiry`)."""
    parts = window.parts
    for key in [k for k, v in state.items() if not parts(v)]:
        del state[key]
