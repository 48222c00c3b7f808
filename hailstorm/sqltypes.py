"""The SQL column types sink tables may declare, and which Python values each can hold.

One vocabulary for the topology's validation (:class:`~hailstorm.topology.Table`), the
sink's DDL and shape checks (:mod:`hailstorm.sinks.sql`) and the row check that sends a
value its column cannot hold to ``<table>_rejected`` instead of failing the commit. Pure.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

__all__ = ["WIDTH", "ColumnRule", "column_rule", "normalize_type", "type_family"]


def normalize_type(sql_type: str) -> str:
    """``sql_type`` in lower case without its size (``VARCHAR(40)`` -> ``varchar``)."""
    base = re.sub(r"\(.*?\)", "", sql_type.strip().lower())
    return " ".join(base.split())


_FAMILY: dict[str, str] = {
    **dict.fromkeys(("smallint", "int2", "integer", "int", "int4", "bigint", "int8"), "integer"),
    **dict.fromkeys(("real", "float4", "double precision", "float", "float8"), "float"),
    **dict.fromkeys(("numeric", "decimal"), "numeric"),
    **dict.fromkeys(
        ("text", "varchar", "character varying", "character", "char", "bpchar"), "text"
    ),
    **dict.fromkeys(("boolean", "bool"), "boolean"),
    **dict.fromkeys(("bytea", "blob"), "binary"),
    "date": "date",
    **dict.fromkeys(("timestamp", "timestamp without time zone"), "timestamp"),
    **dict.fromkeys(("timestamptz", "timestamp with time zone"), "timestamptz"),
    **dict.fromkeys(("json", "jsonb"), "json"),
}

WIDTH: dict[str, int] = {
    "smallint": 2, "int2": 2, "integer": 4, "int": 4, "int4": 4, "bigint": 8, "int8": 8,
    "real": 4, "float4": 4, "double precision": 8, "float": 8, "float8": 8,
}  # fmt: skip
"""Bytes of the fixed-width numeric types."""


def type_family(sql_type: str) -> str:
    """The family of an SQL type name (``integer``, ``float``, ``text``...); unknown types
    are their own family."""
    base = normalize_type(sql_type)
    return _FAMILY.get(base, base)


_CLASSES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "float": (int, float),
    "numeric": (int, float, Decimal),
    "text": (str,),
    "boolean": (bool,),
    "binary": (bytes, bytearray, memoryview),
    "date": (dt.date, str),
    "timestamp": (dt.datetime, str),
    "timestamptz": (dt.datetime, str),
    "json": (str,),
}
"""What the database drivers write into each family (a string for dates and times is
parsed by the database; JSON is written as its text)."""


class ColumnRule:
    """Which Python values a column of ``sql_type`` can hold; ``nullable`` is False for key
    columns and for the columns a merge table adds up."""

    def __init__(self, sql_type: str, *, nullable: bool = True) -> None:
        family = type_family(sql_type)
        self.family = family
        self.classes = _CLASSES.get(family)
        self.nullable = nullable
        numeric = family in ("integer", "float", "numeric")
        self.exact: frozenset[type] = frozenset(
            c for c in self.classes or () if c is not bool or not numeric)
        """Types accepted as they are by :meth:`column_fits` (subclasses go value by value)."""
        if nullable:
            self.exact |= {type(None)}
        width = WIDTH.get(normalize_type(sql_type)) if family == "integer" else None
        self.bounds = None if width is None else (-(2 ** (8 * width - 1)), 2 ** (8 * width - 1) - 1)
        self._numeric = numeric

    def problem(self, value: Any) -> str | None:
        """Why ``value`` cannot be stored in the column (None: it can)."""
        if value is None:
            return None if self.nullable else "is null"
        if self.classes is not None and (
                not isinstance(value, self.classes)
                or (self._numeric and isinstance(value, bool))):
            names = " or ".join(c.__name__ for c in self.classes)
            return f"is a {type(value).__name__}, not {names}"
        if self.bounds is not None and not self.bounds[0] <= value <= self.bounds[1]:
            return f"is out of the range of {self.family} ({self.bounds[0]}..{self.bounds[1]})"
        return None

    def column_fits(self, values: Sequence[Any]) -> bool:
        """True when every value fits (a batch at a time: by their types and range); False
        means some value may not (ask :meth:`problem` value by value)."""
        if self.classes is None:
            return self.nullable or None not in values
        if not set(map(type, values)) <= self.exact:
            return False
        if self.bounds is not None and values:
            numbers = [v for v in values if v is not None] if self.nullable else values
            if numbers and not self.bounds[0] <= min(numbers) <= max(numbers) <= self.bounds[1]:
                return False
        return True


def column_rule(sql_type: str, *, nullable: bool = True) -> ColumnRule:
    """The :class:`ColumnRule` of a column declared ``sql_type``."""
    return ColumnRule(sql_type, nullable=nullable)
