"""A bolt instance's warm standby (issue 42; docs/deployment.md, "Local recovery"): a
process the instance's Spark task forks beside the running incarnation (``hailstorm run
--local-recovery --standby``). It keeps the instance's committed state loaded, round after
round: once whole, then each committed round's delta (the keys that changed,
:meth:`~hailstorm.snapshots.SnapshotStore.load_after`). When the running incarnation ends,
the task promotes the standby (:mod:`hailstorm.runtime.supervisor`): the next incarnation
starts with the committed state in memory instead of reading it, so a local recovery does
not grow with the state. It costs the state's memory once more, and the reading of every
round's delta.

A standby holds state only where it can be used: a bolt that restarts alone in a run with
local recovery (:func:`~hailstorm.protocol.alone.alone_nodes`); elsewhere it holds nothing
and waits all the same. It never writes to ZooKeeper and never serves anything; a failure
in it only loses the head start (promoted, it reads its state as a fresh incarnation
would).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from hailstorm.protocol.alone import alone_nodes
from hailstorm.protocol.layout import CommittedRecord, TopologyPaths, parse_processor_id
from hailstorm.protocol.records import TopologyRecords
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.supervisor import Promotion, read_promotion
from hailstorm.snapshots import SnapshotRef, SnapshotStore, open_store
from hailstorm.topology import BoltSpec, Topology
from hailstorm.zookeeper import zk_client

__all__ = ["Promoted", "WarmState", "stand_by"]

log = logging.getLogger("hailstorm.standby")

POLL = 0.25
"""Seconds between two looks for a change of the committed record (its watch)."""
RETRY = 5.0
"""Seconds before it tries again after it failed to read a committed round."""


class WarmState:
    """The committed state of one bolt instance, kept loaded: the state of :attr:`ref`
    (None: nothing held)."""

    def __init__(self, store: SnapshotStore, spec: BoltSpec, instance: int) -> None:
        self.store = store
        self.spec = spec
        self.instance = instance
        self.ref: SnapshotRef | None = None
        self.state: Any = None

    def own(self, committed: CommittedRecord) -> SnapshotRef | None:
        """This instance's file of ``committed`` when it is state this bolt loads as it is
        (same name, instance, parallelism and monoid: not re-sharded or migrated)."""
        spec = self.spec
        location = committed.snapshots.get(f"bolt:{spec.name}:{self.instance}")
        if location is None:
            return None
        ref = self.store.resolve(location)
        state_of = ref.is_state_of(spec.name, self.instance, spec.parallelism,
                                   spec.state.describe())
        return ref if state_of else None

    def follow(self, committed: CommittedRecord) -> str:
        """Hold the state of ``committed``'s file of this instance (reading only the deltas
        after the one held when it builds on it); say what it read."""
        ref = self.own(committed)
        if ref is None:
            self.drop()
            return "nothing to hold: the committed round has no file of this instance as is"
        if self.ref is not None and ref.key == self.ref.key:
            return "held already"
        held, state = self.ref, self.state
        self.drop()  # a failure below leaves nothing half-read behind
        if held is not None and self.spec.keyed:
            loaded = self.store.load_after(ref, self.spec.state, held, state)
            if loaded is not None:
                self.ref, self.state = ref, loaded[1]
                return f"round {committed.epoch}: the deltas after {held.key}"
        self.ref, self.state = ref, self.store.load(ref, self.spec.state)[1]
        return f"round {committed.epoch}: {ref.key} whole"

    def take(self, ref: SnapshotRef | None) -> Any:
        """The state held when it is ``ref``'s (the caller owns it from now on), else None."""
        if ref is None or self.ref is None or self.ref.key != ref.key:
            return None
        state = self.state
        self.drop()
        return state

    def drop(self) -> None:
        self.ref, self.state = None, None


def _wanted(records: TopologyRecords, name: str) -> bool:
    """Whether this run restarts the bolt ``name`` alone (so a standby can serve it)."""
    expected = records.expected()
    return expected is not None and expected.local_recovery \
        and name in alone_nodes(expected.processors, expected.graph)


Promoted = tuple["WarmState | None", Promotion]
"""What a promoted standby holds (None: nothing, the run has no use for its state), and
its promotion."""


def stand_by(assignment: Assignment, topology: Topology, promote: int) -> Promoted:
    """Keep the committed state of ``assignment``'s bolt instance loaded until the task
    promotes this process (:func:`~hailstorm.runtime.supervisor.read_promotion` on the
    pipe ``promote``). Where the run has no use for a standby, hold nothing and wait all
    the same: promoted, it starts as a fresh incarnation would. Raises :class:`EOFError`
    when the task closes the pipe (it ends the standby)."""
    pid = parse_processor_id(assignment.processor)
    spec = topology.node(pid.name)
    assert isinstance(spec, BoltSpec)
    warm = WarmState(open_store(assignment.snapshots), spec, pid.instance)
    client = zk_client(assignment.zk, assignment.session_timeout)
    client.start(timeout=assignment.io_timeout)
    try:
        records = TopologyRecords(client, TopologyPaths(assignment.name))
        if _wanted(records, pid.name):
            return _follow_until_promoted(warm, records, promote, assignment.processor)
        log.info("no standby state for %s: the run does not restart it alone",
                 assignment.processor)
    finally:
        client.stop()
        client.close()
    promotion = read_promotion(promote)
    assert promotion is not None
    return None, promotion


def _follow_until_promoted(warm: WarmState, records: TopologyRecords, promote: int,
                           name: str) -> Promoted:
    """Follow every committed round after the current one (which the incarnation loads as
    it starts) until promoted."""
    changed = threading.Event()
    first = records.committed()
    changed.set()  # read again, with the watch
    wait = POLL
    while True:
        promotion = read_promotion(promote, wait)
        if promotion is not None:
            return warm, promotion
        if wait == POLL and not changed.is_set():
            continue
        changed.clear()
        wait = POLL
        try:
            committed = records.committed(watch=lambda _event: changed.set())
            if committed is not None and (first is None or committed.epoch > first.epoch):
                held = warm.ref is not None
                log.log(logging.DEBUG if held else logging.INFO, "standby of %s: %s", name,
                        warm.follow(committed))
        except Exception as exc:  # broad: a standby only loses its head start
            warm.drop()  # e.g. a file collected meanwhile, ZooKeeper out: try later
            log.warning("standby of %s holds nothing for now: %s", name, exc)
            wait = RETRY
