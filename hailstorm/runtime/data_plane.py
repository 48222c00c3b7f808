"""The data plane's outbound side and addresses: a connection to one downstream instance
(authenticated, blocking sends: back-pressure), the address a listener binds to, and the
handshake's limits every listener applies (:mod:`hailstorm.auth`, :mod:`hailstorm.protocol.wire`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Sequence

from hailstorm.auth import AuthError, FrameSealer, RunSecret, greet_peer
from hailstorm.errors import ServiceError
from hailstorm.protocol.wire import Frame, Hello, send_frames

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "MAX_HANDSHAKES",
    "DataPlaneError",
    "Outbound",
    "listen_address",
    "route_address",
]

log = logging.getLogger("hailstorm.processor")

HANDSHAKE_TIMEOUT = 3.0
"""Seconds a connecting peer has to prove it holds the run's secret (a slow one is
refused); a peer of the run needs one round trip."""
MAX_HANDSHAKES = 64
"""Connections a listener authenticates at once; more are refused at once (an upstream
refused that way tries again until its ``io_timeout``)."""


class DataPlaneError(ServiceError, RuntimeError):
    """A peer misbehaved or vanished on the data plane."""


def route_address(zk: str) -> str:
    """The address of this host on the way to the first ZooKeeper server of ``zk``
    (``host:port,...[/chroot]``): on a cluster, the interface the other hosts share with
    the coordinator. Connecting a UDP socket only asks the routing table; nothing is sent."""
    first = zk.split("/", 1)[0].split(",")[0].strip()
    host, colon, port = first.rpartition(":")
    if not colon or "]" in port:  # no port given
        host, port = first, "2181"
    family, kind, proto, _, target = socket.getaddrinfo(host.strip("[]"), int(port),
                                                        type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.connect(target)
        return str(probe.getsockname()[0])


def listen_address(host: str, zk: str) -> str:
    """The address the data-plane listener binds to and advertises for the ``--host``
    setting (``auto``: :func:`route_address`)."""
    return route_address(zk) if host == "auto" else host


class Outbound:
    """A connection to one downstream instance; blocking sends (back-pressure)."""

    def __init__(self, sender: str, receiver: str, address: tuple[str, int], epoch: int,
                 timeout: float, secret: RunSecret) -> None:
        self.receiver = receiver
        self.sock, self.sealer = self._authenticated(address, secret, timeout)
        self.sock.settimeout(timeout)
        send_frames(self.sock, [Hello(sender, epoch, receiver)], sealer=self.sealer)

    def _authenticated(self, address: tuple[str, int], secret: RunSecret,
                       timeout: float) -> tuple[socket.socket, FrameSealer]:
        """A connection that passed the handshake. A listener busy with strangers'
        handshakes refuses at once: try again (backing off) until ``timeout``."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            try:  # the error names the receiver: a recovery's reason says who was gone
                sock = socket.create_connection(address, timeout=timeout)
            except OSError as exc:
                raise DataPlaneError(
                    f"connecting to {self.receiver} at {address} failed: {exc}") from exc
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sealer, _ = greet_peer(sock, secret, min(timeout, HANDSHAKE_TIMEOUT))
                return sock, sealer
            except AuthError as exc:
                with contextlib.suppress(OSError):
                    sock.close()
                if time.monotonic() + pause > deadline:
                    raise DataPlaneError(f"{self.receiver} at {address}: {exc}") from exc
                log.warning("handshake with %s at %s failed (%s); trying again",
                            self.receiver, address, exc)
                time.sleep(pause)
                pause = min(2.0, pause * 2)
            except BaseException:
                with contextlib.suppress(OSError):
                    sock.close()
                raise

    def send(self, frames: Sequence[Frame]) -> None:
        try:
            send_frames(self.sock, frames, sealer=self.sealer)
        except OSError as exc:
            raise DataPlaneError(f"sending to {self.receiver} failed: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
