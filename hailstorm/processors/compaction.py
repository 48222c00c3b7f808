"""What a compacting bolt holds back until its next flush (pure).

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

from collections.abc import Mapping, Sequence
from typing import Any

from hailstorm.processors.actions import PartitionKey
from hailstorm.protocol.clock import NOTHING

__all__ = ["HeldBack"]

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
