"""The pure core of a bolt instance: state split at the snapshot clock (A/B), low water
marks, snapshot hand-off.

Life of a bolt instance (one :class:`BoltCore`, driven by one thread):

* It starts from the loaded snapshot: state ``S`` at clock ``L``. A tuple with
  ``offset <= L[p]`` is already in ``S`` and is dropped (the tuple *at* ``L[p]`` too).
* With no snapshot clock pending, tuples are absorbed into ``S``.
* On learning the clock ``C`` of round ``e`` (a CLOCK frame or the master state, whichever
  comes first), the bolt forwards CLOCK downstream and splits: ``A = S``, ``B = empty``.
  A tuple ``(p, o)`` then goes to ``A`` when ``o <= C[p]``, else to ``B``; emit sees the
  merged value (for keyed state only the tuple's key is merged: ``A[k] + B[k]``; a key of
  values merged by copying keeps that merge while the round is pending and absorbs into
  it what its segment absorbs, :attr:`~hailstorm.engine.BoltExecution.merges_views`).
* Once the low water mark over all upstream instances covers ``C`` (no tuple at or below
  ``C`` can still arrive), it hands ``A`` out to be written (``WriteSnapshot``, whose
  content the snapshot writer copies out of ``A`` on its own thread, when it is a delta of
  at most :data:`~hailstorm.processors.deltas.WRITER_COPY_MAX` keys; a bigger one is
  copied as it is handed out). ``A`` takes
  no tuple from then on and stays as it is until that copy is taken; then ``B`` folds into
  ``A``, back to a single state (checked whenever a batch, watermark or clock arrives; the
  core copies it itself when the next round is due first). That also happens with no data
  at all after ``C``: watermarks keep flowing.
* Watermarks: once every upstream instance has sent one, the bolt forwards its low water
  mark (every partition some upstream carries) whenever it moves. It emits synchronously,
  so sending the watermark after the data already returned keeps the promise.

The concerns it puts together each have their module: the segments and the rounds they
are split at (:mod:`~hailstorm.processors.segments`, several rounds may be pending at
once), the upstream low water mark (:mod:`~hailstorm.processors.watermarks`), delta
snapshots of keyed state (:mod:`~hailstorm.processors.deltas`), the rows a compacting bolt
holds back until :meth:`BoltCore.flush` (:mod:`~hailstorm.processors.compaction`), and the
closed windows :meth:`BoltCore.expire` drops on a timer in bolts routing late data
(:mod:`~hailstorm.processors.expiry`).

Recovery: a tuple a bolt drops (within its loaded clock) is never emitted again, so a
bolt's loaded clock must not be behind that of any bolt upstream of it, or it misses the
effects of those tuples. Loading every bolt at the same committed round guarantees this.

Per-tuple semantics (contribution, absorb, the value handed to ``emit``, emit itself) are
those of the engine's :class:`~hailstorm.engine.BoltExecution`, shared with the reference
model :func:`hailstorm.model.run_model`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from hailstorm.engine import execution_of
from hailstorm.lateness import forget_dropped
from hailstorm.processors.actions import (
    Action,
    Batch,
    Emit,
    Failed,
    ForwardClock,
    ForwardWatermark,
    Marks,
    PartitionKey,
    ProtocolViolation,
    SnapshotContent,
)
from hailstorm.processors.compaction import HeldBack, emit_rows
from hailstorm.processors.deltas import DeltaChain
from hailstorm.processors.expiry import ClosedWindows
from hailstorm.processors.running_totals import add_and_emit
from hailstorm.processors.segments import PendingRound, Segments
from hailstorm.processors.watermarks import UpstreamWatermarks
from hailstorm.protocol.clock import NOTHING
from hailstorm.topology import BoltSpec, RecordFailed

__all__ = ["BoltCore"]

_FRESH: Any = object()

_key_of = itemgetter(0)

_VIEWS_MAX = 65_536
"""Keys whose merged value a bolt keeps while a round is pending, at most (beyond: merged
per tuple): bounds the copies a round of many touched keys holds."""


class BoltCore:
    """One bolt instance's state machine (not thread-safe: drive it from one thread).

    ``upstreams`` names every upstream instance that may send to this instance (every
    instance of every input node, whether or not any data flows from it): each must have
    sent a watermark before anything is snapshotted or forwarded. The core takes ownership
    of ``loaded_state`` (it is updated in place); it defaults to the monoid's identity.
    ``loaded_whole``: ``loaded_state`` is exactly the content of one snapshot of this
    instance, which the next snapshot may build on as a delta.
    """

    def __init__(
        self,
        spec: BoltSpec,
        upstreams: Iterable[str],
        loaded_clock: Mapping[PartitionKey, int] | None = None,
        loaded_state: Any = _FRESH,
        loaded_whole: bool = False,
    ) -> None:
        self.spec = spec
        self._run = execution_of(spec)
        self._monoid = spec.state
        self._monoid_of_values = spec.value_monoid
        self._upstreams = frozenset(upstreams)
        self._watermarks = UpstreamWatermarks(self._upstreams)
        state = self._monoid.empty() if loaded_state is _FRESH else loaded_state
        self._segments = Segments(spec.name, self._monoid, state, loaded_clock or {})
        self._deltas = DeltaChain(self._monoid, loaded_whole)
        self.compacting = spec.compacting
        """Emit once per key and :meth:`flush`, not once per tuple (see
        :attr:`~hailstorm.topology.BoltSpec.compacting`)."""
        self._held = HeldBack()
        self.applied = 0
        """Tuples (or pre-aggregated contributions) absorbed so far."""
        self.failed: list[Failed] = []
        """Tuples a user function failed on (their contributions are not in the state; a
        failed emit's contribution is): the shell quarantines them and clears this."""
        self.closed_windows = ClosedWindows(spec) if spec.late is not None else None
        """Bolts routing late data: what :meth:`expire` drops."""
        self._swept_unwritten = False
        """:meth:`expire` dropped something since the last snapshot handed out."""
        self._handed_out: SnapshotContent | None = None
        """The content of the snapshot handed out whose ``A`` waits to fold."""
        self._views: dict[Any, Any] = {}
        """While a round is pending (:attr:`BoltExecution.merges_views`): touched keys'
        values merged across the segments, each absorbing what its segment absorbs, so
        emit gets them without a merge per tuple. Valid for :attr:`_views_of`."""
        self._views_of: tuple[int, bool, int | None] | None = None
        """The segments' layout the views were merged from (pending rounds, a hand-out
        waiting to fold, the latest round): any other layout starts them afresh."""
        if self.closed_windows is not None and spec.drops_keys:
            forget_dropped(self.closed_windows.window, state)

    @property
    def dropped(self) -> int:
        """Tuples dropped because the loaded snapshot already contains them."""
        return self._segments.dropped

    # -- frames -------------------------------------------------------------------------

    def on_data(
        self,
        upstream: str,
        partitions: Sequence[PartitionKey],
        offsets: Sequence[int],
        tuples: Sequence[Any],
    ) -> Batch:
        """Absorb a batch from ``upstream``; return the tuples to emit, in order.

        Raises :class:`ProtocolViolation` for a tuple at or below a clock already
        snapshotted (beyond the loaded clock). A tuple a user function fails on
        (:class:`~hailstorm.topology.RecordFailed`) is added to :attr:`failed` and skipped.
        Other exceptions (a monoid failing on values it accepted) propagate with a note
        naming the tuple; the state may then be partly updated, so the processor must fail
        and recover from its snapshot.
        """
        return self._apply(upstream, partitions, offsets, tuples, None)

    def on_contributions(
        self,
        upstream: str,
        partitions: Sequence[PartitionKey],
        offsets: Sequence[int],
        tuples: Sequence[Any],
        keys: Sequence[Any],
        values: Sequence[Any],
    ) -> Batch:
        """Like :meth:`on_data` for pre-aggregated contributions (a spout feeding a
        ``preaggregate`` bolt): ``values[i]`` is absorbed under ``keys[i]`` as is, and emit
        sees ``tuples[i]``. Each origin stands for every tuple combined into it."""
        if not len(keys) == len(values) == len(tuples):
            raise ProtocolViolation(
                f"bolt {self.spec.name!r}: contributions from {upstream!r} have "
                f"{len(tuples)} tuples, {len(keys)} keys and {len(values)} values"
            )
        return self._apply(upstream, partitions, offsets, tuples, zip(keys, values, strict=True))

    def _apply(
        self,
        upstream: str,
        partitions: Sequence[PartitionKey],
        offsets: Sequence[int],
        tuples: Sequence[Any],
        contributions: Iterable[tuple[Any, Any]] | None,
    ) -> Batch:
        """Absorb tuples (``contributions is None``: computed here) and emit."""
        if upstream not in self._upstreams:
            raise KeyError(f"bolt {self.spec.name!r}: data from unknown upstream {upstream!r}")
        if self._handed_out is not None:
            self._fold_copied(wait=False)
        if self.closed_windows is not None:  # how far each partition's windows reached
            if contributions is None:
                partitions, offsets, tuples, contributions = self._contributions_of(
                    partitions, offsets, tuples)
            contributions = list(contributions)
            self.closed_windows.note(partitions, contributions, upstream)
        if self.spec.emit is None or self.compacting:
            self._absorb_quietly(upstream, partitions, offsets, tuples, contributions)
            return Batch()
        spec = self.spec
        if contributions is None:
            partitions, offsets, tuples, contributions = self._contributions_of(
                partitions, offsets, tuples)
        absorb = self._run.absorb
        value_for_emit = self._run.value_for_emit
        merged_value = self._run.merged_value
        outputs = self._run.outputs
        split = self._segments
        floor_get = split.floor.get
        seen = split.seen
        seen_get = seen.get
        segments = split.states
        pending = len(split.pending)
        first_label, beyond = split.boundary()
        first_label_get = first_label.get
        changed = self._deltas.changed
        # One partition, nothing to drop, one segment: no step per tuple to place it. And
        # numbers added per key (Count, Sum) are added here, not through the monoid: with
        # at most one other segment to merge with, a batch at a time.
        whole = split.whole_segment(partitions, offsets)
        adds = whole is not None and self._run.adds_keys
        if adds and whole is not None and len(segments) <= 2:
            added_batch = add_and_emit(self._run, segments, whole, partitions, offsets,
                                       tuples, contributions, self.failed)
            if whole == 0 and changed is not None:
                changed.update(added_batch.keys)
            self.applied += len(added_batch.keys)
            return added_batch.out
        added = segments[whole] if adds and whole is not None else {}
        added_get = added.get
        out = Batch()
        out_partitions = out.partitions.append
        out_offsets = out.offsets.append
        out_tuples = out.tuples.append
        applied = 0
        views = self._current_views(len(segments) > 1)
        absorb_view = self._monoid_of_values.absorb
        i = whole or 0
        for p, o, t, (key, value) in zip(partitions, offsets, tuples, contributions,
                                         strict=True):
            if whole is None:
                if o <= floor_get(p, NOTHING):
                    split.drop(p, o)
                    continue
                if o > seen_get(p, NOTHING):
                    seen[p] = o
                if pending == 0:
                    i = 0
                elif pending == 1:
                    i = 0 if o <= first_label_get(p, beyond) else 1
                else:
                    i = split.segment_of(p, o)
            try:
                if adds:
                    added[key] = added_get(key, 0) + value
                else:
                    segments[i] = absorb(segments[i], key, value)
                applied += 1
                if i == 0 and changed is not None:
                    changed.add(key)
                if views is None:
                    emitted_value = value_for_emit(key, segments)
                else:
                    view = views.get(key, _FRESH)
                    if view is not _FRESH:
                        emitted_value = views[key] = absorb_view(view, value)
                    elif len(views) < _VIEWS_MAX:
                        emitted_value = views[key] = merged_value(key, segments)
                    else:
                        emitted_value = value_for_emit(key, segments)
                produced = outputs(t, key, emitted_value)
            except RecordFailed as failure:  # emit: the contribution stays
                self.failed.append((p, o, t, failure))
                continue
            except Exception as exc:  # broad: any user or monoid failure, noted, re-raised
                exc.add_note(f"in bolt {spec.name!r}, processing tuple {t!r} from {(p, o)}")
                raise
            for emitted in produced:
                out_partitions(p)
                out_offsets(o)
                out_tuples(emitted)
        self.applied += applied
        return out

    def _current_views(self, pending: bool) -> dict[Any, Any] | None:
        """:attr:`_views` for a batch while a round is pending (None: emit merges per
        tuple), started afresh when the segments' layout changed since they were merged."""
        if not pending or not self._run.merges_views:
            if self._views:
                self._views = {}
            return None
        split = self._segments
        layout = (len(split.pending), split.handing_out, split.latest_epoch)
        if layout != self._views_of:
            self._views, self._views_of = {}, layout
        return self._views

    def _contributions_of(
        self, partitions: Sequence[PartitionKey], offsets: Sequence[int], tuples: Sequence[Any]
    ) -> tuple[Sequence[PartitionKey], Sequence[int], Sequence[Any], list[tuple[Any, Any]]]:
        """The contributions of a batch (:meth:`BoltExecution.contributions`) with the tuples
        they belong to; failed tuples go to :attr:`failed`, except those within the loaded
        snapshot (quarantined before it was taken)."""
        contributions, indices, failures = self._run.contributions(tuples)
        if failures:
            floor_get = self._segments.floor.get
            self.failed.extend((partitions[i], offsets[i], tuples[i], failure)
                               for i, failure in failures
                               if offsets[i] > floor_get(partitions[i], NOTHING))
            partitions = [partitions[i] for i in indices]
            offsets = [offsets[i] for i in indices]
            tuples = [tuples[i] for i in indices]
        return partitions, offsets, tuples, contributions

    def expire(self, budget: int = 10_000) -> int:
        """Bolts routing late data: drop closed windows from up to ``budget`` keys (see
        :class:`~hailstorm.processors.expiry.ClosedWindows`); returns how many."""
        if self.closed_windows is None:
            return 0
        if self._handed_out is not None and not self._fold_copied(wait=False):
            return 0  # A must stay as it is until its snapshot is copied: the next time
        dropped = self.closed_windows.expire(self._segments.states,
                                             self._watermarks.outgoing(), budget,
                                             self._deltas.changed, self._watermarks.carried())
        if dropped:
            self._swept_unwritten = True
        return dropped

    @property
    def unsaved_sweep(self) -> bool:
        """:meth:`expire` dropped what no snapshot handed out holds, no round is pending,
        and no tuple was absorbed since the last snapshot (or since loading): the spouts'
        next clock may be the last round's, and a round at it must still be taken to save
        the drop. (A drop while a round is pending is in that round's snapshot; a tuple
        absorbed since moves the next clock, so that round is taken anyway.)"""
        split = self._segments
        if not self._swept_unwritten or split.pending:
            return False
        floor = split.floor  # the loaded clock raised to each round written
        return all(o <= floor.get(p, NOTHING) for p, o in split.seen.items())

    def on_watermark(self, upstream: str, watermark: Mapping[PartitionKey, int]) -> list[Action]:
        """Record ``upstream``'s watermark; return snapshots now due (oldest first), then
        the watermark to forward if the low water mark moved.

        Raises ``KeyError`` for an unknown upstream.
        """
        moved = self._watermarks.observe(upstream, watermark)
        actions: list[Action] = self._write_covered() if self._segments.pending else []
        if moved and self.compacting:
            self._held.watermark = True  # rows it covers may be held back: wait for flush
        elif moved:
            outgoing = self._watermarks.outgoing()
            if outgoing is not None:
                actions.append(ForwardWatermark(outgoing))
        return actions

    def on_clock(self, epoch: int, clock: Mapping[PartitionKey, int],
                 partial: bool = False) -> list[Action]:
        """Learn the clock of round ``epoch`` (from a CLOCK frame or the master state), or
        with ``partial`` some parts of it (a barrier round's CLOCK_PART frames).

        What is new is returned as ``ForwardClock`` (send it before any further data),
        then any snapshot already due. Repeats, older rounds and parts of a round passed
        return nothing. Raises :class:`ProtocolViolation` when a tuple above ``clock`` was
        already absorbed: an upstream sent it before the clock.
        """
        split = self._segments
        new = split.latest_epoch is None or epoch > split.latest_epoch
        if new:  # the master started a later round: an earlier partial one is never written
            self.round_passed(epoch - 1)
        learned = split.open(epoch, clock, partial)
        if learned is None:
            return []
        if new and self.closed_windows is not None:
            self.closed_windows.round_started()
        return [ForwardClock(epoch, learned, partial), *self._write_covered()]

    def round_passed(self, epoch: int) -> None:
        """The master moved past round ``epoch`` and every earlier one without completing
        them here (a round skipped, or abandoned by a recovery): a round known only in part
        is dropped, its ``B`` folded into its ``A`` with nothing written."""
        split = self._segments
        for i in reversed(range(len(split.pending))):
            r = split.pending[i]
            if r.complete or r.epoch > epoch:
                continue
            if i == 0:  # B folds into A: its keys are what A changed by
                self._deltas.merging(split.states[1])
            if self.closed_windows is not None:  # which knows only the rounds not handed out
                self.closed_windows.round_dropped(i - 1 if split.handing_out else i)
            split.abandon(i)

    def flush(self) -> list[Action]:
        """Compacting bolts: emit once per key touched since the last flush (its last tuple
        and origin, its current value), then the watermark held back meanwhile.
        Other bolts: nothing to do. Call it on a short timer (rows and rounds wait for it).
        """
        actions: list[Action] = []
        if self._held.rows:
            out = emit_rows(self._run, self._segments.states, self._held.take_rows(),
                            self.failed)
            if out.tuples:
                actions.append(Emit(out))
        if self._held.take_watermark():
            outgoing = self._watermarks.outgoing()
            if outgoing is not None:
                actions.append(ForwardWatermark(outgoing))
        return actions

    @property
    def unflushed(self) -> bool:
        """A compacting bolt holds rows or a watermark back: :meth:`flush` has work."""
        return self._held.any

    # -- inspection ---------------------------------------------------------------------

    @property
    def upstreams(self) -> list[str]:
        """The upstream instances, sorted."""
        return sorted(self._upstreams)

    @property
    def loaded_clock(self) -> Marks:
        """The clock of the snapshot this instance started from."""
        return dict(self._segments.loaded)

    @property
    def pending_clock(self) -> Marks | None:
        """The clock of the oldest round not yet snapshotted, or None."""
        pending = self._unwritten()
        return dict(pending[0].clock) if pending else None

    @property
    def pending_epochs(self) -> list[int]:
        """Rounds learned but not yet snapshotted, oldest first."""
        return [r.epoch for r in self._unwritten()]

    def _unwritten(self) -> list[PendingRound]:
        """The pending rounds not handed out, oldest first."""
        pending = self._segments.pending
        return pending[1:] if self._segments.handing_out else pending

    @property
    def latest_epoch(self) -> int | None:
        """The newest round whose clock this instance knows."""
        return self._segments.latest_epoch

    @property
    def last_snapshot(self) -> tuple[int, Marks] | None:
        """``(epoch, clock)`` of the last snapshot handed out, or None."""
        return self._segments.last_written

    @property
    def low_water_mark(self) -> Marks | None:
        """The current outgoing watermark (None while an upstream is silent); a shell may
        re-send it on a timer."""
        return self._watermarks.outgoing()

    @property
    def silent_upstreams(self) -> list[str]:
        """Upstream instances that have not sent a watermark yet (they block snapshots)."""
        return self._watermarks.silent

    @property
    def key_count(self) -> int | None:
        """Distinct keys held (keyed state), else None."""
        return self._segments.key_count() if self.spec.keyed else None

    def merged_state(self) -> Any:
        """A copy of the whole state (all segments merged): for tests and inspection."""
        return self._segments.merged()

    @property
    def absorbed(self) -> Marks:
        """The highest offset per partition whose tuples may be in the state (the loaded
        clock raised by every tuple absorbed since): nothing above it is."""
        return self._segments.absorbed

    def lookup(self, keys: Iterable[Any]) -> tuple[dict[Any, Any], list[Any]]:
        """``(values, missing)``: the current value of each key of a keyed state (every
        segment merged; a copy), and the keys it does not hold."""
        return self._segments.lookup(keys)

    # -- internals ----------------------------------------------------------------------

    def _absorb_quietly(
        self,
        upstream: str,
        partitions: Sequence[PartitionKey],
        offsets: Sequence[int],
        tuples: Sequence[Any],
        contributions: Iterable[tuple[Any, Any]] | None,
    ) -> None:
        """``_apply`` without emit: pre-aggregate per segment, absorb once each."""
        split = self._segments
        floor_get = split.floor.get
        seen = split.seen
        seen_get = seen.get
        groups: list[list[Any]] = [[] for _ in split.states]
        pending = len(split.pending)
        first_label, beyond = split.boundary()
        first_label_get = first_label.get
        applied = 0
        spec = self.spec
        if contributions is None:
            partitions, offsets, tuples, contributions = self._contributions_of(
                partitions, offsets, tuples)
        items = list(contributions)
        before = split.dropped
        whole = split.whole_segment(partitions, offsets)
        if whole is not None:  # one partition, one segment, nothing to drop: no loop
            groups[whole] = list(items)
            applied = len(items)
        else:
            for p, o, t in zip(partitions, offsets, items, strict=True):
                if o <= floor_get(p, NOTHING):
                    split.drop(p, o)
                    continue
                if o > seen_get(p, NOTHING):
                    seen[p] = o
                if pending == 0:
                    groups[0].append(t)
                elif pending == 1:
                    groups[0 if o <= first_label_get(p, beyond) else 1].append(t)
                else:
                    groups[split.segment_of(p, o)].append(t)
                applied += 1
        segments = split.states
        absorb_contributions = self._run.absorb_contributions
        for i, group in enumerate(groups):
            if group:
                try:
                    segments[i] = absorb_contributions(segments[i], group)
                except Exception as exc:  # broad: any user or monoid failure, noted, re-raised
                    exc.add_note(f"in bolt {spec.name!r}, absorbing a batch of "
                                 f"{len(group)} tuples from {upstream!r}")
                    raise
        changed = self._deltas.changed
        if groups[0] and changed is not None:
            changed.update(map(_key_of, groups[0]))
        if self.compacting:
            self._held.remember(partitions, offsets, tuples, items,
                                split.floor if split.dropped > before else None)
        self.applied += applied

    def _write_covered(self) -> list[Action]:
        """Hand out every pending round the low water mark covers, oldest first (folding
        the one handed out before, once its snapshot was copied; copying it here first
        when another round is due)."""
        actions: list[Action] = []
        split = self._segments
        while split.pending:
            done = split.pending[0]
            if done.handed_out:
                due = len(split.pending) > 1 and self._due(split.pending[1])
                if self._fold_copied(wait=due):
                    continue
                break
            if not self._due(done):
                break
            if self.closed_windows is not None:
                self.closed_windows.round_written()
            write = self._deltas.snapshot_of(done.epoch, done.label, split.states[0])
            split.hand_out()
            self._handed_out = write.content
            self._swept_unwritten = False
            actions.append(write)
            self._fold_copied(wait=False)  # copied as handed out: a whole state, a big delta
        return actions

    def _due(self, r: PendingRound) -> bool:
        """Round ``r`` may be handed out: its clock is whole and the low water mark covers
        it."""
        return r.complete and self._watermarks.covers(r.clock)

    def _fold_copied(self, *, wait: bool) -> bool:
        """Fold ``B`` into the handed-out ``A`` if its snapshot was copied (with ``wait``,
        copying it first when not yet); says whether it folded."""
        content = self._handed_out
        assert content is not None
        if not content.copied:
            if not wait:
                return False
            content.get()
        split = self._segments
        self._deltas.folding(split.states[1])
        split.fold_handed_out()
        self._handed_out = None
        return True

    def __repr__(self) -> str:
        return (
            f"BoltCore({self.spec.name!r}, pending={self.pending_epochs}, "
            f"last_snapshot={self.last_snapshot}, applied={self.applied})"
        )
