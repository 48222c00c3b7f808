"""The snapshot store: durable, atomic, re-shardable snapshots of bolt state.

A package, one concern per module; the names below are its interface (import them from
``hailstorm.snapshots``):

* :mod:`~hailstorm.snapshots.format` — the Avro snapshot file: its specification, writing
  (:func:`write_snapshot`), header reading and checksum verification, :class:`SnapshotRef`,
  the errors;
* :mod:`~hailstorm.snapshots.layouts` — the layouts of a file's records (keyed state in
  columns, a record value's fields as columns too) and their schemas;
* :mod:`~hailstorm.snapshots.evolution` — state of an older monoid, read by Avro schema
  resolution;
* :mod:`~hailstorm.snapshots.store` — :class:`SnapshotStore`, what every store does with
  those files: put, load (following delta chains), re-shard, JSON rows, garbage collection;
* :mod:`~hailstorm.snapshots.directory` — :class:`DirectorySnapshotStore` (write, fsync,
  rename);
* :mod:`~hailstorm.snapshots.object_store` — :class:`FsspecSnapshotStore` (one upload,
  verified), for ``s3://`` and other fsspec URLs;
* :func:`open_store` (here) — the store at a location.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from hailstorm.snapshots.as_json import jsonable
from hailstorm.snapshots.directory import DirectorySnapshotStore
from hailstorm.snapshots.format import (
    SnapshotCorruptError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotMismatchError,
    SnapshotRef,
    SnapshotRefRefused,
    snapshot_key,
    snapshot_key_problem,
    write_snapshot,
)
from hailstorm.snapshots.object_store import FsspecSnapshotStore
from hailstorm.snapshots.store import SnapshotStore

__all__ = [
    "DirectorySnapshotStore",
    "FsspecSnapshotStore",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotExistsError",
    "SnapshotMismatchError",
    "SnapshotRef",
    "SnapshotRefRefused",
    "SnapshotStore",
    "jsonable",
    "open_store",
    "snapshot_key",
    "snapshot_key_problem",
    "write_snapshot",
]


def open_store(location: str | os.PathLike[str]) -> SnapshotStore:
    """The snapshot store at ``location``: a directory (a path, or a ``file://`` URL), or
    any other fsspec URL (``s3://bucket/prefix``...)."""
    text = str(location)
    scheme = urlparse(text).scheme if "://" in text else ""
    if not scheme:
        return DirectorySnapshotStore(text)
    if scheme == "file":
        return DirectorySnapshotStore(unquote(urlparse(text).path))
    return FsspecSnapshotStore(text)
