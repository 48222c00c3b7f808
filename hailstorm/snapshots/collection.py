"""Garbage collection of a snapshot store, whatever holds the files
(:class:`SnapshotCollection`, a base of :class:`~hailstorm.snapshots.store.SnapshotStore`):
removing the rounds a commit made garbage, keeping every file a kept round builds on
(delta and differential snapshots name their base in their header, however deep), and
the primitives over the stored files it needs, which each store provides.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from hailstorm.snapshots.format import _KEY, SnapshotError, SnapshotRef

__all__ = ["SnapshotCollection"]


def _identity(key: str) -> tuple[str, int, int]:
    """``(bolt, instance, epoch)`` of a checked snapshot key."""
    match = _KEY.match(key)
    assert match is not None
    return match["bolt"], int(match["instance"]), int(match["epoch"])


class SnapshotCollection(ABC):
    """Garbage collection over a store's files (see the module)."""

    @abstractmethod
    def owned_key(self, location: str, topology: str,
                  epochs: Collection[int] | None = None) -> str:
        """The key of the snapshot file ``location`` names, checked to be of ``topology``
        (and of one of ``epochs``); else :class:`~.format.SnapshotRefRefused`."""

    @abstractmethod
    def _files(self, topology: str) -> Iterator[tuple[str, int, int, Any, bool]]:
        """``(bolt, instance, epoch, locator, is_temp)`` of every snapshot-like file of
        ``topology`` (``locator`` is what :meth:`_remove` and :meth:`_written_at` take)."""

    @abstractmethod
    def _remove(self, locators: Iterable[Any]) -> builtins.list[str]:
        """Remove the files (gone already is fine); the keys of those removed."""

    @abstractmethod
    def _written_at(self, locator: Any) -> float:
        """When the file was written (POSIX time; ``inf`` when it is gone)."""

    @abstractmethod
    def _ref_at(self, locator: Any) -> SnapshotRef:
        """The snapshot at ``locator`` (as :meth:`_files` gives it), from its header."""

    def _base_at(self, locator: Any) -> str | None:
        """The key of the snapshot the one at ``locator`` is a delta on (None: whole), from
        its header (:meth:`_ref_at`; raises :class:`SnapshotError` when unreadable)."""
        return self._ref_at(locator).base

    def _with_bases(self, files: builtins.list[tuple[str, int, int, Any, bool]],
                    kept: set[tuple[str, int, int]]) -> set[tuple[str, int, int]]:
        """``kept`` (``(bolt, instance, epoch)`` of snapshot files) and every file a kept
        delta builds on, however deep."""
        locators = {(b, i, e): loc for b, i, e, loc, temp in files if not temp}
        result: set[tuple[str, int, int]] = set()
        todo = [k for k in kept if k in locators]
        while todo:
            ident = todo.pop()
            if ident in result:
                continue
            result.add(ident)
            try:
                base = self._base_at(locators[ident])
            except SnapshotError:
                continue  # unreadable: nothing to follow (loading it reports it)
            match = _KEY.match(base) if base is not None else None
            if match is not None:
                found = (match["bolt"], int(match["instance"]), int(match["epoch"]))
                if found in locators:
                    todo.append(found)
        return result

    def delete_older_than(self, topology: str, epoch: int) -> builtins.list[str]:
        """Remove the rounds before ``epoch``; keeps each bolt's latest round regardless.

        Returns the removed keys.
        """
        files = list(self._files(topology))
        newest: dict[str, int] = {}
        for bolt, _, e, _, temp in files:
            if not temp:
                newest[bolt] = max(e, newest.get(bolt, -1))
        kept = self._with_bases(files, {(bolt, i, e) for bolt, i, e, _, temp in files
                                        if not temp and (e >= epoch or e == newest[bolt])})
        return self._remove(
            locator for bolt, i, e, locator, temp in files
            if e < epoch and (temp or (bolt, i, e) not in kept)
        )

    def forget_rounds(
        self,
        topology: str,
        up_to_epoch: int,
        keep_epochs: Iterable[int],
        written_before: float | None = None,
        keep_refs: Iterable[str] = (),
    ) -> builtins.list[str]:
        """Remove every snapshot (and leftover temporary file) of rounds ``<= up_to_epoch``
        except those of ``keep_epochs``: what a commit of round ``up_to_epoch`` made garbage
        (the negotiator keeps the new committed round and the previous one). With
        ``written_before`` (a POSIX time) only files written before it go, so that a reader
        of a recently superseded round (``hailstorm export``) can finish. ``keep_refs``
        (the committed records' refs, read from ZooKeeper) are kept too, and checked first
        (:meth:`owned_key`, of ``keep_epochs``): one that names anything but a snapshot of
        those rounds of ``topology`` in this store is :class:`SnapshotRefRefused`, and
        nothing is removed.

        Returns the removed keys.
        """
        keep = frozenset(keep_epochs)
        named = [self.owned_key(ref, topology, keep) for ref in keep_refs]
        files = list(self._files(topology))
        kept = self._with_bases(files, {(b, i, e) for b, i, e, _, temp in files
                                        if not temp and (e in keep or e > up_to_epoch)}
                                | {_identity(key) for key in named})
        return self._remove(
            locator for b, i, e, locator, temp in files
            if e <= up_to_epoch and (temp or (b, i, e) not in kept)
            and (written_before is None or self._written_at(locator) < written_before)
        )
