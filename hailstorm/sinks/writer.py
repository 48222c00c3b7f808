"""The exactly-once table writer of one sink instance.

:class:`SinkWriter` is what the runtime shell drives (and what tests drive directly)::

    writer = SinkWriter.open(url, table, "sink:word_counts:0", epoch)   # reads progress
    writer.add(rows)                        # [(((topic, n), offset), tuple), ...]
    progress = writer.commit_through(lwm)   # one transaction: rows <= lwm + progress

``commit_through`` is :meth:`~BufferedWriter.prepare`, :meth:`~SinkWriter.write` and
:meth:`~BufferedWriter.finish` in turn; the sink's shell runs the write on a thread of its
own (PostgreSQL) and reads on meanwhile.

A commit applies the buffered rows at or below the low water mark, records the tuples
that did not become rows (their ``row`` failed, or the database refused them: a
constraint, a value out of range) in ``<table>_rejected``, and moves the sink's rows of
``hailstorm_progress``, all in the **same transaction**, after a compare-and-set on
them: the transaction first locks the sink's sentinel progress row, then fails (rollback,
:class:`~hailstorm.sinks.errors.FencedError`) when a newer epoch owns the sink or when
the stored progress is not what this writer last read or wrote. Progress never moves
backwards. See ``docs/sinks.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hailstorm.failpoints import pause_point
from hailstorm.halt import TopologyHalt
from hailstorm.protocol.clock import NOTHING, Clock, clock_to_json, same_clock
from hailstorm.sinks.buffer import BufferedWriter, PreparedCommit, RowBuffer, Selection
from hailstorm.sinks.db import Database, Outage, RetryPolicy, is_refused_row, with_retries
from hailstorm.sinks.errors import FencedError, SchemaMismatchError, SinkConfigError
from hailstorm.sinks.sql import (
    SENTINEL_PARTITION,
    SENTINEL_TOPIC,
    SINK_TABLE_FIX,
    TableShape,
    insert_rejected,
    mismatch_message,
    progress_shape,
    rejected_shape,
    shape_differences,
    shape_of,
    write_columns,
    write_statement,
)
from hailstorm.sinks.urls import parse_url, redact
from hailstorm.topology import Table
from hailstorm.vocabulary import RejectedRow, halt_reason_of, record_text

__all__ = ["SinkWriter", "ensure_table"]

log = logging.getLogger("hailstorm.sinks")

COPY_THRESHOLD = 100
"""Rows per commit from which PostgreSQL writes go through COPY into a staging table and
one ``INSERT ... SELECT`` (below it: one ``INSERT`` per row). Upsert commits of new keys on
a 2-core VM: 50 rows cost the same either way, 200 rows 8.7 ms by rows and 5.9 by COPY,
500 rows 16.7 and 10.9 (``bench/sink_commits.py``)."""


def ensure_table(db: Database, shape: TableShape, *, writer: str = "the sink",
                 fix: str | None = None) -> bool:
    """Create the table of ``shape`` if missing, else check it has that shape.

    Call inside a transaction. Returns True when the table was created; raises
    :class:`SchemaMismatchError` (naming the table, the differences and the fix: ``fix``,
    else :func:`~hailstorm.sinks.sql.mismatch_message`'s) when an existing table differs.
    Never alters a table.
    """
    existing = db.table_shape(shape.name)
    if existing is None:
        db.execute(db.dialect.create_table(shape))
        return True
    problems = shape_differences(db.dialect, shape, existing)
    if problems:
        message = mismatch_message(shape, redact(db.url.url), problems, writer=writer, fix=fix)
        raise SchemaMismatchError(message, shape.name, problems)
    return False


class SinkWriter(BufferedWriter):
    """Applies one sink instance's rows to its table exactly once.

    Not thread-safe: one thread drives a writer, but for :meth:`write`, which may run on
    another while that one adds rows (:attr:`background`). Two writers of the same ``sink_id`` (a
    zombie and its replacement, or duplicates) may run concurrently on separate
    connections; the progress compare-and-set keeps the table as if only one had run.
    """

    def __init__(
        self,
        url: str,
        table: Table,
        sink_id: str,
        epoch: int,
        *,
        retry: RetryPolicy | None = None,
        copy_threshold: int = COPY_THRESHOLD,
        connect_timeout: float = 5.0,
        logger: logging.Logger | None = None,
        on_reject: Callable[[RejectedRow], None] | None = None,
        halt_as: str | None = None,
        on_outage: Callable[[Outage | None], None] | None = None,
    ) -> None:
        if not isinstance(table, Table):
            raise SinkConfigError(f"a SinkWriter writes a Table, not {table!r}")
        if epoch < 0:
            raise SinkConfigError(f"epoch must be >= 0, not {epoch}")
        self.url = url
        self.parsed = parse_url(url)
        self.table = table
        self.sink_id = sink_id
        self.epoch = epoch
        self.retry = retry or RetryPolicy()
        self.copy_threshold = copy_threshold
        self.connect_timeout = connect_timeout
        self.log = logger or log
        self.shape = shape_of(table)
        self._buffer = RowBuffer(table)
        self._view: Clock = {}
        self._db: Database | None = None
        self._stage_on: Database | None = None
        """The connection whose session holds the staging table of COPY (created by a
        committed transaction)."""
        self._opened = False
        self.commits = 0
        """Transactions committed by this writer."""
        self.rows_written = 0
        """Rows sent to the database (after pre-aggregation)."""
        self.rows_rejected = 0
        """Tuples written to ``<table>_rejected`` (in committed transactions or not)."""
        self.on_reject = on_reject
        """Called with each rejected tuple once the transaction that records it committed."""
        self.halt_as = halt_as
        """Set (to the sink's name) for ``on_error="fail"``: a tuple to reject raises
        :class:`~hailstorm.halt.TopologyHalt` naming it, and the commit is rolled back."""
        self._rejected_table_ready = False
        self.on_outage = on_outage or (lambda _outage: None)
        """Told of every failed attempt while the database is unavailable (an
        :class:`~hailstorm.sinks.db.Outage`) and of its end (None)."""

    def __repr__(self) -> str:
        return (
            f"SinkWriter({self.sink_id!r} -> {self.table.name} at {redact(self.url)}, "
            f"epoch {self.epoch})"
        )

    @property
    def what(self) -> str:
        return f"sink {self.sink_id} (table {self.table.name})"

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, table: Table, sink_id: str, epoch: int, **options: Any) -> SinkWriter:
        """Connect, create the table (and ``hailstorm_progress``) if missing or check its
        shape, claim the sink for ``epoch`` and read the progress.

        Raises :class:`SchemaMismatchError` for a table of another shape,
        :class:`FencedError` (``superseded``) when a newer epoch already owns the sink and
        :class:`DatabaseUnavailableError` when the database stays down.
        """
        writer = cls(url, table, sink_id, epoch, **options)
        writer.setup()
        writer.progress()
        return writer

    def setup(self) -> None:
        """Create or verify the tables and the sink's sentinel progress row."""

        def attempt(_: int) -> None:
            db = self._connection()
            with db.transaction():
                db.advisory_lock("hailstorm:ddl")
                ensure_table(db, progress_shape(db.dialect), writer="hailstorm")
                ensure_table(db, self.shape, writer=f"sink {self.sink_id}", fix=SINK_TABLE_FIX)
                db.execute(db.dialect.insert_sentinel(), (self.sink_id,))

        self._retrying(f"{self.what}: setup", attempt)
        self._opened = True

    def close(self) -> None:
        """Close the connection; buffered rows are dropped (a replay brings them back)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> SinkWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> Database:
        if self._db is None:
            self._db = Database(self.parsed, connect_timeout=self.connect_timeout)
        return self._db

    def _drop_connection(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _retrying(self, what: str, op: Any) -> Any:
        return with_retries(
            op,
            what=what,
            url=self.url,
            policy=self.retry,
            reset=self._drop_connection,
            logger=self.log,
            on_outage=self.on_outage,
        )

    # -- progress -----------------------------------------------------------------------

    def _lock_and_read(self, db: Database) -> tuple[Clock, int]:
        """Lock the sink (its sentinel row), then read its progress and newest epoch (both
        statements in one round trip: the read, a statement of its own, sees every commit
        of the writer that held the lock before)."""
        sink = (self.sink_id,)
        locked, progress = db.execute_all([(db.dialect.lock_sentinel(), sink),
                                           (db.dialect.read_progress(), sink)])
        if not locked:  # the sentinel row was deleted by hand: recreate it
            db.execute(db.dialect.insert_sentinel(), sink)
            db.execute(db.dialect.lock_sentinel(), sink)
            progress = db.execute(db.dialect.read_progress(), sink)
        stored: Clock = {}
        newest = 0
        for topic, partition, offset, epoch in progress:
            newest = max(newest, int(epoch))
            if topic == SENTINEL_TOPIC and partition == SENTINEL_PARTITION:
                continue
            stored[(str(topic), int(partition))] = int(offset)
        return stored, newest

    def _superseded(self, newest: int) -> FencedError:
        return FencedError(
            f"{self.what}: fenced: epoch {newest} owns this sink, this writer has epoch "
            f"{self.epoch} (a zombie of an older run); it must stop. Nothing was written.",
            superseded=True,
            epoch=self.epoch,
            stored_epoch=newest,
        )

    def progress(self) -> Clock:
        """Read the stored progress (every row at or below it is in the table) and claim
        the sink for this writer's epoch.

        Call on start and after a :class:`FencedError` that is not ``superseded``: merge
        and append rows at or below the new progress are dropped from the buffer. Raises
        :class:`FencedError` (``superseded``) when a newer epoch owns the sink.
        """
        if not self._opened:
            self.setup()

        def attempt(_: int) -> Clock:
            db = self._connection()
            with db.transaction():
                stored, newest = self._lock_and_read(db)
                if newest > self.epoch:
                    raise self._superseded(newest)
                if newest < self.epoch:
                    db.execute(db.dialect.claim_sentinel(), (self.epoch, self.sink_id))
            return stored

        stored: Clock = self._retrying(f"{self.what}: reading progress", attempt)
        self._view = dict(stored)
        self._buffer.resync(stored)
        return dict(stored)

    # -- commits ------------------------------------------------------------------------

    @property
    def background(self) -> bool:
        """PostgreSQL commits may run on a thread of their own (each writer has its own
        connection); SQLite's connection stays on the thread that made it."""
        return self.parsed.kind == "postgresql"

    def write(self, prepared: PreparedCommit) -> None:
        """Apply the selected rows and store the new progress ``max(progress, lwm)`` in one
        transaction (see :meth:`BufferedWriter.commit_through`).

        Raises :class:`FencedError` when the compare-and-set fails (nothing was written;
        see :meth:`progress`) and :class:`DatabaseUnavailableError` when the database
        stays down."""
        selection, expected = prepared.selection, prepared.expected
        pause_point("sink.before_commit")  # chaos: a zombie that resumes into its commit

        careful = False
        """The database refused a row of this selection: each row's fate is found (in
        halves, behind savepoints) instead of writing them all at once."""

        def attempt(number: int) -> None:
            nonlocal careful
            if not careful:
                try:
                    write(number)
                    return
                except Exception as exc:  # broad: refusals picked; the rest re-raised
                    if not is_refused_row(exc):
                        raise
                careful = True  # rolled back: write them again, finding the refused ones
            write(number)

        def write(number: int) -> None:
            db = self._connection()
            with db.transaction():
                stored, newest = self._lock_and_read(db)
                if newest > self.epoch:
                    raise self._superseded(newest)
                if not same_clock(stored, expected):
                    if (
                        number > 1
                        and newest == self.epoch
                        and same_clock(stored, selection.target)
                    ):
                        return  # an earlier attempt committed before its connection broke
                    raise FencedError(
                        f"{self.what}: fenced: the stored progress "
                        f"{clock_to_json(stored)} is not {clock_to_json(expected)} as this "
                        f"writer last saw it (another writer of epoch {newest} moved it). "
                        "Nothing was written; re-read the progress and go on.",
                        superseded=False,
                        epoch=self.epoch,
                        stored_epoch=newest,
                    )
                if careful:
                    rejected[:] = [*selection.rejected, *self._apply(db, selection, stored)]
                else:  # at once, sent with the COMMIT: a refused row fails the commit
                    rejected[:] = selection.rejected
                    self._write_rows(db, selection.rows, at_commit=True)
                if rejected:
                    self._write_rejected(db, rejected)
                self._write_progress(db, stored, selection.target)
            if not careful and self._staged(db, selection.rows):
                self._stage_on = db  # created (or found) outside any savepoint, committed

        rejected: list[RejectedRow] = []
        self._retrying(f"{self.what}: commit", attempt)
        if rejected:
            self._rejected_table_ready = True
        prepared.rejected = rejected
        prepared.written = len(selection.rows)

    def _apply(self, db: Database, selection: Selection, stored: Clock) -> list[RejectedRow]:
        """Write the selected rows; return those the database refused, the others written.

        After a refusal the rows are written in halves, each behind a savepoint, down to
        the single rows refused: ``k`` refused rows among ``n`` cost about ``2k log n``
        statements. An upsert row at or below the ``stored`` progress (replayed so that the
        last arrival wins) that is refused again is not returned: the commit that first
        covered it recorded it (or superseded it by a newer row of its key)."""
        rows = selection.rows
        if not rows:
            return []
        refused: list[RejectedRow] = []
        pending = [(rows, selection.origins)]
        while pending:
            part, origins = pending.pop()
            try:
                with db.savepoint():
                    self._write_rows(db, part)
                continue
            except Exception as exc:  # broad: is_refused_row picks the refusals; the rest re-raised
                if not is_refused_row(exc):
                    raise
                error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            if len(part) > 1:
                if part is rows:
                    self.log.warning("%s: the database refused a row (%s); finding it among "
                                     "the %d rows", self.what, error, len(rows))
                half = len(part) // 2
                pending += [(part[half:], origins[half:]), (part[:half], origins[:half])]
                continue
            (partition, offset) = origins[0]
            if offset > stored.get(partition, NOTHING):
                shown = part[0][: len(self.table.column_names)]  # not the hidden columns
                refused.append(RejectedRow(origins[0], "database", error, record_text(shown)))
        return refused

    def _staged(self, db: Database, rows: list[Any]) -> bool:
        """Do ``rows`` go through COPY into the staging table?"""
        return db.kind == "postgresql" and len(rows) >= self.copy_threshold

    def _write_rows(self, db: Database, rows: list[Any], *, at_commit: bool = False) -> None:
        """Write ``rows`` (PostgreSQL: many of them through COPY into a staging table).
        ``at_commit``: all of the selection at once, the write itself sent with the
        transaction's ``COMMIT`` (:meth:`Database.at_commit`); else one part of it, now."""
        if not rows:
            return
        if self._staged(db, rows):
            stage = f"_hs_stage_{self.table.name}"[:63]
            q = db.dialect.quote
            if not at_commit or self._stage_on is not db:
                db.execute(
                    f"CREATE TEMP TABLE IF NOT EXISTS {q(stage)} "
                    f"(LIKE {q(self.table.name)}) ON COMMIT DELETE ROWS"
                )
            if not at_commit:
                # Rows an earlier part of this transaction left there (a transaction
                # starts with it empty: its rows go at every commit and rollback).
                db.execute(f"DELETE FROM {q(stage)}")
            db.copy_rows(stage, write_columns(self.table), rows)
            statement = write_statement(db.dialect, self.table, source=stage)
            if at_commit:
                db.at_commit(statement, [()])
            else:
                db.execute(statement)
        elif at_commit:
            db.at_commit(write_statement(db.dialect, self.table), rows)
        else:
            db.executemany(write_statement(db.dialect, self.table), rows)

    def _write_rejected(self, db: Database, rejected: list[RejectedRow]) -> None:
        """Record ``rejected`` in ``<table>_rejected`` (created on first use), or stop
        (``on_error="fail"``)."""
        if self.halt_as is not None:
            first = rejected[0]
            raise TopologyHalt(halt_reason_of(self.halt_as, first.stage, first.origin,
                                              first.error))
        if not self._rejected_table_ready:
            db.advisory_lock("hailstorm:ddl")
            ensure_table(db, rejected_shape(self.table, db.dialect.timestamp_type()),
                         writer=f"sink {self.sink_id}")
        db.executemany(insert_rejected(db.dialect, self.table), [
            (self.sink_id, topic, number, offset, r.stage, r.error, r.record)
            for r in rejected for (topic, number), offset in [r.origin]])

    def _write_progress(self, db: Database, stored: Clock, target: Clock) -> None:
        changed = [
            (self.sink_id, topic, number, offset, self.epoch)
            for (topic, number), offset in sorted(target.items())
            if stored.get((topic, number)) != offset
        ]
        if changed:
            db.at_commit(db.dialect.write_progress(), changed)
        db.at_commit(db.dialect.claim_sentinel(), [(self.epoch, self.sink_id)])
