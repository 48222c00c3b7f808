"""The SQL a sink sends, per dialect (PostgreSQL, SQLite), and table-shape checks. Pure.

Everything here builds strings or compares descriptions; nothing talks to a database, so
the unit tests check it directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hailstorm.topology import Table
from hailstorm.topology.tables import WIDTH as _WIDTH
from hailstorm.topology.tables import normalize_type, type_family

__all__ = [
    "EXPORTS_TABLE",
    "HIDDEN_COLUMNS",
    "PROGRESS_TABLE",
    "SENTINEL_PARTITION",
    "SENTINEL_TOPIC",
    "SINK_TABLE_FIX",
    "Dialect",
    "PostgresDialect",
    "SqliteDialect",
    "TableShape",
    "dialect_for",
    "mismatch_message",
    "progress_shape",
    "shape_differences",
    "shape_of",
    "sqlite_affinity",
    "type_family",
    "write_columns",
    "write_statement",
]

PROGRESS_TABLE = "hailstorm_progress"
EXPORTS_TABLE = "hailstorm_exports"

HIDDEN_COLUMNS: tuple[str, ...] = ("_hs_topic", "_hs_partition", "_hs_offset", "_hs_seq")
"""The de-duplication key of an append table: the row's origin and its number among the
rows of that origin."""
HIDDEN_TYPES: dict[str, str] = {
    "_hs_topic": "text",
    "_hs_partition": "integer",
    "_hs_offset": "bigint",
    "_hs_seq": "integer",
}

SENTINEL_TOPIC = ""
SENTINEL_PARTITION = -1
"""The progress row ``(sink, '', -1)`` exists for every sink: every transaction locks it first
(so writers of one sink are serialized even before any partition has a row) and its ``epoch``
is the newest epoch that claimed the sink."""


# --------------------------------------------------------------------------- types


def sqlite_affinity(declared: str) -> str:
    """SQLite's column affinity for a declared type (the rules of its section 3.1)."""
    t = declared.upper()
    if "INT" in t:
        return "INTEGER"
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in t or not t.strip():
        return "BLOB"
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class TableShape:
    """What a table looks like: columns (name -> SQL type, in order), primary key and the
    other unique column sets; ``fillfactor``, how full PostgreSQL packs its pages (None:
    the database's default, full), is a storage choice made at creation, never checked."""

    name: str
    columns: Mapping[str, str]
    primary_key: tuple[str, ...] = ()
    unique: tuple[tuple[str, ...], ...] = field(default=())
    fillfactor: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", dict(self.columns))
        if self.fillfactor is not None and not 10 <= self.fillfactor <= 100:
            raise ValueError(f"fillfactor must be within 10..100, not {self.fillfactor}")


REWRITTEN_FILLFACTOR = 50
"""PostgreSQL fillfactor of upsert and merge tables. Their rows are rewritten in place,
again and again: with half of each page left free, an update puts the new row version on
the same page and skips the primary-key index (a HOT update). Upserting 30k-row batches
into 600k rows of ``text`` keys took 44% less server CPU than at the default 100, in a
table no bigger, because the default's dead row versions bloat it as much."""


def shape_of(table: Table) -> TableShape:
    """The shape a sink's :class:`~hailstorm.topology.Table` needs.

    upsert/merge: the key is the primary key, and pages are left half free for updates
    (:data:`REWRITTEN_FILLFACTOR`). append: the hidden de-duplication columns
    ``_hs_topic, _hs_partition, _hs_offset, _hs_seq`` are added, unique together.
    """
    if table.mode == "append":
        return TableShape(
            table.name,
            {**table.columns, **HIDDEN_TYPES},
            primary_key=(),
            unique=(HIDDEN_COLUMNS,),
        )
    return TableShape(table.name, dict(table.columns), primary_key=tuple(table.key),
                      fillfactor=REWRITTEN_FILLFACTOR)


def progress_shape(dialect: Dialect) -> TableShape:
    """The shape of :data:`PROGRESS_TABLE` (see docs/sinks.md, "The progress table")."""
    return TableShape(
        PROGRESS_TABLE,
        {"sink": "text", "topic": "text", "partition": "integer", "offset": "bigint",
         "epoch": "bigint", "updated_at": dialect.timestamp_type()},
        primary_key=("sink", "topic", "partition"),
    )  # fmt: skip


REJECTED_COLUMNS = ("sink", "topic", "partition", "offset", "stage", "error", "record")


def rejected_shape(table: Table, timestamp_type: str) -> TableShape:
    """The shape of ``<table>_rejected``: where each rejected tuple came from, the stage
    (``row``: the row function or the tuple's shape; ``database``: the database refused
    the row), the error and the tuple (its ``repr``)."""
    return TableShape(
        table.rejected_table,
        {"sink": "text", "topic": "text", "partition": "integer", "offset": "bigint",
         "stage": "text", "error": "text", "record": "text", "rejected_at": timestamp_type},
    )  # fmt: skip


def insert_rejected(dialect: Dialect, table: Table) -> str:
    """Insert one rejected tuple (params: :data:`REJECTED_COLUMNS`)."""
    q = dialect.quote
    names = ", ".join(q(c) for c in (*REJECTED_COLUMNS, "rejected_at"))
    return (f"INSERT INTO {q(table.rejected_table)} ({names}) "
            f"VALUES ({dialect.placeholders(len(REJECTED_COLUMNS))}, {dialect.now()})")


def _column_list(columns: Sequence[str]) -> str:
    return "(" + ", ".join(columns) + ")"


# --------------------------------------------------------------------------- dialects


class Dialect:
    """SQL differences between the supported databases."""

    name: Literal["postgresql", "sqlite"]
    param: str
    """The driver's placeholder (``%s`` for psycopg, ``?`` for sqlite3)."""

    def quote(self, identifier: str) -> str:
        """A quoted identifier (names are validated elsewhere; quoting also keeps case and
        protects keywords such as ``offset``)."""
        return '"' + identifier.replace('"', '""') + '"'

    def declared_type(self, sql_type: str) -> str:
        """The type to write in ``CREATE TABLE`` for a Table column type."""
        return sql_type

    def compatible(self, expected: str, actual: str) -> bool:
        """True when a column of type ``actual`` can hold values of type ``expected``."""
        raise NotImplementedError

    def now(self) -> str:
        """An SQL expression for the current time."""
        raise NotImplementedError

    def timestamp_type(self) -> str:
        raise NotImplementedError

    def placeholders(self, n: int) -> str:
        return ", ".join([self.param] * n)

    # -- DDL ----------------------------------------------------------------------------

    def create_table(self, shape: TableShape) -> str:
        """``CREATE TABLE IF NOT EXISTS`` for ``shape`` (key columns NOT NULL)."""
        q = self.quote
        not_null = set(shape.primary_key) | {c for u in shape.unique for c in u}
        parts = [
            f"{q(c)} {self.declared_type(t)}" + (" NOT NULL" if c in not_null else "")
            for c, t in shape.columns.items()
        ]
        if shape.primary_key:
            parts.append("PRIMARY KEY " + _column_list([q(c) for c in shape.primary_key]))
        for i, columns in enumerate(shape.unique):
            suffix = "_hs_origin" if columns == HIDDEN_COLUMNS else f"_unique_{i}"
            constraint = q(shape.name[: 63 - len(suffix)] + suffix)
            parts.append(f"CONSTRAINT {constraint} UNIQUE " + _column_list([q(c) for c in columns]))
        return (f"CREATE TABLE IF NOT EXISTS {q(shape.name)} ({', '.join(parts)})"
                + self.storage(shape))

    def storage(self, shape: TableShape) -> str:
        """Storage parameters to end ``CREATE TABLE`` with (none where unsupported)."""
        return ""

    def create_progress_table(self) -> str:
        q = self.quote
        return (
            f"CREATE TABLE IF NOT EXISTS {q(PROGRESS_TABLE)} ("
            f"{q('sink')} text NOT NULL, {q('topic')} text NOT NULL, "
            f"{q('partition')} integer NOT NULL, {q('offset')} bigint NOT NULL, "
            f"{q('epoch')} bigint NOT NULL, {q('updated_at')} {self.timestamp_type()}, "
            f"PRIMARY KEY ({q('sink')}, {q('topic')}, {q('partition')}))"
        )

    # -- progress -----------------------------------------------------------------------

    def insert_sentinel(self) -> str:
        """Create the sink's sentinel progress row if missing (params: sink)."""
        q, p = self.quote, self.param
        return (
            f"INSERT INTO {q(PROGRESS_TABLE)} ({q('sink')}, {q('topic')}, {q('partition')}, "
            f"{q('offset')}, {q('epoch')}, {q('updated_at')}) "
            f"VALUES ({p}, '{SENTINEL_TOPIC}', {SENTINEL_PARTITION}, -1, 0, {self.now()}) "
            f"ON CONFLICT ({q('sink')}, {q('topic')}, {q('partition')}) DO NOTHING"
        )

    def lock_sentinel(self) -> str:
        """Lock the sink's sentinel row and read its epoch (params: sink)."""
        q, p = self.quote, self.param
        return (
            f"SELECT {q('epoch')} FROM {q(PROGRESS_TABLE)} WHERE {q('sink')} = {p} "
            f"AND {q('topic')} = '{SENTINEL_TOPIC}' AND {q('partition')} = {SENTINEL_PARTITION}"
            + self._for_update()
        )

    def _for_update(self) -> str:
        return ""

    def read_progress(self) -> str:
        """Every progress row of a sink, the sentinel included (params: sink)."""
        q, p = self.quote, self.param
        return (
            f"SELECT {q('topic')}, {q('partition')}, {q('offset')}, {q('epoch')} "
            f"FROM {q(PROGRESS_TABLE)} WHERE {q('sink')} = {p}"
        )

    def write_progress(self) -> str:
        """Insert or move one progress row (params: sink, topic, partition, offset, epoch)."""
        q = self.quote
        cols = [q(c) for c in ("sink", "topic", "partition", "offset", "epoch", "updated_at")]
        return (
            f"INSERT INTO {q(PROGRESS_TABLE)} ({', '.join(cols)}) "
            f"VALUES ({self.placeholders(5)}, {self.now()}) "
            f"ON CONFLICT ({q('sink')}, {q('topic')}, {q('partition')}) DO UPDATE SET "
            f"{q('offset')} = excluded.{q('offset')}, {q('epoch')} = excluded.{q('epoch')}, "
            f"{q('updated_at')} = excluded.{q('updated_at')}"
        )

    def claim_sentinel(self) -> str:
        """Record the epoch owning the sink (params: epoch, sink)."""
        q, p = self.quote, self.param
        return (
            f"UPDATE {q(PROGRESS_TABLE)} SET {q('epoch')} = {p}, {q('updated_at')} = "
            f"{self.now()} WHERE {q('sink')} = {p} AND {q('topic')} = '{SENTINEL_TOPIC}' "
            f"AND {q('partition')} = {SENTINEL_PARTITION}"
        )


class PostgresDialect(Dialect):
    name = "postgresql"
    param = "%s"

    def compatible(self, expected: str, actual: str) -> bool:
        want, have = type_family(expected), type_family(actual)
        if want != have:
            return False
        w, h = _WIDTH.get(normalize_type(expected)), _WIDTH.get(normalize_type(actual))
        return w is None or h is None or h >= w

    def now(self) -> str:
        return "now()"

    def timestamp_type(self) -> str:
        return "timestamptz"

    def _for_update(self) -> str:
        return " FOR UPDATE"

    def storage(self, shape: TableShape) -> str:
        return "" if shape.fillfactor is None else f" WITH (fillfactor = {shape.fillfactor})"


class SqliteDialect(Dialect):
    name = "sqlite"
    param = "?"

    def declared_type(self, sql_type: str) -> str:
        family = type_family(sql_type)
        if family == "json":
            return "text"  # a JSON type name would get NUMERIC affinity and mangle '12'
        if family == "binary":
            return "blob"
        return sql_type

    def compatible(self, expected: str, actual: str) -> bool:
        return sqlite_affinity(self.declared_type(expected)) == sqlite_affinity(actual)

    def now(self) -> str:
        return "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

    def timestamp_type(self) -> str:
        return "text"


_DIALECTS: dict[str, Dialect] = {"postgresql": PostgresDialect(), "sqlite": SqliteDialect()}


def dialect_for(kind: str) -> Dialect:
    """The dialect of a :class:`~hailstorm.sinks.urls.DatabaseUrl` kind."""
    return _DIALECTS[kind]


# --------------------------------------------------------------------------- writes


def write_columns(table: Table) -> tuple[str, ...]:
    """The columns a sink writes, in parameter order (append adds the hidden ones)."""
    if table.mode == "append":
        return table.column_names + HIDDEN_COLUMNS
    return table.column_names


def write_statement(dialect: Dialect, table: Table, source: str | None = None) -> str:
    """The batched write of ``table``'s mode.

    ``source`` is a staging table to ``INSERT ... SELECT`` from, in the order of the
    conflict key (PostgreSQL then walks the key's index in order: a sixth less work per
    row than in arrival order); by default one row of placeholders (for ``executemany``).

    * upsert: ``ON CONFLICT (key) DO UPDATE SET col = excluded.col``
    * merge: ``ON CONFLICT (key) DO UPDATE SET col = <table>.col + excluded.col``
    * append: ``ON CONFLICT (_hs_topic, _hs_partition, _hs_offset, _hs_seq) DO NOTHING``
    """
    q = dialect.quote
    columns = write_columns(table)
    names = ", ".join(q(c) for c in columns)
    head = f"INSERT INTO {q(table.name)} ({names}) "
    conflict = HIDDEN_COLUMNS if table.mode == "append" else table.key
    key = ", ".join(q(c) for c in conflict)
    if source is None:
        head += f"VALUES ({dialect.placeholders(len(columns))})"
    else:
        head += f"SELECT {names} FROM {q(source)}"
        if dialect.name == "sqlite":
            head += " WHERE true"  # SQLite's parser needs it before ON CONFLICT
        head += f" ORDER BY {key}"
    if table.mode == "append":
        return f"{head} ON CONFLICT ({key}) DO NOTHING"
    if not table.value_columns:
        return f"{head} ON CONFLICT ({key}) DO NOTHING"
    if table.mode == "merge":
        sets = [f"{q(c)} = {q(table.name)}.{q(c)} + excluded.{q(c)}" for c in table.value_columns]
    else:
        sets = [f"{q(c)} = excluded.{q(c)}" for c in table.value_columns]
    return f"{head} ON CONFLICT ({key}) DO UPDATE SET {', '.join(sets)}"


# --------------------------------------------------------------------------- shape checks


def _key_text(columns: Sequence[str]) -> str:
    return "(" + ", ".join(columns) + ")" if columns else "none"


def shape_differences(dialect: Dialect, expected: TableShape, actual: TableShape) -> list[str]:
    """Each way ``actual`` (an existing table) differs from ``expected``, as a sentence.

    Column order does not matter; types must be compatible (:meth:`Dialect.compatible`);
    the primary key must be the same set of columns; every expected unique set must exist
    (the primary key counts).
    """
    problems: list[str] = []
    for column, sql_type in expected.columns.items():
        if column not in actual.columns:
            problems.append(f"column {column!r} ({sql_type}) is missing")
        elif not dialect.compatible(sql_type, actual.columns[column]):
            problems.append(
                f"column {column!r} is {actual.columns[column]} in the database but the sink "
                f"writes {sql_type}"
            )
    for column, sql_type in actual.columns.items():
        if column not in expected.columns:
            problems.append(f"column {column!r} ({sql_type}) is not one the sink writes")
    if set(actual.primary_key) != set(expected.primary_key):
        problems.append(
            f"the primary key is {_key_text(actual.primary_key)} but should be "
            f"{_key_text(expected.primary_key)}"
        )
    present = {frozenset(u) for u in actual.unique}
    if actual.primary_key:
        present.add(frozenset(actual.primary_key))
    for columns in expected.unique:
        if frozenset(columns) not in present:
            problems.append(f"there is no unique constraint on {_key_text(columns)}")
    return problems


SINK_TABLE_FIX = (
    "deploy the changed Table with 'hailstorm run ... --rebuild SINK', which replaces the "
    "table with one rebuilt from the committed state ('hailstorm plan' shows what it does; "
    "docs/upgrading.md), or change the Table definition to match the existing table "
    "(renaming the old table away would leave the new one without every row not written "
    "since, as the sink's progress is kept)"
)
"""The fix of a sink's table that differs from its definition."""


def mismatch_message(
    expected: TableShape, where: str, problems: Sequence[str], *, writer: str = "the sink",
    fix: str | None = None,
) -> str:
    """The error text of a shape mismatch: which table, what differs, how to fix it
    (``fix``; by default: rename or drop the table so that it is created afresh)."""
    q = '"'
    wanted = ", ".join(f"{c} {t}" for c, t in expected.columns.items())
    key = (
        f" primary key {_key_text(expected.primary_key)}"
        if expected.primary_key
        else (f" unique {_key_text(expected.unique[0])}" if expected.unique else "")
    )
    fix = fix or (
        f"rename or drop it (ALTER TABLE {q}{expected.name}{q} RENAME TO "
        f"{q}{expected.name}_old{q}) so that it is created afresh, or change the Table "
        "definition to match the existing table"
    )
    return (
        f"table {expected.name!r} in {where} does not match what {writer} writes: "
        + "; ".join(problems)
        + f". Expected columns ({wanted}){key}. Fix: hailstorm never alters an existing "
        f"table; {fix}"
    )
