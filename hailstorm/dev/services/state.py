"""What a dev stack is made of and records: its services, where they run (:class:`Host`),
the Kafka cluster's layout, and the state file ``<state-dir>/stack.json``
(:class:`StackState`) with the ``HAILSTORM_*`` variables it exports. Pure: no process is
started or signalled here.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hailstorm.config import KAFKA_CONFIG_VAR
from hailstorm.dev.kafka_broker import ClusterLayout, NodePorts
from hailstorm.errors import ServiceError

LOOPBACK = "127.0.0.1"
STATE_FILE = "stack.json"
SERVICES = ("zookeeper", "kafka", "postgres")
"""The services of a stack, in start order; "kafka" is one or more nodes (``kafka-<id>``)."""
DATABASE = "hailstorm"
DATABASE_USER = "hailstorm"
#: The SCRAM user of a ``sasl_ssl`` dev cluster.
KAFKA_USER = "hailstorm"
KAFKA_CLIENT_CONFIG = "kafka-client.properties"
TLS_DIR = "tls"
"""A secure stack's CA and certificates (:mod:`hailstorm.dev.services.tls`)."""
PGPASS_FILE = "pgpass"
"""A secure stack's libpq password file (0600), which ``$PGPASSFILE`` names."""
RUN_SECRET_FILE = "run-secret.pem"
"""A secure stack's data-plane CA (``$HAILSTORM_SECRET_FILE``): only its path reaches Spark."""
#: ZooKeeper's digest user of a secure stack.
ZK_USER = "hailstorm"


class DevStackError(ServiceError, RuntimeError):
    """A dev-stack problem, phrased as one line that says what to do."""


NETNS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Host:
    """Where a service runs: the address it listens on and advertises, and the network
    namespace its process is started in (None: this process's own).

    The default is this machine's loopback. Tests place services on test hosts they make
    with network namespaces (:mod:`hailstorm.dev.netns`); the namespace must already exist.
    """

    address: str = LOOPBACK
    netns: str | None = None

    def __post_init__(self) -> None:
        try:
            ipaddress.IPv4Address(self.address)
        except ValueError:
            raise DevStackError(f"a host's address must be an IPv4 address, not "
                                f"{self.address!r}") from None
        if self.netns is not None and not NETNS_NAME.fullmatch(self.netns):
            raise DevStackError(f"bad network namespace name {self.netns!r}: letters, digits, "
                                "'_', '.', '-'")

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` as started on this host (``ip netns exec`` execs it: the pid stays)."""
        return argv if self.netns is None else ["ip", "netns", "exec", self.netns, *argv]


LOCAL = Host()


@dataclass
class ServiceRecord:
    """What ``up`` started for one service (one record per Kafka node)."""

    name: str
    port: int
    pid: int
    log: str
    #: A string the process's command line contains (guards against recycled pids).
    marker: str


def kafka_node_name(node: int) -> str:
    return f"kafka-{node}"


def placement_of(name: str) -> str:
    """The key of a service record in a stack's placement: every Kafka node is "kafka"."""
    return "kafka" if name.startswith("kafka-") else name


SPARK_MASTER = "spark-master"
SPARK_MASTER_VAR = "HAILSTORM_SPARK_MASTER"
"""The Spark master URL ``hailstorm run`` uses when ``--master`` is not given."""
DEFAULT_SPARK_CORES = 8
"""Task slots per dev worker: processors wait on sockets and ZooKeeper most of the time, so
a slot is not a core's worth of work."""


def spark_worker_name(worker: int) -> str:
    return f"spark-worker-{worker}"


@dataclass
class KafkaClusterState:
    """The dev Kafka cluster: its id, every node's ports, and how clients connect."""

    cluster_id: str
    security: str
    nodes: dict[int, NodePorts]
    password: str = ""
    host: str = LOOPBACK
    """The address every node listens on and advertises."""

    def layout(self) -> ClusterLayout:
        return ClusterLayout(self.host, dict(self.nodes), self.security)

    def to_jsonable(self) -> dict[str, object]:
        return {
            "cluster_id": self.cluster_id,
            "security": self.security,
            "password": self.password,
            "host": self.host,
            "nodes": {str(n): asdict(p) for n, p in self.nodes.items()},
        }

    @classmethod
    def from_jsonable(cls, data: dict[str, Any]) -> KafkaClusterState:
        return cls(
            cluster_id=data["cluster_id"],
            security=data["security"],
            password=data.get("password", ""),
            host=data.get("host", LOOPBACK),
            nodes={int(n): NodePorts(**p) for n, p in data["nodes"].items()},
        )


@dataclass
class StackState:
    """The content of ``<state-dir>/stack.json`` (mode 0600: it holds passwords)."""

    state_dir: str
    services: dict[str, ServiceRecord] = field(default_factory=dict)
    database_password: str = ""
    kafka: KafkaClusterState | None = None
    spark_workers: int = 0
    """Workers of the stack's Spark standalone cluster (0: no cluster)."""
    spark_cores: int = 0
    """Task slots each Spark worker offers."""
    secure: bool = False
    """``dev up --secure``: every service speaks TLS only and asks for a password
    (:meth:`env` then exports what every client needs for it)."""
    zk_password: str = ""
    """The digest password of ZooKeeper's user ``hailstorm`` (a secure stack's)."""
    hosts: dict[str, Host] = field(default_factory=dict)
    """Where services run that do not run on this machine's loopback: "zookeeper", "kafka"
    (every node), "postgres", "spark-master", "spark-worker-<n>" -> host."""

    def host(self, name: str) -> Host:
        """The host of service record ``name``."""
        return self.hosts.get(placement_of(name), LOCAL)

    def address(self, name: str) -> str:
        """``host:port`` of service record ``name``."""
        return f"{self.host(name).address}:{self.services[name].port}"

    def service_names(self) -> list[str]:
        """Every record name this stack has when complete, in start order."""
        nodes = sorted(self.kafka.nodes) if self.kafka else [1]
        spark = ([SPARK_MASTER, *(spark_worker_name(i) for i in range(1, self.spark_workers + 1))]
                 if self.spark_workers else [])
        return ["zookeeper", *(kafka_node_name(n) for n in nodes), "postgres", *spark]

    @property
    def spark_master_url(self) -> str | None:
        """``spark://<host>:<port>`` of the stack's cluster (None: it has none)."""
        return f"spark://{self.address(SPARK_MASTER)}" if SPARK_MASTER in self.services else None

    @property
    def kafka_bootstrap(self) -> str:
        assert self.kafka is not None, "the stack has no Kafka cluster"
        return self.kafka.layout().bootstrap()

    @property
    def kafka_client_config(self) -> Path | None:
        """The client properties file of a secured cluster (None: plaintext)."""
        if self.kafka is None or self.kafka.security == "plaintext":
            return None
        return Path(self.state_dir) / KAFKA_CLIENT_CONFIG

    def env(self) -> dict[str, str]:
        """The ``HAILSTORM_*`` variables every other command reads."""
        variables = {
            "HAILSTORM_ZK": self.address("zookeeper"),
            "HAILSTORM_KAFKA": self.kafka_bootstrap,
            "HAILSTORM_DATABASE_URL": self.database_url(DATABASE),
            "HAILSTORM_SNAPSHOTS": str(Path(self.state_dir) / "snapshots"),
        }
        if self.secure:  # no password in a variable but ZooKeeper's digest credentials
            tls = Path(self.state_dir) / TLS_DIR
            variables |= {
                "HAILSTORM_DATABASE_URL": self.database_url(DATABASE, password=False),
                "PGPASSFILE": str(Path(self.state_dir) / PGPASS_FILE),
                "HAILSTORM_ZK_TLS": str(tls),
                "HAILSTORM_ZK_AUTH": f"{ZK_USER}:{self.zk_password}",
                "HAILSTORM_SECRET_FILE": str(tls / RUN_SECRET_FILE),
            }
        if self.kafka_client_config is not None:
            variables[KAFKA_CONFIG_VAR] = str(self.kafka_client_config)
        if self.spark_master_url is not None:
            variables[SPARK_MASTER_VAR] = self.spark_master_url
        return variables

    def database_url(self, database: str, *, password: bool = True) -> str:
        """The URL of ``database`` on the stack's PostgreSQL server (without the password:
        libpq reads it from ``$PGPASSFILE``); a secure stack's asks for TLS with the
        server's certificate checked against the stack's CA (``sslmode=verify-full``)."""
        user = f"{DATABASE_USER}:{self.database_password}" if password else DATABASE_USER
        url = f"postgresql://{user}@{self.address('postgres')}/{database}"
        if self.secure:
            url += (f"?sslmode=verify-full&sslrootcert="
                    f"{Path(self.state_dir) / TLS_DIR / 'ca.pem'}")
        return url

    def to_json(self) -> str:
        return json.dumps(
            {
                "state_dir": self.state_dir,
                "database_password": self.database_password,
                "secure": self.secure,
                "zk_password": self.zk_password,
                "kafka": self.kafka.to_jsonable() if self.kafka else None,
                "spark_workers": self.spark_workers,
                "spark_cores": self.spark_cores,
                "hosts": {n: asdict(h) for n, h in self.hosts.items()},
                "services": {n: asdict(r) for n, r in self.services.items()},
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> StackState:
        data = json.loads(text)
        kafka = data.get("kafka")
        return cls(
            state_dir=data["state_dir"],
            database_password=data.get("database_password", ""),
            secure=bool(data.get("secure", False)),
            zk_password=data.get("zk_password", ""),
            kafka=KafkaClusterState.from_jsonable(kafka) if kafka else None,
            spark_workers=int(data.get("spark_workers", 0)),
            spark_cores=int(data.get("spark_cores", 0)),
            hosts={n: Host(**h) for n, h in data.get("hosts", {}).items()},
            services={n: ServiceRecord(**r) for n, r in data.get("services", {}).items()},
        )


@dataclass(frozen=True)
class ServiceStatus:
    """One row of ``hailstorm dev status``."""

    name: str
    port: int | None
    pid: int | None
    running: bool
    log: str | None


class StartAction(enum.Enum):
    """What ``up`` does with one service (see :func:`plan_start`)."""

    KEEP = "keep"
    """It runs: left alone."""
    RESTART = "restart"
    """It is stopped and its data is there: started again on that data."""
    CREATE = "create"
    """It has no data yet: made and started."""


@dataclass(frozen=True)
class ServiceOnDisk:
    """What ``up`` finds of one service: a record in the state file, a live process, data."""

    recorded: bool
    alive: bool
    has_data: bool


def plan_start(name: str, found: ServiceOnDisk) -> StartAction:
    """What ``up`` does with service ``name``; never a plan that deletes data.

    Data there without a record of it (the state file lost, or an ``up`` that failed
    half-way) is started on all the same; only ``dev down --wipe`` or ``dev reset`` removes
    a service's data.
    """
    if found.recorded and found.alive:
        return StartAction.KEEP
    return StartAction.RESTART if found.has_data else StartAction.CREATE


def plan_up(state_recorded: bool, found: Mapping[str, ServiceOnDisk]) -> dict[str, StartAction]:
    """:func:`plan_start` for every service; an error when there is data of a stack whose
    state file (and with it the database password and Kafka's cluster id) is gone."""
    orphaned = sorted(name for name, f in found.items() if f.has_data and not state_recorded)
    if orphaned:
        raise DevStackError(
            f"{', '.join(orphaned)} data of an earlier stack is here without its {STATE_FILE}: "
            "'hailstorm dev reset' deletes it and starts afresh"
        )
    return {name: plan_start(name, f) for name, f in found.items()}


def restart_port(recorded: int | None, configured: int, recorded_free: bool) -> int | None:
    """The port a restarted service listens on: the one asked for, else the one it had when
    that is free (clients keep their address), else None (pick a free one)."""
    if configured:
        return configured
    if recorded and recorded_free:
        return recorded
    return None
