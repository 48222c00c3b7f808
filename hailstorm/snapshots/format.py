"""The snapshot store: durable, atomic, re-shardable snapshots of bolt state.

Every round (epoch) each bolt instance writes its state ``A`` to its own file::

    <root>/<topology>/<bolt>/<instance>/epoch-<epoch:012d>.avro

A snapshot file is a plain Avro object container file (deflate codec) that anyone can read
with ``fastavro.reader``; nothing hailstorm-specific is needed to get the data out.

Records. A keyed state (:class:`~hailstorm.monoids.KeyedMap`) is written as one record per
key, ``{key, value}``, with the schema of the map's entries (the ``items`` of its Avro
array schema) and keys in sorted order when they are comparable. Writing and reading stream
through the state in chunks, so a million keys never exist twice as whole Python objects.
Any other state is one record ``{state}`` whose field has the monoid's schema.

Metadata (Avro file metadata, UTF-8 strings):

========================  ========================================================
``hailstorm.format``      ``"1"``
``hailstorm.topology``    topology name
``hailstorm.bolt``        bolt name
``hailstorm.instance``    instance index of the writer
``hailstorm.parallelism`` parallelism of the bolt when written
``hailstorm.epoch``       round number
``hailstorm.clock``       the round's clock, JSON (:func:`hailstorm.protocol.clock.clock_to_json`)
``hailstorm.monoid``      ``monoid.describe()``
``hailstorm.layout``      ``"per_key"`` (one record per key) or ``"whole"``
``hailstorm.records``     number of records
``hailstorm.created``     ISO 8601 UTC time the write started
``hailstorm.checksum``    ``"sha256:<64 hex digits>"``
``hailstorm.base``        only in a *delta*: the key of the snapshot it builds on
========================  ========================================================

Deltas. A keyed state may be written as a delta: the records of only the keys whose value
changed since an earlier snapshot of the same bolt instance (its ``base``, itself a full
snapshot or a delta), each with its whole new value. The state is the base's with those
keys replaced (keys are never removed from a keyed state). A delta is a valid Avro file of
the same schema; read alone it holds only the changed keys, so readers go through
:meth:`SnapshotStore.load` (or ``hailstorm snapshots``), which follows the chain. A chain
shares its files between rounds: garbage collection keeps every file a kept round builds
on, and a corrupt file fails every round built on it (reported as the round's own file, so
the negotiator falls back as for a corrupt full snapshot).

The checksum is the SHA-256 of the entire file as written, with the 64 hex digits of the
checksum itself replaced by ``"0" * 64``: the header with its placeholder and every record
block are hashed while they are written, then the placeholder is overwritten in place
before the file becomes visible. :meth:`SnapshotStore.load` verifies it before decoding
anything; a mismatch raises :class:`SnapshotCorruptError` naming the file.

Durability: the file is written under a temporary name in its final directory, flushed and
``fsync``-ed, renamed with ``os.replace``, then the directory is ``fsync``-ed. A final name
is never overwritten: writing the same round again is accepted only when the content is
identical (a retried write), otherwise it is :class:`SnapshotExistsError`.

Re-sharding: state is keyed by *key*, not by instance index. :meth:`SnapshotStore.load_for_instance`
rebuilds the state of instance ``i`` of ``n`` from all the files of a round, keeping the keys
``route(key, n) == i``; the parallelism of a bolt can change between runs.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import hashlib
import io
import json
import math
import os
import re
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import unquote, urlparse

import fastavro
from fastavro.write import Writer

from hailstorm.failpoints import failpoint
from hailstorm.monoids import KeyedMap, Monoid
from hailstorm.protocol.clock import Clock, clock_from_json, clock_to_json
from hailstorm.routing import route as default_route

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

FORMAT_VERSION = "1"
LAYOUT_PER_KEY = "per_key"
LAYOUT_WHOLE = "whole"

_PREFIX = "hailstorm."
CHECKSUM_KEY = "hailstorm.checksum"
BASE_KEY = "hailstorm.base"
_CHECKSUM_PLACEHOLDER = b"sha256:" + b"0" * 64

_CODEC = "deflate"
_SYNC_INTERVAL = 256 * 1024  # uncompressed bytes per Avro block
_CHUNK_KEYS = 4096  # keys converted to/from Avro per monoid call
_SMALL_HEADER = 64 * 1024
_MAX_HEADER = 16 * 1024 * 1024
_READ_CHUNK = 1024 * 1024

_FILE_NAME = re.compile(r"^epoch-(\d{12})\.avro$")
_KEY = re.compile(r"^[^/]+/(?P<bolt>[^/]+)/(?P<instance>\d+)/epoch-(?P<epoch>\d{12})\.avro$")
"""A snapshot key (:func:`snapshot_key`), as a delta names its base."""
_TEMP_NAME = re.compile(r"^\.epoch-(\d{12})\.avro\..+\.tmp$")
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")

_HEADER_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "org.apache.avro.file.Header",
        "fields": [
            {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 4}},
            {"name": "meta", "type": {"type": "map", "values": "bytes"}},
            {"name": "sync", "type": {"type": "fixed", "name": "Sync", "size": 16}},
        ],
    }
)
_MAGIC = b"Obj\x01"
_REQUIRED_META = tuple(
    _PREFIX + k
    for k in (
        "format",
        "topology",
        "bolt",
        "instance",
        "parallelism",
        "epoch",
        "clock",
        "monoid",
        "layout",
        "records",
        "created",
        "checksum",
    )
)

RouteFunction = Callable[[Any, int], int]


class SnapshotError(RuntimeError):
    """A snapshot cannot be written or loaded."""


class SnapshotCorruptError(SnapshotError):
    """A snapshot file is damaged (bad checksum, unreadable header or records); ``uri``
    names it."""

    def __init__(self, uri: str, problem: str) -> None:
        super().__init__(f"{uri}: {problem}")
        self.uri = uri


class SnapshotExistsError(SnapshotError):
    """A different snapshot already exists under the same name."""


class SnapshotMismatchError(SnapshotError):
    """Snapshots do not fit the request (other monoid, incomplete or mixed round...)."""


def snapshot_key(topology: str, bolt: str, instance: int, epoch: int) -> str:
    """The store-relative name ``<topology>/<bolt>/<instance>/epoch-<epoch:012d>.avro``."""
    _check_name("topology", topology)
    _check_name("bolt", bolt)
    if instance < 0 or epoch < 0:
        raise ValueError(f"instance and epoch must be >= 0, not {instance} and {epoch}")
    return f"{topology}/{bolt}/{instance}/epoch-{epoch:012d}.avro"


def _check_name(kind: str, name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"{kind} name {name!r} must match [A-Za-z0-9._-]+ and not start with '.'")


@dataclass(frozen=True)
class SnapshotRef:
    """A durable snapshot: where it is and what it holds.

    ``key`` is store-relative (portable between machines mounting the store elsewhere);
    ``uri`` is absolute. ``duration_s`` is the write time, known only to :meth:`put`.
    """

    key: str
    uri: str
    topology: str
    bolt: str
    instance: int
    parallelism: int
    epoch: int
    clock: Clock
    monoid: str
    layout: str
    records: int
    size_bytes: int
    created: str
    checksum: str
    duration_s: float | None = field(default=None, compare=False)
    base: str | None = None
    """A delta's base snapshot (a key of the same store), or None for a full snapshot."""

    @property
    def path(self) -> Path:
        """The local file of a ``file://`` snapshot."""
        parsed = urlparse(self.uri)
        if parsed.scheme != "file":
            raise ValueError(f"{self.uri} is not a local file")
        return Path(unquote(parsed.path))

    def to_json(self) -> dict[str, Any]:
        """JSON-safe summary (for listings)."""
        return {
            "key": self.key,
            "uri": self.uri,
            "topology": self.topology,
            "bolt": self.bolt,
            "instance": self.instance,
            "parallelism": self.parallelism,
            "epoch": self.epoch,
            "clock": clock_to_json(self.clock),
            "monoid": self.monoid,
            "layout": self.layout,
            "records": self.records,
            "size_bytes": self.size_bytes,
            "created": self.created,
            "checksum": self.checksum,
            "duration_s": self.duration_s,
            "base": self.base,
        }


# --------------------------------------------------------------------------- format: writing


def _entry_schema(monoid: Monoid[Any]) -> dict[str, Any] | None:
    """The ``{key, value}`` record schema of a keyed map, or None for a non-keyed state."""
    if not isinstance(monoid, KeyedMap):
        return None
    schema = monoid.avro_schema()
    items = schema.get("items") if isinstance(schema, dict) else None
    if (
        isinstance(schema, dict)
        and schema.get("type") == "array"
        and isinstance(items, dict)
        and items.get("type") == "record"
        and [f.get("name") for f in items.get("fields", [])] == ["key", "value"]
    ):
        return items
    return None


def _record_schema(monoid: Monoid[Any]) -> tuple[str, Any]:
    """``(layout, parsed record schema)`` of the snapshot records of ``monoid``'s state."""
    entry = _entry_schema(monoid)
    if entry is not None:
        layout, schema = LAYOUT_PER_KEY, entry
    else:
        layout = LAYOUT_WHOLE
        schema = {
            "type": "record",
            "name": "hailstorm.snapshot.State",
            "fields": [{"name": "state", "type": monoid.avro_schema()}],
        }
    try:
        return layout, fastavro.parse_schema(schema)
    except Exception as e:
        raise SnapshotError(f"the Avro schema of {monoid.describe()} is invalid: {e}") from e


def _sorted_keys(state: dict[Any, Any]) -> list[Any]:
    try:
        return sorted(state)
    except TypeError:  # incomparable keys: insertion order
        return list(state)


def _records(monoid: Monoid[Any], layout: str, state: Any) -> Iterator[Any]:
    """The snapshot records of ``state``, produced a chunk of keys at a time."""
    if layout == LAYOUT_WHOLE:
        yield {"state": monoid.to_avro(state)}
        return
    keys = _sorted_keys(state)
    for start in range(0, len(keys), _CHUNK_KEYS):
        yield from monoid.to_avro({k: state[k] for k in keys[start : start + _CHUNK_KEYS]})


class _HashingSink:
    """Write-only file wrapper that hashes everything written through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.head = bytearray()
        self.recording_head = True

    def write(self, data: bytes) -> int:
        self.raw.write(data)
        self.sha256.update(data)
        if self.recording_head:
            self.head += data
        return len(data)

    def flush(self) -> None:
        self.raw.flush()

    def seekable(self) -> bool:  # tells fastavro this is not a file to append to
        return False


def _sync_marker(key: str) -> bytes:
    """Deterministic per-file sync marker, so equal states give byte-equal record blocks."""
    return hashlib.blake2b(key.encode(), digest_size=16, person=b"hailstorm-sync").digest()


def write_snapshot(
    raw: IO[bytes],
    *,
    topology: str,
    bolt: str,
    instance: int,
    parallelism: int,
    epoch: int,
    clock: Clock,
    monoid: Monoid[Any],
    state: Any,
    base: str | None = None,
) -> tuple[int, str]:
    """Write a snapshot file to the seekable binary ``raw``; returns ``(records, checksum)``.

    With ``base`` (the key of an earlier snapshot of the same instance) the file is a
    delta: ``state`` holds only the keys whose values changed since ``base``.
    ``raw`` must be empty and positioned at 0. The caller makes it durable.
    """
    key = snapshot_key(topology, bolt, instance, epoch)
    if not 0 <= instance < parallelism:
        raise ValueError(f"instance {instance} is out of range for parallelism {parallelism}")
    layout, schema = _record_schema(monoid)
    if layout == LAYOUT_PER_KEY and not isinstance(state, dict):
        raise TypeError(f"{monoid.describe()} state must be a dict, not {type(state).__name__}")
    if base is not None and layout != LAYOUT_PER_KEY:
        raise ValueError(f"{monoid.describe()} is not keyed: it has no delta snapshots")
    expected = len(state) if layout == LAYOUT_PER_KEY else 1
    metadata = {
        "hailstorm.format": FORMAT_VERSION,
        "hailstorm.topology": topology,
        "hailstorm.bolt": bolt,
        "hailstorm.instance": str(instance),
        "hailstorm.parallelism": str(parallelism),
        "hailstorm.epoch": str(epoch),
        "hailstorm.clock": json.dumps(clock_to_json(clock), separators=(",", ":")),
        "hailstorm.monoid": monoid.describe(),
        "hailstorm.layout": layout,
        "hailstorm.records": str(expected),
        "hailstorm.created": datetime.now(UTC).isoformat(timespec="milliseconds"),
        CHECKSUM_KEY: _CHECKSUM_PLACEHOLDER.decode(),
    }
    if base is not None:
        metadata[BASE_KEY] = base
    sink = _HashingSink(raw)
    writer = Writer(
        cast(IO[bytes], sink),
        schema,
        codec=_CODEC,
        sync_interval=_SYNC_INTERVAL,
        metadata=metadata,
        sync_marker=_sync_marker(key),
    )
    sink.recording_head = False
    if sink.head.count(_CHECKSUM_PLACEHOLDER) != 1:
        raise SnapshotError("cannot locate the checksum placeholder in the Avro header")
    checksum_at = sink.head.index(_CHECKSUM_PLACEHOLDER) + len(b"sha256:")
    written = 0
    write = writer.write
    for record in _records(monoid, layout, state):
        write(record)
        written += 1
    writer.flush()
    if written != expected:
        raise SnapshotError(f"{monoid.describe()}.to_avro gave {written} records for {expected}")
    digest = sink.sha256.hexdigest()
    raw.seek(checksum_at)
    raw.write(digest.encode())
    raw.seek(0, io.SEEK_END)
    raw.flush()
    return written, f"sha256:{digest}"


# --------------------------------------------------------------------------- format: reading


@dataclass(frozen=True)
class _Header:
    meta: dict[str, str]
    end: int  # offset of the first record block


def _parse_header(prefix: bytes) -> tuple[dict[str, Any], int]:
    """The Avro header at the start of ``prefix`` and the offset where it ends."""
    stream = io.BytesIO(prefix)
    header = fastavro.schemaless_reader(stream, _HEADER_SCHEMA, None)
    if not isinstance(header, dict) or header["magic"] != _MAGIC:
        raise ValueError("not an Avro object container file")
    return header, stream.tell()


def _read_header(fo: IO[bytes], name: str) -> _Header:
    """Parse the header of a snapshot file (reading only as much as it needs)."""
    for limit in (_SMALL_HEADER, _MAX_HEADER):
        fo.seek(0)
        prefix = fo.read(limit)
        try:
            header, end = _parse_header(prefix)
            meta = {k: v.decode("utf-8") for k, v in header["meta"].items()}
            break
        except Exception as e:
            if len(prefix) == limit and limit < _MAX_HEADER:
                continue  # a header larger than the first read: try a bigger one
            raise SnapshotCorruptError(name, f"unreadable Avro header ({e})") from e
    missing = [k for k in _REQUIRED_META if k not in meta]
    if missing:
        raise SnapshotCorruptError(name, f"not a hailstorm snapshot (no {missing[0]})")
    if meta["hailstorm.format"] != FORMAT_VERSION:
        raise SnapshotError(f"{name}: unsupported snapshot format {meta['hailstorm.format']}")
    return _Header(meta, end)


def _verify(fo: IO[bytes], name: str, header: _Header) -> None:
    """Raise :class:`SnapshotCorruptError` unless the file matches its checksum."""
    stored = header.meta[CHECKSUM_KEY].encode()
    if len(stored) != len(_CHECKSUM_PLACEHOLDER) or not stored.startswith(b"sha256:"):
        raise SnapshotCorruptError(name, f"malformed checksum {stored!r}")
    fo.seek(0)
    head = fo.read(header.end)
    at = head.find(stored)
    if at < 0:
        raise SnapshotCorruptError(name, "checksum not found in the header")
    sha = hashlib.sha256()
    sha.update(head[:at])
    sha.update(_CHECKSUM_PLACEHOLDER)
    sha.update(head[at + len(stored) :])
    while chunk := fo.read(_READ_CHUNK):
        sha.update(chunk)
    computed = b"sha256:" + sha.hexdigest().encode()
    if computed != stored:
        raise SnapshotCorruptError(
            name, f"checksum mismatch (stored {stored.decode()}, computed "
            f"{computed.decode()}): the file is corrupted and was not loaded"
        )


def _records_digest(fo: IO[bytes], header: _Header) -> str:
    """SHA-256 of the record blocks only (equal for equal content written twice)."""
    fo.seek(header.end)
    sha = hashlib.sha256()
    while chunk := fo.read(_READ_CHUNK):
        sha.update(chunk)
    return sha.hexdigest()


def _ref_from_header(header: _Header, key: str, uri: str, size: int, name: str) -> SnapshotRef:
    meta = header.meta
    try:
        return SnapshotRef(
            key=key,
            uri=uri,
            topology=meta["hailstorm.topology"],
            bolt=meta["hailstorm.bolt"],
            instance=int(meta["hailstorm.instance"]),
            parallelism=int(meta["hailstorm.parallelism"]),
            epoch=int(meta["hailstorm.epoch"]),
            clock=clock_from_json(json.loads(meta["hailstorm.clock"])),
            monoid=meta["hailstorm.monoid"],
            layout=meta["hailstorm.layout"],
            records=int(meta["hailstorm.records"]),
            size_bytes=size,
            created=meta["hailstorm.created"],
            checksum=meta[CHECKSUM_KEY],
            base=meta.get(BASE_KEY),
        )
    except (ValueError, TypeError, AttributeError) as e:
        raise SnapshotCorruptError(name, f"invalid metadata ({e})") from e


def _chunks(records: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _merge_into(monoid: Monoid[Any], state: dict[Any, Any], part: dict[Any, Any]) -> Any:
    """``state`` absorbing ``part`` (both owned by the caller); fast path for new keys."""
    if state.keys().isdisjoint(part):
        state.update(part)
        return state
    return monoid.absorb(state, part)


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: tuples and sets become lists, bytes base64, dict keys text."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {
            k if isinstance(k, str) else json.dumps(jsonable(k), sort_keys=True): jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, set | frozenset):
        items = [jsonable(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)



# --------------------------------------------------------------------------- stores


class SnapshotStore(ABC):
    """Where bolts keep their snapshots. Subclasses provide storage; the format is shared.

    Methods taking a snapshot accept a :class:`SnapshotRef` or its key/URI string (as
    recorded in ZooKeeper).
    """

    def put(
        self,
        *,
        topology: str,
        bolt: str,
        instance: int,
        parallelism: int,
        epoch: int,
        clock: Clock,
        monoid: Monoid[Any],
        state: Any,
        base: SnapshotRef | None = None,
    ) -> SnapshotRef:
        """Durably and atomically store ``state`` as the snapshot of this round; with
        ``base`` (an earlier snapshot of the same instance in this store) as a delta
        holding only the keys whose values changed since ``base``."""
        started = time.perf_counter()
        key = snapshot_key(topology, bolt, instance, epoch)
        if base is not None and (
            (base.topology, base.bolt, base.instance, base.parallelism)
            != (topology, bolt, instance, parallelism) or base.epoch >= epoch
        ):
            raise ValueError(f"{base.uri} cannot be the base of {key}: it is of another bolt "
                             "instance or parallelism, or not of an earlier round")

        def write(raw: IO[bytes]) -> str:
            return write_snapshot(raw, topology=topology, bolt=bolt, instance=instance,
                                  parallelism=parallelism, epoch=epoch, clock=clock,
                                  monoid=monoid, state=state,
                                  base=None if base is None else base.key)[1]

        ref = self._store(key, write)
        return replace(ref, duration_s=time.perf_counter() - started)

    @abstractmethod
    def _store(self, key: str, write: Callable[[IO[bytes]], str]) -> SnapshotRef:
        """Make the file ``write`` writes (to an empty seekable stream; it returns the
        checksum) the snapshot at ``key``, durably and atomically, never overwriting
        other content; return its ref."""

    @abstractmethod
    def open(self, ref: SnapshotRef) -> IO[bytes]:
        """The snapshot's bytes as a seekable binary stream (the caller closes it)."""

    @abstractmethod
    def resolve(self, location: str) -> SnapshotRef:
        """The snapshot at ``location`` (a key or URI of this store), from its header."""

    @abstractmethod
    def list(self, topology: str) -> list[SnapshotRef]:
        """Every snapshot of ``topology``, sorted by (bolt, instance, epoch)."""

    @abstractmethod
    def delete(self, ref: SnapshotRef | str) -> None:
        """Remove one snapshot (no error if already gone)."""

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
                base = self._ref_at(locators[ident]).base
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
    ) -> builtins.list[str]:
        """Remove every snapshot (and leftover temporary file) of rounds ``<= up_to_epoch``
        except those of ``keep_epochs``: what a commit of round ``up_to_epoch`` made garbage
        (the negotiator keeps the new committed round and the previous one). With
        ``written_before`` (a POSIX time) only files written before it go, so that a reader
        of a recently superseded round (``hailstorm export``) can finish.

        Returns the removed keys.
        """
        keep = frozenset(keep_epochs)
        files = list(self._files(topology))
        kept = self._with_bases(files, {(b, i, e) for b, i, e, _, temp in files
                                        if not temp and (e in keep or e > up_to_epoch)})
        return self._remove(
            locator for b, i, e, locator, temp in files
            if e <= up_to_epoch and (temp or (b, i, e) not in kept)
            and (written_before is None or self._written_at(locator) < written_before)
        )

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is (a directory or a URL), for messages."""

    # -- built on the primitives -------------------------------------------------------

    def has_topology(self, topology: str) -> bool:
        """True when some snapshot file of ``topology`` is in the store."""
        return next(iter(self._files(topology)), None) is not None

    def _ref(self, ref: SnapshotRef | str) -> SnapshotRef:
        return ref if isinstance(ref, SnapshotRef) else self.resolve(ref)

    @contextlib.contextmanager
    def _verified(self, ref: SnapshotRef) -> Iterator[tuple[IO[bytes], _Header]]:
        with self.open(ref) as fo:
            header = _read_header(fo, ref.uri)
            _verify(fo, ref.uri, header)
            fo.seek(0)
            yield fo, header

    def verify(self, ref: SnapshotRef | str) -> SnapshotRef:
        """Check the checksum of a snapshot; raises :class:`SnapshotCorruptError`."""
        ref = self._ref(ref)
        with self._verified(ref):
            return ref

    def _records(self, ref: SnapshotRef, monoid: Monoid[Any] | None) -> Iterator[Any]:
        """Verified raw Avro records of ``ref`` (checked against ``monoid`` when given)."""
        with self._verified(ref) as (fo, header):
            if monoid is not None:
                _check_monoid(ref, header, monoid)
            count = 0
            try:
                for record in fastavro.reader(fo):
                    count += 1
                    yield record
            except Exception as e:
                raise SnapshotCorruptError(ref.uri, f"unreadable records ({e})") from e
            if count != ref.records:
                raise SnapshotCorruptError(ref.uri, f"{count} records, header says {ref.records}")

    def _keyed_parts(self, ref: SnapshotRef, monoid: Monoid[Any]) -> Iterator[dict[Any, Any]]:
        for chunk in _chunks(self._records(ref, monoid), _CHUNK_KEYS):
            yield monoid.from_avro(chunk)

    def chain(self, ref: SnapshotRef | str) -> builtins.list[SnapshotRef]:
        """``ref`` and the snapshots it builds on, newest first (one ref for a full
        snapshot). A missing base, or one that cannot be this delta's, is reported as
        :class:`SnapshotCorruptError` of ``ref`` itself."""
        head = self._ref(ref)
        refs = [head]
        while (base := refs[-1].base) is not None:
            newer = refs[-1]
            try:
                older = self.resolve(base)
            except (SnapshotError, OSError, ValueError) as e:
                raise SnapshotCorruptError(head.uri, f"its base {base} cannot be read: {e}") \
                    from e
            if (older.topology, older.bolt, older.instance, older.parallelism, older.monoid,
                    older.layout) != (newer.topology, newer.bolt, newer.instance,
                                      newer.parallelism, newer.monoid, newer.layout) \
                    or older.epoch >= newer.epoch:
                raise SnapshotCorruptError(head.uri, f"its base {older.uri} is not an earlier "
                                           "snapshot of the same bolt instance")
            refs.append(older)
        return refs

    def load(self, ref: SnapshotRef | str, monoid: Monoid[Any]) -> tuple[Clock, Any]:
        """``(clock, state)`` of one snapshot (a delta with the snapshots it builds on),
        after verifying the checksum of every file read. A damaged file anywhere in a
        delta's chain raises :class:`SnapshotCorruptError` naming ``ref``."""
        ref = self._ref(ref)
        if ref.layout == LAYOUT_WHOLE:
            [record] = list(self._records(ref, monoid))
            return ref.clock, monoid.from_avro(record["state"])
        state: dict[Any, Any] = {}
        links = self.chain(ref)
        for link in reversed(links):
            try:
                for part in self._keyed_parts(link, monoid):
                    if link is links[-1]:
                        state = _merge_into(monoid, state, part)
                    else:  # a delta: whole new values of the keys that changed
                        state.update(part)
            except SnapshotCorruptError as e:
                if link is ref:
                    raise
                raise SnapshotCorruptError(ref.uri, f"it builds on {link.uri}: {e}") from e
        return ref.clock, state

    def load_for_instance(
        self,
        refs: Sequence[SnapshotRef | str],
        monoid: Monoid[Any],
        instance: int,
        parallelism: int,
        route: RouteFunction = default_route,
    ) -> tuple[Clock, Any]:
        """``(clock, state)`` of instance ``instance`` of ``parallelism`` from one round.

        ``refs`` are the files of every instance of one round of one bolt, written with any
        parallelism. Keyed state keeps the keys with ``route(key, parallelism) ==
        instance`` from every file (with unchanged parallelism only the instance's own file
        is read: it holds exactly those keys). Non-keyed state cannot be split: it loads
        unchanged when the parallelism is unchanged, and is combined into one when the new
        parallelism is 1.
        """
        if not 0 <= instance < parallelism:
            raise ValueError(f"instance {instance} is out of range for parallelism {parallelism}")
        # Checksums first: a flipped byte in a header's metadata must read as a corrupt
        # file (the negotiator falls back a round), not as a round that does not fit.
        round_refs = _check_round([self.verify(r) for r in refs])
        old_parallelism = round_refs[0].parallelism
        clock = round_refs[0].clock
        if parallelism == old_parallelism:
            return clock, self.load(round_refs[instance], monoid)[1]
        if round_refs[0].layout == LAYOUT_WHOLE:
            if parallelism != 1:
                raise SnapshotMismatchError(
                    f"{monoid.describe()} is not keyed: its state cannot be re-sharded from "
                    f"{old_parallelism} to {parallelism} instances (only to 1)"
                )
            states = [self.load(r, monoid)[1] for r in round_refs]
            return clock, monoid.combine_all(states)
        state: dict[Any, Any] = {}
        for ref in round_refs:
            parts = (self._keyed_parts(ref, monoid) if ref.base is None
                     else [self.load(ref, monoid)[1]])
            for part in parts:
                mine = {k: v for k, v in part.items() if route(k, parallelism) == instance}
                state = _merge_into(monoid, state, mine)
        return clock, state

    def to_json_rows(
        self, ref: SnapshotRef | str, monoid: Monoid[Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The snapshot's contents as JSON-able rows, streamed after verification.

        Keyed state gives ``{"key": ..., "value": ...}`` per key, other state one
        ``{"state": ...}`` row. With ``monoid`` values are decoded states (tuples as lists,
        bytes as base64); without, the raw Avro records.
        """
        ref = self._ref(ref)
        if monoid is None and ref.base is not None:
            latest: dict[str, Any] = {}  # a delta's records replace its bases' by key
            for link in reversed(self.chain(ref)):
                for record in self._records(link, None):
                    latest[json.dumps(jsonable(record["key"]), sort_keys=True)] = record
            for record in latest.values():
                yield jsonable(record)
        elif monoid is None:
            for record in self._records(ref, None):
                yield jsonable(record)
        elif ref.base is not None:
            for k, v in self.load(ref, monoid)[1].items():
                yield {"key": jsonable(k), "value": jsonable(v)}
        elif ref.layout == LAYOUT_WHOLE:
            for record in self._records(ref, monoid):
                yield {"state": jsonable(monoid.from_avro(record["state"]))}
        else:
            for part in self._keyed_parts(ref, monoid):
                for k, v in part.items():
                    yield {"key": jsonable(k), "value": jsonable(v)}

    def latest_round(self, topology: str, bolt: str) -> builtins.list[SnapshotRef]:
        """The snapshots of the newest epoch of ``bolt`` (by instance; empty if none)."""
        refs = [r for r in self.list(topology) if r.bolt == bolt]
        if not refs:
            return []
        newest = max(r.epoch for r in refs)
        return [r for r in refs if r.epoch == newest]


def _check_monoid(ref: SnapshotRef, header: _Header, monoid: Monoid[Any]) -> None:
    layout, _ = _record_schema(monoid)
    if ref.monoid != monoid.describe() or header.meta["hailstorm.layout"] != layout:
        raise SnapshotMismatchError(
            f"{ref.uri} holds {ref.monoid} state ({ref.layout}), not {monoid.describe()}"
        )


def _check_round(refs: list[SnapshotRef]) -> list[SnapshotRef]:
    """``refs`` sorted by instance, after checking they are exactly one complete round."""
    if not refs:
        raise SnapshotMismatchError("no snapshots given")
    first = refs[0]
    for ref in refs:
        same_round = (ref.topology, ref.bolt, ref.epoch, ref.parallelism) == (
            first.topology,
            first.bolt,
            first.epoch,
            first.parallelism,
        )
        if not same_round or ref.clock != first.clock:
            raise SnapshotMismatchError(
                f"{ref.uri} and {first.uri} are not snapshots of the same round of one bolt"
            )
    ordered = sorted(refs, key=lambda r: r.instance)
    instances = [r.instance for r in ordered]
    if instances != list(range(first.parallelism)):
        raise SnapshotMismatchError(
            f"round {first.epoch} of {first.topology}/{first.bolt} needs instances "
            f"0..{first.parallelism - 1}, got {instances}"
        )
    return ordered


def _same_content(old: IO[bytes], new: IO[bytes], name: str) -> bool:
    """True when two snapshot files hold the same round (what ``hailstorm.created`` and the
    checksum say aside), the old one verified; both are left anywhere."""
    ignored = {"hailstorm.created", CHECKSUM_KEY}
    old_header = _read_header(old, name)
    new_header = _read_header(new, f"{name} (new)")
    same_meta = {k: v for k, v in old_header.meta.items() if k not in ignored} == {
        k: v for k, v in new_header.meta.items() if k not in ignored
    }
    if same_meta and _records_digest(old, old_header) == _records_digest(new, new_header):
        _verify(old, name, old_header)
        return True
    return False


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
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        _fsync_dir(final.parent)
        return self._read_ref(final, key)

    def _same_or_raise(self, final: Path, temp: Path, key: str) -> SnapshotRef:
        """The existing snapshot if ``temp`` has the same content, else raise."""
        with open(final, "rb") as old, open(temp, "rb") as new:
            if _same_content(old, new, str(final)):
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
        refs = [
            self._read_ref(path, self._key_of(path))
            for _, _, _, path, temp in self._files(topology)
            if not temp
        ]
        return sorted(refs, key=lambda r: (r.bolt, r.instance, r.epoch))

    def delete(self, ref: SnapshotRef | str) -> None:
        path = self._local_path(ref.uri if isinstance(ref, SnapshotRef) else ref)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        _fsync_dir(path.parent)

    def _written_at(self, locator: Any) -> float:
        return _mtime(locator)

    def _ref_at(self, locator: Any) -> SnapshotRef:
        return self._read_ref(locator, self._key_of(locator))

    def _remove(self, paths: Iterable[Path]) -> builtins.list[str]:
        """Unlink ``paths`` (gone already is fine), fsync their directories; their keys."""
        removed: list[Path] = []
        for path in sorted(paths):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        for directory in {path.parent for path in removed}:
            _fsync_dir(directory)
        return [self._key_of(path) for path in removed]


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
            if _same_content(old, raw, self._uri(key)):
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
        refs = [self.resolve(path[len(self.base) + 1:])
                for _, _, _, path, _ in self._files(topology)]
        return sorted(refs, key=lambda r: (r.bolt, r.instance, r.epoch))

    def delete(self, ref: SnapshotRef | str) -> None:
        key = self._key_of(ref.uri if isinstance(ref, SnapshotRef) else ref)
        self._remove([self._full(key)])

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
