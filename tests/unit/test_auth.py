"""The data plane's handshake and frame MACs (hailstorm.auth, hailstorm.protocol.wire): a peer
of the run gets through; anyone else, or anything altered, is refused before a frame is
decoded."""

from __future__ import annotations

import os
import pickle
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.auth import (
    MAGIC,
    NONCE_SIZE,
    TAG_SIZE,
    AuthError,
    FrameSealer,
    RunSecret,
    accept_peer,
    greet_peer,
)
from hailstorm.protocol.wire import (
    HEADER_SIZE,
    DataBatch,
    FrameError,
    FrameReader,
    Hello,
    Query,
    Watermark,
    encode_frame,
    encode_frames,
)
from hailstorm.runtime.data_plane import DataPlaneError, Outbound

SECRET = RunSecret(b"k" * 32)


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


def test_peers_of_one_run_agree_on_keys_per_direction() -> None:
    (c_send, c_recv), (s_recv, s_send) = _both(
        lambda s: greet_peer(s, SECRET, 5), lambda s: accept_peer(s, SECRET, 5))
    frame = b"some frame bytes"
    s_recv.check(frame, c_send.tag([frame]))
    c_recv.check(frame, s_send.tag([frame]))
    with pytest.raises(AuthError):  # the directions' keys differ
        FrameSealer(c_send._key).check(frame, s_send.tag([frame]))


def test_a_peer_without_the_secret_is_refused_both_ways() -> None:
    other = RunSecret(b"x" * 32)
    client, server = _both(lambda s: greet_peer(s, other, 5),
                           lambda s: accept_peer(s, SECRET, 5))
    assert isinstance(client, AuthError) and "listener did not prove" in str(client)
    assert isinstance(server, AuthError)


def test_a_client_with_the_wrong_secret_never_gets_past_the_server() -> None:
    def forger(sock: socket.socket) -> None:
        sock.sendall(MAGIC + b"n" * NONCE_SIZE)
        sock.recv(NONCE_SIZE + TAG_SIZE)
        sock.sendall(b"\0" * TAG_SIZE)  # no proof

    _client, server = _both(forger, lambda s: accept_peer(s, SECRET, 5))
    assert isinstance(server, AuthError) and "did not prove" in str(server)


def test_a_pickle_instead_of_a_handshake_is_refused_unread(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps(Exploit())
    _client, server = _both(lambda s: s.sendall(payload * 4),
                            lambda s: accept_peer(s, SECRET, 5))
    assert isinstance(server, AuthError) and "not a hailstorm" in str(server)
    assert not marker.exists()


def test_a_slow_or_silent_peer_times_out() -> None:
    def slow(sock: socket.socket) -> None:
        sock.sendall(MAGIC[:2])
        sock.recv(1)  # until the server gives up and closes

    _client, server = _both(slow, lambda s: accept_peer(s, SECRET, 0.3))
    assert isinstance(server, AuthError) and "timed out" in str(server)


def test_connect_and_close_is_an_auth_error_not_a_crash() -> None:
    _client, server = _both(lambda s: None, lambda s: accept_peer(s, SECRET, 5))
    assert isinstance(server, AuthError) and "closed during the handshake" in str(server)


def test_secret_file_must_be_private_and_long_enough(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"s" * 40 + b"\n")
    path.chmod(0o644)
    with pytest.raises(ValueError, match="readable by others"):
        RunSecret.from_file(path)
    path.chmod(0o600)
    assert RunSecret.from_file(path).key == b"s" * 40 + b"\n"  # every byte is the key
    path.write_bytes(b"short")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        RunSecret.from_file(path)
    with pytest.raises(ValueError, match="cannot read"):
        RunSecret.from_file(tmp_path / "missing")
    assert "s" * 40 not in repr(RunSecret(b"s" * 40))


# ------------------------------------------------------------------ frames with tags


def _pair() -> tuple[FrameSealer, FrameSealer]:
    return FrameSealer(b"d" * 32), FrameSealer(b"d" * 32)


FRAMES = [Hello("spout:s:0", 3, "bolt:b:1"),
          DataBatch.of([0, 1], [5, 6], [("a", 1), ("b", 2)]),
          Watermark(3, {0: 5, 1: 6})]


def test_sealed_frames_round_trip_in_any_split() -> None:
    sealer, checker = _pair()
    raw = encode_frames(FRAMES, sealer=sealer)
    assert len(raw) == len(encode_frames(FRAMES)) + len(FRAMES) * TAG_SIZE
    reader = FrameReader(checker=checker)
    got = [f for i in range(0, len(raw), 7) for f in reader.feed(raw[i:i + 7])]
    assert got == FRAMES


def _payload_positions(raw: bytes, frames: int) -> list[int]:
    """Indices of the payload bytes of each of ``frames`` sealed frames in ``raw`` (not
    their headers, not their tags)."""
    positions: list[int] = []
    pos = 0
    for _ in range(frames):
        length = int.from_bytes(raw[pos:pos + 4], "big")
        start = pos + HEADER_SIZE
        positions += range(start, start + length)
        pos = start + length + TAG_SIZE
    assert pos == len(raw)
    return positions


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_flipped_payload_byte_fails_its_tag_check(data: st.DataObject) -> None:
    """A flipped payload byte is an :class:`AuthError` of the tag, whatever the byte: a
    reader that decoded before checking would see a corrupt frame (a ``FrameError``) or a
    different value instead. The frames before the flipped one come out."""
    sealer, checker = _pair()
    raw = bytearray(encode_frames(FRAMES, sealer=sealer))
    where = data.draw(st.sampled_from(_payload_positions(bytes(raw), len(FRAMES))))
    raw[where] ^= data.draw(st.integers(1, 255))
    reader = FrameReader(checker=checker)
    got: list[Any] = []
    with pytest.raises(AuthError, match="failed its integrity check"):
        for i in range(len(raw)):  # byte by byte: every frame before the flip comes out
            got += reader.feed(raw[i:i + 1])
    assert got == FRAMES[:len(got)] and len(got) < len(FRAMES)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_flipped_byte_fails_before_decoding(data: st.DataObject) -> None:
    """Anywhere (a header too): only the frames before the flipped one come out; a flipped
    length makes the reader wait for bytes that never come, or refuse the frame's size or
    kind from its header alone."""
    sealer, checker = _pair()
    raw = bytearray(encode_frames(FRAMES, sealer=sealer))
    where = data.draw(st.integers(0, len(raw) - 1))
    raw[where] ^= data.draw(st.integers(1, 255))
    reader = FrameReader(checker=checker)
    try:
        got = reader.feed(bytes(raw))
    except (AuthError, FrameError):
        return
    assert len(got) < len(FRAMES) and got == FRAMES[:len(got)]


class _CreatesFile:
    """Unpickling this creates the file ``path`` (``open(path, "w")``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


@pytest.mark.parametrize("frame_of", [
    lambda exploit: DataBatch.of([0], [1], [exploit]),
    lambda exploit: Query("counts", 0, [exploit]),
], ids=["DATA", "QUERY"])
def test_the_tag_is_checked_before_the_pickle_is_read(
        tmp_path: Path, frame_of: Callable[[Any], Any]) -> None:
    """A frame whose pickle would create a file, sealed with another key: refused by its tag
    (:class:`AuthError`), the file never appears. The same bytes with the right tag do
    create it (the exploit is real, so its absence above means it was never unpickled)."""
    marker = tmp_path / "created-by-unpickling"
    frame = frame_of(_CreatesFile(marker))
    sealer, _ = _pair()
    sealed = encode_frames([FRAMES[0], frame], sealer=sealer)
    another_key = encode_frames([FRAMES[0], frame], sealer=FrameSealer(b"w" * 32))
    for wrong_tag in (another_key[-TAG_SIZE:], bytes(TAG_SIZE)):
        _, checker = _pair()
        with pytest.raises(AuthError, match="frame 1 failed its integrity check"):
            FrameReader(checker=checker).feed(sealed[:-TAG_SIZE] + wrong_tag)
        assert not marker.exists(), "a frame was unpickled before its tag was checked"
    alone = encode_frames([frame], sealer=FrameSealer(b"w" * 32))  # first on its stream
    with pytest.raises(AuthError, match="frame 0 failed its integrity check"):
        FrameReader(checker=_pair()[1]).feed(alone)
    assert not marker.exists(), "a frame was unpickled before its tag was checked"

    _, checker = _pair()
    got = FrameReader(checker=checker).feed(sealed)  # control: the right tag
    assert len(got) == 2 and marker.exists()


def test_replayed_dropped_or_foreign_frames_fail() -> None:
    sealer, checker = _pair()
    first = encode_frames(FRAMES[:1], sealer=sealer)
    second = encode_frames(FRAMES[1:2], sealer=sealer)
    reader = FrameReader(checker=checker)
    assert reader.feed(first) == FRAMES[:1]
    with pytest.raises(AuthError):  # the first frame again
        reader.feed(first)
    _s, fresh = _pair()
    with pytest.raises(AuthError):  # the second without the first
        FrameReader(checker=fresh).feed(second)
    with pytest.raises(AuthError):  # a frame with no tag at all, padded to look whole
        FrameReader(checker=FrameSealer(b"d" * 32)).feed(
            encode_frame(FRAMES[0]) + b"\0" * TAG_SIZE)


def test_a_refused_connection_names_its_receiver() -> None:
    """A downstream instance that is gone refuses the connection; the error says which one
    (the negotiator's recovery reason repeats it)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = closed.getsockname()
    with pytest.raises(DataPlaneError, match=r"connecting to sink:word_counts:0 at .* failed"):
        Outbound("bolt:counts:0", "sink:word_counts:0", address, 1, 2.0, SECRET)
