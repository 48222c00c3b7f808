"""The A/B split of one bolt instance's state at round clocks (pure).

A bolt instance holds its state as ``len(pending) + 1`` *segments*. With no round pending
there is one. Learning the clock ``C`` of round ``e`` opens a segment (``A`` is the state so
far, ``B`` starts empty): a tuple ``(p, o)`` then belongs to ``A`` when ``o <= label[p]``,
else to ``B``, where ``label`` is ``C`` raised pointwise to the loaded clock and to earlier
rounds' clocks (so a label always states exactly what its segment contains). When the
round is written, ``B`` folds into ``A`` and tuples at or below the label are refused from
then on. Several rounds may be pending at once; each later clock opens one more segment.

The *floor* is what the state already contains: the loaded clock at first, raised by
every round written. A tuple at or below it is dropped when the loaded snapshot holds it
(a replay after recovery) and is a protocol violation otherwise (it arrived after the
snapshot that had to contain it).

:class:`~hailstorm.processors.bolt_core.BoltCore` drives it; its per-tuple loops read
:attr:`Segments.states`, :attr:`Segments.floor` and :attr:`Segments.seen` directly and
inline :meth:`Segments.segment_of` for zero and one pending round, for speed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hailstorm.monoids import Monoid
from hailstorm.processors.actions import Marks, PartitionKey, ProtocolViolation
from hailstorm.protocol.clock import NOTHING, merge_max

__all__ = ["PendingRound", "Segments"]


@dataclass(frozen=True, slots=True)
class PendingRound:
    """A round whose clock is known and whose snapshot is not written yet."""

    epoch: int
    clock: Marks
    """The clock the master chose; the low water mark must cover it."""
    label: Marks
    """``clock`` raised to the loaded clock and earlier rounds: what the state is at."""


class Segments:
    """One bolt instance's state split at the clocks of its pending rounds.

    ``state`` (taken over, updated in place) is what the instance loaded at ``loaded``.
    """

    def __init__(self, bolt: str, monoid: Monoid[Any], state: Any,
                 loaded: Mapping[PartitionKey, int]) -> None:
        self.bolt = bolt
        self.monoid = monoid
        self.states: list[Any] = [state]
        """``len(pending) + 1`` states; segment ``i`` holds tuples up to ``pending[i].label``."""
        self.pending: list[PendingRound] = []
        """Rounds learned and not written, oldest first."""
        self.loaded: Marks = dict(loaded)
        self.floor: Marks = dict(loaded)
        """Tuples at or below: dropped if within the loaded clock, else refused."""
        self.seen: Marks = {}
        """Highest offset absorbed per partition (to catch clocks that arrive too late)."""
        self.latest_epoch: int | None = None
        self.latest_label: Marks = dict(loaded)
        self.last_written: tuple[int, Marks] | None = None
        """``(epoch, label)`` of the last round written."""
        self.dropped = 0
        """Tuples dropped because the loaded snapshot already contains them."""

    def boundary(self) -> Marks:
        """The oldest pending round's label (the A/B boundary), or the floor if none."""
        return self.pending[0].label if self.pending else self.floor

    def segment_of(self, partition: PartitionKey, offset: int) -> int:
        """The segment a tuple above the floor belongs to."""
        for i, r in enumerate(self.pending):
            if offset <= r.label.get(partition, NOTHING):
                return i
        return len(self.pending)

    def drop(self, partition: PartitionKey, offset: int) -> None:
        """A tuple at or below the floor: count it if the loaded snapshot holds it, else
        raise :class:`ProtocolViolation`."""
        if offset <= self.loaded.get(partition, NOTHING):
            self.dropped += 1
            return
        last = self.last_written
        raise ProtocolViolation(
            f"bolt {self.bolt!r}: tuple from {(partition, offset)} arrived after the "
            f"snapshot that had to contain it (round {last[0] if last else '?'}, clock "
            f"{last[1] if last else '?'}); an upstream sent a watermark above it too early"
        )

    def whole_segment(self, partitions: Sequence[PartitionKey],
                      offsets: Sequence[int]) -> int | None:
        """The segment every tuple of a batch goes to, when they come from one partition,
        none is at or below the floor and all fall into the same segment (then recorded as
        seen); else None."""
        if not partitions or len(set(partitions)) != 1:
            return None
        p = partitions[0]
        low, high = min(offsets), max(offsets)
        if low <= self.floor.get(p, NOTHING):
            return None
        segment = self.segment_of(p, low)
        if self.segment_of(p, high) != segment:
            return None
        if high > self.seen.get(p, NOTHING):
            self.seen[p] = high
        return segment

    def open(self, epoch: int, clock: Mapping[PartitionKey, int]) -> PendingRound | None:
        """Learn round ``epoch``'s clock: a new segment, and the round now pending. None
        for a repeat or an older round. Raises :class:`ProtocolViolation` when a tuple
        above the clock was already absorbed: an upstream sent it before the clock."""
        if self.latest_epoch is not None and epoch <= self.latest_epoch:
            return None
        label = merge_max(self.latest_label, clock)
        beyond = {p: o for p, o in self.seen.items() if o > label.get(p, NOTHING)}
        if beyond:
            raise ProtocolViolation(
                f"bolt {self.bolt!r}: clock of round {epoch} arrived after tuples above "
                f"it (highest offsets absorbed {beyond}, clock {dict(clock)}); upstreams must "
                "send CLOCK before any tuple beyond it"
            )
        self.latest_epoch = epoch
        self.latest_label = label
        opened = PendingRound(epoch, dict(clock), label)
        self.pending.append(opened)
        self.states.append(self.monoid.empty())
        return opened

    def fold_oldest(self) -> PendingRound:
        """The oldest pending round was written: fold ``B`` into ``A`` and raise the floor
        to its label. Read ``A`` (``states[0]``) before: the fold updates it in place."""
        done = self.pending.pop(0)
        states = self.states
        states[0:2] = [self.monoid.absorb(states[0], states[1])]
        floor = self.floor
        for p, o in done.label.items():
            if o > floor.get(p, NOTHING):
                floor[p] = o
        self.last_written = (done.epoch, dict(done.label))
        return done

    # -- reading the whole state --------------------------------------------------------

    def merged(self) -> Any:
        """A copy of the whole state (every segment merged)."""
        return self.monoid.combine_all(self.states)

    def key_count(self) -> int:
        """Distinct keys held (keyed state)."""
        if len(self.states) == 1:
            return len(self.states[0])
        return len(set().union(*self.states))

    def lookup(self, keys: Iterable[Any]) -> tuple[dict[Any, Any], list[Any]]:
        """``(values, missing)``: the current value of each key of a keyed state (every
        segment merged; a copy), and the keys it does not hold."""
        inner = self.monoid.inner  # type: ignore[attr-defined]
        values: dict[Any, Any] = {}
        missing: list[Any] = []
        for key in keys:
            parts = [segment[key] for segment in self.states if key in segment]
            if parts:
                values[key] = inner.combine_all(parts) if len(parts) > 1 else \
                    inner.copy(parts[0])
            else:
                missing.append(key)
        return values, missing

    @property
    def absorbed(self) -> Marks:
        """The loaded clock raised by every tuple absorbed since: nothing above it is in
        the state."""
        return merge_max(self.loaded, self.seen)
