"""Snapshots on an object store or any other fsspec filesystem (``s3://``, ``gs://``...)."""

from __future__ import annotations

import builtins
import io
import math
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, cast

from hailstorm.failpoints import failpoint
from hailstorm.snapshots.format import (
    _FILE_NAME,
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

_UPLOAD_CHUNK = 5 * 1024 * 1024
"""Bytes per upload part (S3's smallest): a larger snapshot goes up as a multipart upload,
which becomes visible only when completed."""


class FsspecSnapshotStore(SnapshotStore):
    """Snapshots under an fsspec URL: ``s3://bucket/prefix`` (s3fs), ``gs://``, ``memory://``
    or whatever else fsspec reaches, for clusters whose hosts share no filesystem.

    Object stores have no atomic rename, so a round file is written straight to its final
    key by one upload (an S3 PUT, or a multipart upload completed at the end: readers see
    the whole object or none; an upload cut short leaves nothing at the key) and then
    **verified**: the key must not exist before, and must hold exactly the checksum just
    written after. A retried write of the same round is accepted when the content is the
    same, as for :class:`DirectorySnapshotStore`; other content already there is
    :class:`SnapshotExistsError`. Credentials and endpoints come from the backend's usual
    configuration (for S3: ``AWS_*`` environment variables, ``~/.aws``), never from the URL.
    """

    def __init__(self, url: str, **storage_options: Any) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.fs, base = fsspec.core.url_to_fs(self.url, **storage_options)
        self.base = str(base).rstrip("/")

    def __repr__(self) -> str:
        return f"FsspecSnapshotStore({self.url!r})"

    @property
    def location(self) -> str:
        return self.url

    def _full(self, key: str) -> str:
        return f"{self.base}/{key}"

    def _uri(self, key: str) -> str:
        return f"{self.url}/{key}"

    def _key_of(self, location: str) -> str:
        """The key of ``location`` (a key, or a URI of this store); anything outside the
        store is refused (refs are read from ZooKeeper)."""
        if "://" in location:
            if not location.startswith(self.url + "/"):
                raise SnapshotError(f"{location} is outside the snapshot store {self.url}: "
                                    "refused")
            location = location[len(self.url) + 1:]
        parts = location.split("/")
        if location.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"{location!r} is not a snapshot key of {self}")
        return location

    def _store(self, key: str, write: Callable[[IO[bytes]], str]) -> SnapshotRef:
        final = self._full(key)
        with tempfile.TemporaryFile() as raw:
            checksum = write(raw)
            if self.fs.exists(final):
                return self._same_or_raise(final, raw, key)
            raw.seek(0)
            with self.fs.open(final, "wb", block_size=_UPLOAD_CHUNK) as out:
                first = True
                while chunk := raw.read(_UPLOAD_CHUNK):
                    out.write(chunk)
                    if first:
                        first = False
                        failpoint("snapshots.upload")  # tests: die with an upload under way
            self.fs.invalidate_cache(final)
            ref = self.resolve(key)
            if ref.checksum != checksum:  # another writer's object won the key
                return self._same_or_raise(final, raw, key)
        return self.verify(ref)

    def _same_or_raise(self, final: str, raw: IO[bytes], key: str) -> SnapshotRef:
        raw.seek(0)
        with self.fs.open(final, "rb") as old:
            if same_content(old, raw, self._uri(key)):
                return self.resolve(key)
        raise SnapshotExistsError(f"{self._uri(key)} already exists with different content: "
                                  "snapshots are never overwritten")

    def open(self, ref: SnapshotRef) -> IO[bytes]:
        return cast(IO[bytes], self.fs.open(self._full(self._key_of(ref.uri)), "rb"))

    def resolve(self, location: str) -> SnapshotRef:
        key = self._key_of(location)
        uri = self._uri(key)
        with self.fs.open(self._full(key), "rb") as fo:
            header = _read_header(fo, uri)
            size = fo.seek(0, io.SEEK_END)
        return _ref_from_header(header, key, uri, size, uri)

    def _files(self, topology: str) -> Iterator[tuple[str, int, int, Any, bool]]:
        _check_name("topology", topology)
        top = self._full(topology)
        self.fs.invalidate_cache(top)
        try:
            found = self.fs.find(top)
        except FileNotFoundError:
            return
        for path in found:
            relative = str(path)[len(self.base) + 1:].split("/")
            if len(relative) != 4 or not relative[2].isdigit():
                continue
            _, bolt, instance, name = relative
            match = _FILE_NAME.match(name)
            if match:
                yield bolt, int(instance), int(match.group(1)), str(path), False

    def list(self, topology: str) -> builtins.list[SnapshotRef]:
        return refs_still_there((path for _, _, _, path, _ in self._files(topology)),
                                lambda path: self.resolve(path[len(self.base) + 1:]))

    def _store_key(self, location: str) -> str:
        try:
            return self._key_of(location)
        except (ValueError, SnapshotError) as exc:
            raise SnapshotRefRefused(f"{str(exc).removesuffix(': refused')}: refused") from None

    def _locator(self, key: str) -> str:
        return self._full(key)

    def _remove(self, locators: Iterable[Any]) -> builtins.list[str]:
        removed = []
        for path in sorted(locators):
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                continue
            removed.append(str(path)[len(self.base) + 1:])
        return removed

    def _written_at(self, locator: Any) -> float:
        try:
            return float(self.fs.modified(locator).timestamp())
        except FileNotFoundError:
            return math.inf

    def _ref_at(self, locator: Any) -> SnapshotRef:
        return self.resolve(str(locator)[len(self.base) + 1:])
