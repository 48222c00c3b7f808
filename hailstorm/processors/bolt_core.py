"""The pure core of a bolt instance: state split at the snapshot clock (A/B), low water
marks, snapshot hand-off.

Life of a bolt instance (one :class:`BoltCore`, driven by one thread):

* It starts from the loaded snapshot: state ``S`` at clock ``L``. A tuple with
  ``offset <= L[p]`` is already in ``S`` and is dropped (the tuple *at* ``L[p]`` too).
* With no snapshot clock pending, tuples are absorbed into ``S``.
* On learning the clock ``C`` of round ``e`` (a CLOCK frame or the master state, whichever
  comes first), the bolt forwards CLOCK downstream and splits: ``A = S``, ``B = empty``.
  A tuple ``(p, o)`` then goes to ``A`` when ``o <= C[p]``, else to ``B``; emit sees the
  merged value (for keyed state only the tuple's key is merged: ``A[k] + B[k]``).
* Once the low water mark over all upstream instances covers ``C`` (no tuple at or below
  ``C`` can still arrive), it asks for ``A`` to be written (a private copy) and folds ``B``
  into ``A``, back to a single state. That also happens with no data at all after ``C``:
  watermarks keep flowing.

* Watermarks: once every upstream instance has sent one, the bolt forwards its low water
  mark (every partition some upstream carries) whenever it moves. It emits synchronously,
  so sending the watermark after the data already returned keeps the promise.
* Compaction (keyed ``preaggregate`` bolts without windows, whose readers are upsert
  tables keeping the latest row per key): instead of emitting for every tuple, the bolt
  remembers the last tuple and origin of every key touched, and :meth:`BoltCore.flush`
  emits once per key with its current value, then the watermark held back meanwhile. The
  table ends with the same rows: per tuple, the last row of a key would have carried the
  same value (only the key's own tuples change it) and origin, and the earlier rows would
  have been superseded. Since the watermark waits for the flush, no row a watermark
  covers is still held back.

Delta snapshots (keyed state): the core knows which keys of ``A`` changed since the last
snapshot it handed out (tuples absorbed into ``A``, and ``B``'s keys when ``B`` folds into
``A``), so a round's snapshot may hold only those keys, on top of the previous one. It
writes the whole state instead when it was not loaded from one snapshot it may build on,
after :data:`DELTA_CHAIN_MAX` deltas, or when the keys written in deltas since the last
whole snapshot would exceed the state's size: loading then reads at most about twice the
state, and whole snapshots cost at most as much as the deltas between them.

Closed windows (bolts routing late data): :meth:`BoltCore.expire`, on a timer, drops the
windows no tuple can reach any more (:mod:`hailstorm.processors.expiry`).

Several rounds may be pending at once (each later clock opens one more segment); they are
written oldest first. Snapshot labels are raised pointwise to the loaded clock and to
earlier rounds' clocks, so a label always states exactly what its state contains.

Recovery: a tuple a bolt drops (within its loaded clock) is never emitted again, so a
bolt's loaded clock must not be behind that of any bolt upstream of it, or it misses the
effects of those tuples. Loading every bolt at the same committed round guarantees this.

Per-tuple semantics (contribution, absorb, the value handed to ``emit``, emit itself) are
those of the engine's :class:`~hailstorm.engine.BoltExecution`, shared with the reference
model :func:`hailstorm.model.run_model`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    WriteSnapshot,
)
from hailstorm.processors.expiry import ClosedWindows
from hailstorm.processors.watermarks import UpstreamWatermarks
from hailstorm.protocol.clock import NOTHING, merge_max
from hailstorm.topology import BoltSpec, RecordFailed

__all__ = ["BoltCore"]

_FRESH: Any = object()

DELTA_CHAIN_MAX = 32
"""Deltas in a row at most before a whole snapshot (bounds the files a load reads)."""

_key_of = itemgetter(0)


@dataclass(frozen=True, slots=True)
class _Round:
    epoch: int
    clock: Marks
    """The clock the master chose; the low water mark must cover it."""
    label: Marks
    """``clock`` raised to the loaded clock and earlier rounds: what the state is at."""


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
        self._upstreams = frozenset(upstreams)
        self._watermarks = UpstreamWatermarks(self._upstreams)
        self._loaded: Marks = dict(loaded_clock or {})
        self._floor: Marks = dict(self._loaded)
        """Tuples at or below: dropped if within the loaded clock, else refused."""
        self._seen: Marks = {}
        """Highest offset absorbed per partition (to catch clocks that arrive too late)."""
        state = self._monoid.empty() if loaded_state is _FRESH else loaded_state
        self._segments: list[Any] = [state]
        """``len(pending) + 1`` states; segment ``i`` holds tuples up to ``pending[i]``."""
        self._pending: list[_Round] = []
        self._latest_epoch: int | None = None
        self._latest_label: Marks = dict(self._loaded)
        self._last_snapshot: tuple[int, Marks] | None = None
        self.compacting = spec.preaggregate and spec.emit is not None and spec.groups_by_key
        """Emit once per key and :meth:`flush`, not once per tuple (see the module). Only
        where a group is its state key: the key's value then changes only with the group's
        own tuples (windows expire with other windows' tuples, unkeyed state with every
        tuple, so emitting later could give other rows)."""
        self._dirty: dict[Any, tuple[PartitionKey, int, Any]] = {}
        """Key -> (partition, offset, tuple) of its last tuple since the last flush."""
        self._changed: set[Any] | None = set() if loaded_whole and spec.keyed else None
        """Keys of segment 0 changed since the last snapshot handed out (or the loaded
        one); None when the next snapshot must be whole."""
        self._chain = 0
        """Deltas handed out since the last whole snapshot (or the load)."""
        self._chain_keys = 0
        """Keys those deltas held."""
        self._holding = False
        """The outgoing watermark moved since the last flush (compacting bolts)."""
        self.applied = 0
        """Tuples (or pre-aggregated contributions) absorbed so far."""
        self.dropped = 0
        """Tuples dropped because the loaded snapshot already contains them."""
        self.failed: list[Failed] = []
        """Tuples a user function failed on (their contributions are not in the state; a
        failed emit's contribution is): the shell quarantines them and clears this."""
        self.closed_windows = ClosedWindows(spec) if spec.late is not None else None
        """Bolts routing late data: what :meth:`expire` drops."""
        if self.closed_windows is not None and spec.drops_keys:
            forget_dropped(self.closed_windows.window, state)

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
        outputs = self._run.outputs
        floor_get = self._floor.get
        seen = self._seen
        seen_get = seen.get
        segments = self._segments
        pending = len(self._pending)
        first_label_get = (self._pending[0].label if pending else self._floor).get
        changed = self._changed
        out = Batch()
        out_partitions = out.partitions.append
        out_offsets = out.offsets.append
        out_tuples = out.tuples.append
        applied = 0
        for p, o, t, (key, value) in zip(partitions, offsets, tuples, contributions,
                                         strict=True):
            if o <= floor_get(p, NOTHING):
                self._drop(p, o)
                continue
            if o > seen_get(p, NOTHING):
                seen[p] = o
            if pending == 0:
                i = 0
            elif pending == 1:
                i = 0 if o <= first_label_get(p, NOTHING) else 1
            else:
                i = self._segment_of(p, o)
            try:
                segments[i] = absorb(segments[i], key, value)
                applied += 1
                if i == 0 and changed is not None:
                    changed.add(key)
                produced = outputs(t, value_for_emit(key, segments))
            except RecordFailed as failure:  # emit: the contribution stays
                self.failed.append((p, o, t, failure))
                continue
            except Exception as exc:
                exc.add_note(f"in bolt {spec.name!r}, processing tuple {t!r} from {(p, o)}")
                raise
            for emitted in produced:
                out_partitions(p)
                out_offsets(o)
                out_tuples(emitted)
        self.applied += applied
        return out

    def _contributions_of(
        self, partitions: Sequence[PartitionKey], offsets: Sequence[int], tuples: Sequence[Any]
    ) -> tuple[Sequence[PartitionKey], Sequence[int], Sequence[Any], list[tuple[Any, Any]]]:
        """The contributions of a batch (:meth:`BoltExecution.contributions`) with the tuples
        they belong to; failed tuples go to :attr:`failed`, except those within the loaded
        snapshot (quarantined before it was taken)."""
        contributions, indices, failures = self._run.contributions(tuples)
        if failures:
            floor_get = self._floor.get
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
        return self.closed_windows.expire(self._segments, self._watermarks.outgoing(), budget,
                                          self._changed, self._watermarks.carried())

    def on_watermark(self, upstream: str, watermark: Mapping[PartitionKey, int]) -> list[Action]:
        """Record ``upstream``'s watermark; return snapshots now due (oldest first), then
        the watermark to forward if the low water mark moved.

        Raises ``KeyError`` for an unknown upstream.
        """
        moved = self._watermarks.observe(upstream, watermark)
        actions: list[Action] = self._write_covered() if self._pending else []
        if moved and self.compacting:
            self._holding = True  # rows it covers may be held back: it waits for flush
        elif moved:
            outgoing = self._watermarks.outgoing()
            if outgoing is not None:
                actions.append(ForwardWatermark(outgoing))
        return actions

    def on_clock(self, epoch: int, clock: Mapping[PartitionKey, int]) -> list[Action]:
        """Learn the clock of round ``epoch`` (from a CLOCK frame or the master state).

        The first time: returns ``ForwardClock`` (send it before any further data), then any
        snapshot already due. Repeats and older rounds return nothing. Raises
        :class:`ProtocolViolation` when a tuple above ``clock`` was already absorbed: an
        upstream sent it before the clock.
        """
        if self._latest_epoch is not None and epoch <= self._latest_epoch:
            return []
        label = merge_max(self._latest_label, clock)
        beyond = {p: o for p, o in self._seen.items() if o > label.get(p, NOTHING)}
        if beyond:
            raise ProtocolViolation(
                f"bolt {self.spec.name!r}: clock of round {epoch} arrived after tuples above "
                f"it (highest offsets absorbed {beyond}, clock {dict(clock)}); upstreams must "
                "send CLOCK before any tuple beyond it"
            )
        self._latest_epoch = epoch
        self._latest_label = label
        self._pending.append(_Round(epoch, dict(clock), label))
        self._segments.append(self._monoid.empty())
        if self.closed_windows is not None:
            self.closed_windows.round_started()
        return [ForwardClock(epoch, dict(clock)), *self._write_covered()]

    def flush(self) -> list[Action]:
        """Compacting bolts: emit once per key touched since the last flush (its last tuple
        and origin, its current value), then the watermark held back meanwhile.
        Other bolts: nothing to do. Call it on a short timer (rows and rounds wait for it).
        """
        actions: list[Action] = []
        if self._dirty:
            dirty, self._dirty = self._dirty, {}
            out = self._emit_groups(dirty.items())
            if out.tuples:
                actions.append(Emit(out))
        if self._holding:
            self._holding = False
            outgoing = self._watermarks.outgoing()
            if outgoing is not None:
                actions.append(ForwardWatermark(outgoing))
        return actions

    @property
    def unflushed(self) -> bool:
        """A compacting bolt holds rows or a watermark back: :meth:`flush` has work."""
        return bool(self._dirty) or self._holding

    # -- inspection ---------------------------------------------------------------------

    @property
    def upstreams(self) -> list[str]:
        """The upstream instances, sorted."""
        return sorted(self._upstreams)

    @property
    def loaded_clock(self) -> Marks:
        """The clock of the snapshot this instance started from."""
        return dict(self._loaded)

    @property
    def pending_clock(self) -> Marks | None:
        """The clock of the oldest round not yet snapshotted, or None."""
        return dict(self._pending[0].clock) if self._pending else None

    @property
    def pending_epochs(self) -> list[int]:
        """Rounds learned but not yet snapshotted, oldest first."""
        return [r.epoch for r in self._pending]

    @property
    def latest_epoch(self) -> int | None:
        """The newest round whose clock this instance knows."""
        return self._latest_epoch

    @property
    def last_snapshot(self) -> tuple[int, Marks] | None:
        """``(epoch, clock)`` of the last snapshot handed out, or None."""
        return self._last_snapshot

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
        if not self.spec.keyed:
            return None
        if len(self._segments) == 1:
            return len(self._segments[0])
        return len(set().union(*self._segments))

    def merged_state(self) -> Any:
        """A copy of the whole state (all segments merged): for tests and inspection."""
        return self._monoid.combine_all(self._segments)

    @property
    def absorbed(self) -> Marks:
        """The highest offset per partition whose tuples may be in the state (the loaded
        clock raised by every tuple absorbed since): nothing above it is."""
        return merge_max(self._loaded, self._seen)

    def lookup(self, keys: Iterable[Any]) -> tuple[dict[Any, Any], list[Any]]:
        """``(values, missing)``: the current value of each key of a keyed state (every
        segment merged; a copy), and the keys it does not hold."""
        inner = self._monoid.inner  # type: ignore[attr-defined]
        values: dict[Any, Any] = {}
        missing: list[Any] = []
        for key in keys:
            parts = [segment[key] for segment in self._segments if key in segment]
            if parts:
                values[key] = inner.combine_all(parts) if len(parts) > 1 else \
                    inner.copy(parts[0])
            else:
                missing.append(key)
        return values, missing

    # -- internals ----------------------------------------------------------------------

    def _segment_of(self, partition: PartitionKey, offset: int) -> int:
        for i, r in enumerate(self._pending):
            if offset <= r.label.get(partition, NOTHING):
                return i
        return len(self._pending)

    def _drop(self, partition: PartitionKey, offset: int) -> None:
        if offset <= self._loaded.get(partition, NOTHING):
            self.dropped += 1
            return
        last = self._last_snapshot
        raise ProtocolViolation(
            f"bolt {self.spec.name!r}: tuple from {(partition, offset)} arrived after the "
            f"snapshot that had to contain it (round {last[0] if last else '?'}, clock "
            f"{last[1] if last else '?'}); an upstream sent a watermark above it too early"
        )

    def _absorb_quietly(
        self,
        upstream: str,
        partitions: Sequence[PartitionKey],
        offsets: Sequence[int],
        tuples: Sequence[Any],
        contributions: Iterable[tuple[Any, Any]] | None,
    ) -> None:
        """``_apply`` without emit: pre-aggregate per segment, absorb once each."""
        floor_get = self._floor.get
        seen = self._seen
        seen_get = seen.get
        groups: list[list[Any]] = [[] for _ in self._segments]
        pending = len(self._pending)
        first_label_get = (self._pending[0].label if pending else self._floor).get
        applied = 0
        spec = self.spec
        if contributions is None:
            partitions, offsets, tuples, contributions = self._contributions_of(
                partitions, offsets, tuples)
        items = list(contributions)
        before = self.dropped
        whole = self._whole_segment(partitions, offsets)
        if whole is not None:  # one partition, one segment, nothing to drop: no loop
            groups[whole] = list(items)
            applied = len(items)
        else:
            for p, o, t in zip(partitions, offsets, items, strict=True):
                if o <= floor_get(p, NOTHING):
                    self._drop(p, o)
                    continue
                if o > seen_get(p, NOTHING):
                    seen[p] = o
                if pending == 0:
                    groups[0].append(t)
                elif pending == 1:
                    groups[0 if o <= first_label_get(p, NOTHING) else 1].append(t)
                else:
                    groups[self._segment_of(p, o)].append(t)
                applied += 1
        segments = self._segments
        absorb_contributions = self._run.absorb_contributions
        for i, group in enumerate(groups):
            if group:
                try:
                    segments[i] = absorb_contributions(segments[i], group)
                except Exception as exc:
                    exc.add_note(f"in bolt {spec.name!r}, absorbing a batch of "
                                 f"{len(group)} tuples from {upstream!r}")
                    raise
        if groups[0] and self._changed is not None:
            self._changed.update(map(_key_of, groups[0]))
        if self.compacting:
            self._remember(partitions, offsets, tuples, items, self.dropped > before)
        self.applied += applied

    def _whole_segment(self, partitions: Sequence[PartitionKey],
                       offsets: Sequence[int]) -> int | None:
        """The segment every tuple of a batch goes to, when they come from one partition,
        none is at or below the floor and all fall into the same segment; else None."""
        if not partitions or len(set(partitions)) != 1:
            return None
        p = partitions[0]
        low, high = min(offsets), max(offsets)
        if low <= self._floor.get(p, NOTHING):
            return None
        segment = self._segment_of(p, low)
        if self._segment_of(p, high) != segment:
            return None
        if high > self._seen.get(p, NOTHING):
            self._seen[p] = high
        return segment

    def _remember(self, partitions: Sequence[PartitionKey], offsets: Sequence[int],
                  tuples: Sequence[Any], contributions: Sequence[tuple[Any, Any]],
                  dropped: bool) -> None:
        """Record the last tuple of every key in a batch absorbed by a compacting bolt
        (tuples dropped as already in the loaded snapshot are never emitted)."""
        keys = [key for key, _value in contributions]
        rows = zip(partitions, offsets, tuples, strict=True)
        if dropped:
            floor_get = self._floor.get
            kept = [(key, row) for key, row in zip(keys, rows, strict=True)
                    if row[1] > floor_get(row[0], NOTHING)]
            self._dirty.update(kept)
        else:
            self._dirty.update(zip(keys, rows, strict=True))

    def _emit_groups(self, rows: Iterable[tuple[Any, tuple[PartitionKey, int, Any]]]) -> Batch:
        """Emit for each ``(key, (partition, offset, tuple))`` with the key's current value."""
        spec = self.spec
        outputs = self._run.outputs
        segments = self._segments
        out = Batch()
        out_partitions = out.partitions.append
        out_offsets = out.offsets.append
        out_tuples = out.tuples.append
        single = segments[0] if len(segments) == 1 and spec.emits_state else None
        value_for_emit = self._run.value_for_emit
        for key, (p, o, t) in rows:
            try:
                value = single[key] if single is not None else value_for_emit(key, segments)
                produced = outputs(t, value)
            except RecordFailed as failure:
                self.failed.append((p, o, t, failure))
                continue
            except Exception as exc:
                exc.add_note(f"in bolt {spec.name!r}, emitting for tuple {t!r} from {(p, o)}")
                raise
            for emitted in produced:
                out_partitions(p)
                out_offsets(o)
                out_tuples(emitted)
        return out

    def _write_covered(self) -> list[Action]:
        """Hand out every pending round the low water mark covers, oldest first."""
        actions: list[Action] = []
        monoid = self._monoid
        segments = self._segments
        floor = self._floor
        while self._pending and self._watermarks.covers(self._pending[0].clock):
            done = self._pending.pop(0)
            if self.closed_windows is not None:
                self.closed_windows.round_written()
            before = segments[0]
            actions.append(self._snapshot_of(done, before))
            if self._changed is not None:
                self._changed = set(segments[1])  # B's keys change A as it folds in
            segments[0:2] = [monoid.absorb(before, segments[1])]
            for p, o in done.label.items():
                if o > floor.get(p, NOTHING):
                    floor[p] = o
            self._last_snapshot = (done.epoch, dict(done.label))
        return actions

    def _snapshot_of(self, done: _Round, state: Any) -> WriteSnapshot:
        """The snapshot of round ``done`` (``state`` is its segment): a delta of the keys
        changed since the last one where the policy allows (see the module), else whole."""
        changed = self._changed
        if (changed is not None and self._chain < DELTA_CHAIN_MAX
                and self._chain_keys + len(changed) <= len(state)):
            self._chain += 1
            self._chain_keys += len(changed)
            inner = self._monoid.inner  # type: ignore[attr-defined]
            delta = {k: inner.copy(state[k]) if k in state else inner.empty()
                     for k in changed}  # a key dropped since: its identity (see expiry)
            return WriteSnapshot(done.epoch, dict(done.label), delta, delta=True)
        self._chain = self._chain_keys = 0
        if self.spec.keyed:
            self._changed = set()  # the next may build on this one
        return WriteSnapshot(done.epoch, dict(done.label), self._monoid.copy(state))

    def __repr__(self) -> str:
        return (
            f"BoltCore({self.spec.name!r}, pending={self.pending_epochs}, "
            f"last_snapshot={self._last_snapshot}, applied={self.applied})"
        )

