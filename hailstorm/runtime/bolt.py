"""The bolt shell: a :class:`~hailstorm.processors.BoltCore` on the main thread (frames from
the inbound queue, clocks from CLOCK frames or the master), a snapshot writer thread that
stores A and then writes the :class:`~hailstorm.protocol.layout.SnapshotReport`, and the
answers to live queries."""

from __future__ import annotations

import gc
import logging
import queue
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hailstorm.bad_records import positions_in_batch
from hailstorm.metrics import read_at_scrape
from hailstorm.processors import (
    Action,
    Batch,
    BoltCore,
    Emit,
    Failed,
    ForwardClock,
    ForwardWatermark,
    Router,
    WriteSnapshot,
)
from hailstorm.processors.held_output import HeldOutput
from hailstorm.protocol.catchup import reads_history
from hailstorm.protocol.clock import Clock, clock_to_json, fresh_clock
from hailstorm.protocol.layout import (
    CommittedRecord,
    Flowing,
    ProcessorState,
    Role,
    SnapshotReport,
    parse_processor_id,
)
from hailstorm.protocol.wire import ClockMarker, DataBatch, Frame, Query, Watermark
from hailstorm.routing import route
from hailstorm.runtime.data_plane import DataPlaneError
from hailstorm.runtime.inbound import Inbound, InboundShell, LiveQuery, SenderGone
from hailstorm.runtime.processor import POLL, RunState
from hailstorm.runtime.standby import WarmState
from hailstorm.snapshots import SnapshotCorruptError, SnapshotError, SnapshotRef, open_store
from hailstorm.topology import BoltSpec
from hailstorm.vocabulary import DeadLetter

__all__ = ["BoltShell"]

log = logging.getLogger("hailstorm.processor")

FLUSH_INTERVAL = 0.25
"""Seconds a compacting (``preaggregate``) bolt holds rows back: it then emits one row per
key touched, and the watermark that waited for them (so rounds wait at most this)."""
BACKLOG_FLUSH_INTERVAL = 3.0
"""The same while the bolt is :attr:`~hailstorm.runtime.inbound.InboundShell.behind`
(reading a backlog): its rows are late already, and a key touched again before the next
flush is emitted once, not twice (so the sink writes it once; per-user totals over 1M
events wrote 9% fewer rows than with 1 s). A round pending meanwhile waits for the flush.
It flushes as soon as it catches up (fewer frames wait)."""
EXPIRE_INTERVAL = 1.0
"""Seconds between two slices of a late-routing bolt's sweep for closed windows."""
EXPIRE_KEYS = 20_000
"""Keys a slice of that sweep looks at, at least (a pass takes at most
:data:`~hailstorm.processors.expiry.SLICES_PER_PASS` slices)."""


class BoltShell(InboundShell):
    """One bolt instance: BoltCore on the main thread, a snapshot writer thread."""

    warm: WarmState | None = None
    """What its standby held (:mod:`hailstorm.runtime.standby`), until it loads."""

    def setup(self) -> None:
        super().setup()
        spec = self.topology.node(self.id.name)
        assert isinstance(spec, BoltSpec)
        self.spec = spec
        self.router = Router(self.topology.downstream_of(spec.name),
                             compacted=spec.preaggregate)
        self.store = open_store(self.assignment.snapshots)
        self.flushed = self.expired = time.monotonic()
        self.core: BoltCore | None = None
        self.loaded_round: int | None = None
        """The committed round when the current run started (a sweep drops after it)."""
        self.writes: queue.Queue[tuple[Chain, WriteSnapshot]] = queue.Queue(8)
        self.chain = Chain(None)
        self.held = HeldOutput()
        self.holding = False
        """While a step drains the queue: output is held (:mod:`~hailstorm.processors.
        held_output`) and sent when the step ends."""
        self._start_thread("snapshots", self._writer)
        read_at_scrape(self.metrics.state_keys,
                       lambda: None if self.core is None else self.core.key_count)

    def on_initialize(self, epoch: int) -> None:
        assert self.coord is not None
        committed = self.coord.committed()
        loaded: Clock = {}
        state: Any = self.spec.state.empty()
        base: SnapshotRef | None = None
        fresh = True
        if committed is not None:
            refs = [ref for pid, ref in sorted(committed.snapshots.items())
                    if (p := parse_processor_id(pid)).role is Role.BOLT
                    and p.name == self.spec.name]
            if refs:
                try:
                    state = self._committed_state(committed, refs)
                except SnapshotCorruptError as exc:
                    # Named to the negotiator, which falls back to the previous round.
                    log.error("committed round %d: snapshot %s is corrupt: %s",
                              committed.epoch, exc.uri, exc)
                    self.report(ProcessorState.JOINING, epoch,
                                error=f"corrupt snapshot {exc}", corrupt=exc.uri)
                    raise
                loaded = committed.clock_of(self.spec.name)  # its own while catching up
                base = self._own_snapshot(refs)
                fresh = False
        if fresh:
            loaded = self._fresh_clock(committed)
        # Writes still queued from before this Initialize build on their own chain.
        self.chain = Chain(base)
        self.loaded_round = None if committed is None else committed.epoch
        self.core = BoltCore(self.spec, self.upstream_ids(), self.table.to_wire(loaded), state,
                             loaded_whole=base is not None)
        self.received = 0
        """Tuples received in this incarnation (the bad-record budget's positions)."""
        self.dead_letters.budget.begin(1)
        gc.freeze()  # the loaded state is long-lived: collections need not walk it again
        log.info("loaded %s", f"the committed round at {loaded}" if loaded else "nothing")
        self.report(ProcessorState.READY, epoch, loaded=loaded)

    def _committed_state(self, committed: CommittedRecord, refs: list[str]) -> Any:
        """This instance's state in ``committed`` (whose files of this bolt are ``refs``):
        as its standby held it, else read."""
        warm = self._warm_state(committed, refs)
        if warm is not None:
            return warm
        upgrade = self.topology.upgrades.get(self.spec.name)
        _clock, state = self.store.load_for_instance(
            refs, self.spec.state, self.id.instance, self.spec.parallelism,
            migrate=upgrade.migrate if upgrade else None)
        return state

    def _warm_state(self, committed: CommittedRecord, refs: list[str]) -> Any:
        """The committed state of this instance as its standby held it, brought up to
        ``committed`` (None: no standby, or it holds another state: load it)."""
        warm, self.warm = self.warm, None
        if warm is None:
            return None
        try:
            log.info("standby: %s", warm.follow(committed))
        except (SnapshotError, OSError) as exc:  # read it whole, as without a standby
            log.warning("the standby's state is of no use: %s", exc)
            return None
        state = warm.take(self._own_snapshot(refs))
        if state is not None:
            log.info("the standby held the committed state: nothing to read")
        return state

    def _fresh_clock(self, committed: CommittedRecord | None) -> Clock:
        """What this bolt's empty state stands for when no committed round holds its
        state, by its ``start=`` (:func:`~hailstorm.protocol.clock.fresh_clock`)."""
        upgrade = self.topology.upgrades.get(self.spec.name)
        start = upgrade.start if upgrade else None
        starts: Clock = {}
        if start == "earliest" and committed is not None:
            from hailstorm.kafka import log_starts, waiting_out
            a = self.assignment
            starts = waiting_out(lambda: log_starts(a.kafka, sorted(committed.clock),
                                                    timeout=a.io_timeout),
                                 a.kafka, self.report_outage)
        clock = fresh_clock(start, committed.clock if committed else None, starts)
        if committed is not None and start != "latest" and not self._reads_history(committed):
            clock = dict(committed.clock)
            log.info("no committed state, and fed only through carried bolts (they send what "
                     "they emit from the committed round on): starts at its clock %s",
                     clock_to_json(clock))
        elif clock:
            log.info("no committed state: start=%r, its empty state stands for %s", start,
                     clock_to_json(clock))
        return clock

    def _reads_history(self, committed: CommittedRecord) -> bool:
        """Whether any record from before ``committed`` can reach this bolt
        (:func:`~hailstorm.protocol.catchup.reads_history`): the bolts the committed round
        holds state of at its clock are carried (not those still catching up, on a clock of
        their own: they send their backfill)."""
        carried = committed.bolts_held() - set(committed.clocks)
        inputs: dict[str, tuple[str, ...]] = {b.name: b.inputs for b in self.topology.bolts}
        return reads_history(self.spec.name, inputs, carried)

    def _own_snapshot(self, refs: list[str]) -> SnapshotRef | None:
        """This instance's file among a round's ``refs`` when it is exactly what the
        instance loaded (same bolt name, monoid and parallelism: not renamed or migrated):
        the next snapshot may build on it."""
        spec = self.spec
        for location in refs:
            ref = self.store.resolve(location)
            if ref.is_state_of(spec.name, self.id.instance, spec.parallelism,
                               spec.state.describe()):
                return ref
        return None

    def on_state(self, state: RunState) -> None:
        if self.core is None:
            return
        if isinstance(state, Flowing) and state.clock is not None:
            clock = state.clock_for(self.spec.name)  # the backfill clock while catching up
            assert clock is not None
            self.act(self.core.on_clock(state.epoch, self.table.to_wire(clock)))
        else:  # a barrier round known in part that the master passed is never written
            self.core.round_passed(state.epoch if isinstance(state, Flowing)
                                   else state.epoch - 1)

    def answer(self, query: Query) -> dict[str, Any]:
        """Ask the main thread (which owns the state) for the values of a live query."""
        me = self.assignment.processor
        if (query.bolt, query.instance) != (self.spec.name, self.id.instance):
            return {"processor": me, "error": f"{me} is not bolt:{query.bolt}:{query.instance}"}
        if self.core is None:
            return {"processor": me, "error": f"{me} has not loaded its state yet"}
        pending = LiveQuery(query)
        self.deliver("query", pending)
        try:
            return pending.reply.get(timeout=self.assignment.io_timeout)
        except queue.Empty:
            return {"processor": me, "error": f"{me} did not answer within "
                                              f"{self.assignment.io_timeout} s"}

    def _look_up(self, query: Query) -> dict[str, Any]:
        """The answer to a live query, on the main thread: the values, the epoch, the low
        water mark (everything up to it is in the values) and the absorbed clock (nothing
        beyond it is)."""
        core = self.core
        assert core is not None
        me = self.assignment.processor
        epoch = core.latest_epoch  # the latest round whose clock it knows
        fields: dict[str, Any] = {"processor": me, "values": {}, "missing": [],
                                  "epoch": self.joined if epoch is None else epoch}
        if query.keys is None:
            if self.spec.keyed:
                return {"processor": me, "error": f"bolt {self.spec.name!r} keeps a state "
                                                  "per key: name the keys"}
            fields["values"] = {None: core.merged_state()}
        elif not self.spec.keyed:
            return {"processor": me, "error": f"bolt {self.spec.name!r} is not keyed: "
                                              "query it without keys"}
        else:
            parallelism = self.spec.parallelism
            check = getattr(self.spec.state, "check_key", None)
            for key in query.keys:
                try:
                    hash(key)
                    route(key, parallelism)
                    if check is not None:
                        check(key)
                except TypeError as exc:
                    return {"processor": me, "error": f"{key!r} is not a key of bolt "
                                                      f"{self.spec.name!r}: {exc}"}
            strays = [k for k in query.keys if route(k, parallelism) != self.id.instance]
            if strays:
                return {"processor": me, "error": f"{me} does not own the keys {strays!r}"}
            fields["values"], fields["missing"] = core.lookup(query.keys)
        watermark = core.low_water_mark
        fields["through"] = None if watermark is None else self.table.from_wire(watermark)
        fields["absorbed"] = self.table.from_wire(core.absorbed)
        return fields

    def on_frame(self, sender: str, frame: Inbound) -> None:
        core = self.core
        assert core is not None
        if isinstance(frame, SenderGone):  # no bolt reads one that restarts alone
            raise DataPlaneError(f"{sender}: {frame.why}", peer=sender)
        if isinstance(frame, LiveQuery):
            try:
                answer = self._look_up(frame.query)
            except Exception as exc:  # a query never fails the bolt
                answer = {"processor": self.assignment.processor,
                          "error": f"{type(exc).__name__}: {exc}"}
            frame.reply.put(answer)
            return
        if isinstance(frame, DataBatch):
            started = time.perf_counter()
            if frame.keys is not None and frame.values is not None:
                out = core.on_contributions(sender, frame.partitions, frame.offsets,
                                            frame.tuples, frame.keys, frame.values)
            else:
                out = core.on_data(sender, frame.partitions, frame.offsets, frame.tuples)
            self.quarantine(core.failed, frame.partitions, frame.offsets)
            if out.tuples:
                self.send_batch(out)
            self.metrics.batch(started, len(frame), len(out.tuples))
        elif isinstance(frame, Watermark):
            self.act(core.on_watermark(sender, frame.watermark))
        elif isinstance(frame, ClockMarker):
            self.act(core.on_clock(frame.epoch, frame.clock, frame.partial))
        if core.compacting and time.monotonic() - self.flushed >= (
                BACKLOG_FLUSH_INTERVAL if self.behind else FLUSH_INTERVAL):
            self.flush()
        self._expire()

    def step(self) -> None:
        """Take what waits in the queue (:meth:`InboundShell.step`), holding the output
        meanwhile; then send it: one DATA frame and one WATERMARK per receiver for all the
        frames drained. (A step that raises sends nothing more: the processor fails.)"""
        self.holding = True
        try:
            super().step()
        finally:
            self.holding = False
        self.send_held()

    def send_batch(self, batch: Batch, before: Sequence[Frame] = (),
                   after: Sequence[Frame] = ()) -> None:
        if self.holding and not before and not after and type(batch) is Batch:
            if self.held.hold(batch):
                self.send_held()
            return
        self.send_held()
        super().send_batch(batch, before, after)

    def send_held(self) -> None:
        """Send the output held so far: the joined batch, then the latest watermark, in one
        write to each receiver."""
        batch, watermark = self.held.take()
        after: list[Frame] = []
        if watermark is not None:
            assert self.joined is not None
            after.append(Watermark(self.joined, dict(watermark)))
        if batch is not None:
            super().send_batch(batch, after=after)  # one send per receiver
        elif after:
            self.send_all(after)

    def on_idle(self) -> None:
        if self.core is not None and self.core.unflushed:
            self.flush()
        self._expire()

    def _expire(self) -> None:
        """Drop a slice of the closed windows (bolts routing late data), now and then."""
        core = self.core
        if core is None or core.closed_windows is None:
            return
        now = time.monotonic()
        if now - self.expired >= EXPIRE_INTERVAL:
            self.expired = now
            windows, keys = core.closed_windows.windows, core.closed_windows.keys
            core.expire(EXPIRE_KEYS)
            self.metrics.windows_expired.inc(core.closed_windows.windows - windows)
            self.metrics.keys_expired.inc(core.closed_windows.keys - keys)
            last = core.last_snapshot
            after = last[0] if last is not None else self.loaded_round
            if core.unsaved_sweep and after is not None:  # an idle topology saves it too
                assert self.coord is not None
                self.coord.report_swept(after)

    def flush(self) -> None:
        """Send what a compacting bolt held back: its rows, then its watermark."""
        assert self.core is not None
        self.flushed = time.monotonic()
        actions = self.core.flush()
        if self.core.failed:
            self.quarantine(self.core.failed)
        self.act(actions)

    def quarantine(self, failed: list[Failed], partitions: Sequence[int] = (),
                   offsets: Sequence[int] = ()) -> None:
        """Write the core's failed tuples as dead letters (wire partitions -> names), and
        count the frame of ``partitions`` and ``offsets`` (none: a flush) against the
        budget for bad records, whose positions are the tuples received."""
        first = self.received + 1
        self.received += len(offsets)
        if not failed:
            self.dead_letters.count(self.received)
            return
        topic = self.topology.dead_letter_topic
        partition = self.table.partition
        letters = [DeadLetter.of_tuple(topic, (partition(p), o), t, failure)
                   for p, o, t, failure in failed]
        at = positions_in_batch([(p, o) for p, o, _t, _f in failed], partitions, offsets)
        failed.clear()
        # Committed with the watermark (or snapshot) that covers their origins, before it
        # leaves this bolt: a round committed past them is never replayed.
        self.dead_letters.write(letters)
        self.dead_letters.count(self.received, zip(letters, (first + i for i in at),
                                                   strict=True))

    def act(self, actions: Iterable[Action]) -> None:
        for action in actions:
            if isinstance(action, Emit):
                self.send_batch(action.batch)
                self.metrics.messages_out.inc(len(action.batch))
            elif isinstance(action, ForwardClock):
                self.send_held()  # what came before the marker leaves before it
                self.send_all([ClockMarker(action.epoch, dict(action.clock), action.partial)])
            elif isinstance(action, ForwardWatermark):
                assert self.joined is not None
                if self.dead_letters.pending:
                    self.dead_letters.commit_through(self.table.from_wire(action.watermark))
                self.held.hold_watermark(action.watermark)
                if not self.holding:
                    self.send_held()
            elif isinstance(action, WriteSnapshot):
                if self.dead_letters.pending:
                    self.dead_letters.commit_through(self.table.from_wire(action.clock))
                self._submit(action)

    def _submit(self, write: WriteSnapshot) -> None:
        deadline = time.monotonic() + self.assignment.io_timeout
        while True:
            self.check()
            try:
                self.writes.put((self.chain, write), timeout=POLL)
                return
            except queue.Full:
                if time.monotonic() > deadline:
                    raise DataPlaneError("the snapshot writer is stuck") from None

    def _writer(self) -> None:
        while not self.stopping.is_set():
            try:
                chain, write = self.writes.get(timeout=POLL)
            except queue.Empty:
                continue
            clock = self.table.from_wire(write.clock)
            base = chain.whole if write.on_whole else chain.ref
            if write.delta and base is None:
                raise DataPlaneError(f"round {write.epoch}: a delta snapshot with nothing "
                                     "to build on")
            ref = self.store.put(
                topology=self.assignment.name, bolt=self.spec.name, instance=self.id.instance,
                parallelism=self.spec.parallelism, epoch=write.epoch, clock=clock,
                monoid=self.spec.state, state=write.state,
                base=base if write.delta else None,
            )
            chain.ref = ref
            if not write.delta:
                chain.whole = ref
            self.metrics.snapshot(write.epoch, ref.duration_s, ref.size_bytes)
            assert self.coord is not None
            self.coord.write_snapshot_report(
                SnapshotReport(self.assignment.processor, write.epoch, clock, ref.uri))
            log.info("saved round %d (%d records, %.3f s)", write.epoch, ref.records,
                     ref.duration_s or 0.0)


@dataclass
class Chain:
    """The snapshot a bolt instance's next delta builds on: the last one it wrote, or the
    one it loaded (None: the next must be whole); and the one a differential snapshot
    builds on, the last whole one it wrote. One per Initialize."""

    ref: SnapshotRef | None
    whole: SnapshotRef | None = None
