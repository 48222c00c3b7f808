"""The snapshot store: durable, atomic, re-shardable snapshots of bolt state.

Everything is in :mod:`~hailstorm.snapshots.format` for now; these names are the
package's interface.
"""

from hailstorm.snapshots.format import (
    DirectorySnapshotStore,
    FsspecSnapshotStore,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotMismatchError,
    SnapshotRef,
    SnapshotStore,
    jsonable,
    open_store,
    snapshot_key,
    write_snapshot,
)

__all__ = [
    "DirectorySnapshotStore",
    "FsspecSnapshotStore",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotExistsError",
    "SnapshotMismatchError",
    "SnapshotRef",
    "SnapshotStore",
    "jsonable",
    "open_store",
    "snapshot_key",
    "write_snapshot",
]
