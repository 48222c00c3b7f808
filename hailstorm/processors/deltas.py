"""Whether a bolt's next snapshot may be a delta, and the snapshot it hands out (pure).

A keyed bolt's core knows which keys of ``A`` changed since the last snapshot it handed
out: tuples absorbed into ``A``, keys a sweep of closed windows dropped, and ``B``'s keys
when ``B`` folds into ``A``. A round's snapshot may then hold only those keys, on top of
the previous one. The chain of deltas since a whole snapshot ends after
:data:`DELTA_CHAIN_MAX` deltas, or when the keys written in deltas since the last whole or
differential snapshot would exceed the state's size: loading then reads at most about
twice the state. A chain ends with a **differential** snapshot when the keys changed since
the last whole snapshot are at most :data:`DIFFERENTIAL_MAX` of the state: it holds those
keys, on top of that whole one, and the next deltas build on it. Otherwise, and when the
instance was not loaded from one snapshot it may build on, the snapshot holds the whole
state.

So a whole snapshot costs at most about twice the keys written since the last one, and a
state much larger than what changes between rounds (a large, stable key space) is written
whole only when much of it changed, not every :data:`DELTA_CHAIN_MAX` rounds: the cost of a
round's snapshot follows what changed, not the state's size. A load reads at most a whole
file, a differential one and :data:`DELTA_CHAIN_MAX` deltas (twice as many deltas after a
recovery: a new incarnation's first chain continues the one it loaded, and ends whole).
"""

from __future__ import annotations

from typing import Any

from hailstorm.monoids import KeyedMap, Monoid
from hailstorm.processors.actions import Marks, SnapshotContent, WriteSnapshot

__all__ = ["DELTA_CHAIN_MAX", "DIFFERENTIAL_MAX", "WRITER_COPY_MAX", "DeltaChain"]

DELTA_CHAIN_MAX = 32
"""Deltas in a row at most before a differential or whole snapshot (bounds the files a load
reads)."""

DIFFERENTIAL_MAX = 0.5
"""The share of the state's keys changed since the last whole snapshot up to which a chain
ends with a differential snapshot of them rather than a whole one: past it, the two cost
about the same to write, and the whole one is the only file a load then reads."""

WRITER_COPY_MAX = 20_000
"""A delta of at most this many keys is copied by the snapshot writer thread while the bolt
absorbs on; a whole state or a bigger delta (behind a backlog, where a round holds most of
the keys read since the last) is copied as it is handed out, and ``B`` folds at once.
Meanwhile ``A`` stays as it is and everything absorbed goes to ``B``, to be absorbed again
by the fold: worth it for a copy of a few milliseconds, which the writer takes at once,
not for one that keeps ``A`` apart for seconds."""


class DeltaChain:
    """The keys changed since the last snapshot and the chain of deltas since a whole one.

    ``loaded_whole``: the instance's state is exactly the content of one snapshot of it,
    which the next snapshot may build on as a delta.
    """

    def __init__(self, monoid: Monoid[Any], loaded_whole: bool) -> None:
        self._monoid = monoid
        self._keyed_map = monoid if isinstance(monoid, KeyedMap) else None
        """The state's ``KeyedMap``: only keyed state has deltas."""
        self.changed: set[Any] | None = (
            set() if loaded_whole and self._keyed_map is not None else None)
        """Keys of ``A`` changed since the last snapshot handed out (or the loaded one);
        None when the next snapshot must be whole. Add to it what changes ``A``."""
        self._length = 0
        """Deltas handed out since the last whole or differential snapshot (or the load)."""
        self._keys = 0
        """Keys those deltas (and that differential snapshot) held."""
        self._since_whole: set[Any] | None = None
        """Keys handed out in snapshots since the last whole one this core handed out; None
        before it handed out one (a loaded chain's are not known), and once they are more
        than :data:`DIFFERENTIAL_MAX` of the state: every key added or changed later adds to
        them too, so they stay more and the chain ends whole (the set holds at most about
        half the state and a round's keys)."""

    def snapshot_of(self, epoch: int, label: Marks, state: Any) -> WriteSnapshot:
        """The snapshot of round ``epoch`` at ``label`` (``state`` is its segment ``A``,
        copied when the snapshot is first read, at once unless it is a delta of at most
        :data:`WRITER_COPY_MAX` keys: ``A`` must not change until then, see
        :class:`~hailstorm.processors.actions.SnapshotContent`): a delta of the keys
        changed since the last one where the policy allows, else a differential snapshot
        on the last whole one, else whole (see the module)."""
        changed = self.changed
        if changed is not None:
            if (self._length < DELTA_CHAIN_MAX
                    and self._keys + len(changed) <= len(state)):
                self._length += 1
                self._keys += len(changed)
                since_whole = self._since_whole
                if since_whole is not None:
                    since_whole |= changed
                    if len(since_whole) > DIFFERENTIAL_MAX * len(state):
                        self._since_whole = None  # past half, it stays past: ends whole
                return self._delta(epoch, label, state, list(changed), on_whole=False)
            since_whole = self._since_whole
            if since_whole is not None:
                since_whole |= changed
                if len(since_whole) <= DIFFERENTIAL_MAX * len(state):
                    self._length, self._keys = 0, len(since_whole)
                    return self._delta(epoch, label, state, list(since_whole),
                                       on_whole=True)
        self._length = self._keys = 0
        if self._keyed_map is not None:
            self.changed = set()  # the next may build on this one
            self._since_whole = set()
        keyed_map, monoid = self._keyed_map, self._monoid
        content = SnapshotContent(lambda: monoid.copy(state) if keyed_map is None
                                  else keyed_map.copy_keys(state))
        content.get()  # a whole state: copied as it is handed out (see WRITER_COPY_MAX)
        return WriteSnapshot(epoch, dict(label), content)

    def _delta(self, epoch: int, label: Marks, state: Any, keys: list[Any], *,
               on_whole: bool) -> WriteSnapshot:
        """The snapshot of ``keys`` of ``state`` (a key dropped since: its identity), on
        the previous snapshot, or ``on_whole``, on the last whole one."""
        assert self._keyed_map is not None  # changed is None for other state
        copy_keys = self._keyed_map.copy_keys
        content = SnapshotContent(lambda: copy_keys(state, keys))
        if len(keys) > WRITER_COPY_MAX:
            content.get()
        return WriteSnapshot(epoch, dict(label), content, delta=True, on_whole=on_whole)

    def folding(self, b: Any) -> None:
        """``B`` folds into ``A``, whose snapshot was copied: ``B``'s keys are what ``A``
        changed by since that snapshot (keyed state; nothing to do for other state)."""
        if self.changed is not None:
            self.changed = set(b)

    def merging(self, b: Any) -> None:
        """``B`` folds into ``A`` with no snapshot between (a round dropped): its keys
        changed ``A`` too."""
        if self.changed is not None:
            self.changed.update(b)
