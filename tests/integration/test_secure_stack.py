"""The word count end to end on ``hailstorm dev up --secure``, its loopback traffic captured
with ``tcpdump`` from before the stack starts: no word of the produced text and no password
crosses any of the stack's connections (ZooKeeper, Kafka's client, inter-broker and
controller listeners, PostgreSQL) or the data plane in cleartext, every port the stack's
services and the processors listen on speaks TLS (checked by connecting to each), and
plaintext is refused; ``status`` and ``query --live`` work from the same configuration. One
small run on a stack of its own (the session's is plaintext).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from deployments import WORDCOUNT, deployed, hailstorm_command

from hailstorm import kafka
from hailstorm.auth import RunSecret, greet_peer
from hailstorm.dev.harness import Produced, StackAddresses, compare_with_model, produce
from hailstorm.dev.services import DevStack, StackState, free_port
from hailstorm.dev.services.tls import StackTls
from hailstorm.dev.services.zookeeper_server import client_context
from hailstorm.model import run_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TOPIC = "words"
WORDS = [f"cleartext{chr(97 + n // 26)}{chr(97 + n % 26)}leak" for n in range(40)]
"""The produced text's vocabulary: words of letters only (the word count's words, as the
bolts and the table hold them), long enough that none turns up by chance in the captured
ciphertext (15 bytes: about 2^-120 per place)."""
_SSL_REQUEST = struct.pack("!II", 8, 80877103)
"""PostgreSQL's SSLRequest: the server answers ``S`` and the TLS handshake follows."""


class Capture:
    """``tcpdump`` on the loopback interface, for TCP to or from ``ports``, into a pcap file
    (stopped by its pid)."""

    def __init__(self, path: Path, ports: set[int]) -> None:
        tcpdump = shutil.which("tcpdump")
        if tcpdump is None:
            pytest.fail("tcpdump is not installed (scripts/bootstrap.sh installs it)")
        self.path = path
        self.log = path.with_suffix(".log")
        match = " or ".join(f"port {p}" for p in sorted(ports))
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([tcpdump, "-i", "lo", "-n", "-s", "0", "-U", "-w",
                                          str(path), f"tcp and ({match})"],
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 20
        while b"listening on" not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tcpdump did not start: {self.log.read_text()[-500:]}")
            time.sleep(0.1)

    def stop(self) -> bytes:
        """Stop the capture; the captured bytes (pcap headers and every packet)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(20)
        return self.path.read_bytes()


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[DevStack, StackState, Capture]]:
    """A ``--secure`` stack, its main ports chosen first so that the capture runs from
    before its first byte."""
    state_dir = Path(tempfile.mkdtemp(prefix="hailstorm-secure-"))
    os.chmod(state_dir, 0o755)  # the 'postgres' user reaches its data directory
    ports = {"zk_port": free_port(), "kafka_port": free_port(), "postgres_port": free_port()}
    capture = Capture(tmp_path_factory.mktemp("capture") / "stack.pcap", set(ports.values()))
    stack = DevStack(state_dir, secure=True, startup_timeout=240, **ports)
    try:
        state = stack.up()
        yield stack, state, capture
    finally:
        capture.stop()
        stack.down(wipe=True)
        shutil.rmtree(state_dir, ignore_errors=True)


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (from /proc: its sockets in LISTEN)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _tls_version(port: int, context: ssl.SSLContext, *, postgres: bool = False) -> str | None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        if postgres:
            raw.sendall(_SSL_REQUEST)
            assert raw.recv(1) == b"S", f"PostgreSQL on {port} refused TLS"
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.version()


def _answers_plaintext(port: int) -> bytes:
    """What a ZooKeeper four-letter word in plaintext gets back (nothing from a TLS port)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        raw.sendall(b"ruok")
        try:
            return raw.recv(100)
        except (TimeoutError, ConnectionError):
            return b""


def test_the_word_count_on_the_secure_stack_sends_nothing_in_cleartext(
        secure_stack: tuple[DevStack, StackState, Capture], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    stack, state, stack_capture = secure_stack
    env = stack.env()
    for name, value in env.items():  # every client of this test, as 'dev env' would set
        monkeypatch.setenv(name, value)
    addresses = StackAddresses.from_env(env)
    kafka.recreate_topic(addresses.kafka, TOPIC, 2)
    partitions = kafka.partitions_of(addresses.kafka, TOPIC)
    rng = random.Random(45)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))).encode()
             for _ in range(3000)]
    produced = Produced(TOPIC)
    tls = StackTls(Path(state.state_dir) / "tls")
    with deployed(addresses, WORDCOUNT, tmp_path / "logs", negotiators=1) as run:
        run.start()
        run.wait_flowing(300)
        processors = {pid: report for pid, report in run.processors().items()
                      if "port" in report.info}
        plane_ports = {int(report.info["port"]) for report in processors.values()}
        plane = Capture(tmp_path / "plane.pcap", plane_ports)
        try:
            produce(addresses.kafka, produced, lines, partitions)
            committed = run.wait_committed(produced.clock(), 300)
            model = run_model(run.topology, produced.model_messages())
            comparison = compare_with_model(model, run.committed_bolt_states(committed),
                                            run.sink_tables())
            assert comparison.ok, comparison.first(5)
            # The commands read the same configuration from their environment.
            status, _ = hailstorm_command(addresses, "status", "--name", run.name, "--json",
                                          "--sample", "0")
            assert status.returncode == 0, status.stderr[-2000:]
            assert json.loads(status.stdout)["master"], status.stdout[:500]
            word = WORDS[0]
            live, _ = hailstorm_command(addresses, "query", str(WORDCOUNT), "counts", word,
                                        "--name", run.name, "--live")
            assert live.returncode == 0, live.stderr[-2000:]
            assert json.loads(live.stdout.splitlines()[0])["found"], live.stdout

            # Every port the services listen on speaks TLS 1.3, with the stack's CA.
            context = client_context(tls)
            service_ports = {name: _listening_ports(record.pid)
                             for name, record in state.services.items()}
            assert state.kafka is not None
            node = state.kafka.nodes[1]
            assert service_ports == {"zookeeper": {state.services["zookeeper"].port},
                                     "kafka-1": {node.client, node.internal, node.controller},
                                     "postgres": {state.services["postgres"].port}}
            for name, ports in service_ports.items():
                for port in ports:
                    assert _tls_version(port, context, postgres=name == "postgres") == \
                        "TLSv1.3", (name, port)
            # ... and every processor's data-plane port, to a holder of the run's CA only.
            secret = RunSecret.from_file(env["HAILSTORM_SECRET_FILE"])
            for pid, report in processors.items():
                sock = socket.create_connection(("127.0.0.1", int(report.info["port"])), 10)
                greet_peer(sock, secret, "query", pid, 10).close()
            # Plaintext is refused.
            assert _answers_plaintext(state.services["zookeeper"].port) != b"imok"
            plain = env["HAILSTORM_DATABASE_URL"].replace("sslmode=verify-full", "sslmode=disable")
            with pytest.raises(psycopg.OperationalError, match=r"pg_hba\.conf rejects"):
                psycopg.connect(plain, connect_timeout=5).close()
        finally:
            plane_bytes = plane.stop()
    stack_bytes = stack_capture.path.read_bytes()  # -U: every packet is written as it comes

    secrets = {"the database password": state.database_password,
               "ZooKeeper's digest password": state.zk_password,
               "Kafka's SCRAM password": state.kafka.password,
               "the run CA's key": secret.ca_key.splitlines()[1][:48].decode()}
    for label, captured in (("the stack's ports", stack_bytes), ("the data plane", plane_bytes)):
        assert captured.count(b"\x17\x03\x03") > 10, f"no TLS records captured on {label}"
        leaked = [word for word in WORDS if word.encode() in captured]
        assert not leaked, f"words in cleartext on {label}: {leaked}"
        shown = [what for what, value in secrets.items() if value.encode() in captured]
        assert not shown, f"in cleartext on {label}: {shown}"
