"""Helpers shared by unit tests of the snapshot store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hailstorm.monoids import Monoid
from hailstorm.snapshots import DirectorySnapshotStore, SnapshotRef, snapshot_key
from hailstorm.snapshots.format import _record_schema, write_snapshot
from hailstorm.snapshots.layouts import (
    LAYOUT_COLUMNS,
    LAYOUT_FIELD_COLUMNS,
    LAYOUT_PER_KEY,
)

PutFormat1 = Callable[..., SnapshotRef]
PutFormat2 = Callable[..., SnapshotRef]
PutFormat3 = Callable[..., SnapshotRef]
PutFormat4 = Callable[..., SnapshotRef]


def _putter(layout: str | None) -> Callable[..., SnapshotRef]:
    """Store a snapshot with keyed state in ``layout``, as an older hailstorm wrote it (its
    tuple keys as records, without key columns; ``None``: a layout as format ``"4"``
    chose it)."""
    def put(store: DirectorySnapshotStore, monoid: Monoid[Any], state: Any, *,
            topology: str = "wordcount", bolt: str = "counts", instance: int = 0,
            parallelism: int = 1, epoch: int = 1, clock: Any = None,
            base: SnapshotRef | None = None) -> SnapshotRef:
        def write(raw: Any) -> str:
            return write_snapshot(raw, topology=topology, bolt=bolt, instance=instance,
                                  parallelism=parallelism, epoch=epoch, clock=clock or {},
                                  monoid=monoid, state=state,
                                  layout=layout or _format_4_layout(monoid),
                                  base=None if base is None else base.key)[1]
        return store._store(snapshot_key(topology, bolt, instance, epoch), write)
    return put


@pytest.fixture
def put_format_1() -> PutFormat1:
    """Store a snapshot as format ``"1"`` wrote it (keyed state one record per key): what
    a store holds from before the ``per_key_columns`` layout."""
    return _putter(LAYOUT_PER_KEY)


@pytest.fixture
def put_format_2() -> PutFormat2:
    """Store a snapshot as format ``"2"`` wrote it (keyed state in columns of keys and of
    whole values): what a store holds from before the ``per_key_field_columns`` layout."""
    return _putter(LAYOUT_COLUMNS)


@pytest.fixture
def put_format_3() -> PutFormat3:
    """Store a snapshot as format ``"3"`` wrote it (a record value's fields in columns,
    nested values whole): what a store holds from before the ``per_key_nested_columns``
    layout."""
    return _putter(LAYOUT_FIELD_COLUMNS)


@pytest.fixture
def put_format_4() -> PutFormat4:
    """Store a snapshot as format ``"4"`` wrote it (values in nested columns where they are
    records or arrays, but tuple keys as records): what a store holds from before key
    columns."""
    return _putter(None)


def _format_4_layout(monoid: Monoid[Any]) -> str:
    """The layout format ``"4"`` wrote ``monoid``'s state in: the one chosen now (an
    explicit layout leaves the key columns out)."""
    layout, _, _ = _record_schema(monoid)
    return layout
