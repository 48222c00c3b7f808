"""The pure core of a spout instance: one Kafka partition, rewound, paused and resumed by
the master state, decoded, exploded and routed to the downstream instances.

Positions are "last included" offsets: ``position`` is the offset of the last message
emitted (``-1`` when none); the next message to read is ``position + 1``.

Life of a spout instance (one :class:`SpoutCore`, driven by one thread):

* ``SpoutsRewind(clock)``: :meth:`SpoutCore.start` sets ``position = clock[p]`` and returns
  the offset to seek to (``clock[p] + 1``). The spout is then paused.
* ``Flowing``: :meth:`SpoutCore.resume`; with the round's clock ``C`` the returned output
  starts with a CLOCK for every destination, so every downstream instance knows ``C``
  before any tuple above it.
* ``SpoutsPaused`` of a barrier round: :meth:`SpoutCore.cut` returns the position to report
  and a CLOCK_PART (the partition's part of the round's clock) to send to every destination
  before anything later; the spout reads on, and downstream instances split their state at
  the part. At ``Flowing(e, C)`` :meth:`SpoutCore.resume` sends the whole ``C`` too.
* ``SpoutsPaused`` otherwise (a stop's last round, nodes catching up):
  :meth:`SpoutCore.pause` returns the position to report. Records fetched while paused are
  held back and emitted only after the next :meth:`resume`, so nothing beyond the clock the
  master derives from the reported positions leaves early.
* Always, on a timer too (idle or paused): :meth:`SpoutCore.watermark`, ``{p: position}``,
  so downstream low water marks advance when no data flows.

Records are taken in two steps, so that pre-aggregation can combine a whole fetch while a
round's pause waits for a slice of it (or a flush under way): :meth:`SpoutCore.stage`
decodes and explodes records, and :meth:`SpoutCore.flush` routes everything staged since
the last flush (:meth:`SpoutCore.on_records` does both); a spout whose every downstream bolt
groups by state key combines as it stages instead (:attr:`SpoutCore.combines_when_staged`),
so that each chunk is decoded, keyed, lifted and combined while its objects are still in
the CPU's caches, and a flush routes the combined groups. Staged records are not emitted:
they lie beyond the position, so a pause reports the position without them, and they go
out, after the round's CLOCK, when the spout resumes.

Bolts declaring ``late=`` receive only the tuples that are not late for them: the core keeps
the partition's stream time per such bolt (:class:`~hailstorm.lateness.StreamTimes`) and
turns late tuples into dead letters of stage ``"late"`` for the bolt's late topic. After a
rewind, :meth:`SpoutCore.start` takes the stream times kept at or below the position; the
records between them and the position are read again only to move the stream times.

Bolts declared ``preaggregate`` receive each batch combined per key
(:class:`~hailstorm.processors.Contributions`). A group never spans a *boundary*: a clock
this spout announced, or a clock a bolt loaded its state at (given to :meth:`SpoutCore.start`),
since bolts split or drop tuples there. Later clocks cannot split an emitted batch: a round's
clock is never below what the spout already emitted, but at the position it cut at (see
:meth:`SpoutCore.resume`), which no batch spans.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any

from hailstorm.decoders import DecodeError
from hailstorm.engine import tuples_of_many
from hailstorm.lateness import StreamTimes
from hailstorm.processors.actions import (
    Batch,
    Destination,
    Failed,
    ForwardClock,
    Preempted,
    ProtocolViolation,
)
from hailstorm.processors.router import Router, StagedCombination
from hailstorm.protocol.clock import NOTHING, Clock, Partition
from hailstorm.protocol.layout import ProcessorState
from hailstorm.topology import BoltSpec, SinkSpec, SpoutSpec
from hailstorm.vocabulary import DeadLetter, Message

__all__ = ["COMBINE_GROUPS_MAX", "COMBINE_TUPLES", "FLUSH_BYTES", "FLUSH_TUPLES", "Backlog",
           "SpoutCore", "SpoutOutput"]

FLUSH_TUPLES = 50_000
"""A spout routes and sends what it staged at the end of each fetch, or sooner once this
many tuples wait: a bound on the work a flush does at once (a round's pause waits for a
slice of it, see :meth:`SpoutCore.flush`)."""
COMBINE_TUPLES = 800_000
"""A spout whose every downstream node is a bolt it pre-aggregates for (:attr:`SpoutCore.
combines`), reading a backlog (its fetches come back full), stages fetch after fetch until
this many tuples wait, then routes them at once: the more tuples a flush combines, the
fewer contributions per tuple cross the wire and reach the bolts. Zipf text (``ZipfText``:
50,000 words, s = 1.1) gives 1.9 contributions a line at :data:`FLUSH_TUPLES`, about 0.5
at this many; the contributions of a flush are at most its distinct keys, so no frame
grows with it. A spout keeping up with a stream (a fetch not full) sends at the end of
every fetch, as before."""
COMBINE_GROUPS_MAX = 0.5
"""A spout that combines as it stages (:attr:`SpoutCore.combines_when_staged`) stages the
next fetch of a backlog only while the groups it combined the staged tuples into are at
most this share of them: past it, combining saves less than half of the contributions, and
staging on only grows the groups a flush routes, pickles and sends (hundreds of thousands
with millions of users, one new key per event) beyond what the CPU's caches hold; it then
sends at the end of every fetch. Text over a vocabulary of words stays far below it (a
fetch of 10,000 lines of Zipf text over 50,000 words combines into about a seventh as many
words)."""
FLUSH_BYTES = 4 * 1024 * 1024
"""A spout combining fetch after fetch sends once the staged messages hold this many
bytes: a bound on the memory its staged tuples take (about 55 MB of Python objects for
4 MiB of text lines; a spout that combines as it stages keeps one value per distinct key
instead)."""


@dataclass(slots=True)
class SpoutOutput:
    """What to send, per destination and in this order: ``clock`` (if any) to every
    destination, then each destination's batch, then ``watermark`` to every destination.
    ``dead_letters`` go to their topics (each names its own)."""

    clock: ForwardClock | None
    batches: dict[Destination, Batch] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    watermark: Clock = field(default_factory=dict)

    @property
    def sent(self) -> int:
        """Tuples (or contributions) in the batches, over every destination."""
        return sum(map(len, self.batches.values()))


class SpoutCore:
    """One spout instance reading ``partition`` of ``spec.topic`` (not thread-safe).

    ``downstream`` is ``topology.downstream_of(spec)``: tuples are routed to its instances
    exactly as the reference model routes them.
    """

    def __init__(
        self, spec: SpoutSpec, partition: int, downstream: Sequence[BoltSpec | SinkSpec],
        quarantine_topic: str | None = None,
    ) -> None:
        self.spec = spec
        self.quarantine_topic = quarantine_topic or spec.dead_letter
        """Where tuples go that a downstream bolt's function failed on while this spout
        pre-aggregated for it (the topology's dead-letter topic)."""
        self.partition: Partition = (spec.topic, partition)
        self.stream_times = StreamTimes(b for b in downstream if isinstance(b, BoltSpec))
        """The partition's stream time per downstream bolt declaring ``late=``."""
        self._observed = NOTHING
        """Offsets up to this one are in :attr:`stream_times`."""
        self.router = Router(downstream, preaggregate=True,
                             lateness=self.stream_times.by_bolt or None)
        self.combines = bool(downstream) and not self.stream_times and all(
            isinstance(node, BoltSpec) and node.preaggregate for node in downstream)
        """Every downstream node is a bolt that receives this spout's batches combined per
        key, and none judges lateness (whose flush a round's pause cannot preempt): the
        spout may combine fetch after fetch of a backlog (:data:`COMBINE_TUPLES`)."""
        self.combines_when_staged = self.combines and all(
            isinstance(node, BoltSpec) and node.groups_by_key for node in downstream)
        """Every downstream bolt's groups are its state keys, whose combined values merge:
        the spout combines each chunk as it stages it (:class:`~hailstorm.processors.
        router.StagedCombination`), and keeps no tuple for the flush."""
        self._downstream = list(downstream)
        self._position: int | None = None
        self._loaded = NOTHING
        """The bolts' loaded clock here: tuples at or below it are in their snapshots."""
        self._loaded_by_bolt: dict[str, int] = {}
        """The loaded offset here of each bolt that loaded another than ``_loaded``."""
        self._boundaries: list[int] = []
        """Offsets of this partition where downstream state may be split, ascending."""
        self._paused = True
        self._held_offsets: list[int] = []
        self._held_values: list[bytes | None] = []
        self._staged = self._new_staged()
        self._clock_epoch: int | None = None
        self._cut: tuple[int, int] | None = None
        """``(epoch, position)`` of the last barrier round's mark (:meth:`cut`)."""
        self.emitted = 0
        """Tuples emitted so far."""
        self.rejected = 0
        """Messages sent to the dead-letter topic so far."""
        self.late = 0
        """Tuples sent to a late topic so far."""
        self.preempted = 0
        """Flushes a pause preempted (see :meth:`flush`)."""

    # -- master state -------------------------------------------------------------------

    def start(
        self, rewind_to: Mapping[Partition, int], loaded: Mapping[Partition, int] | None = None,
        stream_times: tuple[int, Mapping[str, Any]] | None = None,
        loaded_by_bolt: Mapping[str, Mapping[Partition, int]] | None = None,
    ) -> int:
        """Rewind to ``rewind_to`` (``SpoutsRewind``); return the offset to seek to.

        ``loaded`` is the clock bolts may have loaded their state at (the committed round's)
        when it can be above ``rewind_to``: pre-aggregation never combines across it.
        ``loaded_by_bolt`` gives the bolts that loaded another clock theirs (a backfill's
        bolts, each on its own clock): pre-aggregation never combines across any of them
        either, and a tuple a bolt's function fails on is quarantined only above what that
        bolt loaded (at or below it, it was quarantined when first read). The spout is
        paused afterwards; records held or staged from before are discarded.

        ``stream_times`` (with bolts declaring ``late=``): ``(offset, times)``, the stream
        times through ``offset`` (at or below the position; ``(-1, {})`` for none). The
        seek is then to ``offset + 1``, and the records up to the position only move the
        stream times.
        """
        self._position = rewind_to.get(self.partition, NOTHING)
        above = (loaded or {}).get(self.partition, NOTHING)
        self._loaded = above
        self._loaded_by_bolt = {bolt: clock.get(self.partition, NOTHING)
                                for bolt, clock in (loaded_by_bolt or {}).items()}
        self._boundaries = sorted(b for b in {above, *self._loaded_by_bolt.values()}
                                  if b > self._position)
        self._paused = True
        self._held_offsets = []
        self._held_values = []
        self._staged = self._new_staged()
        if not self.stream_times:
            self._observed = self._position
            return self._position + 1
        observed, times = stream_times if stream_times is not None else (NOTHING, {})
        if observed > self._position:
            raise ValueError(f"stream times through {observed} are beyond the position "
                             f"{self._position}")
        self.stream_times.restore(times)
        self._observed = observed
        return observed + 1

    def pause(self) -> int:
        """Stop emitting (``SpoutsPaused``); return the position to report."""
        self._require_started("pause")
        self._paused = True
        return self.position

    def cut(self, epoch: int) -> tuple[int, ForwardClock]:
        """Mark the position in the stream and go on emitting (``SpoutsPaused(epoch)`` of a
        barrier round): return the position to report and the CLOCK_PART to send to every
        destination before anything later. Everything emitted so far is within the round;
        what is staged or read from now on is beyond it."""
        self._require_started("cut")
        if self._paused:
            raise ValueError("cut() of a paused spout: it reports pause() instead")
        self._cut = (epoch, self.position)
        return self.position, ForwardClock(epoch, {self.partition: self.position}, partial=True)

    def resume(
        self, epoch: int | None = None, clock: Mapping[Partition, int] | None = None
    ) -> SpoutOutput:
        """Start emitting again (``Flowing(epoch, clock)``; ``Flowing(None)``: no clock).

        For a round not announced yet the output carries the CLOCK to send to every
        destination first; then the records staged before the pause and those held while
        paused. Raises
        :class:`ProtocolViolation` if this spout already emitted beyond ``clock``.
        """
        self._require_started("resume")
        marker = None
        if clock is not None:
            if epoch is None:
                raise ValueError("resume(clock=...) needs the round's epoch")
            if self._clock_epoch is None or epoch > self._clock_epoch:
                limit = clock.get(self.partition, NOTHING)
                if self.position > limit and self._cut != (epoch, limit):
                    raise ProtocolViolation(
                        f"spout {self.spec.name!r} {self.partition}: already emitted up to "
                        f"offset {self.position}, beyond the clock of round {epoch} "
                        f"({limit}); the master must derive the clock from the positions "
                        "the spouts reported"
                    )
                marker = ForwardClock(epoch, dict(clock))
                self._clock_epoch = epoch
                position = self.position
                self._boundaries = sorted({b for b in self._boundaries if b > position}
                                          | ({limit} if limit >= position else set()))
                self._restage()
        self._paused = False
        offsets, values = self._held_offsets, self._held_values
        self._held_offsets, self._held_values = [], []
        self.stage(offsets, values)
        output = self.flush()
        output.clock = marker
        return output

    # -- records and timers -------------------------------------------------------------

    def on_records(self, offsets: Sequence[int], values: Sequence[bytes | None]) -> SpoutOutput:
        """:meth:`stage` the records, then :meth:`flush`."""
        self.stage(offsets, values)
        return self.flush()

    def stage(self, offsets: Sequence[int], values: Sequence[bytes | None]) -> None:
        """Decode and explode records fetched from the partition (offsets ascending) for
        the next :meth:`flush`. Records at or below the position or already staged (a
        re-fetch after a rewind) are skipped; while paused, records are held back until
        :meth:`resume`."""
        self._require_started("stage")
        if self._observed < self.position and self.stream_times:  # rebuilding stream times
            offsets, values = self._observe(offsets, values)
        if self._paused:
            last = self._held_offsets[-1] if self._held_offsets else self.staged_through
            for o, v in zip(offsets, values, strict=True):
                if o > last:
                    self._held_offsets.append(o)
                    self._held_values.append(v)
                    last = o
            return
        # Offsets ascend within a partition: what is at or below this was taken already.
        first = bisect_right(offsets, self.staged_through)
        if first < len(offsets):
            self._decode(offsets[first:], values[first:])

    def _restage(self) -> None:
        """Stage again what is staged, if it was combined as it was staged and a boundary
        now lies within it (a round's clock above the position, when another spout of the
        partition had read further): the records are decoded again, split there."""
        staged = self._staged
        if staged.combinations is None or not staged.raw_offsets or not any(
                staged.raw_offsets[0] <= b < staged.through for b in self._boundaries):
            return
        self._staged = self._new_staged()
        self._decode(staged.raw_offsets, staged.raw_values)

    def _new_staged(self) -> _Staged:
        combinations = [StagedCombination(node) for node in self._downstream
                        if isinstance(node, BoltSpec)] if self.combines_when_staged else None
        return _Staged(combinations=combinations)

    def flush(self, preempt: Callable[[], bool] | None = None) -> SpoutOutput:
        """Route and emit what was staged; nothing while paused (staged records then wait
        for :meth:`resume`, beyond the position the pause reported).

        ``preempt`` is asked between slices of the routing (a few ms each): once it says
        yes (a round is pausing the spouts), the flush is abandoned and everything stays
        staged, so a pause waits for a slice of a flush, not all of it (the keys routed so
        far stay remembered, and the flush after the pause routes little again). Not with
        stream times, which judging moves."""
        self._require_started("flush")
        staged = self._staged
        if self._paused or staged.through == NOTHING:
            return SpoutOutput(None, watermark=self.watermark())
        p = self.partition
        router = self.router
        between = None if preempt is None or self.stream_times else _preemption(preempt)
        before = self._position, self._observed
        self._position = staged.through
        self._observed = max(self._observed, staged.through)  # judging moves stream times
        try:
            if staged.combinations is None:
                batch = Batch([p] * len(staged.tuples), staged.origins, staged.tuples)
                routed = router.route(batch, self._boundaries, between)
            else:
                routed = {}
                for combination in staged.combinations:
                    routed.update(combination.routed(between))
        except BaseException as exc:  # broad: incl. user key errors and Ctrl-C; position restored
            self._position, self._observed = before  # nothing of it was emitted
            if not isinstance(exc, Preempted):
                raise
            router.failed.clear()  # the flush that emits them lists them again
            self.preempted += 1
            return SpoutOutput(None, watermark=self.watermark())
        self._staged = self._new_staged()
        router.failed.extend(staged.failed)
        position = staged.through
        self.emitted += staged.count
        dead = staged.dead
        self.rejected += len(dead)
        if router.late:
            self.late += len(router.late)
            dead.extend(DeadLetter.of_late(bolt, (source, offset), t, why)
                        for bolt, source, offset, t, why in router.late)
            router.late.clear()
        if router.failed:  # those within the loaded snapshots were quarantined before
            topic, loaded, by_bolt = self.quarantine_topic, self._loaded, self._loaded_by_bolt
            dead.extend(DeadLetter.of_tuple(topic, (source, offset), t, failure)
                        for source, offset, t, failure in router.failed
                        if offset > by_bolt.get(failure.node, loaded))
            router.failed.clear()
        return SpoutOutput(None, routed, dead, {p: position})

    def watermark(self) -> Clock:
        """``{partition: position}``: send it to every destination regularly."""
        return {self.partition: self.position}

    # -- inspection ---------------------------------------------------------------------

    @property
    def position(self) -> int:
        """Offset of the last message emitted (``-1`` when none)."""
        return NOTHING if self._position is None else self._position

    @property
    def staged(self) -> int:
        """Tuples staged for the next :meth:`flush`."""
        return self._staged.count

    @property
    def staged_bytes(self) -> int:
        """Bytes of the messages staged for the next :meth:`flush`."""
        return self._staged.size

    @property
    def has_staged(self) -> bool:
        """Records wait for the next :meth:`flush` (some may have given no tuple: their
        offsets still move the position)."""
        return self._staged.through != NOTHING

    def flush_due(self, *, fetch_ended: bool, fetch_full: bool) -> bool:
        """Whether to :meth:`flush` now, after staging part of a fetch (``fetch_ended``:
        all of it; ``fetch_full``: the fetch came back full and the partition's end was
        not reached, so a backlog waits): at the end of a fetch or at
        :data:`FLUSH_TUPLES`, except that a spout which :attr:`combines` stages fetch
        after fetch of a backlog up to :data:`COMBINE_TUPLES` or :data:`FLUSH_BYTES`,
        while combining pays (:data:`COMBINE_GROUPS_MAX`)."""
        staged = self._staged.count
        if self.combines and fetch_full and not (fetch_ended and self._combining_saves_little):
            return staged >= COMBINE_TUPLES or self._staged.size >= FLUSH_BYTES
        return fetch_ended or staged >= FLUSH_TUPLES

    @property
    def _combining_saves_little(self) -> bool:
        """The tuples staged were combined as they were staged into more groups than
        :data:`COMBINE_GROUPS_MAX` of them (per downstream bolt)."""
        combinations = self._staged.combinations
        if not combinations:
            return False
        groups = sum(combination.groups for combination in combinations)
        return groups > COMBINE_GROUPS_MAX * self._staged.count * len(combinations)

    @property
    def staged_through(self) -> int:
        """The last offset staged for the next :meth:`flush`, or the position if none is."""
        return max(self._staged.through, self.position)

    @property
    def next_offset(self) -> int:
        """The next offset to read: past the position and what is staged, or lower while
        re-reading records to rebuild the stream times."""
        return min(self._observed, self.position) + 1 if self.stream_times \
            else self.staged_through + 1

    @property
    def paused(self) -> bool:
        """True while records are held back (also before the first :meth:`resume`)."""
        return self._paused

    @property
    def held(self) -> int:
        """Records fetched while paused, waiting for :meth:`resume`."""
        return len(self._held_offsets)

    @property
    def destinations(self) -> list[Destination]:
        """Every downstream instance (CLOCK and WATERMARK go to all of them)."""
        return self.router.destinations

    # -- internals ----------------------------------------------------------------------

    def _require_started(self, what: str) -> None:
        if self._position is None:
            raise RuntimeError(f"spout {self.spec.name!r}: {what}() before start(rewind_to)")

    @property
    def observed(self) -> tuple[int, dict[str, Any]]:
        """``(offset, stream times through it)``: what to keep for a later rewind. The
        offset is the position, or lower while the records up to it are being re-read."""
        return min(self._observed, self.position), self.stream_times.snapshot()

    def _observe(
        self, offsets: Sequence[int], values: Sequence[bytes | None]
    ) -> tuple[Sequence[int], Sequence[bytes | None]]:
        """Move the stream times over the records up to the position; return the rest."""
        done = bisect_right(offsets, self._observed)
        upto = bisect_right(offsets, self.position)
        for result in tuples_of_many(self.spec, values[done:upto]):
            if not isinstance(result, DecodeError):
                self.stream_times.observe(result)
        if upto > done:
            self._observed = offsets[upto - 1]
        return offsets[upto:], values[upto:]

    def _decode(self, offsets: Sequence[int], values: Sequence[bytes | None]) -> None:
        """Stage the tuples of records beyond everything staged; dead letters for those
        that do not decode."""
        spec, p, staged = self.spec, self.partition, self._staged
        results = tuples_of_many(spec, values)
        exploded: list[list[Any]] = []
        if set(map(type, results)) <= {list}:
            exploded = results  # type: ignore[assignment]  # every one a list
        else:
            for i, result in enumerate(results):
                if isinstance(result, DecodeError):
                    message = Message(p[0], p[1], offsets[i], values[i])
                    staged.dead.append(DeadLetter(spec.name, spec.dead_letter, message,
                                                  str(result), result.stage))
                    result = []
                exploded.append(result)
        tuples = chain.from_iterable(exploded)
        origins = chain.from_iterable(map(repeat, offsets, map(len, exploded)))
        if staged.combinations is None:
            before = len(staged.tuples)
            staged.tuples.extend(tuples)
            staged.origins.extend(origins)
            staged.count += len(staged.tuples) - before
        else:
            staged.raw_offsets.extend(offsets)  # kept for a boundary yet to come
            staged.raw_values.extend(values)
            chunk = list(tuples)
            staged.count += len(chunk)
            batch = Batch([p] * len(chunk), list(origins), chunk)
            for combination in staged.combinations if chunk else ():
                combination.add(batch, self._boundaries, staged.failed)
        staged.through = offsets[-1]
        staged.size += sum(map(len, filter(None, values)))

    def __repr__(self) -> str:
        state = "paused" if self._paused else "flowing"
        return f"SpoutCore({self.spec.name!r}, {self.partition}, {state}, at {self.position})"


class Backlog:
    """Whether a flowing spout is reading a backlog, as the state it reports
    (:attr:`state`): ``BEHIND`` from a full fetch to the partition's end, ``CAUGHT_UP``
    from then until a round pauses the spout (the round then covers what it read; a full
    fetch meanwhile changes nothing, so a spout reports at most twice between two
    pauses), else ``FLOWING``. The replay after a rewind over a committed round (a
    recovery) is a backlog however short: reaching the partition's end then reports
    ``CAUGHT_UP``, so the negotiator commits the replay at once (its early round) instead
    of a whole snapshot interval later."""

    def __init__(self) -> None:
        self.behind = False
        self.caught_up = False
        self.replaying = False

    def rewound(self) -> None:
        """The spout rewound to a committed round's clock: what it reads up to the
        partition's end is a replay."""
        self.replaying = True

    def fetched(self, *, full: bool, at_end: bool) -> None:
        """A fetch came back: ``full`` (as many records as asked for), ``at_end`` (it
        reached the partition's end)."""
        if at_end:
            self.caught_up = self.caught_up or self.behind or self.replaying
            self.behind = self.replaying = False
        elif full and not self.caught_up:
            self.behind = True

    def paused(self) -> None:
        """A round paused the spout: it covers what the spout caught up with."""
        self.caught_up = False

    @property
    def state(self) -> ProcessorState:
        if self.behind:
            return ProcessorState.BEHIND
        return ProcessorState.CAUGHT_UP if self.caught_up else ProcessorState.FLOWING


def _preemption(preempt: Callable[[], bool]) -> Callable[[], None]:
    """The routing's ``between`` hook that abandons it once ``preempt()`` says yes."""
    def between() -> None:
        if preempt():
            raise Preempted

    return between


@dataclass(slots=True)
class _Staged:
    """Tuples decoded since the last flush, with their offsets, or (``combinations``: a
    spout that :attr:`~SpoutCore.combines_when_staged`) combined for each downstream bolt
    as they were staged; ``through`` is the last record's offset (``-1``: none staged)."""

    origins: list[int] = field(default_factory=list)
    tuples: list[Any] = field(default_factory=list)
    combinations: list[StagedCombination] | None = None
    failed: list[Failed] = field(default_factory=list)
    """Tuples a bolt's function failed on while they were combined (for the flush's
    dead letters)."""
    count: int = 0
    """Tuples staged (kept in ``tuples`` or combined)."""
    raw_offsets: list[int] = field(default_factory=list)
    raw_values: list[bytes | None] = field(default_factory=list)
    """The records combined as they were staged: should a round's clock fall within them,
    they are staged again (:meth:`SpoutCore._restage`)."""
    dead: list[DeadLetter] = field(default_factory=list)
    through: int = NOTHING
    size: int = 0
    """Bytes of the staged records' values."""
