"""The embedded development stack: real ZooKeeper, Apache Kafka and PostgreSQL.

Every service listens on 127.0.0.1 only (unless the stack is given test hosts, see
:class:`Host`), on a free port unless one is configured, and keeps its data, log and pid under
one state directory. ``up`` is idempotent; ``down`` stops exactly
the processes ``up`` started, by pid (the recorded command line is checked first so a recycled
pid is never signalled), and removes their data.

- ZooKeeper: ``org.apache.zookeeper.server.ZooKeeperServerMain`` from the jars pyspark ships,
  run with the machine's Java.
- Kafka: Apache Kafka in KRaft mode from the official artifacts (:mod:`hailstorm.kafka_broker`
  fetches them from Maven Central once), run with the machine's Java: one node, or a cluster
  of ``kafka_brokers`` nodes (each a broker and a controller). With ``kafka_security=
  "sasl_ssl"`` clients reach it through a SCRAM-SHA-256 + TLS listener only, with a CA the
  stack makes; ``hailstorm dev env`` then names a client properties file (mode 0600).
- PostgreSQL: a private cluster made with the machine's ``initdb``/``pg_ctl``; when running as
  root they run as the ``postgres`` user, because initdb refuses root.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import ipaddress
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hailstorm.kafka import CONFIG_VAR as KAFKA_CONFIG_VAR
from hailstorm.kafka import broker_answers, read_properties
from hailstorm.kafka_broker import (
    LOG4J2_CONFIG,
    SCRAM_MECHANISM,
    ClusterLayout,
    KafkaSetupError,
    NodePorts,
    Progress,
    ensure_kafka_libs,
    make_dev_tls,
    new_cluster_id,
    server_properties,
)

LOOPBACK = "127.0.0.1"
STATE_FILE = "stack.json"
SERVICES = ("zookeeper", "kafka", "postgres")
"""The services of a stack, in start order; "kafka" is one or more nodes (``kafka-<id>``)."""
DATABASE = "hailstorm"
DATABASE_USER = "hailstorm"
#: The SCRAM user of a ``sasl_ssl`` dev cluster.
KAFKA_USER = "hailstorm"
KAFKA_CLIENT_CONFIG = "kafka-client.properties"


class DevStackError(RuntimeError):
    """A dev-stack problem, phrased as one line that says what to do."""


NETNS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Host:
    """Where a service runs: the address it listens on and advertises, and the network
    namespace its process is started in (None: this process's own).

    The default is this machine's loopback. Tests place services on test hosts they make
    with network namespaces (:mod:`hailstorm.netns`); the namespace must already exist.
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
        if self.kafka_client_config is not None:
            variables[KAFKA_CONFIG_VAR] = str(self.kafka_client_config)
        if self.spark_master_url is not None:
            variables[SPARK_MASTER_VAR] = self.spark_master_url
        return variables

    def database_url(self, database: str) -> str:
        """The URL of ``database`` on the stack's PostgreSQL server."""
        return (f"postgresql://{DATABASE_USER}:{self.database_password}@"
                f"{self.address('postgres')}/{database}")

    def to_json(self) -> str:
        return json.dumps(
            {
                "state_dir": self.state_dir,
                "database_password": self.database_password,
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


# --------------------------------------------------------------------------- processes


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """True when ``pid`` runs (not a zombie) and its command line contains ``marker``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state in ("Z", "X"):
        return False
    return marker is None or marker in cmdline


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child (no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop_pid(
    pid: int, marker: str | None, sig: int = signal.SIGTERM, timeout: float = 15.0
) -> None:
    """Stop one process we started: ``sig``, then SIGKILL after ``timeout`` seconds.

    Returns once the process has ended. A dying process loses its command line before it
    is gone (a JVM unmaps gigabytes first), so after the signal the wait is on the pid
    alone; the marker only guards the signals against a reused pid.
    """
    if not pid_alive(pid, marker):
        _reap(pid)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    if pid_alive(pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and pid_alive(pid):
        _reap(pid)
        time.sleep(0.05)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def ensure_port_free(service: str, port: int, flag: str) -> None:
    """Raise a clear error when a configured port is already taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise DevStackError(
                f"{service}: port {port} on {LOOPBACK} is already in use; "
                f"stop what holds it or pass {flag} 0 to pick a free port"
            ) from None


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def _wait_until(
    service: str,
    check: Callable[[], bool],
    running: Callable[[], bool],
    log: Path,
    timeout: float,
) -> None:
    """Poll ``check`` until it passes; error if ``running`` turns false or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running():
            raise DevStackError(f"{service} exited during start-up; see {log} ({_tail(log)})")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise DevStackError(f"{service} was not ready after {timeout:.0f}s; see {log} ({_tail(log)})")


def _await_ready(
    record: ServiceRecord,
    check: Callable[[], bool],
    running: Callable[[], bool],
    timeout: float,
) -> ServiceRecord:
    """Wait for a service we just started; stop it (by pid) if it never becomes ready."""
    try:
        _wait_until(record.name, check, running, Path(record.log), timeout)
    except BaseException:
        stop_pid(record.pid, None, sig=signal.SIGKILL, timeout=5)
        raise
    return record


# --------------------------------------------------------------------------- binaries


def java_binary() -> str:
    """The machine's ``java``, or a clear error."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise DevStackError(
            "java not found: ZooKeeper and Kafka need Java 17+ "
            "(apt-get install openjdk-17-jre-headless)"
        )
    return found


def pyspark_jars() -> Path:
    """The ``jars/`` directory inside the installed pyspark (it ships ZooKeeper)."""
    try:
        import pyspark
    except ImportError:
        raise DevStackError("pyspark is not installed: pip install 'pyspark>=4'") from None
    jars = Path(pyspark.__file__).parent / "jars"
    if not glob.glob(str(jars / "zookeeper-[0-9]*.jar")):
        raise DevStackError(
            f"no ZooKeeper jar under {jars}: reinstall pyspark (pip install 'pyspark>=4')"
        )
    return jars


def postgres_bin_dir() -> Path:
    """Directory holding ``initdb``/``pg_ctl`` (Debian keeps them off PATH)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, str(Path(found).resolve().parent))
    for directory in candidates:
        if Path(directory, "initdb").exists() and Path(directory, "pg_ctl").exists():
            return Path(directory)
    raise DevStackError("PostgreSQL server binaries not found: apt-get install postgresql")


# --------------------------------------------------------------------------- the stack


class DevStack:
    """Start, inspect and stop the embedded services under one state directory."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str] = ".hailstorm",
        *,
        zk_port: int = 0,
        kafka_port: int = 0,
        postgres_port: int = 0,
        kafka_brokers: int = 1,
        kafka_security: str = "plaintext",
        spark_workers: int = 0,
        spark_cores: int = DEFAULT_SPARK_CORES,
        startup_timeout: float = 60.0,
        progress: Progress | None = None,
        hosts: Mapping[str, Host] | None = None,
    ) -> None:
        """``hosts`` places services on other hosts than this machine's loopback (see
        :attr:`StackState.hosts`); it is recorded by the first ``up`` and kept until
        ``down``."""
        if spark_workers < 0 or spark_cores < 1:
            raise DevStackError(f"--spark-workers must be >= 0 and --spark-cores >= 1, not "
                                f"{spark_workers} and {spark_cores}")
        if kafka_brokers < 1:
            raise DevStackError(f"--brokers must be at least 1, not {kafka_brokers}")
        if kafka_security not in ("plaintext", "sasl_ssl"):
            raise DevStackError(
                f"unknown Kafka security {kafka_security!r}: use plaintext or sasl_ssl"
            )
        self.state_dir = Path(state_dir).absolute()
        self.ports = {"zookeeper": zk_port, "kafka": kafka_port, "postgres": postgres_port}
        self.kafka_brokers = kafka_brokers
        self.kafka_security = kafka_security
        self.spark_workers = spark_workers
        self.spark_cores = spark_cores
        self.startup_timeout = startup_timeout
        self.progress: Progress = progress or (lambda _message: None)
        self.hosts = dict(hosts or {})
        placeable = {"zookeeper", "kafka", "postgres", SPARK_MASTER,
                     *(spark_worker_name(i) for i in range(1, spark_workers + 1))}
        unknown = sorted(set(self.hosts) - placeable)
        if unknown:
            raise DevStackError(f"cannot place {', '.join(unknown)}: the services are "
                                f"{', '.join(sorted(placeable))}")

    # -- state file

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    def load(self) -> StackState | None:
        """The recorded stack, or None when ``up`` never ran here."""
        try:
            return StackState.from_json(self.state_file.read_text())
        except FileNotFoundError:
            return None

    def _save(self, state: StackState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(state.to_json())
        tmp.replace(self.state_file)

    # -- public operations

    def up(self) -> StackState:
        """Start whatever is not running yet; return the stack with its addresses.

        A Kafka node that stopped is started again on its own data (Kafka keeps its log);
        ZooKeeper and PostgreSQL start afresh.
        """
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # its owner's only
        state = self.load() or StackState(state_dir=str(self.state_dir), hosts=self.hosts)
        if self.hosts and state.hosts != self.hosts:
            raise DevStackError(f"the stack under {self.state_dir} runs on other hosts; run "
                                "'hailstorm dev down' before moving it")
        if not state.database_password:
            state.database_password = secrets.token_urlsafe(18)
        (self.state_dir / "snapshots").mkdir(mode=0o700, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)  # PostgreSQL (its own user) logs here
        self._kafka_libs()  # fail before starting anything when Kafka cannot be had
        try:
            for name in SERVICES:
                if name == "kafka":
                    self._up_kafka(state)
                    continue
                record = state.services.get(name)
                if record is not None and pid_alive(record.pid, record.marker):
                    self.progress(f"{name} already running (pid {record.pid}, port {record.port})")
                    continue
                if record is not None:
                    self._cleanup_data(name)
                self.progress(f"starting {name}")
                starter = self._start_zookeeper if name == "zookeeper" else self._start_postgres
                state.services[name] = starter(state)
                self._save(state)
                self.progress(f"{name} ready on {state.address(name)}")
            self._up_spark(state)
        except BaseException:
            self._save(state)
            raise
        self._save(state)
        return state

    def down(self) -> list[str]:
        """Stop every process ``up`` started here and remove its data (logs stay).

        Returns the names of the services that were running.
        """
        state = self.load()
        if state is None:
            return []
        stopped = []
        running_before = {name: pid_alive(r.pid, r.marker) for name, r in state.services.items()}
        # Every Kafka node at once: one stopped alone waits for a quorum that is leaving.
        for name, node in state.services.items():
            if name.startswith("kafka-") and running_before[name]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGTERM)
        for name in reversed(state.service_names()):
            record = state.services.get(name)
            if record is None:
                continue
            running = running_before[name]
            # PostgreSQL: SIGINT is the "fast" shutdown (rolls back clients, checkpoints).
            sig = signal.SIGINT if name == "postgres" else signal.SIGTERM
            stop_pid(record.pid, record.marker, sig=sig, timeout=30)
            if running:
                stopped.append(name)
                self.progress(f"stopped {name} (pid {record.pid})")
            del state.services[name]
            self._save(state)
        for name in SERVICES:
            self._cleanup_data(name)
        for worker in range(1, state.spark_workers + 1):
            shutil.rmtree(self.state_dir / spark_worker_name(worker), ignore_errors=True)
        # Snapshots name offsets of a broker that is gone now: never let them outlive it.
        shutil.rmtree(self.state_dir / "snapshots", ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        return stopped

    def status(self) -> list[ServiceStatus]:
        """One row per service (per Kafka node): port, pid, running."""
        state = self.load()
        names = state.service_names() if state else ["zookeeper", kafka_node_name(1), "postgres"]
        rows = []
        for name in names:
            record = state.services.get(name) if state else None
            if record is None:
                rows.append(ServiceStatus(name, None, None, False, None))
            else:
                alive = pid_alive(record.pid, record.marker)
                rows.append(ServiceStatus(name, record.port, record.pid, alive, record.log))
        return rows

    def env(self) -> dict[str, str]:
        """The ``HAILSTORM_*`` variables of a running stack (error when it is not up)."""
        state = self.load()
        if state is None or set(state.services) != set(state.service_names()):
            raise DevStackError(
                f"the dev stack under {self.state_dir} is not up: run 'hailstorm dev up' first"
            )
        return state.env()

    # -- the Spark standalone cluster

    def _up_spark(self, state: StackState) -> None:
        """Start the Spark master and workers that should run and do not (none unless
        asked for: ``spark_workers``)."""
        if self.spark_workers and not state.spark_workers:
            state.spark_workers, state.spark_cores = self.spark_workers, self.spark_cores
        if not state.spark_workers:
            return
        master = state.services.get(SPARK_MASTER)
        if master is None or not pid_alive(master.pid, master.marker):
            self.progress("starting the Spark master")
            state.services[SPARK_MASTER] = self._start_spark_master(state)
            self._save(state)
        url = state.spark_master_url
        assert url is not None
        for worker in range(1, state.spark_workers + 1):
            name = spark_worker_name(worker)
            record = state.services.get(name)
            if record is not None and pid_alive(record.pid, record.marker):
                continue
            self.progress(f"starting {name} ({state.spark_cores} task slots)")
            state.services[name] = self._start_spark_worker(state, worker, url)
            self._save(state)
        self.progress(f"Spark cluster ready at {url}: {state.spark_workers} workers, "
                      f"{state.spark_workers * state.spark_cores} task slots")

    def _spark_argv(self, main_class: str, *args: str) -> list[str]:
        return [java_binary(), "-Xmx512m", "-cp", f"{pyspark_jars()}/*", main_class, *args]

    def _spark_env(self, host: Host) -> dict[str, str]:
        import pyspark

        home = str(Path(pyspark.__file__).parent)  # pip's pyspark is a Spark home (bin/, jars/)
        # Without a RELEASE file Spark's launcher looks for build directories to learn the
        # Scala version when a worker starts an executor: pyspark 4 is built for 2.13.
        # SPARK_LOCAL_IP: the executors a worker starts bind and advertise its address too
        # (they would resolve this machine's host name otherwise).
        return dict(os.environ, SPARK_HOME=home, SPARK_SCALA_VERSION="2.13",
                    SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(self.state_dir / "logs"),
                    SPARK_LOCAL_IP=host.address)

    def _start_spark_master(self, state: StackState) -> ServiceRecord:
        host = state.host(SPARK_MASTER)
        port, ui = free_port(), free_port()
        argv = self._spark_argv("org.apache.spark.deploy.master.Master", "--host", host.address,
                                "--port", str(port), "--webui-port", str(ui))
        record, process = self._spawn(SPARK_MASTER, host, argv, port,
                                      marker=f"--webui-port {ui}", env=self._spark_env(host))
        return _await_ready(record, lambda: listens(port, host.address),
                            lambda: process.poll() is None, self.startup_timeout)

    def _start_spark_worker(self, state: StackState, worker: int, url: str) -> ServiceRecord:
        name = spark_worker_name(worker)
        host = state.host(name)
        work = self.state_dir / name
        work.mkdir(exist_ok=True)
        port, ui = free_port(), free_port()
        argv = self._spark_argv("org.apache.spark.deploy.worker.Worker", url,
                                "--host", host.address, "--port", str(port),
                                "--webui-port", str(ui), "--cores", str(state.spark_cores),
                                "--memory", "2g", "--work-dir", str(work))
        record, process = self._spawn(name, host, argv, port, marker=str(work),
                                      env=self._spark_env(host))
        log = Path(record.log)
        return _await_ready(
            record, lambda: "Successfully registered with master" in _tail(log, 200),
            lambda: process.poll() is None, self.startup_timeout)

    # -- Kafka nodes (the chaos harness stops and restarts them)

    def kafka_node_pid(self, node: int) -> int:
        """The pid of Kafka node ``node`` (error when it does not run)."""
        state = self.load()
        record = state.services.get(kafka_node_name(node)) if state else None
        if record is None or not pid_alive(record.pid, record.marker):
            raise DevStackError(f"Kafka node {node} does not run under {self.state_dir}")
        return record.pid

    def kill_kafka_node(self, node: int) -> int:
        """SIGKILL Kafka node ``node`` (its data stays); returns the pid that was killed."""
        state = self.load()
        record = state.services.get(kafka_node_name(node)) if state else None
        if record is None or not pid_alive(record.pid, record.marker):
            raise DevStackError(f"Kafka node {node} does not run under {self.state_dir}")
        stop_pid(record.pid, record.marker, sig=signal.SIGKILL, timeout=10)
        return record.pid

    def restart_kafka_node(self, node: int) -> ServiceRecord:
        """Start a stopped Kafka node again on its own data and wait until it serves."""
        state = self.load()
        if state is None or state.kafka is None or node not in state.kafka.nodes:
            raise DevStackError(f"no Kafka node {node} under {self.state_dir}")
        record = state.services.get(kafka_node_name(node))
        if record is not None and pid_alive(record.pid, record.marker):
            return record
        record, process = self._spawn_kafka_node(state, node)
        state.services[record.name] = record
        self._save(state)
        return self._await_kafka_node(state, record, process, self.startup_timeout)

    def _await_kafka_node(self, state: StackState, record: ServiceRecord,
                          process: subprocess.Popen[bytes], timeout: float) -> ServiceRecord:
        """Wait until this node itself answers a metadata request that lists it (through its
        plaintext listener). Asking the others proves nothing: they keep listing a killed
        node until it is fenced."""
        assert state.kafka is not None
        node = int(record.name.rsplit("-", 1)[1])
        ports = state.kafka.nodes[node]
        config = self._client_config(state, plaintext=True)
        own = ports.internal if ports.internal is not None else ports.client
        bootstrap = f"{state.kafka.host}:{own}"
        config["bootstrap.servers"] = bootstrap
        return _await_ready(
            record,
            lambda: broker_answers(bootstrap, expect_node=node, config=config),
            lambda: process.poll() is None,
            timeout,
        )

    # -- services

    def _port(self, name: str, flag: str) -> int:
        configured = self.ports[name]
        if configured:
            ensure_port_free(name, configured, flag)
            return configured
        return free_port()

    def _spawn(
        self,
        name: str,
        host: Host,
        argv: list[str],
        port: int,
        marker: str,
        env: dict[str, str] | None = None,
    ) -> tuple[ServiceRecord, subprocess.Popen[bytes]]:
        log = self.state_dir / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                host.command(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                start_new_session=True,
                env=env,
            )
        record = ServiceRecord(name=name, port=port, pid=process.pid, log=str(log), marker=marker)
        return record, process

    def _start_zookeeper(self, state: StackState) -> ServiceRecord:
        host = state.host("zookeeper")
        java = java_binary()
        jars = pyspark_jars()
        port = self._port("zookeeper", "--zk-port")
        data = self.state_dir / "zookeeper"
        data.mkdir(exist_ok=True)
        config = self.state_dir / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    f"clientPort={port}",
                    f"clientPortAddress={host.address}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr",
                    "maxSessionTimeout=60000",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        argv = [
            java,
            "-Xmx256m",
            "-Dlog4j2.level=WARN",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            f"{jars}/*",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        # Our own child: poll() (not /proc) tells whether it still runs, even before exec.
        record, process = self._spawn("zookeeper", host, argv, port, marker=str(config))
        return _await_ready(
            record,
            lambda: four_letter_word(port, b"ruok", host=host.address) == b"imok",
            lambda: process.poll() is None,
            self.startup_timeout,
        )

    def _up_kafka(self, state: StackState) -> None:
        """Start every Kafka node that does not run; format the cluster on first start."""
        cluster = state.kafka
        if cluster is not None:
            if (len(cluster.nodes), cluster.security) != (self.kafka_brokers,
                                                          self.kafka_security):
                raise DevStackError(
                    f"the stack under {self.state_dir} has {len(cluster.nodes)} Kafka node(s) "
                    f"({cluster.security}); run 'hailstorm dev down' before changing "
                    "--brokers or --kafka-security")
            records = [state.services.get(kafka_node_name(n)) for n in sorted(cluster.nodes)]
            if all(r is not None and pid_alive(r.pid, r.marker) for r in records):
                for record in records:
                    assert record is not None
                    self.progress(f"{record.name} already running "
                                  f"(pid {record.pid}, port {record.port})")
                return
        libs = self._kafka_libs()
        fresh = cluster is None or not all(
            (self._kafka_dir(n) / "data" / "meta.properties").exists() for n in cluster.nodes)
        if fresh:
            for name in [n for n in state.services if n.startswith("kafka-")]:
                record = state.services.pop(name)
                stop_pid(record.pid, record.marker, sig=signal.SIGKILL, timeout=5)
            cluster = self._new_kafka_cluster(state.host("kafka"))
            state.kafka = cluster
        assert cluster is not None
        started: list[tuple[ServiceRecord, subprocess.Popen[bytes]]] = []
        try:
            if fresh:
                self._format_kafka(cluster, libs)
            for node in sorted(cluster.nodes):
                running = state.services.get(kafka_node_name(node))
                if running is not None and pid_alive(running.pid, running.marker):
                    continue
                self.progress(f"starting kafka node {node}")
                record, process = self._spawn_kafka_node(state, node)
                state.services[record.name] = record
                started.append((record, process))
            self._save(state)
            # A KRaft quorum needs a majority of its voters: wait once every node runs.
            for record, process in started:
                self._await_kafka_node(state, record, process, self.startup_timeout)
            if fresh and cluster.security == "sasl_ssl":
                self._add_kafka_user(state)
            if state.kafka_client_config is not None:
                _await_ready(
                    state.services[kafka_node_name(min(cluster.nodes))],
                    lambda: broker_answers(state.kafka_bootstrap,
                                           expect_nodes=len(cluster.nodes),
                                           config=self._client_config(state)),
                    lambda: True, self.startup_timeout)
        except BaseException:
            for record, _process in started:
                stop_pid(record.pid, None, sig=signal.SIGKILL, timeout=5)
            raise
        for node in sorted(cluster.nodes):
            self.progress(f"kafka node {node} ready on {state.address(kafka_node_name(node))}")

    def _kafka_libs(self) -> Path:
        try:
            return ensure_kafka_libs(self.progress)
        except KafkaSetupError as exc:
            raise DevStackError(str(exc)) from None

    def _new_kafka_cluster(self, host: Host) -> KafkaClusterState:
        secured = self.kafka_security == "sasl_ssl"
        nodes = {}
        for node in range(1, self.kafka_brokers + 1):
            client = self._port("kafka", "--kafka-port") if node == 1 else free_port()
            nodes[node] = NodePorts(client=client, controller=free_port(),
                                    internal=free_port() if secured else None)
        return KafkaClusterState(
            cluster_id=new_cluster_id(), security=self.kafka_security, nodes=nodes,
            password=secrets.token_urlsafe(18) if secured else "", host=host.address,
        )

    def _kafka_dir(self, node: int) -> Path:
        return self.state_dir / "kafka" / f"node-{node}"

    def _format_kafka(self, cluster: KafkaClusterState, libs: Path) -> None:
        """Write every node's configuration and format its storage with the cluster id."""
        base = self.state_dir / "kafka"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(mode=0o700)
        (base / "log4j2.yaml").write_text(LOG4J2_CONFIG)
        tls = make_dev_tls(base / "tls", cluster.host) if cluster.security == "sasl_ssl" else None
        if tls is not None:
            self._write_client_config(cluster, tls.ca_cert)
        layout = cluster.layout()
        for node in sorted(cluster.nodes):
            directory = self._kafka_dir(node)
            directory.mkdir(parents=True)
            config = directory / "server.properties"
            config.write_text(server_properties(layout, node, directory / "data", tls))
            log = self.state_dir / "logs" / f"{kafka_node_name(node)}.log"
            result = subprocess.run(
                [java_binary(), "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format",
                 "-t", cluster.cluster_id, "-c", str(config)],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
            )
            with open(log, "a") as out:
                out.write(result.stdout + result.stderr)
            if result.returncode != 0:
                last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
                raise DevStackError(f"kafka: formatting node {node} failed ({last[0]}); "
                                    f"see {log}")

    def _write_client_config(self, cluster: KafkaClusterState, ca_cert: Path) -> None:
        path = self.state_dir / KAFKA_CLIENT_CONFIG
        lines = [
            "# Client properties of the dev stack's SASL_SSL Kafka listener (librdkafka names).",
            "security.protocol=SASL_SSL",
            f"sasl.mechanisms={SCRAM_MECHANISM}",
            f"sasl.username={KAFKA_USER}",
            f"sasl.password={cluster.password}",
            f"ssl.ca.location={ca_cert}",
        ]
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write("\n".join(lines) + "\n")

    def _client_config(self, state: StackState, plaintext: bool = False) -> dict[str, Any]:
        """librdkafka settings that reach the cluster (the internal listener when
        ``plaintext``, used to bootstrap SCRAM credentials)."""
        path = state.kafka_client_config
        if path is None:
            return {}
        if plaintext:
            assert state.kafka is not None
            internal = [p.internal for _, p in sorted(state.kafka.nodes.items())]
            host = state.kafka.host
            return {"bootstrap.servers": ",".join(f"{host}:{p}" for p in internal)}
        return dict(read_properties(path))

    def _add_kafka_user(self, state: StackState) -> None:
        """Create the SCRAM user through the internal listener (no password on any argv)."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        assert state.kafka is not None
        client = AdminClient(self._client_config(state, plaintext=True))
        upsert = UserScramCredentialUpsertion(
            KAFKA_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            state.kafka.password.encode())
        for future in client.alter_user_scram_credentials([upsert]).values():
            future.result(self.startup_timeout)

    def _spawn_kafka_node(
        self, state: StackState, node: int
    ) -> tuple[ServiceRecord, subprocess.Popen[bytes]]:
        cluster = state.kafka
        assert cluster is not None
        libs = self._kafka_libs()
        config = self._kafka_dir(node) / "server.properties"
        argv = [
            java_binary(),
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.state_dir / 'kafka' / 'log4j2.yaml'}",
            f"-Dkafka.logs.dir={self.state_dir / 'logs'}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(config),
        ]
        return self._spawn(kafka_node_name(node), state.host("kafka"), argv,
                           cluster.nodes[node].client, marker=str(config))

    def _start_postgres(self, state: StackState) -> ServiceRecord:
        bin_dir = postgres_bin_dir()
        port = self._port("postgres", "--postgres-port")
        host = state.host("postgres")
        run_as = _postgres_runner(self.state_dir, host)
        base = self.state_dir / "postgres"
        data = base / "data"
        log = self.state_dir / "logs" / "postgres.log"
        if base.exists():
            shutil.rmtree(base)
        base.mkdir(mode=0o700)
        run_as.own(base)
        run_as.own(log, create=True)
        password_file = base / "password"
        password_file.write_text(state.database_password + "\n")
        run_as.own(password_file)
        try:
            run_as.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    DATABASE_USER,
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={password_file}",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ],
                log,
            )
        finally:
            password_file.unlink(missing_ok=True)
        if host.address != LOOPBACK:  # initdb lets loopback clients in only
            with open(data / "pg_hba.conf", "a") as hba:
                hba.write("host all all samenet scram-sha-256\n")
        options = (
            f"-p {port} -k {base} -c listen_addresses={host.address} "
            "-c fsync=on -c max_connections=200 -c shared_buffers=64MB"
        )
        run_as.run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                str(int(self.startup_timeout)),
                "start",
            ],
            log,
        )
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        record = ServiceRecord("postgres", port, pid, str(log), marker=str(data))
        state.services["postgres"] = record
        url = state.database_url("postgres")
        return _await_ready(
            record,
            lambda: _create_database(url),
            lambda: pid_alive(pid, str(data)),
            self.startup_timeout,
        )

    def _cleanup_data(self, name: str) -> None:
        shutil.rmtree(self.state_dir / name, ignore_errors=True)
        if name == "zookeeper":
            (self.state_dir / "zoo.cfg").unlink(missing_ok=True)
        if name == "kafka":
            (self.state_dir / KAFKA_CLIENT_CONFIG).unlink(missing_ok=True)


# --------------------------------------------------------------------------- helpers


def listens(port: int, host: str = LOOPBACK) -> bool:
    """True when something accepts connections on ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def four_letter_word(port: int, word: bytes, timeout: float = 2.0,
                     host: str = LOOPBACK) -> bytes:
    """Send a ZooKeeper four-letter command and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _create_database(url: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    return True


@dataclass
class _Runner:
    """Runs PostgreSQL's tools as the right user (``postgres`` when we are root)."""

    user: pwd.struct_passwd | None
    host: Host = LOCAL

    def own(self, path: Path, create: bool = False) -> None:
        if create:
            path.touch(exist_ok=True)
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def run(self, argv: list[str], log: Path) -> None:
        tool = Path(argv[0]).name
        if self.user is not None:
            argv = ["runuser", "-u", self.user.pw_name, "--", *argv]
        result = subprocess.run(
            self.host.command(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            check=False,
        )
        with open(log, "a") as out:
            out.write(result.stdout + result.stderr)
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise DevStackError(f"postgres: {tool} failed ({last[0]}); see {log}")


def _postgres_runner(state_dir: Path, host: Host) -> _Runner:
    if os.geteuid() != 0:
        return _Runner(None, host)
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise DevStackError(
            "running as root but there is no 'postgres' user for initdb: "
            "apt-get install postgresql (it creates the user)"
        ) from None
    # The postgres user must be able to reach the state directory.
    for directory in [state_dir, *state_dir.parents]:
        mode = directory.stat().st_mode
        if not mode & 0o001:
            if directory == state_dir:
                directory.chmod(mode | 0o711)
                continue
            raise DevStackError(
                f"PostgreSQL runs as user 'postgres' (initdb refuses root) and cannot enter "
                f"{directory}: chmod o+x {directory} or pick another --state-dir"
            )
    return _Runner(user, host)


@contextlib.contextmanager
def running_stack(state_dir: str | os.PathLike[str], **options: object) -> Iterator[StackState]:
    """Bring a stack up for the duration of a ``with`` block, and always down afterwards."""
    stack = DevStack(state_dir, **options)  # type: ignore[arg-type]
    try:
        yield stack.up()
    finally:
        stack.down()
