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

Nothing here does I/O; :class:`~hailstorm.sinks.writer.SinkWriter` wraps it in
transactions.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hailstorm.clock import NOTHING, Clock, Partition
from hailstorm.processors.watermarks import UNBOUNDED
from hailstorm.topology import Table

__all__ = ["RowBuffer", "Selection", "advance"]

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
    received: int = 0
    """Buffered rows this commit covers (before pre-aggregation / superseding)."""


@dataclass
class _Pending:
    offset: int
    sender: str
    arrival: int
    values: Values


@dataclass
class _Latest:
    partition: Partition
    offset: int
    values: Values


@dataclass
class RowBuffer:
    """The rows of one sink instance between arrival and commit."""

    table: Table
    floor: Clock = field(default_factory=dict)
    """The stored progress as last read or written: merge/append drop rows at or below it."""

    def __post_init__(self) -> None:
        names = self.table.column_names
        self._key_index = tuple(names.index(c) for c in self.table.key)
        self._value_index = tuple(names.index(c) for c in self.table.value_columns)
        self._arrival = 0
        self._pending: dict[Partition, list[_Pending]] = {}
        self._latest: dict[Hashable, _Latest] = {}
        self.floor = dict(self.floor)

    def __len__(self) -> int:
        if self.table.mode == "upsert":
            return len(self._latest)
        return sum(len(rows) for rows in self._pending.values())

    def _key(self, values: Values) -> Hashable:
        return tuple(values[i] for i in self._key_index)

    # -- arrival ------------------------------------------------------------------------

    def values_of(self, t: Any) -> Values:
        """The row of sink tuple ``t`` as values in column order (raises ``RowError``)."""
        row = self.table.to_row(t)
        return tuple(row[c] for c in self.table.column_names)

    def add(self, partition: Partition, offset: int, t: Any, sender: str = "") -> None:
        """Buffer sink tuple ``t`` from origin ``(partition, offset)`` sent by ``sender``."""
        values = self.values_of(t)
        self._arrival += 1
        if self.table.mode == "upsert":
            self._latest[self._key(values)] = _Latest(partition, offset, values)
            return
        if offset <= self.floor.get(partition, NOTHING):
            return  # already applied: its delta/row is in the table
        self._pending.setdefault(partition, []).append(
            _Pending(offset, sender, self._arrival, values)
        )

    # -- commits ------------------------------------------------------------------------

    def select(self, lwm: Mapping[Partition, int]) -> Selection:
        """The rows a commit through ``lwm`` applies (the buffer is unchanged)."""
        lwm = dict(lwm)
        target = advance(self.floor, lwm)
        if self.table.mode == "upsert":
            rows = [
                e.values for e in self._latest.values() if e.offset <= lwm.get(e.partition, NOTHING)
            ]
            return Selection(lwm, rows, target, len(rows))
        eligible: list[tuple[Partition, _Pending]] = []
        for p, entries in self._pending.items():
            low, high = self.floor.get(p, NOTHING), lwm.get(p, NOTHING)
            eligible.extend((p, e) for e in entries if low < e.offset <= high)
        if self.table.mode == "merge":
            rows = self._aggregate([e.values for _, e in eligible])
        else:
            rows = self._number(eligible)
        return Selection(lwm, rows, target, len(eligible))

    def _aggregate(self, rows: list[Values]) -> list[Values]:
        """Merge rows of the same key (non-key columns added), one row per key."""
        sums: dict[Hashable, list[Any]] = {}
        value_index = self._value_index
        for values in rows:
            key = self._key(values)
            current = sums.get(key)
            if current is None:
                sums[key] = list(values)
            else:
                for i in value_index:
                    current[i] = current[i] + values[i]
        return _sorted_by_key([tuple(v) for v in sums.values()], self._key)

    def _number(self, eligible: list[tuple[Partition, _Pending]]) -> list[Values]:
        """Append rows with their de-dup key ``(topic, partition, offset, seq)``."""
        groups: dict[tuple[Partition, int], list[_Pending]] = {}
        for p, e in eligible:
            groups.setdefault((p, e.offset), []).append(e)
        rows: list[Values] = []
        for (partition, offset), entries in sorted(groups.items()):
            entries.sort(key=lambda e: (e.sender, e.arrival))
            topic, number = partition
            rows.extend((*e.values, topic, number, offset, seq) for seq, e in enumerate(entries))
        return rows

    def confirm(self, selection: Selection) -> None:
        """Forget what ``selection`` applied once its transaction committed."""
        lwm = selection.lwm
        if self.table.mode == "upsert":
            done = [k for k, e in self._latest.items() if e.offset <= lwm.get(e.partition, NOTHING)]
            for k in done:
                del self._latest[k]
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
        """Adopt the stored progress (after reading it); merge/append drop rows at or
        below it (another writer applied them)."""
        self.floor = dict(progress)
        if self.table.mode == "upsert":
            return
        for p, entries in list(self._pending.items()):
            low = self.floor.get(p, NOTHING)
            kept = [e for e in entries if e.offset > low]
            if kept:
                self._pending[p] = kept
            else:
                del self._pending[p]


def _sorted_by_key(rows: list[Values], key: Any) -> list[Values]:
    try:
        return sorted(rows, key=key)
    except TypeError:  # incomparable keys (None, mixed types): keep arrival order
        return rows
