"""The processors' side of ZooKeeper: a thin kazoo adapter following docs/negotiator.md.

One :class:`Coordinator` per processor instance, on its own ZooKeeper session:

* :meth:`Coordinator.register` creates the ephemeral ``living/<id>`` node reporting
  ``joining`` (epoch 0), waiting (bounded) for a previous incarnation's node to vanish (one
  its Spark task saw end, or one of an ended stage attempt, is taken over at once);
* :meth:`Coordinator.report` updates it (every report carries the processor's ``info``:
  its data-plane address and pid);
* :meth:`Coordinator.master` gives the ``master`` record as last read by a kazoo
  ``DataWatch``, which reads the node again on kazoo's callback thread whenever it changes
  (the event's payload is never trusted) and then sets :attr:`Coordinator.changed`: a
  processor's main thread never waits for ZooKeeper to follow the master (three changes a
  snapshot round, 15-40 ms a read on a busy machine, on the data path of every spout and
  bolt);
* once registered, it follows ``expected``: when the driver names another stage attempt
  there, :attr:`Coordinator.superseded` names it (this incarnation's attempt ended: Spark
  may not have killed it yet, and it holds a task slot the new attempt waits for);
* :meth:`Coordinator.write_snapshot_report`, :meth:`Coordinator.committed`,
  :meth:`Coordinator.expected` and :meth:`Coordinator.reports` do the rest.

A lost session (``LOST``: the ephemeral node is gone) is fatal: :attr:`Coordinator.lost` is
set and :meth:`Coordinator.check` raises. A lost *connection* (``SUSPENDED``) is not: the
session and the living node survive it when the client reconnects in time, and a ZooKeeper
ensemble that was down as a whole gives every session its whole timeout again once it is
back. So a ZooKeeper outage is waited out: every read and write after
:meth:`Coordinator.register` is retried (kazoo's :class:`~kazoo.retry.KazooRetry`) until it
succeeds or ZooKeeper says the session is lost; the log says when the wait started and
ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch
from kazoo.retry import KazooRetry

from hailstorm.errors import ServiceError
from hailstorm.outages import OutageWatch
from hailstorm.protocol.clock import Clock
from hailstorm.protocol.layout import (
    ATTEMPT_INFO,
    CommittedRecord,
    ExpectedRecord,
    LayoutError,
    MasterRecord,
    ProcessorReport,
    ProcessorState,
    SnapshotReport,
    TopologyPaths,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.protocol.states import Initialize, MasterState, Restarting
from hailstorm.zookeeper import ensure_paths, zk_client

__all__ = ["CoordinationError", "Coordinator"]

log = logging.getLogger("hailstorm.coordination")

ERROR_CHARS = 2000
"""Longest error a processor reports: enough for a halt's whole reason (it names a topic of
up to 249 characters), short enough for a ZooKeeper node."""

T = TypeVar("T")


def _readable(read: Callable[[], MasterRecord | None]) -> MasterRecord | None:
    """``read()``'s master record; None (logged) when it is unreadable: a negotiator will
    replace it."""
    try:
        return read()
    except LayoutError as exc:
        log.warning("unreadable master record (%s); waiting for the negotiator", exc)
        return None


class CoordinationError(ServiceError, RuntimeError):
    """ZooKeeper is unusable for this processor (session lost, node never freed...)."""


def _setter(event: threading.Event) -> Any:
    """A watch callback that sets ``event``."""
    return lambda _event: event.set()


class Coordinator:
    """One processor's ZooKeeper session and its ``living`` node."""

    def __init__(
        self,
        hosts: str,
        topology: str,
        processor: str,
        info: Mapping[str, Any] | None = None,
        *,
        session_timeout: float = 6.0,
        connect_timeout: float = 20.0,
        replaces: int | None = None,
    ) -> None:
        self.paths = TopologyPaths(topology)
        #: The pid of this incarnation's predecessor in its Spark task, gone: its node is
        #: taken over at once (:meth:`_node_to_take_over`).
        self.replaces = replaces
        self.processor = processor
        self.info: dict[str, Any] = dict(info or {})
        self.changed = threading.Event()
        """Set whenever ``master`` was read anew (and on connection changes)."""
        self._master_lock = threading.Lock()
        self._master_data: bytes | None = None
        """The ``master`` node's data as its watch last read it (None: no node)."""
        self._master_watch: DataWatch | None = None
        self._master_watch_lock = threading.Lock()
        """Held while the ``DataWatch`` starts (its first read calls back under
        ``_master_lock``)."""
        self.lost = threading.Event()
        """Set when the session expired: the living node is gone for good."""
        self._registered = False
        self._last_report: ProcessorReport | None = None
        #: The outage this processor waits out (see :meth:`report_waiting`), in every report.
        self.waiting: str | None = None
        #: The round after whose snapshot a sweep dropped what none holds (see
        #: :meth:`report_swept`), in every report.
        self.swept_after: int | None = None
        #: The epoch of the ``Initialize`` whose run this incarnation joined, in every
        #: report once it joined (a local recovery's restarted instances join that run).
        self.run: int | None = None
        #: A spout's replays to instances restarting alone that joined its live stream
        #: (in a local recovery's ``Replaying``), in every report.
        self.replayed: tuple[str, ...] = ()
        #: The peers this processor goes on without (they restart alone), in every report
        #: (see :meth:`report_detached`).
        self.detached: tuple[str, ...] = ()
        self.superseded: str | None = None
        """The stage attempt that ``expected`` names once it is no longer this
        incarnation's (see :meth:`_follow_attempts`); None while it is."""
        self._retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0,
                                 ignore_expire=False, interrupt=self.lost.is_set)
        self.zookeeper = OutageWatch(f"ZooKeeper at {hosts}")
        """Since when the connection is suspended (the processor waits for ZooKeeper)."""
        self.client = zk_client(hosts, session_timeout)
        self.client.add_listener(self._on_state)
        self.client.start(timeout=connect_timeout)
        self.records = TopologyRecords(self.client, self.paths, call=self._call)
        """Reads and writes of the records, retried across connection losses."""

    # -- session ------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST and self._registered:
            self.lost.set()
        if state == KazooState.SUSPENDED and not self.zookeeper.waiting:
            outage = self.zookeeper.failed(time.time(), "the connection is suspended")
            log.warning("%s: waiting for %s (the session survives if it comes back)",
                        self.processor, outage.describe())
        elif state != KazooState.SUSPENDED:
            ended = self.zookeeper.answered()
            if ended is not None:
                log.warning("%s: the wait for ZooKeeper is over after %.0f s (%s)",
                            self.processor, time.time() - ended.since,
                            "session lost" if state == KazooState.LOST else "session kept")
        self.changed.set()

    def _call(self, operation: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``operation(*args, **kwargs)``, retried across connection losses."""
        result: T = self._retry.copy()(operation, *args, **kwargs)
        return result

    def check(self) -> None:
        """Raise :class:`CoordinationError` once the session is lost."""
        if self.lost.is_set():
            raise CoordinationError(
                f"{self.processor}: ZooKeeper session lost (living node gone)"
            )

    def close(self) -> None:
        """End the session (the living node disappears at once); never raises."""
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # closing is best effort
            log.debug("closing the ZooKeeper session failed", exc_info=True)

    # -- living node --------------------------------------------------------------------

    def register(self, timeout: float = 60.0) -> None:
        """Create ``living/<id>`` (ephemeral, ``joining``, epoch 0).

        If a previous incarnation's node still exists, wait for it to vanish (its session
        expiring); :class:`CoordinationError` after ``timeout`` s. Only the node of a
        predecessor gone for sure is taken over at once (:meth:`_node_to_take_over`).
        """
        ensure_paths(self.client, self.paths.directories())
        node = self.paths.living_node(self.processor)
        report = ProcessorReport(self.processor, ProcessorState.JOINING, 0, info=self.info)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client.create(node, report.to_json(), ephemeral=True)
                break
            except NodeExistsError:
                pass
            left = self._node_to_take_over(node)
            if left is not None:
                swap = self.client.transaction()  # one step: never seen without a node
                swap.delete(node, version=left)
                swap.create(node, report.to_json(), ephemeral=True)
                if not any(isinstance(r, Exception) for r in swap.commit()):
                    log.info("%s: took over the node a gone predecessor left (its session "
                             "outlives it)", node)
                    break
                if time.monotonic() < deadline:
                    continue  # it changed meanwhile: look again
            gone = threading.Event()
            if self.client.exists(node, watch=_setter(gone)) is None:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CoordinationError(
                    f"{node} still exists after {timeout:.0f} s: another incarnation of "
                    f"{self.processor} is alive"
                ) from None
            log.info("%s: waiting for the previous incarnation's node to vanish", node)
            gone.wait(min(remaining, 5.0))
        self._registered = True
        self._last_report = report
        self._follow_attempts()

    def _follow_attempts(self) -> None:
        """Watch ``expected`` until it names a stage attempt other than this incarnation's
        (``info``; none named: nothing to follow), then set :attr:`superseded` and
        :attr:`changed`. The driver names a new attempt only once the one before failed
        or ended, so an incarnation still running then must end: the negotiator counts
        none of its reports, and its task slot may be one the new attempt waits for."""
        own = self.info.get(ATTEMPT_INFO)
        if not isinstance(own, str):
            return

        def on_change(data: bytes | None, _stat: object) -> bool | None:
            if data is None:
                return None
            try:
                named = ExpectedRecord.from_json(data).attempt
            except LayoutError:
                return None
            if named is None or named == own:
                return None
            self.superseded = named
            self.changed.set()
            return False  # seen: no need to watch any longer

        DataWatch(self.client, self.paths.expected, on_change)

    def _node_to_take_over(self, node: str) -> int | None:
        """The version of ``node`` when a predecessor that is gone for sure left it, else
        None (wait for it to vanish):

        * the incarnation before this one in the same Spark task (``replaces``), which the
          task saw end (:mod:`hailstorm.runtime.supervisor`);
        * an incarnation of an ended stage attempt. The driver names this incarnation's
          attempt in ``expected`` only once the attempt before failed or ended; one of its
          processes still alive ends on seeing that (:attr:`superseded`), cannot
          authenticate to this attempt's peers meanwhile, and its next report finds its
          node gone and ends it (:meth:`report`)."""
        try:
            raw, stat = self.client.get(node)
            left = ProcessorReport.from_json(raw)
        except (NoNodeError, LayoutError):
            return None
        if self.replaces is not None and left.info.get("pid") == self.replaces \
                and left.info.get("worker") == self.info.get("worker") \
                and left.info.get("host") == self.info.get("host"):
            return stat.version
        own = self.info.get(ATTEMPT_INFO)
        if not isinstance(own, str) or left.of_attempt(own):
            return None
        expected = self.records.expected()
        return stat.version if expected is not None and expected.attempt == own else None

    def report(
        self,
        state: ProcessorState,
        epoch: int,
        *,
        position: Clock | None = None,
        loaded: Clock | None = None,
        error: str | None = None,
        corrupt: str | None = None,
        lost_peer: str | None = None,
        backfill: Clock | None = None,
    ) -> None:
        """Set the living node to a :class:`ProcessorReport` (info, the outage being
        waited out and an unsaved sweep included)."""
        report = ProcessorReport(
            self.processor, state, epoch, position, loaded, error, self.info, corrupt,
            self.waiting, lost_peer, backfill, self.swept_after, self.run, self.replayed,
            self.detached,
        )
        try:
            owner = self.records.write_report(report).ephemeralOwner
        except NoNodeError:
            owner = None
        if owner != self.client.client_id[0]:
            # Written into a newer incarnation's node, which it overwrites with its next
            # report: this one's names an ended attempt, which the negotiator never counts.
            self.lost.set()
            raise CoordinationError(
                f"{self.processor}: its living node is gone or another session's (its "
                f"session expired, or an incarnation of a newer stage attempt took it over)")
        self._last_report = report

    def report_waiting(self, waiting: str | None) -> None:
        """Say (in the last report) that this processor waits out an outage, or no longer
        (None). Best effort, never raises: ZooKeeper may be what is down."""
        if waiting == self.waiting:
            return
        self.waiting = waiting
        self._report_again("the wait")

    def report_swept(self, after: int) -> None:
        """Say (in the last report) that the sweep of closed windows dropped what no
        snapshot holds, the last one handed out being round ``after``: the negotiator then
        takes the next round even at an unchanged clock (``swept_after`` of
        :class:`ProcessorReport`; a round after ``after`` committed makes it moot). Best
        effort, never raises."""
        if after == self.swept_after:
            return
        self.swept_after = after
        self._report_again("the sweep")

    def report_detached(self, peers: tuple[str, ...]) -> None:
        """Say (in the last report) which peers this processor goes on without, whose
        connection broke: the negotiator names them as failed (best effort, never
        raises)."""
        if peers == self.detached:
            return
        self.detached = peers
        self._report_again("the peers gone on without")

    def _report_again(self, what: str) -> None:
        """Write the last report again, with what changed in it (best effort)."""
        last = self._last_report
        if not self._registered or last is None or self.lost.is_set():
            return
        try:
            self.report(last.state, last.epoch, position=last.position, loaded=last.loaded,
                        error=last.error, corrupt=last.corrupt, backfill=last.backfill)
        except Exception:  # broad: kazoo (ZooKeeper may be down); best effort, logged
            log.debug("could not report %s", what, exc_info=True)

    def report_error(self, message: str, lost_peer: str | None = None) -> None:
        """Report the last state with ``error`` set, and ``lost_peer`` when the error is a
        broken connection with that processor (best effort, never raises)."""
        last = self._last_report
        if not self._registered or last is None or self.lost.is_set():
            return
        try:
            self.report(
                last.state,
                last.epoch,
                position=last.position,
                loaded=last.loaded,
                error=message.splitlines()[0][:ERROR_CHARS] if message else "error",
                corrupt=last.corrupt,
                lost_peer=lost_peer,
            )
        except Exception:  # broad: kazoo (ZooKeeper may be down); best effort, logged
            log.debug("could not report the error", exc_info=True)

    def fail_visibly(self, message: str, linger: float = 3.0,
                     lost_peer: str | None = None, joined: int | None = None) -> None:
        """Report ``message`` as an error and keep the session up to ``linger`` s, until the
        negotiator restarts the run (an ``Initialize`` newer than the run this incarnation
        ``joined``, or than the master's epoch when it joined none): closing at once would
        make the negotiator see a lost node instead of the error. A snapshot round raises
        the epoch too, so a newer epoch alone does not end the wait: a processor that failed
        just before a round would close its session before the negotiator read its error,
        and the restart would name it lost instead of what failed it. When the restart
        happened already (a peer's failure came first), it returns at once: lingering then
        only keeps the living node that the next incarnation waits to see vanish, and the
        Spark task that the stage's cancellation kills. Best effort, never raises."""
        try:
            before = self.master()
            self.report_error(message, lost_peer)
            if before is None:
                return
            run = before.state.epoch if joined is None else joined
            deadline = time.monotonic() + linger
            now: MasterRecord | None = before
            while now is not None and not self._restarted(now.state, run):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.lost.is_set():
                    return
                self.changed.wait(remaining)
                now = self.master()
        except Exception:  # broad: kazoo (ZooKeeper may be down); best effort, logged
            log.debug("could not report the error", exc_info=True)

    def _restarted(self, state: MasterState, run: int) -> bool:
        """Whether ``state`` restarts this processor, which failed in the run of ``run``: a
        newer ``Initialize``, or a local recovery that names it and that this incarnation
        did not answer (it came after the failure, or had come before it was noticed)."""
        if isinstance(state, Restarting):
            answered = self._last_report is not None and self._last_report.epoch >= state.epoch
            return self.processor in state.instances and not answered
        return isinstance(state, Initialize) and state.epoch > run

    # -- reads --------------------------------------------------------------------------

    def master_now(self) -> MasterRecord | None:
        """``master`` read from ZooKeeper now, not as last followed (an incarnation that
        fails asks whether the run stopped or halted meanwhile, before its watch may have
        said so); None as in :meth:`master`. Leaves :attr:`changed` as it is."""
        return _readable(self.records.master)

    def _master_read(self, data: bytes | None, _stat: object) -> None:
        """The ``DataWatch`` read ``master`` anew (None: no node): keep it, then wake."""
        with self._master_lock:
            self._master_data = data
        self.changed.set()

    def stop_requested(self) -> bool:
        """Whether the stop request of this driver's run is there: a driver deletes the
        request before it starts its processors, so one there was made since (``hailstorm
        stop``, or a signal to the driver), and a ``Stopped`` master ended this run, not an
        earlier one. False when ZooKeeper cannot tell (the incarnation waits then)."""
        try:
            return self.records.stop_request() is not None
        except Exception:  # broad: any kazoo error means ZooKeeper cannot tell: no stop
            return False

    def master(self) -> MasterRecord | None:
        """The ``master`` record as last read (clears :attr:`changed` first); the first
        call starts following it (one read, then one on kazoo's thread at every change).

        None when there is no master node (the watch then waits for its creation) or when
        it is unreadable (a negotiator will replace it).
        """
        with self._master_watch_lock:  # the first call reads now, then after every change
            if self._master_watch is None:
                self._master_watch = DataWatch(self.client, self.paths.master,
                                               self._master_read)
        self.changed.clear()
        with self._master_lock:
            data = self._master_data
        return _readable(lambda: self.records.parse_master(data))

    def committed(self) -> CommittedRecord | None:
        """The ``committed`` record, or None when nothing was committed yet."""
        return self.records.committed()

    def expected(self) -> ExpectedRecord:
        """The ``expected`` record (the driver writes it before starting processors)."""
        expected = self.records.expected()
        if expected is None:
            raise CoordinationError(
                f"{self.paths.expected} does not exist: start the topology with 'hailstorm run'"
            )
        return expected

    def reports(self) -> dict[str, ProcessorReport]:
        """Every readable processor report under ``living``, by processor id."""
        return {child: report for child, report in self.records.reports().items()
                if report is not None and report.processor == child}

    def write_snapshot_report(self, report: SnapshotReport) -> None:
        """Set (or create) ``snapshots/<bolt>/<instance>``."""
        self.records.write_snapshot_report(report)
