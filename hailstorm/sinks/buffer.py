"""Rows a sink received but has not applied yet, and what one commit applies. Pure.

A row arrives with its origin ``(partition, offset)``. A commit through a low water mark
``LWM`` applies the rows with ``offset <= LWM[p]``; how depends on the table's mode:

* **upsert**: one row per key survives in the buffer, the *latest arrival* (a newer total
  replaces an older one before it ever reaches the database). Commits apply every
  buffered row at or below ``LWM``, including rows at or below the stored progress: a
  replay may interleave partitions differently, and the row that arrives last must win.
* **merge**: rows at or below the stored progress are dropped (their deltas are already
  in the table); the others are pre-aggregated per key (non-key columns summed) so a
  key is written once per commit.
* **append**: rows at or below the stored progress are dropped; each other row gets the
  de-duplication key ``(topic, partition, offset, seq)``, where ``seq`` numbers the rows
  of one origin in arrival order (grouped by upstream sender first, so that rows of one
  origin coming from several upstream instances are numbered the same way on a replay).
  This needs deterministic ``explode``/``emit`` functions: the same message must give the
  same rows in the same order.

An upstream instance that restarts alone (a local recovery, :meth:`RowBuffer.part_from`):
its merge and append rows above its last watermark are forgotten (it may have sent only
part of them) and its next incarnation's at or below it dropped (the old one sent them all);
upsert rows stay, the last arrival per key winning as after any replay.

A :class:`~hailstorm.topic.Topic` target is buffered the same way (upsert or append): its
rows are encoded records ``(key, value, partition)``, keyed by their record key.

A tuple that does not become a row (its ``row`` function fails, or its shape does not fit
the table: :class:`~hailstorm.topology.RowError`) is kept as a
:class:`~hailstorm.model.RejectedRow` like an append row (dropped at or below the stored
progress), and the commit that covers it writes it to ``<table>_rejected``.

Nothing here does I/O; :class:`~hailstorm.sinks.writer.SinkWriter` wraps it in
transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter, le
from typing import Any, overload

from hailstorm.protocol.clock import NOTHING, UNBOUNDED, Clock, Partition, same_clock
from hailstorm.topic import Topic
from hailstorm.topology import RowError, Table
from hailstorm.vocabulary import Origin, RejectedRow, record_text

__all__ = ["BufferedWriter", "PreparedCommit", "RowBuffer", "Selection", "advance"]

Values = tuple[Any, ...]
"""A row as values in ``Table.column_names`` order."""


def advance(progress: Mapping[Partition, int], lwm: Mapping[Partition, int]) -> Clock:
    """The progress after a commit through ``lwm``: pointwise max, never backwards.

    Partitions whose mark is :data:`~hailstorm.processors.watermarks.UNBOUNDED` (no
    upstream carries them) get no progress entry.
    """
    target = dict(progress)
    for p, mark in lwm.items():
        if mark < UNBOUNDED and mark > target.get(p, NOTHING):
            target[p] = mark
    return target


@dataclass(frozen=True)
class Selection:
    """What one commit applies: parameter rows for the mode's statement, and the
    progress to store with them."""

    lwm: Clock
    rows: list[Values]
    """In :func:`~hailstorm.sinks.sql.write_columns` order (append: + origin and seq)."""
    target: Clock
    origins: Sequence[Origin] = field(default_factory=list)
    """The origin of each row (merge: of the last tuple added into it)."""
    rejected: list[RejectedRow] = field(default_factory=list)
    """Tuples that did not become rows, to write to ``<table>_rejected``."""
    received: int = 0
    """Buffered rows this commit covers (before pre-aggregation / superseding)."""
    arrivals: int = -1
    """The buffer's arrival count when selected (upsert: nothing new arrived if equal)."""
    keys: Sequence[Hashable] = ()
    """Upsert: the keys of the selected rows."""
    entries: Sequence[_Latest] = ()
    """Upsert: the buffer's entries of the selected rows, ``keys[i]``'s at ``entries[i]``
    (a row of the key added since is another entry)."""


_origin_of = itemgetter(0, 1)


class _OriginsOf(Sequence[Origin]):
    """The origins of selected upsert entries ``(partition, offset, row)``, read from the
    entries when asked: a table's commit asks only to name a row the database refused, so
    a million rows need no million ``(partition, offset)`` tuples."""

    __slots__ = ("_entries",)

    def __init__(self, entries: list[_Latest]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> Origin: ...
    @overload
    def __getitem__(self, index: slice) -> _OriginsOf: ...
    def __getitem__(self, index: int | slice) -> Origin | _OriginsOf:
        if isinstance(index, slice):
            return _OriginsOf(self._entries[index])
        partition, offset, _row = self._entries[index]
        return partition, offset

    def __iter__(self) -> Iterator[Origin]:
        return map(_origin_of, self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # compared by content, like a list


class _Marks(dict[Partition, int]):
    """A low water mark that gives :data:`NOTHING` for the partitions it lacks."""

    def __missing__(self, partition: Partition) -> int:
        return NOTHING


@dataclass
class _Pending:
    offset: int
    sender: str
    arrival: int
    values: Values
    partition: Partition = ("", -1)


_Latest = tuple[Partition, int, Values]
"""An upsert row waiting for its commit: ``(partition, offset, values)``."""


@dataclass
class RowBuffer:
    """The rows of one sink instance between arrival and commit."""

    table: Table | Topic
    floor: Clock = field(default_factory=dict)
    """The stored progress as last read or written: merge/append drop rows at or below it."""

    def __post_init__(self) -> None:
        if isinstance(self.table, Topic):
            self._value_index: tuple[int, ...] = ()
            self._key: Callable[[Values], Hashable] = itemgetter(0)
        else:
            names = self.table.column_names
            key_index = self.table.key_positions
            self._value_index = tuple(names.index(c) for c in self.table.value_columns)
            self._key = itemgetter(*key_index) if key_index else lambda _values: ()
        """A row's key: the key column's value, or a tuple of them for several."""
        self._arrival = 0
        self._pending: dict[Partition, list[_Pending]] = {}
        self._latest: dict[Hashable, _Latest] = {}
        self._rejected: dict[Partition, list[RejectedRow]] = {}
        self._promised: dict[str, Clock] = {}
        """Per upstream instance that restarted alone, what its old incarnation sent
        entirely (merge/append rows of its next one at or below it are dropped)."""
        self.floor = dict(self.floor)

    def __len__(self) -> int:
        if self.table.mode == "upsert":
            return len(self._latest)
        return sum(len(rows) for rows in self._pending.values())

    # -- arrival ------------------------------------------------------------------------

    def values_of(self, t: Any) -> Values:
        """The row of sink tuple ``t`` as values in column order, or a topic's record
        (raises ``RowError``)."""
        if isinstance(self.table, Topic):
            return self.table.record_of(t)
        row = self.table.to_row(t)
        return tuple(row[c] for c in self.table.column_names)

    def add(self, partition: Partition, offset: int, t: Any, sender: str = "") -> None:
        """Buffer sink tuple ``t`` from origin ``(partition, offset)`` sent by ``sender``
        (a tuple that is no row: as rejected)."""
        try:
            values = self.values_of(t)
        except RowError as exc:
            self.reject(RejectedRow((partition, offset), "row", str(exc), record_text(t)))
            return
        self._arrival += 1
        if self.table.mode == "upsert":
            self._latest[self._key(values)] = (partition, offset, values)
            return
        if offset <= self.floor.get(partition, NOTHING):
            return  # already applied: its delta/row is in the table
        if self._promised and offset <= self._promised.get(sender, {}).get(partition, NOTHING):
            return  # its predecessor sent it (a local recovery)
        self._pending.setdefault(partition, []).append(
            _Pending(offset, sender, self._arrival, values, partition)
        )

    def part_from(self, sender: str, promised: Mapping[Partition, int]) -> int:
        """``sender``'s connection ended and it restarts alone: its next incarnation sends
        again what it emits after the committed round. ``promised`` is its last watermark
        (``{}`` when it sent none), through which it sent every row: its merge and append
        rows above it are forgotten, and its next incarnation's at or below it will be
        dropped. Upsert rows stay (the last arrival per key wins, as after any replay).
        Returns how many rows were forgotten."""
        if self.table.mode == "upsert":
            return 0
        self._promised[sender] = dict(promised)
        forgotten = 0
        for p, entries in list(self._pending.items()):
            high = promised.get(p, NOTHING)
            kept = [e for e in entries if e.sender != sender or e.offset <= high]
            forgotten += len(entries) - len(kept)
            if kept:
                self._pending[p] = kept
            else:
                del self._pending[p]
        return forgotten

    def reject(self, rejected: RejectedRow) -> None:
        """Keep a tuple that is no row for the commit that covers its origin (unless one
        already did: at or below the stored progress)."""
        partition, offset = rejected.origin
        if offset > self.floor.get(partition, NOTHING):
            self._rejected.setdefault(partition, []).append(rejected)

    @property
    def rejected(self) -> int:
        """Rejected tuples waiting for a commit."""
        return sum(map(len, self._rejected.values()))

    def holds_through(self, lwm: Mapping[Partition, int]) -> bool:
        """True when a commit through ``lwm`` would apply a row or a rejected tuple."""
        def covered(p: Partition, offset: int) -> bool:
            return offset <= lwm.get(p, NOTHING)

        if self.table.mode == "upsert":
            rows = any(covered(p, o) for p, o, _v in self._latest.values())
        else:
            rows = any(covered(p, e.offset) for p, entries in self._pending.items()
                       for e in entries)
        return rows or any(covered(*r.origin) for rs in self._rejected.values() for r in rs)

    def add_many(self, partitions: Sequence[Partition], offsets: Sequence[int],
                 tuples: Sequence[Any], sender: str = "") -> None:
        """:meth:`add` for a batch (``partitions[i]``, ``offsets[i]`` is the origin of
        ``tuples[i]``); upsert rows of plain tuples are taken a batch at a time."""
        if self.table.mode != "upsert":
            add = self.add
            for partition, offset, t in zip(partitions, offsets, tuples, strict=True):
                add(partition, offset, t, sender)
            return
        if not len(partitions) == len(offsets) == len(tuples):
            raise ValueError("add_many: partitions, offsets and tuples differ in length")
        # Counted first: a batch that stops part way must not let confirm() take the
        # buffer for what a selection saw (the count only has to move).
        self._arrival += len(tuples)
        try:
            rows = self._rows_of(tuples)
            # No intermediate dict: a key that is no dict key (TypeError) stops the update
            # part way, and adding the batch again one by one gives the same entries.
            entries = zip(partitions, offsets, rows, strict=True)
            self._latest.update(zip(map(self._key, rows), entries, strict=True))
        except (RowError, TypeError):  # one by one: the tuples that are no row are rejected
            add = self.add
            for partition, offset, t in zip(partitions, offsets, tuples, strict=True):
                add(partition, offset, t, sender)

    def _rows_of(self, tuples: Sequence[Any]) -> Sequence[Values]:
        """The rows of a batch of sink tuples: as they are when every one is a tuple of
        the table's width (no ``row`` function) whose values fit their columns, else
        through :meth:`values_of` (raising ``RowError``)."""
        if isinstance(self.table, Topic):
            return list(map(self.table.record_of, tuples))
        if self.table.are_plain_rows(tuples) and self.table.rows_fit(tuples):
            return tuples
        return [self.values_of(t) for t in tuples]

    # -- commits ------------------------------------------------------------------------

    def select(self, lwm: Mapping[Partition, int]) -> Selection:
        """The rows a commit through ``lwm`` applies (the buffer is unchanged)."""
        lwm = dict(lwm)
        target = advance(self.floor, lwm)
        rejected = [r for p, entries in self._rejected.items()
                    for r in entries if r.origin[1] <= lwm.get(p, NOTHING)]
        if self.table.mode == "upsert":
            # A key per entry: C-level passes, not a Python loop over every buffered key.
            buffered = list(self._latest.values())
            marks = map(_Marks(lwm).__getitem__, map(itemgetter(0), buffered))
            below = list(map(le, map(itemgetter(1), buffered), marks))
            if all(below):
                latest, keys = buffered, list(self._latest)
            else:
                latest, keys = list(compress(buffered, below)), list(compress(self._latest, below))
            rows = list(map(itemgetter(2), latest))
            return Selection(lwm, rows, target, _OriginsOf(latest), rejected, len(rows),
                             self._arrival, keys, latest)
        eligible: list[tuple[Partition, _Pending]] = []
        for p, entries in self._pending.items():
            low, high = self.floor.get(p, NOTHING), lwm.get(p, NOTHING)
            eligible.extend((p, e) for e in entries if low < e.offset <= high)
        if self.table.mode == "merge":
            rows, origins = self._aggregate([e for _, e in eligible])
        else:
            rows, origins = self._number(eligible)
        return Selection(lwm, rows, target, origins, rejected, len(eligible))

    def _aggregate(self, entries: list[_Pending]) -> tuple[list[Values], list[Origin]]:
        """Merge rows of the same key (non-key columns added), one row per key."""
        sums: dict[Hashable, tuple[list[Any], Origin]] = {}
        value_index = self._value_index
        for e in entries:
            values = e.values
            key = self._key(values)
            current = sums.get(key)
            if current is None:
                sums[key] = (list(values), (e.partition, e.offset))
            else:
                merged = current[0]
                for i in value_index:
                    merged[i] = merged[i] + values[i]
                sums[key] = (merged, (e.partition, e.offset))
        pairs = _sorted_by_key([(tuple(v), o) for v, o in sums.values()],
                               lambda pair: self._key(pair[0]))
        return [v for v, _o in pairs], [o for _v, o in pairs]

    def _number(self, eligible: list[tuple[Partition, _Pending]],
                ) -> tuple[list[Values], list[Origin]]:
        """Append rows with their de-dup key ``(topic, partition, offset, seq)``."""
        groups: dict[tuple[Partition, int], list[_Pending]] = {}
        for p, e in eligible:
            groups.setdefault((p, e.offset), []).append(e)
        rows: list[Values] = []
        origins: list[Origin] = []
        for (partition, offset), entries in sorted(groups.items()):
            entries.sort(key=lambda e: (e.sender, e.arrival))
            topic, number = partition
            rows.extend((*e.values, topic, number, offset, seq) for seq, e in enumerate(entries))
            origins.extend([(partition, offset)] * len(entries))
        return rows, origins

    def confirm(self, selection: Selection) -> None:
        """Forget what ``selection`` applied once its transaction committed.

        Rows added since the selection (a sink reads on while its commit runs) stay for
        the next commit, whatever their origin: upsert, a key's row added since replaces
        the selected one in the buffer and is kept (the last arrival wins); merge and
        append, a row at or below the mark is one the commit wrote (a replay's) and goes.
        """
        lwm = selection.lwm
        if self.table.mode == "upsert":
            latest = self._latest
            if selection.arrivals == self._arrival and selection.received == len(latest):
                latest.clear()  # nothing arrived since, and it was everything
            elif selection.arrivals == self._arrival:
                for key in selection.keys:
                    del latest[key]
            else:  # the selected entries not replaced since
                get = latest.get
                for key in [k for k, entry in zip(selection.keys, selection.entries,
                                                  strict=True) if get(k) is entry]:
                    del latest[key]
        self.resync(selection.target)
        if self.table.mode != "upsert":
            for p, entries in list(self._pending.items()):
                high = lwm.get(p, NOTHING)
                kept = [e for e in entries if e.offset > high]
                if kept:
                    self._pending[p] = kept
                else:
                    del self._pending[p]

    def resync(self, progress: Mapping[Partition, int]) -> None:
        """Adopt the stored progress (after reading it); merge/append rows and rejected
        tuples at or below it are dropped (a commit already wrote them)."""
        self.floor = dict(progress)
        for source, rejects in list(self._rejected.items()):
            floor = self.floor.get(source, NOTHING)
            self._rejected[source] = [r for r in rejects if r.origin[1] > floor]
        if self.table.mode == "upsert":
            return
        for p, entries in list(self._pending.items()):
            low = self.floor.get(p, NOTHING)
            kept = [e for e in entries if e.offset > low]
            if kept:
                self._pending[p] = kept
            else:
                del self._pending[p]


@dataclass
class PreparedCommit:
    """One commit of a writer: selected where rows are buffered
    (:meth:`BufferedWriter.prepare`), written on any thread (:meth:`BufferedWriter.write`),
    taken back where rows are buffered (:meth:`BufferedWriter.finish`)."""

    selection: Selection
    expected: Clock
    """The progress as the writer last read or wrote it: what the transaction's
    compare-and-set expects to find."""
    rejected: list[RejectedRow] = field(default_factory=list)
    """Set by the write: the tuples it recorded as rejected."""
    written: int = 0
    """Set by the write: the rows (or records) it wrote."""


class BufferedWriter:
    """What the exactly-once writers share (tables, topics): a :class:`RowBuffer` of the
    sink tuples received and the progress as the writer last read or wrote it.

    A commit is three steps, so that the transaction may run on another thread while rows
    go on arriving: :meth:`prepare` and :meth:`finish` on the thread that adds rows,
    :meth:`write` (the transaction alone) on any, one commit at a time.
    :meth:`commit_through` takes the three in turn."""

    _buffer: RowBuffer
    _view: Clock
    on_reject: Callable[[RejectedRow], None] | None
    commits: int
    rows_written: int
    rows_rejected: int

    @property
    def background(self) -> bool:
        """Whether :meth:`write` may run on a thread of its own while rows are added."""
        return False

    def prepare(self, lwm: Mapping[Partition, int]) -> PreparedCommit | None:
        """Select what a commit through ``lwm`` applies; None when it would change nothing
        (no row, no rejected tuple, the progress as stored)."""
        selection = self._buffer.select(lwm)
        if (not selection.rows and not selection.rejected
                and same_clock(selection.target, self._view)):
            self._buffer.confirm(selection)
            return None
        return PreparedCommit(selection, dict(self._view))

    def write(self, prepared: PreparedCommit) -> None:
        """Write ``prepared`` and its progress in one transaction (the writer's I/O alone:
        the buffer is not touched). Raises :class:`~hailstorm.sinks.errors.FencedError`
        when another writer moved the progress (nothing was written)."""
        raise NotImplementedError

    def finish(self, prepared: PreparedCommit) -> Clock:
        """``prepared`` was written: forget its rows, adopt its progress (returned), and
        tell ``on_reject`` of each tuple it recorded as rejected."""
        selection = prepared.selection
        self.rows_rejected += len(prepared.rejected)
        if self.on_reject is not None:
            for row in prepared.rejected:
                self.on_reject(row)
        self._view = dict(selection.target)
        self._buffer.confirm(selection)
        self.commits += 1
        self.rows_written += prepared.written
        return dict(self._view)

    def commit_through(self, lwm: Mapping[Partition, int]) -> Clock:
        """Apply every buffered row with ``offset <= lwm[p]`` and store the new progress
        ``max(progress, lwm)``, in one transaction; returns the new progress.

        ``lwm`` must cover every partition whose rows may be buffered (absent = -1:
        nothing of it is applied). Raises what :meth:`write` raises."""
        prepared = self.prepare(lwm)
        if prepared is None:
            return dict(self._view)
        self.write(prepared)
        return self.finish(prepared)

    @property
    def view(self) -> Clock:
        """The progress as this writer last read or wrote it."""
        return dict(self._view)

    def add(self, rows: Iterable[tuple[Origin, Any]], sender: str = "") -> None:
        """Buffer sink tuples with their origins ``((topic, partition), offset)``, as
        received from upstream ``sender`` (in arrival order). A tuple that is no row is
        kept as rejected; merge/append rows at or below the progress are dropped at once.
        """
        add = self._buffer.add
        for (partition, offset), t in rows:
            add(partition, offset, t, sender)

    def add_columns(self, partitions: Sequence[Partition], offsets: Sequence[int],
                    tuples: Sequence[Any], sender: str = "") -> None:
        """:meth:`add` for a columnar batch (``partitions[i]``, ``offsets[i]`` is the origin
        of ``tuples[i]``)."""
        self._buffer.add_many(partitions, offsets, tuples, sender)

    def part_from(self, sender: str, promised: Mapping[Partition, int]) -> int:
        """:meth:`RowBuffer.part_from`: ``sender`` restarts alone."""
        return self._buffer.part_from(sender, promised)

    @property
    def pending(self) -> int:
        """Rows buffered and not yet committed (upsert: keys)."""
        return len(self._buffer)

    def holds_through(self, lwm: Mapping[Partition, int]) -> bool:
        """True when a commit through ``lwm`` would write a row (or a rejected tuple)."""
        return self._buffer.holds_through(lwm)


def _sorted_by_key(rows: list[Values], key: Any) -> list[Values]:
    try:
        return sorted(rows, key=key)
    except TypeError:  # incomparable keys (None, mixed types): keep arrival order
        return rows
