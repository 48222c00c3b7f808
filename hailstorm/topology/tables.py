"""Sink targets as validated descriptions: :class:`SinkTarget`, :class:`Collect` and the
database :class:`Table`, with the one vocabulary of SQL column types.

The vocabulary (:data:`SQL_TYPES`) says which types a table may declare, which other
spellings databases report for them, the family of each and which Python values a column
of each family can hold (:class:`ColumnRule`). It serves the topology's validation
(:class:`Table`), the sink's DDL and shape checks (:mod:`hailstorm.sinks.sql`) and the row
check that sends a value its column cannot hold to ``<table>_rejected`` instead of failing
the commit. Pure.
"""

from __future__ import annotations

import datetime as dt
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from operator import itemgetter
from typing import Any, Literal

from hailstorm.topology.errors import RowError, TopologyError, check_name, deferred
from hailstorm.urls import redact

__all__ = [
    "DECLARABLE_TYPES",
    "LATE_COLUMNS",
    "NUMERIC_FAMILIES",
    "REJECTED_SUFFIX",
    "SQL_TYPES",
    "WIDTH",
    "Collect",
    "ColumnRule",
    "SinkTarget",
    "Table",
    "TableMode",
    "column_rule",
    "declared_type",
    "normalize_type",
    "type_family",
]

# --------------------------------------------------------------------------- SQL types

SQL_TYPES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # family, the spellings a Table may declare, the other spellings databases report
    ("integer", ("smallint", "integer", "int", "bigint"), ("int2", "int4", "int8")),
    ("float", ("real", "double precision", "float"), ("float4", "float8")),
    ("numeric", ("numeric", "decimal"), ()),
    ("text", ("text", "varchar"), ("character varying", "character", "char", "bpchar")),
    ("boolean", ("boolean",), ("bool",)),
    ("binary", ("bytea",), ("blob",)),
    ("date", ("date",), ()),
    ("timestamp", ("timestamp",), ("timestamp without time zone",)),
    ("timestamptz", ("timestamptz",), ("timestamp with time zone",)),
    ("json", ("json", "jsonb"), ()),
)
"""The one vocabulary of SQL column types: ``(family, declarable, reported)``."""

DECLARABLE_TYPES: frozenset[str] = frozenset(
    name for _family, declarable, _reported in SQL_TYPES for name in declarable)
"""The types a :class:`Table` column may declare (without a size: ``varchar(40)`` is a
``varchar``)."""

_FAMILY: dict[str, str] = {
    name: family
    for family, declarable, reported in SQL_TYPES
    for name in (*declarable, *reported)
}

NUMERIC_FAMILIES: tuple[str, ...] = ("integer", "float", "numeric")
"""The families a merge table can add up."""

WIDTH: dict[str, int] = {
    "smallint": 2, "int2": 2, "integer": 4, "int": 4, "int4": 4, "bigint": 8, "int8": 8,
    "real": 4, "float4": 4, "double precision": 8, "float": 8, "float8": 8,
}  # fmt: skip
"""Bytes of the fixed-width numeric types."""

_DECLARED = re.compile(r"^([a-z ]+?)\s*(\(\s*\d+\s*(,\s*\d+\s*)?\))?$")
"""A declared type: a name, optionally sized (``numeric(10, 2)``)."""


def normalize_type(sql_type: str) -> str:
    """``sql_type`` in lower case without its size (``VARCHAR(40)`` -> ``varchar``)."""
    base = re.sub(r"\(.*?\)", "", sql_type.strip().lower())
    return " ".join(base.split())


def declared_type(sql_type: str) -> str | None:
    """The base of a type a :class:`Table` may declare (``VARCHAR(40)`` -> ``varchar``), or
    None when it is not one of :data:`DECLARABLE_TYPES` or its size is malformed."""
    match = _DECLARED.match(sql_type.strip().lower())
    if not match:
        return None
    base = " ".join(match.group(1).split())
    return base if base in DECLARABLE_TYPES else None


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
        numeric = family in NUMERIC_FAMILIES
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


# --------------------------------------------------------------------------- targets


class SinkTarget(ABC):
    """Where a sink writes. Executing targets against databases is the sink runtime's job;
    a target here is a validated description."""

    @abstractmethod
    def describe(self) -> str:
        """One line for ``hailstorm show``."""

    @property
    def latest_per_key(self) -> bool:
        """True when the target keeps only the newest row (record) per key, so how many
        intermediate rows it receives does not change what it holds."""
        return False


@dataclass(frozen=True, eq=False)
class Collect(SinkTarget):
    """Keep the rows in memory: for tests and :func:`hailstorm.model.run_model`."""

    def describe(self) -> str:
        return "collect (in memory)"


REJECTED_SUFFIX = "_rejected"
"""A table's :attr:`Table.rejected_table` is its name and this."""

TableMode = Literal["upsert", "merge", "append"]
_MODES: tuple[str, ...] = ("upsert", "merge", "append")


LATE_COLUMNS = ("topic", "partition", "offset", "window_start", "window_end", "event_time",
                "stream_time", "record")
"""The keys of a late row (:func:`~hailstorm.model.late_row`), what a bolt's late table
(``late=Table(...)``, e.g. :func:`~hailstorm.lateness.late_table`) receives."""


@dataclass(frozen=True, eq=False)
class Table(SinkTarget):
    """A database table a sink keeps up to date (validated description, no I/O).

    ``columns`` maps column name -> SQL type, in row order. ``mode``:

    * ``"upsert"``: one row per ``key``; a new row for a key replaces the old one
      (use with bolts that emit running totals);
    * ``"merge"``: one row per ``key``; non-key columns (all numeric) are added to the
      stored ones (use with bolts that emit increments);
    * ``"append"``: every tuple adds a row (no ``key``).

    ``row`` turns a tuple into ``{column: value}``; by default tuples/lists map
    positionally onto ``columns`` and dicts pass through. ``url`` names the database
    (``None``: the sink job's default, SQLite).
    """

    name: str
    columns: Mapping[str, str]
    key: Sequence[str] = ()
    mode: TableMode = "upsert"
    url: str | None = None
    row: Callable[[Any], Mapping[str, Any]] | None = None
    column_names: tuple[str, ...] = field(init=False, repr=False)
    key_positions: tuple[int, ...] = field(init=False, repr=False)
    """Where each key column is among :attr:`column_names`, in ``key`` order."""
    value_columns: tuple[str, ...] = field(init=False, repr=False)
    column_rules: tuple[ColumnRule, ...] = field(init=False, repr=False)
    """What each column can hold, in column order (see :meth:`to_row`)."""

    def __post_init__(self) -> None:
        node = f"table {self.name!r}"
        with deferred():
            check_name(self.name, "table name", node, None)
        longest = 63 - len(REJECTED_SUFFIX)
        if len(self.name) > longest:
            raise TopologyError(
                f"table name {self.name!r} is longer than {longest} characters, so the name "
                f"of its table of rejected rows, {self.rejected_table!r}, would not fit an "
                "SQL identifier (63)",
                fix=f"shorten it, e.g. {self.name[:longest]!r}",
                node=node,
            )
        if not isinstance(self.columns, Mapping) or not self.columns:
            raise TopologyError(
                "columns must be a non-empty dict of column name -> SQL type",
                fix='pass columns={"word": "text", "count": "bigint"}',
                node=node,
            )
        for column, sql_type in self.columns.items():
            with deferred():
                check_name(column, "column", node, None)
            if not isinstance(sql_type, str) or declared_type(sql_type) is None:
                raise TopologyError(
                    f"column {column!r} has unsupported type {sql_type!r}",
                    fix="use one of " + ", ".join(sorted(DECLARABLE_TYPES)),
                    node=node,
                )
        key = (self.key,) if isinstance(self.key, str) else tuple(self.key)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "columns", dict(self.columns))
        object.__setattr__(self, "column_names", tuple(self.columns))
        added = set(self.columns) - set(key) if self.mode == "merge" else set()
        object.__setattr__(self, "column_rules", tuple(
            column_rule(sql_type, nullable=column not in key and column not in added)
            for column, sql_type in self.columns.items()))
        if self.mode not in _MODES:
            raise TopologyError(
                f"mode {self.mode!r} is not one of {', '.join(_MODES)}",
                fix='use mode="upsert" for running totals, "merge" for increments, '
                '"append" for one row per tuple',
                node=node,
            )
        for column in key:
            if column not in self.columns:
                raise TopologyError(
                    f"key column {column!r} is not among the columns ({', '.join(self.columns)})",
                    fix=f"add {column!r} to columns or remove it from key",
                    node=node,
                )
        if len(set(key)) != len(key):
            raise TopologyError(
                f"key {list(key)} lists a column twice", fix="list each column once", node=node
            )
        if self.mode in ("upsert", "merge") and not key:
            raise TopologyError(
                f"{self.mode} mode needs key columns to find the row to update",
                fix='pass key=["..."] naming the identifying columns, or use mode="append"',
                node=node,
            )
        if self.mode == "append" and key:
            raise TopologyError(
                "append mode writes every tuple as a new row, so key is not used",
                fix='drop key=..., or use mode="upsert"/"merge" for one row per key',
                node=node,
            )
        object.__setattr__(self, "key_positions",
                           tuple(self.column_names.index(c) for c in key))
        values = tuple(c for c in self.columns if c not in key)
        object.__setattr__(self, "value_columns", values)
        if self.mode == "merge":
            for column in values:
                if type_family(self.columns[column]) not in NUMERIC_FAMILIES:
                    raise TopologyError(
                        f"merge mode adds non-key columns together, but {column!r} has "
                        f"type {self.columns[column]!r}",
                        fix="make every non-key column numeric (bigint, double precision, "
                        '...), add it to key, or use mode="upsert"',
                        node=node,
                    )
        if self.url is not None and not isinstance(self.url, str):
            raise TopologyError(
                f"url must be a string, got {self.url!r}", fix="pass a URL string", node=node
            )
        if self.row is not None and not callable(self.row):
            raise TopologyError(
                f"row must be a function tuple -> dict of column values, got {self.row!r}",
                fix="pass row=lambda t: {...} or leave it out for positional tuples",
                node=node,
            )

    @property
    def rejected_table(self) -> str:
        """``<name>_rejected``: the sink's tuples that did not become rows of this table."""
        return self.name + REJECTED_SUFFIX

    def to_row(self, t: Any, *, check: bool = True) -> dict[str, Any]:
        """The ``{column: value}`` row for sink tuple ``t``; raises :class:`RowError` when
        ``row`` fails, the shape does not fit the columns, or (``check``) a value cannot be
        stored in its column (its type, an integer's range, null in a key column or a
        merged one, an unhashable key)."""
        row = self._shaped(t)
        if check:
            self._check_row(row)
        return row

    def _check_row(self, row: Mapping[str, Any]) -> None:
        for column, rule in zip(self.column_names, self.column_rules, strict=True):
            problem = rule.problem(row[column])
            if problem is not None:
                raise RowError(f"table {self.name!r}: column {column!r} = "
                               f"{row[column]!r:.80} {problem}")
        try:
            hash(self.key_of(row))
        except TypeError:
            raise RowError(f"table {self.name!r}: the key {self.key_of(row)!r:.80} is not "
                           "hashable") from None

    def rows_fit(self, rows: Sequence[Sequence[Any]]) -> bool:
        """True when every row (values in column order) passes :meth:`to_row`'s checks,
        checked a column at a time; False: some row may not (check them one by one)."""
        for index, rule in enumerate(self.column_rules):
            if not rule.column_fits(list(map(itemgetter(index), rows))):
                return False
        return True

    def _shaped(self, t: Any) -> dict[str, Any]:
        if self.row is None:
            value = t
        else:
            try:
                value = self.row(t)
            # broad: the user's row function may raise anything; a RowError
            except Exception as exc:
                raise RowError(
                    f"table {self.name!r}: the row function failed: {type(exc).__name__}: {exc}"
                ) from exc
        if isinstance(value, Mapping):
            row = dict(value)
            if row.keys() != self.columns.keys():
                missing = [c for c in self.column_names if c not in row]
                extra = [c for c in row if c not in self.columns]
                raise RowError(
                    f"table {self.name!r}: row {row!r} does not match the columns "
                    f"({', '.join(self.column_names)}): missing {missing}, unexpected {extra}"
                )
            return row
        if isinstance(value, tuple | list):
            if len(value) != len(self.column_names):
                raise RowError(
                    f"table {self.name!r}: tuple {value!r} has {len(value)} values but the "
                    f"table has {len(self.column_names)} columns "
                    f"({', '.join(self.column_names)})"
                )
            return dict(zip(self.column_names, value, strict=True))
        raise RowError(
            f"table {self.name!r}: cannot make a row out of {value!r}; emit tuples or dicts, "
            "or give the Table a row= function"
        )

    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        """The key tuple of ``row`` (in ``key`` order)."""
        return tuple(row[c] for c in self.key)

    def are_plain_rows(self, values: Sequence[Any]) -> bool:
        """There is no ``row`` function and every one of ``values`` is a ``tuple`` of the
        table's width: each is its row's values in column order, as it is (unchecked)."""
        return (self.row is None and set(map(type, values)) <= {tuple}
                and set(map(len, values)) <= {len(self.column_names)})

    def keys_of_many(self, values: Sequence[Any]) -> list[tuple[Any, ...]] | None:
        """``key_of(to_row(v, check=False))`` of every one of ``values``, a batch at a time,
        when they :meth:`are_plain_rows`; None otherwise (take them one by one, which names
        what does not fit)."""
        if not self.are_plain_rows(values):
            return None
        columns = (map(itemgetter(p), values) for p in self.key_positions)
        return list(zip(*columns, strict=True))

    @property
    def latest_per_key(self) -> bool:
        return self.mode == "upsert"

    def describe(self) -> str:
        columns = ", ".join(f"{c} {t}" for c, t in self.columns.items())
        text = f"table {self.name}({columns}) {self.mode}"
        if self.key:
            text += f" on ({', '.join(self.key)})"
        if self.url:
            text += f" at {redact(self.url)}"
        return text

