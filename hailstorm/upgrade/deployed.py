"""The deployed side of an upgrade, read from ZooKeeper and the snapshots (the thin shell
around :mod:`.plan`): the node descriptions the last driver recorded in ``expected``, each
bolt's stored state from the committed round's snapshot headers; and the record edits a run
performs for its plan (:func:`apply_plan`: committed state follows renames, and is deleted
for dropped bolts and raised versions).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from confluent_kafka import KafkaException
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from hailstorm.errors import ProtocolError
from hailstorm.protocol.clock import Clock, Partition
from hailstorm.protocol.layout import (
    CommittedRecord,
    ProcessorId,
    Role,
    TopologyPaths,
    parse_processor_id,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.sinks.rebuild import rebuild_refusal
from hailstorm.snapshots.format import SnapshotError
from hailstorm.snapshots.store import SnapshotStore
from hailstorm.topology import Topology
from hailstorm.upgrade.describe import NodeDescription, describe_topology
from hailstorm.upgrade.plan import Plan, StoredState, make_plan

__all__ = ["Deployed", "apply_plan", "committed_log_starts", "edit_committed", "plan_for",
           "read_deployed"]

log = logging.getLogger("hailstorm.upgrade")


@dataclass(frozen=True)
class Deployed:
    """What is deployed under a name: the recorded nodes (None: not recorded), each
    bolt's committed state, and what could not be read."""

    nodes: Mapping[str, NodeDescription] | None
    states: Mapping[str, StoredState]
    notes: tuple[str, ...] = ()


def _stored(store: SnapshotStore, locations: list[str]) -> StoredState:
    """The state of one bolt from the first of its committed files whose header reads."""
    problems = []
    for location in locations:
        try:
            ref = store.resolve(location)
            return StoredState(ref.monoid, store.writer_schema(ref), ref.parallelism)
        except (SnapshotError, OSError, ValueError, KeyError) as exc:
            problems.append(f"{location}: {exc}")
    raise LookupError("; ".join(problems))


def read_deployed(client: KazooClient, name: str, store: SnapshotStore) -> Deployed:
    """The deployment of topology ``name``, from its ZooKeeper records and the headers of
    its committed snapshots (one file per bolt is read). A bolt none of whose files reads
    is described as its last driver recorded it (the bolt itself then reports the file,
    and the negotiator falls back a round), with a note."""
    records = TopologyRecords(client, name)
    expected = records.expected()
    nodes = None
    if expected is not None and expected.nodes is not None:
        nodes = {k: NodeDescription.from_json(v) for k, v in expected.nodes.items()}
    committed = records.committed()
    by_bolt: dict[str, list[str]] = {}
    for pid, location in sorted((committed.snapshots if committed else {}).items()):
        processor = parse_processor_id(pid)
        if processor.role is Role.BOLT:
            by_bolt.setdefault(processor.name, []).append(location)
    states: dict[str, StoredState] = {}
    notes: list[str] = []
    for bolt, locations in by_bolt.items():
        try:
            states[bolt] = _stored(store, locations)
        except LookupError as exc:
            known = (nodes or {}).get(bolt)
            if known is not None and known.state is not None:
                states[bolt] = StoredState(known.state, known.schema, known.parallelism or 1)
            notes.append(f"{bolt}: no committed snapshot header could be read ({exc}); "
                         "compared with what its last driver recorded")
    return Deployed(nodes, states, tuple(notes))


def committed_log_starts(client: KazooClient, name: str, topology: Topology,
                         kafka: str) -> dict[Partition, int]:
    """The log start of each source partition of ``topology`` the committed round's clock
    holds (a partition it lacks is read from its log start anyway), asked of Kafka."""
    from hailstorm.kafka import log_starts

    committed = TopologyRecords(client, name).committed()
    topics = {spout.topic for spout in topology.spouts}
    partitions = sorted(p for p in (committed.clock if committed else {}) if p[0] in topics)
    return log_starts(kafka, partitions) if partitions else {}


def plan_for(client: KazooClient, name: str, store: SnapshotStore, topology: Topology,
             allow_drop: Collection[str] = (), kafka: str | None = None,
             rebuild: Collection[str] = ()) -> Plan:
    """The plan of running ``topology`` under ``name`` now; with ``kafka`` (its bootstrap)
    a bolt built from offset 0 is checked against its inputs' log starts; ``rebuild``: the
    sinks whose table the run may rebuild from the committed state."""
    deployed = read_deployed(client, name, store)
    notes = list(deployed.notes)
    starts = None
    if kafka is not None:
        try:
            starts = committed_log_starts(client, name, topology, kafka)
        except KafkaException as exc:
            notes.append(f"the inputs' log starts are unknown ({exc}): lost records are "
                         "not checked")
    committed = TopologyRecords(client, name).committed()
    refusals = {sink.name: refusal for sink in topology.sinks
                if (refusal := rebuild_refusal(topology, sink.name)) is not None}
    plan = make_plan(deployed.nodes, deployed.states, describe_topology(topology), allow_drop,
                     starts, committed.clock if committed is not None else None,
                     rebuild=rebuild, rebuild_refusals=refusals,
                     own_clocks=committed.clocks if committed is not None else None)
    return replace(plan, notes=plan.notes + tuple(notes))


def edit_committed(record: CommittedRecord, renames: Mapping[str, str],
                   discarded: Collection[str]) -> CommittedRecord:
    """``record`` (and its previous round) with bolt instances renamed and discarded
    bolts' snapshots left out. Pure."""

    def edit(snapshots: Mapping[str, str]) -> dict[str, str]:
        edited: dict[str, str] = {}
        for pid, ref in snapshots.items():
            processor = parse_processor_id(pid)
            if processor.role is Role.BOLT and processor.name in discarded:
                continue
            if processor.role is Role.BOLT and processor.name in renames:
                pid = str(ProcessorId.bolt(renames[processor.name], processor.instance))
            edited[pid] = ref
        return edited

    def edit_clocks(clocks: Mapping[str, Clock]) -> dict[str, Clock]:
        """Catching-up nodes' own clocks follow the same renames and drops."""
        return {renames.get(node, node): dict(clock) for node, clock in clocks.items()
                if node not in discarded}

    previous = record.previous
    if previous is not None:
        previous = CommittedRecord(previous.epoch, previous.clock, edit(previous.snapshots),
                                   previous.committed_at, None, previous.snapshot_s,
                                   previous.pause_s, edit_clocks(previous.clocks))
    return CommittedRecord(record.epoch, record.clock, edit(record.snapshots),
                           record.committed_at, previous, record.snapshot_s, record.pause_s,
                           edit_clocks(record.clocks))


def apply_plan(client: KazooClient, name: str, plan: Plan) -> None:
    """Carry out ``plan``'s record edits before the processors start: the committed
    round's snapshots follow renames and forget discarded bolts (a compare-and-set write:
    a commit in between fails the run with the reason), and the saved-round reports of
    those nodes (``snapshots/<name>``) are deleted. Their files go with the negotiator's
    garbage collection."""
    renames, discarded = plan.renames, plan.discarded
    if not renames and not discarded:
        return
    paths = TopologyPaths(name)
    records = TopologyRecords(client, paths)
    read = records.read_committed()
    if read.record is not None and read.version is not None:
        edited = edit_committed(read.record, renames, discarded)
        try:
            client.set(paths.committed, edited.to_json(), version=read.version)
        except BadVersionError:
            raise ProtocolError(f"{name}: a round committed while the upgrade edited the "
                                "committed record; stop the old processors and run again") \
                from None
        log.info("%s: committed round %d edited: renamed %s, discarded %s", name,
                 read.record.epoch, renames or "nothing", sorted(discarded) or "nothing")
    for gone in sorted(set(renames) | set(discarded)):
        with contextlib.suppress(NoNodeError):
            client.delete(f"{paths.snapshots}/{gone}", recursive=True)
