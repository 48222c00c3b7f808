"""The snapshot file format (its specification), and writing, reading and verifying files.

Every round (epoch) each bolt instance writes its state ``A`` to its own file::

    <root>/<topology>/<bolt>/<instance>/epoch-<epoch:012d>.avro

A snapshot file is a plain Avro object container file (deflate codec) that anyone can read
with ``fastavro.reader``; nothing hailstorm-specific is needed to get the data out.

Records. A keyed state (:class:`~hailstorm.monoids.KeyedMap`) is written in columns
(layout ``"per_key_columns"``): each record ``{keys, values}`` holds the next
:data:`COLUMN_KEYS` keys (at most) and their values, two arrays of equal length whose items
have the schemas of the map entry's ``key`` and ``value`` (the entry is the ``items`` of
the map's Avro array schema, ``<name>``; the record is named ``<name>Columns``), keys in
the order the state holds them. Avro writes an array's items far faster than as many
records: writing a million keys costs a third of what a record per key did. (Keys are not
sorted: sorting a round's changed keys took up to two thirds of a bolt's snapshot writes.
So the same state may be written in another order by another process, and a file's
content, not its bytes, says whether a round written twice is the same:
:mod:`.rewrites`.)

When the entry's value is itself a record or an array (a
:class:`~hailstorm.monoids.Record`, a ``Mean``, a ``HyperLogLog``, a window, a ``TopK``),
``values`` is the column of the values down to their leaves (layout
``"per_key_nested_columns"``, format ``"4"``, see :mod:`hailstorm.monoids.avro_columns`):
a record becomes a record (named ``<name>Columns``) of one column per field, an array a
record ``{lengths, items}`` (named ``NestedLists<n>``), anything else an array of the
values, each column as long as the values it holds. A window's values, a record holding an
array of records, are thus flat arrays of numbers and bytes: fastavro writes them three
times as fast as the records. Such a file's metadata holds the ``{key, value}`` entry
schema (``hailstorm.entry_schema``) its columns are assembled back with (a monoid loading
its own file builds its states from the columns directly).

Tuple keys (a key schema that is a record ``{k0, k1, ...}``) are written as their column
too, in any of these layouts: ``keys`` is a record of one array per position (named
``<key name>Columns``, see :func:`~hailstorm.snapshots.layouts.key_columns_schema`), not an
array of records, which fastavro wrote at half the speed. Such a file declares format
``"5"``, its metadata ``hailstorm.key_columns`` is ``"1"``, and it holds its
``hailstorm.entry_schema``; readers turn the column back into the keys.

Files of format ``"1"`` hold one record per key, ``{key, value}`` (layout ``"per_key"``);
they are still read, as are files of format ``"2"``, of format ``"3"`` (layout
``"per_key_field_columns"``: a record value's fields in columns, one level deep, each
field's values whole) and of format ``"4"`` (tuple keys as records), and a delta may build
on a file of any keyed layout. Writing and
reading stream through the state (a chunk of keys at a time), so a million keys never
exist twice as whole Python objects. Any other state is one
record ``{state}`` whose field has the monoid's schema. (:mod:`.layouts` holds each
layout's schema and records.)

Metadata (Avro file metadata, UTF-8 strings):

==========================  ========================================================
``hailstorm.format``        ``"5"`` with key columns, else ``"4"`` for
                            ``per_key_nested_columns``, ``"3"`` for
                            ``per_key_field_columns``, ``"2"`` for the other layouts but
                            ``per_key`` (``"1"``)
``hailstorm.topology``      topology name
``hailstorm.bolt``          bolt name
``hailstorm.instance``      instance index of the writer
``hailstorm.parallelism``   parallelism of the bolt when written
``hailstorm.epoch``         round number
``hailstorm.clock``         the round's clock, JSON (:func:`hailstorm.protocol.clock.clock_to_json`)
``hailstorm.monoid``        ``monoid.describe()``
``hailstorm.layout``        ``"per_key_nested_columns"`` (keyed, the values in columns
                            down to their leaves), ``"per_key_field_columns"`` (keyed, a
                            record value's fields in columns too: format ``"3"``),
                            ``"per_key_columns"`` (keyed, in columns),
                            ``"per_key"`` (keyed, one record per key: format ``"1"``) or
                            ``"whole"``
``hailstorm.records``       number of keys (keyed state), else 1
``hailstorm.created``       ISO 8601 UTC time the write started
``hailstorm.checksum``      ``"sha256:<64 hex digits>"``
``hailstorm.base``          only in a *delta*: the key of the snapshot it builds on
``hailstorm.entry_schema``  only in ``per_key_nested_columns`` and with key columns:
                            the ``{key, value}`` entry schema (JSON)
``hailstorm.key_columns``   only with key columns: ``"1"`` (a column layout's keys are
                            one array per tuple position)
==========================  ========================================================

Deltas. A keyed state may be written as a delta: the entries of only the keys whose value
changed since an earlier snapshot of the same bolt instance (its ``base``, itself a full
snapshot or a delta: a bolt names its previous snapshot, or for a *differential* delta, the
keys changed since its last full one, that one), each with its whole new value. The state
is the base's with those keys replaced (a bolt routing late data writes a key it dropped
with an empty value, which whoever loads it for that bolt drops:
:func:`hailstorm.lateness.forget_dropped`; the store itself never removes a key). A delta
is a valid Avro file of the same schema; read alone it holds only the changed keys, so
readers go through :meth:`SnapshotStore.load` (or ``hailstorm snapshots``), which follows
the chain. A chain shares its files between rounds: garbage collection keeps every file a
kept round builds on, and a corrupt file fails every round built on it (reported as the
round's own file, so the negotiator falls back as for a corrupt full snapshot).

The checksum is the SHA-256 of the entire file as written, with the 64 hex digits of the
checksum itself replaced by ``"0" * 64``: the header with its placeholder and every record
block are hashed while they are written, then the placeholder is overwritten in place
before the file becomes visible. :meth:`SnapshotStore.load` verifies it before decoding
anything; a mismatch raises :class:`SnapshotCorruptError` naming the file.

Making a file durable and visible atomically is a store's job (:mod:`.directory`,
:mod:`.object_store`); loading, delta chains and re-sharding are :mod:`.store`'s, garbage
collection :mod:`.collection`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import unquote, urlparse

import fastavro
from fastavro.write import Writer

from hailstorm.errors import ServiceError
from hailstorm.monoids import Monoid
from hailstorm.protocol.clock import Clock, clock_from_json, clock_to_json
from hailstorm.snapshots.layouts import (
    COLUMN_LAYOUTS,
    ENTRY_SCHEMA_KEY,
    KEY_COLUMNS_KEY,
    KEYED_LAYOUTS,
    LAYOUT_COLUMNS,
    LAYOUT_FIELD_COLUMNS,
    LAYOUT_NESTED_COLUMNS,
    LAYOUT_PER_KEY,
    LAYOUT_WHOLE,
    columns_schema,
    field_columns_schema,
    key_columns_schema,
    key_count,
    keyed_entry_schema,
    layout_meta_problem,
    layout_records,
    layout_schema,
    nested_columns_schema,
    same_kind_of_layout,
)

FORMAT_VERSION = "5"
READABLE_FORMATS = frozenset({"1", "2", "3", "4", FORMAT_VERSION})
"""Format versions this code reads (``"1"``: keyed state one record per key; ``"2"``:
no ``per_key_field_columns``; ``"3"``: no ``per_key_nested_columns``; ``"4"``: no key
columns)."""
_LAYOUT_FORMATS = {LAYOUT_PER_KEY: "1", LAYOUT_COLUMNS: "2", LAYOUT_WHOLE: "2",
                   LAYOUT_FIELD_COLUMNS: "3", LAYOUT_NESTED_COLUMNS: "4"}
"""The format a file of each layout declares: the oldest whose readers read it, so a
hailstorm of format 2 still reads every file but those of the newer layouts. A file with
key columns (:data:`~hailstorm.snapshots.layouts.KEY_COLUMNS_KEY`) declares
:data:`FORMAT_VERSION`, whatever its layout."""
_PREFIX = "hailstorm."
CHECKSUM_KEY = "hailstorm.checksum"
BASE_KEY = "hailstorm.base"
_CHECKSUM_PLACEHOLDER = b"sha256:" + b"0" * 64

_CODEC = "deflate"
_COMPRESSION_LEVEL = 1
"""zlib's fastest level: a tenth larger files than its default (6), written in half the
time (compression is as costly as encoding the records at the default)."""
_SYNC_INTERVAL = 256 * 1024  # uncompressed bytes per Avro block
_SMALL_HEADER = 64 * 1024
_MAX_HEADER = 16 * 1024 * 1024
_READ_CHUNK = 1024 * 1024

_FILE_NAME = re.compile(r"^epoch-(\d{12})\.avro\Z")
_KEY = re.compile(r"^[^/]+/(?P<bolt>[^/]+)/(?P<instance>\d+)/epoch-(?P<epoch>\d{12})\.avro\Z")
"""A snapshot key (:func:`snapshot_key`), as a delta names its base."""
_TEMP_NAME = re.compile(r"^\.epoch-(\d{12})\.avro\..+\.tmp\Z")
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*\Z")

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




class SnapshotError(ServiceError, RuntimeError):
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


class SnapshotRefRefused(SnapshotError, ValueError):
    """A snapshot ref (as read from ZooKeeper) that names no snapshot file the store holds
    for the topology: refused before anything is read or deleted."""


def snapshot_key_problem(key: str, topology: str,
                         epochs: Collection[int] | None = None) -> str | None:
    """Why ``key`` is not the key of a snapshot file of ``topology`` (of one of ``epochs``,
    when given) as :func:`snapshot_key` makes them (None: it is).

    >>> snapshot_key_problem("wc/counts/0/epoch-000000000007.avro", "wc") is None
    True
    >>> snapshot_key_problem("wc/../0/epoch-000000000007.avro", "wc")
    "bolt name '..' is not a name"
    """
    match = _KEY.match(key)
    if match is None:
        return "not a snapshot key <topology>/<bolt>/<instance>/epoch-<12 digits>.avro"
    owner, bolt = key.split("/", 1)[0], match["bolt"]
    for kind, name in (("topology", owner), ("bolt", bolt)):
        if not _NAME.match(name):
            return f"{kind} name {name!r} is not a name"
    if owner != topology:
        return f"a snapshot of topology {owner!r}, not of {topology!r}"
    if match["instance"] != str(int(match["instance"])):
        return f"instance {match['instance']!r} is not written as snapshot keys write it"
    if epochs is not None and int(match["epoch"]) not in epochs:
        return (f"of round {int(match['epoch'])}, not of the rounds it may name "
                f"({', '.join(map(str, sorted(epochs)))})")
    return None


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

    def is_state_of(self, bolt: str, instance: int, parallelism: int, monoid: str) -> bool:
        """Whether this file is instance ``instance``'s state of ``bolt`` exactly as that
        bolt (``parallelism`` instances, state described as ``monoid``) loads it: not
        renamed, re-sharded or migrated (the next snapshot may build on it)."""
        return (self.bolt, self.instance, self.parallelism, self.monoid) == \
            (bolt, instance, parallelism, monoid)

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


def _record_schema(monoid: Monoid[Any], layout: str | None = None
                   ) -> tuple[str, bool, Any]:
    """``(layout, key columns, parsed record schema)`` of the snapshot records of
    ``monoid``'s state (keyed state in ``layout``: by default :data:`LAYOUT_NESTED_COLUMNS`
    where its values are records or arrays that layout holds, else
    :data:`LAYOUT_FIELD_COLUMNS` where they are records that one holds, else
    :data:`LAYOUT_COLUMNS`; by default with the keys' nested column where they are
    records, :func:`~hailstorm.snapshots.layouts.key_columns_schema`)."""
    entry = keyed_entry_schema(monoid)
    if entry is not None:
        if layout is None:
            key_options = (True, False) if key_columns_schema(entry) is not None else (False,)
            for key_columns in key_options:
                for candidate, columns_of in ((LAYOUT_NESTED_COLUMNS, nested_columns_schema),
                                              (LAYOUT_FIELD_COLUMNS, field_columns_schema),
                                              (LAYOUT_COLUMNS, columns_schema)):
                    # Columns of a schema fastavro refuses (one naming a type twice, say)
                    # fall back to the next layout; any other schema error is raised below.
                    with contextlib.suppress(Exception):  # broad: malformed schemas, fastavro
                        columns = columns_of(entry, key_columns)
                        if columns is not None:
                            return candidate, key_columns, fastavro.parse_schema(columns)
            layout = LAYOUT_COLUMNS
        schema = layout_schema(entry, layout)
    else:
        layout = LAYOUT_WHOLE
        schema = {
            "type": "record",
            "name": "hailstorm.snapshot.State",
            "fields": [{"name": "state", "type": monoid.avro_schema()}],
        }
    try:
        return layout, False, fastavro.parse_schema(schema)
    except Exception as e:  # broad: fastavro schema parsing (of a user monoid's schema)
        raise SnapshotError(f"the Avro schema of {monoid.describe()} is invalid: {e}") from e


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
    """Deterministic per-file sync marker, so a state written twice in the same order gives
    byte-equal record blocks."""
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
    layout: str | None = None,
) -> tuple[int, str]:
    """Write a snapshot file to the seekable binary ``raw``; returns ``(records, checksum)``
    (``records``: the keys of keyed state, else 1).

    With ``base`` (the key of an earlier snapshot of the same instance) the file is a
    delta: ``state`` holds only the keys whose values changed since ``base``.
    ``raw`` must be empty and positioned at 0. The caller makes it durable. ``layout``
    :data:`LAYOUT_PER_KEY` or :data:`LAYOUT_COLUMNS` writes keyed state as format ``"1"``
    or ``"2"`` did, and any layout writes tuple keys as records, as format ``"4"`` did
    (what an older snapshot store holds: for tests of reading those).
    """
    key = snapshot_key(topology, bolt, instance, epoch)
    if not 0 <= instance < parallelism:
        raise ValueError(f"instance {instance} is out of range for parallelism {parallelism}")
    layout, key_columns, schema = _record_schema(monoid, layout)
    keyed = layout in KEYED_LAYOUTS
    if keyed and not isinstance(state, Mapping):
        raise TypeError(f"{monoid.describe()} state must be a dict, not {type(state).__name__}")
    if base is not None and not keyed:
        raise ValueError(f"{monoid.describe()} is not keyed: it has no delta snapshots")
    expected = len(state) if keyed else 1
    metadata = {
        "hailstorm.format": FORMAT_VERSION if key_columns else _LAYOUT_FORMATS[layout],
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
    if layout == LAYOUT_NESTED_COLUMNS or key_columns:
        metadata[ENTRY_SCHEMA_KEY] = json.dumps(keyed_entry_schema(monoid),
                                                separators=(",", ":"))
    if key_columns:
        metadata[KEY_COLUMNS_KEY] = "1"
    sink = _HashingSink(raw)
    writer = Writer(
        cast(IO[bytes], sink),
        schema,
        codec=_CODEC,
        compression_level=_COMPRESSION_LEVEL,
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
    for record in layout_records(monoid, layout, schema, state, key_columns):
        write(record)
        written += key_count(record["keys"]) if layout in COLUMN_LAYOUTS else 1
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
        except Exception as e:  # broad: fastavro on corrupt bytes raises almost anything
            if len(prefix) == limit and limit < _MAX_HEADER:
                continue  # a header larger than the first read: try a bigger one
            raise SnapshotCorruptError(name, f"unreadable Avro header ({e})") from e
    missing = [k for k in _REQUIRED_META if k not in meta]
    if missing:
        raise SnapshotCorruptError(name, f"not a hailstorm snapshot (no {missing[0]})")
    if meta["hailstorm.format"] not in READABLE_FORMATS:
        raise SnapshotError(f"{name}: unsupported snapshot format {meta['hailstorm.format']}")
    problem = layout_meta_problem(meta)
    if problem is not None:
        raise SnapshotCorruptError(name, problem)
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


def _check_monoid(ref: SnapshotRef, header: _Header, monoid: Monoid[Any]) -> None:
    layout, _, _ = _record_schema(monoid)
    if ref.monoid != monoid.describe() \
            or not same_kind_of_layout(header.meta["hailstorm.layout"], layout):
        raise SnapshotMismatchError(
            f"{ref.uri} holds {ref.monoid} state ({ref.layout}), not {monoid.describe()}"
        )
