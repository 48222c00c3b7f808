"""Test hosts on one machine: a network namespace per host, all joined by a bridge.

Each host is a namespace with its own loopback and one interface (``eth0``) on a private
/24. The other ends of those links plug into a bridge that lives in a namespace of its own
(the switch), so nothing is added to this machine's own bridges or firewall. This
namespace joins the switch too, as the test's controller (``.1``): the test process reaches
every host, and the hosts reach it (a Spark driver started here), but no host traffic can
leave the test network. Cutting a host's switch port is a pulled cable: the host does not
notice, its packets are dropped, and its connections time out.

Needs root (``CAP_SYS_ADMIN`` and ``CAP_NET_ADMIN``) and iproute2's ``ip``; otherwise
:class:`NetworkUnavailable` says why. Processes started in a host (:meth:`Host.command`)
must be stopped before :meth:`TestNetwork.close`: a namespace lives as long as they do.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from types import TracebackType

from hailstorm.dev.services import Host
from hailstorm.errors import ServiceError

SWITCH_BRIDGE = "br0"
HOST_INTERFACE = "eth0"
FIRST_HOST = 11
"""Hosts get .11, .12, ... of the network; .1 is the controller (this namespace)."""


class NetworkUnavailable(ServiceError, RuntimeError):
    """Network namespaces cannot be made here (the message says why)."""


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise NetworkUnavailable(f"'ip {' '.join(args)}' failed: "
                                 f"{(result.stderr or result.stdout).strip()}")


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Networks this namespace has an address or a route in (the default route aside)."""
    result = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"],
                            capture_output=True, text=True, check=False)
    addresses = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True,
                               text=True, check=False)
    used = []
    for line in result.stdout.splitlines():
        words = line.split()
        target = words[1] if words and words[0] in ("local", "broadcast") else \
            (words[0] if words else "default")
        if target != "default":
            with contextlib.suppress(ValueError):
                used.append(ipaddress.IPv4Network(target, strict=False))
    for line in addresses.stdout.splitlines():
        words = line.split()
        if "inet" in words:
            with contextlib.suppress(ValueError):
                used.append(ipaddress.IPv4Interface(words[words.index("inet") + 1]).network)
    return used


def free_network(rng: random.Random | None = None) -> ipaddress.IPv4Network:
    """A /24 of 10.200.0.0/13 that overlaps nothing this namespace has a route or address
    in."""
    rng = rng or random.Random()
    used = _used_networks()
    for _ in range(200):
        network = ipaddress.IPv4Network(f"10.{rng.randint(200, 207)}.{rng.randint(0, 255)}.0/24")
        if not any(network.overlaps(other) for other in used):
            return network
    raise NetworkUnavailable("no free /24 in 10.200.0.0/13 for a test network")


class TestNetwork:
    """Hosts named ``names``, each a network namespace, on one switched /24 (context
    manager: made on enter, removed on exit)."""

    __test__ = False  # not a pytest test class

    def __init__(self, names: Sequence[str]) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be distinct and at least one: {list(names)}")
        self.names = list(names)
        self.tag = f"hs{secrets.token_hex(3)}"
        """Prefix of every namespace and interface this network makes (unique per network)."""
        self.network = free_network()
        self.controller = str(self.network.network_address + 1)
        """This namespace's address on the test network."""
        self.hosts: dict[str, Host] = {
            name: Host(str(self.network.network_address + FIRST_HOST + i), f"{self.tag}-{name}")
            for i, name in enumerate(self.names)
        }
        self._switch = f"{self.tag}-switch"
        self._made: list[str] = []

    def _port(self, name: str) -> str:
        """The switch-side interface of host ``name``'s link."""
        return f"{self.tag}p{self.names.index(name)}"

    @property
    def _controller_link(self) -> str:
        return f"{self.tag}c"

    def __enter__(self) -> TestNetwork:
        if shutil.which("ip") is None:
            raise NetworkUnavailable("iproute2's 'ip' is not installed (apt-get install "
                                     "iproute2)")
        try:
            self._make()
        except BaseException:  # broad: also on Ctrl-C; what was made is removed, re-raised
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _make(self) -> None:
        prefix = self.network.prefixlen
        _ip("netns", "add", self._switch)
        self._made.append(self._switch)
        _ip("-n", self._switch, "link", "add", SWITCH_BRIDGE, "type", "bridge")
        _ip("-n", self._switch, "link", "set", SWITCH_BRIDGE, "up")
        for name, host in self.hosts.items():
            assert host.netns is not None
            _ip("netns", "add", host.netns)
            self._made.append(host.netns)
            port = self._port(name)
            _ip("-n", self._switch, "link", "add", port, "type", "veth", "peer", "name",
                HOST_INTERFACE, "netns", host.netns)
            _ip("-n", self._switch, "link", "set", port, "master", SWITCH_BRIDGE, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/{prefix}", "dev",
                HOST_INTERFACE)
            _ip("-n", host.netns, "link", "set", HOST_INTERFACE, "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("link", "add", self._controller_link, "type", "veth", "peer", "name", "ctl",
            "netns", self._switch)
        _ip("-n", self._switch, "link", "set", "ctl", "master", SWITCH_BRIDGE, "up")
        _ip("addr", "add", f"{self.controller}/{prefix}", "dev", self._controller_link)
        _ip("link", "set", self._controller_link, "up")

    def cut(self, name: str) -> None:
        """Pull host ``name``'s cable: its switch port goes down."""
        _ip("-n", self._switch, "link", "set", self._port(name), "down")

    def restore(self, name: str) -> None:
        """Plug host ``name``'s cable back in."""
        _ip("-n", self._switch, "link", "set", self._port(name), "up")

    def close(self) -> None:
        """Remove the controller's link and every namespace made (idempotent)."""
        with contextlib.suppress(NetworkUnavailable):
            _ip("link", "del", self._controller_link)
        while self._made:
            with contextlib.suppress(NetworkUnavailable):
                _ip("netns", "del", self._made.pop())
