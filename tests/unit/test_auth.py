"""The data plane's mutual TLS (hailstorm.auth): a peer of the run gets through and sees who
the other end is; a stranger (no certificate, a self-signed one, another run's, plain TCP,
a pickle) is refused during the handshake, before a frame is read."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hailstorm.auth import (
    QUERY_IDENTITY,
    AuthError,
    RunSecret,
    accept_peer,
    greet_peer,
    peer_identity,
    write_secret_file,
)
from hailstorm.protocol.wire import DataBatch, FrameReader, Hello, encode_frames, recv_frames
from hailstorm.runtime.data_plane import DataPlaneError, Outbound, probe_receivers

SECRET = RunSecret.generate()
OTHER_RUN = RunSecret.generate()
BOLT = "bolt:counts:0"
SPOUT = "spout:lines:words:0"


def _both(client: Callable[[socket.socket], Any],
          server: Callable[[socket.socket], Any]) -> tuple[Any, Any]:
    """Run ``client`` and ``server`` on the two ends of a socket pair; return both results
    (an exception is returned, not raised)."""
    a, b = socket.socketpair()
    results: dict[str, Any] = {}

    def side(name: str, fn: Callable[[socket.socket], Any], sock: socket.socket) -> None:
        try:
            results[name] = fn(sock)
        except Exception as exc:
            results[name] = exc
        finally:
            sock.close()

    threads = [threading.Thread(target=side, args=("client", client, a)),
               threading.Thread(target=side, args=("server", server, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results["client"], results["server"]


def _stranger_tls(chain: bytes | None, tmp_path: Path) -> ssl.SSLContext:
    """A TLS 1.3 client that trusts anyone and presents ``chain`` (PEM cert+key) if any."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if chain is not None:
        path = tmp_path / "stranger.pem"
        path.write_bytes(chain)
        context.load_cert_chain(path)
    return context


def _talk_as_stranger(context: ssl.SSLContext, payload: bytes) -> Callable[[socket.socket], Any]:
    def client(sock: socket.socket) -> None:
        with context.wrap_socket(sock) as tls:
            tls.sendall(payload)
            tls.recv(1)

    return client


def _exploit(marker: Path) -> bytes:
    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    return encode_frames([DataBatch.of([0], [1], [Exploit()])])


def test_peers_of_one_run_authenticate_each_other_and_exchange_frames() -> None:
    hello = Hello(SPOUT, 3, BOLT)

    def client(sock: socket.socket) -> str:
        with greet_peer(sock, SECRET, SPOUT, BOLT, 5) as tls:
            assert tls.version() == "TLSv1.3"
            tls.sendall(encode_frames([hello]))
            return peer_identity(tls)

    def server(sock: socket.socket) -> tuple[str, list[Any]]:
        with accept_peer(sock, SECRET, BOLT, 5) as tls:
            return peer_identity(tls), recv_frames(tls, FrameReader())

    seen_by_client, (seen_by_server, frames) = _both(client, server)
    assert (seen_by_client, seen_by_server, frames) == (BOLT, SPOUT, [hello])


def test_the_connecting_side_sends_small_writes_at_once() -> None:
    """TCP_NODELAY: with Nagle's algorithm a request right after the handshake waited for
    the listener's delayed ACK (about 40 ms a live query)."""

    def client(sock: socket.socket) -> int:
        with greet_peer(sock, SECRET, SPOUT, BOLT, 5) as tls:
            return tls.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    def server(sock: socket.socket) -> None:
        with accept_peer(sock, SECRET, BOLT, 5):
            pass

    nodelay, _ = _both(client, server)
    assert nodelay


def test_the_client_refuses_a_listener_of_the_run_that_is_not_the_one_it_meant() -> None:
    client, _server = _both(lambda s: greet_peer(s, SECRET, SPOUT, "bolt:counts:1", 5),
                            lambda s: accept_peer(s, SECRET, BOLT, 5))
    assert isinstance(client, AuthError) and "not 'bolt:counts:1'" in str(client)


def test_another_runs_certificates_are_refused_both_ways() -> None:
    client, server = _both(lambda s: greet_peer(s, OTHER_RUN, SPOUT, BOLT, 5),
                           lambda s: accept_peer(s, SECRET, BOLT, 5))
    assert isinstance(client, AuthError) and "TLS handshake refused" in str(client)
    assert isinstance(server, AuthError)


@pytest.mark.parametrize("who", ["no certificate", "self-signed", "another run's CA"])
def test_a_stranger_with_a_pickle_is_refused_in_the_handshake(who: str,
                                                               tmp_path: Path) -> None:
    chain = {"no certificate": None,
             "self-signed": OTHER_RUN.to_pem(),  # a CA certificate is self-signed
             "another run's CA": b"".join(OTHER_RUN.mint(SPOUT))}[who]
    marker = tmp_path / "ran"
    stranger = _talk_as_stranger(_stranger_tls(chain, tmp_path), _exploit(marker))
    _client, server = _both(stranger, lambda s: accept_peer(s, SECRET, BOLT, 5))
    assert isinstance(server, AuthError) and "TLS handshake refused" in str(server), server
    assert not marker.exists()


def test_plain_tcp_a_pickle_or_garbage_is_refused_unread(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for payload in (_exploit(marker), pickle.dumps(list(range(100))) * 4, b"\x16\x03" * 999):
        _client, server = _both(lambda s, p=payload: s.sendall(p),
                                lambda s: accept_peer(s, SECRET, BOLT, 5))
        assert isinstance(server, AuthError), server
    assert not marker.exists()


def test_a_silent_or_trickling_peer_times_out_within_the_bound() -> None:
    def trickle(sock: socket.socket) -> None:
        hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 200
        for byte in hello:  # a ClientHello one byte every 50 ms: far slower than the bound
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(0.05)

    started = time.monotonic()
    _client, server = _both(trickle, lambda s: accept_peer(s, SECRET, BOLT, 0.5))
    assert isinstance(server, AuthError) and "timed out" in str(server), server
    assert time.monotonic() - started < 0.5 + 1.0 + 10 * 0.05


def test_connect_and_close_is_an_auth_error_not_a_crash() -> None:
    _client, server = _both(lambda s: None, lambda s: accept_peer(s, SECRET, BOLT, 5))
    assert isinstance(server, AuthError)


def test_the_query_client_authenticates_as_query() -> None:
    client, server = _both(
        lambda s: greet_peer(s, SECRET, QUERY_IDENTITY, BOLT, 5).close(),
        lambda s: peer_identity(accept_peer(s, SECRET, BOLT, 5)))
    assert client is None and server == QUERY_IDENTITY


def test_a_secret_file_is_written_private_once_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "run.secret"
    written = write_secret_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert RunSecret.from_file(path) == written
    with pytest.raises(FileExistsError):
        write_secret_file(path)
    path.chmod(0o640)
    with pytest.raises(ValueError, match="readable by others"):
        RunSecret.from_file(path)
    with pytest.raises(ValueError, match="cannot read"):
        RunSecret.from_file(tmp_path / "missing")


def test_a_secret_file_must_be_a_ca_with_its_own_key(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    for text in (b"s" * 64, SECRET.ca_cert, SECRET.ca_cert + OTHER_RUN.ca_key):
        path.write_bytes(text)
        path.chmod(0o600)
        with pytest.raises(ValueError, match=r"not a run CA|does not match"):
            RunSecret.from_file(path)


def test_the_key_is_never_in_a_repr() -> None:
    key_line = SECRET.ca_key.decode().splitlines()[1]
    assert key_line not in repr(SECRET)
    assert repr(SECRET) == "RunSecret()"


def test_hailstorm_secret_writes_a_private_ca_and_never_overwrites(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hailstorm.cli import main

    path = tmp_path / "run.secret"
    first = CliRunner().invoke(main, ["secret", str(path)])
    assert first.exit_code == 0, first.output
    assert os.stat(path).st_mode & 0o777 == 0o600
    made = RunSecret.from_file(path)
    again = CliRunner().invoke(main, ["secret", str(path)])
    assert again.exit_code == 1 and "cannot write" in again.output
    assert RunSecret.from_file(path) == made


def test_a_refused_connection_names_its_receiver() -> None:
    """A downstream instance that is gone refuses the connection; the error says which one
    (the negotiator's recovery reason repeats it)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = closed.getsockname()
    with pytest.raises(DataPlaneError, match=r"connecting to sink:word_counts:0 at .* failed"):
        Outbound(SPOUT, "sink:word_counts:0", address, 1, 2.0, SECRET)


RECEIVER = "sink:word_counts:0"


@contextlib.contextmanager
def _receiver(serve: Callable[[ssl.SSLSocket], None]) -> Iterator[tuple[str, int]]:
    """A listener of the run that accepts one sender as :data:`RECEIVER` and hands the TLS
    stream to ``serve`` in a thread; yields its address, joins the thread at the end."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def accept() -> None:
            raw, _ = listener.accept()
            with contextlib.suppress(OSError), accept_peer(raw, SECRET, RECEIVER, 5) as tls:
                serve(tls)

        server = threading.Thread(target=accept)
        server.start()
        try:
            yield listener.getsockname()
        finally:
            server.join(10)


def _reset(tls: ssl.SSLSocket) -> None:
    """Make closing ``tls`` a reset (RST), as a killed process's unread connection ends."""
    tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_a_receiver_that_resets_the_connection_is_named_as_the_lost_peer() -> None:
    """A receiver killed after the handshake resets the connection: the sender's error (the
    HELLO's send included, which goes through the same ``send``) names it as the lost peer,
    so the negotiator's recovery reason names the processor that died, not the one that
    noticed."""
    reset = threading.Event()

    def die_after_the_hello(tls: ssl.SSLSocket) -> None:
        assert recv_frames(tls, FrameReader())[0] == Hello(BOLT, 1, RECEIVER)
        _reset(tls)
        reset.set()

    with _receiver(die_after_the_hello) as address:
        out = Outbound(BOLT, RECEIVER, address, 1, 2.0, SECRET)
    assert reset.wait(10)
    deadline = time.monotonic() + 10
    with pytest.raises(DataPlaneError, match="sending to sink:word_counts:0 failed") as info:
        while time.monotonic() < deadline:  # until the reset has arrived
            out.send([DataBatch.of([0] * 1000, list(range(1000)), ["a"] * 1000)])
            time.sleep(0.05)
    out.close()
    assert info.value.peer == RECEIVER


def test_a_reset_while_sending_the_hello_names_the_receiver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The HELLO, sent right after the handshake, is where a receiver killed at that moment
    shows: its reset names the receiver too (it once escaped as a bare
    ``ConnectionResetError`` that named only the processor that noticed)."""
    def reset(*_: Any) -> None:
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr("hailstorm.runtime.data_plane.send_patiently", reset)
    with _receiver(lambda _tls: None) as address, \
            pytest.raises(DataPlaneError, match=r"sending to sink:word_counts:0 failed: .*"
                          r"reset by peer") as info:
        Outbound(BOLT, RECEIVER, address, 1, 2.0, SECRET)
    assert info.value.peer == RECEIVER


@pytest.mark.parametrize("ending", ["close", "reset"])
def test_a_receiver_gone_is_noticed_without_sending(ending: str) -> None:
    """A sender with nothing to send (a bolt waiting for its round to commit) learns that its
    receiver died from the connection alone, and names it; a live receiver that sends
    nothing (no TLS session tickets either) is never taken for a dead one."""
    go = threading.Event()

    def serve_then_end(tls: ssl.SSLSocket) -> None:
        recv_frames(tls, FrameReader())  # the HELLO
        go.wait(10)
        if ending == "reset":
            _reset(tls)

    with _receiver(serve_then_end) as address:
        out = Outbound(BOLT, RECEIVER, address, 1, 2.0, SECRET)
        try:
            for _ in range(5):  # alive and silent: nothing to see
                probe_receivers([out])
                time.sleep(0.05)
        finally:
            go.set()
    deadline = time.monotonic() + 10
    with pytest.raises(DataPlaneError) as info:
        while time.monotonic() < deadline:  # until the end has arrived
            probe_receivers([out])
            time.sleep(0.02)
    out.close()
    assert info.value.peer == RECEIVER
    assert RECEIVER in str(info.value)


@contextlib.contextmanager
def _resetting_listener() -> Iterator[tuple[str, int]]:
    """A listener that resets every connection it accepts before a byte of TLS, as a
    receiver killed right after ``accept`` does."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.2)
        done = threading.Event()

        def reset_all() -> None:
            while not done.is_set():
                try:
                    raw, _ = listener.accept()
                except TimeoutError:
                    continue
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                raw.close()

        server = threading.Thread(target=reset_all)
        server.start()
        try:
            yield listener.getsockname()
        finally:
            done.set()
            server.join(10)


def test_a_connection_reset_before_the_handshake_is_retried_then_names_the_receiver() -> None:
    """A receiver killed between accepting and the TLS handshake has reset the connection
    when the sender wraps it (the wrap reads the socket, and raised the bare
    ``ConnectionResetError``: a spout reconnecting to a bolt restarting alone failed with
    it and restarted the whole topology). It is an :class:`AuthError`, which a sender
    tries again, then names the receiver: the peer gone, not its own failure."""
    with _resetting_listener() as address:
        with socket.create_connection(address) as sock:  # blocking: connected, then reset
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the reset has arrived
                try:
                    sock.getpeername()
                except OSError:
                    break
                time.sleep(0.01)
            else:
                pytest.fail("the listener's reset never arrived")
            with pytest.raises(AuthError, match="connection lost before the TLS handshake"):
                greet_peer(sock, SECRET, SPOUT, RECEIVER, 2.0)
        with pytest.raises(DataPlaneError, match=rf"{RECEIVER} at .*(lost|reset)") as info:
            Outbound(SPOUT, RECEIVER, address, 1, 1.0, SECRET)
        assert info.value.peer == RECEIVER
