"""Every ZooKeeper client hailstorm makes, authenticated when the operator says so.

With ``HAILSTORM_ZK_AUTH=user:password`` set, each client authenticates with the ``digest``
scheme and every node it creates is readable and writable by that identity only (and
readable by ``HAILSTORM_ZK_READER=user:password``, when set, for ``hailstorm status`` run by
someone who must not write). Without it, nodes are open to anyone who reaches ZooKeeper,
which :func:`refuse_open_zookeeper` allows only when the deployment is on loopback (or
the operator passes ``--allow-open-zookeeper``). Processors, negotiators, the driver,
``status``, ``export`` and the chaos harness all make their clients here, and read the
variables from their environment (never from a command line). ``HAILSTORM_ZK_TLS`` (a
directory with the CA and a client certificate) makes every client speak TLS to
ZooKeeper's secure port (:func:`zk_tls`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, ANYONE_ID_UNSAFE, Permissions, make_digest_acl

from hailstorm.config import ConfigError
from hailstorm.exposure import open_zookeeper_refusal
from hailstorm.protocol.layout import ROOT

__all__ = [
    "ZK_AUTH_VAR",
    "ZK_READER_VAR",
    "ZK_TLS_VAR",
    "check_not_open",
    "ensure_paths",
    "refuse_open_zookeeper",
    "zk_acl",
    "zk_client",
    "zk_credentials",
    "zk_tls",
]

ZK_AUTH_VAR = "HAILSTORM_ZK_AUTH"
ZK_READER_VAR = "HAILSTORM_ZK_READER"
ZK_TLS_VAR = "HAILSTORM_ZK_TLS"

log = logging.getLogger(__name__)


def _credentials(variable: str) -> tuple[str, str] | None:
    value = os.environ.get(variable)
    if not value:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise ConfigError(f"${variable} must be user:password (ZooKeeper digest credentials)")
    return user, password


def zk_credentials() -> tuple[str, str] | None:
    """``(user, password)`` of ``$HAILSTORM_ZK_AUTH`` (None when unset)."""
    return _credentials(ZK_AUTH_VAR)


def zk_acl() -> list[ACL] | None:
    """The ACL of every node hailstorm creates: everything for ``$HAILSTORM_ZK_AUTH``, read
    for ``$HAILSTORM_ZK_READER`` (None: ZooKeeper's open default, when unset)."""
    owner = zk_credentials()
    if owner is None:
        return None
    acl = [make_digest_acl(*owner, all=True)]
    reader = _credentials(ZK_READER_VAR)
    if reader is not None:
        acl.append(make_digest_acl(*reader, read=True))
    return acl


def zk_tls() -> dict[str, Any]:
    """kazoo's TLS settings from ``$HAILSTORM_ZK_TLS``, a directory holding the CA that
    signed ZooKeeper's certificate (``ca.pem``) and this client's certificate and key
    (``client.crt``, ``client.key``), as ``hailstorm dev up --secure`` makes it: TLS with
    the server's certificate and name checked, and a client certificate ({} when unset:
    plaintext)."""
    directory = os.environ.get(ZK_TLS_VAR)
    if not directory:
        return {}
    files = {"ca": "ca.pem", "certfile": "client.crt", "keyfile": "client.key"}
    paths = {option: Path(directory) / name for option, name in files.items()}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise ConfigError(f"${ZK_TLS_VAR}: {', '.join(missing)} missing (the directory must "
                          "hold ca.pem, client.crt and client.key)")
    return {"use_ssl": True, "verify_certs": True, "check_hostname": True,
            **{option: str(path) for option, path in paths.items()}}


RECONNECT = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}
"""How a client tries to reconnect: forever, at least once a second. kazoo's default backs
off to a minute, but a ZooKeeper ensemble that was down gives the sessions it restores only
their timeout (6 s for processors) from its start: a client must be back within it, or its
session (and its processor's living node) is lost."""


def is_zookeeper_outage(problem: BaseException) -> bool:
    """Whether ``problem`` says ZooKeeper is unreachable (not that a request was wrong)."""
    return isinstance(problem, (KazooTimeoutError, ConnectionLoss, SessionExpiredError,
                                OperationTimeoutError))


def zk_client(hosts: str, timeout: float = 10.0) -> KazooClient:
    """A (not yet started) client of ``hosts`` that authenticates as ``$HAILSTORM_ZK_AUTH``
    and creates nodes with :func:`zk_acl`, over TLS when ``$HAILSTORM_ZK_TLS`` says so
    (:func:`zk_tls`)."""
    owner = zk_credentials()
    tls = zk_tls()
    if owner is None:
        return KazooClient(hosts=hosts, timeout=timeout, connection_retry=RECONNECT, **tls)
    return KazooClient(hosts=hosts, timeout=timeout, default_acl=zk_acl(),
                       auth_data=[("digest", f"{owner[0]}:{owner[1]}")],
                       connection_retry=RECONNECT, **tls)


def refuse_open_zookeeper(zk: str, *, allow_open: bool, processor_host: str = "127.0.0.1",
                          master: str | None = None) -> None:
    """Raise :class:`ConfigError` with the reason when the deployment (ZooKeeper ``zk``,
    processors on ``processor_host``, Spark ``master``) is off loopback and
    ``$HAILSTORM_ZK_AUTH`` is unset; with ``allow_open``, log a warning instead
    (:func:`hailstorm.exposure.open_zookeeper_refusal`)."""
    refusal, warning = open_zookeeper_refusal(
        zk, authenticated=zk_credentials() is not None, allow_open=allow_open,
        processor_host=processor_host, master=master)
    if refusal is not None:
        raise ConfigError(refusal)
    if warning is not None:
        log.warning("%s", warning)


def check_not_open(client: KazooClient, paths: list[str]) -> None:
    """With ``$HAILSTORM_ZK_AUTH`` set, refuse (:class:`ConfigError`) any of ``paths`` that
    anyone may change: a node created before the variable was set, or by somebody else
    first, keeps its ACL, and whoever may create or delete its children could replace a
    processor's node or the master state."""
    if zk_credentials() is None:
        return
    for path in paths:
        acls, _stat = client.get_acls(path)
        open_to = [a for a in acls if a.id.scheme == "world"
                   and a.perms & (Permissions.WRITE | Permissions.CREATE | Permissions.DELETE
                                  | Permissions.ADMIN)]
        if open_to:
            raise ConfigError(
                f"ZooKeeper node {path} may be changed by anyone although ${ZK_AUTH_VAR} is "
                "set (it was created before, or by someone else): delete the topology's "
                "nodes and start afresh, or setAcl them to the owner")


def ensure_paths(client: KazooClient, paths: Iterable[str]) -> None:
    """Create ``paths`` and their parents with :func:`zk_acl`, the shared root ``/hailstorm``
    excepted: it is made so that anyone may read it and add a topology of their own under
    it (each topology's nodes belong to whoever created them), so that topologies run by
    different identities can share one ZooKeeper."""
    owner = zk_credentials()
    if owner is not None and client.exists(ROOT) is None:
        shared = [ACL(Permissions.READ | Permissions.CREATE, ANYONE_ID_UNSAFE),
                  make_digest_acl(*owner, all=True)]
        with contextlib.suppress(NodeExistsError):
            client.create(ROOT, acl=shared)
    for path in paths:
        client.ensure_path(path)
