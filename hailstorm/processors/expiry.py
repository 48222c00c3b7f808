"""Dropping the closed windows of a bolt routing late data (``late=``). Pure.

A tuple reaches such a bolt only when it is not late for its partition: its window's
``start + size + retention`` is above the partition's stream time (see
:mod:`hailstorm.lateness`). A bolt instance keeps, per partition, the latest window start it
received; the smallest of those over every partition its upstreams carry is at or below
every partition's stream time. A window that closed at that bound can receive no tuple any
more, so dropping it (and a key left without windows) changes no row.

Snapshots may still hold dropped windows for a while: a delta records the keys that changed,
not the ones removed, so loading brings them back until they are dropped again. The model
keeps every window; :meth:`~hailstorm.model.ModelResult.comparable` is how a state is
compared with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hailstorm.lateness import closing
from hailstorm.topology import BoltSpec

__all__ = ["ClosedWindows"]


class ClosedWindows:
    """One bolt instance's closed windows: noted as contributions arrive, dropped a slice of
    keys at a time by :meth:`expire`."""

    def __init__(self, spec: BoltSpec[Any, Any]) -> None:
        self.keyed = spec.keyed
        self.closing = closing(spec)
        """How long after its start a window closes (``size + retention``)."""
        self.reached: dict[Any, Any] = {}
        """The latest window start received per partition."""
        self._sweep: list[Any] = []
        """Keys still to look at in the current pass."""
        self.windows = 0
        """Closed windows dropped so far."""
        self.keys = 0
        """Keys dropped with their last window so far."""

    def note(self, partitions: Sequence[Any], contributions: Sequence[tuple[Any, Any]]) -> None:
        """Contributions ``(key, (time, {window start: value}))`` arrived from
        ``partitions``."""
        reached = self.reached
        for p, (_key, value) in zip(partitions, contributions, strict=True):
            buckets = value[1]
            if buckets:
                start = max(buckets)
                if p not in reached or start > reached[p]:
                    reached[p] = start

    def bound(self, partitions: Mapping[Any, Any] | None) -> Any:
        """Windows closed at this event time are closed for good: the smallest latest
        window start over ``partitions`` (every one the upstreams carry); None until each
        sent a tuple."""
        reached = self.reached
        if not partitions or any(p not in reached for p in partitions):
            return None
        return min(reached[p] for p in partitions)

    def expire(self, segments: list[Any], partitions: Mapping[Any, Any] | None,
               budget: int) -> int:
        """Drop from ``segments`` (the bolt's states, changed in place) the windows closed
        at :meth:`bound`, looking at up to ``budget`` keys from where the last call
        stopped; returns the windows dropped."""
        watermark = self.bound(partitions)
        if watermark is None:
            return 0
        horizon = watermark - self.closing
        before = self.windows
        if not self.keyed:
            for i, (t, buckets) in enumerate(segments):
                kept = {s: v for s, v in buckets.items() if s > horizon}
                if len(kept) < len(buckets):
                    self.windows += len(buckets) - len(kept)
                    segments[i] = (t, kept)
            return self.windows - before
        if not self._sweep:
            self._sweep = [k for segment in segments for k in segment]
        sweep = self._sweep
        for _ in range(min(budget, len(sweep))):
            key = sweep.pop()
            for segment in segments:
                value = segment.get(key)
                if value is None or min(value[1], default=horizon) > horizon:
                    continue
                t, buckets = value
                kept = {s: v for s, v in buckets.items() if s > horizon}
                self.windows += len(buckets) - len(kept)
                if kept:
                    segment[key] = (t, kept)  # a new dict: a snapshot may share the old
                else:
                    del segment[key]
                    self.keys += 1
        return self.windows - before
