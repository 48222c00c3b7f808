"""What one Spark task runs (:class:`Assignment`): a processor instance and where everything
is. The driver makes one per processor; :mod:`hailstorm.runtime.task` hands it to the
processor's shell (:mod:`hailstorm.runtime.processor`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hailstorm.auth import SECRET_FILE_VAR, RunSecret
from hailstorm.runtime.data_plane import DataPlaneError

__all__ = ["Assignment"]


@dataclass(frozen=True)
class Assignment:
    """What one Spark task runs: a processor instance and where everything is."""

    topology_ref: str
    """Module path or dotted name of the topology (importable on the executor)."""
    name: str
    """The topology's name in ZooKeeper and in the snapshot store."""
    processor: str
    """The processor id (``spout:...``, ``bolt:...``, ``sink:...``)."""
    zk: str
    kafka: str
    snapshots: str
    """Root directory of the snapshot store (shared by every executor)."""
    kafka_config: str | None = None
    """Path of the librdkafka properties file (present on every executor's host): only the
    path travels with the task, the secrets in it stay in the file."""
    host: str = "127.0.0.1"
    """Address the data-plane listener binds to and advertises; ``auto``: the address the
    executor's host reaches ZooKeeper from (for clusters, :func:`route_address`)."""
    metrics_host: str = "127.0.0.1"
    """Address ``/metrics`` is served on (``none``: not served). Loopback by default: the
    endpoint is not authenticated."""
    session_timeout: float = 6.0
    register_timeout: float = 60.0
    io_timeout: float = 60.0
    """Longest blocking connect/send/queue wait before the processor gives up."""
    log_level: str = "INFO"
    database_url: str = field(default="", repr=False)
    """Sink tables' database when their Table names none (empty: SQLite, hailstorm.db). Left
    out of ``repr``: it may carry a password, and Spark prints failed tasks' arguments."""
    attempt: str | None = None
    """The driver's stage attempt this task belongs to (its reports carry it, see
    :data:`~hailstorm.protocol.layout.ATTEMPT_INFO`; None: a processor run without a
    driver)."""
    replaces: int | None = None
    """The pid of the incarnation before this one in the same Spark task, which ended
    (:mod:`hailstorm.runtime.supervisor`): its ``living`` node, if its session outlives
    it, is taken over at once. None: the first incarnation of the task."""
    standby: bool = False
    """Fork a warm standby beside each incarnation of a bolt that restarts alone
    (``hailstorm run --standby``, :mod:`hailstorm.runtime.standby`)."""
    secret: RunSecret | None = None
    """The run's data-plane secret (:mod:`hailstorm.auth`; its ``repr`` shows no key). None:
    read ``$HAILSTORM_SECRET_FILE`` on the executor."""

    def run_secret(self) -> RunSecret:
        """The data-plane secret; a processor never runs without one."""
        secret = self.secret or RunSecret.from_env()
        if secret is None:
            raise DataPlaneError(f"no data-plane secret: the driver hands one to every task, "
                                 f"or set ${SECRET_FILE_VAR}")
        return secret
