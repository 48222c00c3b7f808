"""The layouts of a snapshot file's records (see :mod:`.format` for the file): which layout
a state is written in, the record schema of each, its records when writing, and the
``per_key_columns`` records a ``per_key_field_columns`` or ``per_key_nested_columns`` file
reads as. Pure but for fastavro's schema parsing and, reading a file with another reader
schema, its schema resolution.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from operator import itemgetter
from typing import Any

import fastavro

from hailstorm.monoids import KeyedMap, Monoid
from hailstorm.monoids.avro_columns import assemble, check_shape
from hailstorm.monoids.avro_columns import columns_schema as value_columns_schema
from hailstorm.monoids.keyed_copies import COLUMN_KEYS

__all__ = [
    "COLUMN_KEYS",
    "COLUMN_LAYOUTS",
    "ENTRY_SCHEMA_KEY",
    "KEYED_LAYOUTS",
    "KEY_COLUMNS_KEY",
    "LAYOUT_COLUMNS",
    "LAYOUT_FIELD_COLUMNS",
    "LAYOUT_NESTED_COLUMNS",
    "LAYOUT_PER_KEY",
    "LAYOUT_WHOLE",
    "VALUE_COLUMN_LAYOUTS",
    "ValueColumnsReader",
    "columns_schema",
    "entry_columns",
    "entry_schema",
    "field_columns_schema",
    "key_columns_schema",
    "key_count",
    "keyed_entry_schema",
    "keys_of_column",
    "layout_meta_problem",
    "layout_records",
    "layout_schema",
    "nested_columns_schema",
    "same_kind_of_layout",
    "value_columns",
    "values_of_columns",
    "written_schema",
]

LAYOUT_NESTED_COLUMNS = "per_key_nested_columns"
LAYOUT_FIELD_COLUMNS = "per_key_field_columns"
LAYOUT_COLUMNS = "per_key_columns"
LAYOUT_PER_KEY = "per_key"
LAYOUT_WHOLE = "whole"
KEYED_LAYOUTS = frozenset({LAYOUT_NESTED_COLUMNS, LAYOUT_FIELD_COLUMNS, LAYOUT_COLUMNS,
                           LAYOUT_PER_KEY})
"""Layouts of keyed state: a delta of one may build on a file of another."""
COLUMN_LAYOUTS = frozenset({LAYOUT_NESTED_COLUMNS, LAYOUT_FIELD_COLUMNS, LAYOUT_COLUMNS})
"""Layouts whose records hold the keys of a chunk (not one key each)."""
VALUE_COLUMN_LAYOUTS = frozenset({LAYOUT_NESTED_COLUMNS, LAYOUT_FIELD_COLUMNS})
"""Layouts whose values are columns too: read a record's worth at a time by
:class:`ValueColumnsReader`."""
ENTRY_SCHEMA_KEY = "hailstorm.entry_schema"
"""The file metadata holding the ``{key, value}`` entry schema of a
``per_key_nested_columns`` file or of one with :data:`KEY_COLUMNS_KEY` (JSON): its record
schema is derived from it, not the reverse."""
KEY_COLUMNS_KEY = "hailstorm.key_columns"
"""The file metadata saying (``"1"``) that a column layout's ``keys`` are the nested column
of the keys (:func:`key_columns_schema`: a tuple key's positions, one array each), not an
array of key records."""
_COLUMNS_SUFFIX = "Columns"
_FIELD_COLUMN_RECORD_KEYS = frozenset({"type", "name", "namespace", "doc", "fields"})
_FIELD_COLUMN_FIELD_KEYS = frozenset({"name", "type", "doc"})
"""What a record value schema (and each of its fields) may hold to be written in field
columns: exactly what the transposed schema keeps (no defaults, aliases or orders), so
that :func:`entry_schema` gives back the entry schema it was written for."""


def keyed_entry_schema(monoid: Monoid[Any]) -> dict[str, Any] | None:
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


def columns_schema(entry: dict[str, Any], key_columns: bool = False) -> dict[str, Any]:
    """The ``per_key_columns`` record schema of a keyed map's ``{key, value}`` entry
    schema: ``{keys, values}``, arrays of the entry's key and value schemas (``keys`` the
    keys' nested column with ``key_columns``)."""
    types = {f["name"]: f["type"] for f in entry["fields"]}
    return _keys_and_values(entry, {"type": "array", "items": types["value"]}, key_columns)


def key_columns_schema(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of the nested column of a ``{key, value}`` entry schema's keys when they
    are records (tuple keys: one array per position, which fastavro writes three times as
    fast as a record per key), else None (a key of one primitive is its own column)."""
    key = {f["name"]: f["type"] for f in entry["fields"]}["key"]
    if not (isinstance(key, dict) and key.get("type") == "record"):
        return None
    return value_columns_schema(key)


def keys_of_column(entry: dict[str, Any], column: Any) -> list[Any]:
    """The Avro keys (records) of the ``{key, value}`` entry schema ``entry`` that a keys'
    nested column (:func:`key_columns_schema`) holds; ValueError when its positions differ
    in length."""
    key = {f["name"]: f["type"] for f in entry["fields"]}["key"]
    return assemble(key, column, key_count(column))


def key_count(keys: Any) -> int:
    """How many keys a record's ``keys`` hold: an array of keys, or their nested column
    (records of columns, a tuple having at least one position)."""
    while isinstance(keys, dict):
        if not keys:
            raise ValueError("a key column of no positions")
        keys = next(iter(keys.values()))
    return len(keys)


def _keys_and_values(entry: dict[str, Any], values: Any, key_columns: bool = False
                     ) -> dict[str, Any]:
    """The ``{keys, values}`` record schema of a column layout: ``keys`` an array of the
    entry's keys (their nested column with ``key_columns``), ``values`` of schema
    ``values``."""
    key = {f["name"]: f["type"] for f in entry["fields"]}["key"]
    keys = key_columns_schema(entry) if key_columns else None
    if key_columns and keys is None:
        raise ValueError(f"{entry['name']} keys are no records: they have no key columns")
    return {
        "type": "record",
        "name": f"{entry['name']}{_COLUMNS_SUFFIX}",
        "fields": [
            {"name": "keys", "type": keys or {"type": "array", "items": key}},
            {"name": "values", "type": values},
        ],
    }


def field_columns_schema(entry: dict[str, Any], key_columns: bool = False
                         ) -> dict[str, Any] | None:
    """The ``per_key_field_columns`` record schema of a keyed map's ``{key, value}`` entry
    schema, or None when its value is no record that layout can hold (see
    :data:`_FIELD_COLUMN_RECORD_KEYS`)."""
    types = {f["name"]: f["type"] for f in entry["fields"]}
    value = types["value"]
    if not (isinstance(value, dict) and value.get("type") == "record"
            and set(value) <= _FIELD_COLUMN_RECORD_KEYS
            and isinstance(value.get("name"), str) and isinstance(value.get("fields"), list)
            and all(isinstance(f, dict) and set(f) <= _FIELD_COLUMN_FIELD_KEYS
                    and isinstance(f.get("name"), str) and "type" in f
                    for f in value["fields"])):
        return None
    return _keys_and_values(entry, {
        **value,
        "name": f"{value['name']}{_COLUMNS_SUFFIX}",
        "fields": [{**f, "type": {"type": "array", "items": f["type"]}}
                   for f in value["fields"]],
    }, key_columns)


def nested_columns_schema(entry: dict[str, Any], key_columns: bool = False
                          ) -> dict[str, Any] | None:
    """The ``per_key_nested_columns`` record schema of a keyed map's ``{key, value}`` entry
    schema: ``{keys, values}``, ``values`` the column of the values (see
    :mod:`hailstorm.monoids.avro_columns`); None when the value is no record or array
    that module can stripe."""
    values = value_columns_schema({f["name"]: f["type"] for f in entry["fields"]}["value"])
    return None if values is None else _keys_and_values(entry, values, key_columns)


def entry_schema(schema: dict[str, Any], layout: str) -> dict[str, Any]:
    """The ``{key, value}`` entry schema of a keyed snapshot written with ``schema`` in
    ``layout`` (the inverse of :func:`columns_schema` and :func:`field_columns_schema`; a
    ``per_key`` schema is the entry). Not for ``per_key_nested_columns``, whose files
    hold their entry schema (:func:`written_schema`)."""
    if layout == LAYOUT_NESTED_COLUMNS:
        raise ValueError("a per_key_nested_columns file holds its entry schema")
    if layout not in COLUMN_LAYOUTS:
        return schema
    types = {f["name"]: f["type"] for f in schema["fields"]}
    value = types["values"]
    if layout == LAYOUT_COLUMNS:
        value = value["items"]
    else:
        value = {
            **value,
            "name": str(value["name"]).removesuffix(_COLUMNS_SUFFIX),
            "fields": [{**f, "type": f["type"]["items"]} for f in value["fields"]],
        }
    return {
        "type": "record",
        "name": str(schema["name"]).removesuffix(_COLUMNS_SUFFIX),
        "fields": [
            {"name": "key", "type": types["keys"]["items"]},
            {"name": "value", "type": value},
        ],
    }


def layout_schema(entry: dict[str, Any], layout: str, key_columns: bool = False
                  ) -> dict[str, Any]:
    """The record schema of a keyed snapshot in ``layout`` whose entries have the schema
    ``entry`` (a ``per_key`` record is the entry), with the keys' nested column with
    ``key_columns``."""
    if layout == LAYOUT_COLUMNS:
        return columns_schema(entry, key_columns)
    if layout in VALUE_COLUMN_LAYOUTS:
        schema = (field_columns_schema(entry, key_columns) if layout == LAYOUT_FIELD_COLUMNS
                  else nested_columns_schema(entry, key_columns))
        if schema is None:
            raise ValueError(f"{entry['name']} values cannot be written in {layout}")
        return schema
    return entry


def value_columns(values: list[Any], names: list[str]) -> dict[str, list[Any]]:
    """``values`` (Avro records with the fields ``names``) as one column per field; a
    field a value leaves out is None there, as fastavro writes a record without it (null,
    which a nullable field takes and any other refuses)."""
    columns = {}
    for name in names:
        try:
            columns[name] = list(map(itemgetter(name), values))
        except KeyError:
            columns[name] = [value.get(name) for value in values]
    return columns


def values_of_columns(columns: dict[str, list[Any]], size: int) -> list[dict[str, Any]]:
    """The ``size`` Avro records a ``per_key_field_columns`` record's ``values`` hold, in
    their field order (the inverse of :func:`value_columns`); ValueError when a column is
    not ``size`` long."""
    if any(len(column) != size for column in columns.values()):
        lengths = sorted({len(column) for column in columns.values()})
        raise ValueError(f"field columns of {lengths} values for {size} keys")
    if not columns:
        return [{} for _ in range(size)]
    names = list(columns)
    return list(map(dict, map(zip, repeat(names), zip(*columns.values(), strict=True))))


def layout_records(monoid: Monoid[Any], layout: str, schema: dict[str, Any],
                   state: Any, key_columns: bool = False) -> Iterator[Any]:
    """The snapshot records of ``state`` in ``layout`` (whose record schema is
    ``schema``, with the keys' nested column with ``key_columns``), produced a chunk of
    keys (or, in the ``per_key`` layout, a key) at a time."""
    if layout == LAYOUT_WHOLE:
        return iter(({"state": monoid.to_avro(state)},))
    assert isinstance(monoid, KeyedMap)
    if layout == LAYOUT_NESTED_COLUMNS:
        return ({"keys": chunk_keys, "values": column}
                for chunk_keys, column in monoid.avro_nested_chunks(
                    state, COLUMN_KEYS, key_columns=key_columns))
    if layout == LAYOUT_PER_KEY:
        return monoid.avro_entries(state, list(state))
    chunks = monoid.avro_column_chunks(state, COLUMN_KEYS, key_columns=key_columns)
    if layout == LAYOUT_FIELD_COLUMNS:
        names = [f["name"] for f in schema["fields"][1]["type"]["fields"]]
        return ({"keys": chunk_keys, "values": value_columns(chunk_values, names)}
                for chunk_keys, chunk_values in chunks)
    return ({"keys": chunk_keys, "values": chunk_values} for chunk_keys, chunk_values in chunks)


def layout_meta_problem(meta: Mapping[str, str]) -> str | None:
    """What is wrong with the metadata a file of the layout ``meta`` names holds for its
    records (None: nothing): a ``per_key_nested_columns`` file, or one with key columns
    (:data:`KEY_COLUMNS_KEY`, only in a column layout), must hold a valid entry schema
    (:data:`ENTRY_SCHEMA_KEY`) that its columns are assembled back with."""
    layout, key_columns = meta["hailstorm.layout"], meta.get(KEY_COLUMNS_KEY)
    if key_columns not in (None, "1") or (key_columns and layout not in COLUMN_LAYOUTS):
        return f"{KEY_COLUMNS_KEY} {key_columns!r} in a {layout} file"
    if layout != LAYOUT_NESTED_COLUMNS and not key_columns:
        return None
    try:  # what its records are assembled with (see hailstorm.monoids.avro_columns)
        entry = json.loads(meta[ENTRY_SCHEMA_KEY])
        if layout == LAYOUT_NESTED_COLUMNS and nested_columns_schema(entry) is None:
            raise ValueError("its values are no record or array")
        if key_columns and key_columns_schema(entry) is None:
            raise ValueError("its keys are no records")
    except Exception as e:  # broad: any malformed schema (KeyError, TypeError, ...)
        return f"no valid {ENTRY_SCHEMA_KEY} ({e!r})"
    return None


def same_kind_of_layout(a: str, b: str) -> bool:
    """Both layouts hold keyed state, or both are the same other layout."""
    return a == b or (a in KEYED_LAYOUTS and b in KEYED_LAYOUTS)


def written_schema(layout: str, meta: Mapping[str, str]) -> Any:
    """The schema a file of ``layout`` with the Avro metadata ``meta`` wrote its state
    with: of its ``{key, value}`` entries when keyed, whatever the file's layout."""
    if layout == LAYOUT_NESTED_COLUMNS or ENTRY_SCHEMA_KEY in meta:
        return json.loads(meta[ENTRY_SCHEMA_KEY])
    written = json.loads(meta["avro.schema"])
    return written if layout == LAYOUT_WHOLE else entry_schema(written, layout)


def entry_columns(records: Iterable[Any], layout: str, meta: Mapping[str, str]
                  ) -> Iterator[tuple[list[Any], list[Any]]]:
    """The Avro keys and values of a keyed file's records, read as written (``layout``,
    the file's metadata ``meta``), a record at a time: what the ``{key, value}`` entries
    of :func:`written_schema` would hold."""
    if layout == LAYOUT_PER_KEY:
        for record in records:
            yield [record["key"]], [record["value"]]
        return
    entry = written_schema(layout, meta)
    key_columns = meta.get(KEY_COLUMNS_KEY) == "1"
    columns = (ValueColumnsReader(entry, None, layout, key_columns=key_columns)
               if layout in VALUE_COLUMN_LAYOUTS else None)
    for record in records:
        if columns is not None:
            record = columns.entries(record)
        elif key_columns:
            record = {**record, "keys": keys_of_column(entry, record["keys"])}
        yield record["keys"], record["values"]


class ValueColumnsReader:
    """The ``{keys, values}`` records of a ``per_key_field_columns`` or
    ``per_key_nested_columns`` file (``layout``) as those of ``per_key_columns`` (values a
    list of records again), resolved to a ``reader`` entry schema when one is given.
    fastavro cannot resolve a column of a field the reader added (it has no length to
    fill), so the entries are resolved whole, a record's worth at a time: written as an
    array of ``{key, value}`` with the file's ``entry`` schema and read back with the
    reader's (keys promoted as values are).

    ``raw``: the records of a ``per_key_nested_columns`` file read without a reader schema
    come as ``{keys, column}`` instead, the values' column checked but left as it is (for
    :meth:`~hailstorm.monoids.Monoid.from_avro_column`: no Avro value is built).
    ``key_columns``: the file's keys are their nested column (:data:`KEY_COLUMNS_KEY`);
    they come as a list of keys all the same."""

    def __init__(self, entry: dict[str, Any], reader: dict[str, Any] | None,
                 layout: str, *, raw: bool = False, key_columns: bool = False) -> None:
        if layout not in VALUE_COLUMN_LAYOUTS:
            raise ValueError(f"{layout} values are not written in columns")
        self._entry = entry
        self._key_columns = key_columns
        self._value = {f["name"]: f["type"] for f in entry["fields"]}["value"]
        self._nested = layout == LAYOUT_NESTED_COLUMNS
        self.raw = raw and self._nested and reader is None
        """Whether :meth:`entries` gives ``{keys, column}``."""
        self._written = fastavro.parse_schema({"type": "array", "items": entry})
        self._reader = None if reader is None else \
            fastavro.parse_schema({"type": "array", "items": reader})

    def entries(self, record: Any) -> dict[str, Any]:
        """``record`` with its values as a list of records, or its column (:attr:`raw`);
        ValueError when a column does not hold a value for every key."""
        keys = record["keys"]
        if self._key_columns:
            keys = keys_of_column(self._entry, keys)
        if self.raw:
            check_shape(self._value, record["values"], len(keys))
            return {"keys": keys, "column": record["values"]}
        values = (assemble(self._value, record["values"], len(keys)) if self._nested
                  else values_of_columns(record["values"], len(keys)))
        if self._reader is None:
            return {"keys": keys, "values": values}
        entries = [{"key": k, "value": v} for k, v in zip(keys, values, strict=True)]
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self._written, entries)
        buffer.seek(0)
        resolved: Any = fastavro.schemaless_reader(buffer, self._written, self._reader)
        return {"keys": [e["key"] for e in resolved], "values": [e["value"] for e in resolved]}
