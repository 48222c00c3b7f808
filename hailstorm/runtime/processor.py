"""What every processor shell does: registration and the master state (docs/negotiator.md),
failures, downstream connections, and going on without a peer that restarts alone (a local
recovery). Bolts and sinks add the inbound data plane (:mod:`~hailstorm.runtime.inbound`).

:class:`Shell` runs one :class:`~hailstorm.runtime.assignment.Assignment`; it and
:class:`~hailstorm.runtime.inbound.InboundShell` are the bases of :mod:`~hailstorm.runtime.spout`,
:mod:`~hailstorm.runtime.bolt` and :mod:`~hailstorm.runtime.sink`. See :mod:`hailstorm.runtime`
for the whole picture.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from hailstorm.auth import RunSecret
from hailstorm.coordination import Coordinator
from hailstorm.halt import TopologyHalt, halt_reason
from hailstorm.metrics import MetricsServer, ProcessorMetrics, start_server
from hailstorm.outages import Outage, Waits
from hailstorm.processors import Batch, Destination, Router
from hailstorm.protocol.alone import alone_nodes
from hailstorm.protocol.clock import clock_to_json
from hailstorm.protocol.layout import (
    ATTEMPT_INFO,
    Flowing,
    Initialize,
    MasterRecord,
    ProcessorId,
    ProcessorReport,
    ProcessorState,
    Replaying,
    Restarting,
    SpoutsPaused,
    SpoutsRewind,
    Stopped,
    parse_processor_id,
)
from hailstorm.protocol.wire import (
    DataBatch,
    Frame,
    PartitionTable,
)
from hailstorm.quarantine import DeadLetterWriter
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.data_plane import (
    DataPlaneError,
    Outbound,
    listen_address,
    probe_receivers,
)
from hailstorm.runtime.gate import Gate
from hailstorm.topology import BoltSpec, SpoutSpec, Topology

__all__ = [
    "POLL",
    "RestartRequired",
    "RunState",
    "Shell",
    "TopologyStopped",
]

log = logging.getLogger("hailstorm.processor")

POLL = 0.1
"""Longest a main loop waits for data before looking at ZooKeeper and failures again."""
DETACH_GRACE = 2.0
"""Seconds a processor goes on without a peer before it names it as failed (``detached``
in its report): a killed process's Spark task starts its next incarnation sooner, which
says it failed itself, and it restarts alone; a peer not replaced by then (its whole task
gone) is named, and everything restarts. On a loaded 2-core machine the next incarnation
of one of two bolts killed at once registered half a second after the kill (CI, a pair
fault), as late as a grace of 0.5 s allowed."""
PROBE_INTERVAL = 0.2
"""Seconds between looks for a receiver that closed or reset its connection
(:func:`~hailstorm.runtime.data_plane.probe_receivers`)."""
RunState = SpoutsRewind | SpoutsPaused | Flowing | Restarting | Replaying
"""The master states after ``Initialize`` a processor acts on (:meth:`Shell.on_state`)."""


def _stop_of(state: Any, joined: int) -> TopologyStopped | None:
    """``state`` as the stop of the run joined in epoch ``joined`` (None: it is not one)."""
    if isinstance(state, Stopped) and state.epoch >= joined:
        return TopologyStopped(f"the topology stopped (by {state.by or 'request'}, at "
                               f"{clock_to_json(state.clock)})")
    return None


class RestartRequired(RuntimeError):
    """The topology restarted (a newer Initialize): this incarnation ends, a new one joins."""


class TopologyStopped(Exception):
    """The master recorded ``Stopped`` in this incarnation's run: it leaves, cleanly."""


def _answer_key(state: Any) -> tuple[str, int, bool, tuple[str, ...]]:
    """What tells a master state answered apart: its kind, its epoch, for ``Flowing``
    whether it carries the round's clock, and for a local recovery its instances (more may
    join it in its epoch)."""
    return (type(state).__name__, state.epoch, getattr(state, "clock", None) is not None,
            tuple(getattr(state, "instances", ())))


class Shell:
    """What every processor does: ZooKeeper protocol, failures, downstream connections."""

    def __init__(self, assignment: Assignment, topology: Topology) -> None:
        self.assignment = assignment
        self.topology = topology
        self.id = parse_processor_id(assignment.processor)
        self.stopping = threading.Event()
        self.joined: int | None = None
        self.rejoined: int | None = None
        """The epoch of the local recovery (``Restarting``) through which this incarnation
        joined its run, restarting alone (None: it joined at ``Initialize``)."""
        self.alone: frozenset[str] = frozenset()
        """The nodes whose instances restart alone when they fail (the run's local
        recovery, :mod:`hailstorm.protocol.alone`): a connection to or from one that
        breaks is no failure of this processor."""
        self.joined_event = threading.Event()
        self._answered: set[tuple[str, int, bool, tuple[str, ...]]] = set()
        #: Called once a round of the run this incarnation joined committed (its task learns
        #: that the topology made progress: :mod:`hailstorm.runtime.supervision`).
        self.on_progress: Callable[[], None] | None = None
        self._failure: BaseException | None = None
        self._failure_lock = threading.Lock()
        self._waits = Waits()
        self._waits_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._parent = os.getppid()
        self.coord: Coordinator | None = None
        self.table = PartitionTable([])
        self.outbound: dict[str, Outbound] | None = None
        self._next_probe = 0.0  # when check() next looks for receivers gone
        self.detached: set[str] = set()
        """Downstream instances restarting alone, not sent to until they are replayed to
        (:meth:`detach`)."""
        self._detached_at: dict[str, float] = {}
        self.router: Router | None = None
        self.metrics = ProcessorMetrics(assignment.name, assignment.processor)
        self.metrics_server: MetricsServer | None = None
        self._secret: RunSecret | None = None
        self.gate = Gate(assignment.processor, self.metrics, assignment.io_timeout)
        self.dead_letters = DeadLetterWriter(
            assignment.kafka, assignment.io_timeout, topology.on_error, self.metrics.quarantined,
            owner=f"{assignment.name}/{assignment.processor}", topology=assignment.name,
            late_counter=self.metrics.late, budget=topology.quarantine,
            on_fill=self.metrics.bad_records, on_outage=self.outage_reporter("dead letters"))

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def secret(self) -> RunSecret:
        if self._secret is None:
            self._secret = self.assignment.run_secret()
        return self._secret

    def run(self) -> None:
        try:
            self._secret = self.assignment.run_secret()
            address = listen_address(self.assignment.host, self.assignment.zk)
            info: dict[str, Any] = {"pid": os.getpid(), "host": address,
                                    "worker": self._parent}  # its Spark task's process
            if self.assignment.attempt is not None:
                info[ATTEMPT_INFO] = self.assignment.attempt
            metrics_host = self.assignment.metrics_host
            auto = metrics_host == "auto"
            if auto:  # the cluster interface, as for the data plane; never every interface
                metrics_host = listen_address("auto", self.assignment.zk)
            self.metrics_server = None if metrics_host == "none" else start_server(
                self.metrics.registry, metrics_host)
            if self.metrics_server is not None:
                info["metrics"] = self.metrics_server.port
                if auto and metrics_host != address:
                    info["metrics_host"] = metrics_host
            self.listen(address, info)
            a = self.assignment
            self.coord = Coordinator(a.zk, a.name, a.processor, info,
                                     session_timeout=a.session_timeout, replaces=a.replaces)
            self.coord.register(a.register_timeout)
            expected = self.coord.expected()
            self.table = PartitionTable(expected.partitions)
            if expected.local_recovery:
                self.alone = alone_nodes(expected.processors, expected.graph)
            self.setup()
            log.info("registered; waiting for Initialize")
            self.coord.changed.set()
            while True:
                self.check()
                self.follow_master()
                self.step()
        except TopologyStopped as exc:
            log.info("%s: leaving", exc)
        except BaseException as exc:  # broad: last resort: reported to ZooKeeper, re-raised
            stopped = None if isinstance(exc, TopologyHalt) else self._stop_of_this_run()
            if stopped is not None:  # e.g. an upstream left first and closed its connection
                log.info("%s: leaving (%s: %s)", stopped, type(exc).__name__, exc)
                return
            halted = None if isinstance(exc, TopologyHalt) else self._halt_of_this_run()
            if halted is not None:
                log.warning("ending (%s: %s): the topology halted", type(exc).__name__, exc)
                raise halted from exc
            if isinstance(exc, RestartRequired):
                log.warning("%s", exc)
            else:
                log.error("failed:\n%s", "".join(traceback.format_exception(exc)))
                if self.coord is not None:
                    self.coord.fail_visibly(f"{type(exc).__name__}: {exc}",
                                            lost_peer=getattr(exc, "peer", None),
                                            joined=self.joined)
            raise
        finally:
            self.shutdown()

    def _halt_of_this_run(self) -> TopologyHalt | None:
        """The :class:`TopologyHalt` that made the negotiator restart the run this
        incarnation joined, if one did (None otherwise, or when ZooKeeper cannot tell).

        A halting processor reports its error and lingers until the negotiator restarts the
        run, so the other processors end at about the same time: they see the newer
        ``Initialize``, or the halting one's closed connections. Spark names only the first
        failed task of a barrier stage as the cause; each of them ends with the halt too, so
        that whichever it names, the driver stops instead of resubmitting.
        """
        record = self._master_now()
        if record is None or self.joined is None or record.state.epoch <= self.joined:
            return None
        reason = halt_reason(record.reason)
        return TopologyHalt(reason) if reason is not None else None

    def _stop_of_this_run(self) -> TopologyStopped | None:
        """The stop of the run this incarnation joined, if the master recorded one (None
        otherwise, or when ZooKeeper cannot tell)."""
        record = self._master_now()
        if record is None or self.joined is None:
            return None
        return _stop_of(record.state, self.joined)

    def _master_now(self) -> MasterRecord | None:
        """The master record read now (None: not joined, none, or ZooKeeper cannot tell),
        from any thread: the main thread still acts on a change it had not followed
        (:meth:`follow_master`)."""
        if self.coord is None or self.joined is None:
            return None
        try:
            return self.coord.master_now()
        except Exception:  # broad: kazoo raises untyped errors: ZooKeeper cannot tell
            return None

    def listen(self, address: str, info: dict[str, Any]) -> None:
        """Bolts and sinks: open the data-plane listener on ``address`` (its port goes in
        ``info``, the living node's). Spouts receive nothing."""

    def setup(self) -> None:
        """Role-specific preparation after registration (before any master state)."""

    def step(self) -> None:
        """Role-specific work; must return within about :data:`POLL` seconds."""
        assert self.coord is not None
        self.coord.changed.wait(POLL)

    def shutdown(self) -> None:
        self.stopping.set()
        for out in (self.outbound or {}).values():
            out.close()
        if self.coord is not None:
            self.coord.close()
        if self.metrics_server is not None:
            self.metrics_server.stop(wait=False)
        self.dead_letters.close()
        for thread in self._threads:
            thread.join(2.0)

    def fail(self, exc: BaseException) -> None:
        """Record a fatal error of any thread; the main thread raises it."""
        with self._failure_lock:
            if self._failure is None:
                self._failure = exc
        if self.coord is not None:
            self.coord.changed.set()

    def report_waiting(self, waiting: str | None, since: float = 0.0) -> None:
        """Say in ZooKeeper, the metrics and the log that this processor waits out an outage
        (``waiting``: "the database at ..., unavailable since T"), or no longer
        (None). Meanwhile nothing times out on it (see :meth:`topology_waits`)."""
        coord = self.coord
        before = coord.waiting if coord is not None else None
        if coord is not None:
            coord.report_waiting(waiting)
        self.metrics.waiting_since.set(since if waiting is not None else 0.0)
        if waiting is not None and before is None:
            log.warning("waiting for %s; the topology waits with it", waiting)
        elif waiting is None and before is not None:
            log.warning("the wait is over (%s)", before)

    def report_outage(self, outage: Outage | None, waiter: str = "reading") -> None:
        """A service that ``waiter`` (a part of this processor: ``reading`` its input, its
        table or topic writer, its dead-letter writer) needs fails every attempt (or
        answers again: None). The processor waits while any part does."""
        with self._waits_lock:
            self._waits.update(waiter, outage)
            self.report_waiting(self._waits.describe(), self._waits.since())

    def outage_reporter(self, waiter: str) -> Callable[[Outage | None], None]:
        """:meth:`report_outage` for the part ``waiter``, to hand to what it runs."""
        return functools.partial(self.report_outage, waiter=waiter)

    def topology_waits(self) -> bool:
        """True while this processor or another of the topology waits out an outage: a
        peer that does not read is held up by it (back pressure), not broken."""
        coord = self.coord
        if coord is None:
            return False
        if coord.waiting is not None:
            return True
        try:
            return any(report.waiting for report in coord.reports().values())
        except Exception:  # ZooKeeper itself unreachable: the usual timeouts apply
            return False

    def check(self) -> None:
        """Raise the first recorded failure, a lost session, or an orphaned process."""
        if self._failure is not None:
            raise self._failure
        assert self.coord is not None
        self.coord.check()
        if self.coord.superseded is not None:
            raise RestartRequired(
                f"the driver started another stage attempt ({self.coord.superseded}, this "
                f"incarnation's was {self.assignment.attempt}); ending")
        if os.getppid() != self._parent:
            raise RuntimeError("the Spark worker that started this processor is gone")
        if self.detached:
            self._name_detached()
        if self.outbound is not None and time.monotonic() >= self._next_probe:
            self._next_probe = time.monotonic() + PROBE_INTERVAL
            try:
                probe_receivers(out for r, out in self.outbound.items()
                                if r not in self.detached)
            except DataPlaneError as exc:
                if not self.went_on_without(exc):
                    raise

    def _start_thread(self, name: str, target: Any, *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
            # broad: a thread's last resort: recorded for the main thread
            except BaseException as exc:
                if not self.stopping.is_set():
                    self.fail(exc)

        thread = threading.Thread(
            target=guarded, name=f"{self.assignment.processor}:{name}", daemon=True
        )
        self._threads = [t for t in self._threads if t.is_alive()]  # refused connections'
        self._threads.append(thread)
        thread.start()

    # -- master state -----------------------------------------------------------------------

    def follow_master(self) -> None:
        """Act on the master state if it changed since it was last read."""
        assert self.coord is not None
        if self.coord.changed.is_set():
            record = self.coord.master()
            if record is not None:
                self._on_master(record.state)

    def _on_master(self, state: Any) -> None:
        epoch = state.epoch
        if isinstance(state, Initialize):
            if self.joined is None:
                self.joined = epoch
                log.info("joining the run of Initialize(%d)", epoch)
                self.dead_letters.start(epoch)
                self.on_initialize(epoch)
                self.joined_event.set()
            elif epoch > self.joined:
                raise RestartRequired(
                    f"the topology restarted (Initialize({epoch}), this incarnation joined "
                    f"Initialize({self.joined})); ending so a new incarnation joins"
                )
            return
        if isinstance(state, Restarting | Replaying) and str(self.id) in state.instances:
            if self.joined is None and isinstance(state, Restarting):
                self._rejoin(state)
                return
            if self.joined is not None and self.rejoined != epoch:
                raise RestartRequired(f"{type(state).__name__}({epoch}) restarts this instance "
                                      "alone (a local recovery); ending so a new incarnation "
                                      "joins")
        if self.joined is None and isinstance(state, Stopped) and self.coord is not None \
                and self.coord.stop_requested():
            # Stopped while this incarnation started (a stop during a recovery): no
            # Initialize will come, and the driver waits for its stage to end.
            raise TopologyStopped(f"the topology stopped before this incarnation joined (by "
                                  f"{state.by or 'request'})")
        if self.joined is None or epoch < self.joined:
            return  # a new incarnation waits for the next Initialize
        stopped = _stop_of(state, self.joined)
        if stopped is not None:
            raise stopped
        if isinstance(state, SpoutsRewind) and epoch != self.joined:
            raise RestartRequired(f"SpoutsRewind({epoch}) of a run this incarnation missed")
        if self.answered(state):
            return
        self._answered.add(_answer_key(state))
        self.on_state(state)
        progress = self.on_progress
        if progress and isinstance(state, Flowing) and state.clock is None and self.coord:
            committed = self.coord.committed()  # a skipped round commits nothing
            if committed is not None and committed.epoch > (self.rejoined or self.joined):
                self.on_progress = None
                progress()

    def _rejoin(self, state: Restarting) -> None:
        """Join the run of the other processors, restarting alone (a local recovery):
        load the committed round, as at ``Initialize``, and report ready in its epoch."""
        self.joined, self.rejoined = state.run, state.epoch
        log.info("restarting alone in the run of Initialize(%d) (local recovery, epoch %d)",
                 state.run, state.epoch)
        self.dead_letters.start(state.epoch)  # fences the incarnation it replaces
        self.on_initialize(state.epoch)
        self._answered.add(_answer_key(state))
        self.joined_event.set()

    def answered(self, state: Any) -> bool:
        """Did this processor act on ``state`` already (each ``(state, epoch)`` once)?"""
        return _answer_key(state) in self._answered

    def on_initialize(self, epoch: int) -> None:
        raise NotImplementedError

    def on_state(self, state: RunState) -> None:
        """React to a state after Initialize (each ``(state, epoch)`` once)."""

    def report(self, state: ProcessorState, epoch: int, **kw: Any) -> None:
        assert self.coord is not None
        self.coord.run = self.joined  # every report after joining names the run
        self.coord.report(state, epoch, **kw)

    # -- downstream -----------------------------------------------------------------------

    @functools.cached_property
    def downstream_ids(self) -> dict[Destination, str]:
        """Processor id of every downstream instance the router sends to."""
        assert self.router is not None
        ids: dict[Destination, str] = {}
        for name, i in self.router.destinations:
            node = self.topology.node(name)
            pid = ProcessorId.bolt(name, i) if isinstance(node, BoltSpec) else \
                ProcessorId.sink(name, i)
            ids[(name, i)] = str(pid)
        return ids

    def upstream_ids(self) -> list[str]:
        """Every upstream instance that may connect to this one."""
        node = self.topology.node(self.id.name)
        ids: list[str] = []
        for name in getattr(node, "inputs", ()):
            source = self.topology.node(name)
            if isinstance(source, SpoutSpec):
                ids += [str(ProcessorId.spout(name, p)) for p in self.table
                        if p[0] == source.topic]
            elif isinstance(source, BoltSpec):
                ids += [str(ProcessorId.bolt(name, i)) for i in range(source.parallelism)]
        return ids

    def connections(self) -> dict[str, Outbound]:
        """Connections to every downstream instance, opened on first use."""
        if self.outbound is not None:
            return self.outbound
        assert self.coord is not None and self.joined is not None
        wanted = sorted(set(self.downstream_ids.values()))
        reports = self.coord.reports()
        outbound: dict[str, Outbound] = {}
        try:
            for receiver in wanted:
                outbound[receiver] = self._connect(receiver, reports.get(receiver),
                                                   self.joined)
        except BaseException:  # broad: also on Ctrl-C; connections closed, re-raised
            for out in outbound.values():
                out.close()
            raise
        self.outbound = outbound
        log.info("connected to %s", ", ".join(wanted) or "nothing")
        return outbound

    def _connect(self, receiver: str, report: ProcessorReport | None, since: int) -> Outbound:
        """A connection to ``receiver``, whose ``report`` says it is ready in this run in
        epoch ``since`` or later."""
        assert self.joined is not None
        if (report is None or report.state is ProcessorState.JOINING
                or report.epoch < since or "port" not in report.info
                or not report.of_attempt(self.assignment.attempt)):
            raise DataPlaneError(f"{receiver} is not ready in the run of epoch {self.joined} "
                                 f"(report: {report})", peer=receiver)
        address = (str(report.info["host"]), int(report.info["port"]))
        return Outbound(self.assignment.processor, receiver, address, self.joined,
                        self.assignment.io_timeout, self.secret, patience=self.topology_waits)

    # -- peers restarting alone (local recovery) ----------------------------------------

    def goes_on_without(self, peer: str | None) -> bool:
        """A broken connection to or from ``peer`` is no failure of this processor: the
        peer restarts alone (the run's local recovery) and this one carries on."""
        if peer is None or not self.alone:
            return False
        try:
            return parse_processor_id(peer).name in self.alone
        except ValueError:
            return False

    def went_on_without(self, exc: DataPlaneError) -> bool:
        """Detach from the peer ``exc`` names when it restarts alone
        (:meth:`goes_on_without`); False: ``exc`` is this processor's failure."""
        if not self.goes_on_without(exc.peer):
            return False
        assert exc.peer is not None
        self.detach(exc.peer, str(exc))
        return True

    def detach(self, receiver: str, why: str) -> None:
        """Stop sending to ``receiver`` (it restarts alone: what it would have got is
        replayed to its next incarnation)."""
        out = (self.outbound or {}).get(receiver)
        if receiver in self.detached or out is None:
            return
        out.close()
        self.detached.add(receiver)
        self._detached_at[receiver] = time.monotonic()
        log.warning("going on without %s (%s): it restarts alone", receiver, why)

    def _name_detached(self) -> None:
        """Report the peers gone on without for :data:`DETACH_GRACE` s or more."""
        assert self.coord is not None
        due = time.monotonic() - DETACH_GRACE
        named = tuple(sorted(r for r in self.detached if self._detached_at.get(r, 0) <= due))
        if named != self.coord.detached:
            self.coord.report_detached(named)

    def reconnect(self, receiver: str, epoch: int) -> Outbound:
        """A connection to ``receiver``'s incarnation that restarted alone and reported
        ready in the local recovery of ``epoch``, replacing the one to its predecessor."""
        assert self.coord is not None and self.outbound is not None
        report = self.coord.reports().get(receiver)
        if report is not None and report.run != self.joined:
            raise DataPlaneError(f"{receiver} joined the run of Initialize({report.run}), "
                                 f"not this one's ({self.joined})", peer=receiver)
        out = self._connect(receiver, report, epoch)
        self.outbound[receiver].close()
        self.outbound[receiver] = out
        self.detached.discard(receiver)
        self._detached_at.pop(receiver, None)
        self.coord.detached = tuple(r for r in self.coord.detached if r != receiver)
        log.info("connected to %s's new incarnation", receiver)
        return out

    def send_all(self, frames: Sequence[Frame]) -> None:
        for out in self.connections().values():
            out.send(frames)

    def send_batch(self, batch: Batch, before: Sequence[Frame] = (),
                   after: Sequence[Frame] = ()) -> None:
        """``before`` to every destination, ``batch`` routed, then ``after`` to all."""
        assert self.router is not None
        connections = self.connections()
        ids = self.downstream_ids
        per_receiver: dict[str, list[Frame]] = {r: list(before) for r in connections}
        for dest, part in self.router.route(batch).items():
            per_receiver[ids[dest]].append(DataBatch.of(part.partitions, part.offsets,
                                                        part.tuples))
        for receiver, frames in per_receiver.items():
            frames.extend(after)
            if frames:
                connections[receiver].send(frames)
