"""The dev stack's certificate authority: one CA per stack (made with ``cryptography``), a
server certificate every service presents (ZooKeeper, Kafka, PostgreSQL) and a client
certificate hailstorm's ZooKeeper clients present, under ``<state-dir>/tls`` (0700, every
file 0600). Made once, on the stack's first ``up``; kept until ``down --wipe``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["StackTls", "make_stack_tls", "write_private"]

_VALID = datetime.timedelta(days=30)


@dataclass(frozen=True)
class StackTls:
    """The files of a stack's CA, by role (what ``HAILSTORM_ZK_TLS`` names is ``directory``)."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key(self) -> Path:
        """The server's unencrypted PKCS#8 key (what PostgreSQL, ZooKeeper and Kafka read)."""
        return self.directory / "server.key"

    @property
    def server_pem(self) -> Path:
        """The server's key followed by its certificate (Java's PEM key store)."""
        return self.directory / "server.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_private(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path``, a file made anew with mode 0600 (never readable by
    others, not even for a moment)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)


def _certificate(subject: str, key: rsa.RSAPrivateKey, issuer: x509.Name,
                 issuer_key: rsa.RSAPrivateKey, *, ca: bool,
                 addresses: list[str] | None = None,
                 usage: x509.ObjectIdentifier | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + _VALID)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if addresses is not None:
        names: list[x509.GeneralName] = [x509.DNSName("localhost")]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_stack_tls(directory: Path, addresses: list[str]) -> StackTls:
    """The stack's CA under ``directory``, made when it is not there yet: a server
    certificate for ``addresses`` (and ``localhost``) and a client certificate, each
    signed by the CA. The CA's key stays in ``directory`` (0600) only while the stack does."""
    tls = StackTls(directory)
    if all(p.exists() for p in (tls.ca_cert, tls.server_pem, tls.client_key)):
        return tls
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hailstorm dev stack CA")])
    ca = _certificate("hailstorm dev stack CA", ca_key, ca_name, ca_key, ca=True)
    server_key, client_key = _key(), _key()
    server = _certificate(addresses[0], server_key, ca_name, ca_key, ca=False,
                          addresses=addresses)
    client = _certificate("hailstorm", client_key, ca_name, ca_key, ca=False,
                          addresses=addresses, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    pem = serialization.Encoding.PEM
    write_private(directory / "ca.key", _pem_key(ca_key))
    write_private(tls.ca_cert, ca.public_bytes(pem))
    write_private(tls.server_cert, server.public_bytes(pem))
    write_private(tls.server_key, _pem_key(server_key))
    write_private(tls.server_pem, _pem_key(server_key) + server.public_bytes(pem))
    write_private(tls.client_cert, client.public_bytes(pem))
    write_private(tls.client_key, _pem_key(client_key))
    return tls
