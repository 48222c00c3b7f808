"""A listener's gate: the TLS handshake and the first frame of every connection, bounded in
number and time, and the refusals of :mod:`hailstorm.runtime.clients` applied (counted,
logged a line per kind a minute, answered with the reason where the stream allows). What
passes is a HELLO for the shell to judge, or a QUERY the gate answers itself."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from hailstorm.auth import AuthError, RunSecret, accept_peer
from hailstorm.metrics import ProcessorMetrics
from hailstorm.protocol.wire import (
    MAX_REQUEST_SIZE,
    Answer,
    Frame,
    FrameReader,
    Hello,
    Query,
    send_frames,
)
from hailstorm.runtime.clients import (
    CLOSED,
    REFUSAL_KINDS,
    REQUEST_TIMEOUT,
    UNANSWERABLE_QUERY,
    Refusal,
    RefusalLog,
    first_request,
    refusal_of,
)
from hailstorm.runtime.data_plane import HANDSHAKE_TIMEOUT, MAX_HANDSHAKES

__all__ = ["Gate", "Opened", "recv_request"]

log = logging.getLogger("hailstorm.processor")

Opened = tuple[Hello | Query, FrameReader, ssl.SSLSocket, list[Frame]]
"""An authenticated connection's first request, its reader, its TLS stream (the socket to
use from then on), and the frames that came after the request."""


def recv_request(sock: socket.socket, reader: FrameReader,
                 timeout: float = REQUEST_TIMEOUT) -> list[Frame]:
    """The first frames of a connection, read within ``timeout`` seconds in all (however
    slowly the bytes trickle in); ``[]`` when the client closed cleanly before a whole frame.
    Raises ``TimeoutError``, ``OSError``, ``FrameError`` or ``AuthError``."""
    deadline = time.monotonic() + timeout
    chunk = bytearray(64 * 1024)
    with memoryview(chunk) as view:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no request in time")
            sock.settimeout(left)
            n = sock.recv_into(view)
            if n == 0:
                reader.close()
                return []
            frames = reader.feed(view[:n])
            if frames:
                return frames


class Gate:
    """The connections a processor's listener accepted, up to their first request."""

    def __init__(self, processor: str, metrics: ProcessorMetrics, io_timeout: float,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self.processor = processor
        self.metrics = metrics
        self.io_timeout = io_timeout
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._refusals = RefusalLog()
        self._lock = threading.Lock()
        for kind in REFUSAL_KINDS:  # every kind scraped from the start, at 0
            metrics.refused_requests(kind)

    def admit(self, sock: socket.socket, address: Any) -> bool:
        """Take one of :data:`MAX_HANDSHAKES` slots for ``sock`` (refused when none is free);
        :meth:`open` gives it back."""
        if self._slots.acquire(blocking=False):
            return True
        self.refuse(sock, address, f"over {MAX_HANDSHAKES} handshakes at once")
        return False

    def open(self, sock: socket.socket, address: Any, secret: RunSecret) -> Opened | None:
        """The TLS handshake and the first frame of an admitted connection, then its slot
        back; None when the connection was refused."""
        try:
            try:
                tls = accept_peer(sock, secret, self.processor, HANDSHAKE_TIMEOUT)
            except (AuthError, OSError) as exc:
                self.refuse(sock, address, exc)
                return None
            reader = FrameReader(max_first_frame_size=MAX_REQUEST_SIZE)
            try:
                frames = recv_request(tls, reader, self.request_timeout)
                return first_request(frames), reader, tls, frames[1:]
            except Exception as exc:  # whatever a client sends, never a failure
                refusal = refusal_of(exc, self.request_timeout)
                self.refuse_client(tls, address, refusal)
                with contextlib.suppress(OSError):
                    tls.close()
                return None
        finally:
            self._slots.release()

    def refuse(self, sock: socket.socket, address: Any, why: object) -> None:
        """Close a connection that did not authenticate: logged and counted, never a failure
        of this processor (a port scan or a stranger must not restart the topology)."""
        self.metrics.refused_connections.inc()
        self._log("unauthenticated", f"refused a data-plane connection from {address}: {why}")
        with contextlib.suppress(OSError):
            sock.close()

    def refuse_client(self, sock: socket.socket, address: Any,
                      refusal: Refusal, answer: dict[str, Any] | None = None) -> None:
        """Refuse an authenticated client: counted by kind, logged, answered with ``answer``
        (else the reason) where the stream allows; the caller closes the connection."""
        self.metrics.refused_requests(refusal.kind).inc()
        self._log(refusal.kind, f"refused a data-plane client at {address}: {refusal}")
        if refusal.answerable:
            me = self.processor
            reply = answer or {"processor": me, "error": f"{me} refused the request: {refusal}"}
            with contextlib.suppress(Exception):  # the client may be gone: nothing to tell
                sock.settimeout(HANDSHAKE_TIMEOUT)
                send_frames(sock, [Answer(reply)])

    def answer_query(self, sock: socket.socket, address: Any,
                     query: Query, answer: Callable[[Query], dict[str, Any]]) -> None:
        """Send ``answer(query)``; an error in it, or a client gone, is a refusal."""
        try:
            fields = answer(query)
        except Exception as exc:  # broad: a failed answer is the client's refusal, not ours
            fields = {"processor": self.processor, "error": f"{type(exc).__name__}: {exc}"}
        if fields.get("error"):
            refusal = Refusal(UNANSWERABLE_QUERY, str(fields["error"]))
            self.refuse_client(sock, address, refusal, fields)
            return
        try:
            sock.settimeout(self.io_timeout)
            send_frames(sock, [Answer(fields)])
        except OSError as exc:
            refusal = Refusal(CLOSED, f"gone before its answer was sent: {exc}", False)
            self.refuse_client(sock, address, refusal)
            return
        except Exception as exc:  # an answer that does not encode (too large, unpicklable)
            refusal = Refusal(UNANSWERABLE_QUERY, f"the answer does not encode: {exc}")
            self.refuse_client(sock, address, refusal)
            return
        self.metrics.live_queries.inc()

    def _log(self, kind: str, line: str) -> None:
        """Log ``line`` unless a refusal of ``kind`` was logged in the last minute."""
        with self._lock:
            unlogged = self._refusals.note(kind, time.monotonic())
        if unlogged is not None:
            log.warning("%s%s", line, f" ({unlogged} more {kind} refusals since the last "
                                      "such line)" if unlogged else "")
