"""The data plane's outbound side and addresses: a connection to one downstream instance
(authenticated, blocking sends: back-pressure), the address a listener binds to, and the
handshake's limits every listener applies (:mod:`hailstorm.auth`, :mod:`hailstorm.protocol.wire`).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence

from hailstorm.auth import AuthError, RunSecret, greet_peer
from hailstorm.errors import ServiceError
from hailstorm.protocol.wire import Frame, Hello, encode_frames

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "MAX_HANDSHAKES",
    "DataPlaneError",
    "Outbound",
    "listen_address",
    "probe_receivers",
    "route_address",
    "send_patiently",
]

log = logging.getLogger("hailstorm.processor")

HANDSHAKE_TIMEOUT = 3.0
"""Seconds a connecting peer has to complete its TLS handshake (a slow one is refused); a
peer of the run needs one round trip."""
MAX_HANDSHAKES = 64
"""Connections a listener authenticates at once; more are refused at once (an upstream
refused that way tries again until its ``io_timeout``)."""


class DataPlaneError(ServiceError, RuntimeError):
    """A peer misbehaved or vanished on the data plane; ``peer`` names the processor whose
    connection broke (closed, reset, refused, or took nothing for the I/O timeout), which
    the processor reports with its error (``lost_peer``), so the negotiator names the one
    that failed, not the one that noticed."""

    def __init__(self, message: str, *, peer: str | None = None) -> None:
        super().__init__(message)
        self.peer = peer


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


def send_patiently(sock: socket.socket, data: bytes, patience: Callable[[], bool]) -> None:
    """All of ``data`` on ``sock`` (a socket with a timeout). When the peer takes nothing for
    the socket's timeout, ``patience()`` decides: True waits again (nothing is lost or sent
    twice: the count of bytes sent is kept), False raises :class:`TimeoutError`."""
    with memoryview(data) as view:
        sent = 0
        while sent < len(view):
            try:
                sent += sock.send(view[sent:])
            except TimeoutError:
                if not patience():
                    raise


class Outbound:
    """A connection to one downstream instance; blocking sends (back-pressure)."""

    def __init__(self, sender: str, receiver: str, address: tuple[str, int], epoch: int,
                 timeout: float, secret: RunSecret,
                 patience: Callable[[], bool] = lambda: False) -> None:
        self.receiver = receiver
        self.timeout = timeout
        #: Asked when a send made no progress for ``timeout`` s: True (the topology waits
        #: out an outage, the receiver is held up by it) keeps waiting.
        self.patience = patience
        self.sock = self._authenticated(sender, address, secret, timeout)
        self.sock.settimeout(timeout)
        try:  # a receiver that dies right after the handshake resets the HELLO's send
            self.send([Hello(sender, epoch, receiver)])
        except BaseException:  # broad: also on Ctrl-C; the socket is closed, re-raised
            self.close()
            raise

    def _authenticated(self, sender: str, address: tuple[str, int], secret: RunSecret,
                       timeout: float) -> socket.socket:
        """A TLS connection to ``receiver`` of this run. A listener busy with strangers'
        handshakes refuses at once: try again (backing off) until ``timeout``."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            try:  # the error names the receiver: a recovery's reason says who was gone
                sock = socket.create_connection(address, timeout=timeout)
            except OSError as exc:
                raise DataPlaneError(f"connecting to {self.receiver} at {address} failed: "
                                     f"{exc}", peer=self.receiver) from exc
            try:
                return greet_peer(sock, secret, sender, self.receiver,
                                  min(timeout, HANDSHAKE_TIMEOUT))
            except AuthError as exc:
                with contextlib.suppress(OSError):
                    sock.close()
                if time.monotonic() + pause > deadline:
                    raise DataPlaneError(f"{self.receiver} at {address}: {exc}",
                                         peer=self.receiver) from exc
                log.warning("handshake with %s at %s failed (%s); trying again",
                            self.receiver, address, exc)
                time.sleep(pause)
                pause = min(2.0, pause * 2)
            except BaseException:  # broad: also on Ctrl-C; the socket is closed, re-raised
                with contextlib.suppress(OSError):
                    sock.close()
                raise

    def send(self, frames: Sequence[Frame]) -> None:
        """Send ``frames``, blocking while the receiver does not read (back pressure): up to
        the timeout, or as long as :attr:`patience` says the topology waits out an outage."""
        try:
            send_patiently(self.sock, encode_frames(frames),
                           self.patience)
        except TimeoutError as exc:
            raise DataPlaneError(f"sending to {self.receiver} failed: nothing taken for "
                                 f"{self.timeout:.0f} s", peer=self.receiver) from exc
        except OSError as exc:
            raise DataPlaneError(f"sending to {self.receiver} failed: {exc}",
                                 peer=self.receiver) from exc

    def probe(self) -> None:
        """Raise :class:`DataPlaneError` naming the receiver if it closed or reset this
        connection; never blocks. A receiver sends nothing on it (listeners issue no TLS
        session tickets), so anything to read is its end: a refusal or a close."""
        try:
            self.sock.setblocking(False)
            try:
                data = self.sock.recv(1)
            finally:
                self.sock.settimeout(self.timeout)
        except (ssl.SSLWantReadError, BlockingIOError):
            return
        except OSError as exc:  # reset, or TLS's own end of the stream
            raise DataPlaneError(f"{self.receiver}'s connection broke: {exc}",
                                 peer=self.receiver) from exc
        if not data:
            raise DataPlaneError(f"{self.receiver} closed its connection", peer=self.receiver)
        raise DataPlaneError(f"{self.receiver} sent data on a connection it only receives on",
                             peer=self.receiver)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def probe_receivers(connections: Iterable[Outbound]) -> None:
    """Raise :class:`DataPlaneError` naming a receiver among ``connections`` that closed or
    reset its connection (:meth:`Outbound.probe`); never blocks. A sender learns of a
    receiver's death at once, not at its second send after it (the first is accepted
    into the socket's buffer): a bolt waiting for its round to commit sends nothing, so
    before, it learned only from Spark cancelling the stage, and named whichever
    processor's cancelled connection it noticed first."""
    by_fd = {out.sock.fileno(): out for out in connections}
    by_fd.pop(-1, None)  # closed
    if by_fd:
        readable, _, _ = select.select(list(by_fd), [], [], 0)
        for fd in readable:
            by_fd[fd].probe()
