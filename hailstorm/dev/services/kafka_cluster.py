"""The dev stack's Apache Kafka in KRaft mode, from the official artifacts
(:mod:`hailstorm.dev.kafka_broker` fetches them from Maven Central once), run with the
machine's Java: one node, or a cluster of ``kafka_brokers`` nodes (each a broker and a
controller). With ``kafka_security="sasl_ssl"`` clients reach it through a SCRAM-SHA-256 +
TLS listener only, brokers and controllers each other over TLS, with the stack's CA
(:mod:`~hailstorm.dev.services.tls`); ``hailstorm dev env`` then names a client properties
file (mode 0600). The chaos harness stops and restarts single nodes.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from hailstorm.config import read_properties
from hailstorm.dev.kafka_broker import (
    LOG4J2_CONFIG,
    SCRAM_MECHANISM,
    KafkaSetupError,
    NodePorts,
    TlsFiles,
    ensure_kafka_libs,
    new_cluster_id,
    server_properties,
)
from hailstorm.dev.services.processes import (
    StackProcesses,
    await_ready,
    failure_line,
    free_port,
    java_binary,
    pid_alive,
    stop_pid,
)
from hailstorm.dev.services.state import (
    KAFKA_CLIENT_CONFIG,
    KAFKA_USER,
    TLS_DIR,
    DevStackError,
    Host,
    KafkaClusterState,
    ServiceRecord,
    StackState,
    kafka_node_name,
)
from hailstorm.dev.services.tls import make_stack_tls
from hailstorm.kafka import broker_answers
from hailstorm.runtime.spark_stage import C1_ONLY


class KafkaCluster(StackProcesses):
    """Starts, formats, stops and restarts the stack's Kafka nodes."""

    def _up_kafka(self, state: StackState) -> None:
        """Start every Kafka node that does not run; format the cluster on first start."""
        cluster = state.kafka
        if cluster is not None:
            if (len(cluster.nodes), cluster.security) != (self.kafka_brokers,
                                                          self.kafka_security):
                raise DevStackError(
                    f"the stack under {self.state_dir} has {len(cluster.nodes)} Kafka node(s) "
                    f"({cluster.security}); run 'hailstorm dev reset' to change "
                    "--brokers or --kafka-security (it deletes the stack's data)")
            records = [state.services.get(kafka_node_name(n)) for n in sorted(cluster.nodes)]
            if all(r is not None and pid_alive(r.pid, r.marker) for r in records):
                for record in records:
                    assert record is not None
                    self.progress(f"{record.name} already running "
                                  f"(pid {record.pid}, port {record.port})")
                return
        libs = self._kafka_libs()
        formatted = sorted(int(p.parent.parent.name.removeprefix("node-")) for p in
                           (self.state_dir / "kafka").glob("node-*/data/meta.properties"))
        fresh = not formatted
        if formatted and (cluster is None or formatted != sorted(cluster.nodes)):
            raise DevStackError(
                f"kafka: the nodes under {self.state_dir / 'kafka'} ({formatted}) are not the "
                "recorded cluster's; 'hailstorm dev reset' deletes them and starts afresh")
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
                await_ready(
                    state.services[kafka_node_name(min(cluster.nodes))],
                    lambda: broker_answers(state.kafka_bootstrap,
                                           expect_nodes=len(cluster.nodes),
                                           config=self._client_config(state)),
                    lambda: True, self.startup_timeout)
        except BaseException:  # broad: also on Ctrl-C; nodes started are killed, re-raised
            for record, _process in started:
                stop_pid(record.pid, None, sig=signal.SIGKILL, timeout=5)
            raise
        for node in sorted(cluster.nodes):
            self.progress(f"kafka node {node} ready on {state.address(kafka_node_name(node))}")

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
        internal listener). Asking the others proves nothing: they keep listing a killed
        node until it is fenced."""
        assert state.kafka is not None
        node = int(record.name.rsplit("-", 1)[1])
        ports = state.kafka.nodes[node]
        config = self._client_config(state, plaintext=True)
        own = ports.internal if ports.internal is not None else ports.client
        bootstrap = f"{state.kafka.host}:{own}"
        config["bootstrap.servers"] = bootstrap
        return await_ready(
            record,
            lambda: broker_answers(bootstrap, expect_node=node, config=config),
            lambda: process.poll() is None,
            timeout,
        )

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
        """Write every node's configuration and format its storage with the cluster id
        (only when no node has been formatted: what is under ``kafka/`` holds no log)."""
        base = self.state_dir / "kafka"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(mode=0o700)
        (base / "log4j2.yaml").write_text(LOG4J2_CONFIG)
        tls = None
        if cluster.security == "sasl_ssl":
            stack_tls = make_stack_tls(self.state_dir / TLS_DIR, [cluster.host])
            tls = TlsFiles(ca_cert=stack_tls.ca_cert, server_pem=stack_tls.server_pem)
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
                raise DevStackError(
                    f"kafka: formatting node {node} failed "
                    f"({failure_line(result.stderr or result.stdout)}); see {log}")

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
        """librdkafka settings that reach the cluster (the internal listener, TLS without
        SASL, when ``plaintext``: used to bootstrap SCRAM credentials)."""
        path = state.kafka_client_config
        if path is None:
            return {}
        if plaintext:
            assert state.kafka is not None
            internal = [p.internal for _, p in sorted(state.kafka.nodes.items())]
            host = state.kafka.host
            return {"bootstrap.servers": ",".join(f"{host}:{p}" for p in internal),
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(self.state_dir / TLS_DIR / "ca.pem")}
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
            # C2 compiled for 35-45% of a core through the broker's first minute (all of a
            # benchmark, and on 2 cores a share the processors need); C1 alone gave the same
            # throughput and a lower median latency, p99 unchanged (docs/performance.md).
            C1_ONLY,
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
