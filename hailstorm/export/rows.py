"""How a bolt's state becomes table rows and columns.

Rows (:func:`state_mapping`): keyed (``per_key``) state gives one row per key. The key is
column ``key`` (a tuple key: ``key_0, key_1, ...``) typed from the map's ``key_type``
(``string`` -> text, ``long``/``int`` -> bigint, ``double`` -> double precision,
``boolean``, ``bytes`` -> bytea/blob, ``json`` -> canonical JSON text). The value:
``Count``, ``Sum`` and ``Min``/``Max`` of a primitive type give one typed column
``value``; a ``Record`` gives one column per field (each field typed that way, or JSON
text); any other state is one JSON text column ``value``. A non-keyed state is one row
(every instance's state combined) with those value columns and no key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from hailstorm.export.errors import ExportError
from hailstorm.monoids import Count, KeyedMap, Max, Min, Monoid, Record, Sum
from hailstorm.sinks.sql import TableShape
from hailstorm.snapshots import jsonable


def to_json_text(value: Any) -> str:
    """Canonical JSON text of a state or key."""
    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"))


_PRIMITIVE_SQL = {
    "string": "text",
    "long": "bigint",
    "int": "bigint",
    "double": "double precision",
    "boolean": "boolean",
    "bytes": "bytea",
}


def _identity(x: Any) -> Any:
    return x


def _bytes(x: Any) -> Any:
    return None if x is None else bytes(x)


def _scalar(monoid: Monoid[Any]) -> tuple[str, Callable[[Any], Any]] | None:
    """``(sql type, convert)`` when ``monoid``'s state is one plain value."""
    if isinstance(monoid, Count):
        return "bigint", _identity
    if isinstance(monoid, Sum):
        return ("bigint" if monoid.kind == "long" else "double precision"), _identity
    if isinstance(monoid, Min | Max) and isinstance(monoid.kind, str):
        sql = _PRIMITIVE_SQL.get(monoid.kind)
        if sql is not None:
            return sql, (_bytes if monoid.kind == "bytes" else _identity)
    return None


def _key_columns(key_type: Any) -> tuple[list[tuple[str, str]], Callable[[Any], tuple[Any, ...]]]:
    def one(spec: Any) -> tuple[str, Callable[[Any], Any]]:
        if isinstance(spec, str) and spec in _PRIMITIVE_SQL:
            return _PRIMITIVE_SQL[spec], (_bytes if spec == "bytes" else _identity)
        return "text", to_json_text

    if isinstance(key_type, tuple):
        parts = [one(s) for s in key_type]
        columns = [(f"key_{i}", sql) for i, (sql, _) in enumerate(parts)]
        converters = [convert for _, convert in parts]

        def split(key: Any) -> tuple[Any, ...]:
            return tuple(c(v) for c, v in zip(converters, key, strict=True))

        return columns, split
    sql, convert = one(key_type)
    return [("key", sql)], lambda key: (convert(key),)


@dataclass(frozen=True)
class StateMapping:
    """How a bolt's state becomes table rows (see the module docstring)."""

    layout: Literal["per_key", "whole"]
    key_columns: tuple[tuple[str, str], ...]
    value_columns: tuple[tuple[str, str], ...]
    _key: Callable[[Any], tuple[Any, ...]] = field(repr=False, compare=False)
    _value: Callable[[Any], tuple[Any, ...]] = field(repr=False, compare=False)

    def shape(self, table: str) -> TableShape:
        """The export table: key columns (the primary key) then value columns."""
        columns = dict(self.key_columns) | dict(self.value_columns)
        return TableShape(table, columns, primary_key=tuple(c for c, _ in self.key_columns))

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.key_columns + self.value_columns)

    def row(self, key: Any, state: Any) -> tuple[Any, ...]:
        """The row of one key (per_key) or of the whole state (``key`` ignored)."""
        values = self._value(state)
        return values if self.layout == "whole" else self._key(key) + values

    def rows(self, state: Any) -> Iterator[tuple[Any, ...]]:
        """Every row of one instance's (per_key) or the combined (whole) state."""
        if self.layout == "whole":
            yield self.row(None, state)
            return
        for key, value in state.items():
            yield self.row(key, value)


def _value_columns(monoid: Monoid[Any]) -> tuple[list[tuple[str, str]], Callable[[Any], Any]]:
    scalar = _scalar(monoid)
    if scalar is not None:
        sql, convert = scalar
        return [("value", sql)], lambda state: (convert(state),)
    if isinstance(monoid, Record):
        names = list(monoid.fields)
        parts = [_scalar(m) or ("text", to_json_text) for m in monoid.fields.values()]
        columns = [(name, sql) for name, (sql, _) in zip(names, parts, strict=True)]
        converters = [(name, convert) for name, (_, convert) in zip(names, parts, strict=True)]
        return columns, lambda state: tuple(c(state[n]) for n, c in converters)
    return [("value", "text")], lambda state: (to_json_text(state),)


def state_mapping(monoid: Monoid[Any]) -> StateMapping:
    """The rows and columns of ``monoid``'s state (module docstring)."""
    if isinstance(monoid, KeyedMap):
        key_columns, key = _key_columns(monoid.key_type)
        value_columns, value = _value_columns(monoid.inner)
        clash = {c for c, _ in key_columns} & {c for c, _ in value_columns}
        if clash:
            raise ExportError(
                f"{monoid.describe()}: Record field(s) {sorted(clash)} clash with the key "
                "column names; rename the field(s)"
            )
        return StateMapping("per_key", tuple(key_columns), tuple(value_columns), key, value)
    value_columns, value = _value_columns(monoid)
    return StateMapping("whole", (), tuple(value_columns), lambda _: (), value)
