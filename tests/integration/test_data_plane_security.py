"""The data plane's trust boundary on a running word count: a stranger who can reach a bolt's
or a sink's port cannot run code in it, cannot forge rows into an exactly-once table, and
cannot make the topology restart, whether it sends a crafted pickle, a forged HELLO with
data, nothing at all, a TLS certificate of no run or of another run, or a handshake too
slow or too many at once."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deployments import WORDCOUNT, deployed

from hailstorm import kafka
from hailstorm.auth import RunSecret
from hailstorm.dev.harness import (
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.model import run_model
from hailstorm.protocol.wire import DataBatch, Hello, encode_frames
from hailstorm.runtime.data_plane import HANDSHAKE_TIMEOUT, MAX_HANDSHAKES

pytestmark = pytest.mark.integration

TOPIC = "words"


class _RunsCode:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture()
def run(stack_env: dict[str, str], tmp_path: Path) -> Iterator[TopologyRun]:
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], TOPIC, 2)
    with deployed(StackAddresses.from_env(stack_env), WORDCOUNT, tmp_path / "logs") as run:
        yield run


def _send(address: tuple[str, int], data: bytes) -> None:
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(data)
        sock.settimeout(HANDSHAKE_TIMEOUT + 5)
        try:
            while sock.recv(4096):  # until the listener closes it
                pass
        except OSError:
            pass


TLS_RECORD = b"\x16\x03\x01"
"""The first bytes of a TLS handshake record (a ClientHello follows)."""


def _send_tls(address: tuple[str, int], chain: Path, data: bytes) -> None:
    """Connect with TLS presenting ``chain`` (a certificate not of the run), trusting anyone,
    and send ``data``; the listener refuses the handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(chain)
    with socket.create_connection(address, timeout=5) as sock, \
            contextlib.suppress(OSError), context.wrap_socket(sock) as tls:
        tls.sendall(data)
        tls.settimeout(HANDSHAKE_TIMEOUT + 5)
        while tls.recv(4096):
            pass


def _refused(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                  timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("hailstorm_refused_connections_total{"))


def test_strangers_cannot_run_code_forge_rows_or_restart_the_topology(
        run: TopologyRun, tmp_path: Path) -> None:
    partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    produce(run.stack.kafka, produced, wordcount_lines(10_000, seed=3), partitions)
    run.start()
    wait_for("a first commit", run.committed, 240, run.alive)
    master = run.master()
    assert master is not None
    epoch = master.state.epoch
    listening = {ident: r.info for ident, r in run.processors().items() if "port" in r.info}
    assert {i.split(":")[0] for i in listening} == {"bolt", "sink"}
    marker = tmp_path / "code-ran"
    exploit = DataBatch.of([0], [1], [_RunsCode(marker)])
    forged_row = DataBatch.of([0], [10**9], [("forgedword", 424242)])
    other = RunSecret.generate()
    self_signed, other_run = tmp_path / "self-signed.pem", tmp_path / "other-run.pem"
    self_signed.write_bytes(other.to_pem())  # a CA certificate signs itself
    other_run.write_bytes(b"".join(other.mint("spout:lines:words:0")))
    before = {ident: _refused(int(info["metrics"])) for ident, info in listening.items()}
    for ident, info in listening.items():
        address = (str(info["host"]), int(info["port"]))
        # A crafted pickle straight away, then after a forged HELLO of a real upstream.
        _send(address, encode_frames([exploit]))
        upstream = "bolt:counts:0" if ident.startswith("sink:") else "spout:lines:words:0"
        _send(address, encode_frames([Hello(upstream, epoch, ident), forged_row, exploit]))
        # A handshake's first bytes with the pickle behind them; connect-and-close.
        _send(address, TLS_RECORD + encode_frames([exploit]))
        socket.create_connection(address, timeout=5).close()
        # TLS with a self-signed certificate, then one of another run's CA, then the pickle.
        _send_tls(address, self_signed, encode_frames([exploit]))
        _send_tls(address, other_run, encode_frames([exploit]))
    # Slow-loris and a flood on one sink port: the listener closes each within its bound.
    sink = next(i for i in listening if i.startswith("sink:"))
    address = (str(listening[sink]["host"]), int(listening[sink]["port"]))
    flood = [socket.create_connection(address, timeout=5) for _ in range(MAX_HANDSHAKES + 8)]
    for sock in flood:
        sock.sendall(TLS_RECORD[:2])
    started = time.monotonic()
    for sock in flood:
        sock.settimeout(HANDSHAKE_TIMEOUT + 10)
        with contextlib.suppress(ConnectionResetError):  # a reset is closed too
            assert sock.recv(1) == b""  # closed by the listener, not left hanging
        sock.close()
    assert time.monotonic() - started < HANDSHAKE_TIMEOUT + 10

    # The topology keeps flowing and committing, exactly the model's table.
    produce(run.stack.kafka, produced, wordcount_lines(10_000, seed=4), partitions)
    target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
    committed = run.wait_committed(target, 240)
    produced.fill_before(run.stack.kafka, committed.clock)
    model = run_model(run.topology, produced.model_messages())
    tables = run.sink_tables()
    assert ("forgedword",) not in tables["word_counts"]
    comparison = compare_with_model(model, run.committed_bolt_states(committed), tables)
    assert comparison.ok, comparison.first(5)
    assert not marker.exists(), "a stranger's pickle ran code in a processor"
    run.check_recoveries()  # no restart at all: no stranger failed a processor
    after = {ident: _refused(int(info["metrics"])) for ident, info in listening.items()}
    for ident in listening:  # every connection above was refused and counted
        assert after[ident] - before[ident] >= 6, (ident, before[ident], after[ident])
    assert after[sink] - before[sink] >= 6 + len(flood)
    assert "refused a data-plane connection" in run.log("driver")
