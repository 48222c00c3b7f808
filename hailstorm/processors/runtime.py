"""The processor shells: threads, sockets, Kafka and ZooKeeper around the pure cores.

:func:`run_processor` is the Spark task body (one per processor instance, see
:mod:`hailstorm.runner`). Each processor:

* opens its data-plane listener (bolts and sinks) on ``assignment.host``, port 0;
* registers ``living/<id>`` (ephemeral) with ``info = {host, port, pid, metrics}``
  (:class:`~hailstorm.coordination.Coordinator`) and follows the master state as in
  docs/negotiator.md, on its main thread;
* joins the first ``Initialize(e)`` it sees. Seeing a newer ``Initialize`` (or a
  ``SpoutsRewind`` of another epoch) later ends the processor with :class:`RestartRequired`:
  the barrier stage fails, the driver resubmits it and fresh processors register. So one
  incarnation lives in exactly one run, and data connections are tagged with that epoch in
  their HELLO (a receiver refuses any other epoch).

Data plane: upstream instances connect to their downstream instances (addresses from the
``living`` reports) once the run passed ``Initialize`` (every expected processor was ready
in it). A connection first proves both ends hold the run's secret (:mod:`hailstorm.auth`;
a listener refuses, logs and counts anything else without failing, and authenticates at
most :data:`MAX_HANDSHAKES` at once, each within :data:`HANDSHAKE_TIMEOUT` s); every frame
then carries a MAC checked before it is decoded. Frames (:mod:`hailstorm.protocol.wire`) are sent
with blocking ``sendall`` (socket timeout
:attr:`Assignment.io_timeout`); receivers put them into a bounded queue, so a slow bolt
stops reading its sockets and back-pressure reaches the spouts through TCP.

* Spout: one thread owns the :class:`~hailstorm.processors.SpoutCore` and a confluent-kafka
  consumer assigned to its partition (no group); consumes in batches while flowing, sends
  CLOCK/DATA/WATERMARK in order, and a watermark at least every
  :data:`WATERMARK_INTERVAL` s. Dead letters are acknowledged by Kafka before the spout
  reports its position for a round.
* Bolt: the main thread owns the :class:`~hailstorm.processors.BoltCore` (frames from the
  queue, clocks from CLOCK frames or the master); :class:`WriteSnapshot` goes to a writer
  thread that stores it (:func:`~hailstorm.snapshots.open_store`) and then
  writes the :class:`~hailstorm.protocol.layout.SnapshotReport`.
* Sink: counts (and for upsert/merge tables keeps, in memory) the rows it receives; the
  exactly-once database sinks are a separate component.

Failures: an exception in any thread is recorded, the main thread raises it, reports it as
``error`` (keeping the session up to 3 s so the negotiator sees the error rather than a lost
node), closes the session and the sockets, and the exception leaves the Spark task. A
ZooKeeper error (even a transient connection loss) is fatal too: the topology restarts from
its committed snapshots. A processor whose Spark worker vanished (re-parented) ends itself.
A :class:`~hailstorm.halt.TopologyHalt` (lost Kafka offsets, refused credentials) ends the
run for good: every processor that ends because of it ends with it too, so the driver stops.
Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import queue
import socket
import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hailstorm.auth import (
    SECRET_FILE_VAR,
    AuthError,
    FrameSealer,
    RunSecret,
    accept_peer,
    greet_peer,
)
from hailstorm.config import DEFAULT_DATABASE_URL, KAFKA_CONFIG_VAR
from hailstorm.coordination import Coordinator
from hailstorm.failpoints import failpoint
from hailstorm.halt import TopologyHalt, halt_reason
from hailstorm.metrics import MetricsServer, ProcessorMetrics, read_at_scrape, start_server
from hailstorm.model import DeadLetter, RejectedRow
from hailstorm.processors import (
    Action,
    Batch,
    BoltCore,
    Contributions,
    Destination,
    Emit,
    Failed,
    ForwardClock,
    ForwardWatermark,
    Router,
    SpoutCore,
    SpoutOutput,
    WriteSnapshot,
)
from hailstorm.processors.watermarks import UNBOUNDED, UpstreamWatermarks
from hailstorm.protocol.clock import NOTHING, Clock, Partition, clock_to_json, partition_key
from hailstorm.protocol.layout import (
    Flowing,
    Initialize,
    ProcessorId,
    ProcessorState,
    Role,
    SnapshotReport,
    SpoutsPaused,
    SpoutsRewind,
    parse_processor_id,
)
from hailstorm.protocol.wire import (
    Answer,
    Bye,
    ClockMarker,
    DataBatch,
    Frame,
    FrameReader,
    Hello,
    PartitionTable,
    Query,
    Watermark,
    recv_frames,
    send_frames,
)
from hailstorm.quarantine import DeadLetterWriter
from hailstorm.routing import route
from hailstorm.sinks import FencedError, SinkWriter, redact
from hailstorm.sinks.topic import TopicWriter, progress_topic
from hailstorm.snapshots import SnapshotCorruptError, open_store
from hailstorm.topic import Topic
from hailstorm.topology import BoltSpec, SinkSpec, SpoutSpec, Table, Topology, load_topology

__all__ = ["Assignment", "RestartRequired", "run_processor"]

log = logging.getLogger("hailstorm.processor")

WATERMARK_INTERVAL = 0.2
"""Longest time between two watermarks a spout sends (also when idle or paused)."""
POLL = 0.1
"""Longest a main loop waits for data before looking at ZooKeeper and failures again."""
CONSUME_BATCH = 5000
"""Kafka messages per consume call."""
LOG_START_RETRIES = 3
"""How often a spout starts again from a log start that retention moved before its first
fetch (then the lost offsets stop the topology as any others)."""
SPOUT_CHUNK = 500
"""Messages a spout decodes and sends at a time: between two chunks it looks at the master
state, so that a snapshot round's pause waits for one chunk, not a whole consume batch."""
QUEUE_FRAMES = 64
"""Frames buffered between the socket readers and a bolt's (or sink's) main thread."""
FLUSH_INTERVAL = 0.25
"""Seconds a compacting (``preaggregate``) bolt holds rows back: it then emits one row per
key touched, and the watermark that waited for them (so rounds wait at most this)."""

HANDSHAKE_TIMEOUT = 3.0
"""Seconds a connecting peer has to prove it holds the run's secret (a slow one is
refused); a peer of the run needs one round trip."""
MAX_HANDSHAKES = 64
"""Connections a listener authenticates at once; more are refused at once (an upstream
refused that way tries again until its ``io_timeout``)."""

DEAD_LETTER_INTERVAL = 0.5
"""A spout with dead letters commits them at least this often (seconds), besides before
it reports a round's pause."""

COMMIT_ROWS = 100_000
"""A sink commits as soon as this many rows (upsert: keys) wait and the low water mark
allows: a bound on its buffer."""
COMMIT_INTERVAL = 0.5
"""Otherwise a sink commits at most this often (seconds), or when a round is due: rows of
the same key arriving meanwhile are written once."""


class RestartRequired(RuntimeError):
    """The topology restarted (a newer Initialize): this incarnation ends, a new one joins."""


class DataPlaneError(RuntimeError):
    """A peer misbehaved or vanished on the data plane."""


@dataclass(frozen=True)
class Assignment:
    """What one Spark task runs: a processor instance and where everything is."""

    topology_ref: str
    """Module path or dotted name of the topology (importable on the executor)."""
    name: str
    """The topology's name in ZooKeeper and in the snapshot store."""
    processor: str
    """The processor id (``spout:...``, ``bolt:...``, ``sink:...``)."""
    zk: str
    kafka: str
    snapshots: str
    """Root directory of the snapshot store (shared by every executor)."""
    kafka_config: str | None = None
    """Path of the librdkafka properties file (present on every executor's host): only the
    path travels with the task, the secrets in it stay in the file."""
    host: str = "127.0.0.1"
    """Address the data-plane listener binds to and advertises; ``auto``: the address the
    executor's host reaches ZooKeeper from (for clusters, :func:`route_address`)."""
    metrics_host: str = "127.0.0.1"
    """Address ``/metrics`` is served on (``none``: not served). Loopback by default: the
    endpoint is not authenticated."""
    session_timeout: float = 6.0
    register_timeout: float = 60.0
    io_timeout: float = 60.0
    """Longest blocking connect/send/queue wait before the processor gives up."""
    log_level: str = "INFO"
    database_url: str = ""
    """Sink tables' database when their Table names none (empty: SQLite, hailstorm.db)."""
    secret: RunSecret | None = None
    """The run's data-plane secret (:mod:`hailstorm.auth`; its ``repr`` shows no key). None:
    read ``$HAILSTORM_SECRET_FILE`` on the executor."""

    def run_secret(self) -> RunSecret:
        """The data-plane secret; a processor never runs without one."""
        secret = self.secret or RunSecret.from_env()
        if secret is None:
            raise DataPlaneError(f"no data-plane secret: the driver hands one to every task, "
                                 f"or set ${SECRET_FILE_VAR}")
        return secret


def route_address(zk: str) -> str:
    """The address of this host on the way to the first ZooKeeper server of ``zk``
    (``host:port,...[/chroot]``): on a cluster, the interface the other hosts share with
    the coordinator. Connecting a UDP socket only asks the routing table; nothing is sent."""
    first = zk.split("/", 1)[0].split(",")[0].strip()
    host, colon, port = first.rpartition(":")
    if not colon or "]" in port:  # no port given
        host, port = first, "2181"
    family, kind, proto, _, target = socket.getaddrinfo(host.strip("[]"), int(port),
                                                        type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.connect(target)
        return str(probe.getsockname()[0])


def listen_address(host: str, zk: str) -> str:
    """The address the data-plane listener binds to and advertises for the ``--host``
    setting (``auto``: :func:`route_address`)."""
    return route_address(zk) if host == "auto" else host


GC_THRESHOLDS = (50_000, 20, 100)
"""The cyclic garbage collector's thresholds in processors (Python's default: 700, 10, 10).
A processor allocates many short-lived containers per batch (tuples, decoded values) and
keeps a large, long-lived, acyclic state; with the default, collections run every 700
allocations and keep promoting batch data into the generations that hold the state, so
full collections walk the whole state again and again. Refcounting frees almost all of a
processor's garbage anyway."""


def run_processor(assignment: Assignment) -> None:
    """Run one processor instance until it fails or the topology restarts (then raise)."""
    gc.set_threshold(*GC_THRESHOLDS)
    _configure_logging(assignment)
    if assignment.kafka_config:
        os.environ[KAFKA_CONFIG_VAR] = assignment.kafka_config
    topology = load_topology(assignment.topology_ref)
    pid = parse_processor_id(assignment.processor)
    shell: _Shell
    if pid.role is Role.SPOUT:
        shell = _SpoutShell(assignment, topology)
    elif pid.role is Role.BOLT:
        shell = _BoltShell(assignment, topology)
    else:
        shell = _SinkShell(assignment, topology)
    shell.run()


def _configure_logging(assignment: Assignment) -> None:
    root = logging.getLogger("hailstorm")
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter(
                f"%(asctime)s %(levelname)s [{assignment.processor} pid={os.getpid()}] "
                "%(message)s"
            )
        )
        root.addHandler(handler)
        root.propagate = False
    root.setLevel(assignment.log_level.upper())


# --------------------------------------------------------------------------- connections


class _Outbound:
    """A connection to one downstream instance; blocking sends (back-pressure)."""

    def __init__(self, sender: str, receiver: str, address: tuple[str, int], epoch: int,
                 timeout: float, secret: RunSecret) -> None:
        self.receiver = receiver
        self.sock, self.sealer = self._authenticated(address, secret, timeout)
        self.sock.settimeout(timeout)
        send_frames(self.sock, [Hello(sender, epoch, receiver)], sealer=self.sealer)

    def _authenticated(self, address: tuple[str, int], secret: RunSecret,
                       timeout: float) -> tuple[socket.socket, FrameSealer]:
        """A connection that passed the handshake. A listener busy with strangers'
        handshakes refuses at once: try again (backing off) until ``timeout``."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            sock = socket.create_connection(address, timeout=timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sealer, _ = greet_peer(sock, secret, min(timeout, HANDSHAKE_TIMEOUT))
                return sock, sealer
            except AuthError as exc:
                with contextlib.suppress(OSError):
                    sock.close()
                if time.monotonic() + pause > deadline:
                    raise DataPlaneError(f"{self.receiver} at {address}: {exc}") from exc
                log.warning("handshake with %s at %s failed (%s); trying again",
                            self.receiver, address, exc)
                time.sleep(pause)
                pause = min(2.0, pause * 2)
            except BaseException:
                with contextlib.suppress(OSError):
                    sock.close()
                raise

    def send(self, frames: Sequence[Frame]) -> None:
        try:
            send_frames(self.sock, frames, sealer=self.sealer)
        except OSError as exc:
            raise DataPlaneError(f"sending to {self.receiver} failed: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# --------------------------------------------------------------------------- base shell


class _Shell:
    """What every processor does: ZooKeeper protocol, failures, downstream connections."""

    listens = False

    def __init__(self, assignment: Assignment, topology: Topology) -> None:
        self.assignment = assignment
        self.topology = topology
        self.id = parse_processor_id(assignment.processor)
        self.stopping = threading.Event()
        self.joined: int | None = None
        self.joined_event = threading.Event()
        self._answered: set[tuple[str, int, bool]] = set()
        self._failure: BaseException | None = None
        self._failure_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._parent = os.getppid()
        self.coord: Coordinator | None = None
        self.table = PartitionTable([])
        self.outbound: dict[str, _Outbound] | None = None
        self.listener: socket.socket | None = None
        self._accepted: set[socket.socket] = set()
        self.router: Router | None = None
        self.metrics = ProcessorMetrics(assignment.name, assignment.processor)
        self.metrics_server: MetricsServer | None = None
        self._secret: RunSecret | None = None
        self._handshakes = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self.dead_letters = DeadLetterWriter(
            assignment.kafka, assignment.io_timeout, topology.on_error, self.metrics.quarantined,
            owner=f"{assignment.name}/{assignment.processor}", topology=assignment.name)

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
            info: dict[str, Any] = {"pid": os.getpid(), "host": address}
            metrics_host = self.assignment.metrics_host
            self.metrics_server = None if metrics_host == "none" else start_server(
                self.metrics.registry, "0.0.0.0" if metrics_host == "auto" else metrics_host)
            if self.metrics_server is not None:
                info["metrics"] = self.metrics_server.port
            if self.listens:
                self.listener = socket.create_server((address, 0))
                self.listener.settimeout(0.5)
                info["port"] = self.listener.getsockname()[1]
                self._start_thread("accept", self._accept_loop)
            a = self.assignment
            self.coord = Coordinator(a.zk, a.name, a.processor, info,
                                     session_timeout=a.session_timeout)
            self.coord.register(a.register_timeout)
            self.table = PartitionTable(self.coord.expected().partitions)
            self.setup()
            log.info("registered; waiting for Initialize")
            self.coord.changed.set()
            while True:
                self.check()
                self.follow_master()
                self.step()
        except BaseException as exc:
            halted = None if isinstance(exc, TopologyHalt) else self._halt_of_this_run()
            if halted is not None:
                log.warning("ending (%s: %s): the topology halted", type(exc).__name__, exc)
                raise halted from exc
            if isinstance(exc, RestartRequired):
                log.warning("%s", exc)
            else:
                log.error("failed:\n%s", "".join(traceback.format_exception(exc)))
                if self.coord is not None:
                    self.coord.fail_visibly(f"{type(exc).__name__}: {exc}")
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
        if self.coord is None or self.joined is None:
            return None
        try:
            record = self.coord.master()
        except Exception:
            return None
        if record is None or record.state.epoch <= self.joined:
            return None
        reason = halt_reason(record.reason)
        return TopologyHalt(reason) if reason is not None else None

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
        for sock in [*self._accepted, *([self.listener] if self.listener else [])]:
            with contextlib.suppress(OSError):
                sock.close()
        if self.coord is not None:
            self.coord.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()
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

    def check(self) -> None:
        """Raise the first recorded failure, a lost session, or an orphaned process."""
        if self._failure is not None:
            raise self._failure
        assert self.coord is not None
        self.coord.check()
        if os.getppid() != self._parent:
            raise RuntimeError("the Spark worker that started this processor is gone")

    def _start_thread(self, name: str, target: Any, *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
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
        if self.joined is None or epoch < self.joined:
            return  # a new incarnation waits for the next Initialize
        if isinstance(state, SpoutsRewind) and epoch != self.joined:
            raise RestartRequired(f"SpoutsRewind({epoch}) of a run this incarnation missed")
        clock = getattr(state, "clock", None)
        key = (type(state).__name__, epoch, clock is not None)
        if key in self._answered:
            return
        self._answered.add(key)
        self.on_state(state)

    def on_initialize(self, epoch: int) -> None:
        raise NotImplementedError

    def on_state(self, state: SpoutsRewind | SpoutsPaused | Flowing) -> None:
        """React to a state after Initialize (each ``(state, epoch)`` once)."""

    def report(self, state: ProcessorState, epoch: int, **kw: Any) -> None:
        assert self.coord is not None
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

    def connections(self) -> dict[str, _Outbound]:
        """Connections to every downstream instance, opened on first use."""
        if self.outbound is not None:
            return self.outbound
        assert self.coord is not None and self.joined is not None
        wanted = sorted(set(self.downstream_ids.values()))
        reports = self.coord.reports()
        outbound: dict[str, _Outbound] = {}
        try:
            for receiver in wanted:
                report = reports.get(receiver)
                if (report is None or report.state is ProcessorState.JOINING
                        or report.epoch < self.joined or "port" not in report.info):
                    raise DataPlaneError(
                        f"{receiver} is not ready in the run of epoch {self.joined} "
                        f"(report: {report})"
                    )
                address = (str(report.info["host"]), int(report.info["port"]))
                outbound[receiver] = _Outbound(
                    self.assignment.processor, receiver, address, self.joined,
                    self.assignment.io_timeout, self.secret,
                )
        except BaseException:
            for out in outbound.values():
                out.close()
            raise
        self.outbound = outbound
        log.info("connected to %s", ", ".join(wanted) or "nothing")
        return outbound

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

    # -- inbound (bolts and sinks) ------------------------------------------------------

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

    def deliver(self, sender: str, frame: Frame | LiveQuery) -> None:
        """Hand a received frame to the main thread (blocking: back-pressure)."""
        raise NotImplementedError

    def _answer_query(self, sock: socket.socket, sealer: FrameSealer, query: Query) -> None:
        """Answer a live query; nothing that goes wrong with it fails this processor."""
        try:
            send_frames(sock, [Answer(self.answer(query))], sealer=sealer)
        except Exception as exc:
            log.warning("answering a live query failed: %s", exc)

    def answer(self, query: Query) -> dict[str, Any]:
        """The fields of the ANSWER to a live query (only bolts hold state)."""
        return {"processor": self.assignment.processor,
                "error": f"{self.assignment.processor} is not a bolt: it holds no state"}

    def _accept_loop(self) -> None:
        assert self.listener is not None
        while not self.stopping.is_set():
            try:
                sock, address = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stopping.is_set():
                    return
                raise
            if not self._handshakes.acquire(blocking=False):
                self._refuse(sock, address, f"over {MAX_HANDSHAKES} handshakes at once")
                continue
            self._accepted.add(sock)
            self._start_thread("receive", self._receive, sock, address)

    def _refuse(self, sock: socket.socket, address: Any, why: object) -> None:
        """Close a connection that did not authenticate: logged and counted, never a failure
        of this processor (a port scan or a stranger must not restart the topology)."""
        log.warning("refused a data-plane connection from %s: %s", address, why)
        self.metrics.refused_connections.inc()
        with contextlib.suppress(OSError):
            sock.close()

    def _receive(self, sock: socket.socket, address: Any) -> None:
        try:
            try:
                checker, sealer = accept_peer(sock, self.secret, HANDSHAKE_TIMEOUT)
            except (AuthError, OSError) as exc:
                self._refuse(sock, address, exc)
                return
            finally:
                self._handshakes.release()
            self._serve(sock, FrameReader(checker=checker), sealer)
        finally:
            self._accepted.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self, sock: socket.socket, reader: FrameReader, sealer: FrameSealer) -> None:
        """Frames of an authenticated peer of this run: HELLO, then data until BYE; or a
        QUERY, answered with one ANSWER."""
        sender = "?"
        sock.settimeout(self.assignment.io_timeout)
        first = recv_frames(sock, reader)
        if first and isinstance(first[0], Query):
            self._answer_query(sock, sealer, first[0])
            return
        if not first or not isinstance(first[0], Hello):
            raise DataPlaneError(f"an authenticated connection without HELLO: {first[:1]}")
        hello = first[0]
        sender = hello.sender
        if not self.joined_event.wait(self.assignment.io_timeout):
            raise DataPlaneError(f"{sender} connected before this processor joined a run")
        if hello.epoch != self.joined or hello.receiver != self.assignment.processor:
            log.warning("refusing %s: HELLO for %s in epoch %d (this run: %s)",
                        sender, hello.receiver, hello.epoch, self.joined)
            return
        if sender not in self.upstream_ids():
            raise DataPlaneError(f"{sender} is not an upstream of {self.id}")
        log.debug("accepted %s", sender)
        sock.settimeout(None)  # idle upstreams are normal; liveness is ZooKeeper's job
        frames: list[Frame] = first[1:]
        while True:
            for frame in frames:
                if isinstance(frame, Bye):
                    raise DataPlaneError(f"{sender} closed its connection")
                self.deliver(sender, frame)
            frames = recv_frames(sock, reader)
            if not frames:
                raise DataPlaneError(f"{sender} closed its connection")


# --------------------------------------------------------------------------- spout


class _SpoutShell(_Shell):
    """One Kafka partition: rewound, paused and resumed by the master state."""

    def setup(self) -> None:
        from hailstorm.kafka import consumer

        spec = self.topology.node(self.id.name)
        assert isinstance(spec, SpoutSpec) and self.id.partition is not None
        self.spec = spec
        self.partition: Partition = self.id.partition
        self.index = self.table.index(self.partition)
        self.router = Router(self.topology.downstream_of(spec.name))
        self.core: SpoutCore | None = None
        self.started = False
        self.consumer = consumer(self.assignment.kafka)
        self._last_watermark = 0.0
        self._last_transient = 0.0
        self._dead_letters_committed = 0.0
        self.from_log_start = False
        """Reading a partition no committed round has seen from its log start."""
        self.log_start_retries = 0

    def shutdown(self) -> None:
        consumer = getattr(self, "consumer", None)
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()
        super().shutdown()

    def on_initialize(self, epoch: int) -> None:
        self.core = SpoutCore(self.spec, self.partition[1],
                              self.topology.downstream_of(self.spec.name),
                              quarantine_topic=self.topology.dead_letter_topic)
        self.report(ProcessorState.READY, epoch)

    def on_state(self, state: SpoutsRewind | SpoutsPaused | Flowing) -> None:
        from confluent_kafka import TopicPartition

        core = self.core
        assert core is not None
        p = self.partition
        if isinstance(state, SpoutsRewind):
            assert self.coord is not None
            committed = self.coord.committed()  # what bolts with a snapshot loaded
            seek = core.start(state.clock, committed.clock if committed is not None else None)
            # A partition no committed round has seen (a first start, or a partition added
            # since) is read from where its log starts: retention may have deleted offset 0
            # long ago, and that is no gap for this topology. Otherwise the exact offset,
            # also for a partition committed as empty (-1): a record it missed is an error.
            unseen = committed is None or p not in committed.clock
            self.from_log_start = unseen and seek == NOTHING + 1
            start = self._log_start() if self.from_log_start else seek
            self.consumer.assign([TopicPartition(p[0], p[1], start)])
            self.started = True
            self.send_all([self._watermark(core.watermark())])
            self.report(ProcessorState.REWOUND, state.epoch, position={p: core.position})
            log.info("rewound to %d (reading from %d)", core.position, seek)
        elif not self.started:
            raise DataPlaneError(f"{type(state).__name__} before SpoutsRewind in this run")
        elif isinstance(state, SpoutsPaused):
            position = core.pause()
            self._commit_dead_letters()  # the round's clock may include their records
            self.report(ProcessorState.PAUSED, state.epoch, position={p: position})
        elif isinstance(state, Flowing):
            self._send(core.resume(state.epoch, state.clock) if state.clock is not None
                       else core.resume())
            self.report(ProcessorState.FLOWING, state.epoch, position={p: core.position})

    def _log_start(self) -> int:
        """The partition's first offset, asked of the broker. An explicit offset, not
        ``OFFSET_BEGINNING``: librdkafka resolves a logical offset on its offset-query
        timer, which held back a spout's first fetch by 0.5 to 1.5 s."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        try:
            low, _high = self.consumer.get_watermark_offsets(
                TopicPartition(*self.partition), timeout=self.assignment.io_timeout)
            return int(low)
        except KafkaException as exc:
            log.warning("log start of %s unknown (%s): reading from the beginning",
                        partition_key(self.partition), exc)
            return OFFSET_BEGINNING

    def _watermark(self, marks: Mapping[Partition, int]) -> Watermark:
        assert self.joined is not None
        self._last_watermark = time.monotonic()
        return Watermark(self.joined, self.table.to_wire(marks))

    def _send(self, out: SpoutOutput) -> None:
        """CLOCK (if any), this batch's part, then the watermark, to every destination."""
        connections = self.connections()
        ids = self.downstream_ids
        per_receiver: dict[str, list[Frame]] = {r: [] for r in connections}
        if out.clock is not None:
            marker = ClockMarker(out.clock.epoch, self.table.to_wire(out.clock.clock))
            for frames in per_receiver.values():
                frames.append(marker)
        for dest, part in out.batches.items():  # the core routed; re-key by wire index
            partitions = [self.index] * len(part)
            per_receiver[ids[dest]].append(
                DataBatch.of(partitions, part.offsets, part.tuples, part.keys, part.values)
                if isinstance(part, Contributions)
                else DataBatch.of(partitions, part.offsets, part.tuples))
        watermark = self._watermark(out.watermark)
        for receiver, frames in per_receiver.items():
            frames.append(watermark)
            connections[receiver].send(frames)
        if out.dead_letters:
            self.dead_letters.write(out.dead_letters)

    def _on_consumer_error(self, error: Any, needed: int) -> None:
        """Halt on lost offsets or refused credentials, fail on a fatal client error, and
        let librdkafka recover from the rest (a broker restarting, a leader moving)."""
        from confluent_kafka import KafkaException, TopicPartition

        from hailstorm.kafka import consumer_error_kind, lost_offsets_message

        kind = consumer_error_kind(error)
        if kind == "eof":
            return
        topic, partition = self.partition
        if kind == "lost" and self.from_log_start and needed == NOTHING + 1 \
                and self.log_start_retries < LOG_START_RETRIES:
            # Nothing read yet from where the log started: retention moved its start
            # between the query and the fetch. Start again from the new one.
            self.log_start_retries += 1
            self.consumer.assign([TopicPartition(topic, partition, self._log_start())])
            return
        if kind == "lost":
            low: int | None
            high: int | None
            try:
                low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10)
            except KafkaException:
                low = high = None
            raise TopologyHalt(lost_offsets_message(topic, partition, needed, low, high))
        if kind == "auth":
            raise TopologyHalt(f"Kafka refused the spout's credentials: {error.str()}")
        if kind == "fatal":
            raise KafkaException(error)
        now = time.monotonic()
        if now - self._last_transient >= 10:
            self._last_transient = now
            log.warning("kafka (recovering by itself): %s", error.str())

    def step(self) -> None:
        assert self.coord is not None
        core = self.core
        if core is None or not self.started or core.paused:
            if core is not None and self.started and \
                    time.monotonic() - self._last_watermark >= WATERMARK_INTERVAL:
                self.send_all([self._watermark(core.watermark())])
            self.coord.changed.wait(POLL / 2)
            return
        messages = self.consumer.consume(CONSUME_BATCH, timeout=POLL / 2)
        offsets: list[int] = []
        values: list[bytes | None] = []
        for message in messages:
            error = message.error()
            if error is not None:
                self._on_consumer_error(error, core.position + 1)
                continue
            offset = message.offset()
            if offset is not None:
                offsets.append(offset)
                values.append(message.value())
        for start in range(0, len(offsets), SPOUT_CHUNK):
            if start:  # a round may be pausing the spouts: records after it are held back
                self.follow_master()
            started = time.perf_counter()
            out = core.on_records(offsets[start:start + SPOUT_CHUNK],
                                  values[start:start + SPOUT_CHUNK])
            self._send(out)
            self.metrics.batch(started, min(SPOUT_CHUNK, len(offsets) - start),
                               sum(len(b) for b in out.batches.values()))
        if not offsets and time.monotonic() - self._last_watermark >= WATERMARK_INTERVAL:
            self.send_all([self._watermark(core.watermark())])
        if self.dead_letters.pending and \
                time.monotonic() - self._dead_letters_committed >= DEAD_LETTER_INTERVAL:
            self._commit_dead_letters()

    def _commit_dead_letters(self) -> None:
        """Commit the dead letters of every message read so far (through the position)."""
        assert self.core is not None
        self._dead_letters_committed = time.monotonic()
        self.dead_letters.commit_through({self.partition: self.core.position})


# --------------------------------------------------------------------------- bolt


@dataclass(frozen=True)
class LiveQuery:
    """A live query handed to a bolt's main thread, which puts the answer in ``reply``."""

    query: Query
    reply: queue.Queue[dict[str, Any]] = field(default_factory=lambda: queue.Queue(1))


class _Inbound(_Shell):
    """Bolts and sinks: a listener, one reader thread per upstream, a bounded queue."""

    listens = True

    def setup(self) -> None:
        self.inbound: queue.Queue[tuple[str, Frame | LiveQuery]] = queue.Queue(QUEUE_FRAMES)

    def deliver(self, sender: str, frame: Frame | LiveQuery) -> None:
        deadline = time.monotonic() + self.assignment.io_timeout
        while not self.stopping.is_set():
            try:
                self.inbound.put((sender, frame), timeout=POLL)
                return
            except queue.Full:
                if time.monotonic() > deadline:
                    raise DataPlaneError(
                        f"the main thread took no frame for {self.assignment.io_timeout} s"
                    ) from None

    def step(self) -> None:
        try:
            sender, frame = self.inbound.get(timeout=POLL)
        except queue.Empty:
            self.on_idle()
            return
        self.on_frame(sender, frame)
        for _ in range(QUEUE_FRAMES):  # drain what is there before looking at ZooKeeper
            if self._failure is not None:
                return
            try:
                sender, frame = self.inbound.get_nowait()
            except queue.Empty:
                return
            self.on_frame(sender, frame)

    def on_frame(self, sender: str, frame: Frame | LiveQuery) -> None:
        raise NotImplementedError

    def on_idle(self) -> None:
        """Nothing arrived for :data:`POLL` seconds."""


class _BoltShell(_Inbound):
    """One bolt instance: BoltCore on the main thread, a snapshot writer thread."""

    def setup(self) -> None:
        super().setup()
        spec = self.topology.node(self.id.name)
        assert isinstance(spec, BoltSpec)
        self.spec = spec
        self.router = Router(self.topology.downstream_of(spec.name),
                             compacted=spec.preaggregate)
        self.store = open_store(self.assignment.snapshots)
        self.flushed = time.monotonic()
        self.core: BoltCore | None = None
        self.writes: queue.Queue[WriteSnapshot] = queue.Queue(8)
        self._start_thread("snapshots", self._writer)
        read_at_scrape(self.metrics.state_keys,
                       lambda: None if self.core is None else self.core.key_count)

    def on_initialize(self, epoch: int) -> None:
        assert self.coord is not None
        committed = self.coord.committed()
        loaded: Clock = {}
        state: Any = self.spec.state.empty()
        if committed is not None:
            refs = [ref for pid, ref in sorted(committed.snapshots.items())
                    if (p := parse_processor_id(pid)).role is Role.BOLT
                    and p.name == self.spec.name]
            if refs:
                try:
                    _clock, state = self.store.load_for_instance(
                        refs, self.spec.state, self.id.instance, self.spec.parallelism)
                except SnapshotCorruptError as exc:
                    # Named to the negotiator, which falls back to the previous round.
                    log.error("committed round %d: snapshot %s is corrupt: %s",
                              committed.epoch, exc.uri, exc)
                    self.report(ProcessorState.JOINING, epoch,
                                error=f"corrupt snapshot {exc}", corrupt=exc.uri)
                    raise
                loaded = dict(committed.clock)
        self.core = BoltCore(self.spec, self.upstream_ids(), self.table.to_wire(loaded), state)
        gc.freeze()  # the loaded state is long-lived: collections need not walk it again
        log.info("loaded %s", f"the committed round at {loaded}" if loaded else "nothing")
        self.report(ProcessorState.READY, epoch, loaded=loaded)

    def on_state(self, state: SpoutsRewind | SpoutsPaused | Flowing) -> None:
        if isinstance(state, Flowing) and state.clock is not None:
            assert self.core is not None
            self.act(self.core.on_clock(state.epoch, self.table.to_wire(state.clock)))

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
            strays = [k for k in query.keys if route(k, parallelism) != self.id.instance]
            if strays:
                return {"processor": me, "error": f"{me} does not own the keys {strays!r}"}
            fields["values"], fields["missing"] = core.lookup(query.keys)
        watermark = core.low_water_mark
        fields["through"] = None if watermark is None else self.table.from_wire(watermark)
        fields["absorbed"] = self.table.from_wire(core.absorbed)
        return fields

    def on_frame(self, sender: str, frame: Frame | LiveQuery) -> None:
        core = self.core
        assert core is not None
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
            if core.failed:
                self.quarantine(core.failed)
            if out.tuples:
                self.send_batch(out)
            self.metrics.batch(started, len(frame), len(out.tuples))
        elif isinstance(frame, Watermark):
            self.act(core.on_watermark(sender, frame.watermark))
        elif isinstance(frame, ClockMarker):
            self.act(core.on_clock(frame.epoch, frame.clock))
        if core.compacting and time.monotonic() - self.flushed >= FLUSH_INTERVAL:
            self.flush()

    def on_idle(self) -> None:
        if self.core is not None and self.core.unflushed:
            self.flush()

    def flush(self) -> None:
        """Send what a compacting bolt held back: its rows, then its watermark."""
        assert self.core is not None
        self.flushed = time.monotonic()
        actions = self.core.flush()
        if self.core.failed:
            self.quarantine(self.core.failed)
        self.act(actions)

    def quarantine(self, failed: list[Failed]) -> None:
        """Write the core's failed tuples as dead letters (wire partitions -> names)."""
        topic = self.topology.dead_letter_topic
        partition = self.table.partition
        letters = [DeadLetter.of_tuple(topic, (partition(p), o), t, failure)
                   for p, o, t, failure in failed]
        failed.clear()
        # Committed with the watermark (or snapshot) that covers their origins, before it
        # leaves this bolt: a round committed past them is never replayed.
        self.dead_letters.write(letters)

    def act(self, actions: Iterable[Action]) -> None:
        for action in actions:
            if isinstance(action, Emit):
                self.send_batch(action.batch)
                self.metrics.messages_out.inc(len(action.batch))
            elif isinstance(action, ForwardClock):
                self.send_all([ClockMarker(action.epoch, dict(action.clock))])
            elif isinstance(action, ForwardWatermark):
                assert self.joined is not None
                if self.dead_letters.pending:
                    self.dead_letters.commit_through(self.table.from_wire(action.watermark))
                self.send_all([Watermark(self.joined, dict(action.watermark))])
            elif isinstance(action, WriteSnapshot):
                if self.dead_letters.pending:
                    self.dead_letters.commit_through(self.table.from_wire(action.clock))
                self._submit(action)

    def _submit(self, write: WriteSnapshot) -> None:
        deadline = time.monotonic() + self.assignment.io_timeout
        while True:
            self.check()
            try:
                self.writes.put(write, timeout=POLL)
                return
            except queue.Full:
                if time.monotonic() > deadline:
                    raise DataPlaneError("the snapshot writer is stuck") from None

    def _writer(self) -> None:
        while not self.stopping.is_set():
            try:
                write = self.writes.get(timeout=0.5)
            except queue.Empty:
                continue
            clock = self.table.from_wire(write.clock)
            ref = self.store.put(
                topology=self.assignment.name, bolt=self.spec.name, instance=self.id.instance,
                parallelism=self.spec.parallelism, epoch=write.epoch, clock=clock,
                monoid=self.spec.state, state=write.state,
            )
            self.metrics.snapshot(write.epoch, ref.duration_s, ref.size_bytes)
            assert self.coord is not None
            self.coord.write_snapshot_report(
                SnapshotReport(self.assignment.processor, write.epoch, clock, ref.uri))
            log.info("saved round %d (%d records, %.3f s)", write.epoch, ref.records,
                     ref.duration_s or 0.0)


# --------------------------------------------------------------------------- sink


class _SinkShell(_Inbound):
    """One sink instance: rows go to its table exactly once, and it takes part in rounds.

    Rows are buffered in a :class:`~hailstorm.sinks.SinkWriter`; whenever the low water
    mark over the upstream instances advances, every buffered row at or below it is
    committed with the sink's progress in one transaction. Bolts never re-emit what a
    committed round holds, so a round may only commit once every sink's table covers its
    clock: when the mark covers a pending round's clock, the sink reports that round like a
    bolt reports a snapshot. A :class:`~hailstorm.topic.Topic` target is written the same
    way, a Kafka transaction per commit (:class:`~hailstorm.sinks.topic.TopicWriter`).
    Sinks with another target keep nothing and only report rounds.
    """

    def setup(self) -> None:
        super().setup()
        spec = self.topology.node(self.id.name)
        assert isinstance(spec, SinkSpec)
        self.spec = spec
        self.received = 0
        self.writer: SinkWriter | TopicWriter | None = None
        self.marks = UpstreamWatermarks()
        self.rounds: dict[int, Clock] = {}
        self.last_commit = time.monotonic()
        self.committed_through: Clock = {}

    def on_initialize(self, epoch: int) -> None:
        self.received = 0
        self.rounds = {}
        self.marks = UpstreamWatermarks(self.upstream_ids())
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
                                          on_reject=self._rejected, halt_as=halt_as)
            log.info("table %s at %s, progress %s", target.name, redact(url),
                     clock_to_json(self.writer.view))
        elif isinstance(target, Topic):
            self.writer = TopicWriter.open(
                self.assignment.kafka, target, sink_id, epoch,
                progress=progress_topic(self.topology.name, self.spec.name),
                dead_letter_topic=self.topology.dead_letter_topic, node=self.spec.name,
                io_timeout=self.assignment.io_timeout, on_reject=self._rejected,
                halt_as=halt_as)
            log.info("topic %s, progress %s", target.name, clock_to_json(self.writer.view))
        if self.writer is not None:
            self.committed_through = self.writer.view
        self.report(ProcessorState.READY, epoch)

    def on_state(self, state: SpoutsRewind | SpoutsPaused | Flowing) -> None:
        if isinstance(state, Flowing) and state.clock is not None:
            self._round(state.epoch, dict(state.clock))

    def _rejected(self, rejected: RejectedRow) -> None:
        """A tuple was committed to ``<table>_rejected`` (a topic's: to the dead letters)."""
        (topic, number), offset = rejected.origin
        log.warning("rejected the tuple from %s:%d:%d (%s): %s", topic, number, offset,
                    rejected.stage, rejected.error)
        self.metrics.quarantined.inc()

    def on_frame(self, sender: str, frame: Frame | LiveQuery) -> None:
        if isinstance(frame, DataBatch):
            if frame.contributions:
                raise DataPlaneError(f"{sender} sent pre-aggregated contributions to a sink")
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
            advanced = self.marks.observe(sender, frame.watermark)
            if advanced or (self.writer is not None and self.writer.pending):
                self._commit(force=False)
        elif isinstance(frame, ClockMarker):
            self._round(frame.epoch, self.table.from_wire(frame.clock))

    def on_idle(self) -> None:
        # Bolts forward a watermark only when it moves, so once the stream goes quiet no
        # frame arrives until the next round: rows held back for batching are committed
        # here, or the tail of a burst would wait for that round.
        if self.writer is not None and self.writer.pending:
            self._commit(force=False)

    def _round(self, epoch: int, clock: Clock) -> None:
        if self.joined is not None and epoch >= self.joined and epoch not in self.rounds:
            self.rounds[epoch] = clock
            self._commit(force=True)

    def _lwm(self) -> Clock:
        """The low water mark of the partitions some upstream carries (the others are
        absent: no row of theirs can ever reach this sink)."""
        marks = self.marks.lwm(range(len(self.table)))
        return {
            self.table.partition(i): offset
            for i, offset in marks.items()
            if offset < UNBOUNDED
        }

    @staticmethod
    def _covers(through: Clock, clock: Clock, carried: Clock) -> bool:
        """``through`` includes everything of ``clock`` this sink can receive: partitions
        no upstream carries (absent from ``carried``) are complete by definition, or a sink
        fed by one spout of a two-topic topology would wait for the other topic forever."""
        return all(through.get(p, NOTHING) >= o for p, o in clock.items() if p in carried)

    def _commit(self, *, force: bool) -> None:
        """Commit rows up to the low water mark (now, or when enough waited), then report
        every pending round the mark covers."""
        if not self.marks.complete:
            return
        lwm = self._lwm()
        due = [e for e, clock in sorted(self.rounds.items()) if self._covers(lwm, clock, lwm)]
        writer = self.writer
        if writer is not None:
            waited = time.monotonic() - self.last_commit
            if force or due or writer.pending >= COMMIT_ROWS or waited >= COMMIT_INTERVAL:
                try:
                    waiting = writer.pending
                    started = time.perf_counter()
                    self.committed_through = writer.commit_through(lwm)
                    self.metrics.sink_commit_seconds.observe(time.perf_counter() - started)
                    self.metrics.rows_committed.inc(waiting - writer.pending)
                except FencedError as exc:
                    if exc.superseded:
                        raise
                    log.warning("%s; re-reading progress", exc)
                    self.committed_through = writer.progress()
                    return
                self.last_commit = time.monotonic()
                failpoint("sink.after_commit")  # tests: die between the table and ZooKeeper
        else:
            self.committed_through = lwm
        assert self.coord is not None
        for epoch in due:
            clock = self.rounds.pop(epoch)
            if not self._covers(self.committed_through, clock, lwm):
                self.rounds[epoch] = clock  # the next commit gets there
                continue
            target = self.spec.target
            ref = (f"table:{target.name}" if isinstance(target, Table) else
                   f"topic:{target.name}" if isinstance(target, Topic) else
                   f"sink:{self.spec.name}")
            self.coord.write_snapshot_report(
                SnapshotReport(self.assignment.processor, epoch, clock, ref)
            )
            log.info("round %d: table committed through %s", epoch, clock_to_json(clock))

    def shutdown(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
        super().shutdown()
