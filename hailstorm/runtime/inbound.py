"""The inbound data plane of bolts and sinks: a listener, one reader thread per upstream
(its HELLO checked, :mod:`~hailstorm.runtime.gate`), and a bounded queue to the main thread,
which reads it in :meth:`InboundShell.step` (a full queue stops the readers: back pressure).
An upstream that restarts alone (a local recovery) ends its connection without failing the
receiver: its end reaches the main thread after its frames, as :class:`SenderGone`."""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hailstorm.auth import peer_identity
from hailstorm.protocol.wire import (
    Bye,
    Frame,
    FrameReader,
    Query,
    StreamEndedError,
    recv_frames,
)
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.clients import hello_refusal
from hailstorm.runtime.data_plane import DataPlaneError
from hailstorm.runtime.processor import POLL, Shell
from hailstorm.topology import Topology

__all__ = ["BEHIND_FRAMES", "QUEUE_FRAMES", "Inbound", "InboundShell", "LiveQuery",
           "SenderGone", "Wake"]

log = logging.getLogger("hailstorm.processor")

QUEUE_FRAMES = 64
"""Frames buffered between the socket readers and a bolt's (or sink's) main thread."""
BEHIND_FRAMES = QUEUE_FRAMES // 2
"""Frames waiting in that queue (half of it) from which a bolt counts as behind its
upstreams (:attr:`InboundShell.behind`): reading a backlog, it batches its output longest.
(A sink's cadence asks only whether any frame waits: see
:mod:`hailstorm.processors.sink_core`.)"""


@dataclass(frozen=True)
class SenderGone:
    """The connection from an upstream instance that restarts alone ended (``why``); its
    next incarnation connects again (a local recovery)."""

    why: str


@dataclass(frozen=True)
class LiveQuery:
    """A live query handed to a bolt's main thread, which puts the answer in ``reply``."""

    query: Query
    reply: queue.Queue[dict[str, Any]] = field(default_factory=lambda: queue.Queue(1))


@dataclass(frozen=True)
class Wake:
    """Put in the queue by another thread of the processor that has something for the
    main thread (a sink's commit ended): the main thread, waiting for a frame, looks."""


Inbound = Frame | LiveQuery | SenderGone | Wake
"""What a bolt's or sink's readers (and its other threads) hand to its main thread."""


class InboundShell(Shell):
    """Bolts and sinks: a listener, one reader thread per upstream, a bounded queue."""

    def __init__(self, assignment: Assignment, topology: Topology) -> None:
        super().__init__(assignment, topology)
        self.listener: socket.socket | None = None
        self._accepted: set[socket.socket] = set()
        self._connections: dict[str, socket.socket] = {}
        """The connection of each upstream that restarts alone (:meth:`_one_connection_of`)."""
        self._turns: dict[str, threading.Lock] = {}
        self._connections_lock = threading.Lock()

    def listen(self, address: str, info: dict[str, Any]) -> None:
        self.listener = socket.create_server((address, 0))
        self.listener.settimeout(POLL)  # how soon the accept loop sees a stop
        info["port"] = self.listener.getsockname()[1]
        self._start_thread("accept", self._accept_loop)

    def setup(self) -> None:
        self.inbound: queue.Queue[tuple[str, Inbound]] = queue.Queue(QUEUE_FRAMES)

    def shutdown(self) -> None:
        self.stopping.set()
        for sock in [*self._accepted, *([self.listener] if self.listener else [])]:
            with contextlib.suppress(OSError):
                sock.close()
        super().shutdown()

    def deliver(self, sender: str, frame: Inbound) -> None:
        deadline = time.monotonic() + self.assignment.io_timeout
        while not self.stopping.is_set():
            try:
                self.inbound.put((sender, frame), timeout=POLL)
                return
            except queue.Full:
                if time.monotonic() > deadline and self.topology_waits():
                    deadline = time.monotonic() + self.assignment.io_timeout
                elif time.monotonic() > deadline:
                    raise DataPlaneError(
                        f"the main thread took no frame for {self.assignment.io_timeout} s"
                    ) from None

    def step(self) -> None:
        if self.joined is None:  # nothing arrives before it joins: answer the master at once
            super().step()
            return
        try:
            sender, frame = self.inbound.get(timeout=POLL)
        except queue.Empty:
            self.on_idle()
            return
        self.on_frame(sender, frame)
        for _ in range(QUEUE_FRAMES):  # drain what is there before looking at ZooKeeper
            if self._failure is not None:
                return
            try:
                sender, frame = self.inbound.get_nowait()
            except queue.Empty:
                return
            self.on_frame(sender, frame)

    def wake(self) -> None:
        """From another thread: have the main thread look now (a :class:`Wake`), unless
        frames fill the queue (it is reading them then)."""
        with contextlib.suppress(queue.Full):
            self.inbound.put_nowait(("", Wake()))

    @property
    def behind(self) -> bool:
        """:data:`BEHIND_FRAMES` or more frames wait to be read."""
        return self.inbound.qsize() >= BEHIND_FRAMES

    def on_frame(self, sender: str, frame: Inbound) -> None:
        raise NotImplementedError

    def on_idle(self) -> None:
        """Nothing arrived for :data:`POLL` seconds."""

    def answer(self, query: Query) -> dict[str, Any]:
        """The fields of the ANSWER to a live query (only bolts hold state)."""
        return {"processor": self.assignment.processor,
                "error": f"{self.assignment.processor} is not a bolt: it holds no state"}

    def _accept_loop(self) -> None:
        assert self.listener is not None
        while not self.stopping.is_set():
            try:
                sock, address = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stopping.is_set():
                    return
                raise
            if not self.gate.admit(sock, address):
                continue
            self._accepted.add(sock)
            self._start_thread("receive", self._receive, sock, address)

    def _receive(self, sock: socket.socket, address: Any) -> None:
        try:
            opened = self.gate.open(sock, address, self.secret)
            if opened is None:
                return
            request, reader, tls, rest = opened
            self._accepted.discard(sock)  # the TLS stream owns the connection now
            self._accepted.add(tls)
            sock = tls
            if isinstance(request, Query):
                self.gate.answer_query(sock, address, request, self.answer)
                return
            self.joined_event.wait(self.assignment.io_timeout)
            refusal = hello_refusal(request, me=self.assignment.processor, joined=self.joined,
                                    upstreams=self.upstream_ids(), peer=peer_identity(tls))
            if refusal is not None:
                self.gate.refuse_client(sock, address, refusal)
                return
            self._serve(sock, reader, request.sender, rest)
        finally:
            self._accepted.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self, sock: socket.socket, reader: FrameReader, sender: str,
               frames: list[Frame]) -> None:
        """Frames of a peer of this run (its HELLO accepted) until BYE: from here on a
        broken connection is a fault of the topology and fails this processor, unless the
        peer restarts alone (:meth:`goes_on_without`): then its end is handed on, after
        its frames, as :class:`SenderGone`."""
        if not self.goes_on_without(sender):
            self._frames_of(sock, reader, sender, frames)
            return
        with self._one_connection_of(sender, sock):
            try:
                self._frames_of(sock, reader, sender, frames)
            except DataPlaneError as exc:
                if self.stopping.is_set() or self._stop_of_this_run() is not None:
                    raise  # it left a stopped run
                self.deliver(sender, SenderGone(str(exc)))

    @contextlib.contextmanager
    def _one_connection_of(self, sender: str, sock: socket.socket) -> Iterator[None]:
        """Serve ``sender`` on ``sock`` alone: a connection of its predecessor (one that
        restarts alone, its old process perhaps only stopped) is shut first, and its reader
        hands on all its frames and its :class:`SenderGone` before this one's first frame,
        so the main thread parts from the old incarnation before it hears the new one."""
        with self._connections_lock:
            older = self._connections.get(sender)
            self._connections[sender] = sock
            turn = self._turns.setdefault(sender, threading.Lock())
        if older is not None:
            with contextlib.suppress(OSError):
                older.shutdown(socket.SHUT_RDWR)  # wakes its reader, blocked or not
        with turn:
            try:
                yield
            finally:
                with self._connections_lock:
                    if self._connections.get(sender) is sock:
                        del self._connections[sender]

    def _frames_of(self, sock: socket.socket, reader: FrameReader, sender: str,
                   frames: list[Frame]) -> None:
        log.debug("accepted %s", sender)
        sock.settimeout(None)  # idle upstreams are normal; liveness is ZooKeeper's job
        while True:
            for frame in frames:
                if isinstance(frame, Bye):
                    raise DataPlaneError(f"{sender} closed its connection", peer=sender)
                self.deliver(sender, frame)
            try:
                frames = recv_frames(sock, reader)
            # Reset, or closed inside a frame (killed while it sent one): the peer is gone
            # as surely as after a close.
            except (OSError, StreamEndedError) as exc:
                raise DataPlaneError(f"{sender}'s connection broke: {exc}", peer=sender) from exc
            if not frames:
                raise DataPlaneError(f"{sender} closed its connection", peer=sender)
