"""Joins on monoid state: :class:`LookupJoin` (per key, two states side by side, e.g. a
stream's aggregate and the latest row of a table topic) and :class:`WindowJoin` (a keyed,
windowed stream-stream join). Pure.

A join is one bolt with two inputs. Its tuples carry their side: the spouts (or bolts)
feeding it tag them with :meth:`JoinSide.explode` (or :meth:`JoinSide.tag`), so that one
key function and one lift serve both inputs::

    join = LookupJoin(left=Count(), right=Last("json"), ...)
    views = topology.spout("views", topic="page-views", decoder="json",
                           explode=join.left.explode())
    profiles = topology.spout("profiles", topic="user-profiles", decoder="json",
                              explode=join.right.explode())
    enriched = join.bolt(topology, "enriched", inputs=[views, profiles], parallelism=2)

The state is an ordinary monoid (``per_key(Record(...))``, or ``per_key`` of a window of
:class:`~hailstorm.monoids.Events`), so a join bolt snapshots, re-shards and recovers like
any bolt, and :func:`~hailstorm.model.run_model` computes it.

**What the output depends on.** The join's rows are a function of the key's state when a
tuple arrives, and each tuple's rows are emitted after it is absorbed, so:

* a :class:`LookupJoin` row holds both sides' states *at that moment*; the last row per key
  (what an upsert table keeps) is the row of the key's final state, whatever the order in
  which the two topics' records arrived. A ``Last`` side must take its order from the
  record (a version, an update time): arrival order is not replay-stable;
* a :class:`WindowJoin` emits every pair of events of one key that share a window, when the
  second of the two arrives, so an upsert table keyed by the two events' ids ends with every
  pair, in any arrival order, as long as no window closed before its events arrived. A window
  closes (its events are dropped, and so are events that arrive for it later) once an event
  of the same key is ``retention`` past its end (see :class:`~hailstorm.monoids.Window`):
  with records of one key spread over several partitions, whether a straggler is dropped
  can depend on how the partitions interleave. Keep ``retention`` above the disorder of
  the event times, key the topics by the join key, or (windows read from spouts)
  declare ``late=``: lateness is then decided per source partition, the same in every run,
  late events go to that topic and windows close by nothing else (see
  :mod:`hailstorm.lateness`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hailstorm.monoids import (
    Events,
    KeyedMap,
    Monoid,
    Record,
    SlidingWindow,
    TumblingWindow,
    Window,
    per_key,
)
from hailstorm.topology import BoltSpec, Topology

__all__ = ["JoinHow", "JoinSide", "LookupJoin", "WindowJoin"]

JoinHow = Literal["inner", "left"]
"""``"inner"``: rows only where both sides have something; ``"left"``: a row for every
left-side entry, with the right side empty when nothing matched yet."""

SIDES = ("left", "right")
HOWS = ("inner", "left")


@dataclass(frozen=True)
class JoinSide:
    """One input of a join: its name (``"left"`` or ``"right"``) and its key function."""

    name: str
    key: Callable[[Any], Any]

    def tag(self, value: Any) -> tuple[str, Any]:
        """``value`` as a tuple of this side: ``(name, value)``."""
        return (self.name, value)

    def explode(
        self, explode: Callable[[Any], Iterable[Any] | None] | None = None
    ) -> Callable[[Any], list[tuple[str, Any]]]:
        """A spout's ``explode`` that tags what ``explode`` returns (by default the decoded
        value itself is the one tuple) as tuples of this side."""
        name = self.name

        def tagged(value: Any) -> list[tuple[str, Any]]:
            values = [value] if explode is None else explode(value)
            return [] if values is None else [(name, v) for v in values]

        tagged.__qualname__ = f"{name}_side_of_{getattr(explode, '__qualname__', 'value')}"
        return tagged


class _Join:
    """What both joins share: the two sides, the tagged tuples and the bolt."""

    state: KeyedMap[Any, Any, Any]
    event_time: Callable[[Any], Any] | None = None

    def __init__(self, left_key: Callable[[Any], Any], right_key: Callable[[Any], Any],
                 how: str) -> None:
        if how not in HOWS:
            raise ValueError(f"how must be one of {', '.join(map(repr, HOWS))}, not {how!r}")
        for what, function in (("left_key", left_key), ("right_key", right_key)):
            if not callable(function):
                raise TypeError(f"{what} must be a function, got {function!r}")
        self.how = how
        self.left = JoinSide("left", left_key)
        self.right = JoinSide("right", right_key)

    @staticmethod
    def side_of(t: Any) -> tuple[bool, Any]:
        """``(is_left, value)`` of a tagged tuple; ``ValueError`` for anything else (the
        bolt then quarantines it)."""
        if type(t) is tuple and len(t) == 2 and t[0] in SIDES:
            return t[0] == "left", t[1]
        raise ValueError(
            f"{t!r:.80} is not a tuple of a join side: feed the join through "
            "join.left.explode(...) / join.right.explode(...) (or join.left.tag(value))")

    def key(self, t: Any) -> Any:
        """The join key of a tagged tuple (its side's key function)."""
        is_left, value = self.side_of(t)
        return (self.left if is_left else self.right).key(value)

    def lift(self, t: Any) -> Any:
        raise NotImplementedError

    def emit(self, t: Any, value: Any) -> list[Any]:
        raise NotImplementedError

    def bolt(self, topology: Topology, name: str, inputs: Sequence[Any], *,
             parallelism: int = 1, late: str | None = None) -> BoltSpec[Any, Any]:
        """Add the join's bolt to ``topology`` (routed by the join key). ``late``: a
        :class:`WindowJoin` must say what happens to late events: read from spouts, it may
        route them to that topic (see ``Topology.bolt``), and its windows then close by
        nothing else; ``late="drop"`` drops them."""
        return topology.bolt(name, inputs=inputs, state=self.state, key=self.key,
                             lift=self.lift, emit=self.emit, parallelism=parallelism,
                             event_time=self.event_time, late=late)


def _rows(produced: Any) -> list[Any]:
    return [] if produced is None else [produced]


class LookupJoin(_Join):
    """Per key, a ``left`` and a ``right`` state side by side, and a row of both.

    The typical use enriches a stream with a table kept from a (compacted) topic: ``left``
    aggregates the stream (``Count()``, a ``Record`` of aggregates...), ``right`` is
    ``Last(...)`` of the table's rows (the newest by an order taken from the row, e.g. its
    version). Each side's ``*_key`` picks the join key of its values and ``*_lift`` the
    value its state absorbs. After every tuple the bolt emits ``row(key, left_state,
    right_state)`` (``None``: no row): with ``how="inner"`` only once both states differ
    from their identity, with ``how="left"`` once the left one does (the right one may
    still be its identity, e.g. ``None`` for ``Last``). Write the rows to an upsert table
    keyed by the join key: it ends with the row of every key's final state.

    >>> from hailstorm.monoids import Count, Last
    >>> join = LookupJoin(left=Count(), right=Last("json"),
    ...                   left_key=lambda view: view["user"], right_key=lambda p: p["user"],
    ...                   left_lift=lambda view: 1,
    ...                   right_lift=lambda p: Last.lift((p["version"], 0), p["country"]),
    ...                   row=lambda user, views, country: (user, Last.value(country), views),
    ...                   how="left")
    >>> state = join.state.empty()
    >>> for t in [join.left.tag({"user": "u1"}), join.right.tag({"user": "u1",
    ...           "version": 3, "country": "DE"}), join.left.tag({"user": "u1"})]:
    ...     state = join.state.absorb(state, {join.key(t): join.lift(t)})
    ...     print(join.emit(t, state[join.key(t)]))
    [('u1', None, 1)]
    [('u1', 'DE', 1)]
    [('u1', 'DE', 2)]
    """

    def __init__(
        self,
        *,
        left: Monoid[Any],
        right: Monoid[Any],
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        left_lift: Callable[[Any], Any],
        right_lift: Callable[[Any], Any],
        row: Callable[[Any, Any, Any], Any],
        how: JoinHow = "inner",
        key_type: Any = "string",
    ) -> None:
        super().__init__(left_key, right_key, how)
        self.record = Record({"left": left, "right": right})
        self.state = per_key(self.record, key_type)
        self._lifts = (left_lift, right_lift)
        self._row = row
        self._left_empty = left.empty()
        self._right_empty = right.empty()

    def lift(self, t: Any) -> dict[str, Any]:
        """The ``Record`` state of one tagged tuple: its side's lift, the other side empty."""
        is_left, value = self.side_of(t)
        if is_left:
            return self.record.lift(left=self._lifts[0](value))
        return self.record.lift(right=self._lifts[1](value))

    def emit(self, t: Any, value: dict[str, Any]) -> list[Any]:
        """``[row(key, left_state, right_state)]`` when ``how`` admits the key's state."""
        left, right = value["left"], value["right"]
        if left == self._left_empty or (self.how == "inner" and right == self._right_empty):
            return []
        return _rows(self._row(self.key(t), left, right))


class WindowJoin(_Join):
    """A keyed, windowed stream-stream join: events of both sides that share a key and a
    window make rows.

    Each side's events are kept per key and window as :class:`~hailstorm.monoids.Events`
    (``*_id`` names an event, ``*_value`` is what is kept of it, by default the whole
    value; JSON data unless ``value_type`` says otherwise), in tumbling windows of ``size``
    (sliding ones with ``slide``) by the event time ``*_time`` gives, with the windows'
    ``retention`` (default ``size``, see :class:`~hailstorm.monoids.Window`).

    Rows, after every tuple, for each window of its event time:

    * ``how="inner"``: ``row(key, window_start, left_value, right_value)`` for every pair
      the tuple's event makes with the other side's events in that window;
    * ``how="left"``: ``row(key, window_start, left_value, right_values)`` for the tuple's
      left event, or for every left event of the window when a right event arrives, with
      ``right_values`` the list of the window's right events (sorted by id; empty when none
      matched yet).

    Write inner rows to an upsert table keyed by the window and both ids, left rows to one
    keyed by the window and the left id: the table then ends with every pair (every left
    event and all its matches), whatever the order of arrival (see the module's notes on
    windows that close). ``row`` may return ``None`` for no row.
    """

    def __init__(
        self,
        *,
        size: float,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        left_id: Callable[[Any], Any],
        right_id: Callable[[Any], Any],
        left_time: Callable[[Any], Any],
        right_time: Callable[[Any], Any],
        row: Callable[[Any, Any, Any, Any], Any],
        how: JoinHow = "inner",
        slide: float | None = None,
        retention: float | None = None,
        left_value: Callable[[Any], Any] | None = None,
        right_value: Callable[[Any], Any] | None = None,
        value_type: Any = "json",
        id_type: Any = "string",
        key_type: Any = "string",
        time_type: str = "long",
        unit: str = "s",
    ) -> None:
        super().__init__(left_key, right_key, how)
        events = Events(value_type, id_type)
        self.record = Record({"left": events, "right": events})
        self.window: Window[Any] = (
            TumblingWindow(size, self.record, retention, time_type=time_type, unit=unit)
            if slide is None else
            SlidingWindow(size, slide, self.record, retention, time_type=time_type, unit=unit))
        self.state = per_key(self.window, key_type)
        self._ids = (left_id, right_id)
        self._times = (left_time, right_time)
        self._values = (left_value, right_value)
        self._row = row
        self.event_time = self._event_time

    def _event_time(self, t: Any) -> Any:
        is_left, value = self.side_of(t)
        return self._times[0 if is_left else 1](value)

    def _kept(self, is_left: bool, value: Any) -> tuple[Any, Any]:
        """``(id, kept value)`` of one side's value."""
        side = 0 if is_left else 1
        keep = self._values[side]
        return self._ids[side](value), value if keep is None else keep(value)

    def lift(self, t: Any) -> dict[str, Any]:
        """The ``Record`` of one tagged tuple's event (the bolt puts it in its windows)."""
        is_left, value = self.side_of(t)
        event = Events.lift(*self._kept(is_left, value))
        return self.record.lift(left=event) if is_left else self.record.lift(right=event)

    def emit(self, t: Any, value: Any) -> list[Any]:
        """The rows of the tuple's event in each of its windows still open (see the class)."""
        is_left, v = self.side_of(t)
        side = 0 if is_left else 1
        event_id = self._ids[side](v)
        key = (self.left if is_left else self.right).key(v)
        buckets = value[1]
        rows: list[Any] = []
        row = self._row
        for start in self.window.window_starts(self._times[side](v)):
            bucket = buckets.get(start)
            if bucket is None:
                continue  # the window closed before this event arrived
            lefts, rights = bucket["left"], bucket["right"]
            if self.how == "inner":
                if is_left:
                    mine = lefts[event_id]
                    rows.extend(row(key, start, mine, r) for _i, r in Events.ordered(rights))
                else:
                    mine = rights[event_id]
                    rows.extend(row(key, start, le, mine) for _i, le in Events.ordered(lefts))
                continue
            matches = [r for _i, r in Events.ordered(rights)]
            if is_left:
                rows.append(row(key, start, lefts[event_id], matches))
            else:
                rows.extend(row(key, start, le, matches) for _i, le in Events.ordered(lefts))
        return [r for r in rows if r is not None]
