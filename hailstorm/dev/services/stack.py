"""The dev stack's orchestration: :class:`DevStack` brings the services up in order (each
started only when it does not run yet), down by pid, and reports their status and the
``HAILSTORM_*`` variables; :func:`running_stack` holds one up for a ``with`` block. How each
service starts is a mixin of its own module (see :mod:`hailstorm.dev.services`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path

from hailstorm.dev.kafka_broker import Progress
from hailstorm.dev.services.kafka_cluster import KafkaCluster
from hailstorm.dev.services.postgres import PostgresServer
from hailstorm.dev.services.processes import pid_alive, stop_pid
from hailstorm.dev.services.spark_cluster import SparkCluster
from hailstorm.dev.services.state import (
    DATABASE_USER,
    DEFAULT_SPARK_CORES,
    KAFKA_CLIENT_CONFIG,
    PGPASS_FILE,
    RUN_SECRET_FILE,
    SERVICES,
    SPARK_MASTER,
    TLS_DIR,
    DevStackError,
    Host,
    ServiceOnDisk,
    ServiceStatus,
    StackState,
    StartAction,
    kafka_node_name,
    placement_of,
    plan_up,
    spark_worker_name,
)
from hailstorm.dev.services.tls import make_stack_tls, write_private
from hailstorm.dev.services.zookeeper_server import ZooKeeperServer


class DevStack(ZooKeeperServer, KafkaCluster, PostgresServer, SparkCluster):
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
        secure: bool = False,
    ) -> None:
        """``hosts`` places services on other hosts than this machine's loopback (see
        :attr:`StackState.hosts`); it is recorded by the first ``up`` and kept until
        ``down``. ``secure`` (implies Kafka's ``sasl_ssl``): every service speaks TLS only,
        with the stack's CA, and asks for a password (:meth:`_secure`)."""
        if secure:
            kafka_security = "sasl_ssl"
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
        self.secure = secure
        self.startup_timeout = startup_timeout
        self.progress: Progress = progress or (lambda _message: None)
        self.hosts = dict(hosts or {})
        self.created = False
        """Whether the last ``up`` made this stack (no state file was there)."""
        placeable = {"zookeeper", "kafka", "postgres", SPARK_MASTER,
                     *(spark_worker_name(i) for i in range(1, spark_workers + 1))}
        unknown = sorted(set(self.hosts) - placeable)
        if unknown:
            raise DevStackError(f"cannot place {', '.join(unknown)}: the services are "
                                f"{', '.join(sorted(placeable))}")

    def up(self) -> StackState:
        """Start whatever is not running yet; return the stack with its addresses.

        A service that stopped is started again on its own data, on the port it had when
        that is free (:func:`~hailstorm.dev.services.state.plan_up`); nothing is deleted here.
        """
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # its owner's only
        recorded = self.load()
        plan = plan_up(recorded is not None, {
            name: self._on_disk(recorded, name) for name in SERVICES})
        self.created = recorded is None
        state = recorded or StackState(state_dir=str(self.state_dir), hosts=self.hosts)
        if self.hosts and state.hosts != self.hosts:
            raise DevStackError(f"the stack under {self.state_dir} runs on other hosts; run "
                                "'hailstorm dev reset' to move it (it deletes its data)")
        if not state.database_password:
            state.database_password = secrets.token_urlsafe(18)
        if recorded is not None and recorded.secure != self.secure:
            raise DevStackError(f"the stack under {self.state_dir} was made "
                                f"{'with' if recorded.secure else 'without'} --secure; run "
                                "'hailstorm dev reset' to change that (it deletes its data)")
        if self.secure:
            self._secure(state)
        (self.state_dir / "snapshots").mkdir(mode=0o700, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)  # PostgreSQL (its own user) logs here
        self._kafka_libs()  # fail before starting anything when Kafka cannot be had
        try:
            for name in SERVICES:
                if name == "kafka":
                    self._up_kafka(state)
                    continue
                record = state.services.get(name)
                if plan[name] is StartAction.KEEP:
                    assert record is not None
                    self.progress(f"{name} already running (pid {record.pid}, port {record.port})")
                    continue
                again = plan[name] is StartAction.RESTART
                self.progress(f"starting {name}" + (" again on its data" if again else ""))
                state.services[name] = (self._start_zookeeper(state) if name == "zookeeper"
                                        else self._start_postgres(state, plan[name]))
                self._save(state)
                self.progress(f"{name} ready on {state.address(name)}")
            self._up_spark(state)
        except BaseException:  # broad: also on Ctrl-C; the state is saved, re-raised
            self._save(state)
            raise
        self._save(state)
        if state.secure:  # the port may have changed: libpq's password file follows it
            host, port = state.address("postgres").rsplit(":", 1)
            write_private(self.state_dir / PGPASS_FILE,
                          f"{host}:{port}:*:{DATABASE_USER}:{state.database_password}\n")
        return state

    def _secure(self, state: StackState) -> None:
        """A secure stack's secrets, made once: ZooKeeper's digest password, the stack's
        CA and certificates (:mod:`~hailstorm.dev.services.tls`), and the data plane's
        run CA file (``$HAILSTORM_SECRET_FILE``), all 0600 under the state directory."""
        from hailstorm.auth import write_secret_file

        state.secure = True
        if not state.zk_password:
            state.zk_password = secrets.token_urlsafe(18)
        addresses = sorted({state.host(name).address for name in SERVICES})
        tls = make_stack_tls(self.state_dir / TLS_DIR, addresses)
        run_secret = tls.directory / RUN_SECRET_FILE
        if not run_secret.exists():
            write_secret_file(run_secret)

    def _on_disk(self, state: StackState | None, name: str) -> ServiceOnDisk:
        """What is there of service ``name`` (every Kafka node for "kafka")."""
        records = ([r for n, r in state.services.items() if placement_of(n) == name]
                   if state else [])
        alive = bool(records) and all(pid_alive(r.pid, r.marker) for r in records)
        if name == "kafka":
            has_data = any((self.state_dir / "kafka").glob("node-*/data/meta.properties"))
        elif name == "zookeeper":
            has_data = (self.state_dir / "zookeeper" / "version-2").exists()
        else:
            has_data = (self.state_dir / name).exists()
        return ServiceOnDisk(recorded=bool(records), alive=alive, has_data=has_data)

    def down(self, *, wipe: bool = False) -> list[str]:
        """Stop every process ``up`` started here, by pid; with ``wipe``, also delete the
        services' data, the snapshots and the state file (logs stay). Without it the next
        ``up`` starts every service again on its data.

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
            if wipe:
                del state.services[name]
                self._save(state)
        if not wipe:
            return stopped
        for name in SERVICES:
            self._delete_data(name)
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

    def _delete_data(self, name: str) -> None:
        shutil.rmtree(self.state_dir / name, ignore_errors=True)
        if name == "zookeeper":
            (self.state_dir / "zoo.cfg").unlink(missing_ok=True)
        if name == "kafka":
            (self.state_dir / KAFKA_CLIENT_CONFIG).unlink(missing_ok=True)
        if name == "postgres":
            (self.state_dir / PGPASS_FILE).unlink(missing_ok=True)
            shutil.rmtree(self.state_dir / TLS_DIR, ignore_errors=True)  # the last to go


@contextlib.contextmanager
def running_stack(state_dir: str | os.PathLike[str], **options: object) -> Iterator[StackState]:
    """Bring a stack up for the duration of a ``with`` block, and always down afterwards
    (its data deleted when this call created the stack)."""
    stack = DevStack(state_dir, **options)  # type: ignore[arg-type]
    try:
        yield stack.up()
    finally:
        stack.down(wipe=stack.created)
