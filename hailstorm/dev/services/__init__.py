"""The embedded development stack: real ZooKeeper, Apache Kafka and PostgreSQL.

Every service listens on 127.0.0.1 only (unless the stack is given test hosts, see
:class:`Host`), on a free port unless one is configured, and keeps its data, log and pid under
one state directory. ``up`` is idempotent and starts a stopped service again on its data;
``down`` stops exactly the processes ``up`` started, by pid (the recorded command line is
checked first so a recycled pid is never signalled), and removes their data only with
``wipe``.

A package, one concern per module; the names below are its interface (import them from
``hailstorm.dev.services``):

* :mod:`~hailstorm.dev.services.state` — the services, hosts and the state file (pure);
* :mod:`~hailstorm.dev.services.processes` — pids, ports, waiting for readiness, Java, and the
  state file and spawning every service shares;
* :mod:`~hailstorm.dev.services.zookeeper_server`, :mod:`~hailstorm.dev.services.kafka_cluster`,
  :mod:`~hailstorm.dev.services.postgres`, :mod:`~hailstorm.dev.services.spark_cluster` — how each
  service is started (and Kafka nodes stopped and restarted);
* :mod:`~hailstorm.dev.services.stack` — :class:`DevStack`, the orchestration.
"""

from __future__ import annotations

from hailstorm.dev.services.postgres import postgres_bin_dir
from hailstorm.dev.services.processes import (
    ensure_port_free,
    failure_line,
    free_port,
    java_binary,
    listens,
    pid_alive,
    pyspark_jars,
    stat_fields,
    stop_pid,
)
from hailstorm.dev.services.stack import DevStack, running_stack
from hailstorm.dev.services.state import (
    DATABASE,
    DATABASE_USER,
    DEFAULT_SPARK_CORES,
    KAFKA_CLIENT_CONFIG,
    KAFKA_USER,
    LOCAL,
    LOOPBACK,
    NETNS_NAME,
    SERVICES,
    SPARK_MASTER,
    SPARK_MASTER_VAR,
    STATE_FILE,
    DevStackError,
    Host,
    KafkaClusterState,
    ServiceRecord,
    ServiceStatus,
    StackState,
    kafka_node_name,
    placement_of,
    spark_worker_name,
)
from hailstorm.dev.services.zookeeper_server import four_letter_word

__all__ = [
    "DATABASE",
    "DATABASE_USER",
    "DEFAULT_SPARK_CORES",
    "KAFKA_CLIENT_CONFIG",
    "KAFKA_USER",
    "LOCAL",
    "LOOPBACK",
    "NETNS_NAME",
    "SERVICES",
    "SPARK_MASTER",
    "SPARK_MASTER_VAR",
    "STATE_FILE",
    "DevStack",
    "DevStackError",
    "Host",
    "KafkaClusterState",
    "ServiceRecord",
    "ServiceStatus",
    "StackState",
    "ensure_port_free",
    "failure_line",
    "four_letter_word",
    "free_port",
    "java_binary",
    "kafka_node_name",
    "listens",
    "pid_alive",
    "placement_of",
    "postgres_bin_dir",
    "pyspark_jars",
    "running_stack",
    "spark_worker_name",
    "stat_fields",
    "stop_pid",
]
