"""Low water marks over upstream instances: when may a bolt persist its state at clock C?

An upstream instance ``u`` sends watermarks ``W_u`` in band, ordered with its data:
"every tuple with origin offset ``<= W_u[p]`` that ``u`` will ever send has been sent";
partitions absent from ``W_u`` are ones ``u`` never carries. The receiver's low water mark
is, for each partition ``p``::

    LWM[p] = min over upstream instances u of W_u.get(p, +inf)

where an upstream that has not sent any watermark yet counts as ``-1`` for *every*
partition: until it speaks, it may carry anything, so it holds everything back (a late
upstream must never let a snapshot through).

``+inf`` is represented by :data:`~hailstorm.protocol.clock.UNBOUNDED`, larger than any
Kafka offset, so low water marks are ordinary clocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hailstorm.processors.actions import Marks, PartitionKey
from hailstorm.protocol.clock import NOTHING, UNBOUNDED

__all__ = ["UNBOUNDED", "UpstreamWatermarks"]


class UpstreamWatermarks:
    """Tracks the latest watermark of each upstream instance and their minimum.

    Watermarks are merged pointwise with ``max`` (an older claim stays true), so stale or
    repeated markers are harmless. Costs: :meth:`observe` is ``O(changed partitions x
    upstreams)``; :meth:`covers` is ``O(len(clock))``.
    """

    def __init__(self, upstreams: Iterable[str] = ()) -> None:
        self._marks: dict[str, dict[PartitionKey, int]] = {}
        self._silent: set[str] = set()
        self._lwm: Marks = {}
        """Minimum over the upstreams that reported, for the union of their partitions."""
        for upstream in upstreams:
            self.register(upstream)

    # -- registration -------------------------------------------------------------------

    def register(self, upstream: str) -> None:
        """Add an upstream instance; until its first watermark it holds everything back."""
        if upstream not in self._marks:
            self._silent.add(upstream)

    @property
    def upstreams(self) -> list[str]:
        """Every registered upstream instance, sorted."""
        return sorted(self._silent | self._marks.keys())

    @property
    def silent(self) -> list[str]:
        """Upstream instances that have not sent a watermark yet, sorted."""
        return sorted(self._silent)

    @property
    def complete(self) -> bool:
        """True once every registered upstream has sent at least one watermark."""
        return not self._silent

    # -- updates ------------------------------------------------------------------------

    def observe(self, upstream: str, watermark: Mapping[PartitionKey, int]) -> bool:
        """Record ``upstream``'s watermark; True when the low water mark changed.

        Raises ``KeyError`` for an upstream that was never registered (mis-wiring).
        """
        marks = self._marks.get(upstream)
        first = marks is None
        if marks is None:
            if upstream not in self._silent:
                raise KeyError(
                    f"watermark from unknown upstream {upstream!r} "
                    f"(registered: {', '.join(self.upstreams) or 'none'})"
                )
            self._silent.discard(upstream)
            marks = self._marks[upstream] = {}
        changed: list[PartitionKey] = []
        for p, offset in watermark.items():
            if offset > marks.get(p, NOTHING - 1):
                marks[p] = offset
                changed.append(p)
        moved = False
        if changed:
            all_marks = self._marks.values()
            lwm = self._lwm
            for p in changed:
                low = min(m.get(p, UNBOUNDED) for m in all_marks)
                if lwm.get(p) != low:
                    lwm[p] = low
                    moved = True
        if self._silent:
            return False
        return moved or first

    # -- queries ------------------------------------------------------------------------

    def carried(self) -> list[tuple[str, PartitionKey]]:
        """Every ``(upstream, partition)`` some upstream's watermark names."""
        return [(upstream, p) for upstream, marks in self._marks.items() for p in marks]

    def of(self, upstream: str) -> Marks | None:
        """``upstream``'s watermark: everything it sent through these offsets (None: it
        sent none yet)."""
        marks = self._marks.get(upstream)
        return None if marks is None else dict(marks)

    def offset(self, partition: PartitionKey) -> int:
        """``LWM[partition]`` (:data:`UNBOUNDED` when no upstream carries it)."""
        if self._silent:
            return NOTHING
        return self._lwm.get(partition, UNBOUNDED)

    def lwm(self, partitions: Iterable[PartitionKey]) -> Marks:
        """The low water mark of ``partitions``."""
        return {p: self.offset(p) for p in partitions}

    def covers(self, clock: Mapping[PartitionKey, int]) -> bool:
        """True when no tuple with offset ``<= clock[p]`` can still arrive, for every ``p``."""
        if self._silent:
            return all(o <= NOTHING for o in clock.values())
        lwm = self._lwm
        return all(lwm.get(p, UNBOUNDED) >= o for p, o in clock.items())

    def outgoing(self) -> Marks | None:
        """The watermark to forward downstream: the low water mark of every partition some
        upstream carries (all finite), or None while an upstream is still silent.

        Forwarding nothing while silent matters: a partial watermark would tell the next
        bolt that partitions carried only by the silent upstream are never carried.
        """
        if self._silent:
            return None
        return dict(self._lwm)

    def __repr__(self) -> str:
        return (
            f"UpstreamWatermarks(upstreams={len(self._marks) + len(self._silent)}, "
            f"silent={self.silent}, lwm={self._lwm})"
        )
