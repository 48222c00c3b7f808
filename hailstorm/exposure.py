"""Whether a deployment reaches beyond this machine, and what that requires of ZooKeeper.

Pure decisions (no I/O), used by ``hailstorm run``, ``hailstorm negotiator``, ``status`` and
the console:

* :func:`open_zookeeper_refusal`: a topology whose ZooKeeper or processors are not on
  loopback must authenticate to ZooKeeper (``$HAILSTORM_ZK_AUTH``): anyone who reaches an
  open ZooKeeper can forge the master state, the committed clock or a processor's address.
* :func:`written_under_authentication`: whether a node's ACL lets only authenticated
  identities change it, which ``status`` and the console require of a node before they
  fetch metrics from the address it names (unless the whole deployment is on loopback).

A host is on loopback when it is ``localhost`` or a loopback IP address (``127.0.0.0/8``,
``::1``). Any other name counts as off loopback without being resolved: a name is what an
operator or an attacker can point elsewhere.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ALLOW_OPEN_FLAG",
    "AUTHENTICATED_SCHEMES",
    "is_loopback",
    "off_loopback",
    "open_zookeeper_refusal",
    "spark_master_host",
    "written_under_authentication",
    "zookeeper_hosts",
]

ALLOW_OPEN_FLAG = "--allow-open-zookeeper"
"""The flag that runs a topology off loopback on an open ZooKeeper anyway (with a warning)."""

AUTHENTICATED_SCHEMES = frozenset({"digest", "sasl", "x509"})
"""ZooKeeper ACL schemes that name an authenticated identity (``world`` and ``ip`` do not)."""

_CHANGE = 0x02 | 0x04 | 0x08 | 0x10  # WRITE | CREATE | DELETE | ADMIN


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (brackets around IPv6 allowed)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_of(address: str) -> str:
    """The host of ``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address."""
    address = address.strip()
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    if address.count(":") > 1:  # a bare IPv6 address
        return address
    return address.rsplit(":", 1)[0] if ":" in address else address


def zookeeper_hosts(connect: str) -> list[str]:
    """The hosts of a ZooKeeper connection string ``host:port,...[/chroot]``.

    >>> zookeeper_hosts("10.0.0.1:2181,[::1]:2182,zk3/apps")
    ['10.0.0.1', '::1', 'zk3']
    """
    servers = connect.split("/", 1)[0]
    return [_host_of(part) for part in servers.split(",") if part.strip()]


def spark_master_host(master: str | None) -> str | None:
    """The host of a Spark master URL (None for ``local[...]`` and no master: this machine).

    >>> spark_master_host("spark://10.0.0.5:7077"), spark_master_host("local[4]")
    ('10.0.0.5', None)
    """
    if master is None or master == "local" or master.startswith(("local[", "local-cluster[")):
        return None
    rest = master.split("://", 1)[1] if "://" in master else master
    return _host_of(rest.split("/", 1)[0].split(",", 1)[0])


def off_loopback(zk: str, processor_host: str = "127.0.0.1",
                 master: str | None = None) -> list[str]:
    """What of a deployment is not on loopback, in words (empty: everything is)."""
    found = [f"ZooKeeper {host}" for host in zookeeper_hosts(zk) if not is_loopback(host)]
    if processor_host == "auto" or not is_loopback(processor_host):
        found.append(f"processors listening on {processor_host}")
    master_host = spark_master_host(master)
    if master_host is not None and not is_loopback(master_host):
        found.append(f"Spark master {master_host}")
    return found


def open_zookeeper_refusal(zk: str, *, authenticated: bool, allow_open: bool,
                           processor_host: str = "127.0.0.1",
                           master: str | None = None) -> tuple[str | None, str | None]:
    """``(refusal, warning)`` for a start: a refusal (the reason, one line) when the
    deployment is off loopback and ZooKeeper is not authenticated, unless ``allow_open``,
    which turns it into a warning. ``(None, None)`` when nothing is wrong."""
    if authenticated:
        return None, None
    exposed = off_loopback(zk, processor_host, master)
    if not exposed:
        return None, None
    reason = (f"ZooKeeper is open (no $HAILSTORM_ZK_AUTH) and the deployment is not on "
              f"loopback ({', '.join(exposed)}): anyone who reaches ZooKeeper could forge "
              f"the master state, the committed clock or a processor's address")
    if allow_open:
        return None, f"{reason}; running anyway ({ALLOW_OPEN_FLAG})"
    return (f"{reason}. Set $HAILSTORM_ZK_AUTH=user:password (docs/security.md), or pass "
            f"{ALLOW_OPEN_FLAG} to run it open"), None


def written_under_authentication(acls: Iterable[Any]) -> bool:
    """True when ``acls`` (kazoo ``ACL`` entries: ``perms``, ``id.scheme``) let only
    authenticated identities change the node: some entry grants a change, and every entry
    that does is of an authenticated scheme."""
    changers = [acl for acl in acls if acl.perms & _CHANGE]
    return bool(changers) and all(acl.id.scheme in AUTHENTICATED_SCHEMES for acl in changers)
