"""What a compacting bolt holds back until its next flush, and what the flush emits (pure).

Keyed ``preaggregate`` bolts without windows, whose readers are upsert tables keeping the
latest row per key, do not emit for every tuple. They remember the last tuple and origin of
every key touched, and :meth:`~hailstorm.processors.bolt_core.BoltCore.flush` emits once
per key with its current value, then the watermark held back meanwhile. The table ends
with the same rows: per tuple, the last row of a key would have carried the same value
(only the key's own tuples change it) and origin, and the earlier rows would have been
superseded. Since the watermark waits for the flush, no row a watermark covers is still
held back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from hailstorm.processors.actions import Batch, Failed, PartitionKey
from hailstorm.protocol.clock import NOTHING
from hailstorm.topology import RecordFailed

if TYPE_CHECKING:
    from hailstorm.engine import BoltExecution

__all__ = ["HeldBack", "emit_rows"]

Row = tuple[PartitionKey, int, Any]
"""A key's last tuple with its origin: ``(partition, offset, tuple)``."""


class HeldBack:
    """The rows and the watermark a compacting bolt holds back until its next flush."""

    def __init__(self) -> None:
        self.rows: dict[Any, Row] = {}
        """Key -> its last tuple since the last flush, with its origin."""
        self.watermark = False
        """The outgoing watermark moved since the last flush."""

    @property
    def any(self) -> bool:
        """Something waits for the flush."""
        return bool(self.rows) or self.watermark

    def remember(self, partitions: Sequence[PartitionKey], offsets: Sequence[int],
                 tuples: Sequence[Any], contributions: Sequence[tuple[Any, Any]],
                 floor: Mapping[PartitionKey, int] | None) -> None:
        """Record the last tuple of every key in an absorbed batch. ``floor``: given when
        some tuples were dropped as already in the loaded snapshot; those are never
        emitted."""
        keys = [key for key, _value in contributions]
        rows = zip(partitions, offsets, tuples, strict=True)
        if floor is not None:
            floor_get = floor.get
            self.rows.update((key, row) for key, row in zip(keys, rows, strict=True)
                             if row[1] > floor_get(row[0], NOTHING))
        else:
            self.rows.update(zip(keys, rows, strict=True))

    def take_rows(self) -> dict[Any, Row]:
        """The rows held back, now released."""
        rows, self.rows = self.rows, {}
        return rows

    def take_watermark(self) -> bool:
        """Whether a watermark was held back, now released."""
        held, self.watermark = self.watermark, False
        return held


def emit_rows(run: BoltExecution, segments: Sequence[Any], rows: dict[Any, Row],
              failed: list[Failed]) -> Batch:
    """Emit for each held ``key -> (partition, offset, tuple)`` with the key's current
    value across ``segments``, a batch at a time; row by row when a key or emit fails
    (which names the failure: a tuple emit failed on goes to ``failed``)."""
    out = _emitted_at_once(run, segments, rows)
    return out if out is not None else _emitted_each(run, segments, rows.items(), failed)


def _emitted_at_once(run: BoltExecution, segments: Sequence[Any], rows: dict[Any, Row]
                     ) -> Batch | None:
    """:func:`_emitted_each` of the rows a batch at a time; None when a key or emit
    fails."""
    keys, held = list(rows), list(rows.values())
    try:
        if len(segments) == 1 and run.emits_state:
            values = list(map(segments[0].__getitem__, keys))
        else:
            values = run.values_for_emit(keys, segments)
    except Exception:  # broad: any monoid failure, which the row-by-row path names
        return None
    produced = run.outputs_many(list(map(itemgetter(2), held)), keys, values)
    if produced is None:
        return None
    return Batch.of_outputs(list(map(itemgetter(0), held)), list(map(itemgetter(1), held)),
                            produced)


def _emitted_each(run: BoltExecution, segments: Sequence[Any],
                  rows: Iterable[tuple[Any, Row]], failed: list[Failed]) -> Batch:
    """Emit for each ``(key, (partition, offset, tuple))`` with the key's current value."""
    outputs = run.outputs
    out = Batch()
    out_partitions = out.partitions.append
    out_offsets = out.offsets.append
    out_tuples = out.tuples.append
    single = segments[0] if len(segments) == 1 and run.emits_state else None
    value_for_emit = run.value_for_emit
    for key, (p, o, t) in rows:
        try:
            value = single[key] if single is not None else value_for_emit(key, segments)
            produced = outputs(t, key, value)
        except RecordFailed as failure:
            failed.append((p, o, t, failure))
            continue
        except Exception as exc:  # broad: any user or monoid failure, noted, re-raised
            exc.add_note(f"in bolt {run.name!r}, emitting for tuple {t!r} from {(p, o)}")
            raise
        for emitted in produced:
            out_partitions(p)
            out_offsets(o)
            out_tuples(emitted)
    return out
