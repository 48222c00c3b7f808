"""The data plane's trust boundary: mutual challenge-response, then a MAC on every frame.

Every processor of a run holds the run's secret (:class:`RunSecret`: the driver generates
one per run and hands it to the tasks with their assignments, or an operator fixes one with
``HAILSTORM_SECRET_FILE``). A connection is authenticated before a single byte of a frame
is read, with fixed-size messages only (HMAC-SHA256, ``K`` the secret)::

    client -> server   "HSA1" | client nonce Nc (32 bytes)
    server -> client   server nonce Ns (32) | HMAC(K, "hailstorm server" | Nc | Ns)
    client -> server   HMAC(K, "hailstorm client" | Ns | Nc)

Both sides prove they hold ``K`` for nonces the other chose, so neither a recorded exchange
nor a reflected one passes. Each direction then gets its own key,
``HMAC(K, "hailstorm c2s" | Nc | Ns)`` (and ``s2c``), and every frame carries a 32-byte tag
over its frame number and bytes (:class:`FrameSealer`): a frame altered, dropped, replayed
or moved to another connection fails its check before it is decoded.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hailstorm.errors import ProtocolError

__all__ = [
    "KEY_SIZE",
    "SECRET_FILE_VAR",
    "TAG_SIZE",
    "AuthError",
    "FrameSealer",
    "RunSecret",
    "accept_peer",
    "greet_peer",
]

KEY_SIZE = 32
NONCE_SIZE = 32
TAG_SIZE = 32
MAGIC = b"HSA1"
SECRET_FILE_VAR = "HAILSTORM_SECRET_FILE"

_SERVER_PROOF = b"hailstorm server"
_CLIENT_PROOF = b"hailstorm client"
_TO_SERVER = b"hailstorm c2s"
_TO_CLIENT = b"hailstorm s2c"


class AuthError(ProtocolError):
    """A peer did not prove it holds the run's secret, or a frame failed its check."""


def _mac(key: bytes, *parts: bytes) -> bytes:
    digest = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        digest.update(part)
    return digest.digest()


@dataclass(frozen=True)
class RunSecret:
    """The key every processor of a run shares (never shown by ``repr``)."""

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) < KEY_SIZE:
            raise ValueError(f"a run secret needs at least {KEY_SIZE} bytes, "
                             f"got {len(self.key)}")

    @classmethod
    def generate(cls) -> RunSecret:
        return cls(secrets.token_bytes(KEY_SIZE))

    @classmethod
    def from_file(cls, path: str | Path) -> RunSecret:
        """Read a secret file: at least 32 bytes (all of them are the key, a trailing
        newline too), readable by its owner only."""
        path = Path(path)
        try:
            mode = path.stat().st_mode
            key = path.read_bytes()  # every byte: every processor reads the same file
        except OSError as exc:
            raise ValueError(f"cannot read the secret file {path}: {exc.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(f"the secret file {path} is readable by others "
                             f"(mode {stat.S_IMODE(mode):o}); chmod 600 it")
        try:
            return cls(key)
        except ValueError as exc:
            raise ValueError(f"the secret file {path}: {exc}") from None

    @classmethod
    def from_env(cls) -> RunSecret | None:
        """The secret named by ``$HAILSTORM_SECRET_FILE`` (None when unset)."""
        path = os.environ.get(SECRET_FILE_VAR)
        return cls.from_file(path) if path else None


class FrameSealer:
    """Tags (or checks) the frames of one direction of one connection, numbering them."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._number = 0

    def tag(self, parts: Iterable[bytes | bytearray | memoryview]) -> bytes:
        """The tag of the next frame, whose bytes are ``parts`` in order."""
        digest = hmac.new(self._key, self._number.to_bytes(8, "big"), hashlib.sha256)
        for part in parts:
            digest.update(part)
        self._number += 1
        return digest.digest()

    def check(self, frame: bytes | bytearray | memoryview,
              tag: bytes | bytearray | memoryview) -> None:
        """Raise :class:`AuthError` unless ``tag`` is the next frame's tag for ``frame``."""
        if not hmac.compare_digest(self.tag((frame,)), bytes(tag)):
            raise AuthError(f"frame {self._number - 1} failed its integrity check "
                            "(altered, replayed, reordered, or not from the authenticated peer)")


def _recv_exact(sock: socket.socket, size: int, deadline: float) -> bytes:
    """``size`` bytes, or :class:`AuthError` when the peer closes or ``deadline`` passes
    (a slow peer cannot hold a handshake open)."""
    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AuthError("handshake timed out")
        try:
            sock.settimeout(left)
            chunk = sock.recv(size - len(data))
        except TimeoutError:
            raise AuthError("handshake timed out") from None
        except OSError as exc:  # a reset: the peer went away
            raise AuthError(f"connection lost during the handshake: {exc}") from None
        if not chunk:
            raise AuthError(f"peer closed during the handshake after {len(data)} of {size} "
                            "bytes")
        data += chunk
    return bytes(data)


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError as exc:
        raise AuthError(f"connection lost during the handshake: {exc}") from None


def greet_peer(sock: socket.socket, secret: RunSecret,
               timeout: float) -> tuple[FrameSealer, FrameSealer]:
    """The connecting side's handshake; returns (sealer of frames it sends, checker of
    frames it receives). Raises :class:`AuthError` when the server is not of this run."""
    deadline = time.monotonic() + timeout
    client_nonce = secrets.token_bytes(NONCE_SIZE)
    _send(sock, MAGIC + client_nonce)
    answer = _recv_exact(sock, NONCE_SIZE + TAG_SIZE, deadline)
    server_nonce, proof = answer[:NONCE_SIZE], answer[NONCE_SIZE:]
    key = secret.key
    if not hmac.compare_digest(proof, _mac(key, _SERVER_PROOF, client_nonce, server_nonce)):
        raise AuthError("the listener did not prove it holds this run's secret")
    _send(sock, _mac(key, _CLIENT_PROOF, server_nonce, client_nonce))
    return (FrameSealer(_mac(key, _TO_SERVER, client_nonce, server_nonce)),
            FrameSealer(_mac(key, _TO_CLIENT, client_nonce, server_nonce)))


def accept_peer(sock: socket.socket, secret: RunSecret,
                timeout: float) -> tuple[FrameSealer, FrameSealer]:
    """The listening side's handshake, bounded by ``timeout`` seconds in all; returns
    (checker of frames it receives, sealer of frames it sends). Raises :class:`AuthError`
    for anything but a peer of this run; nothing the peer sent is interpreted beyond
    comparing fixed-size byte strings."""
    deadline = time.monotonic() + timeout
    greeting = _recv_exact(sock, len(MAGIC) + NONCE_SIZE, deadline)
    if not hmac.compare_digest(greeting[:len(MAGIC)], MAGIC):
        raise AuthError("not a hailstorm data-plane handshake")
    client_nonce = greeting[len(MAGIC):]
    server_nonce = secrets.token_bytes(NONCE_SIZE)
    key = secret.key
    _send(sock, server_nonce + _mac(key, _SERVER_PROOF, client_nonce, server_nonce))
    proof = _recv_exact(sock, TAG_SIZE, deadline)
    if not hmac.compare_digest(proof, _mac(key, _CLIENT_PROOF, server_nonce, client_nonce)):
        raise AuthError("the peer did not prove it holds this run's secret")
    return (FrameSealer(_mac(key, _TO_SERVER, client_nonce, server_nonce)),
            FrameSealer(_mac(key, _TO_CLIENT, client_nonce, server_nonce)))
