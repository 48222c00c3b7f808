"""The kill-test harness: run a topology for real, hurt it, and check it against the model.

A :class:`TopologyRun` deploys one topology on a running stack (ZooKeeper, Kafka, a snapshot
directory): ``negotiators`` negotiator subprocesses (one leads, the others stand by) and the
driver subprocess (``python -m hailstorm run``), logs in ``log_dir``. Every process it
started is stopped by pid on exit, also when the body raised; the Spark Python workers the
driver forked are found through the pids processors report in ZooKeeper.

Workloads are produced with :func:`produce` or a :class:`BackgroundProducer`; both record
exactly what was written (:class:`Produced`: partition -> ``[(offset, value)]``), so
:func:`hailstorm.model.run_model` can be fed the very same messages.

Faults:

* :meth:`TopologyRun.kill_processor` - SIGKILL the Spark Python worker of a processor;
* :meth:`TopologyRun.kill_negotiator_leader` - SIGKILL the leading negotiator (read from the
  master record); a fresh negotiator is started so a standby is there for the next one;
* :meth:`TopologyRun.expire_zk_session` - SIGSTOP a processor until ZooKeeper expired its
  session (its ephemeral ``living`` node is gone, which the server only does after the
  session timeout), then SIGCONT: the processor wakes up with a dead session, as after a
  long GC pause or a network partition;
* :meth:`TopologyRun.kill_broker` - SIGKILL the Kafka node that leads the most partitions of
  the source topic (from the cluster metadata), keep it down a few seconds, then start it
  again on its own data. It needs a :class:`BrokerControl` (a
  :class:`hailstorm.devstack.DevStack` is one) and a cluster of at least
  :data:`MIN_KAFKA_NODES` nodes: killing the only broker is not a recoverable fault.

:class:`ChaosSchedule` plans seeded faults, :meth:`TopologyRun.inject` runs one and
:meth:`TopologyRun.measure_recovery` measures the recovery (time until a master written after
the fault is ``Flowing`` again and until a commit passes the position the topology had
reached before it; for a broker fault, until a commit holds, on every partition, a message
acknowledged only after the kill, and until the node is back), and
:func:`compare_with_model` names lost, duplicated and wrong values. :func:`run_chaos` ties it
all together into a :class:`ChaosReport` (text or JSON), as ``hailstorm chaos`` prints it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar

from confluent_kafka import KafkaException, Producer

from hailstorm import kafka
from hailstorm.devstack import SPARK_MASTER_VAR, pid_alive, stop_pid
from hailstorm.failpoints import FAILPOINTS_DIR_VAR, PAUSE_DIR_VAR, pause_request
from hailstorm.model import Message, ModelResult, run_model
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import (
    CommittedRecord,
    MasterRecord,
    ProcessorReport,
    RecoveryRecord,
    TopologyPaths,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.sinks.urls import is_postgres_url, redact
from hailstorm.snapshots import open_store
from hailstorm.topic import Topic
from hailstorm.topology import SinkSpec, Table, Topology, load_topology
from hailstorm.workloads import KeyedEvents, ZipfText
from hailstorm.zookeeper import zk_client

__all__ = [
    "DEFAULT_FAULT_KINDS",
    "FAULT_KINDS",
    "MASTER_PHASES",
    "MIN_KAFKA_NODES",
    "PRODUCER_SETTINGS",
    "SQLITE",
    "WORKLOADS",
    "BackgroundProducer",
    "BoltStates",
    "BrokerControl",
    "ChaosReport",
    "ChaosSchedule",
    "Comparison",
    "Difference",
    "Fault",
    "FaultKind",
    "HarnessError",
    "MasterPhase",
    "PlannedFault",
    "Produced",
    "Recovery",
    "StackAddresses",
    "TopicLayout",
    "TopologyRun",
    "Workload",
    "broker_fault_problem",
    "busiest_leader",
    "compare_with_model",
    "kafka_nodes",
    "private_database",
    "produce",
    "run_chaos",
    "topic_layout",
    "wait_for",
    "wordcount_lines",
]

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")
FaultKind = Literal["processor", "negotiator", "zk-session", "zombie", "stall", "broker"]
FAULT_KINDS: tuple[FaultKind, ...] = ("processor", "negotiator", "zk-session", "zombie",
                                      "stall", "broker")
"""Every fault kind the harness can inject."""
DEFAULT_FAULT_KINDS: tuple[FaultKind, ...] = ("processor", "negotiator", "zk-session", "zombie",
                                              "stall")
"""What a :class:`ChaosSchedule` draws from unless told: the kinds every stack supports
(``broker`` needs a :class:`BrokerControl` and a cluster of :data:`MIN_KAFKA_NODES`)."""
ZOMBIE_SPARK_CONF = (("spark.python.task.killTimeout", "1h"),)
"""Spark settings of a run with zombie faults: Spark leaves the Python worker of a killed
task alone (as it cannot reach one on a partitioned host), so a stopped sink outlives its
stage and resumes after its replacement ran; the run gets a spare task slot for it."""
MIN_KAFKA_NODES = 3
MasterPhase = Literal["Flowing", "SpoutsPaused", "Initialize", "SpoutsRewind"]
MASTER_PHASES: tuple[MasterPhase, ...] = ("Flowing", "SpoutsPaused", "Initialize", "SpoutsRewind")
"""The master states a fault can be timed to hit. ``SpoutsPaused`` comes with every snapshot
round; ``Initialize`` and ``SpoutsRewind`` only while the topology recovers, so a fault timed
for them follows a *trigger* (a processor kill) that starts a recovery: two faults at once."""
RECOVERY_PHASES: frozenset[str] = frozenset({"Initialize", "SpoutsRewind"})
"""Kafka nodes a broker fault needs: with 3 (replication factor 3, ``min.insync.replicas=2``)
one node can die while every partition keeps a leader and acknowledged writes survive."""


class HarnessError(AssertionError):
    """A bounded wait timed out, or a process the harness started died unexpectedly."""


def wait_for(what: str, predicate: Callable[[], Any], timeout: float,
             alive: Callable[[], None] = lambda: None, poll: float = 0.2) -> Any:
    """Poll ``predicate`` until truthy and return its value; ``alive`` raises on a death."""
    deadline = time.monotonic() + timeout
    while True:
        alive()
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


# ------------------------------------------------------------------------------ workload


@dataclass(frozen=True)
class StackAddresses:
    """Where the stack is: ZooKeeper hosts, Kafka bootstrap, snapshot directory."""

    zk: str
    kafka: str
    snapshots: Path | str
    """A directory, or a URL of another snapshot store (:func:`~hailstorm.snapshots.open_store`)."""
    database: str | None = None
    """The stack's sink database; runs create a database of their own on its server
    (:func:`private_database`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StackAddresses:
        """From ``HAILSTORM_ZK``, ``HAILSTORM_KAFKA``, ``HAILSTORM_SNAPSHOTS`` (and
        ``HAILSTORM_DATABASE_URL``)."""
        snapshots = env["HAILSTORM_SNAPSHOTS"]
        return cls(env["HAILSTORM_ZK"], env["HAILSTORM_KAFKA"],
                   snapshots if "://" in snapshots else Path(snapshots),
                   env.get("HAILSTORM_DATABASE_URL"))


SQLITE: str = "sqlite"
"""``database=`` value of :class:`TopologyRun`: a private SQLite file in the run's log
directory."""


def private_database(stack: StackAddresses, database: str | None, log_dir: Path,
                     run_name: str) -> str:
    """The sink database of a run named ``run_name``.

    ``database`` is a URL (used as it is), :data:`SQLITE` (a new SQLite file in
    ``log_dir``) or None: then a new database named after the run on the stack's
    PostgreSQL server (``stack.database``), or a SQLite file when the stack has no
    PostgreSQL. The new PostgreSQL database stays after the run, for a look at its tables.
    """
    from hailstorm.sinks.db import create_postgres_database

    server = stack.database
    if database is None and server is not None and is_postgres_url(server):
        return create_postgres_database(server, re.sub(r"[^a-z0-9_]", "_",
                                                       f"hs_{run_name}".lower())[:63])
    if database is None or database == SQLITE:
        return f"sqlite:///{(log_dir / 'sinks.sqlite').resolve()}"
    return database


@dataclass
class Produced:
    """Exactly what was written to one topic: partition -> ``[(offset, value)]``."""

    topic: str
    messages: dict[int, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    """``None`` values are tombstones (the model dead-letters them, as spouts do)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _last: dict[int, int] = field(default_factory=dict, repr=False, compare=False)

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        with self._lock:
            self.messages.setdefault(partition, []).append((offset, value))
            if offset > self._last.get(partition, -1):
                self._last[partition] = offset

    @property
    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.messages.values())

    def last_offsets(self) -> dict[int, int]:
        """The highest offset written to each partition."""
        with self._lock:
            return dict(self._last)

    def clock(self) -> dict[Partition, int]:
        """The clock of a round that includes everything written so far."""
        return {(self.topic, p): o for p, o in self.last_offsets().items()}

    def fill_before(self, bootstrap: str, clock: Mapping[Partition, int] | None = None) -> int:
        """Add what the topic held before this run's first message, so the model sees it.

        Reads each partition from offset 0 up to just before the first offset recorded; a
        partition of ``clock`` with nothing recorded is read up to its clock. Returns how many
        messages were added.
        """
        with self._lock:
            bounds = {p: min(o for o, _ in v) - 1 for p, v in self.messages.items() if v}
        for (topic, p), last in (clock or {}).items():
            if topic == self.topic and p not in bounds:
                bounds[p] = last
        added = 0
        for p, end in sorted(bounds.items()):
            for record in kafka.read_range(bootstrap, self.topic, p, 0, end, timeout=60):
                self.add(p, record.offset, record.value)
                added += 1
        return added

    def model_messages(self) -> list[Message]:
        """The messages in partition, offset order, for :func:`run_model`."""
        with self._lock:
            return [Message(self.topic, p, o, value)
                    for p in sorted(self.messages)
                    for o, value in sorted(self.messages[p], key=lambda e: e[0])]


PRODUCER_SETTINGS: dict[str, object] = {
    "acks": "all",
    "enable.idempotence": True,
    "message.timeout.ms": 120_000,
}
"""The harness's producer: a message is acknowledged only once every in-sync replica has it
(with ``min.insync.replicas=2`` an acknowledged message survives the loss of a broker), a
retry after a broker failure or a leader move never writes a message twice (idempotence),
and a message that cannot be delivered fails after 120 s, within :data:`FLUSH_TIMEOUT`, so
every message ends either acknowledged (and recorded) or failed (and the workload fails)."""
FLUSH_TIMEOUT = 150.0


def producer_client(bootstrap: str) -> Producer:
    """A producer with :data:`PRODUCER_SETTINGS`."""
    return kafka.producer(bootstrap, **PRODUCER_SETTINGS)


def produce(bootstrap: str, produced: Produced, values: Iterable[bytes],
            partitions: Sequence[int], *, client: Producer | None = None) -> dict[int, int]:
    """Produce ``values`` round-robin over ``partitions``, recording each acknowledged one.

    Waits until every message was acknowledged or failed; any failure raises
    :class:`HarnessError` (a failed message may or may not be in the log, so the model could
    no longer be fed exactly). ``client``: a producer to reuse (default: a new one).
    Returns the last offsets written per partition by this call.
    """
    last: dict[int, int] = {}
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
            return
        produced.add(msg.partition(), msg.offset(), msg.value())
        last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

    out = client if client is not None else producer_client(bootstrap)
    for i, value in enumerate(values):
        while True:
            try:
                out.produce(produced.topic, value=value, partition=partitions[i % len(partitions)],
                            on_delivery=delivered)
                break
            except BufferError:
                out.poll(0.1)
        if i % 5000 == 0:
            out.poll(0)
    remaining = out.flush(FLUSH_TIMEOUT)
    if remaining or errors:
        raise HarnessError(f"{len(errors)} messages failed and {remaining} are undelivered after "
                           f"{FLUSH_TIMEOUT:.0f} s (whether the log has them is unknown); "
                           f"errors: {errors[:3]}")
    return last


class BackgroundProducer:
    """Produce a bounded list of values at a bounded rate on a thread (context manager).

    One idempotent producer writes every chunk and waits for its acknowledgements, so a
    broker failure only delays it: librdkafka retries on the partition's new leader.
    """

    def __init__(self, bootstrap: str, produced: Produced, values: Sequence[bytes],
                 partitions: Sequence[int], rate: float, chunk: int = 500) -> None:
        self.bootstrap = bootstrap
        self.produced = produced
        self.values = values
        self.partitions = list(partitions)
        self.rate = rate
        self.chunk = chunk
        self.sent = 0
        self.error: BaseException | None = None
        self.started_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _run(self) -> None:
        try:
            self.started_at = time.monotonic()
            client = producer_client(self.bootstrap)
            for start in range(0, len(self.values), self.chunk):
                if self._stop.is_set():
                    return
                chunk = self.values[start:start + self.chunk]
                # Keep round-robin continuity across chunks.
                shift = start % len(self.partitions)
                produce(self.bootstrap, self.produced, chunk,
                        self.partitions[shift:] + self.partitions[:shift], client=client)
                self.sent = start + len(chunk)
                ahead = self.started_at + self.sent / self.rate - time.monotonic()
                if ahead > 0:
                    self._stop.wait(ahead)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        """Wait until everything was produced; raise the producer's error if it had one."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise HarnessError(f"producer still running after {timeout:.0f} s "
                               f"({self.sent}/{len(self.values)} sent)")
        if self.error is not None:
            raise HarnessError(f"producer failed: {self.error!r}")

    def __enter__(self) -> BackgroundProducer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(FLUSH_TIMEOUT + 10)


WORDCOUNT_VOCABULARY = [f"{a}{b}" for a in ("al", "be", "ce", "do", "ek", "fu", "ga", "hi")
                        for b in ("ta", "ro", "mi", "nu", "xo", "sa", "le", "pi", "qu", "zy")]


def wordcount_lines(count: int, seed: int) -> list[bytes]:
    """``count`` seeded text lines of 0..9 words (with punctuation and digits)."""
    rng = random.Random(seed)
    return [(" ".join(rng.choice(WORDCOUNT_VOCABULARY) for _ in range(rng.randint(0, 9)))
             + rng.choice(["", ".", "!", " 42"])).encode() for _ in range(count)]


def zipf_text_lines(count: int, seed: int) -> list[bytes]:
    """``count`` seeded lines of realistic text (:class:`hailstorm.workloads.ZipfText`:
    50,000 words by Zipf's law, a few hot, most rare)."""
    return [line.encode() for line in ZipfText().lines(count, seed)]


def keyed_events(count: int, seed: int) -> list[bytes]:
    """``count`` seeded JSON events of users drawn by Zipf's law from 2,000,000
    (:class:`hailstorm.workloads.KeyedEvents`)."""
    return list(KeyedEvents().events(count, seed))


Workload = Callable[[int, int], list[bytes]]
"""``generate(count, seed) -> message values``."""

WORKLOADS: dict[str, dict[str, Workload]] = {
    "wordcount": {"zipf": zipf_text_lines, "uniform": wordcount_lines},
    "wordstream": {"zipf": zipf_text_lines, "uniform": wordcount_lines},
    "user_totals": {"zipf": keyed_events},
}
"""Workload generators by topology name, then by workload name (the first is the
default): ``zipf`` draws keys by Zipf's law from a large key space, as production data
does; ``uniform`` is 80 equally likely words, where every batch rewrites every key."""


# ------------------------------------------------------------------------------ Kafka nodes


class BrokerControl(Protocol):
    """Stops and starts the nodes of a Kafka cluster; a :class:`hailstorm.devstack.DevStack`
    is one."""

    def kill_kafka_node(self, node: int) -> int:
        """SIGKILL node ``node`` (its data stays); return the pid that was killed."""
        ...

    def restart_kafka_node(self, node: int) -> object:
        """Start node ``node`` again on its data; return once the cluster lists it."""
        ...


@dataclass(frozen=True)
class TopicLayout:
    """Where the partitions of some topics live, from the cluster metadata."""

    brokers: tuple[int, ...]
    """The nodes the cluster metadata lists (a killed node stays until it is fenced)."""
    leaders: dict[Partition, int]
    """Partition -> its leader's node id (-1: none right now)."""
    replicas: dict[Partition, tuple[int, ...]]
    in_sync: dict[Partition, tuple[int, ...]]
    addresses: dict[int, str] = field(default_factory=dict)
    """Node id -> ``host:port`` its clients connect to."""

    def fully_in_sync(self) -> bool:
        """Every partition has a leader and all its replicas in sync."""
        return all(self.leaders.get(p, -1) >= 0 and set(r) <= set(self.in_sync.get(p, ()))
                   for p, r in self.replicas.items())

    def min_replicas(self) -> int:
        return min((len(r) for r in self.replicas.values()), default=0)

    def led_by(self, node: int) -> int:
        return sum(1 for leader in self.leaders.values() if leader == node)


#: Metadata probes while a node is down: its refused connections are expected, not news.
_QUIET: dict[str, object] = {"log_level": 0, "error_cb": lambda _error: None}


def kafka_nodes(bootstrap: str, timeout: float = 10.0) -> int:
    """How many nodes the cluster metadata lists."""
    return len(kafka.admin(bootstrap, **_QUIET).list_topics(timeout=timeout).brokers)


def node_answers(address: str, node: int, timeout: float = 3.0) -> bool:
    """True when the Kafka node at ``address`` itself answers a metadata request that lists
    it. A restarted node serves requests only once the controller registered and unfenced
    it; until its old registration is fenced (``broker.session.timeout.ms`` after the kill)
    the other nodes keep listing it, so asking them would say nothing."""
    try:
        metadata = kafka.admin(address, **_QUIET).list_topics(timeout=timeout)
    except KafkaException:
        return False
    return node in metadata.brokers


def topic_layout(bootstrap: str, topics: Iterable[str], timeout: float = 10.0) -> TopicLayout:
    """Leaders, replicas and in-sync replicas of every partition of ``topics``."""
    metadata = kafka.admin(bootstrap, **_QUIET).list_topics(timeout=timeout)
    leaders: dict[Partition, int] = {}
    replicas: dict[Partition, tuple[int, ...]] = {}
    in_sync: dict[Partition, tuple[int, ...]] = {}
    for topic in topics:
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            raise HarnessError(f"Kafka topic {topic!r} is not in the cluster metadata"
                               + (f" ({info.error})" if info is not None else ""))
        for number, partition in info.partitions.items():
            key = (topic, number)
            leaders[key] = partition.leader
            replicas[key] = tuple(partition.replicas)
            in_sync[key] = tuple(partition.isrs)
    addresses = {n: f"{b.host}:{b.port}" for n, b in metadata.brokers.items()}
    return TopicLayout(tuple(sorted(metadata.brokers)), leaders, replicas, in_sync, addresses)


def busiest_leader(leaders: Mapping[Any, int], rng: random.Random | None = None) -> int:
    """The node that leads the most partitions (``partition -> leader``, -1: none); a tie
    is broken by ``rng`` (the lowest id without one)."""
    counts: dict[int, int] = {}
    for leader in leaders.values():
        if leader >= 0:
            counts[leader] = counts.get(leader, 0) + 1
    if not counts:
        raise HarnessError("no partition has a leader: no broker to kill")
    most = max(counts.values())
    tied = sorted(node for node, n in counts.items() if n == most)
    return rng.choice(tied) if rng is not None and len(tied) > 1 else tied[0]


def broker_fault_problem(nodes: int, replicas: int | None = None) -> str | None:
    """Why a broker fault cannot be a recoverable fault here (None: it can).

    ``nodes``: the cluster's nodes; ``replicas``: the fewest replicas of a source partition.
    """
    if nodes < MIN_KAFKA_NODES:
        victim = "the only broker" if nodes == 1 else f"one of {nodes} brokers"
        return (f"broker faults need a Kafka cluster of at least {MIN_KAFKA_NODES} nodes, "
                f"this one has {nodes}: killing {victim} is not a recoverable fault "
                f"(start the stack with --brokers {MIN_KAFKA_NODES})")
    if replicas is not None and replicas < 2:
        return (f"broker faults need replicated source topics, but a source partition has "
                f"{replicas} replica(s): killing its broker would take it offline")
    return None


class _NodeRestart:
    """Start a killed Kafka node again after ``downtime`` seconds, on a thread, and wait
    until it answers at ``address`` itself."""

    def __init__(self, brokers: BrokerControl, node: int, downtime: float,
                 address: str | None, timeout: float = 180.0) -> None:
        self.brokers = brokers
        self.node = node
        self.downtime = downtime
        self.address = address
        self.timeout = timeout
        self.restarted_at: float | None = None
        """``time.time()`` when the node answered again."""
        self.error: BaseException | None = None
        self._hurry = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"restart-kafka-{node}",
                                        daemon=True)

    def start(self) -> _NodeRestart:
        self._thread.start()
        return self

    def _run(self) -> None:
        self._hurry.wait(self.downtime)
        try:
            self.brokers.restart_kafka_node(self.node)
            if self.address is not None:
                address = self.address
                wait_for(f"Kafka node {self.node} to answer at {address}",
                         lambda: node_answers(address, self.node), self.timeout, poll=0.25)
            self.restarted_at = time.time()
        except BaseException as exc:  # reported by finish()
            self.error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def hurry(self) -> None:
        """Restart now instead of after the downtime."""
        self._hurry.set()

    def finish(self, timeout: float) -> None:
        """Wait until the node is back; raise when it could not be started."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise HarnessError(f"Kafka node {self.node} is not back after {timeout:.0f} s")
        if self.error is not None:
            raise HarnessError(f"restarting Kafka node {self.node} failed: {self.error}")


# ------------------------------------------------------------------------------ the run


@dataclass(frozen=True)
class BoltStates:
    """One bolt's committed state: per instance and merged, with the round's clock."""

    bolt: str
    clock: dict[Partition, int]
    instances: list[Any]
    merged: Any
    instance_clocks: list[dict[Partition, int]]


@dataclass
class Fault:
    """One fault the harness injected."""

    kind: FaultKind
    target: str
    """Processor id, negotiator label, or Kafka node (``kafka-<id>``)."""
    pid: int
    at: float
    """``time.time()`` when it was injected."""
    epoch: int
    """The master's epoch just before."""
    position: dict[str, int]
    """The furthest position the topology had reached before (``"topic:p" -> offset``)."""
    detail: str = ""
    """More about the victim (a broker: how many partitions it led, how long it is down)."""
    acked: dict[str, int] | None = None
    """A broker fault while a producer ran: the offsets acknowledged before the kill
    (``"topic:p" -> offset``); the recovery needs a commit past them."""
    uncommitted: int | None = None
    """Messages in Kafka that no committed round covered when the fault hit (log end minus
    committed clock, summed over the source partitions; None: unknown): a fault on a topology
    with nothing uncommitted proves little."""
    producing: bool | None = None
    """Whether the run's producer was still writing when the fault hit (None: no producer)."""
    phase: str = ""
    """The master's state when the fault hit, read just before it (``""``: not read)."""
    trigger: bool = False
    """Injected only to start a recovery that the next fault is timed to hit."""

    @property
    def effective(self) -> bool:
        """It hit a topology with uncommitted data while data kept coming."""
        return bool(self.uncommitted) and self.producing is not False


@dataclass
class Recovery:
    """How long the topology took to recover from one fault (None: did not within bounds)."""

    fault: Fault
    flowing_after: float | None
    committed_after: float | None
    restored_after: float | None = None
    """A broker fault: seconds until the killed node was back in the cluster metadata."""


VICTIM_ROLES = ("spout", "bolt", "sink")
"""The processors a processor kill or a session expiry may hit: every kind, sinks too (their
table writer's fencing and replay are part of what a run proves)."""

RECOVERY_WINDOW = 120.0
"""Seconds after a fault (or a declared restart) within which a recovery counts as its
consequence; a recovery that fails and restarts again stays inside it."""


@dataclass(frozen=True, order=True)
class Explanation:
    """Something that happened on purpose and may make the topology recover."""

    at: float
    """``time.time()``."""
    why: str


def unexplained(recoveries: Iterable[RecoveryRecord], explanations: Sequence[Explanation],
                window: float = RECOVERY_WINDOW) -> list[RecoveryRecord]:
    """The recoveries that no explanation precedes by at most ``window`` seconds.

    A deployment's start is no recovery, nor are the start's own retries (Initialize timed
    out before every processor registered, and nothing ever flowed in between)."""
    found = []
    starting = False
    for r in sorted(recoveries, key=lambda r: r.epoch):
        if r.is_start:
            starting = True
            continue
        if starting and r.previous == "Initialize":
            continue
        starting = False
        if not any(e.at - 1.0 <= r.at <= e.at + window for e in explanations):
            found.append(r)
    return found


#: Master states of a topology recovering from a failure (SpoutsPaused is a snapshot round).
_RECOVERING = frozenset({"NegotiatorDisconnected", "Initialize", "SpoutsRewind"})


ZOMBIE_FENCED = ("resumed after its replacement committed; fenced by its table or topic, wrote "
                 "nothing")
ZOMBIE_ENDED = "resumed after its replacement committed; ended on its own, not fenced"


def process_stopped(pid: int) -> bool:
    """True when process ``pid`` is stopped (SIGSTOP: state ``T`` in ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "T"


def zombie_outcome(log: str, pid: int) -> str:
    """How the zombie sink ``pid`` ended, from its lines in ``log`` (a logged traceback's
    lines belong to the line that starts it): fenced by its table (:data:`ZOMBIE_FENCED`:
    it tried to commit), or on its own (:data:`ZOMBIE_ENDED`: its lost session, the newer
    run or its closed upstreams ended it; had it written, only the final comparison would
    tell)."""
    mine: list[str] = []
    owned = False
    for line in log.splitlines():
        if _LOG_LINE.match(line):
            owned = f" pid={pid}]" in line
        if owned:
            mine.append(line)
    if any("a zombie of an older run" in line for line in mine):
        return ZOMBIE_FENCED
    raised = [line for line in mine if _EXCEPTION_LINE.match(line)]
    why = raised[-1] if raised else next(
        (line.split("] ", 1)[-1] for line in reversed(mine)
         if " ERROR " in line or " WARNING " in line), "no log line")
    return f"{ZOMBIE_ENDED} ({why[:160]})"


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*: ")
"""The last line of a logged traceback: ``module.ExceptionName: message``."""
_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
"""The start of a log line (not of a traceback's continuation)."""


def _clock_key(partition: Partition) -> str:
    return f"{partition[0]}:{partition[1]}"


class TopologyRun:
    """Negotiators and driver of one topology deployment (context manager)."""

    def __init__(
        self,
        stack: StackAddresses,
        topology_ref: str | Path,
        *,
        name: str | None = None,
        log_dir: Path,
        negotiators: int = 2,
        snapshot_interval: float = 1.0,
        timeout: float = 30.0,
        negotiator_session_timeout: float = 4.0,
        processor_session_timeout: float = 6.0,
        database: str | None = None,
        snapshot_retention: float | None = None,
        brokers: BrokerControl | None = None,
        broker_downtime: tuple[float, float] = (3.0, 8.0),
        zombies: bool = False,
        master: str | None = None,
        processor_host: str | None = None,
        driver_address: str | None = None,
        spark_conf: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.stack = stack
        self.topology_ref = str(topology_ref)
        self.topology: Topology = load_topology(self.topology_ref)
        self.name = name or f"{self.topology.name}_{uuid.uuid4().hex[:8]}"
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.negotiator_count = negotiators
        self.snapshot_interval = snapshot_interval
        self.snapshot_retention = snapshot_retention
        """The negotiators' ``--snapshot-retention`` (None: their default)."""
        self.timeout = timeout
        self.negotiator_session_timeout = negotiator_session_timeout
        self.processor_session_timeout = processor_session_timeout
        self.brokers = brokers
        """Stops and starts Kafka nodes, for broker faults (None: no broker faults)."""
        self.broker_downtime = broker_downtime
        """How long a killed Kafka node stays down: seconds drawn uniformly from this range."""
        self.zombies = zombies
        """Run the driver so that a stopped sink survives its stage (:data:`ZOMBIE_SPARK_CONF`,
        a spare slot): needed for :meth:`zombie_sink`."""
        self._restarts: list[tuple[Fault, _NodeRestart]] = []
        self.paths = TopologyPaths(self.name)
        self.database = private_database(stack, database, log_dir, self.name)
        """Database of sink tables that name none (see :func:`private_database`): by
        default one of this run only, so runs of one topology never share (and collide
        in) a table."""
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()
        self.faults: list[Fault] = []
        """Every fault injected in this run, in order."""
        self.producer: BackgroundProducer | None = None
        """The workload's producer while it runs (faults record whether it still wrote)."""
        self.planned: list[Explanation] = []
        """Restarts the test declared (:meth:`expect_restart`)."""
        self.processor_pids: set[int] = set()
        self.topic_starts: dict[str, dict[int, int]] = {}
        """Per output topic, partition -> offset this run's records start at."""
        self._stopped_pids: set[int] = set()
        self._negotiators_started = 0
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
            PYSPARK_PYTHON=sys.executable, HAILSTORM_ZK=stack.zk,
            HAILSTORM_KAFKA=stack.kafka, HAILSTORM_SNAPSHOTS=str(stack.snapshots),
            HAILSTORM_DATABASE_URL=self.database)
        self.master_url = master
        """The Spark master the driver uses (None: ``local[N]``, whatever the environment
        says)."""
        self.env.pop(SPARK_MASTER_VAR, None)
        if master is not None:
            self.env[SPARK_MASTER_VAR] = master
        self.processor_host = processor_host
        """The driver's ``--host`` (None: its default, loopback)."""
        self.spark_conf = list(spark_conf)
        """The driver's ``--conf`` settings (besides those of ``zombies``)."""
        if driver_address is not None:  # what the driver binds and tells executors
            self.env["SPARK_LOCAL_IP"] = driver_address
        if zombies:  # sinks stop where the harness asks them to (failpoints.pause_point)
            pause_dir = log_dir / "pause"
            pause_dir.mkdir(exist_ok=True)
            self.env[PAUSE_DIR_VAR] = str(pause_dir)
        self.zk = zk_client(stack.zk)
        self.zk.start(timeout=20)
        self.records = TopologyRecords(self.zk, self.paths)

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> TopologyRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def spawn(self, label: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``python ARGS`` with output in ``log_dir/LABEL.log``."""
        with (self.log_dir / f"{label}.log").open("ab") as out:
            proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT)
        self.procs[label] = proc
        return proc

    def _spawn_negotiator(self) -> None:
        label = f"negotiator-{self._negotiators_started}"
        self._negotiators_started += 1
        retention = [] if self.snapshot_retention is None else \
            ["--snapshot-retention", str(self.snapshot_retention)]
        self.spawn(label, ["-m", "negotiator", self.topology_ref, "--name", self.name,
                           "--id", label, "--snapshot-interval", str(self.snapshot_interval),
                           "--timeout", str(self.timeout),
                           "--session-timeout", str(self.negotiator_session_timeout),
                           *retention])

    def start(self) -> TopologyRun:
        """Start the negotiators, then the driver. Output topics of topic sinks may hold
        records of earlier runs: where their logs end now is noted, and
        :meth:`sink_tables` reads from there."""
        for sink in self.topology.sinks:
            if isinstance(sink.target, Topic):
                self.topic_starts[sink.target.name] = topic_ends(self.stack.kafka,
                                                                 sink.target.name)
        for _ in range(self.negotiator_count):
            self._spawn_negotiator()
        zombie_args = [f"--master=local[{self.expected_count() + 1}]",
                       *(f"--conf={k}={v}" for k, v in ZOMBIE_SPARK_CONF)] if self.zombies else []
        host_args = [] if self.processor_host is None else ["--host", self.processor_host]
        conf_args = [f"--conf={k}={v}" for k, v in self.spark_conf]
        self.spawn("driver", ["-m", "hailstorm", "run", self.topology_ref, "--name", self.name,
                              *zombie_args, *host_args, *conf_args])
        return self

    def alive(self) -> None:
        """Raise when the driver died, or no negotiator the harness did not kill is left."""
        for label, proc in self.procs.items():
            if label not in self.killed and proc.poll() is not None:
                raise HarnessError(f"{label} exited with {proc.returncode}:\n"
                                   f"{self.log(label)[-3000:]}")

    def log(self, label: str) -> str:
        path = self.log_dir / f"{label}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> dict[str, str]:
        return {label: self.log(label) for label in self.procs}

    def stop(self) -> None:
        """Stop the driver and negotiators (SIGTERM, then SIGKILL), then leftover workers;
        start every Kafka node a broker fault killed again."""
        for _fault, restart in self._restarts:
            restart.hurry()
        with contextlib.suppress(Exception):
            self.processors()
        for label in ["driver", *[n for n in self.procs if n != "driver"]]:
            proc = self.procs.get(label)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(pid_alive(p) for p in self.processor_pids):
            time.sleep(0.2)
        for pid in self.processor_pids:  # Spark workers we started through the driver
            if pid in self._stopped_pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            if pid_alive(pid):
                stop_pid(pid, None, sig=signal.SIGKILL, timeout=5)
        for _fault, restart in self._restarts:
            with contextlib.suppress(HarnessError):
                restart.finish(180)
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()

    # -- ZooKeeper views ------------------------------------------------------------------

    def master(self) -> MasterRecord | None:
        return self.records.master()

    def committed(self) -> CommittedRecord | None:
        return self.records.committed()

    def processors(self) -> dict[str, ProcessorReport]:
        """The living processors' readable reports (``info["pid"]`` is the worker's pid)."""
        result: dict[str, ProcessorReport] = {}
        for child, report in self.records.reports().items():
            if report is None:
                continue
            result[child] = report
            if "pid" in report.info:
                self.processor_pids.add(int(report.info["pid"]))
        return result

    def expected_count(self) -> int:
        """How many processors the deployment has (without asking the driver)."""
        spouts = sum(len(kafka.partitions_of(self.stack.kafka, s.topic))
                     for s in self.topology.spouts)
        return spouts + sum(b.parallelism for b in self.topology.bolts) + len(self.topology.sinks)

    def flowing(self) -> MasterRecord | None:
        master = self.master()
        return master if master is not None and master.state.__class__.__name__ == "Flowing" \
            else None

    def wait_flowing(self, timeout: float = 240) -> MasterRecord:
        """Until the master is ``Flowing`` (the topology started or recovered)."""
        result: MasterRecord = wait_for("the master to be Flowing", self.flowing, timeout,
                                        self.alive)
        return result

    def covers(self, target: Mapping[Partition, int]) -> CommittedRecord | None:
        """The committed record if its clock includes every ``target`` offset."""
        committed = self.committed()
        if committed is None:
            return None
        if all(committed.clock.get(p, -1) >= o for p, o in target.items()):
            return committed
        return None

    def wait_committed(self, covering: Mapping[Partition, int],
                       timeout: float = 240) -> CommittedRecord:
        """Until a committed round includes every offset of ``covering``."""
        result: CommittedRecord = wait_for(
            f"a commit covering {dict(covering)}", lambda: self.covers(covering), timeout,
            self.alive)
        return result

    def final_comparison(self, produced: Produced, timeout: float = 300) -> Comparison:
        """Wait for a committed round that includes everything ``produced``, check that
        every recovery is explained (:meth:`check_recoveries`), and compare the round's
        bolt states and the sink tables with :func:`run_model` over the same input."""
        committed = self.wait_committed(produced.clock(), timeout)
        states = self.committed_bolt_states(committed)
        tables = self.sink_tables()
        self.check_recoveries()
        return compare_with_model(run_model(self.topology, produced.model_messages()),
                                  states, tables)

    def committed_bolt_states(self, committed: CommittedRecord | None = None
                              ) -> dict[str, BoltStates]:
        """Every bolt's committed state, read from the committed round's snapshots."""
        committed = committed or self.committed()
        if committed is None:
            raise HarnessError("nothing committed yet")
        store = open_store(self.stack.snapshots)
        result = {}
        for bolt in self.topology.bolts:
            instances, clocks = [], []
            for i in range(bolt.parallelism):
                ref = committed.snapshot_for(f"bolt:{bolt.name}:{i}")
                if ref is None:
                    raise HarnessError(f"committed round {committed.epoch} has no snapshot "
                                       f"of bolt:{bolt.name}:{i}")
                clock, state = store.load(ref, bolt.state)
                instances.append(state)
                clocks.append(dict(clock))
            merged = instances[0] if len(instances) == 1 else bolt.state.combine_all(instances)
            result[bolt.name] = BoltStates(bolt.name, dict(committed.clock), instances, merged,
                                           clocks)
        return result

    def sink_tables(self) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
        """The content of every sink table (and topic, see :func:`topic_rows`): key tuple
        -> row.

        Upsert and merge tables have the shape of :meth:`hailstorm.model.ModelResult.table`;
        append tables are keyed by their rows' origins with :func:`keyed_append_rows`, so
        that :func:`compare_with_model` compares them as multisets per origin.
        """
        from hailstorm.sinks.db import Database
        from hailstorm.sinks.sql import HIDDEN_COLUMNS

        result: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
        for sink in self.topology.sinks:
            target = sink.target
            if isinstance(target, Topic):
                result[sink.name] = topic_rows(self.stack.kafka, target,
                                               self.topic_starts.get(target.name))
                continue
            if not isinstance(target, Table):
                continue
            append = target.mode == "append"
            db = Database(target.url or self.database)
            try:
                columns = list(target.column_names)
                selected = columns + (list(HIDDEN_COLUMNS[:3]) if append else [])
                quoted = ", ".join(db.dialect.quote(c) for c in selected)
                with db.transaction() as tx:
                    rows = tx.execute(f"SELECT {quoted} FROM {db.dialect.quote(target.name)}")
            finally:
                db.close()
            if append:
                result[sink.name] = keyed_append_rows(
                    ((values[-3], values[-2], values[-1]),
                     dict(zip(columns, values[:-3], strict=True))) for values in rows)
                continue
            table = {}
            for values in rows:
                row = dict(zip(columns, values, strict=True))
                table[target.key_of(row)] = row
            result[sink.name] = table
        return result

    # -- faults ---------------------------------------------------------------------------

    def position(self) -> dict[str, int]:
        """The furthest offsets known: committed clock, master clock, spout positions."""
        best: dict[str, int] = {}

        def merge(clock: Mapping[Partition, int] | None) -> None:
            for p, o in (clock or {}).items():
                best[_clock_key(p)] = max(best.get(_clock_key(p), -1), o)

        committed = self.committed()
        merge(committed.clock if committed else None)
        master = self.master()
        merge(getattr(master.state, "clock", None) if master else None)
        for report in self.processors().values():
            merge(report.position)
        return best

    def uncommitted(self) -> int | None:
        """Messages in the source partitions that the committed clock does not cover yet
        (None: unknown). While the run's producer feeds the only source topic, from what it
        had acknowledged (a ZooKeeper read: quick enough to take just before a fault);
        otherwise from Kafka's log ends (None when the broker does not answer)."""
        committed = self.committed()
        clock = committed.clock if committed else {}
        producer = self.producer
        if producer is not None and self.source_topics() == [producer.produced.topic]:
            topic = producer.produced.topic
            return sum(max(0, last - clock.get((topic, p), -1))
                       for p, last in producer.produced.last_offsets().items())
        try:
            partitions = [(topic, number) for topic in self.source_topics()
                          for number in kafka.partitions_of(self.stack.kafka, topic, timeout=5)]
            ends = kafka.log_ends(self.stack.kafka, partitions)
        except Exception:  # a broker fault in progress: unknown, not zero
            return None
        return sum(max(0, end - clock.get(p, -1) - 1) for p, end in ends.items())

    def await_uncommitted(self, producer: BackgroundProducer | None,
                          timeout: float = 15.0) -> None:
        """While ``producer`` writes, wait (at most ``timeout`` s) until some produced data is
        not committed yet, so that the next fault hurts data in flight (a producer writes in
        chunks: between two, everything may be committed). Returns either way: a fault that
        still hits an idle topology is reported as such."""
        deadline = time.monotonic() + timeout
        while producer is not None and producer.running and time.monotonic() < deadline:
            if self.uncommitted():
                return
            time.sleep(0.05)

    def _fault(self, kind: FaultKind, target: str, pid: int,
               phase: MasterPhase | None = None) -> Fault:
        """Record a fault about to hit ``target``: what the topology held, then (with
        ``phase``) wait until the master is in that state; the caller strikes right after.
        The master's state, epoch and the time are read last, just before the strike."""
        producer = self.producer
        fault = Fault(kind, target, pid, time.time(), 0, self.position())
        deadline = time.monotonic() + 15
        while True:  # some data in flight when it hits, while the producer writes
            if phase is not None:
                self.wait_phase(phase)
            fault.uncommitted = self.uncommitted()
            if fault.uncommitted or producer is None or not producer.running \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        fault.producing = None if producer is None else producer.running
        master = self.master()
        fault.phase = master.state.__class__.__name__ if master else "none"
        fault.epoch = master.state.epoch if master else 0
        fault.at = time.time()
        self.faults.append(fault)
        return fault

    def wait_phase(self, phase: MasterPhase, timeout: float | None = None) -> str:
        """Poll the master (every 2 ms) until it is in ``phase``; give up after ``timeout``
        seconds (default: 3 snapshot intervals for ``SpoutsPaused``, else 60) and return the
        state it is in then: a short phase can be missed, and the fault reports where it
        really hit."""
        if timeout is None:
            timeout = 3 * self.snapshot_interval + 2 if phase == "SpoutsPaused" else 60.0
        deadline = time.monotonic() + timeout
        checked = time.monotonic()
        while True:
            master = self.master()
            name = master.state.__class__.__name__ if master else "none"
            if name == phase or time.monotonic() >= deadline:
                return name
            if time.monotonic() - checked > 0.5:
                self.alive()
                checked = time.monotonic()
            time.sleep(0.002)

    # -- restart accounting ---------------------------------------------------------------

    def recoveries(self) -> list[RecoveryRecord]:
        """Every move to Initialize the negotiators recorded, oldest first."""
        return self.records.recoveries()

    def negotiator_metrics(self) -> dict[str, dict[str, float]]:
        """The ``/metrics`` samples of every negotiator that serves them (by identifier)."""
        from hailstorm.metrics import scrape

        result = {}
        for record in self.records.negotiators():
            if record.metrics is not None:
                with contextlib.suppress(OSError, ValueError):
                    result[record.identifier] = scrape(record.host, record.metrics)
        return result

    def processor_metrics(self) -> dict[str, dict[str, float]]:
        """The ``/metrics`` samples of every processor that serves them (by id)."""
        from hailstorm.metrics import scrape

        result = {}
        for ident, report in self.processors().items():
            host, port = report.info.get("host"), report.info.get("metrics")
            if host and port:
                with contextlib.suppress(OSError, ValueError):
                    result[ident] = scrape(str(host), int(port))
        return result

    def expect_restart(self, at: float, why: str) -> None:
        """Declare a restart the test caused on purpose (at ``time.time()`` ``at``)."""
        self.planned.append(Explanation(at, why))

    def explanations(self) -> list[Explanation]:
        """What may explain a recovery: every fault injected, every restart declared, and
        every failpoint that fired (its marker file's time)."""
        found = [Explanation(f.at, f"{f.kind} {f.target}") for f in self.faults]
        found += self.planned
        directory = self.env.get(FAILPOINTS_DIR_VAR)
        if directory and Path(directory).is_dir():
            found += [Explanation(marker.stat().st_mtime, f"failpoint {marker.name}")
                      for marker in Path(directory).iterdir()]
        return sorted(found)

    def unexplained_recoveries(self) -> list[RecoveryRecord]:
        """Recoveries no injected fault, declared restart or failpoint explains."""
        return unexplained(self.recoveries(), self.explanations(), RECOVERY_WINDOW)

    def check_recoveries(self) -> None:
        """Raise :class:`HarnessError` naming every recovery nothing explains: a protocol
        violation that recovers would otherwise still end exact."""
        bad = self.unexplained_recoveries()
        if bad:
            raise HarnessError(
                f"{len(bad)} unexplained recover{'y' if len(bad) == 1 else 'ies'}: "
                + "; ".join(f"epoch {r.epoch} at {r.at:.1f} from {r.previous}: {r.reason}"
                            for r in bad[:5]))

    def _pick_processor(self, role: str | None, rng: random.Random | None,
                        pid: int | None, timeout: float = 120.0,
                        epoch: int = 0) -> tuple[str, int]:
        """``pid``'s processor, or a living one of ``role`` drawn with ``rng`` (that
        answered a master state of ``epoch`` or later: the current incarnation during a
        recovery). When the topology is restarting (a fault the test planned, such as a
        failpoint, may just have fired) it waits, up to ``timeout`` s, until one of
        ``role`` runs again."""
        if pid is not None:
            for ident, report in self.processors().items():
                if int(report.info.get("pid", -1)) == pid:
                    return ident, pid
            return f"pid {pid}", pid
        roles = (role,) if role else VICTIM_ROLES

        def living() -> list[tuple[str, int]]:
            return sorted(
                (ident, int(r.info["pid"])) for ident, r in self.processors().items()
                if ident.split(":", 1)[0] in roles and "pid" in r.info
                and r.epoch >= epoch and pid_alive(int(r.info["pid"])))

        candidates = wait_for(f"a living {'/'.join(roles)} processor to hurt", living,
                              timeout, self.alive, poll=0.2)
        return (rng or random.Random()).choice(candidates)

    def kill_processor(self, pid: int | None = None, role: str | None = None,
                       rng: random.Random | None = None, phase: MasterPhase | None = None,
                       epoch: int = 0) -> Fault:
        """SIGKILL a processor's Spark Python worker: ``pid``, or one of ``role`` at random
        (of ``epoch`` or later, see :meth:`_pick_processor`), once the master is in
        ``phase`` (None: now)."""
        ident, victim = self._pick_processor(role, rng, pid, epoch=epoch)
        fault = self._fault("processor", ident, victim, phase)
        with contextlib.suppress(ProcessLookupError):  # it may have died on its own since
            os.kill(victim, signal.SIGKILL)
        return fault

    def leader(self) -> str | None:
        """The label of the leading negotiator, from the master record."""
        master = self.master()
        return master.leader if master is not None and master.leader in self.procs else None

    def kill_negotiator_leader(self, phase: MasterPhase | None = None) -> Fault:
        """SIGKILL the leading negotiator (once the master is in ``phase``) and start a new
        one (the next standby)."""
        label = wait_for("a negotiator of ours to lead", self.leader, 60, self.alive)
        proc = self.procs[label]
        fault = self._fault("negotiator", label, proc.pid, phase)
        if self.leader() != label:  # leadership moved while waiting for the phase
            label = wait_for("a negotiator of ours to lead", self.leader, 60, self.alive)
            proc = self.procs[label]
            fault.target, fault.pid = label, proc.pid
        self.killed.add(label)
        proc.kill()
        proc.wait(10)
        self._spawn_negotiator()
        return fault

    def expire_zk_session(self, processor: str | None = None,
                          rng: random.Random | None = None, timeout: float = 60,
                          phase: MasterPhase | None = None, epoch: int = 0) -> Fault:
        """Make a processor's ZooKeeper session expire for real.

        SIGSTOP its worker so it cannot heartbeat, wait until the server expired the session
        (the ephemeral ``living`` node is gone, or owned by another session), then SIGCONT:
        the processor finds its session lost and ends, and the topology recovers.
        """
        if processor is None:
            ident, victim = self._pick_processor(None, rng, None, epoch=epoch)
        else:  # a living incarnation of it (the last one may just have been killed)
            def living() -> int | None:
                report = self.processors().get(processor)
                pid = int(report.info.get("pid", -1)) if report is not None else -1
                return pid if pid > 0 and pid_alive(pid) else None

            ident, victim = processor, wait_for(f"{processor} to run", living, timeout,
                                                self.alive)
        node = self.paths.living_node(ident)
        owner = self.zk.exists(node)
        fault = self._fault("zk-session", ident, victim, phase)
        with self._kept_stopped(victim):
            os.kill(victim, signal.SIGSTOP)

            def expired() -> bool:
                stat = self.zk.exists(node)
                return stat is None or owner is None or stat.ephemeralOwner != owner.ephemeralOwner
            wait_for(f"the session of {ident} to expire", expired, timeout, poll=0.25)
        return fault

    def zombie_sink(self, rng: random.Random | None = None, timeout: float = 120,
                    phase: MasterPhase | None = None, epoch: int = 0) -> Fault:
        """Make a sink a zombie: stop it with rows it has not committed, keep it stopped
        until its session expired and a round of a newer run (its replacement's) committed,
        then SIGCONT it. It stops itself as it is about to commit (a pause point the harness
        arms for its pid), so it resumes straight into the commit its replacement
        superseded; a sink with nothing to commit within 10 s gets a SIGSTOP where it is.
        The fault records the state it really stopped in (a schedule never times a zombie
        for a recovery state: sinks do not commit then).
        The zombie must write nothing: the fault's ``detail`` says where it stopped and how
        it ended (fenced by its table, or first noticing its lost session), read from its
        log. Needs ``TopologyRun(zombies=True)``."""
        if not self.zombies:
            raise HarnessError("zombie faults need a driver that leaves stopped workers alive: "
                               "TopologyRun(zombies=True)")
        ident, victim = self._pick_processor("sink", rng, None, epoch=epoch)
        fault = self._fault("zombie", ident, victim, phase)
        with self._kept_stopped(victim):
            fault.detail = self._stop_before_commit(ident, victim)
            master = self.master()  # the state and time it really stopped in
            fault.phase = master.state.__class__.__name__ if master else "none"
            fault.epoch = master.state.epoch if master else 0
            fault.at = time.time()

            def replaced() -> bool:  # a round of the run after the fault committed
                restarts = [r.epoch for r in self.recoveries() if r.at >= fault.at]
                committed = self.committed()
                return bool(restarts) and committed is not None \
                    and committed.epoch > min(restarts)
            wait_for(f"a replacement of {ident} to commit", replaced, timeout, self.alive,
                     poll=0.25)
        wait_for(f"the zombie {ident} (pid {victim}) to end", lambda: not pid_alive(victim),
                 60, self.alive, poll=0.2)
        fault.detail += "; " + zombie_outcome(self.log("driver"), victim)
        return fault

    @contextlib.contextmanager
    def _kept_stopped(self, victim: int) -> Iterator[None]:
        """While the block stops ``victim`` and waits: SIGCONT it afterwards, whatever
        happened (and :meth:`stop` knows it may be stopped meanwhile)."""
        self._stopped_pids.add(victim)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
            self._stopped_pids.discard(victim)

    def _stop_before_commit(self, ident: str, victim: int) -> str:
        """Make ``victim`` stop itself as it is about to commit (within 10 s, else SIGSTOP
        it where it is); says which."""
        request = pause_request(self.env[PAUSE_DIR_VAR], "sink.before_commit", victim)
        request.touch()
        try:
            wait_for(f"{ident} to stop before its next commit",
                     lambda: process_stopped(victim), 10, self.alive, poll=0.01)
            return "stopped before a commit"
        except HarnessError:
            try:
                request.unlink()  # never got there (nothing to commit): stop it anywhere
            except FileNotFoundError:  # it just did
                wait_for(f"{ident} to stop", lambda: process_stopped(victim), 10, poll=0.01)
                return "stopped before a commit"
            os.kill(victim, signal.SIGSTOP)
            return "stopped between commits"

    def stall_bolt(self, rng: random.Random | None = None, phase: MasterPhase | None = None,
                   epoch: int = 0, seconds: float | None = None,
                   crash: bool | None = None) -> Fault:
        """SIGSTOP a random bolt for ``seconds`` (default: drawn from 1 s to half its session
        timeout), then SIGCONT: a GC pause or a slow disk. Nothing restarts, but the
        topology goes on without it: spouts fill its sockets, a snapshot round pauses them
        and its clock is published, so the bolt resumes knowing the clock with the tuples
        up to it (the one *at* it included) still queued. That backlog is what sends
        tuples through the A/B split at the clock; an idle bolt never sees it.

        With ``crash`` (default: a coin toss) the bolt is SIGKILLed as soon as a round
        committed after it resumed, so that the recovery loads a round whose split ran on
        the backlog: a tuple at the clock put into B instead of A is lost only then."""
        rng = rng or random.Random()
        crash = rng.random() < 0.5 if crash is None else crash
        ident, victim = self._pick_processor("bolt", rng, None, epoch=epoch)
        down = seconds if seconds is not None else \
            rng.uniform(1.0, max(1.0, self.processor_session_timeout / 2))
        fault = self._fault("stall", ident, victim, phase)
        fault.detail = f"stopped {down:.1f} s"
        with self._kept_stopped(victim):
            os.kill(victim, signal.SIGSTOP)
            time.sleep(down)
        if crash:
            resumed = time.time()
            wait_for(f"a round committed after {ident} resumed",
                     lambda: (c := self.committed()) is not None and c.committed_at > resumed,
                     60, self.alive, poll=0.01)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
            fault.detail += ", SIGKILLed after the next commit"
        return fault

    def source_topics(self) -> list[str]:
        return sorted({s.topic for s in self.topology.spouts})

    def kill_broker(self, node: int | None = None, rng: random.Random | None = None,
                    downtime: float | None = None,
                    producer: BackgroundProducer | None = None) -> Fault:
        """SIGKILL a Kafka node and start it again ``downtime`` seconds later (on a thread).

        The victim is ``node``, else the node leading the most source partitions (ties
        drawn with ``rng``); ``downtime`` defaults to a draw from :attr:`broker_downtime`.
        First waits until the node a previous broker fault killed is back and every replica
        of the source partitions is in sync again, so each fault starts from a whole
        cluster. With a running ``producer`` the fault records its acknowledged offsets:
        :meth:`measure_recovery` then waits for a commit past them on every partition.
        """
        if self.brokers is None:
            raise HarnessError("broker faults need control of the Kafka nodes: pass brokers= "
                               "(e.g. the DevStack) to TopologyRun or run_chaos")
        for _fault, restart in self._restarts:
            restart.finish(180)
        topics = self.source_topics()
        problem = broker_fault_problem(len(topic_layout(self.stack.kafka, topics).brokers))
        if problem:
            raise HarnessError(problem)

        def whole() -> TopicLayout | None:
            try:
                layout = topic_layout(self.stack.kafka, topics)
            except KafkaException:  # no metadata this time: ask again
                return None
            return layout if layout.fully_in_sync() else None

        layout: TopicLayout = wait_for(f"every replica of {', '.join(topics)} to be in sync",
                                       whole, 120, self.alive, poll=0.5)
        problem = broker_fault_problem(len(layout.brokers), layout.min_replicas())
        if problem:
            raise HarnessError(problem)
        rng = rng or random.Random()
        victim = node if node is not None else busiest_leader(layout.leaders, rng)
        down = downtime if downtime is not None else rng.uniform(*self.broker_downtime)
        fault = self._fault("broker", f"kafka-{victim}", 0)
        fault.detail = (f"leader of {layout.led_by(victim)}/{len(layout.leaders)} source "
                        f"partitions, down {down:.1f} s")
        if producer is not None and producer.running:
            fault.acked = {_clock_key((producer.produced.topic, p)): o
                           for p, o in producer.produced.last_offsets().items()}
        fault.pid = self.brokers.kill_kafka_node(victim)
        restart = _NodeRestart(self.brokers, victim, down, layout.addresses.get(victim))
        self._restarts.append((fault, restart.start()))
        return fault

    def inject(self, kind: FaultKind, rng: random.Random,
               producer: BackgroundProducer | None = None,
               phase: MasterPhase = "Flowing") -> list[Fault]:
        """One fault of ``kind`` (processor, zk-session: a random spout, bolt or sink;
        zombie: a sink, see :meth:`zombie_sink`; stall: a bolt, see :meth:`stall_bolt`;
        broker: the busiest leader of the source partitions, see :meth:`kill_broker`) timed
        for the master state ``phase``; returns the faults injected, the last one the
        planned one.

        ``Flowing`` hits at once; ``SpoutsPaused`` waits for the next snapshot round; the
        recovery phases (``Initialize``, ``SpoutsRewind``) first SIGKILL a random processor
        (the trigger) and hit the recovery it starts, a processor then being drawn among
        the new incarnation. Broker faults always hit at once (they wait for a whole
        cluster first).
        """
        if kind == "broker":
            return [self.kill_broker(rng=rng, producer=producer)]
        faults: list[Fault] = []
        epoch = 0
        if phase in RECOVERY_PHASES:
            trigger = self.kill_processor(rng=rng)
            trigger.trigger = True
            faults.append(trigger)
            self.wait_phase("Initialize")
            master = self.master()
            epoch = master.state.epoch if master else 0
        if kind == "processor":
            faults.append(self.kill_processor(rng=rng, phase=phase, epoch=epoch))
        elif kind == "zombie":
            faults.append(self.zombie_sink(rng=rng, phase=phase, epoch=epoch))
        elif kind == "stall":
            faults.append(self.stall_bolt(rng=rng, phase=phase, epoch=epoch))
        elif kind == "negotiator":
            faults.append(self.kill_negotiator_leader(phase=phase))
        else:
            faults.append(self.expire_zk_session(rng=rng, phase=phase, epoch=epoch))
        return faults

    @staticmethod
    def _needed(fault: Fault, producer: BackgroundProducer | None) -> dict[str, int]:
        """The offsets a commit must include for ``fault`` to count as recovered from."""
        needed = dict(fault.position)
        if fault.acked is None:
            return needed
        # A message acknowledged after the kill on every partition: written to and read
        # from the new leaders. Once the producer stopped, what it wrote last will do.
        final = None if producer is None or producer.running else {
            _clock_key((producer.produced.topic, p)): o
            for p, o in producer.produced.last_offsets().items()}
        for key, acked in fault.acked.items():
            want = acked + 1 if final is None else min(acked + 1, final.get(key, acked))
            needed[key] = max(needed.get(key, -1), want)
        return needed

    def measure_recovery(self, fault: Fault, timeout: float = 180,
                         producer: BackgroundProducer | None = None) -> Recovery:
        """Seconds from ``fault`` until a newer master is Flowing, and a commit passed it.

        A broker fault may leave the topology flowing (spouts ride out a leader move: then
        "Flowing after" is when the master was first seen Flowing, about 0) or fail
        processors and make it recover: then it is when it was last seen becoming Flowing
        after recovering. "Committed past it" needs a commit past the offsets the producer
        had acknowledged at the kill (see :meth:`kill_broker`), and the measurement lasts
        until the node answers again too (``restored_after``).
        """
        recovery = Recovery(fault, None, None)
        restart = next((r for f, r in self._restarts if f is fault), None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (
                recovery.committed_after is None
                or (restart is not None and recovery.restored_after is None)):
            self.alive()
            if restart is not None and restart.done and recovery.restored_after is None:
                restart.finish(0)  # raises when the node did not start
                assert restart.restarted_at is not None
                recovery.restored_after = restart.restarted_at - fault.at
            if recovery.committed_after is not None:
                time.sleep(0.1)
                continue
            now = time.time()
            master = self.master()
            flowing = master is not None and master.state.__class__.__name__ == "Flowing"
            if fault.kind == "broker":
                if master is not None and master.state.__class__.__name__ in _RECOVERING:
                    recovery.flowing_after = None
                elif flowing and recovery.flowing_after is None:
                    recovery.flowing_after = now - fault.at
            elif (recovery.flowing_after is None and master is not None and flowing
                    and master.entered_at >= fault.at
                    and (fault.kind == "negotiator" or master.state.epoch > fault.epoch)):
                recovery.flowing_after = now - fault.at
            committed = self.committed()
            if (recovery.flowing_after is not None and committed is not None
                    and committed.committed_at >= fault.at
                    and all(committed.clock.get((t, int(p)), -1) >= o
                            for key, o in self._needed(fault, producer).items()
                            for t, p in [key.rsplit(":", 1)])):
                recovery.committed_after = now - fault.at
            time.sleep(0.1)
        return recovery


# ------------------------------------------------------------------------------ chaos


@dataclass(frozen=True)
class PlannedFault:
    kind: FaultKind
    delay: float
    """Seconds to wait (after the previous recovery) before injecting it."""
    phase: MasterPhase = "Flowing"
    """The master state to hit (see :meth:`TopologyRun.inject`)."""


def _cover(choices: Sequence[T], count: int, rng: random.Random) -> list[T]:
    """``count`` draws from ``choices``, each choice at least once when ``count`` allows,
    in random order."""
    drawn = list(choices[:count])
    drawn += [rng.choice(choices) for _ in range(count - len(drawn))]
    rng.shuffle(drawn)
    return drawn


@dataclass(frozen=True)
class ChaosSchedule:
    """A seeded plan of ``count`` faults of ``kinds``, spaced ``spacing`` s apart (+ jitter),
    timed for the master states ``phases``.

    Every kind is used at least once when ``count >= len(kinds)``, and every phase once
    among the faults that are not broker faults (those hit a flowing topology) when there
    are enough; the rest are drawn at random. Faults are applied one after another, each
    after the previous recovery.
    """

    kinds: tuple[FaultKind, ...] = DEFAULT_FAULT_KINDS
    count: int = 3
    spacing: float = 2.0
    seed: int = 0
    phases: tuple[MasterPhase, ...] = MASTER_PHASES

    def plan(self) -> list[PlannedFault]:
        rng = random.Random(self.seed)
        kinds = _cover(self.kinds, self.count, rng)
        delays = [self.spacing * (0.5 + rng.random()) for _ in kinds]
        timed = [i for i, k in enumerate(kinds) if k != "broker"]
        phases: list[MasterPhase] = ["Flowing"] * len(kinds)
        for i, phase in zip(timed, _cover(self.phases, len(timed),
                                          random.Random(self.seed * 31 + 7)), strict=True):
            phases[i] = phase
        # A sink commits only outside recoveries, and a zombie is stopped before a commit:
        # it swaps a recovery state for another fault's.
        for i, kind in enumerate(kinds):
            if kind == "zombie" and phases[i] in RECOVERY_PHASES:
                other = next((j for j in timed if kinds[j] != "zombie"
                              and phases[j] not in RECOVERY_PHASES), None)
                if other is None:
                    phases[i] = "Flowing"
                else:
                    phases[i], phases[other] = phases[other], phases[i]
        return [PlannedFault(k, d, ph) for k, d, ph in zip(kinds, delays, phases, strict=True)]

    def rng(self) -> random.Random:
        """The generator victims are drawn from (independent of the plan)."""
        return random.Random(self.seed * 7919 + 1)


@dataclass(frozen=True)
class Difference:
    node: str
    """The bolt or sink."""
    key: Any
    expected: Any
    actual: Any
    kind: Literal["lost", "duplicated", "wrong"]


@dataclass
class Comparison:
    """Committed states against the model: totals and the first differences."""

    lost: int = 0
    """Missing units of count (per_key(Count)-like states), or missing keys otherwise."""
    duplicated: int = 0
    wrong: int = 0
    differences: list[Difference] = field(default_factory=list)
    instance_mismatches: list[str] = field(default_factory=list)
    keys_compared: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong or self.instance_mismatches)

    def first(self, n: int = 5) -> list[Difference]:
        return self.differences[:n]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def keyed_append_rows(
    rows: Iterable[tuple[tuple[str, int, int], Mapping[str, Any]]],
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Append-table rows ``((topic, partition, offset), row)`` keyed
    ``(topic, partition, offset, n)``, with ``n`` numbering the rows of one origin in a
    canonical order: two tables key alike exactly when they hold the same multiset of rows
    for every origin, whatever order the rows were written in."""
    by_origin: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for origin, row in rows:
        by_origin.setdefault((str(origin[0]), int(origin[1]), int(origin[2])), []).append(
            dict(row))
    keyed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for origin, group in by_origin.items():
        for n, row in enumerate(sorted(group, key=lambda r: repr(sorted(r.items())))):
            keyed[(*origin, n)] = row
    return keyed


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> where ``topic``'s readable log ends now (empty: no such topic)."""
    try:
        parts = [(topic, p) for p in kafka.partitions_of(bootstrap, topic)]
    except LookupError:
        return {}
    return {number: end for (_name, number), end in kafka.log_ends(bootstrap, parts).items()}


def topic_records(bootstrap: str, topic: str, since: Mapping[int, int] | None = None,
                  timeout: float = 60.0) -> list[kafka.Record]:
    """Every record of ``topic`` a ``read_committed`` consumer sees (from the offsets
    ``since`` gives per partition, else from the start), partition by partition in log
    order."""
    since = since or {}
    records: list[kafka.Record] = []
    for number, end in sorted(topic_ends(bootstrap, topic).items()):
        records.extend(kafka.read_range(bootstrap, topic, number, since.get(number, 0), end - 1,
                                        timeout))
    return records


def topic_rows(bootstrap: str, target: Topic, since: Mapping[int, int] | None = None,
               ) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A topic sink's output in :meth:`~hailstorm.model.ModelResult.table`'s shape, as a
    ``read_committed`` consumer sees it (from ``since``, see :func:`topic_records`): upsert
    topics keyed ``(key,)`` with the newest
    record per key; append topics keyed by origin (header ``hailstorm.origin``) with
    :func:`keyed_append_rows`, so that a duplicated record is an extra row."""
    from hailstorm.sinks.topic import ORIGIN_HEADER

    records = topic_records(bootstrap, target.name, since)
    if target.mode == "upsert":
        return {(r.key,): {"key": r.key, "value": r.value} for r in records}
    rows = []
    for r in records:
        origin = (r.headers or {}).get(ORIGIN_HEADER)
        if origin is None:
            raise HarnessError(f"a record of topic {target.name!r} at {r.partition}:{r.offset} "
                               f"has no {ORIGIN_HEADER} header: not written by its sink")
        source, partition, offset = origin.decode().split(":")
        rows.append(((source, int(partition), int(offset)), {"key": r.key, "value": r.value}))
    return keyed_append_rows(rows)


def compare_with_model(
    model: ModelResult,
    states: Mapping[str, BoltStates],
    tables: Mapping[str, Mapping[tuple[Any, ...], Mapping[str, Any]]] | None = None,
    limit: int = 20,
) -> Comparison:
    """Lost, duplicated and wrong values of every bolt's committed state vs the model.

    For integer values (``per_key(Count())``-like): a key whose count is lower than the
    model's lost the difference, a higher one was double-counted; a key only the model has
    is lost, one only the runtime has is duplicated. Any other difference is wrong.
    Per-instance states must equal the model's per-instance states too.

    ``tables`` (sink name -> key -> row, as :meth:`TopologyRun.sink_tables` reads them) are
    compared with :meth:`ModelResult.table`: a missing row is lost, an extra one
    duplicated, a different one wrong.
    """
    result = Comparison()

    def note(d: Difference) -> None:
        if len(result.differences) < limit:
            result.differences.append(d)

    for bolt in model.topology.bolts:
        name = bolt.name
        expected = model.bolt_state(name)
        if name not in states:
            result.wrong += 1
            note(Difference(name, None, "a committed state", None, "wrong"))
            continue
        actual = states[name].merged
        for i, (want, got) in enumerate(zip(model.instance_states(name),
                                            states[name].instances, strict=False)):
            if want != got:
                result.instance_mismatches.append(f"{name}:{i}")
        if isinstance(expected, dict) and isinstance(actual, dict):
            keys = sorted(set(expected) | set(actual), key=repr)
            result.keys_compared += len(keys)
            for key in keys:
                want, got = expected.get(key), actual.get(key)
                if want == got:
                    continue
                if (want is None or _is_count(want)) and (got is None or _is_count(got)):
                    delta = (got or 0) - (want or 0)
                    if delta < 0:
                        result.lost += -delta
                        note(Difference(name, key, want, got, "lost"))
                    else:
                        result.duplicated += delta
                        note(Difference(name, key, want, got, "duplicated"))
                else:
                    result.wrong += 1
                    note(Difference(name, key, want, got, "wrong"))
        else:
            result.keys_compared += 1
            if expected != actual:
                if _is_count(expected) and _is_count(actual):
                    if actual < expected:
                        result.lost += expected - actual
                        note(Difference(name, None, expected, actual, "lost"))
                    else:
                        result.duplicated += actual - expected
                        note(Difference(name, None, expected, actual, "duplicated"))
                else:
                    result.wrong += 1
                    note(Difference(name, None, expected, actual, "wrong"))
    for sink, table in (tables or {}).items():
        want_rows = model.table(sink)
        spec = model.topology.node(sink)
        if isinstance(spec, SinkSpec) and isinstance(spec.target, Table | Topic) \
                and spec.target.mode == "append":
            want_rows = keyed_append_rows(((k[0], k[1], k[2]), row)
                                          for k, row in want_rows.items())
        _compare_rows(sink, want_rows, table, result, note)
    return result


Rows = Mapping[tuple[Any, ...], Mapping[str, Any]]
"""A table's content: key tuple -> row."""


def _compare_rows(sink: str, want_rows: Rows, table: Rows, result: Comparison,
                  note: Callable[[Difference], None]) -> None:
    """A missing row is lost, an extra one duplicated, a different one wrong."""
    keys = sorted(set(want_rows) | set(table), key=repr)
    result.keys_compared += len(keys)
    for key in keys:
        want_row, got_row = want_rows.get(key), table.get(key)
        if want_row is not None and got_row is not None and dict(want_row) == dict(got_row):
            continue
        if got_row is None:
            result.lost += 1
            note(Difference(sink, key, want_row, None, "lost"))
        elif want_row is None:
            result.duplicated += 1
            note(Difference(sink, key, None, got_row, "duplicated"))
        else:
            result.wrong += 1
            note(Difference(sink, key, want_row, got_row, "wrong"))


def compare_tables(expected: Mapping[str, Rows], tables: Mapping[str, Rows],
                   limit: int = 20) -> Comparison:
    """Sink tables against expected rows (a table missing from ``tables`` is all lost)."""
    result = Comparison()

    def note(d: Difference) -> None:
        if len(result.differences) < limit:
            result.differences.append(d)

    for sink, want_rows in expected.items():
        _compare_rows(sink, want_rows, tables.get(sink, {}), result, note)
    return result


# ------------------------------------------------------------------ independent checks

_LETTERS = re.compile(r"[^\W\d_]+")


def wordcount_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """``word_counts`` as a plain :class:`collections.Counter` of the lowercase letter runs
    of every UTF-8 line: written apart from the topology and the model (no hailstorm
    code), so a bug they share still shows."""
    counts: Counter[str] = Counter()
    for message in messages:
        try:
            text = (message.value or b"").decode("utf-8")
        except UnicodeDecodeError:
            continue
        counts.update(_LETTERS.findall(text.lower()))
    return {"word_counts": {(w,): {"word": w, "count": n} for w, n in counts.items()}}


def user_totals_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """``user_totals`` summed by hand from the JSON events (see :func:`wordcount_by_hand`)."""
    spent: Counter[str] = Counter()
    events: Counter[str] = Counter()
    for message in messages:
        try:
            event = json.loads(message.value or b"")
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("user"), str) \
                and type(event.get("amount")) is int:
            spent[event["user"]] += event["amount"]
            events[event["user"]] += 1
    return {"user_totals": {(u,): {"user_id": u, "spent": spent[u], "events": n}
                            for u, n in events.items()}}


def wordstream_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """``wordstream``'s ``totals`` topic as :func:`wordcount_by_hand` counts it: the newest
    record per word is ``{"count": n, "word": w}`` in compact JSON."""
    counts = wordcount_by_hand(messages)["word_counts"]
    totals: dict[tuple[Any, ...], dict[str, Any]] = {}
    for (word,), row in counts.items():
        key = word.encode()
        value = f'{{"count":{row["count"]},"word":{json.dumps(word, ensure_ascii=False)}}}'
        totals[(key,)] = {"key": key, "value": value.encode()}
    return {"totals": totals}


BY_HAND: dict[str, Callable[[Iterable[Message]], dict[str, Rows]]] = {
    "wordcount": wordcount_by_hand,
    "wordstream": wordstream_by_hand,
    "user_totals": user_totals_by_hand,
}
"""Sink tables computed without the topology's code, by topology name: chaos runs check the
tables against these as well as against :func:`run_model`."""


@dataclass
class ChaosReport:
    """What a chaos run did and found."""

    topology: str
    messages: int
    partitions: int
    seed: int
    faults: list[Recovery]
    comparison: Comparison
    committed_epoch: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    restarts: int = 0
    """Moves to Initialize after the first start (recoveries, including retried ones)."""
    unexplained: list[RecoveryRecord] = field(default_factory=list)
    """Recoveries no injected fault explains: each one fails the run."""
    database: str = ""
    """The sinks' database, its password masked."""
    independent: Comparison | None = None
    """The sink tables against expectations computed without the topology's code
    (:data:`BY_HAND`; None: none for this topology)."""

    @property
    def ok(self) -> bool:
        return (self.comparison.ok and (self.independent is None or self.independent.ok)
                and all(r.committed_after is not None for r in self.faults)
                and all(r.restored_after is not None for r in self.faults
                        if r.fault.kind == "broker")
                and not self.unexplained)

    def faults_by_kind(self) -> dict[str, int]:
        """Planned faults per kind (triggers not counted)."""
        return dict(Counter(r.fault.kind for r in self.faults if not r.fault.trigger))

    def faults_by_phase(self) -> dict[str, int]:
        """Every fault (triggers too) per master state it hit."""
        return dict(Counter(r.fault.phase for r in self.faults))

    @property
    def triggers(self) -> int:
        return sum(1 for r in self.faults if r.fault.trigger)

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "topology": self.topology, "messages": self.messages,
            "partitions": self.partitions, "seed": self.seed, "ok": self.ok,
            "database": self.database,
            "seconds": round(self.seconds, 2), "committed_epoch": self.committed_epoch,
            "faults_by_kind": self.faults_by_kind(),
            "faults_by_phase": self.faults_by_phase(), "triggers": self.triggers,
            "recoveries": [
                {"kind": r.fault.kind, "target": r.fault.target, "pid": r.fault.pid,
                 "epoch": r.fault.epoch, "detail": r.fault.detail,
                 "uncommitted": r.fault.uncommitted, "producing": r.fault.producing,
                 "phase": r.fault.phase, "trigger": r.fault.trigger,
                 "effective": r.fault.effective,
                 "flowing_after": None if r.flowing_after is None else round(r.flowing_after, 2),
                 "committed_after": None if r.committed_after is None
                 else round(r.committed_after, 2),
                 "restored_after": None if r.restored_after is None
                 else round(r.restored_after, 2)}
                for r in self.faults],
            "lost": c.lost, "duplicated": c.duplicated, "wrong": c.wrong,
            "instance_mismatches": c.instance_mismatches, "keys_compared": c.keys_compared,
            "differences": [{**asdict(d), "key": repr(d.key), "expected": repr(d.expected),
                             "actual": repr(d.actual)} for d in c.first(10)],
            "notes": self.notes,
            "restarts": self.restarts,
            "unexplained_recoveries": [asdict(r) for r in self.unexplained],
            "independent": None if self.independent is None else {
                "lost": self.independent.lost, "duplicated": self.independent.duplicated,
                "wrong": self.independent.wrong, "rows": self.independent.keys_compared},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_text(self) -> str:
        c = self.comparison
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.faults_by_kind().items())) or "none"
        phases = ", ".join(f"{n} in {k}" for k, n in sorted(self.faults_by_phase().items()))
        lines = [
            f"topology {self.topology}: {self.messages} messages over {self.partitions} "
            f"partitions, seed {self.seed}, {self.seconds:.1f} s",
            f"sinks in {self.database}",
            f"faults: {len(self.faults) - self.triggers} planned ({kinds}) and "
            f"{self.triggers} triggers; hit {phases or 'nothing'}",
        ]
        for r in self.faults:
            flowing = "never" if r.flowing_after is None else f"{r.flowing_after:.1f} s"
            committed = "never" if r.committed_after is None else f"{r.committed_after:.1f} s"
            line = (f"  {r.fault.kind:<10} {r.fault.target} (pid {r.fault.pid}, "
                    f"{r.fault.phase or '?'} {r.fault.epoch}"
                    + (", trigger" if r.fault.trigger else "")
                    + f", {r.fault.uncommitted} uncommitted): Flowing after "
                    f"{flowing}, committed past it after {committed}")
            if r.fault.kind == "broker":
                back = "never" if r.restored_after is None else f"{r.restored_after:.1f} s"
                line += f"; {r.fault.detail}, back in the cluster after {back}"
            elif r.fault.kind in ("zombie", "stall"):
                line += f"; {r.fault.detail}"
            lines.append(line)
        idle = [r.fault for r in self.faults if not r.fault.effective]
        lines.append(f"effective: {len(self.faults) - len(idle)} of {len(self.faults)} faults "
                     "hit uncommitted data while the producer wrote"
                     + (f"; on an idle topology: {', '.join(f.target for f in idle)}"
                        if idle else ""))
        zombies = [r.fault for r in self.faults if r.fault.kind == "zombie"]
        if zombies:
            fenced = sum(ZOMBIE_FENCED in f.detail for f in zombies)
            lines.append(f"zombies: {len(zombies)} sinks resumed after their replacement "
                         f"committed: {fenced} fenced by their table or topic, "
                         f"{len(zombies) - fenced} ended on their own")
        lines.append(f"restarts: {self.restarts} for {len(self.faults)} faults, "
                     f"{len(self.unexplained)} unexplained")
        for u in self.unexplained[:5]:
            lines.append(f"  unexplained: epoch {u.epoch} from {u.previous}: {u.reason}")
        lines.append(f"final committed round: epoch {self.committed_epoch}; "
                     f"{c.keys_compared} keys and rows compared (bolt states, sink tables "
                     "and topics)")
        lines.append(f"result: {c.lost} lost, {c.duplicated} duplicated, {c.wrong} wrong"
                     + (f", instances differing: {', '.join(c.instance_mismatches)}"
                        if c.instance_mismatches else ""))
        for d in c.first(5):
            lines.append(f"  {d.kind}: {d.node}[{d.key!r}] expected {d.expected!r}, "
                         f"committed {d.actual!r}")
        if self.independent is not None:
            i = self.independent
            lines.append(f"by hand: {i.keys_compared} sink rows against a count written "
                         f"without the topology's code: {i.lost} lost, {i.duplicated} "
                         f"duplicated, {i.wrong} wrong")
            for d in i.first(5):
                lines.append(f"  {d.kind}: {d.node}[{d.key!r}] expected {d.expected!r}, "
                             f"committed {d.actual!r}")
        lines.extend(self.notes)
        lines.append("OK: exactly the model's state" if self.ok else "FAILED")
        return "\n".join(lines)


def run_chaos(
    stack: StackAddresses,
    topology_ref: str | Path,
    values: Sequence[bytes],
    schedule: ChaosSchedule,
    *,
    log_dir: Path,
    partitions: int = 4,
    rate: float = 5000.0,
    timeout: float = 240.0,
    progress: Callable[[str], None] = lambda _m: None,
    brokers: BrokerControl | None = None,
    database: str | None = None,
) -> ChaosReport:
    """Deploy, produce ``values`` in the background, apply ``schedule``, drain, compare.

    The sinks write to ``database`` (see :func:`private_database`: by default a new
    database on the stack's PostgreSQL).

    ``brokers`` stops and starts the stack's Kafka nodes; a schedule with ``broker`` faults
    needs it and a cluster of :data:`MIN_KAFKA_NODES` nodes (refused before anything runs).
    """
    started = time.monotonic()
    plan = schedule.plan()
    if any(p.kind == "broker" for p in plan):
        if brokers is None:
            raise HarnessError("broker faults need control of the Kafka nodes: pass brokers= "
                               "(e.g. the DevStack) to run_chaos")
        problem = broker_fault_problem(kafka_nodes(stack.kafka))
        if problem:
            raise HarnessError(problem)
    with TopologyRun(stack, topology_ref, log_dir=log_dir, brokers=brokers,
                     database=database, zombies=any(p.kind == "zombie" for p in plan)) as run:
        topics = {s.topic for s in run.topology.spouts}
        if len(topics) != 1:
            raise HarnessError(f"run_chaos needs a topology with one source topic, got {topics}")
        topic = topics.pop()
        kafka.create_topic(stack.kafka, topic, partitions)
        for dead in run.topology.dead_letter_topics:
            kafka.create_topic(stack.kafka, dead, 1)
        parts = kafka.partitions_of(stack.kafka, topic)
        produced = Produced(topic)
        progress(f"starting {run.name} ({run.expected_count()} processors)")
        run.start()
        run.wait_flowing(timeout)
        progress("flowing; producing")
        recoveries: list[Recovery] = []
        rng = schedule.rng()
        with BackgroundProducer(stack.kafka, produced, values, parts, rate) as producer:
            run.producer = producer
            for i, planned in enumerate(plan):
                time.sleep(planned.delay)
                run.wait_flowing(timeout)
                run.await_uncommitted(producer)
                faults = run.inject(planned.kind, rng, producer, planned.phase)
                for fault in faults:
                    progress(f"fault {i + 1}/{schedule.count}"
                             + (" (trigger)" if fault.trigger else "")
                             + f": {fault.kind} {fault.target} in {fault.phase}"
                             + (f" ({fault.detail})" if fault.detail else "")
                             + f"; {fault.uncommitted} uncommitted messages, producer "
                             + ("running" if fault.producing else "done"))
                measured: list[Recovery] = []
                for fault in reversed(faults):  # the last one recovers last
                    recovery = run.measure_recovery(fault, timeout, producer)
                    measured.insert(0, recovery)
                    progress(f"recovered from {fault.kind} {fault.target}: committed after "
                             f"{recovery.committed_after}")
                recoveries.extend(measured)
            producer.join(timeout + len(values) / rate)
        target = {(topic, p): o for p, o in produced.last_offsets().items()}
        progress(f"produced {produced.count}; draining")
        committed = run.wait_committed(target, timeout)
        produced.fill_before(stack.kafka, committed.clock)
        states = run.committed_bolt_states(committed)
        tables = run.sink_tables()
        notes = []
        if dict(committed.clock) != target:
            notes.append(f"note: committed clock {dict(committed.clock)} != produced {target}")
        messages = produced.model_messages()
        model = run_model(run.topology, messages)
        comparison = compare_with_model(model, states, tables)
        by_hand = BY_HAND.get(run.topology.name)
        independent = None if by_hand is None else compare_tables(by_hand(messages), tables)
        restarts = [r for r in run.recoveries() if not r.is_start]
        return ChaosReport(run.topology.name, produced.count, len(parts), schedule.seed,
                           recoveries, comparison, committed.epoch,
                           time.monotonic() - started, notes, len(restarts),
                           run.unexplained_recoveries(), redact(run.database), independent)
