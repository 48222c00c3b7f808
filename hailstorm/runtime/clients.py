"""What a listener makes of an authenticated connection before it is a peer (issue 40).

A connection that passed the TLS handshake (:mod:`hailstorm.auth`) is a *client* until its
first frame says otherwise. Only a HELLO of an upstream instance in this processor's run
makes it a *peer*, whose broken connection is a fault of the topology and fails the
processor. Everything else a client does (close, stall, garbage, a broken TLS record, an
oversized or malformed request, a DATA frame first, a HELLO of another run or of no
upstream, a QUERY the bolt cannot answer) is a :class:`Refusal`: the connection is closed,
counted by :attr:`Refusal.kind` (``hailstorm_refused_requests_total``) and, where the
stream still allows a frame, answered with an ANSWER carrying the reason, which
``hailstorm query --live`` prints.

All of it is pure; :mod:`hailstorm.runtime.gate` applies it to sockets.
"""

from __future__ import annotations

from collections.abc import Collection

from hailstorm.errors import ProtocolError
from hailstorm.protocol.wire import (
    MAX_REQUEST_SIZE,
    Frame,
    FrameError,
    FrameKind,
    FrameTooLargeError,
    Hello,
    Query,
    StreamEndedError,
)

__all__ = [
    "REFUSAL_KINDS",
    "REQUEST_TIMEOUT",
    "Refusal",
    "RefusalLog",
    "first_request",
    "hello_refusal",
    "refusal_of",
]

REQUEST_TIMEOUT = 10.0
"""Seconds an authenticated connection has to send its whole first frame, HELLO or QUERY
(a peer and the query client send it at once)."""

CLOSED = "closed"
STALLED = "stalled"
OVERSIZED = "oversized"
GARBLED = "garbled"
MALFORMED_QUERY = "malformed_query"
UNEXPECTED_FRAME = "unexpected_frame"
FOREIGN_HELLO = "foreign_hello"
UNANSWERABLE_QUERY = "unanswerable_query"
OTHER = "other"
REFUSAL_KINDS = (CLOSED, STALLED, OVERSIZED, GARBLED, MALFORMED_QUERY,
                 UNEXPECTED_FRAME, FOREIGN_HELLO, UNANSWERABLE_QUERY, OTHER)
"""Every :attr:`Refusal.kind` (the label values of ``hailstorm_refused_requests_total``)."""


class Refusal(ProtocolError):
    """An authenticated connection refused before it became a peer: ``kind`` (one of
    :data:`REFUSAL_KINDS`) and a one-line ``reason``; ``answerable``: the stream still
    allows an ANSWER frame (the client is not gone and the frames it reads stay in step)."""

    def __init__(self, kind: str, reason: str, answerable: bool = True) -> None:
        super().__init__(kind, reason, answerable)
        self.kind = kind
        self.reason = reason
        self.answerable = answerable

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


def refusal_of(exc: BaseException, timeout: float = REQUEST_TIMEOUT) -> Refusal:
    """The refusal an error raised while reading a client's first frame stands for."""
    if isinstance(exc, Refusal):
        return exc
    if isinstance(exc, TimeoutError):  # before OSError: socket timeouts are OSErrors
        return Refusal(STALLED, f"sent no whole request within {timeout:g} s")
    if isinstance(exc, StreamEndedError):
        return Refusal(CLOSED, f"closed in the middle of its first frame ({exc})", False)
    if isinstance(exc, OSError):
        return Refusal(CLOSED, f"connection lost before a request: {exc}", False)
    if isinstance(exc, FrameTooLargeError):
        return Refusal(OVERSIZED, f"{exc} (at most {MAX_REQUEST_SIZE} bytes: ask for fewer "
                                  "keys at once)")
    if isinstance(exc, FrameError):
        kind = MALFORMED_QUERY if exc.frame_kind is FrameKind.QUERY else GARBLED
        return Refusal(kind, str(exc))
    return Refusal(OTHER, f"{type(exc).__name__}: {exc}")


def first_request(frames: list[Frame]) -> Hello | Query:
    """The HELLO or QUERY that opens a connection (``frames``: the first frames read, ``[]``
    when the client closed cleanly); raises :class:`Refusal` for anything else."""
    if not frames:
        raise Refusal(CLOSED, "closed without sending a request", answerable=False)
    first = frames[0]
    if isinstance(first, Query):
        if len(frames) > 1:
            raise Refusal(UNEXPECTED_FRAME, f"sent a {type(frames[1]).__name__} frame after "
                                            "its QUERY (a QUERY comes alone)")
        return first
    if isinstance(first, Hello):
        return first
    raise Refusal(UNEXPECTED_FRAME, f"opened with a {type(first).__name__} frame, not HELLO "
                                    "or QUERY")


def hello_refusal(hello: Hello, *, me: str, joined: int | None, upstreams: Collection[str],
                  peer: str | None = None) -> Refusal | None:
    """Why a HELLO does not make a peer of this processor (None: it does): it must name this
    processor, the run it joined, and an upstream instance of it as the sender, the one the
    connection's TLS certificate names (``peer``, when given)."""
    if joined is None:
        return Refusal(FOREIGN_HELLO, f"HELLO from {hello.sender} before {me} joined a run")
    if hello.receiver != me or hello.epoch != joined:
        return Refusal(FOREIGN_HELLO, f"HELLO from {hello.sender} for {hello.receiver} in "
                                      f"epoch {hello.epoch}: this is {me} in epoch {joined}")
    if hello.sender not in upstreams:
        return Refusal(FOREIGN_HELLO, f"HELLO from {hello.sender}, which is not an upstream "
                                      f"of {me}")
    if peer is not None and peer != hello.sender:
        return Refusal(FOREIGN_HELLO, f"HELLO from {hello.sender} over a connection whose "
                                      f"certificate names {peer}")
    return None


class RefusalLog:
    """When to log a refusal: the first of each kind at once, then at most one line per kind
    every ``interval`` seconds, saying how many went unlogged (a client looping on garbage
    costs a line a minute, not a line a connection). Pure: the caller passes the time."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._logged: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def note(self, kind: str, now: float) -> int | None:
        """Record one refusal of ``kind`` at ``now``: None to stay quiet, else log it now
        with the returned number of refusals of that kind not logged since its last line."""
        last = self._logged.get(kind)
        if last is not None and now - last < self.interval:
            self._quiet[kind] = self._quiet.get(kind, 0) + 1
            return None
        self._logged[kind] = now
        return self._quiet.pop(kind, 0)
