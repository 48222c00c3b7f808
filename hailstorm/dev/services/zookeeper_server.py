"""The dev stack's ZooKeeper: ``org.apache.zookeeper.server.ZooKeeperServerMain`` from the jars
pyspark ships, run with the machine's Java; ready once it answers ``ruok``.
"""

from __future__ import annotations

import signal
import socket
import ssl

from hailstorm.dev.services.processes import (
    StackProcesses,
    await_ready,
    java_binary,
    pid_alive,
    pyspark_jars,
    stop_pid,
)
from hailstorm.dev.services.state import (
    LOOPBACK,
    TLS_DIR,
    DevStackError,
    ServiceRecord,
    StackState,
)
from hailstorm.dev.services.tls import StackTls, make_stack_tls
from hailstorm.runtime.spark_stage import C1_ONLY


class ZooKeeperServer(StackProcesses):
    """Starts the stack's ZooKeeper; stops and restarts it for outage tests."""

    def stop_zookeeper(self) -> int:
        """SIGKILL the stack's ZooKeeper (its data stays: sessions and znodes come back
        with it); returns the pid."""
        state = self.load()
        record = None if state is None else state.services.get("zookeeper")
        if record is None or not pid_alive(record.pid, record.marker):
            raise DevStackError(f"ZooKeeper does not run under {self.state_dir}")
        stop_pid(record.pid, record.marker, sig=signal.SIGKILL, timeout=10)
        return record.pid

    def restart_zookeeper(self) -> ServiceRecord:
        """Start the stack's ZooKeeper again on its data and port; wait until it serves."""
        state = self.load()
        if state is None or "zookeeper" not in state.services:
            raise DevStackError(f"no ZooKeeper under {self.state_dir}")
        state.services["zookeeper"] = self._start_zookeeper(state)
        self._save(state)
        return state.services["zookeeper"]

    def _start_zookeeper(self, state: StackState) -> ServiceRecord:
        """Start ZooKeeper on its data directory (made when missing), on the port it had
        when that is free."""
        host = state.host("zookeeper")
        java = java_binary()
        jars = pyspark_jars()
        previous = state.services.get("zookeeper")
        port = self._port("zookeeper", "--zk-port", recorded=previous.port if previous else None)
        data = self.state_dir / "zookeeper"  # kept: a restart serves the same znodes
        data.mkdir(exist_ok=True)
        config = self.state_dir / "zoo.cfg"
        tls = make_stack_tls(self.state_dir / TLS_DIR, [host.address]) if state.secure else None
        listener = ([f"clientPort={port}", f"clientPortAddress={host.address}"] if tls is None
                    else secure_listener(tls, port, host.address))
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    *listener,
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
            C1_ONLY,  # a small request rate: JIT compiling it at C2 cost more CPU than it saved
            "-Dlog4j2.level=WARN",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            f"{jars}/*",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        # Our own child: poll() (not /proc) tells whether it still runs, even before exec.
        record, process = self._spawn("zookeeper", host, argv, port, marker=str(config))
        return await_ready(
            record,
            lambda: four_letter_word(port, b"ruok", host=host.address, tls=tls) == b"imok",
            lambda: process.poll() is None,
            self.startup_timeout,
        )


def secure_listener(tls: StackTls, port: int, address: str) -> list[str]:
    """``zoo.cfg`` lines of a TLS-only listener (no plaintext port): Netty, the stack's
    certificate, and a client certificate of the stack's CA required of every client.
    (ZooKeeper does not check a client certificate's name: a certificate of the CA is the
    credential; the nodes are guarded by digest ACLs on top.)"""
    return [
        f"secureClientPort={port}",
        f"secureClientPortAddress={address}",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        f"ssl.keyStore.location={tls.server_pem}",
        "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={tls.ca_cert}",
        "ssl.trustStore.type=PEM",
        "ssl.clientAuth=need",
        "ssl.hostnameVerification=false",
    ]


def client_context(tls: StackTls) -> ssl.SSLContext:
    """A TLS client context for the stack's services: its CA only, its client certificate."""
    context = ssl.create_default_context(cafile=str(tls.ca_cert))
    context.load_cert_chain(str(tls.client_cert), str(tls.client_key))
    return context


def four_letter_word(port: int, word: bytes, timeout: float = 2.0,
                     host: str = LOOPBACK, tls: StackTls | None = None) -> bytes:
    """Send a ZooKeeper four-letter command and return the answer (over TLS with the
    stack's client certificate when ``tls`` is given)."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        s = raw if tls is None else client_context(tls).wrap_socket(raw, server_hostname=host)
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)
