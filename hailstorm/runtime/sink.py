"""The sink shell: rows into a table (or a topic) exactly once, the commit and round policy
decided by the pure :class:`~hailstorm.processors.sink_core.SinkCore`."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable

from hailstorm.config import DEFAULT_DATABASE_URL
from hailstorm.failpoints import failpoint
from hailstorm.halt import TopologyHalt
from hailstorm.outages import WAIT_OUT
from hailstorm.processors.sink_core import Commit, ReportRound, SinkAction, SinkCore
from hailstorm.processors.sink_guard import (
    CommittedRound,
    Shortfall,
    behind_reason,
    opening_shortfall,
    progress_shortfall,
)
from hailstorm.protocol.clock import Clock, Partition, clock_to_json
from hailstorm.protocol.layout import (
    Flowing,
    ProcessorState,
    SnapshotReport,
)
from hailstorm.protocol.wire import ClockMarker, DataBatch, Watermark
from hailstorm.runtime.data_plane import DataPlaneError
from hailstorm.runtime.inbound import Inbound, InboundShell, SenderGone
from hailstorm.runtime.processor import RunState
from hailstorm.sinks import FencedError, SinkWriter, redact
from hailstorm.sinks.buffer import PreparedCommit
from hailstorm.sinks.rebuild import rebuild_refusal, source_topics_of
from hailstorm.sinks.topic import TopicWriter, progress_topic
from hailstorm.topic import Topic
from hailstorm.topology import SinkSpec, Table
from hailstorm.vocabulary import RejectedRow

__all__ = ["SinkShell"]

log = logging.getLogger("hailstorm.processor")


class BackgroundWrite:
    """One commit's transaction, written on a thread of its own while the sink's main
    thread reads on and buffers what arrives (a commit waits mostly for the database or
    the broker).
    When it ends, ``wake`` is called; the main thread then takes it back
    (:meth:`SinkShell._take_back`)."""

    def __init__(self, commit: Commit, prepared: PreparedCommit,
                 write: Callable[[PreparedCommit], None], wake: Callable[[], None],
                 name: str) -> None:
        self.commit = commit
        self.prepared = prepared
        self.error: BaseException | None = None
        self.took = 0.0
        """Seconds the write took."""
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(write, wake),
                                        name=f"{name}:commit", daemon=True)
        self._thread.start()

    def _run(self, write: Callable[[PreparedCommit], None], wake: Callable[[], None]) -> None:
        started = time.perf_counter()
        try:
            write(self.prepared)
        except BaseException as exc:  # broad: handed to the main thread, which raises it
            self.error = exc
        finally:
            self.took = time.perf_counter() - started
            self.ended.set()
            wake()


class SinkShell(InboundShell):
    """One sink instance: rows go to its table exactly once, and it takes part in rounds.

    Rows are buffered in a :class:`~hailstorm.sinks.SinkWriter`; the pure
    :class:`~hailstorm.processors.sink_core.SinkCore` says when to commit them (through the
    low water mark over the upstream instances, with the sink's progress in one
    transaction) and when a round's clock is covered so that the sink reports the round,
    like a bolt reports a snapshot. A :class:`~hailstorm.topic.Topic` target is written the
    same way, a Kafka transaction per commit (:class:`~hailstorm.sinks.topic.TopicWriter`).
    Sinks with another target keep nothing and only report rounds.
    """

    def setup(self) -> None:
        super().setup()
        spec = self.topology.node(self.id.name)
        assert isinstance(spec, SinkSpec)
        self.spec = spec
        self.received = 0
        self.writer: SinkWriter | TopicWriter | None = None
        self.core: SinkCore | None = None
        self.reported_at = (0, 0)
        """The writer's rows written and commits when the last round was reported."""
        self.started = time.monotonic()
        self.where = f"sink:{spec.name}"
        """The sink's table (with its database) or topic, as halt lines name it."""
        self.carried = self._carried_partitions()
        self.running: BackgroundWrite | None = None
        """The commit being written meanwhile, if one is."""

    def _carried_partitions(self) -> frozenset[Partition]:
        """The source partitions some upstream of this sink carries (transitively): the
        only ones it keeps progress for."""
        topics = source_topics_of(self.topology, self.spec.name)
        return frozenset(p for p in self.table.partitions if p[0] in topics)

    @property
    def ref(self) -> str:
        """What the sink's round reports name as its target (``table:<name>``...)."""
        target = self.spec.target
        return (f"table:{target.name}" if isinstance(target, Table) else
                f"topic:{target.name}" if isinstance(target, Topic) else
                f"sink:{self.spec.name}")

    def _halt_if_behind(self, stored: Clock) -> None:
        """Stop the topology when ``stored`` progress is below the committed round this
        sink saved (and no acceptance covers it): see :mod:`~hailstorm.processors.sink_guard`."""
        assert self.coord is not None
        record = self.coord.committed()
        if record is None:
            return
        saved = record.snapshots.get(self.assignment.processor) == self.ref
        committed = CommittedRound(record.epoch, record.clock_of(self.spec.name), saved)
        if not saved:
            log.info("not in the committed round %d: starting at its clock %s with what "
                     "%s holds", record.epoch, clock_to_json(record.clock), self.where)
            return
        shortfall = opening_shortfall(stored, committed, self.carried)
        if not shortfall:
            return
        acceptance = self.coord.records.sink_acceptance(self.spec.name)
        accepted = None if acceptance is None else acceptance.clock
        if not opening_shortfall(stored, committed, self.carried, accepted):
            log.warning("%s is behind the committed clock of round %d (%s), accepted by the "
                        "operator at round %s", self.where, record.epoch,
                        clock_to_json(record.clock), acceptance and acceptance.epoch)
            return
        raise self._behind(shortfall, f"the committed clock of round {record.epoch}")

    def _behind(self, shortfall: Shortfall, against: str) -> TopologyHalt:
        """The halt of this sink behind ``against``, with the commands that way forward
        (``TOPOLOGY SINK [--name NAME]``)."""
        a = self.assignment
        named = "" if a.name == self.topology.name else f" --name {a.name}"
        return TopologyHalt(behind_reason(
            self.spec.name, self.where, shortfall, against=against,
            arguments=f"{a.topology_ref} {self.spec.name}{named}",
            rebuild=rebuild_refusal(self.topology, self.spec.name) is None))

    def on_initialize(self, epoch: int) -> None:
        self._abandon_running(None, "the run restarts")  # the new writer reads the progress
        self.received = 0
        self.reported_at = (0, 0)  # the new writer counts from 0
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        # One topology's sink is not another's: progress is keyed by both names.
        sink_id = f"{self.assignment.name}/{self.assignment.processor}"
        halt_as = self.spec.name if self.topology.on_error == "fail" else None
        target = self.spec.target
        if isinstance(target, Table):
            url = target.url or self.assignment.database_url or DEFAULT_DATABASE_URL
            self.writer = SinkWriter.open(url, target, sink_id, epoch,
                                          on_reject=self._rejected, halt_as=halt_as,
                                          retry=WAIT_OUT,
                                          on_outage=self.outage_reporter("writer"))
            self.where = f"table {target.name} at {redact(url)}"
            log.info("table %s at %s, progress %s", target.name, redact(url),
                     clock_to_json(self.writer.view))
        elif isinstance(target, Topic):
            self.writer = TopicWriter.open(
                self.assignment.kafka, target, sink_id, epoch,
                progress=progress_topic(self.topology.name, self.spec.name),
                dead_letter_topic=self.topology.dead_letter_topic, node=self.spec.name,
                io_timeout=self.assignment.io_timeout, on_reject=self._rejected,
                halt_as=halt_as, retry=WAIT_OUT, on_outage=self.outage_reporter("writer"))
            self.where = (f"topic {target.name}, progress on "
                          f"{progress_topic(self.topology.name, self.spec.name)}")
            log.info("topic %s, progress %s", target.name, clock_to_json(self.writer.view))
        if self.writer is not None:
            self._halt_if_behind(self.writer.view)
        self.core = SinkCore(epoch, self.upstream_ids(), self.table.partitions,
                             writes=self.writer is not None, last_commit=self.started,
                             committed=None if self.writer is None else self.writer.view)
        self.report(ProcessorState.READY, epoch)

    @property
    def pending(self) -> int:
        """Rows (upsert: keys) waiting in the writer for a commit."""
        return 0 if self.writer is None else self.writer.pending

    def on_state(self, state: RunState) -> None:
        clock = state.clock_for(self.spec.name) if isinstance(state, Flowing) else None
        if clock is not None:  # the backfill clock while catching up
            self._round(state.epoch, dict(clock))

    def _rejected(self, rejected: RejectedRow) -> None:
        """A tuple was committed to ``<table>_rejected`` (a topic's: to the dead letters)."""
        # One line per stage and error kind and interval, not one per tuple.
        self.dead_letters.log_quarantined(self.spec.name, rejected.stage, rejected.error,
                                          rejected.origin, what="the tuple")
        self.metrics.quarantined.inc()

    def on_frame(self, sender: str, frame: Inbound) -> None:
        self._take_back_if_ended()
        if isinstance(frame, SenderGone):
            self._part_from(sender, frame.why)
        elif isinstance(frame, DataBatch):
            if frame.contributions:
                raise DataPlaneError(f"{sender} sent pre-aggregated contributions to a sink")
            running, core = self.running, self.core
            if running is not None and core is not None and core.must_wait(self.pending):
                running.ended.wait()  # a full buffer: the commit first (back pressure)
                self._take_back()
            started = time.perf_counter()
            self.received += len(frame)
            if self.writer is not None:
                indexed = self.table.partitions
                try:
                    if frame.partitions and min(frame.partitions) < 0:
                        raise IndexError
                    partitions = list(map(indexed.__getitem__, frame.partitions))
                except IndexError:
                    raise DataPlaneError(f"{sender} sent rows of an unknown partition") from None
                self.writer.add_columns(partitions, frame.offsets, frame.tuples, sender=sender)
            self.metrics.batch(started, len(frame), 0)
        elif isinstance(frame, Watermark):
            assert self.core is not None
            self.act(self.core.on_watermark(sender, frame.watermark, pending=self.pending,
                                            now=time.monotonic(),
                                            caught_up=self.inbound.empty()))
        elif isinstance(frame, ClockMarker) and not frame.partial:  # a sink needs the whole
            self._round(frame.epoch, self.table.from_wire(frame.clock))

    def _part_from(self, sender: str, why: str) -> None:
        """``sender`` restarts alone (``why`` its connection ended): keep what it promised
        by its last watermark, forget the rest, and wait for its next incarnation (the
        watermark it promised holds the low water mark until that one passes it)."""
        assert self.core is not None
        marks = self.core.marks.of(sender) or {}
        promised = {self.table.partitions[i]: offset for i, offset in marks.items()}
        forgotten = 0 if self.writer is None else self.writer.part_from(sender, promised)
        log.warning("%s (%s): it restarts alone; kept its rows through %s, forgot %d above",
                    sender, why, clock_to_json(promised), forgotten)

    def on_idle(self) -> None:
        self._take_back_if_ended()
        self.dead_letters.tick()
        if self.core is not None:
            self.act(self.core.on_idle(pending=self.pending, now=time.monotonic()))

    def _round(self, epoch: int, clock: Clock) -> None:
        if self.core is not None:
            self.act(self.core.on_round(epoch, clock, pending=self.pending,
                                        now=time.monotonic()))

    def act(self, actions: Iterable[SinkAction]) -> None:
        for action in actions:
            if isinstance(action, Commit):
                self.act(self._commit(action))
            else:
                self._report_round(action)

    def _commit(self, commit: Commit) -> list[SinkAction]:
        """Commit the writer through ``commit.through``: at once, or (PostgreSQL, Kafka) on
        a thread of its own while this one reads on; what follows it (the rounds it covered,
        a commit held back meanwhile) once it ended."""
        writer = self.writer
        assert writer is not None and self.running is None
        prepared = writer.prepare(commit.through)
        if prepared is None:  # nothing to write: the progress stays as stored
            return self._ended(commit, writer.view, took=0.0)
        if writer.background:
            self.running = BackgroundWrite(commit, prepared, writer.write, self.wake,
                                           self.assignment.processor)
            return []
        started = time.perf_counter()
        try:
            writer.write(prepared)
        except FencedError as exc:
            return self._refused(exc)
        return self._written(commit, prepared, took=time.perf_counter() - started)

    def _take_back_if_ended(self) -> None:
        """Take the background commit back if it ended (see :meth:`_take_back`)."""
        if self.running is not None and self.running.ended.is_set():
            self._take_back()

    def _take_back(self) -> None:
        """The background commit ended: adopt what it wrote (or raise what failed it)."""
        running, self.running = self.running, None
        assert running is not None
        if isinstance(running.error, FencedError):
            self.act(self._refused(running.error))
        elif running.error is not None:
            raise running.error
        else:
            self.act(self._written(running.commit, running.prepared, took=running.took))

    def _abandon_running(self, timeout: float | None, why: str) -> None:
        """Wait for the background commit to end (at most ``timeout`` s), without taking
        it back: what it wrote is in the table, with its progress, for the next writer."""
        running, self.running = self.running, None
        if running is None:
            return
        if not running.ended.wait(timeout):
            log.warning("%s while a commit runs; it did not end within %s s", why, timeout)
        elif running.error is not None:
            log.info("%s; the commit that ran meanwhile failed: %s", why, running.error)

    def _written(self, commit: Commit, prepared: PreparedCommit, *,
                 took: float) -> list[SinkAction]:
        writer = self.writer
        assert writer is not None
        progress = writer.finish(prepared)
        self.metrics.sink_commit_seconds.observe(took)
        self.metrics.rows_committed.inc(prepared.selection.received)
        failpoint("sink.after_commit")  # tests: die between the table and ZooKeeper
        return self._ended(commit, progress, took=took)

    def _ended(self, commit: Commit, progress: Clock, *, took: float) -> list[SinkAction]:
        """The rounds ``commit`` covered, then what arrived while it ran."""
        core = self.core
        assert core is not None
        now = time.monotonic()
        return [*core.committed(commit, progress, now, took=took), *self._resume(core, now)]

    def _resume(self, core: SinkCore, now: float) -> list[SinkAction]:
        """What the core decides on what arrived while the commit that just ended ran."""
        return core.resume(pending=self.pending, now=now, caught_up=self.inbound.empty())

    def _refused(self, exc: FencedError) -> list[SinkAction]:
        """Another writer moved the progress: re-read it and go on (or stop, superseded,
        or behind what this sink had committed)."""
        writer, core = self.writer, self.core
        assert writer is not None and core is not None
        if exc.superseded:
            raise exc
        log.warning("%s; re-reading progress", exc)
        before = writer.view
        progress = writer.progress()
        shortfall = progress_shortfall(progress, before, self.carried)
        if shortfall:
            raise self._behind(shortfall, "what this sink had committed") from exc
        core.fenced(progress)
        return self._resume(core, time.monotonic())

    def _report_round(self, report: ReportRound) -> None:
        assert self.coord is not None
        self.coord.write_snapshot_report(
            SnapshotReport(self.assignment.processor, report.epoch, report.clock, self.ref)
        )
        writer = self.writer
        rows, commits = (writer.rows_written, writer.commits) if writer else (0, 0)
        log.info("round %d: table committed through %s (%d rows in %d commits since the "
                 "last round)", report.epoch, clock_to_json(report.clock),
                 rows - self.reported_at[0], commits - self.reported_at[1])
        self.reported_at = (rows, commits)

    def shutdown(self) -> None:
        self._abandon_running(self.assignment.io_timeout, "stopping")
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
        super().shutdown()
