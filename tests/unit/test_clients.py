"""Clients never fail a processor (issue 40): what a listener makes of an authenticated
connection before it is a peer (hailstorm.runtime.clients, pure), and the gate that applies
it to real sockets after the real handshake (hailstorm.runtime.gate): every misbehaviour is
refused, counted by kind, and answered with the reason where the stream allows."""

from __future__ import annotations

import os
import pickle
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.auth import QUERY_IDENTITY, RunSecret, greet_peer
from hailstorm.metrics import ProcessorMetrics, parse_samples, render
from hailstorm.protocol.wire import (
    MAX_REQUEST_SIZE,
    Answer,
    DataBatch,
    FrameError,
    FrameKind,
    FrameReader,
    FrameTooLargeError,
    Hello,
    Query,
    StreamEndedError,
    encode_frame,
    encode_frames,
    recv_frames,
)
from hailstorm.runtime.clients import (
    REFUSAL_KINDS,
    Refusal,
    RefusalLog,
    first_request,
    hello_refusal,
    refusal_of,
)
from hailstorm.runtime.gate import Gate

SECRET = RunSecret.generate()
ME = "bolt:counts:0"


# ------------------------------------------------------------------ pure classification


@pytest.mark.parametrize(("exc", "kind", "answerable"), [
    (TimeoutError("timed out"), "stalled", True),
    (ConnectionResetError("reset"), "closed", False),
    (BrokenPipeError("pipe"), "closed", False),
    (StreamEndedError("stream ended inside a frame"), "closed", False),
    (ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC]"), "closed", False),
    (FrameTooLargeError("incoming frame announces..."), "oversized", True),
    (FrameError("corrupted QUERY frame: x", FrameKind.QUERY), "malformed_query", True),
    (FrameError("corrupted HELLO frame: x", FrameKind.HELLO), "garbled", True),
    (FrameError("unknown frame kind 255"), "garbled", True),
    (KeyError("bolt"), "other", True),
    (Refusal("foreign_hello", "why"), "foreign_hello", True),
])
def test_every_error_of_a_first_frame_is_a_refusal_of_its_kind(
        exc: BaseException, kind: str, answerable: bool) -> None:
    refusal = refusal_of(exc, 10)
    assert (refusal.kind, refusal.answerable) == (kind, answerable)
    assert refusal.kind in REFUSAL_KINDS and "\n" not in str(refusal)


def test_the_first_frame_must_be_a_hello_or_a_query_alone() -> None:
    hello, query = Hello("spout:s:0", 1, ME), Query("counts", 0, ["storm"])
    assert first_request([hello, DataBatch.of([], [], [])]) is hello
    assert first_request([query]) is query
    for frames, kind in [([], "closed"), ([DataBatch.of([], [], [])], "unexpected_frame"),
                         ([Answer({})], "unexpected_frame"), ([query, hello], "unexpected_frame")]:
        with pytest.raises(Refusal) as refused:
            first_request(frames)
        assert refused.value.kind == kind


def test_only_a_hello_of_an_upstream_in_this_run_makes_a_peer() -> None:
    upstreams = {"spout:s:0", "spout:s:1"}

    def judge(hello: Hello, joined: int | None = 4, peer: str | None = None
              ) -> Refusal | None:
        return hello_refusal(hello, me=ME, joined=joined, upstreams=upstreams, peer=peer)

    assert judge(Hello("spout:s:0", 4, ME)) is None
    assert judge(Hello("spout:s:0", 4, ME), peer="spout:s:0") is None
    for peer in ("spout:s:1", "query"):  # another upstream's certificate, the query client's
        refusal = judge(Hello("spout:s:0", 4, ME), peer=peer)
        assert refusal is not None and refusal.kind == "foreign_hello"
        assert f"certificate names {peer}" in refusal.reason
    for hello, joined, words in [
        (Hello("spout:s:0", 4, ME), None, "before bolt:counts:0 joined"),
        (Hello("spout:s:0", 3, ME), 4, "in epoch 3"),
        (Hello("spout:s:0", 4, "bolt:counts:1"), 4, "for bolt:counts:1"),
        (Hello("bolt:counts:1", 4, ME), 4, "not an upstream"),
    ]:
        refusal = judge(hello, joined)
        assert refusal is not None and refusal.kind == "foreign_hello"
        assert words in refusal.reason


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["closed", "stalled", "garbled"]),
                          st.floats(0, 30)), max_size=60))
def test_the_refusal_log_writes_a_line_per_kind_a_minute_and_loses_no_count(
        events: list[tuple[str, float]]) -> None:
    log = RefusalLog(interval=60)
    now = 0.0
    lines: dict[str, list[float]] = {}
    counted: dict[str, int] = {}
    quiet_since_line: dict[str, int] = {}
    for kind, pause in events:
        now += pause
        unlogged = log.note(kind, now)
        if unlogged is None:
            assert kind in lines  # the first of a kind is always logged
            quiet_since_line[kind] = quiet_since_line.get(kind, 0) + 1
        else:
            assert unlogged == quiet_since_line.pop(kind, 0)
            assert not lines.get(kind) or now - lines[kind][-1] >= 60
            lines.setdefault(kind, []).append(now)
            counted[kind] = counted.get(kind, 0) + 1 + unlogged
    for kind in lines:  # every refusal is in a line, or waits for the next one
        total = sum(1 for k, _ in events if k == kind)
        assert counted[kind] + quiet_since_line.get(kind, 0) == total


# ------------------------------------------------------------------ the gate, on sockets


def _refused(metrics: ProcessorMetrics) -> dict[str, float]:
    return {labels["kind"]: value for name, labels, value in parse_samples(render(
        metrics.registry)) if name == "hailstorm_refused_requests_total"}


def _served(metrics: ProcessorMetrics) -> float:
    return sum(v for name, _, v in parse_samples(render(metrics.registry))
               if name == "hailstorm_live_queries_total")


def _client(act: Callable[[socket.socket], None]
            ) -> Callable[[socket.socket], dict[str, Any] | None]:
    """A client that authenticates, does ``act``, then reads an ANSWER (None: none came)."""

    def run(sock: socket.socket) -> dict[str, Any] | None:
        tls = greet_peer(sock, SECRET, QUERY_IDENTITY, ME, 5)
        act(tls)
        tls.settimeout(5)
        try:
            frames = recv_frames(tls, FrameReader())
        except (OSError, FrameError):
            return None
        return frames[0].fields if frames and isinstance(frames[0], Answer) else None

    return run


def _through_the_gate(client: Callable[[socket.socket], Any],
                      answer: Callable[[Query], dict[str, Any]] | None = None,
                      request_timeout: float = 5.0) -> tuple[Any, Any, ProcessorMetrics]:
    """``client`` against a gate on the other end of a socket pair: (what the client got,
    what ``Gate.open`` returned, the metrics). A QUERY that passes is answered."""
    metrics = ProcessorMetrics("t", ME)
    gate = Gate(ME, metrics, io_timeout=5, request_timeout=request_timeout)
    a, b = socket.socketpair()
    got: dict[str, Any] = {}

    def client_side() -> None:
        try:
            got["client"] = client(a)
        except Exception as exc:
            got["client"] = exc
        finally:
            a.close()

    thread = threading.Thread(target=client_side)
    thread.start()
    try:
        assert gate.admit(b, "test")
        opened = gate.open(b, "test", SECRET)
        if opened is not None and isinstance(opened[0], Query):
            gate.answer_query(opened[2], "test", opened[0], answer or (lambda q: {}))
    finally:
        if opened is not None:
            opened[2].close()
        b.close()
        thread.join(10)
    return got["client"], opened, metrics


def _raw(sock: socket.socket, kind: FrameKind, payload: bytes) -> None:
    sock.sendall(struct.pack(">IB", len(payload), kind) + payload)


MISBEHAVIOURS: dict[str, tuple[Callable[[socket.socket], None], str, str]] = {
    "close": (lambda s: s.shutdown(socket.SHUT_WR), "closed", ""),
    "half a frame, then close": (
        lambda s: (s.sendall(encode_frame(Query("counts", 0, ["storm"]))[:7]),
                      s.shutdown(socket.SHUT_WR)), "closed", ""),
    "garbage": (lambda s: s.sendall(b"\xff" * 64), "garbled", "unknown frame kind 255"),
    "an oversized request": (
        lambda s: s.sendall(struct.pack(">IB", MAX_REQUEST_SIZE + 1, FrameKind.QUERY)),
        "oversized", "fewer keys"),
    "a malformed QUERY": (
        lambda s: _raw(s, FrameKind.QUERY, pickle.dumps({"instance": 0})),
        "malformed_query", "corrupted QUERY frame"),
    "a QUERY of the wrong types": (
        lambda s: _raw(s, FrameKind.QUERY, pickle.dumps({"bolt": 1, "instance": "x"})),
        "malformed_query", "corrupted QUERY frame"),
    "DATA first": (lambda s: s.sendall(encode_frames([DataBatch.of([0], [1], ["x"])])),
                   "unexpected_frame", "opened with a DataBatch frame"),
}


@pytest.mark.parametrize("name", list(MISBEHAVIOURS))
def test_a_misbehaving_client_is_refused_counted_and_told_why(name: str) -> None:
    act, kind, says = MISBEHAVIOURS[name]
    client_got, opened, metrics = _through_the_gate(_client(act))
    assert opened is None
    assert _refused(metrics) == {k: (1.0 if k == kind else 0.0) for k in REFUSAL_KINDS}
    if says:
        assert isinstance(client_got, dict) and says in client_got["error"], client_got
        assert f"{ME} refused the request: {kind}" in client_got["error"]


def test_a_silent_or_trickling_client_is_refused_within_the_request_timeout() -> None:
    def trickle(sock: socket.socket) -> None:
        for byte in encode_frame(Query("counts", 0, ["storm"]))[:20]:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(0.05)

    for act in (lambda s: None, trickle):
        started = time.monotonic()
        client_got, opened, metrics = _through_the_gate(_client(act), request_timeout=0.5)
        assert opened is None and time.monotonic() - started < 3
        assert _refused(metrics)["stalled"] == 1
        assert client_got is not None and "within 0.5 s" in client_got["error"]


def test_a_stranger_is_counted_apart_from_clients() -> None:
    _got, opened, metrics = _through_the_gate(lambda s: s.sendall(b"GET / HTTP/1.1\r\n\r\n"))
    assert opened is None and set(_refused(metrics).values()) == {0.0}
    samples = parse_samples(render(metrics.registry))
    assert [v for n, _, v in samples if n == "hailstorm_refused_connections_total"] == [1.0]


def test_a_query_is_answered_and_an_unanswerable_one_is_refused_with_its_error() -> None:
    query = Query("counts", 0, ["storm"])
    ask = _client(lambda s: s.sendall(encode_frames([query])))
    got, opened, metrics = _through_the_gate(ask, lambda q: {"values": {"storm": 3}})
    assert opened[0] == query and got == {"values": {"storm": 3}}
    assert _served(metrics) == 1 and set(_refused(metrics).values()) == {0.0}

    error = {"processor": ME, "error": "bolt:counts:0 is not bolt:nosuch:0"}
    got, _, metrics = _through_the_gate(ask, lambda q: error)
    assert got == error and _refused(metrics)["unanswerable_query"] == 1

    def broken(q: Query) -> dict[str, Any]:
        raise TypeError("unhashable type: 'list'")

    got, _, metrics = _through_the_gate(ask, broken)
    assert got is not None and "TypeError: unhashable type" in got["error"]
    assert _refused(metrics)["unanswerable_query"] == 1 and _served(metrics) == 0


def test_a_hello_passes_the_gate_with_what_followed_it() -> None:
    hello, data = Hello("spout:s:0", 1, ME), DataBatch.of([0], [1], [("w", 1)])
    peer = _client(lambda s: (s.sendall(encode_frames([hello, data])),
                              s.shutdown(socket.SHUT_WR)))
    _got, opened, metrics = _through_the_gate(peer)
    assert opened is not None and opened[0] == hello and opened[3] == [data]
    assert set(_refused(metrics).values()) == {0.0}


def test_the_query_client_does_not_send_a_request_over_the_limit() -> None:
    """``hailstorm query --live`` with too many keys says so instead of being refused."""
    from hailstorm.auth import accept_peer
    from hailstorm.query import QueryError, _ask

    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        sock, _ = listener.accept()
        with accept_peer(sock, SECRET, ME, 5) as tls:
            tls.settimeout(5)
            received.append(tls.recv(1 << 16))

    thread = threading.Thread(target=serve)
    thread.start()
    keys = [f"word{i:07d}" for i in range(MAX_REQUEST_SIZE // 10)]
    try:
        with pytest.raises(QueryError, match="ask for fewer keys at once"):
            _ask(listener.getsockname(), ME, SECRET, Query("counts", 0, keys), 5)
    finally:
        thread.join(10)
        listener.close()
    assert received == [b""]  # nothing was sent after the handshake


def test_strangers_are_refused_in_the_tls_handshake_and_their_pickle_never_runs(
        tmp_path: Path) -> None:
    """Plain TCP, no certificate, a self-signed one, one of another run's CA: each is counted
    as a refused connection (not a client refusal), and the pickle bomb behind it never runs."""
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    bomb = encode_frames([Hello("spout:s:0", 1, ME), DataBatch.of([0], [1], [Exploit()])])
    other = RunSecret.generate()
    chains = [None, other.to_pem(), b"".join(other.mint("spout:s:0"))]

    def stranger(chain: bytes | None) -> Callable[[socket.socket], None]:
        def run(sock: socket.socket) -> None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            if chain is not None:
                (tmp_path / "chain.pem").write_bytes(chain)
                context.load_cert_chain(tmp_path / "chain.pem")
            with context.wrap_socket(sock) as tls:
                tls.sendall(bomb)
                tls.recv(1)
        return run

    for client in [lambda s: s.sendall(bomb), *map(stranger, chains)]:
        _got, opened, metrics = _through_the_gate(client)
        assert opened is None and set(_refused(metrics).values()) == {0.0}
        samples = parse_samples(render(metrics.registry))
        assert [v for n, _, v in samples if n == "hailstorm_refused_connections_total"] == [1.0]
    assert not marker.exists()
