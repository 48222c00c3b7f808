"""Export a bolt's snapshot into a database table: ``hailstorm export TOPOLOGY BOLT``.

A PySpark batch job: one Spark task per instance file of the chosen round reads that
snapshot (verifying its checksum) and yields a row per key; the driver writes every row
into the table in **one transaction**, together with a record of what was exported in
``hailstorm_exports(table_name, topology, bolt, epoch, clock, exported_at)``:

* the same round again: nothing changes, the result says ``already exported``;
* a newer round: the old content is deleted and the new one inserted in the same
  transaction, so readers see the old table or the new one, never a mix;
* an older round, or a table filled from another bolt: refused unless ``force``.

Which round: :mod:`.rounds`; the rows and columns of a state: :mod:`.rows`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hailstorm.export.errors import ExportError
from hailstorm.export.rounds import Round, choose_round
from hailstorm.export.rows import state_mapping
from hailstorm.lateness import forget_dropped
from hailstorm.monoids import EventTimed, KeyedMap, Monoid
from hailstorm.protocol.clock import Clock, clock_to_json
from hailstorm.sinks.db import Database, RetryPolicy, with_retries
from hailstorm.sinks.errors import SinkConfigError
from hailstorm.sinks.sql import EXPORTS_TABLE, TableShape
from hailstorm.sinks.urls import parse_url, redact
from hailstorm.sinks.writer import ensure_table
from hailstorm.snapshots import SnapshotStore, open_store
from hailstorm.topology import NAME_PATTERN, BoltSpec, Topology

log = logging.getLogger("hailstorm.export")

CHUNK_ROWS = 5000
"""Rows per insert batch."""


class ExportListener:
    """Progress callbacks of :func:`export_bolt` (the default ignores them)."""

    def phase(self, text: str) -> None:
        """A new step started."""

    def rows(self, done: int, total: int | None) -> None:
        """``done`` rows written so far (``total`` when known)."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_bolt` did."""

    status: Literal["exported", "already exported"]
    table: str
    topology: str
    bolt: str
    epoch: int
    clock: Clock
    rows: int
    source: str
    previous_epoch: int | None = None

    def describe(self, url: str) -> str:
        """One line for the command line."""
        what = f"{self.topology}/{self.bolt} round {self.epoch} ({self.source})"
        if self.status == "already exported":
            return f"already exported: table {self.table} at {redact(url)} holds {what}"
        replaced = "" if self.previous_epoch is None else f", replacing round {self.previous_epoch}"
        return f"exported {self.rows} rows of {what} into {self.table} at {redact(url)}{replaced}"


def _exports_shape(db: Database) -> TableShape:
    return TableShape(
        EXPORTS_TABLE,
        {"table_name": "text", "topology": "text", "bolt": "text", "epoch": "bigint",
         "clock": "json", "exported_at": db.dialect.timestamp_type()},
        primary_key=("table_name",),
    )  # fmt: skip


def _read_export(db: Database, table: str, lock: bool) -> tuple[str, str, int] | None:
    q, p = db.dialect.quote, db.dialect.param
    sql = (
        f"SELECT {q('topology')}, {q('bolt')}, {q('epoch')} FROM {q(EXPORTS_TABLE)} "
        f"WHERE {q('table_name')} = {p}"
    )
    if lock and db.kind == "postgresql":
        sql += " FOR UPDATE"
    found = db.execute(sql, (table,))
    return None if not found else (str(found[0][0]), str(found[0][1]), int(found[0][2]))


def _record_export_sql(db: Database) -> str:
    """Upsert the ``hailstorm_exports`` row (params: table, topology, bolt, epoch, clock)."""
    q, p = db.dialect.quote, db.dialect.param
    columns = ("table_name", "topology", "bolt", "epoch", "clock", "exported_at")
    updates = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in columns[1:])
    return (
        f"INSERT INTO {q(EXPORTS_TABLE)} ({', '.join(q(c) for c in columns)}) "
        f"VALUES ({p}, {p}, {p}, {p}, {p}, {db.dialect.now()}) "
        f"ON CONFLICT ({q('table_name')}) DO UPDATE SET {updates}"
    )


def _read_instance_task(
    root: str, module: str | None, bolt: str, monoid: Monoid[Any] | None, routes_late: bool
) -> Callable[[Iterator[str]], Iterator[Any]]:
    """The Spark task: snapshot keys in, rows (per_key) or states (whole) out (without the
    keys a bolt routing late data dropped, which a delta records as empty)."""

    def run(keys: Iterator[str]) -> Iterator[Any]:
        from hailstorm.snapshots import open_store
        from hailstorm.topology import BoltSpec, load_topology

        state_monoid = monoid
        if state_monoid is None:
            assert module is not None
            spec = load_topology(module).node(bolt)
            assert isinstance(spec, BoltSpec)
            state_monoid = spec.state
        mapping = state_mapping(state_monoid)
        store = open_store(root)
        for key in keys:
            _, state = store.load(key, state_monoid)
            if routes_late and isinstance(state_monoid, KeyedMap) \
                    and isinstance(state_monoid.inner, EventTimed):
                forget_dropped(state_monoid.inner, state)
            if mapping.layout == "whole":
                yield state
            else:
                yield from mapping.rows(state)

    return run


def _chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def export_bolt(
    *,
    topology: Topology,
    bolt: str,
    url: str,
    table: str,
    store: SnapshotStore,
    session: Any,
    epoch: int | None = None,
    zk: str | None = None,
    force: bool = False,
    listener: ExportListener | None = None,
    retry: RetryPolicy | None = None,
    chunk_rows: int = CHUNK_ROWS,
    before_commit: Callable[[], None] | None = None,
) -> ExportResult:
    """Export ``bolt``'s snapshot round into ``table`` at ``url`` (module docstring).

    ``session`` is a SparkContext (:func:`hailstorm.runtime.spark_stage.build_context`), a
    SparkSession, or a function returning either, called only when rows must be read (not
    for a round that is already exported).
    ``before_commit`` runs inside the write transaction just before it commits (tests use
    it to look at the table from another connection).
    """
    export = BoltExport(topology, bolt, url, table, force=force, chunk_rows=chunk_rows,
                        listener=listener or ExportListener(), before_commit=before_commit)
    return export.run(store, session, epoch=epoch, zk=zk, retry=retry or RetryPolicy())


class BoltExport:
    """One export of a bolt's round into a table: checked at construction, then
    :meth:`run` chooses the round, looks at the table (already exported? refused?) and
    writes the rows with the round's record in one transaction, each step retried."""

    def __init__(self, topology: Topology, bolt: str, url: str, table: str, *, force: bool,
                 chunk_rows: int, listener: ExportListener,
                 before_commit: Callable[[], None] | None) -> None:
        if not NAME_PATTERN.match(table):
            raise SinkConfigError(
                f"table name {table!r} must match {NAME_PATTERN.pattern} (it becomes an SQL "
                "name)")
        try:
            spec = topology.node(bolt)
        except KeyError as exc:
            raise ExportError(str(exc.args[0])) from None
        if not isinstance(spec, BoltSpec):
            raise ExportError(f"{bolt!r} is a {spec.kind}, not a bolt: only bolts keep state")
        parse_url(url)
        self.topology, self.bolt, self.url, self.table = topology, bolt, url, table
        self.monoid = spec.state
        self.routes_late = spec.drops_keys
        self.mapping = state_mapping(self.monoid)
        self.shape = self.mapping.shape(table)
        self.force = force
        self.chunk_rows = chunk_rows
        self.listener = listener
        self.before_commit = before_commit
        self.what = f"export of {topology.name}/{bolt} into {table}"

    def run(self, store: SnapshotStore, session: Any, *, epoch: int | None, zk: str | None,
            retry: RetryPolicy) -> ExportResult:
        name, bolt = self.topology.name, self.bolt
        self.listener.phase(f"choosing the round of {name}/{bolt}")
        chosen = choose_round(store, name, bolt, epoch=epoch, zk=zk, on_note=log.warning)
        for ref in chosen.refs:
            if ref.monoid != self.monoid.describe():
                raise ExportError(
                    f"{ref.uri} holds {ref.monoid} state but bolt {bolt!r} keeps "
                    f"{self.monoid.describe()}: is this the right topology module?"
                )
        done, _ = with_retries(lambda _attempt: self._look(chosen), what=self.what,
                               url=self.url, policy=retry)
        if done:
            return self._result(chosen, "already exported", 0)
        outcome: ExportResult = with_retries(
            lambda _attempt: self._write(chosen, store, session), what=self.what,
            url=self.url, policy=retry)
        return outcome

    def _result(self, chosen: Round, status: Literal["exported", "already exported"],
                rows: int, previous: int | None = None) -> ExportResult:
        return ExportResult(status, self.table, self.topology.name, self.bolt, chosen.epoch,
                            chosen.clock, rows, chosen.source, previous)

    def _prepare(self, db: Database, chosen: Round) -> tuple[bool, int | None]:
        """Lock the export, make its tables, and :meth:`_check` them."""
        db.advisory_lock(f"hailstorm:export:{self.table}")
        ensure_table(db, _exports_shape(db), writer="hailstorm export")
        ensure_table(db, self.shape,
                     writer=f"the export of {self.topology.name}/{self.bolt}")
        return self._check(db, chosen)

    def _check(self, db: Database, chosen: Round) -> tuple[bool, int | None]:
        """(already exported?, epoch now in the table); raises when it must be refused."""
        stored = _read_export(db, self.table, lock=True)
        if stored is None:
            return False, None
        s_topology, s_bolt, s_epoch = stored
        name, bolt, table = self.topology.name, self.bolt, self.table
        same_source = (s_topology, s_bolt) == (name, bolt)
        if same_source and s_epoch == chosen.epoch:
            return True, s_epoch
        if not self.force and not same_source:
            raise ExportError(
                f"table {table} at {redact(self.url)} holds an export of {s_topology}/"
                f"{s_bolt}, not {name}/{bolt}; pass --force to replace it, or pick another "
                "--table"
            )
        if not self.force and s_epoch > chosen.epoch:
            raise ExportError(
                f"table {table} at {redact(self.url)} holds round {s_epoch}, newer than round "
                f"{chosen.epoch}; pass --force to export the older round anyway"
            )
        return False, s_epoch

    def _look(self, chosen: Round) -> tuple[bool, int | None]:
        db = Database(self.url)
        try:
            with db.transaction():
                return self._prepare(db, chosen)
        finally:
            db.close()

    def _rows(self, chosen: Round, store: SnapshotStore, session: Any) -> Iterator[Any]:
        """The table's rows: one Spark task per instance file."""
        keys = [r.key for r in chosen.refs]
        module = self.topology.module_file or self.topology.source
        task = _read_instance_task(store.location, module, self.bolt,
                                   None if module else self.monoid, self.routes_late)
        spark = session() if callable(session) else session
        sc = getattr(spark, "sparkContext", spark)  # a SparkSession's, or the context
        sc.setJobDescription(f"hailstorm export {self.topology.name}/{self.bolt} round "
                             f"{chosen.epoch}")
        items = sc.parallelize(keys, len(keys)).mapPartitions(task).toLocalIterator(
            prefetchPartitions=True)
        if self.mapping.layout == "whole":
            yield from self.mapping.rows(self.monoid.combine_all(items))
        else:
            yield from items

    def _write(self, chosen: Round, store: SnapshotStore, session: Any) -> ExportResult:
        table, columns = self.table, self.mapping.column_names
        total = sum(r.records for r in chosen.refs) if self.mapping.layout == "per_key" else 1
        db = Database(self.url)
        try:
            with db.transaction():
                already, previous = self._prepare(db, chosen)
                if already:
                    return self._result(chosen, "already exported", 0)
                q = db.dialect.quote
                db.execute(f"DELETE FROM {q(table)}")
                self.listener.phase(f"reading {len(chosen.refs)} snapshot file(s) of round "
                                    f"{chosen.epoch} and writing {table}")
                written = 0
                self.listener.rows(0, total)
                insert = (f"INSERT INTO {q(table)} ({', '.join(q(c) for c in columns)}) "
                          f"VALUES ({db.dialect.placeholders(len(columns))})")
                for chunk in _chunks(self._rows(chosen, store, session), self.chunk_rows):
                    if db.kind == "postgresql":
                        db.copy_rows(table, columns, chunk)
                    else:
                        db.executemany(insert, chunk)
                    written += len(chunk)
                    self.listener.rows(written, total)
                db.execute(
                    _record_export_sql(db),
                    (table, self.topology.name, self.bolt, chosen.epoch,
                     json.dumps(clock_to_json(chosen.clock), separators=(",", ":"))),
                )  # fmt: skip
                if self.before_commit is not None:
                    self.before_commit()
                self.listener.phase("committing")
            return self._result(chosen, "exported", written, previous)
        finally:
            db.close()


def snapshot_store(root: str | Path) -> SnapshotStore:
    """The snapshot store at ``root`` (``HAILSTORM_SNAPSHOTS``: a directory or a URL)."""
    return open_store(root)


class RichExportListener(ExportListener):
    """Shows the export's progress with rich (on ``console``, stderr for the CLI)."""

    def __init__(self, console: Any) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task: Any = None

    def __enter__(self) -> RichExportListener:
        self.progress.start()
        self.task = self.progress.add_task("starting", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def phase(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def rows(self, done: int, total: int | None) -> None:
        self.progress.update(self.task, completed=done, total=total)
