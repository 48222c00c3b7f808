"""The data plane's trust boundary: mutual TLS 1.3 under a per-run certificate authority.

Every processor of a run holds the run's secret (:class:`RunSecret`: a CA certificate and
its private key; the driver generates one per stage attempt and hands it to the tasks with
their assignments, or an operator fixes one with ``HAILSTORM_SECRET_FILE``, a PEM file made
by ``hailstorm secret``). Each holder mints its own certificate for its identity (its
processor id, or :data:`QUERY_IDENTITY`), signed by the run's CA, in memory. A connection is
a TLS 1.3 handshake with ``CERT_REQUIRED`` on both sides, trusting only the run's CA; the
connecting side also checks that the listener's certificate names the processor it meant to
reach. No byte of a frame is read before the handshake has authenticated the peer, and TLS
then gives every frame confidentiality and integrity.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import select
import socket
import ssl
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from hailstorm.errors import ProtocolError

__all__ = [
    "QUERY_IDENTITY",
    "SECRET_FILE_VAR",
    "AuthError",
    "RunSecret",
    "accept_peer",
    "greet_peer",
    "peer_identity",
    "write_secret_file",
]

SECRET_FILE_VAR = "HAILSTORM_SECRET_FILE"
QUERY_IDENTITY = "query"
"""The identity a live-query client's certificate carries."""
CA_NAME = "hailstorm run CA"
_CA_DAYS = 3650
_SKEW = datetime.timedelta(minutes=5)


class AuthError(ProtocolError):
    """A peer did not authenticate as a member of this run, or its TLS stream broke."""


@dataclass(frozen=True)
class RunSecret:
    """The run's certificate authority, PEM-encoded (``repr`` shows neither part)."""

    ca_cert: bytes = field(repr=False)  # long: a repr stays one short line in task errors
    ca_key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        try:
            cert = x509.load_pem_x509_certificate(self.ca_cert)
            key = serialization.load_pem_private_key(self.ca_key, None)
        except ValueError as exc:
            raise ValueError(f"not a run CA (certificate and unencrypted key in PEM): "
                             f"{exc}") from None
        if cert.public_key().public_bytes(*_PUBLIC) != key.public_key().public_bytes(*_PUBLIC):
            raise ValueError("the run CA's key does not match its certificate")

    @classmethod
    def generate(cls) -> RunSecret:
        """A new CA (ECDSA P-256), valid from a few minutes ago for ten years."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - _SKEW)
                .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True,
                                             False, False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    def to_pem(self) -> bytes:
        """The certificate and the key, as ``hailstorm secret`` writes them."""
        return self.ca_cert + self.ca_key

    @classmethod
    def from_file(cls, path: str | Path) -> RunSecret:
        """Read a secret file (PEM: the CA certificate and its unencrypted key), readable by
        its owner only."""
        path = Path(path)
        try:
            mode = path.stat().st_mode
            text = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read the secret file {path}: {exc.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(f"the secret file {path} is readable by others "
                             f"(mode {stat.S_IMODE(mode):o}); chmod 600 it")
        cert, key = _pem_block(text, b"CERTIFICATE"), _pem_block(text, b"PRIVATE KEY")
        if cert is None or key is None:
            raise ValueError(f"the secret file {path} is not a run CA (a certificate and a "
                             "private key in PEM; make one with `hailstorm secret`)")
        try:
            return cls(cert, key)
        except ValueError as exc:
            raise ValueError(f"the secret file {path}: {exc}") from None

    @classmethod
    def from_env(cls) -> RunSecret | None:
        """The secret named by ``$HAILSTORM_SECRET_FILE`` (None when unset)."""
        path = os.environ.get(SECRET_FILE_VAR)
        return cls.from_file(path) if path else None

    def mint(self, identity: str) -> tuple[bytes, bytes]:
        """A certificate for ``identity`` signed by this CA, valid as long as the CA, and
        its key (PEM)."""
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert)
        ca_key = serialization.load_pem_private_key(self.ca_key, None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError("the run CA's key is neither EC nor RSA")
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)]))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - _SKEW)
                .not_valid_after(ca_cert.not_valid_after_utc)  # as long as the CA:
                # a process keeps its certificate while it lives (a fixed CA lasts long)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH,
                                                      x509.ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


_PUBLIC = (serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_block(text: bytes, label: bytes) -> bytes | None:
    """The first PEM block whose label ends with ``label`` (``EC PRIVATE KEY`` too)."""
    start = 0
    while (start := text.find(b"-----BEGIN ", start)) >= 0:
        head_end = text.find(b"-----", start + 11)
        kind = text[start + 11:head_end]
        end_marker = b"-----END " + kind + b"-----"
        end = text.find(end_marker, head_end)
        if end < 0:
            return None
        if kind.endswith(label):
            return text[start:end + len(end_marker)] + b"\n"
        start = end
    return None


def write_secret_file(path: str | Path) -> RunSecret:
    """Make a new run CA and write it to ``path`` (created mode 0600, never overwritten)."""
    secret = RunSecret.generate()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secret.to_pem())
    return secret


@functools.lru_cache(maxsize=8)
def _context(secret: RunSecret, identity: str, server: bool) -> ssl.SSLContext:
    """A TLS 1.3 context presenting a fresh certificate for ``identity``, trusting only the
    run's CA, requiring the peer's certificate. ``ssl`` loads a key only from a file: it is
    written to a private directory (0700, the file 0600) and removed at once."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = False  # addresses vary; the certificate's name is checked instead
    if server:  # no session resumption: a connection's reader sees only frames (or its end)
        context.num_tickets = 0
    context.load_verify_locations(cadata=secret.ca_cert.decode())
    cert, key = secret.mint(identity)
    with tempfile.TemporaryDirectory(prefix="hailstorm-tls-") as private:
        path = os.path.join(private, "identity.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(cert + key)
        context.load_cert_chain(path)
    return context


def _handshake(tls: ssl.SSLSocket, timeout: float) -> None:
    """Complete ``tls``'s handshake within ``timeout`` seconds in all, however slowly the
    peer's bytes trickle in; :class:`AuthError` otherwise."""
    deadline = time.monotonic() + timeout
    tls.setblocking(False)
    try:
        while True:
            try:
                tls.do_handshake()
                return
            except ssl.SSLWantReadError:
                wanted: tuple[list[ssl.SSLSocket], list[ssl.SSLSocket]] = ([tls], [])
            except ssl.SSLWantWriteError:
                wanted = ([], [tls])
            except ssl.SSLError as exc:
                why = getattr(exc, "verify_message", None) or exc.reason or exc
                raise AuthError(f"TLS handshake refused: {why}") from None
            except OSError as exc:
                raise AuthError(f"connection lost during the TLS handshake: {exc}") from None
            left = deadline - time.monotonic()
            if left <= 0 or not any(select.select(*wanted, [], left)[:2]):
                raise AuthError("TLS handshake timed out")
    finally:
        if tls.fileno() >= 0:
            tls.setblocking(True)


def peer_identity(tls: ssl.SSLSocket) -> str:
    """The common name in the authenticated peer's certificate."""
    cert: dict[str, Any] = dict(tls.getpeercert() or {})
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    raise AuthError("the peer's certificate names no one")


def accept_peer(sock: socket.socket, secret: RunSecret, identity: str,
                timeout: float) -> ssl.SSLSocket:
    """The listening side: a TLS stream over ``sock`` whose peer presented a certificate of
    this run, within ``timeout`` seconds; :class:`AuthError` for anyone else (nothing the
    peer sent is interpreted beyond the TLS handshake)."""
    tls = _wrapped(_context(secret, identity, True), sock, server_side=True)
    _checked(tls, timeout, None)
    return tls


def greet_peer(sock: socket.socket, secret: RunSecret, identity: str, expected: str,
               timeout: float) -> ssl.SSLSocket:
    """The connecting side: a TLS stream over ``sock`` to a listener whose certificate of
    this run names ``expected``; :class:`AuthError` otherwise. Small writes go out at once
    (``TCP_NODELAY``): with Nagle's algorithm, the first request after the handshake waited
    for the listener's delayed ACK of the client's Finished, about 40 ms a connection."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tls = _wrapped(_context(secret, identity, False), sock, server_side=False)
    _checked(tls, timeout, expected)
    return tls


def _wrapped(context: ssl.SSLContext, sock: socket.socket, *,
             server_side: bool) -> ssl.SSLSocket:
    """``sock`` in ``context``, its handshake not begun; :class:`AuthError` when the
    connection is gone already (``wrap_socket`` reads from a socket no longer connected,
    and raises the reset a peer killed right after accepting left)."""
    try:
        return context.wrap_socket(sock, server_side=server_side,
                                   do_handshake_on_connect=False)
    except OSError as exc:
        raise AuthError(f"connection lost before the TLS handshake: {exc}") from None


def _checked(tls: ssl.SSLSocket, timeout: float, expected: str | None) -> None:
    """The handshake, and the peer's name when ``expected``; ``tls`` closed on failure."""
    try:
        _handshake(tls, timeout)
        if expected is not None and (peer := peer_identity(tls)) != expected:
            raise AuthError(f"the listener is {peer!r} of this run, not {expected!r}")
    except BaseException:  # broad: also on Ctrl-C; tls is closed, the error re-raised
        with contextlib.suppress(OSError):
            tls.close()
        raise
