"""The ZooKeeper layout of a topology and the JSON records stored in it.

Everything lives under ``/hailstorm/<topology>/``::

    master                      JSON MasterRecord   persistent, written only by the leading
                                                    negotiator, compare-and-set on its version
    expected                    JSON ExpectedRecord persistent, written by the driver
                                                    (``hailstorm run``): the processor ids
    committed                   JSON CommittedRecord persistent, written by the negotiator in
                                                    the same transaction as the master state
    living/<processor id>       JSON ProcessorReport EPHEMERAL, created and updated only by
                                                    that processor (its liveness + answers)
    snapshots/<bolt>/<instance> JSON SnapshotReport persistent, written by a bolt instance
                                                    once its snapshot for a round is durable
    election/                   kazoo Lock/Election contenders (ephemeral sequential nodes)
    recoveries/r-<sequence>     JSON RecoveryRecord persistent, created by the negotiator in
                                                    the same transaction as every move to
                                                    Initialize (the last RECOVERIES_KEPT)
    stop                        JSON StopRequest    persistent, written by ``hailstorm stop``
                                                    or a signalled ``hailstorm run``; deleted
                                                    by the next ``hailstorm run``

Processor ids (also the ``living`` node names)::

    spout:<spout name>:<topic>:<partition>   one spout instance per source partition
    bolt:<bolt name>:<instance>
    sink:<sink name>:<instance>

Component names and topics must match ``[A-Za-z0-9._-]+`` (Kafka's topic alphabet), so ``:``
is an unambiguous separator and every id is a legal znode name.

All of this is pure (no I/O): processors, the driver and the negotiator share it;
:class:`~hailstorm.protocol.records.TopologyRecords` reads and writes it on ZooKeeper.
See ``docs/negotiator.md`` for the protocol.

Size: over 600 lines because it is the one definition of the layout drawn above: the ids,
the paths and each node's record (with its JSON form both ways) are kept together.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hailstorm.errors import ProtocolError
from hailstorm.protocol.clock import Clock, Partition, clock_from_json, clock_to_json
from hailstorm.protocol.states import (
    Flowing,
    Initialize,
    MasterState,
    NegotiatorDisconnected,
    Replaying,
    Restarting,
    SpoutsPaused,
    SpoutsRewind,
    Stopped,
)

__all__ = [
    "ATTEMPT_INFO",
    "ROOT",
    "CommittedRecord",
    "ExpectedRecord",
    "Flowing",
    "Initialize",
    "LayoutError",
    "MasterRecord",
    "MasterState",
    "NegotiatorDisconnected",
    "NegotiatorRecord",
    "ProcessorId",
    "ProcessorReport",
    "ProcessorState",
    "RecoveryRecord",
    "Role",
    "SnapshotReport",
    "SpoutsPaused",
    "SpoutsRewind",
    "StopRequest",
    "Stopped",
    "TopologyPaths",
    "decode",
    "encode",
    "expected_processor_ids",
    "is_garbage",
    "parse_processor_id",
]

ROOT = "/hailstorm"
"""Parent of every topology's subtree."""

_NAME = re.compile(r"^[A-Za-z0-9._-]+\Z")


class LayoutError(ProtocolError, ValueError):
    """A malformed id, path component or record."""


def _check_name(kind: str, name: str) -> str:
    if not _NAME.match(name):
        raise LayoutError(f"{kind} {name!r} must match [A-Za-z0-9._-]+")
    return name


# --------------------------------------------------------------------------- ids


class Role(enum.StrEnum):
    """What a processor is."""

    SPOUT = "spout"
    BOLT = "bolt"
    SINK = "sink"


@dataclass(frozen=True, order=True)
class ProcessorId:
    """A processor instance: a spout reading one partition, or a bolt/sink instance.

    For spouts ``partition`` is the source partition and ``instance`` is the partition number;
    for bolts and sinks ``partition`` is None.
    """

    role: Role
    name: str
    instance: int
    topic: str | None = None

    def __post_init__(self) -> None:
        _check_name("component name", self.name)
        if self.instance < 0:
            raise LayoutError(f"instance must be >= 0, not {self.instance}")
        if (self.role is Role.SPOUT) != (self.topic is not None):
            raise LayoutError("a spout id needs a topic; bolt and sink ids have none")
        if self.topic is not None:
            _check_name("topic", self.topic)

    @classmethod
    def spout(cls, name: str, partition: Partition) -> ProcessorId:
        topic, number = partition
        return cls(Role.SPOUT, name, number, topic)

    @classmethod
    def bolt(cls, name: str, instance: int) -> ProcessorId:
        return cls(Role.BOLT, name, instance)

    @classmethod
    def sink(cls, name: str, instance: int) -> ProcessorId:
        return cls(Role.SINK, name, instance)

    @property
    def partition(self) -> Partition | None:
        """The source partition of a spout (None for bolts and sinks)."""
        return None if self.topic is None else (self.topic, self.instance)

    def __str__(self) -> str:
        if self.topic is not None:
            return f"{self.role}:{self.name}:{self.topic}:{self.instance}"
        return f"{self.role}:{self.name}:{self.instance}"


def parse_processor_id(text: str) -> ProcessorId:
    """Inverse of ``str(ProcessorId)``; raises :class:`LayoutError` on anything else."""
    parts = text.split(":")
    try:
        role = Role(parts[0])
        if role is Role.SPOUT and len(parts) == 4:
            return ProcessorId(role, parts[1], _index(parts[3]), parts[2])
        if role is not Role.SPOUT and len(parts) == 3:
            return ProcessorId(role, parts[1], _index(parts[2]))
    except ValueError as exc:
        raise LayoutError(f"not a processor id: {text!r} ({exc})") from None
    raise LayoutError(f"not a processor id: {text!r}")


def processor_label(processor: str) -> str:
    """How a processor id is shown to people: a spout named after its topic says the name
    once (``spout:clicks:0`` for ``spout:clicks:clicks:0``); other ids as they are. The id
    itself keeps both (it names ZooKeeper nodes, stream times and dead-letter progress)."""
    parts = processor.split(":")
    if len(parts) == 4 and parts[0] == Role.SPOUT.value and parts[1] == parts[2]:
        return f"{parts[0]}:{parts[1]}:{parts[3]}"
    return processor


def _index(text: str) -> int:
    if not text.isdigit():
        raise LayoutError(f"bad instance number {text!r}")
    return int(text)


def expected_processor_ids(
    spouts: Mapping[str, Iterable[Partition]],
    bolts: Mapping[str, int],
    sinks: Mapping[str, int],
) -> list[str]:
    """All processor ids of a deployment, sorted.

    ``spouts`` maps each spout to the source partitions it reads (one instance each),
    ``bolts`` and ``sinks`` map each component to its parallelism.
    """
    ids = [str(ProcessorId.spout(n, p)) for n, parts in spouts.items() for p in parts]
    ids += [str(ProcessorId.bolt(n, i)) for n, k in bolts.items() for i in range(k)]
    ids += [str(ProcessorId.sink(n, i)) for n, k in sinks.items() for i in range(k)]
    return sorted(ids)


# --------------------------------------------------------------------------- paths


@dataclass(frozen=True)
class TopologyPaths:
    """The znode paths of one topology."""

    topology: str

    def __post_init__(self) -> None:
        _check_name("topology name", self.topology)

    @property
    def root(self) -> str:
        return f"{ROOT}/{self.topology}"

    @property
    def master(self) -> str:
        return f"{self.root}/master"

    @property
    def expected(self) -> str:
        return f"{self.root}/expected"

    @property
    def committed(self) -> str:
        return f"{self.root}/committed"

    @property
    def living(self) -> str:
        return f"{self.root}/living"

    @property
    def snapshots(self) -> str:
        return f"{self.root}/snapshots"

    @property
    def election(self) -> str:
        return f"{self.root}/election"

    @property
    def negotiators(self) -> str:
        return f"{self.root}/negotiators"

    @property
    def recoveries(self) -> str:
        return f"{self.root}/recoveries"

    @property
    def stop(self) -> str:
        return f"{self.root}/stop"

    @property
    def recovery_prefix(self) -> str:
        """Prefix of the sequential ``recoveries/r-<sequence>`` nodes."""
        return f"{self.recoveries}/r-"

    def negotiator_node(self, identifier: str) -> str:
        """``negotiators/<id>``: a negotiator's ephemeral :class:`NegotiatorRecord` (characters
        of the id outside ``[A-Za-z0-9._:-]``, e.g. ``/``, become ``_``)."""
        name = re.sub(r"[^A-Za-z0-9._:-]", "_", identifier)
        name = "_" if name in ("", ".", "..") else name
        return f"{self.negotiators}/{name}"

    def living_node(self, processor: str | ProcessorId) -> str:
        """``living/<id>``: the processor's ephemeral report node."""
        return f"{self.living}/{_as_id(processor)}"

    def snapshot_node(self, bolt_instance: str | ProcessorId) -> str:
        """``snapshots/<name>/<instance>``: a bolt's latest durable snapshot, or the round a
        sink last committed its table through (names are unique across bolts and sinks)."""
        pid = _as_id(bolt_instance)
        if pid.role not in (Role.BOLT, Role.SINK):
            raise LayoutError(f"only bolts and sinks report saved rounds, not {pid}")
        return f"{self.snapshots}/{pid.name}/{pid.instance}"

    @property
    def stream_times(self) -> str:
        return f"{self.root}/stream-times"

    def stream_times_node(self, spout: str | ProcessorId, position: int | None = None) -> str:
        """``stream-times/<spout id>[/<position>]``: a spout's stream times (for bolts
        declaring ``late=``) through ``position``, one node per position a round paused
        it at (see :mod:`hailstorm.lateness`)."""
        pid = _as_id(spout)
        if pid.role is not Role.SPOUT:
            raise LayoutError(f"only spouts keep stream times, not {pid}")
        parent = f"{self.stream_times}/{pid}"
        return parent if position is None else f"{parent}/{position:020d}"

    def snapshot_dir(self, bolt: str) -> str:
        return f"{self.snapshots}/{_check_name('bolt name', bolt)}"

    def directories(self) -> tuple[str, ...]:
        """Persistent parents everybody may ``ensure_path`` before use."""
        return (self.living, self.snapshots, self.election, self.negotiators, self.recoveries)


def _as_id(processor: str | ProcessorId) -> ProcessorId:
    return processor if isinstance(processor, ProcessorId) else parse_processor_id(processor)


# --------------------------------------------------------------------------- records


def encode(data: Mapping[str, Any]) -> bytes:
    """Compact, key-sorted UTF-8 JSON (what every znode holds)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def decode(raw: bytes | None) -> dict[str, Any]:
    """Parse a znode's JSON object; :class:`LayoutError` when it is not one."""
    try:
        data = json.loads((raw or b"").decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise LayoutError("not a JSON object")
    return data


def _clock_or_none(data: Any) -> Clock | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise LayoutError(f"not a clock: {data!r}")
    return clock_from_json(data)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _json_clock_or_none(clock: Mapping[Partition, int] | None) -> dict[str, int] | None:
    return None if clock is None else clock_to_json(clock)


def _load(cls_name: str, raw: bytes | Mapping[str, Any], build: Any) -> Any:
    data = raw if isinstance(raw, Mapping) else decode(raw)
    try:
        return build(data)
    except LayoutError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise LayoutError(f"bad {cls_name}: {exc!r}") from None


_STATE_NAMES = {
    "Initialize": Initialize,
    "SpoutsRewind": SpoutsRewind,
    "SpoutsPaused": SpoutsPaused,
    "Flowing": Flowing,
    "Stopped": Stopped,
    "Restarting": Restarting,
    "Replaying": Replaying,
}

RecordedState = (Initialize | SpoutsRewind | SpoutsPaused | Flowing | Stopped | Restarting
                 | Replaying)
"""A master state the ``master`` znode holds (every one but NegotiatorDisconnected)."""


@dataclass(frozen=True)
class MasterRecord:
    """The ``master`` znode: the state plus when and why it was entered, and by whom."""

    state: RecordedState
    entered_at: float
    leader: str = ""
    reason: str = ""

    def to_json(self) -> bytes:
        clock = getattr(self.state, "clock", None)
        return encode(
            {
                "state": type(self.state).__name__,
                "epoch": self.state.epoch,
                "clock": _json_clock_or_none(clock),
                "entered_at": self.entered_at,
                "leader": self.leader,
                "reason": self.reason,
                **({"by": self.state.by} if isinstance(self.state, Stopped) else {}),
                **_catch_up_json(self.state),
                **({"barrier": self.state.barrier}
                   if isinstance(self.state, SpoutsPaused) else {}),
                **({"run": self.state.run, "instances": list(self.state.instances)}
                   if isinstance(self.state, Restarting | Replaying) else {}),
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> MasterRecord:
        def build(d: Mapping[str, Any]) -> MasterRecord:
            kind = _STATE_NAMES.get(d["state"])
            epoch = int(d["epoch"])
            clock = _clock_or_none(d.get("clock"))
            backfill = _clock_or_none(d.get("backfill"))
            catching_up = frozenset(map(str, d.get("catching_up") or ()))
            state: RecordedState
            if kind is Flowing:
                state = Flowing(epoch, clock, backfill, catching_up)
            elif kind is SpoutsRewind:
                if clock is None:
                    raise LayoutError("SpoutsRewind without a clock")
                state = SpoutsRewind(epoch, clock, backfill, catching_up)
            elif kind is Stopped:
                state = Stopped(epoch, clock or {}, str(d.get("by", "")))
            elif kind is SpoutsPaused:
                state = SpoutsPaused(epoch, catching_up, bool(d.get("barrier", False)))
            elif kind is Initialize:
                state = Initialize(epoch)
            elif kind is Restarting or kind is Replaying:
                instances = d["instances"]
                if not isinstance(instances, list) or not instances:
                    raise LayoutError(f"{d['state']} without the instances it restarts")
                state = kind(epoch, int(d["run"]), tuple(map(str, instances)), clock or {})
            else:
                raise LayoutError(f"unknown master state {d['state']!r}")
            return cls(state, float(d["entered_at"]), str(d.get("leader", "")),
                       str(d.get("reason", "")))

        result: MasterRecord = _load("master record", raw, build)
        return result


def _catch_up_json(state: object) -> dict[str, Any]:
    """A state's nodes catching up and its backfill clock, when it has any (absent from
    the JSON otherwise, as written before catching up existed)."""
    catching_up: frozenset[str] = getattr(state, "catching_up", frozenset())
    backfill = getattr(state, "backfill", None)
    return {**({"catching_up": sorted(catching_up)} if catching_up else {}),
            **({} if backfill is None else {"backfill": clock_to_json(backfill)})}


class ProcessorState(enum.StrEnum):
    """What a processor says it is doing (the ``state`` of its report)."""

    JOINING = "joining"
    """A new incarnation, not part of any run yet: waits for the next Initialize."""
    READY = "ready"
    """Initialize(e) answered: registered, bolts loaded their snapshot (``loaded``)."""
    REWOUND = "rewound"
    """SpoutsRewind(e, C) answered by a spout: seeked to C[p] + 1, ``position`` = C[p]."""
    PAUSED = "paused"
    """SpoutsPaused(e) answered by a spout: stopped, ``position`` = last emitted offset."""
    FLOWING = "flowing"
    """Informational: a spout resumed emitting (not required by the negotiator)."""
    BEHIND = "behind"
    """A flowing spout is reading a backlog: a fetch came back full. A round falling due
    meanwhile waits a little for it to catch up
    (``hailstorm.negotiator.cadence.BEHIND_WAIT_SHARE``)."""
    CAUGHT_UP = "caught-up"
    """A flowing spout read a backlog to the partition's end since the last round paused
    it. When a spout reports it for this epoch and none reports ``behind``, the negotiator
    starts the next round early (``hailstorm.negotiator.cadence.early_round_due``), so the
    backlog's results commit without waiting for the interval."""


ATTEMPT_INFO = "attempt"
"""The key of a report's ``info`` naming the driver's stage attempt the processor runs in:
the driver writes a new one to ``expected`` before every attempt, so the reports a killed
attempt's processors leave behind (their sessions outlive them by the session timeout) are
not taken for the new attempt's."""


@dataclass(frozen=True)
class ProcessorReport:
    """The data of a ``living/<id>`` node, written by that processor.

    ``epoch`` is the epoch of the master state this report answers. ``position`` (spouts):
    offset of the last message emitted, per partition (-1: none). ``loaded`` (bolts): clock of
    the snapshot loaded in this run ({} when none). ``error``: set when the processor failed
    fatally (it should then exit; the negotiator restarts the topology). ``corrupt`` (bolts,
    with ``error``): the ref of a committed snapshot that failed its checks when loaded: the
    negotiator then falls back to the previous committed round. ``waiting``: set while the
    processor waits out an outage of a service it needs ("the database at ...,
    unavailable since T"): it is alive and will go on by itself, so the negotiator's waits
    do not time out meanwhile. ``lost_peer`` (with ``error``): the processor whose
    data-plane connection with this one broke, which the negotiator names as the one that
    failed (it noticed first, through its connection, long before its session expires).
    ``backfill`` (spouts, while nodes catch up): the position of the partition's
    backfill cursor (the live one's once it joined it). ``swept_after`` (bolts routing late
    data): the round of the last snapshot this bolt handed out before its sweep of closed
    windows dropped something no snapshot holds, with nothing read since: a round at an
    unchanged clock must still be taken to save it (``hailstorm.negotiator.cadence``).
    ``run``: the epoch of the ``Initialize`` whose run this incarnation joined (None before
    it joined, or written by an older processor): a local recovery's restarted instances
    join that run. ``replayed`` (spouts, in a local recovery's ``Replaying(e)``): the
    restarted instances this spout's replay reached its live position for. ``detached``:
    peers whose data-plane connection broke and that this processor goes on without
    (they restart alone, a local recovery): the negotiator names them as failed, as for
    ``lost_peer``, though this one did not fail.
    """

    processor: str
    state: ProcessorState
    epoch: int
    position: Clock | None = None
    loaded: Clock | None = None
    error: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    corrupt: str | None = None
    waiting: str | None = None
    lost_peer: str | None = None
    backfill: Clock | None = None
    swept_after: int | None = None
    run: int | None = None
    replayed: tuple[str, ...] = ()
    detached: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "replayed", tuple(sorted(set(self.replayed))))
        object.__setattr__(self, "detached", tuple(sorted(set(self.detached))))

    @property
    def role(self) -> Role:
        return parse_processor_id(self.processor).role

    @property
    def attempt(self) -> str | None:
        """The driver's stage attempt this processor runs in (``info``; None: not said)."""
        value = self.info.get(ATTEMPT_INFO)
        return value if isinstance(value, str) else None

    def of_attempt(self, attempt: str | None) -> bool:
        """Whether this report counts in stage attempt ``attempt`` (None: any counts)."""
        return attempt is None or self.attempt == attempt

    def to_json(self) -> bytes:
        return encode(
            {
                "processor": self.processor,
                "role": str(parse_processor_id(self.processor).role),
                "state": str(self.state),
                "epoch": self.epoch,
                "position": _json_clock_or_none(self.position),
                "loaded": _json_clock_or_none(self.loaded),
                "error": self.error,
                "info": dict(self.info),
                **({} if self.corrupt is None else {"corrupt": self.corrupt}),
                **({} if self.waiting is None else {"waiting": self.waiting}),
                **({} if self.lost_peer is None else {"lost_peer": self.lost_peer}),
                **({} if self.backfill is None else {"backfill": clock_to_json(self.backfill)}),
                **({} if self.swept_after is None else {"swept_after": self.swept_after}),
                **({} if self.run is None else {"run": self.run}),
                **({"replayed": list(self.replayed)} if self.replayed else {}),
                **({"detached": list(self.detached)} if self.detached else {}),
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> ProcessorReport:
        def build(d: Mapping[str, Any]) -> ProcessorReport:
            pid = parse_processor_id(str(d["processor"]))
            if "role" in d and d["role"] != str(pid.role):
                raise LayoutError(f"role {d['role']!r} does not match id {pid}")
            error = d.get("error")
            corrupt = d.get("corrupt")
            waiting = d.get("waiting")
            lost_peer = d.get("lost_peer")
            swept_after = d.get("swept_after")
            run = d.get("run")
            replayed = d.get("replayed") or ()
            detached = d.get("detached") or ()
            for name, value in (("replayed", replayed), ("detached", detached)):
                if not isinstance(value, list | tuple):
                    raise LayoutError(f"{name} is not a list: {value!r}")
            return cls(
                str(pid),
                ProcessorState(d["state"]),
                int(d["epoch"]),
                _clock_or_none(d.get("position")),
                _clock_or_none(d.get("loaded")),
                None if error is None else str(error),
                dict(d.get("info") or {}),
                None if corrupt is None else str(corrupt),
                None if waiting is None else str(waiting),
                None if lost_peer is None else str(lost_peer),
                _clock_or_none(d.get("backfill")),
                None if swept_after is None else int(swept_after),
                None if run is None else int(run),
                tuple(map(str, replayed)),
                tuple(map(str, detached)),
            )

        result: ProcessorReport = _load("processor report", raw, build)
        return result


@dataclass(frozen=True)
class SnapshotReport:
    """The data of ``snapshots/<bolt>/<instance>``: a durable snapshot of state A.

    Written by the bolt instance only after the snapshot behind ``ref`` (e.g. an Avro file
    URI) is durable; ``epoch`` and ``clock`` are those of the Flowing(epoch, clock) round.
    """

    processor: str
    epoch: int
    clock: Clock
    ref: str

    def to_json(self) -> bytes:
        return encode(
            {
                "processor": self.processor,
                "epoch": self.epoch,
                "clock": clock_to_json(self.clock),
                "ref": self.ref,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> SnapshotReport:
        def build(d: Mapping[str, Any]) -> SnapshotReport:
            pid = parse_processor_id(str(d["processor"]))
            if pid.role not in (Role.BOLT, Role.SINK):
                raise LayoutError(f"snapshot report from {pid}, neither a bolt nor a sink")
            clock = _clock_or_none(d["clock"])
            if clock is None:
                raise LayoutError("snapshot report without a clock")
            return cls(str(pid), int(d["epoch"]), clock, str(d["ref"]))

        result: SnapshotReport = _load("snapshot report", raw, build)
        return result


@dataclass(frozen=True)
class CommittedRecord:
    """The ``committed`` znode: the last round at which every bolt instance had a durable
    snapshot, with each instance's snapshot ref, and the record it replaced (``previous``,
    kept one level deep: its own ``previous`` is dropped).

    ``snapshot_s``: from the round's clock being set (``Flowing(e, C)``) to this commit;
    ``pause_s``: how long the round's clock took to fix (``SpoutsPaused(e)`` to
    ``Flowing(e, C)``; the spouts stood paused that long unless the round was a barrier);
    None where the committing negotiator did not see that transition (it took over during
    the round).

    ``clocks``: the bolts and sinks *catching up* (docs/upgrading.md), each at its own
    clock (below ``clock`` somewhere); every other node is at ``clock``
    (:meth:`clock_of`).

    ``confirmed_at``: the last time a snapshot round found the spouts paused at this
    round's clock (nothing read since it) and was skipped, so that the round still stood
    then (None: no round was skipped since this one committed; see :attr:`standing_at`)."""

    epoch: int
    clock: Clock
    snapshots: Mapping[str, str]
    committed_at: float = 0.0
    previous: CommittedRecord | None = None
    snapshot_s: float | None = None
    pause_s: float | None = None
    clocks: Mapping[str, Clock] = field(default_factory=dict)
    confirmed_at: float | None = None

    @property
    def standing_at(self) -> float:
        """The last time this round was known to hold everything read: its commit, or the
        latest skipped round that confirmed it."""
        return max(self.committed_at, self.confirmed_at or 0.0)

    def confirmed(self, at: float) -> CommittedRecord:
        """This record, confirmed at ``at`` by a skipped round."""
        return replace(self, confirmed_at=at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "clock": clock_to_json(self.clock),
            "snapshots": dict(sorted(self.snapshots.items())),
            "committed_at": self.committed_at,
            "previous": None if self.previous is None else self.previous.to_dict(),
            "snapshot_s": self.snapshot_s,
            "pause_s": self.pause_s,
            **({"clocks": {n: clock_to_json(c) for n, c in sorted(self.clocks.items())}}
               if self.clocks else {}),
            **({"confirmed_at": self.confirmed_at} if self.confirmed_at is not None else {}),
        }

    def to_json(self) -> bytes:
        return encode(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> CommittedRecord:
        def build(d: Mapping[str, Any]) -> CommittedRecord:
            clock = _clock_or_none(d["clock"])
            if clock is None:
                raise LayoutError("committed record without a clock")
            prev = d.get("previous")
            return cls(
                int(d["epoch"]),
                clock,
                {str(k): str(v) for k, v in dict(d["snapshots"]).items()},
                float(d.get("committed_at", 0.0)),
                None if prev is None else CommittedRecord.from_json(prev),
                _float_or_none(d.get("snapshot_s")),
                _float_or_none(d.get("pause_s")),
                {str(n): clock_from_json(c) for n, c in dict(d.get("clocks") or {}).items()},
                _float_or_none(d.get("confirmed_at")),
            )

        result: CommittedRecord = _load("committed record", raw, build)
        return result

    def succeeded_by(
        self, epoch: int, clock: Mapping[Partition, int], snapshots: Mapping[str, str],
        committed_at: float, snapshot_s: float | None = None, pause_s: float | None = None,
        clocks: Mapping[str, Mapping[Partition, int]] | None = None,
    ) -> CommittedRecord:
        """The record that commits a newer round and keeps this one as ``previous``."""
        keep = replace(self, previous=None, confirmed_at=None)
        return CommittedRecord(epoch, dict(clock), dict(snapshots), committed_at, keep,
                               snapshot_s, pause_s,
                               {n: dict(c) for n, c in (clocks or {}).items()})

    def clock_of(self, node: str) -> Clock:
        """What bolt or sink ``node``'s committed state includes: its own clock while it
        catches up, else the round's."""
        return dict(self.clocks.get(node, self.clock))

    def bolts_held(self) -> frozenset[str]:
        """The bolts whose state this round holds (each has a snapshot in it)."""
        return frozenset(p.name for pid in self.snapshots
                         if (p := parse_processor_id(pid)).role is Role.BOLT)

    def live_refs(self) -> frozenset[str]:
        """Snapshot refs still needed: this round's and the previous committed round's."""
        refs = set(self.snapshots.values())
        if self.previous is not None:
            refs |= set(self.previous.snapshots.values())
        return frozenset(refs)

    def snapshot_for(self, bolt_instance: str) -> str | None:
        """The ref a (re)starting bolt instance loads (None: start from the empty state)."""
        return self.snapshots.get(bolt_instance)


def is_garbage(committed: CommittedRecord | None, epoch: int, ref: str) -> bool:
    """True when a snapshot written in round ``epoch`` under ``ref`` may be deleted.

    A snapshot is garbage once a newer round committed and neither the committed record nor
    its ``previous`` references it. Snapshots of rounds newer than the committed one may
    belong to a round still in progress and are never garbage.
    """
    if committed is None or epoch > committed.epoch:
        return False
    return ref not in committed.live_refs()


@dataclass(frozen=True)
class ExpectedRecord:
    """The ``expected`` znode, written by the driver: every processor id of the deployment.

    The negotiator waits for exactly these in Initialize; the spout ids also define the
    source partitions (the domain of every clock). ``graph`` is the topology's DAG as
    :func:`hailstorm.topology.graph_of` gives it, for the web console; ``nodes`` each node's
    description (:class:`hailstorm.upgrade.describe.NodeDescription` as JSON), for the
    plan of the next upgrade (both absent in records of older drivers). ``attempt`` names
    the driver's current stage attempt (:data:`ATTEMPT_INFO`): a processor's report counts
    only when it carries the same (None: every report counts). ``local_recovery``: a failed
    instance that can restart alone does (:mod:`hailstorm.protocol.alone`), the negotiator
    and every processor following the run's choice.
    """

    processors: tuple[str, ...]
    graph: Mapping[str, Any] | None = field(default=None, compare=False)
    nodes: Mapping[str, Any] | None = field(default=None, compare=False)
    attempt: str | None = field(default=None, compare=False)
    local_recovery: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        for text in self.processors:
            parse_processor_id(text)
        object.__setattr__(self, "processors", tuple(sorted(set(self.processors))))

    @property
    def partitions(self) -> frozenset[Partition]:
        return frozenset(
            p for p in (parse_processor_id(t).partition for t in self.processors) if p
        )

    def to_json(self) -> bytes:
        data: dict[str, Any] = {"processors": list(self.processors)}
        if self.graph is not None:
            data["graph"] = dict(self.graph)
        if self.nodes is not None:
            data["nodes"] = dict(self.nodes)
        if self.attempt is not None:
            data["attempt"] = self.attempt
        if self.local_recovery:
            data["local_recovery"] = True
        return encode(data)

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> ExpectedRecord:
        def build(d: Mapping[str, Any]) -> ExpectedRecord:
            procs = d["processors"]
            if not isinstance(procs, list):
                raise LayoutError("'processors' must be a list")
            graph = d.get("graph")
            if graph is not None and not isinstance(graph, dict):
                raise LayoutError("'graph' must be an object")
            nodes = d.get("nodes")
            if nodes is not None and not isinstance(nodes, dict):
                raise LayoutError("'nodes' must be an object")
            attempt = d.get("attempt")
            if attempt is not None and not isinstance(attempt, str):
                raise LayoutError("'attempt' must be a string")
            local = d.get("local_recovery", False)
            if not isinstance(local, bool):
                raise LayoutError("'local_recovery' must be a boolean")
            return cls(tuple(str(p) for p in procs), graph, nodes, attempt, local)

        result: ExpectedRecord = _load("expected record", raw, build)
        return result


RECOVERIES_KEPT = 200
"""How many recovery records the negotiator keeps (it deletes older ones)."""


@dataclass(frozen=True)
class RecoveryRecord:
    """One move of the master to ``Initialize``: the start of a deployment (from
    ``NegotiatorDisconnected``) or a recovery (a processor lost or failed, a round or a
    restart that timed out), with the reason the negotiator gave. Kept so that operators
    and the kill-test harness can account for every restart."""

    epoch: int
    """The epoch of the ``Initialize`` it entered."""
    at: float
    """When it was written (the negotiator's ``time.time()``)."""
    previous: str
    """The label of the state it left (``NegotiatorDisconnected`` for a first start)."""
    reason: str
    leader: str = ""
    scope: str = ""
    """Whether the recovery restarted everything or could restart the failed instances
    alone, and why (``global: ...``/``local: ...``, see
    :mod:`hailstorm.negotiator.recovery_scope`; empty for a start or an older negotiator)."""

    @property
    def is_start(self) -> bool:
        """A start (of a fresh topology, or a run after a stop), not a recovery."""
        return self.previous.partition("(")[0] in START_LABELS

    def to_json(self) -> bytes:
        return encode({"epoch": self.epoch, "at": self.at, "previous": self.previous,
                       "reason": self.reason, "leader": self.leader,
                       **({"scope": self.scope} if self.scope else {})})

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> RecoveryRecord:
        def build(d: Mapping[str, Any]) -> RecoveryRecord:
            return cls(int(d["epoch"]), float(d["at"]), str(d["previous"]),
                       str(d.get("reason", "")), str(d.get("leader", "")),
                       str(d.get("scope", "")))

        result: RecoveryRecord = _load("recovery record", raw, build)
        return result


START_LABELS = frozenset({NegotiatorDisconnected.__name__, Stopped.__name__})
"""Labels of the states whose move to ``Initialize`` is a start, not a recovery."""


@dataclass(frozen=True)
class StopRequest:
    """The ``stop`` node: ``by`` asked the topology to stop at ``at`` (``time.time()``). The
    negotiator drains (a last round commits what was read) and records ``Stopped``; the
    next ``hailstorm run`` deletes the node."""

    by: str
    at: float

    def to_json(self) -> bytes:
        return encode({"by": self.by, "at": self.at})

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> StopRequest:
        def build(d: Mapping[str, Any]) -> StopRequest:
            return cls(str(d["by"]), float(d["at"]))

        result: StopRequest = _load("stop request", raw, build)
        return result


@dataclass(frozen=True)
class NegotiatorRecord:
    """The data of ``negotiators/<id>`` (ephemeral, written by that negotiator): where its
    metrics are served and whether it leads (informational: the election decides)."""

    identifier: str
    host: str
    metrics: int | None
    leader: bool

    def to_json(self) -> bytes:
        return encode({"id": self.identifier, "host": self.host, "metrics": self.metrics,
                       "leader": self.leader})

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> NegotiatorRecord:
        def build(d: Mapping[str, Any]) -> NegotiatorRecord:
            metrics = d.get("metrics")
            return cls(str(d.get("id", "")), str(d["host"]),
                       None if metrics is None else int(metrics), bool(d.get("leader")))

        result: NegotiatorRecord = _load("negotiator record", raw, build)
        return result
