"""Connections to sink databases (psycopg 3 for PostgreSQL, sqlite3 for SQLite), table
introspection, and retries with backoff that never log a password."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from hailstorm.outages import Outage, RetryPolicy
from hailstorm.sinks.errors import DatabaseUnavailableError, SinkError
from hailstorm.sinks.sql import Dialect, TableShape, dialect_for
from hailstorm.sinks.urls import DatabaseUrl, parse_url, redact, scrub
from hailstorm.topology import NAME_PATTERN

__all__ = ["Database", "Outage", "RetryPolicy", "create_postgres_database", "is_transient",
           "with_retries"]

log = logging.getLogger("hailstorm.sinks")

T = TypeVar("T")

_PG_REFUSED = ("authentication failed", "no pg_hba.conf entry", "does not exist",
               "permission denied")
"""A PostgreSQL server's refusals of a connection: waiting would not change them."""
_SQLITE_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o", "readonly", "read-only")


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: the database is unreachable, restarting, busy,
    read-only for now, or aborted the transaction (serialization failure, deadlock). Not:
    refused credentials, a database or role that does not exist."""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        return any(s in text for s in _SQLITE_TRANSIENT)
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if state == "25006":  # read_only_sql_transaction: a standby, or a failover underway
            return True
        if isinstance(exc, psycopg.InterfaceError):
            return True
        if isinstance(exc, psycopg.OperationalError):
            if state.startswith(("28", "3D", "54")):  # auth, no database, limits
                return False
            # Refused while connecting: libpq's message carries no SQLSTATE.
            return not any(s in str(exc).lower() for s in _PG_REFUSED)
    return False


def is_refused_row(exc: BaseException) -> bool:
    """True when the database refused a row for its content: a constraint (CHECK, NOT NULL,
    UNIQUE, foreign key) or a value its column cannot hold. The transaction is aborted; a
    savepoint before the row recovers it (:meth:`Database.savepoint`)."""
    return isinstance(exc, psycopg.errors.IntegrityError | psycopg.errors.DataError
                      | sqlite3.IntegrityError | sqlite3.DataError)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def with_retries(
    op: Callable[[int], T],
    *,
    what: str,
    url: str,
    policy: RetryPolicy,
    reset: Callable[[], None] = lambda: None,
    logger: logging.Logger = log,
    on_outage: Callable[[Outage | None], None] = lambda _outage: None,
) -> T:
    """``op(attempt)``, retried with exponential backoff while it fails transiently.

    Every failed attempt is logged (URL redacted, password scrubbed from the driver's
    message), ``on_outage`` is told (an :class:`Outage`; None once an attempt succeeds
    after failures) and ``reset()`` is called (drop the connection) before the next one.
    After ``policy.attempts`` failures raises :class:`DatabaseUnavailableError` naming the
    database and since when it is unavailable; with ``attempts=None`` it never gives up.
    Other errors propagate at once.
    """
    attempt = 0
    since: float | None = None
    while True:
        attempt += 1
        try:
            result = op(attempt)
        except Exception as exc:  # broad: op is any call; is_transient decides, the rest re-raised
            if not is_transient(exc):
                raise
            since = time.time() if since is None else since
            outage = Outage(f"the database at {redact(url)}", since, attempt,
                            scrub(_reason(exc), url))
            with contextlib.suppress(Exception):
                reset()
            of = f"of {policy.attempts}" if policy.attempts is not None else "waiting it out"
            if policy.gives_up(attempt):
                logger.error("%s: %s failed (attempt %d %s): %s; giving up", what, redact(url),
                             attempt, of, outage.error)
                raise DatabaseUnavailableError(
                    f"{what}: {outage.describe()} ({attempt} attempts): {outage.error}"
                ) from None
            on_outage(outage)
            delay = policy.delay(attempt)
            logger.warning("%s: %s failed (attempt %d %s): %s; retrying in %.2f s", what,
                           redact(url), attempt, of, outage.error, delay)
            time.sleep(delay)
            continue
        if since is not None:
            logger.warning("%s: %s answers again after %.0f s", what, redact(url),
                           time.time() - since)
            on_outage(None)
        return result


class Database:
    """One connection to a sink database.

    Statements use the dialect's placeholders. :meth:`transaction` is the only way to run
    them: PostgreSQL runs in a transaction per block (``READ COMMITTED``), SQLite starts
    each block with ``BEGIN IMMEDIATE`` (the write lock, so writers queue up front).
    """

    def __init__(self, url: str | DatabaseUrl, *, connect_timeout: float = 5.0) -> None:
        self.url = url if isinstance(url, DatabaseUrl) else parse_url(url)
        self.dialect: Dialect = dialect_for(self.url.kind)
        self._pg: psycopg.Connection[Any] | None = None
        self._sqlite: sqlite3.Connection | None = None
        self._in_transaction = False
        self._at_commit: list[tuple[str, list[Sequence[Any]]]] = []
        """Statements :meth:`at_commit` queued for the end of the open transaction."""
        try:
            if self.url.kind == "postgresql":
                self._pg = psycopg.connect(
                    self.url.target,
                    autocommit=False,
                    connect_timeout=max(1, round(connect_timeout)),
                    application_name="hailstorm",
                )
            else:
                if self.url.target != ":memory:":
                    # sqlite:///path creates the file; create its directory too (if that
                    # fails, connect() reports it and the caller's retries apply).
                    with contextlib.suppress(OSError):
                        Path(self.url.target).parent.mkdir(parents=True, exist_ok=True)
                self._sqlite = sqlite3.connect(
                    self.url.target,
                    timeout=max(connect_timeout, 1.0),
                    isolation_level=None,
                    check_same_thread=False,
                )
                if self.url.target != ":memory:":
                    # Readers never wait for (nor see half of) a writer's transaction.
                    self._sqlite.execute("PRAGMA journal_mode=WAL")
        # broad: psycopg/sqlite3 connect errors vary; all become a SinkError
        except Exception as exc:
            if is_transient(exc):
                raise
            raise SinkError(
                f"cannot connect to {redact(self.url.url)}: {scrub(_reason(exc), self.url.url)}"
            ) from None

    def __repr__(self) -> str:
        return f"Database({redact(self.url.url)!r})"

    @property
    def kind(self) -> str:
        return self.url.kind

    def close(self) -> None:
        """Close the connection (an open transaction is rolled back)."""
        with contextlib.suppress(Exception):
            if self._pg is not None:
                self._pg.close()
        with contextlib.suppress(Exception):
            if self._sqlite is not None:
                self._sqlite.close()
        self._pg = self._sqlite = None

    # -- statements ---------------------------------------------------------------------

    def _cursor(self) -> Any:
        if self._pg is not None:
            return self._pg.cursor()
        if self._sqlite is not None:
            return self._sqlite.cursor()
        raise psycopg.InterfaceError("the connection is closed")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (empty when it returns none)."""
        cursor = self._cursor()
        try:
            cursor.execute(sql, tuple(params))
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows (pipelined by psycopg)."""
        cursor = self._cursor()
        try:
            cursor.executemany(sql, rows)
        finally:
            cursor.close()

    def execute_all(self, statements: Sequence[tuple[str, Sequence[Any]]]
                    ) -> list[list[tuple[Any, ...]]]:
        """Run ``(sql, params)`` statements in order; each one's rows. PostgreSQL gets them
        all at once (pipeline mode): one round trip to the server, not one each."""
        if self._pg is None:
            return [self.execute(sql, params) for sql, params in statements]
        cursors: list[Any] = []
        try:
            with self._pg.pipeline():
                for sql, params in statements:
                    cursors.append(self._pg.cursor())
                    cursors[-1].execute(sql, tuple(params))
            return [list(c.fetchall()) if c.description else [] for c in cursors]
        finally:
            for cursor in cursors:
                cursor.close()

    def at_commit(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Inside :meth:`transaction`: run ``sql`` for each parameter row just before the
        transaction commits, in the order queued. PostgreSQL gets them with the ``COMMIT``
        (pipeline mode): a statement whose result nothing reads costs no round trip of its
        own. Its errors are raised when the block ends (and roll the transaction back)."""
        if not self._in_transaction:
            raise SinkError("at_commit needs a transaction")
        self._at_commit.append((sql, list(rows)))

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """``COPY table (columns) FROM STDIN`` (PostgreSQL only)."""
        if self._pg is None:
            raise SinkError("COPY is only available on PostgreSQL")
        q = self.dialect.quote
        sql = f"COPY {q(table)} ({', '.join(q(c) for c in columns)}) FROM STDIN"
        with self._pg.cursor() as cursor, cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """A block that commits when it ends and rolls back when it raises."""
        if self._in_transaction:
            raise SinkError("transactions do not nest")
        self._in_transaction = True
        self._at_commit = []
        try:
            if self._sqlite is not None:
                self._sqlite.execute("BEGIN IMMEDIATE")
            elif self._pg is None:
                raise psycopg.InterfaceError("the connection is closed")
            try:
                yield self
                self._commit()
            except BaseException:  # broad: also on Ctrl-C; rolled back, re-raised
                self._rollback()
                raise
        finally:
            self._in_transaction = False
            self._at_commit = []

    def _commit(self) -> None:
        """Run the statements queued by :meth:`at_commit`, then commit (PostgreSQL: all in
        one pipeline, a single round trip)."""
        queued = self._at_commit
        if self._pg is not None:
            if not queued:
                self._pg.commit()
                return
            # COMMIT as one more statement: the pipeline's end is its only sync (the
            # connection's commit() would sync once more). The first error is raised there.
            with self._pg.pipeline(), self._pg.cursor() as cursor:
                for sql, rows in queued:
                    cursor.executemany(sql, rows)
                cursor.execute("COMMIT")
        elif self._sqlite is not None:
            for sql, rows in queued:
                self.executemany(sql, rows)
            self._sqlite.execute("COMMIT")

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside :meth:`transaction`: a block whose failure rolls back only the block's
        statements (and leaves the transaction usable)."""
        if not self._in_transaction:
            raise SinkError("a savepoint needs a transaction")
        self.execute("SAVEPOINT hailstorm_block")
        try:
            yield
        except BaseException:  # broad: also on Ctrl-C; rolled back, re-raised
            self.execute("ROLLBACK TO SAVEPOINT hailstorm_block")
            raise
        self.execute("RELEASE SAVEPOINT hailstorm_block")

    def _rollback(self) -> None:
        with contextlib.suppress(Exception):
            if self._pg is not None:
                self._pg.rollback()
            elif self._sqlite is not None and self._sqlite.in_transaction:
                self._sqlite.execute("ROLLBACK")

    def advisory_lock(self, name: str) -> None:
        """Serialize DDL and exports on ``name`` until the transaction ends (PostgreSQL;
        SQLite's ``BEGIN IMMEDIATE`` already serializes every writer)."""
        if self._pg is not None:
            self.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))

    # -- introspection ------------------------------------------------------------------

    def table_shape(self, name: str) -> TableShape | None:
        """The shape of table ``name`` (None when it does not exist)."""
        if self._pg is not None:
            return self._pg_shape(name)
        return self._sqlite_shape(name)

    def _pg_shape(self, name: str) -> TableShape | None:
        quoted = self.dialect.quote(name)
        [(exists,)] = self.execute("SELECT to_regclass(%s) IS NOT NULL", (quoted,))
        if not exists:
            return None
        columns = self.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (quoted,),
        )
        indexes = self.execute(
            "SELECT i.indisprimary, ARRAY(SELECT a.attname FROM unnest(i.indkey::int2[]) "
            "WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = k.attnum ORDER BY k.n) FROM pg_index i "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL",
            (quoted,),
        )
        primary: tuple[str, ...] = ()
        unique: list[tuple[str, ...]] = []
        for is_primary, cols in indexes:
            if is_primary:
                primary = tuple(cols)
            else:
                unique.append(tuple(cols))
        return TableShape(name, dict(columns), primary, tuple(unique))

    def _sqlite_shape(self, name: str) -> TableShape | None:
        q = self.dialect.quote
        info = self.execute(f"PRAGMA table_info({q(name)})")
        if not info:
            return None
        columns = {str(row[1]): str(row[2]) for row in info}
        primary = tuple(str(row[1]) for row in sorted(info, key=lambda r: r[5]) if row[5] > 0)
        unique: list[tuple[str, ...]] = []
        for _, index, is_unique, origin, partial in self.execute(f"PRAGMA index_list({q(name)})"):
            if is_unique and not partial and origin != "pk":
                cols = self.execute(f"PRAGMA index_info({q(index)})")
                unique.append(tuple(str(c[2]) for c in sorted(cols, key=lambda c: c[0])))
        return TableShape(name, columns, primary, tuple(unique))


def create_postgres_database(server_url: str, name: str) -> str:
    """Create the database ``name`` on the PostgreSQL server of ``server_url`` (any
    database on it) and return ``server_url`` pointing at the new one (options kept).

    ``name`` must be a lower-case identifier of at most 63 characters (PostgreSQL's limit).
    """
    if not NAME_PATTERN.match(name):  # the name rule of topologies, nodes and tables
        raise SinkError(f"database name {name!r}: use at most 63 lower-case letters, digits "
                        "and underscores, not starting with a digit")
    parsed = parse_url(server_url)
    if parsed.kind != "postgresql":
        raise SinkError(f"{redact(server_url)} is not a PostgreSQL URL")
    try:
        with psycopg.connect(parsed.target, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise SinkError(f"cannot create database {name} at {redact(server_url)}: "
                        f"{scrub(_reason(exc), server_url)}") from None
    parts = urlsplit(parsed.target)
    return urlunsplit(parts._replace(path="/" + quote(name)))
