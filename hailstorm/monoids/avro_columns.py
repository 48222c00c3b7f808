"""Nested columns: a list of Avro values of one schema as columns down to its leaves (pure).

A snapshot's keyed values are written a chunk of keys at a time (see
:mod:`hailstorm.snapshots`). fastavro writes an item of an array of numbers, strings or
bytes several times faster than a record, and a nested record or an array inside a value
costs it more again; so the ``per_key_nested_columns`` layout writes a chunk's values as
the columns of their schema's leaves, the way columnar formats stripe nested data:

* a **record** becomes a record of the same field names (named ``<name>Columns``, in the
  record's namespace), each field the column of that field over every value;
* an **array** becomes a record ``{lengths, items}`` (named ``NestedLists<n>``, ``n``
  counting the arrays in the schema's order from 1): the length of each value's array, and
  the column of all their items one after the other;
* **anything else** (numbers, strings, bytes, unions, maps, enums, fixed) becomes an
  array of the values as they are.

A window's values (a record holding an array of records holding records) thus become flat
arrays of numbers and bytes. :func:`columns_schema` gives the schema of the column of a
value schema, :func:`stripe` the column of a list of values, and :func:`assemble` the values
back from a column (checking its lengths). A schema that names a type by reference (a
named type used twice) cannot be striped: :func:`columns_schema` returns None for it, as it
does for a value that is neither a record nor an array (nothing to gain).

A monoid gives the column of its states with :meth:`~hailstorm.monoids.Monoid.avro_column`;
the library's monoids build it from their states directly, without the Avro values in
between.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain
from operator import itemgetter
from typing import Any

__all__ = ["assemble", "check_length", "check_shape", "columns_schema", "list_ends", "stripe"]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes",
                         "string"})
_COLUMNS_SUFFIX = "Columns"
_LISTS_NAME = "NestedLists"


def columns_schema(schema: Any) -> dict[str, Any] | None:
    """The schema of the column of values of ``schema`` (see the module), or None when
    ``schema`` is no record or array, or names a type by reference."""
    if not (isinstance(schema, dict) and schema.get("type") in ("record", "array")):
        return None
    if _references(schema):
        return None
    lists = iter(range(1, 1 << 30))
    return _column_of(schema, lists)


def _column_of(schema: Any, lists: Any) -> dict[str, Any]:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "record":
        column: dict[str, Any] = {
            "type": "record",
            "name": f"{schema['name']}{_COLUMNS_SUFFIX}",
            "fields": [{"name": f["name"], "type": _column_of(f["type"], lists)}
                       for f in schema["fields"]],
        }
        if "namespace" in schema:
            column["namespace"] = schema["namespace"]
        return column
    if kind == "array":
        name = f"{_LISTS_NAME}{next(lists)}"
        return {
            "type": "record",
            "name": name,
            "fields": [
                {"name": "lengths", "type": {"type": "array", "items": "long"}},
                {"name": "items", "type": _column_of(schema["items"], lists)},
            ],
        }
    return {"type": "array", "items": schema}


def _references(schema: Any) -> bool:
    """``schema`` names a type defined elsewhere (a string that is no primitive)."""
    if isinstance(schema, str):
        return schema not in _PRIMITIVES
    if isinstance(schema, list):
        return any(_references(branch) for branch in schema)
    if not isinstance(schema, dict):
        return True  # not a schema: let fastavro name the problem when it parses it
    kind = schema.get("type")
    if kind == "record" or kind == "error":
        return any(_references(f.get("type")) for f in schema.get("fields", ()))
    if kind == "array":
        return _references(schema.get("items"))
    if kind == "map":
        return _references(schema.get("values"))
    if kind in ("enum", "fixed"):
        return False
    return _references(kind)  # {"type": "long", "logicalType": ...} and the like


def stripe(schema: Any, values: Sequence[Any]) -> Any:
    """The column of ``values`` (Avro values of ``schema``, as fastavro writes them: a
    record's field it leaves out is its default, else None)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "record":
        return {f["name"]: stripe(f["type"], _field(values, f)) for f in schema["fields"]}
    if kind == "array":
        return {"lengths": list(map(len, values)),
                "items": stripe(schema["items"], list(chain.from_iterable(values)))}
    return values if isinstance(values, list) else list(values)


def _field(values: Sequence[Any], field: dict[str, Any]) -> list[Any]:
    name = field["name"]
    try:
        return list(map(itemgetter(name), values))
    except KeyError:
        default = field.get("default")
        return [value.get(name, default) for value in values]


def assemble(schema: Any, column: Any, size: int) -> list[Any]:
    """The ``size`` values of ``schema`` that ``column`` holds (the inverse of
    :func:`stripe`); ``ValueError`` when it holds another number."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "record":
        names = [f["name"] for f in schema["fields"]]
        fields = [assemble(f["type"], column[f["name"]], size) for f in schema["fields"]]
        if not fields:
            return [{} for _ in range(size)]
        return [dict(zip(names, row, strict=True)) for row in zip(*fields, strict=True)]
    if kind == "array":
        lengths, ends = list_ends(column, size)
        items = assemble(schema["items"], column["items"], ends[-1] if ends else 0)
        return [items[end - n:end] for n, end in zip(lengths, ends, strict=True)]
    check_length(column, size)
    return list(column)


def check_shape(schema: Any, column: Any, size: int) -> None:
    """``ValueError`` unless ``column`` holds ``size`` values of ``schema`` (what
    :func:`assemble` checks, without building the values)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "record":
        for f in schema["fields"]:
            check_shape(f["type"], column[f["name"]], size)
    elif kind == "array":
        _, ends = list_ends(column, size)
        check_shape(schema["items"], column["items"], ends[-1] if ends else 0)
    else:
        check_length(column, size)


def check_length(column: Sequence[Any], size: int) -> None:
    """``ValueError`` unless the leaf ``column`` holds ``size`` values."""
    if len(column) != size:
        raise ValueError(f"a column of {len(column)} values for {size}")


def list_ends(column: Any, size: int) -> tuple[list[int], list[int]]:
    """The lengths of the ``size`` arrays an array's column ``{lengths, items}`` holds, and
    where each ends in its items; ``ValueError`` unless there are ``size`` of them, none
    negative."""
    lengths = column["lengths"]
    if len(lengths) != size or min(lengths, default=0) < 0:
        raise ValueError(f"{len(lengths)} array lengths for {size} values")
    return lengths, list(accumulate(lengths))
