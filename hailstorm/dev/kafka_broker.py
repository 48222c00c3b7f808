"""Apache Kafka for the dev stack: the pinned artifacts, KRaft node configuration, dev TLS.

The broker is the official ``org.apache.kafka:kafka_2.13`` artifact and its runtime
dependencies, fetched from Maven Central with the machine's Maven into a cache outside the
repository (``$HAILSTORM_CACHE``, else ``~/.cache/hailstorm``), and run with the machine's
Java as ``kafka.Kafka`` after ``kafka.tools.StorageTool format``. Every node is a combined
broker and KRaft controller; a cluster of N nodes has N voters.

Rendering a node's ``server.properties`` is pure (:func:`server_properties`); the rest is a
thin wrapper around ``mvn``. A ``sasl_ssl`` cluster has no plaintext port: clients use
SCRAM over TLS, brokers and controllers TLS between themselves.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hailstorm.config import cache_dir
from hailstorm.errors import ServiceError

#: The Kafka release the dev stack, the tests and docker-compose.yml run.
KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
#: Kafka logs through SLF4J 1.7; this binding sends it to log4j2, which Kafka already ships.
LOG4J_VERSION = "2.24.3"

#: The SASL mechanism of the dev stack's secured listener.
SCRAM_MECHANISM = "SCRAM-SHA-256"

Progress = Callable[[str], None]


class KafkaSetupError(ServiceError, RuntimeError):
    """Kafka's artifacts or tools are missing; the message says what to do."""


def kafka_libs_dir() -> Path:
    return cache_dir() / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}" / "libs"


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>hailstorm.dev</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


_DOWNLOADED = re.compile(
    r"Downloaded from \S+: \S*/(?P<name>[^/\s]+) \((?P<size>[\d.]+) (?P<unit>[kMG]?B)")
_UNITS = {"B": 1, "kB": 1_000, "MB": 1_000_000, "GB": 1_000_000_000}


@dataclass
class FetchProgress:
    """What Maven downloaded so far, read from its output lines: a progress line at most
    every ``every`` seconds (a first fetch takes minutes and is silent otherwise)."""

    every: float = 5.0
    files: int = 0
    size: float = 0.0
    """Bytes downloaded."""
    said: float | None = None
    """When the last progress line was given."""

    def observe(self, line: str, now: float) -> str | None:
        """The progress line to show after Maven printed ``line`` at ``now``, if one is due."""
        match = _DOWNLOADED.search(line)
        if match is None:
            return None
        self.files += 1
        self.size += float(match["size"]) * _UNITS[match["unit"]]
        if self.said is not None and now - self.said < self.every:
            return None
        self.said = now
        return (f"fetching Apache Kafka {KAFKA_VERSION}: {self.files} downloaded, "
                f"{self.size / 1e6:.1f} MB so far (the latest {match['name']})")


def ensure_kafka_libs(progress: Progress | None = None) -> Path:
    """The directory of Kafka's jars, fetched with Maven on first use (then cached)."""
    libs = kafka_libs_dir()
    stamp = libs / ".complete"
    if stamp.exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaSetupError(
            "mvn not found: the dev stack fetches Apache Kafka from Maven Central with Maven "
            "(apt-get install maven)"
        )
    if progress:
        progress(f"fetching Apache Kafka {KAFKA_VERSION} from Maven Central into {libs.parent}")
    libs.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=libs.parent, prefix=".fetch-") as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(scala=SCALA_VERSION, kafka=KAFKA_VERSION, log4j=LOG4J_VERSION))
        fetched = Path(work) / "libs"
        output: list[str] = []
        fetch = FetchProgress()
        with subprocess.Popen(
            [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={fetched}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        ) as maven:
            assert maven.stdout is not None
            for line in maven.stdout:
                output.append(line)
                said = fetch.observe(line, time.monotonic())
                if said and progress:
                    progress(said)
        if maven.returncode != 0 or not (fetched / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
                                         ).exists():
            lines = [line for line in output if "ERROR" in line] or output
            detail = lines[0].strip() if lines else f"exit {maven.returncode}"
            raise KafkaSetupError(
                f"fetching Apache Kafka {KAFKA_VERSION} with Maven failed ({detail}); "
                "check that Maven Central is reachable and run 'make bootstrap' again"
            )
        (fetched / ".complete").write_text(KAFKA_VERSION + "\n")
        shutil.rmtree(libs, ignore_errors=True)
        fetched.rename(libs)
    return libs


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding, never starting
    with ``-`` (Kafka's own ``Uuid.randomUuid`` draws again then: the storage tool would read
    such an id as an option; about one id in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


# --------------------------------------------------------------------------- node config


@dataclass(frozen=True)
class NodePorts:
    """The ports of one KRaft node on the loopback address."""

    client: int
    controller: int
    #: Inter-broker listener, set only when clients use a secured listener.
    internal: int | None = None


@dataclass(frozen=True)
class ClusterLayout:
    """Every node's ports and the cluster-wide settings of a dev cluster."""

    host: str
    nodes: dict[int, NodePorts]
    #: "plaintext", or "sasl_ssl" for a SCRAM + TLS client listener.
    security: str = "plaintext"

    @property
    def replication(self) -> int:
        return min(3, len(self.nodes))

    @property
    def min_insync(self) -> int:
        return 2 if self.replication >= 3 else 1

    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{p.client}" for _, p in sorted(self.nodes.items()))

    def voters(self) -> str:
        return ",".join(
            f"{node}@{self.host}:{p.controller}" for node, p in sorted(self.nodes.items())
        )


def server_properties(layout: ClusterLayout, node: int, data_dir: Path,
                      tls: TlsFiles | None = None) -> str:
    """The ``server.properties`` of ``node`` in ``layout`` (pure)."""
    ports = layout.nodes[node]
    host = layout.host
    secured = layout.security == "sasl_ssl"
    if secured and (ports.internal is None or tls is None):
        raise ValueError("a sasl_ssl node needs an internal port and TLS files")
    if secured:
        listeners = (f"CLIENT://{host}:{ports.client},INTERNAL://{host}:{ports.internal},"
                     f"CONTROLLER://{host}:{ports.controller}")
        advertised = f"CLIENT://{host}:{ports.client},INTERNAL://{host}:{ports.internal}"
        protocols = "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"  # no plaintext port
        inter_broker = "INTERNAL"
    else:
        listeners = f"CLIENT://{host}:{ports.client},CONTROLLER://{host}:{ports.controller}"
        advertised = f"CLIENT://{host}:{ports.client}"
        protocols = "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        inter_broker = "CLIENT"
    replication = layout.replication
    lines = [
        "process.roles=broker,controller",
        f"node.id={node}",
        f"controller.quorum.voters={layout.voters()}",
        f"listeners={listeners}",
        f"advertised.listeners={advertised}",
        f"listener.security.protocol.map={protocols}",
        "controller.listener.names=CONTROLLER",
        f"inter.broker.listener.name={inter_broker}",
        f"log.dirs={data_dir}",
        # Topics hailstorm creates take the broker defaults (replication_factor=-1).
        "num.partitions=1",
        f"default.replication.factor={replication}",
        f"min.insync.replicas={layout.min_insync}",
        f"offsets.topic.replication.factor={replication}",
        "offsets.topic.num.partitions=4",
        f"transaction.state.log.replication.factor={replication}",
        f"transaction.state.log.min.isr={layout.min_insync}",
        "transaction.state.log.num.partitions=4",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        # Small segments so that retention and delete_records act on dev-sized data.
        "log.segment.bytes=16777216",
        "log.retention.check.interval.ms=5000",
        "unclean.leader.election.enable=false",
        "delete.topic.enable=true",
    ]
    if secured and tls is not None:
        lines += [
            f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
            "listener.name.client.scram-sha-256.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={tls.server_pem}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={tls.ca_cert}",
            "ssl.client.auth=none",
        ]
    return "\n".join(lines) + "\n"


LOG4J2_CONFIG = """\
Configuration:
  status: warn
  Appenders:
    Console:
      name: stdout
      target: SYSTEM_OUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: stdout
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
      - name: kafka.server.BrokerServer
        level: INFO
      - name: kafka.log.LogManager
        level: INFO
"""


# --------------------------------------------------------------------------- dev TLS


@dataclass(frozen=True)
class TlsFiles:
    """The stack's CA (:mod:`hailstorm.dev.services.tls`), and the broker's key and
    certificate signed by it."""

    ca_cert: Path
    #: The broker's PKCS#8 private key followed by its certificate (Kafka's PEM keystore).
    server_pem: Path
