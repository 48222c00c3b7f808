"""The stack a run deploys on: its addresses (:class:`StackAddresses`), a run's private sink
database (:func:`private_database`), and its Kafka nodes: where partitions live
(:func:`topic_layout`), whether a broker fault is recoverable
(:func:`broker_fault_problem`), and bringing a killed node back (:class:`BrokerControl`,
``_NodeRestart``)."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaException

from hailstorm import kafka
from hailstorm.dev.harness.wait import HarnessError, wait_for
from hailstorm.protocol.clock import Partition
from hailstorm.sinks.urls import is_postgres_url


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


# ------------------------------------------------------------------------------ Kafka nodes


MIN_KAFKA_NODES = 3
"""Kafka nodes a broker fault needs: with 3 (replication factor 3, ``min.insync.replicas=2``)
one node can die while every partition keeps a leader and acknowledged writes survive."""


class BrokerControl(Protocol):
    """Stops and starts the nodes of a Kafka cluster; a :class:`hailstorm.dev.services.DevStack`
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
