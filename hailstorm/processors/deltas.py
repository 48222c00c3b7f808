"""Whether a bolt's next snapshot may be a delta, and the snapshot it hands out (pure).

A keyed bolt's core knows which keys of ``A`` changed since the last snapshot it handed
out: tuples absorbed into ``A``, keys a sweep of closed windows dropped, and ``B``'s keys
when ``B`` folds into ``A``. A round's snapshot may then hold only those keys, on top of
the previous one. It holds the whole state instead when the instance was not loaded from
one snapshot it may build on, after :data:`DELTA_CHAIN_MAX` deltas, or when the keys
written in deltas since the last whole snapshot would exceed the state's size: loading then
reads at most about twice the state, and whole snapshots cost at most as much as the
deltas between them.
"""

from __future__ import annotations

from typing import Any

from hailstorm.monoids import KeyedMap, Monoid
from hailstorm.processors.actions import Marks, SnapshotContent, WriteSnapshot

__all__ = ["DELTA_CHAIN_MAX", "WRITER_COPY_MAX", "DeltaChain"]

DELTA_CHAIN_MAX = 32
"""Deltas in a row at most before a whole snapshot (bounds the files a load reads)."""

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
        """Deltas handed out since the last whole snapshot (or the load)."""
        self._keys = 0
        """Keys those deltas held."""

    def snapshot_of(self, epoch: int, label: Marks, state: Any) -> WriteSnapshot:
        """The snapshot of round ``epoch`` at ``label`` (``state`` is its segment ``A``,
        copied when the snapshot is first read, at once unless it is a delta of at most
        :data:`WRITER_COPY_MAX` keys: ``A`` must not change until then, see
        :class:`~hailstorm.processors.actions.SnapshotContent`): a delta of the keys
        changed since the last one where the policy allows (see the module), else whole."""
        changed = self.changed
        if (changed is not None and self._length < DELTA_CHAIN_MAX
                and self._keys + len(changed) <= len(state)):
            self._length += 1
            self._keys += len(changed)
            keys = list(changed)
            assert self._keyed_map is not None  # changed is None for other state
            copy_keys = self._keyed_map.copy_keys  # a key dropped since: its identity
            content = SnapshotContent(lambda: copy_keys(state, keys))
            if len(keys) > WRITER_COPY_MAX:
                content.get()
            return WriteSnapshot(epoch, dict(label), content, delta=True)
        self._length = self._keys = 0
        if self._keyed_map is not None:
            self.changed = set()  # the next may build on this one
        keyed_map, monoid = self._keyed_map, self._monoid
        content = SnapshotContent(lambda: monoid.copy(state) if keyed_map is None
                                  else keyed_map.copy_keys(state))
        content.get()  # a whole state: copied as it is handed out (see WRITER_COPY_MAX)
        return WriteSnapshot(epoch, dict(label), content)

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
