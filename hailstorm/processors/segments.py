"""The A/B split of one bolt instance's state at round clocks (pure).

A bolt instance holds its state as ``len(pending) + 1`` *segments*. With no round pending
there is one. Learning the clock ``C`` of round ``e`` opens a segment (``A`` is the state so
far, ``B`` starts empty): a tuple ``(p, o)`` then belongs to ``A`` when ``o <= label[p]``,
else to ``B``, where ``label`` is ``C`` raised pointwise to the loaded clock and to earlier
rounds' clocks (so a label always states exactly what its segment contains). When the
round is handed out to be written, tuples at or below the label are refused from then on,
and ``A`` stays as it is until its snapshot was copied out of it (by the snapshot writer,
off the thread that absorbs tuples, or at once by the core for a big one: see
:data:`~hailstorm.processors.deltas.WRITER_COPY_MAX`); then ``B`` folds into ``A``.
Several rounds may be pending at once; each later clock opens one more segment.

A round may be learned a part at a time (a *barrier* round: each spout sends its
partition's offset in the stream, before anything beyond it, and reads on). Until a
partition's part is known, its tuples all belong below the round (the part comes before
any tuple above it on every connection), so a partial round's label holds the parts known
and sends every other partition's tuples below it (:data:`UNKNOWN`). The master's whole
clock completes the round; only a complete round is written. A partial round the master
passed without a clock (skipped, or abandoned by a recovery) is dropped: its ``B`` folds
into its ``A`` with nothing written (:meth:`Segments.abandon`).

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
from hailstorm.protocol.clock import NOTHING, UNBOUNDED, merge_max

__all__ = ["UNKNOWN", "PendingRound", "Segments"]

UNKNOWN = UNBOUNDED
"""A partial round's label for a partition whose part is not known yet: every tuple of it
belongs below the round."""


@dataclass(slots=True)
class PendingRound:
    """A round whose clock is known (or being learned) and whose segment has not folded."""

    epoch: int
    clock: Marks
    """The clock the master chose (while partial, the parts known); the low water mark
    must cover it."""
    label: Marks
    """``clock`` raised to the loaded clock and earlier rounds: what the state is at."""
    complete: bool = True
    """The whole clock is known (else only the parts in :attr:`clock`)."""
    beyond: int = NOTHING
    """The label of a partition :attr:`label` does not name: :data:`UNKNOWN` while this
    round (or an earlier pending one) is partial."""
    handed_out: bool = False
    """Its snapshot was handed out (:meth:`Segments.hand_out`): its segment ``A`` takes
    no tuple and waits to fold (:meth:`Segments.fold_handed_out`)."""
    overtaken: str | None = None
    """While partial: a part arrived after tuples above it, what the protocol forbids
    unless the master passed the round (an upstream that learned so first forwards no
    more parts of it and reads on). The round is then dropped when this instance learns
    so too; should the whole clock arrive instead, the violation is raised."""


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
        """Rounds learned and not folded, oldest first (only the oldest may be handed
        out)."""
        self.loaded: Marks = dict(loaded)
        self.floor: Marks = dict(loaded)
        """Tuples at or below: dropped if within the loaded clock, else refused."""
        self.seen: Marks = {}
        """Highest offset absorbed per partition (to catch clocks that arrive too late)."""
        self.latest_epoch: int | None = None
        self.last_written: tuple[int, Marks] | None = None
        """``(epoch, label)`` of the last round written."""
        self.dropped = 0
        """Tuples dropped because the loaded snapshot already contains them."""

    def boundary(self) -> tuple[Marks, int]:
        """The oldest pending round's label (the A/B boundary) and its value for a
        partition it does not name, or the floor and :data:`NOTHING` if none."""
        if self.pending:
            first = self.pending[0]
            return first.label, first.beyond
        return self.floor, NOTHING

    def segment_of(self, partition: PartitionKey, offset: int) -> int:
        """The segment a tuple above the floor belongs to."""
        for i, r in enumerate(self.pending):
            if offset <= r.label.get(partition, r.beyond):
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

    def open(self, epoch: int, clock: Mapping[PartitionKey, int],
             partial: bool = False) -> Marks | None:
        """Learn round ``epoch``'s clock (``partial``: some of its parts); return what is
        new (the parts to pass on, or the whole clock when it completes the round), None
        for a repeat, or a round written, dropped or older than one learned.

        A new round opens a segment (drop a partial round before it first: the master
        started a later round, so that one will never be written). Raises
        :class:`ProtocolViolation` when a tuple above the clock was already absorbed (an
        upstream sent it before the clock) or a part disagrees with the clock; a part
        arriving after tuples above it only marks the round :attr:`PendingRound.overtaken`
        (the master may have passed it, which this instance learns later)."""
        known = next((r for r in self.pending if r.epoch == epoch), None)
        if known is None:
            if self.latest_epoch is not None and epoch <= self.latest_epoch:
                return None
            if any(not r.complete for r in self.pending):
                raise ValueError(f"round {epoch} opened while an earlier one is partial: "
                                 "abandon it first (the master passed it)")
            known = PendingRound(epoch, {}, {}, complete=False)
            self.pending.append(known)
            self.states.append(self.monoid.empty())
            self.latest_epoch = epoch
        elif known.complete:
            return None
        learned = {p: o for p, o in clock.items() if p not in known.clock}
        if partial:
            for p, o in clock.items():
                if known.clock.get(p, o) != o:
                    self._disagree(epoch, p, known.clock[p], o)
            if not learned and known.clock:
                return None
        else:
            for p, o in known.clock.items():
                if clock.get(p, NOTHING) != o:
                    self._disagree(epoch, p, o, clock.get(p, NOTHING))
            known.complete = True
        parts = set(known.clock)  # tuples absorbed after a part was known may lie above it
        known.clock.update(learned)
        self._relabel()
        label = known.label
        beyond = {p: o for p, o in self.seen.items()
                  if (p in learned if partial else p not in parts)
                  and o > label.get(p, known.beyond)}
        if beyond:
            violation = (
                f"bolt {self.bolt!r}: clock of round {epoch} arrived after tuples above "
                f"it (highest offsets absorbed {beyond}, clock {dict(clock)}); upstreams must "
                "send CLOCK before any tuple beyond it")
            if not partial:
                raise ProtocolViolation(violation)
            known.overtaken = known.overtaken or violation  # passed upstream, or broken
        if not partial and known.overtaken is not None:
            raise ProtocolViolation(known.overtaken)
        return learned if partial else dict(clock)

    def _disagree(self, epoch: int, partition: PartitionKey, known: int, now: int) -> None:
        raise ProtocolViolation(
            f"bolt {self.bolt!r}: round {epoch}'s clock at {partition} arrived as {known} "
            f"and as {now}"
        )

    def abandon(self, i: int) -> None:
        """Drop the partial round ``pending[i]`` (the master passed it without a clock):
        its ``B`` (``states[i + 1]``) folds into its ``A`` (``states[i]``), nothing is
        written."""
        if self.pending[i].complete:
            raise ValueError(f"round {self.pending[i].epoch} is complete: it is written, "
                             "not dropped")
        states = self.states
        states[i:i + 2] = [self.monoid.absorb(states[i], states[i + 1])]
        del self.pending[i]
        self._relabel()

    def _relabel(self) -> None:
        """Each pending round's label: its clock raised to the floor and earlier rounds,
        with :data:`UNKNOWN` for the partitions a partial round does not know."""
        below: Marks = self.floor
        below_beyond = NOTHING
        for r in self.pending:
            if r.complete and below_beyond == NOTHING:
                r.label = merge_max(below, r.clock)
                r.beyond = NOTHING
            else:  # only what this round knows and every round before it knew
                r.label = {p: max(below.get(p, below_beyond), o) for p, o in r.clock.items()
                           if below.get(p, below_beyond) != UNKNOWN}
                r.beyond = UNKNOWN
            below, below_beyond = r.label, r.beyond

    @property
    def handing_out(self) -> bool:
        """The oldest pending round was handed out and its ``A`` has not folded yet."""
        return bool(self.pending) and self.pending[0].handed_out

    def hand_out(self) -> PendingRound:
        """The oldest pending round (complete) is being written: raise the floor to its
        label, so that no tuple reaches its ``A`` (``states[0]``) any more, which stays as
        it is until :meth:`fold_handed_out`."""
        done = self.pending[0]
        if not done.complete or done.handed_out:
            raise ValueError(f"round {done.epoch} is partial or handed out already")
        done.handed_out = True
        floor = self.floor
        for p, o in done.label.items():
            if o > floor.get(p, NOTHING):
                floor[p] = o
        self.last_written = (done.epoch, dict(done.label))
        return done

    def fold_handed_out(self) -> PendingRound:
        """The handed-out round's snapshot was copied: fold ``B`` into ``A`` (in place)."""
        if not self.handing_out:
            raise ValueError("no round is handed out")
        done = self.pending.pop(0)
        states = self.states
        states[0:2] = [self.monoid.absorb(states[0], states[1])]
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
