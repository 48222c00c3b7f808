"""What a reader of ZooKeeper already knows: each node's data and each directory's children
as last read, kept while the one-shot watch armed by that read has not fired.

The negotiator reads its whole view at every wake-up
(:meth:`~hailstorm.protocol.records.TopologyRecords.read_view`), and a wake-up follows every
report any processor writes: about eight a second while snapshot rounds run, twenty reads
each, most of them of nodes that did not change. :class:`KnownNodes` lets it ask only for
what changed since.

Why that is exactly as fresh as reading everything again:

* every value kept was read with :meth:`changed` armed on its node, and ZooKeeper tells a
  watcher of a change before it answers any later request of that session, so a value is
  dropped (:meth:`changed`) before anything newer could have been read;
* kazoo runs watch callbacks on a thread of their own, after its reader thread passed them
  on: :meth:`settle` waits until every callback queued so far has run, so that after a
  ``sync`` each node changed before it reads as changed;
* a value read while its node's watch fired (or the connection dropped) is returned but not
  kept: the read's answer may predate the change (a token taken before the read says so);
* a dropped connection fires every watch with no path (kazoo's reset): everything is
  forgotten, and the next reads arm the watches again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import Callback, ZnodeStat

__all__ = ["SETTLE_TIMEOUT", "KnownNodes", "NodeData", "Token", "Watch"]

Watch = Callable[[Any], None]
"""A kazoo watch callback (called once with the event)."""

SETTLE_TIMEOUT = 1.0
"""Longest wait (s) for kazoo's callback thread in :meth:`KnownNodes.settle`; it only runs
short watch callbacks, so a longer wait means it is stuck, and the reader goes on."""

NodeData = tuple[bytes | None, ZnodeStat | None]
"""A node's data and stat as read (``(None, None)``: absent, watched for its creation)."""

Token = tuple[int, int]
"""How often a path was changed and everything was forgotten, taken before a read."""


class KnownNodes:
    """Nodes' data and directories' children as last read, until their watch fires; every
    watch event is passed on to ``wake``."""

    def __init__(self, client: KazooClient, wake: Watch) -> None:
        self._client = client
        self._wake = wake
        self._lock = threading.Lock()
        self._data: dict[str, NodeData] = {}
        self._children: dict[str, list[str]] = {}
        self._changes: dict[str, int] = {}
        """Each path's count of watch events: a read taken before one is not kept."""
        self._resets = 0
        """Count of dropped connections (kazoo fired every watch with no path)."""

    def changed(self, event: Any) -> None:
        """The watch every read through this object arms: forget what the event's node (or
        directory) held, then wake the reader."""
        path = getattr(event, "path", None)
        with self._lock:
            if path is None:  # the connection dropped: kazoo dropped every watch with it
                self._data.clear()
                self._children.clear()
                self._resets += 1
            else:
                self._data.pop(path, None)
                self._children.pop(path, None)
                self._changes[path] = self._changes.get(path, 0) + 1
        self._wake(event)

    def settle(self) -> None:
        """Wait until kazoo has run every watch callback it had queued when called."""
        ran = threading.Event()
        self._client.handler.dispatch_callback(Callback("watch", ran.set, ()))
        ran.wait(SETTLE_TIMEOUT)

    def token(self, path: str) -> Token:
        """Taken before reading ``path``: :meth:`keep_data` and :meth:`keep_children` keep
        the answer only if no watch event for it came in between."""
        with self._lock:
            return self._changes.get(path, 0), self._resets

    def data(self, path: str) -> NodeData | None:
        """What ``path`` held when last read (None: unknown, read it)."""
        with self._lock:
            return self._data.get(path)

    def children(self, path: str) -> list[str] | None:
        """The children of ``path`` when last listed (None: unknown, list it)."""
        with self._lock:
            return self._children.get(path)

    def keep_data(self, path: str, token: Token, value: NodeData) -> None:
        """Keep ``value``, read with :meth:`changed` armed after ``token`` was taken."""
        with self._lock:
            if (self._changes.get(path, 0), self._resets) == token:
                self._data[path] = value

    def keep_children(self, path: str, token: Token, names: list[str]) -> None:
        """Keep ``names``, listed with :meth:`changed` armed after ``token`` was taken."""
        with self._lock:
            if (self._changes.get(path, 0), self._resets) == token:
                self._children[path] = names
