"""Whether a round written again is the same round: the rule behind "a snapshot is never
overwritten" (:mod:`.directory`, :mod:`.object_store`).

A store that finds a round's file already there (a retried write, or a replaced
incarnation's write racing its predecessor's) keeps the existing file when the new one holds
the same round, and refuses the new one otherwise. The same round means the same metadata
(what ``hailstorm.created`` and the checksum say aside) and the same content. Keyed state
is written in the order the state holds its keys, which two processes holding the same
state need not share, so its content is compared as the set of its ``{key, value}``
entries, in any order and chunks; any other state byte for byte.
"""

from __future__ import annotations

import hashlib
import io
from typing import IO

import fastavro

from hailstorm.snapshots.format import (
    _READ_CHUNK,
    CHECKSUM_KEY,
    SnapshotCorruptError,
    _Header,
    _read_header,
    _verify,
)
from hailstorm.snapshots.layouts import KEYED_LAYOUTS, entry_columns, written_schema

__all__ = ["same_content"]

_IGNORED_META = frozenset({"hailstorm.created", CHECKSUM_KEY})
"""Metadata two writes of the same round may differ in."""


def same_content(old: IO[bytes], new: IO[bytes], name: str) -> bool:
    """True when two snapshot files hold the same round, the old one verified (before
    anything in it is decoded); both are left anywhere."""
    old_header = _read_header(old, name)
    new_header = _read_header(new, f"{name} (new)")
    if _meta(old_header) != _meta(new_header):
        return False
    if _records_digest(old, old_header) == _records_digest(new, new_header):
        _verify(old, name, old_header)
        return True
    if old_header.meta["hailstorm.layout"] not in KEYED_LAYOUTS:
        return False
    _verify(old, name, old_header)
    return (_entries_digest(old, old_header, name)
            == _entries_digest(new, new_header, f"{name} (new)"))


def _meta(header: _Header) -> dict[str, str]:
    return {k: v for k, v in header.meta.items() if k not in _IGNORED_META}


def _records_digest(fo: IO[bytes], header: _Header) -> str:
    """SHA-256 of the record blocks only (equal for a state written twice in the same
    order)."""
    fo.seek(header.end)
    sha = hashlib.sha256()
    while chunk := fo.read(_READ_CHUNK):
        sha.update(chunk)
    return sha.hexdigest()


def _entries_digest(fo: IO[bytes], header: _Header, name: str) -> str:
    """SHA-256 of a keyed file's ``{key, value}`` entries, each encoded with the file's
    entry schema, taken in the order of their encodings: equal for the same entries in any
    order and chunks."""
    meta = header.meta
    layout = meta["hailstorm.layout"]
    encoded: list[bytes] = []
    fo.seek(0)
    try:
        schema = fastavro.parse_schema(written_schema(layout, meta))
        for keys, values in entry_columns(fastavro.reader(fo), layout, meta):
            for key, value in zip(keys, values, strict=True):
                buffer = io.BytesIO()
                fastavro.schemaless_writer(buffer, schema, {"key": key, "value": value})
                encoded.append(buffer.getvalue())
    except Exception as e:  # broad: fastavro on corrupt records raises almost anything
        raise SnapshotCorruptError(name, f"unreadable records ({e})") from e
    encoded.sort()
    sha = hashlib.sha256()
    for item in encoded:
        sha.update(len(item).to_bytes(8, "big"))
        sha.update(item)
    return sha.hexdigest()
