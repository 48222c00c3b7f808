"""Helpers shared by unit tests of the snapshot store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hailstorm.monoids import Monoid
from hailstorm.snapshots import DirectorySnapshotStore, SnapshotRef, snapshot_key
from hailstorm.snapshots.format import LAYOUT_PER_KEY, write_snapshot

PutFormat1 = Callable[..., SnapshotRef]


@pytest.fixture
def put_format_1() -> PutFormat1:
    """Store a snapshot as format ``"1"`` wrote it (keyed state one record per key): what
    a store holds from before the ``per_key_columns`` layout."""
    def put(store: DirectorySnapshotStore, monoid: Monoid[Any], state: Any, *,
            topology: str = "wordcount", bolt: str = "counts", instance: int = 0,
            parallelism: int = 1, epoch: int = 1, clock: Any = None,
            base: SnapshotRef | None = None) -> SnapshotRef:
        def write(raw: Any) -> str:
            return write_snapshot(raw, topology=topology, bolt=bolt, instance=instance,
                                  parallelism=parallelism, epoch=epoch, clock=clock or {},
                                  monoid=monoid, state=state, layout=LAYOUT_PER_KEY,
                                  base=None if base is None else base.key)[1]
        return store._store(snapshot_key(topology, bolt, instance, epoch), write)
    return put
