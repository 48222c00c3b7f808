"""Snapshots as files under a directory: a local disk, or a filesystem the cluster shares.

Durability: the file is written under a temporary name in its final directory, flushed and
``fsync``-ed, renamed with ``os.replace``, then the directory is ``fsync``-ed. A final name
is never overwritten: writing the same round again is accepted only when the content is
identical (a retried write), otherwise it is :class:`SnapshotExistsError`.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import math
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlparse

from hailstorm.snapshots.format import (
    _FILE_NAME,
    _TEMP_NAME,
    SnapshotError,
    SnapshotExistsError,
    SnapshotRef,
    SnapshotRefRefused,
    _check_name,
    _read_header,
    _ref_from_header,
)
from hailstorm.snapshots.rewrites import same_content
from hailstorm.snapshots.store import SnapshotStore, refs_still_there

_BASES_KEPT = 100_000
"""Files whose base a store remembers at most (a few MiB)."""


def _mtime(path: Path) -> float:
    """When ``path`` was last written (``inf`` when it is gone: nothing to remove)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return math.inf


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectorySnapshotStore(SnapshotStore):
    """Snapshots as files under ``root`` (a local disk, or a shared filesystem on a cluster).

    ``root`` usually comes from ``HAILSTORM_SNAPSHOTS`` (see :mod:`hailstorm.config`).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self._bases: dict[Path, tuple[tuple[int, int, int], str | None]] = {}
        """Each file's base (:meth:`_base_at`) with the ``stat`` it was read at: a
        negotiator follows the same chains of deltas at every commit."""

    def __repr__(self) -> str:
        return f"DirectorySnapshotStore({str(self.root)!r})"

    @property
    def location(self) -> str:
        return str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / key

    def _make_dirs(self, directory: Path) -> None:
        """Create ``directory`` and its missing parents, durably."""
        missing: list[Path] = []
        d = directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                d.mkdir(mode=0o700)  # state is the topology's data: its owner's only
            _fsync_dir(d.parent)

    def _store(self, key: str, write: Callable[[IO[bytes]], str]) -> SnapshotRef:
        final = self._path(key)
        self._make_dirs(final.parent)
        temp = final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o600)
        try:
            with open(fd, "wb") as raw:
                write(raw)
                os.fsync(raw.fileno())
            if final.exists():
                existing = self._same_or_raise(final, temp, key)
                temp.unlink()
                return existing
            os.replace(temp, final)
        except BaseException:  # broad: also on Ctrl-C; the temp file is removed, re-raised
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        _fsync_dir(final.parent)
        return self._read_ref(final, key)

    def _same_or_raise(self, final: Path, temp: Path, key: str) -> SnapshotRef:
        """The existing snapshot if ``temp`` has the same content, else raise."""
        with open(final, "rb") as old, open(temp, "rb") as new:
            if same_content(old, new, str(final)):
                return self._read_ref(final, key)
        raise SnapshotExistsError(
            f"{final} already exists with different content: snapshots are never overwritten"
        )

    def open(self, ref: SnapshotRef) -> IO[bytes]:
        return open(self._local_path(ref.uri), "rb")

    def _local_path(self, location: str) -> Path:
        if location.startswith("file:"):
            path = Path(unquote(urlparse(location).path))
            # A ref is read from ZooKeeper: whoever could write one must not make a bolt
            # read (and unpickle nothing, but parse) any file of the host.
            if not path.resolve().is_relative_to(self.root.resolve()):
                raise SnapshotError(f"{location} is outside the snapshot store {self.root}: "
                                    "refused")
        else:
            if Path(location).is_absolute() or ".." in Path(location).parts:
                raise ValueError(f"{location!r} is not a snapshot key of {self}")
            path = self._path(location)
        return path

    def _key_of(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def _read_ref(self, path: Path, key: str) -> SnapshotRef:
        uri = path.as_uri()  # errors name the file as its refs do
        with open(path, "rb") as fo:
            header = _read_header(fo, uri)
            size = fo.seek(0, io.SEEK_END)
        return _ref_from_header(header, key, uri, size, uri)

    def resolve(self, location: str) -> SnapshotRef:
        path = self._local_path(location)
        return self._read_ref(path, self._key_of(path))

    def _files(self, topology: str) -> Iterator[tuple[str, int, int, Path, bool]]:
        """``(bolt, instance, epoch, path, is_temp)`` of every snapshot-like file."""
        _check_name("topology", topology)
        top = self.root / topology
        if not top.is_dir():
            return
        for bolt_dir in top.iterdir():
            if not bolt_dir.is_dir():
                continue
            for instance_dir in bolt_dir.iterdir():
                if not (instance_dir.is_dir() and instance_dir.name.isdigit()):
                    continue
                for path in instance_dir.iterdir():
                    match = _FILE_NAME.match(path.name) or _TEMP_NAME.match(path.name)
                    if match:
                        is_temp = match.re is _TEMP_NAME
                        epoch = int(match.group(1))
                        yield bolt_dir.name, int(instance_dir.name), epoch, path, is_temp

    def list(self, topology: str) -> list[SnapshotRef]:
        return refs_still_there(
            (path for _, _, _, path, temp in self._files(topology) if not temp),
            lambda path: self._read_ref(path, self._key_of(path)))

    def _store_key(self, location: str) -> str:
        try:
            path = self._local_path(location)
        except (ValueError, SnapshotError) as exc:
            raise SnapshotRefRefused(f"{str(exc).removesuffix(': refused')}: refused") from None
        if not self._inside(path):
            raise SnapshotRefRefused(f"{location} is outside the snapshot store {self.root} "
                                     "(through a link): refused")
        return self._key_of(path)

    def _inside(self, path: Path) -> bool:
        """Whether ``path``'s directory is inside the store once links are followed: a
        link in the store must not make garbage collection delete a file elsewhere."""
        return path.parent.resolve().is_relative_to(self.root.resolve())

    def _locator(self, key: str) -> Path:
        return self._path(key)

    def _written_at(self, locator: Any) -> float:
        return _mtime(locator)

    def _ref_at(self, locator: Any) -> SnapshotRef:
        return self._read_ref(locator, self._key_of(locator))

    def _base_at(self, locator: Any) -> str | None:
        """From the file's header the first time, then from memory while its ``stat``
        (inode, size, modification time) is the same: a final name is never rewritten (see
        the module), and a file replaced by other means is read again."""
        try:
            st = os.stat(locator)
        except FileNotFoundError:
            self._bases.pop(locator, None)
            return self._ref_at(locator).base  # reports the file gone, as a read does
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._bases.get(locator)
        if known is not None and known[0] == seen:
            return known[1]
        base = self._ref_at(locator).base
        if len(self._bases) >= _BASES_KEPT:
            self._bases.clear()  # a bound; the next commit reads the headers again
        self._bases[locator] = (seen, base)
        return base

    def _remove(self, paths: Iterable[Path]) -> builtins.list[str]:
        """Unlink ``paths`` (gone already is fine), fsync their directories; their keys."""
        removed: list[Path] = []
        for path in sorted(paths):
            if not self._inside(path):
                continue  # a linked directory leads out of the store: not its file
            self._bases.pop(path, None)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        for directory in {path.parent for path in removed}:
            _fsync_dir(directory)
        return [self._key_of(path) for path in removed]
