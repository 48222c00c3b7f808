"""The kazoo shell around :func:`hailstorm.negotiator.machine.step` (through
:func:`hailstorm.negotiator.outages.step`).

- Leadership: every negotiator contends on ``election/`` with kazoo's Lock recipe (what
  kazoo's Election uses); exactly one holds it, the others block until the leader's
  session ends, then the next one takes over.
- Every wake-up reads the whole view from ZooKeeper, with a one-shot watch armed on every node
  and directory it reads, so any later change wakes the loop again; what did not change
  since the last wake-up is not asked again
  (:meth:`~hailstorm.protocol.records.TopologyRecords.read_view`). Watch payloads are never
  trusted: they only wake.
- A decision is applied in ONE ZooKeeper transaction: a check that our election node still
  exists (fencing: a negotiator whose session ended can write nothing), the master state
  written with compare-and-set on the version read, and the committed record (when the
  decision commits) also compare-and-set. Any failure means someone else moved: re-read.
- Between wake-ups the loop sleeps until the decision's deadline (``wake_at``), not in a poll.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    CancelledError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    RolledBackError,
    SessionExpiredError,
)

from hailstorm.negotiator.machine import (
    CommitClock,
    Config,
    Decision,
    ForgetSnapshots,
    Ignored,
    View,
)
from hailstorm.negotiator.outages import deadline_origin, step, waiting_in
from hailstorm.negotiator.recovery_scope import failed_instances, recovery_scope
from hailstorm.protocol.alone import Shape
from hailstorm.protocol.catchup import inputs_of_graph
from hailstorm.protocol.layout import (
    RECOVERIES_KEPT,
    CommittedRecord,
    LayoutError,
    MasterRecord,
    RecoveryRecord,
    SnapshotReport,
    StopRequest,
    TopologyPaths,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.protocol.states import (
    START_PHASES,
    Flowing,
    Initialize,
    MasterState,
    NegotiatorDisconnected,
    Restarting,
    SpoutsPaused,
    label,
)
from hailstorm.zookeeper import ensure_paths

if TYPE_CHECKING:
    from hailstorm.metrics import NegotiatorMetrics

log = logging.getLogger("negotiator")

_TRANSIENT = (ConnectionLoss, ConnectionClosedError, SessionExpiredError)

_UNREADABLE = {
    "master": "unreadable master record ({}): reinitializing",
    "committed": "unreadable committed record ({})",
    "expected": "unreadable expected record ({})",
    "stop": "unreadable stop request ({}): not stopping",
}
"""What the leader notes (once) about an unreadable record it reads."""


@dataclass(frozen=True)
class Observation:
    """One full re-read: the master state, the versions to compare-and-set, the view."""

    state: MasterState
    master_version: int | None
    """Version of the master node (None when absent)."""
    committed: CommittedRecord | None
    committed_version: int | None
    view: View


def election_lost(results: Sequence[object]) -> bool:
    """Whether a failed write transaction (its first operation checks this leader's election
    node) failed on that check. ZooKeeper fails every operation of a failed transaction:
    those before the one that failed come back as :class:`RolledBackError`, so a check that
    passed, followed by a record that changed under us, is no lost election."""
    return isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError)


def describe_transition(old: MasterState, new: MasterState, reason: str) -> str:
    """The one log line of a transition, e.g.
    ``epoch=12 Flowing(None) -> epoch=13 SpoutsPaused: snapshot interval 5.0s elapsed``."""
    if new.epoch == old.epoch:
        return f"epoch={old.epoch} {label(old)} -> {label(new)}: {reason}"
    return f"epoch={old.epoch} {label(old)} -> epoch={new.epoch} {label(new)}: {reason}"


def still_idle(old: MasterState, new: MasterState, committed: CommittedRecord | None,
               stop: StopRequest | None) -> bool:
    """Whether ``old -> new`` is a pause or a skipped round of a topology that was idle
    already (a round was skipped since the committed one): logged at DEBUG, so that an
    idle topology says so once, not twice an interval."""
    if committed is None or committed.confirmed_at is None or stop is not None:
        return False
    pause = isinstance(old, Flowing) and isinstance(new, SpoutsPaused)
    skip = isinstance(old, SpoutsPaused) and isinstance(new, Flowing) and new.clock is None
    return pause or skip


class Shell:
    """Runs the negotiator for one topology on a started :class:`KazooClient`."""

    def __init__(
        self,
        client: KazooClient,
        topology: str,
        config: Config,
        identifier: str,
        *,
        clock: Callable[[], float] = time.time,
        on_forget: Callable[[ForgetSnapshots], None] | None = None,
        metrics: NegotiatorMetrics | None = None,
        on_leadership: Callable[[bool], None] | None = None,
    ) -> None:
        self.client = client
        self.paths = TopologyPaths(topology)
        self.config = config
        self.identifier = identifier
        self.clock = clock
        self.on_forget = on_forget
        self.metrics = metrics
        self.on_leadership = on_leadership
        self.records = TopologyRecords(client, self.paths, on_unreadable=self._unreadable)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._leading = False
        self._lock: Any = None
        self._noted: set[tuple[str, str]] = set()
        self._last_wait = ""
        self._pauses: dict[int, float] = {}
        """Round epoch -> how long its spouts stood paused (the latest round this
        negotiator moved from SpoutsPaused to Flowing), for the committed record."""
        self.leader_since: float | None = None
        """When this negotiator last became leader (None while standby)."""
        self.reconnected_at = 0.0
        """When the ZooKeeper connection last came back (a ZooKeeper outage ended): every
        wait starts over then, as at a takeover."""
        self.wait_ended_at = 0.0
        """When the processors last stopped reporting an outage they wait out (every wait
        starts over then: the deadline renewed during the outage may be nearly spent)."""
        self._waits = False

    # ----------------------------------------------------------------- lifecycle

    @property
    def is_leader(self) -> bool:
        return self._leading

    def stop(self) -> None:
        """Ask :meth:`run` to return (from any thread or a signal handler)."""
        self._stopping.set()
        self._wake.set()
        lock = self._lock
        if lock is not None:
            lock.cancel()

    def run(self) -> None:
        """Contend for leadership and lead until :meth:`stop`; standby meanwhile."""
        self.client.add_listener(self._on_connection)
        try:
            while not self._stopping.is_set():
                try:
                    ensure_paths(self.client, self.paths.directories())
                    self._contend_and_lead()
                except _TRANSIENT as exc:
                    log.warning("ZooKeeper connection problem (%s); retrying", exc)
                    self._wait_for_connection()
        finally:
            self.client.remove_listener(self._on_connection)

    def _contend_and_lead(self) -> None:
        lock = self.client.Lock(self.paths.election, self.identifier)
        self._lock = lock
        try:
            log.info("%s: standing by for leadership of %s", self.identifier,
                     self.paths.root)
            try:
                if self._stopping.is_set() or not lock.acquire():
                    return
            except CancelledError:
                return
            node = f"{lock.path}/{lock.node}"
            self._leading = True
            self.leader_since = self.clock()
            self._noted.clear()
            self._last_wait = ""
            log.info("%s: leading %s (election node %s)", self.identifier,
                     self.paths.root, node)
            self._leadership_changed(True)
            self._lead(node)
        finally:
            was_leading = self.leader_since is not None
            self._leading = False
            self.leader_since = None
            if was_leading:
                self._leadership_changed(False)
            self._lock = None
            if not self._stopping.is_set():
                log.warning("%s: no longer leading", self.identifier)
            with contextlib.suppress(KazooException):
                lock.release()

    def _leadership_changed(self, leading: bool) -> None:
        """Tell the metrics and the ``on_leadership`` hook (their failures are only logged)."""
        try:
            if self.metrics is not None:
                self.metrics.leader.set(1 if leading else 0)
            if self.on_leadership is not None:
                self.on_leadership(leading)
        except Exception:  # broad: the user's on_leadership hook; only logged
            log.warning("leadership hook failed", exc_info=True)

    def _on_connection(self, state: str) -> None:
        if state == KazooState.LOST:
            self._leading = False
        elif state == KazooState.CONNECTED:
            self.reconnected_at = self.clock()
        self._wake.set()

    def _wait_for_connection(self) -> None:
        """Sleep until kazoo reconnects (the connection listener wakes us)."""
        while not self._stopping.is_set() and not self.client.connected:
            self._wake.wait(30.0)
            self._wake.clear()

    # ----------------------------------------------------------------- leading

    def _lead(self, node: str) -> None:
        first = True
        while self._leading and not self._stopping.is_set():
            self._wake.clear()
            try:
                if self.client.exists(node, watch=self._watch) is None:
                    log.warning("%s: election node %s is gone: leadership lost",
                                self.identifier, node)
                    self._leading = False
                    break
                obs = self.observe()
            except _TRANSIENT as exc:
                log.warning("read failed (%s); waiting for the connection", exc)
                self._wait_for_connection()
                continue
            if first:
                first = False
                if not isinstance(obs.state, NegotiatorDisconnected):
                    log.info("epoch=%d resuming %s entered %.1fs ago", obs.state.epoch,
                             label(obs.state), obs.view.now - obs.view.entered_at)
            if self.metrics is not None:
                self.metrics.epoch.set(obs.state.epoch)
            decision = step(obs.state, obs.view, self.config)
            self._log_notes(decision)
            if decision.next_state is None:
                if decision.reason != self._last_wait:
                    self._last_wait = decision.reason
                    log.debug("epoch=%d %s: %s", obs.state.epoch, label(obs.state),
                              decision.reason)
                deadline = decision.wake_at if decision.wake_at is not None else (
                    obs.view.now + self.config.initialize_timeout)
                self._wake.wait(max(0.0, deadline - self.clock()))
                continue
            try:
                self._apply(node, obs, decision)
            except _TRANSIENT as exc:
                log.warning("write failed (%s); re-reading", exc)
                self._wait_for_connection()

    def _apply(self, node: str, obs: Observation, decision: Decision) -> bool:
        """Write the decision atomically; False (and re-read later) when anyone moved."""
        new = decision.next_state
        assert new is not None and not isinstance(new, NegotiatorDisconnected)
        now = self.clock()
        record = MasterRecord(new, now, self.identifier, decision.reason)
        txn = self.client.transaction()
        txn.check(node, 0)
        if obs.master_version is None:
            txn.create(self.paths.master, record.to_json())
        else:
            txn.set_data(self.paths.master, record.to_json(), version=obs.master_version)
        scope = None
        # A recovery, not a state renewed or a local recovery that more instances join:
        if isinstance(new, Initialize | Restarting) and new.epoch != obs.state.epoch:
            if obs.state.phase not in START_PHASES:
                view = obs.view
                scope = decision.scope or recovery_scope(
                    obs.state, failed_instances(view.expected or (), view.living),
                    view.expected or (), view.shape, enabled=view.local_recovery)
            recovery = RecoveryRecord(new.epoch, now, label(obs.state), decision.reason,
                                      self.identifier, "" if scope is None else str(scope))
            txn.create(self.paths.recovery_prefix, recovery.to_json(), sequence=True)
        committed = obs.committed
        fallback = decision.fallback
        if fallback is not None and committed is not None and committed.previous is not None:
            # The round before becomes the committed one (its own previous is not kept).
            txn.set_data(self.paths.committed, committed.previous.to_json(),
                         version=obs.committed_version)
        confirms = decision.confirms
        if confirms is not None and committed is not None and committed.epoch == confirms.epoch:
            # A skipped round: the committed one still stands (compare-and-set like a commit).
            txn.set_data(self.paths.committed, committed.confirmed(now).to_json(),
                         version=obs.committed_version)
        if isinstance(obs.state, SpoutsPaused) and isinstance(new, Flowing):
            self._pauses = {obs.state.epoch: now - obs.view.entered_at}
        for commit in decision.commits:
            snapshot_s = now - obs.view.entered_at if isinstance(obs.state, Flowing) \
                and obs.state.epoch == commit.epoch else None
            committed = self._succeed(committed, commit, now, snapshot_s,
                                      self._pauses.get(commit.epoch))
            if obs.committed_version is None:
                txn.create(self.paths.committed, committed.to_json())
            else:
                txn.set_data(self.paths.committed, committed.to_json(),
                             version=obs.committed_version)
        results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            if election_lost(results):
                log.warning("%s: election node %s is gone: leadership lost",
                            self.identifier, node)
                self._leading = False
            else:
                cause = next(r for r in failures if not isinstance(r, RolledBackError))
                log.info("epoch=%d %s: master changed under us (%s); re-reading",
                         obs.state.epoch, label(obs.state), type(cause).__name__)
            return False
        self._noted.clear()
        self._last_wait = ""
        log.log(logging.DEBUG if still_idle(obs.state, new, obs.committed, obs.view.stop)
                else logging.INFO, "%s", describe_transition(obs.state, new, decision.reason))
        if scope is not None:
            log.info("epoch=%d recovery %s", new.epoch, scope)
        if isinstance(new, Initialize):
            self._trim_recoveries()
        if fallback is not None:
            log.error("epoch=%d fell back from committed round %d: %s is corrupt",
                      new.epoch, fallback.epoch, fallback.corrupt)
        if self.metrics is not None:
            self.metrics.transitions.inc()
            if fallback is not None:
                self.metrics.fallbacks.inc()
            self.metrics.rounds_committed.inc(len(decision.commits))
            if confirms is not None:
                self.metrics.rounds_skipped.inc()
            if (isinstance(new, Initialize) and new != obs.state  # a renewed deadline is none
                    and obs.state.phase not in START_PHASES):  # a start is none either
                self.metrics.recoveries.inc()
            if isinstance(obs.state, SpoutsPaused) and isinstance(new, Flowing):
                self.metrics.pause(self._pauses[obs.state.epoch])
            self.metrics.epoch.set(new.epoch)
        for action in decision.actions:
            if isinstance(action, ForgetSnapshots):
                if decision.commits:  # a skipped round's garbage was said at its commit
                    log.info("epoch=%d garbage: snapshots of rounds <= %d except the %d refs "
                             "of the committed record and its previous", new.epoch,
                             action.up_to_epoch, len(action.keep))
                if self.on_forget is not None:
                    self.on_forget(action)
        return True

    def _trim_recoveries(self) -> None:
        """Delete all but the newest :data:`RECOVERIES_KEPT` recovery records (best effort:
        the next recovery trims again)."""
        try:
            children = sorted(self.client.get_children(self.paths.recoveries))
            for child in children[:-RECOVERIES_KEPT]:
                self.client.delete(f"{self.paths.recoveries}/{child}")
        except Exception as exc:  # a trim must never cost the leadership
            log.debug("trimming recovery records failed: %s", exc)

    @staticmethod
    def _succeed(old: CommittedRecord | None, commit: CommitClock, now: float,
                 snapshot_s: float | None, pause_s: float | None) -> CommittedRecord:
        if old is None:
            return CommittedRecord(commit.epoch, dict(commit.clock), dict(commit.snapshots),
                                   now, None, snapshot_s, pause_s, dict(commit.clocks))
        return old.succeeded_by(commit.epoch, commit.clock, commit.snapshots, now,
                                snapshot_s, pause_s, commit.clocks)

    def _log_notes(self, decision: Decision) -> None:
        for action in decision.actions:
            if isinstance(action, Ignored) and (action.subject, action.why) not in self._noted:
                self._noted.add((action.subject, action.why))
                log.warning("ignoring %s: %s", action.subject, action.why)

    # ----------------------------------------------------------------- reading

    def _watch(self, _event: object) -> None:
        self._wake.set()

    def _unreadable(self, subject: str, exc: LayoutError) -> None:
        """Note an unreadable master, committed or expected record once (an unreadable
        report reads as None: the machine ignores it and says so)."""
        why = _UNREADABLE.get(subject)
        if why is not None:
            self._note_once(subject, why.format(exc))

    def observe(self) -> Observation:
        """Re-read everything the machine looks at (arming watches on all of it)."""
        read = self.records.read_view(self._watch)
        now = self.clock()
        epochs = [0]

        master_read = read.master
        master = master_read.record
        if master is not None:
            epochs.append(master.state.epoch)

        committed_read = read.committed
        committed = committed_read.record
        if committed is not None:
            epochs.append(committed.epoch)

        expected_record = read.expected
        expected = None if expected_record is None else frozenset(expected_record.processors)

        living = read.reports
        epochs += [report.epoch for report in living.values() if report is not None]

        snapshots: dict[str, SnapshotReport | None] = {}
        for (bolt, instance), snap in read.snapshot_reports.items():
            # Bolt and sink names are unique in a topology: the node name says which.
            key = f"bolt:{bolt}:{instance}"
            if expected is not None and key not in expected:
                sink_key = f"sink:{bolt}:{instance}"
                key = sink_key if sink_key in expected else key
            snapshots[key] = snap
            if snap is not None:
                epochs.append(snap.epoch)

        highest = max(epochs)
        state: MasterState
        if master is None:
            state, entered_at = NegotiatorDisconnected(highest), now
        else:
            state, entered_at = master.state, master.entered_at
        stop = read.stop
        graph = expected_record.graph if expected_record is not None else None
        view = View(now, entered_at, expected, living, snapshots, committed, highest, stop,
                    inputs_of_graph(graph),
                    expected_record.attempt if expected_record else None,
                    Shape.of_graph(graph),
                    expected_record is not None and expected_record.local_recovery)
        waits = master is not None and waiting_in(view, state.epoch) is not None
        if self._waits and not waits:  # an outage ended: every wait gets its whole time
            self.wait_ended_at = now
        self._waits = waits
        if master is not None:
            # Waits restart at a takeover (an earlier leader's clock may be skewed), when
            # ZooKeeper answers again after an outage (nobody could report meanwhile) and
            # when no processor waits out an outage any more.
            view = replace(view, entered_at=deadline_origin(
                master.entered_at, self.leader_since, self.reconnected_at, self.wait_ended_at))
        return Observation(state, master_read.version, committed, committed_read.version, view)

    def _note_once(self, subject: str, why: str) -> None:
        if (subject, why) not in self._noted:
            self._noted.add((subject, why))
            log.warning("%s: %s", subject, why)
