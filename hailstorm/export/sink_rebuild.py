"""``hailstorm sink rebuild`` and ``hailstorm run --rebuild``: a sink's table rebuilt from
the committed round, with its progress, in one transaction.

Which sinks can be: :func:`hailstorm.sinks.rebuild.rebuild_refusal` (an upsert table fed by
one bolt keyed by the tuple itself). :func:`rebuild_sink` reads the committed round of that
bolt (ZooKeeper's ``committed`` record, the snapshot store), computes every key's row with
``emit(key, value)``, then in one transaction replaces every row of the table (for an
upgrade that changed its definition, the table itself: :mod:`hailstorm.upgrade`) and sets
the sink's progress to the committed clock (on the partitions its upstreams carry), keeping
the newest epoch that claimed the sink. Run it while the topology is stopped; the next run
goes on from the committed clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from hailstorm.engine import execution_of
from hailstorm.export.rounds import committed_round, read_committed
from hailstorm.protocol.clock import Clock, clock_to_json
from hailstorm.sinks.db import Database, RetryPolicy, with_retries
from hailstorm.sinks.errors import SinkConfigError
from hailstorm.sinks.rebuild import rebuild_refusal, sink_progress_id, source_topics_of
from hailstorm.sinks.sql import (
    PROGRESS_TABLE,
    SENTINEL_TOPIC,
    progress_shape,
    shape_of,
    write_statement,
)
from hailstorm.sinks.urls import redact
from hailstorm.sinks.writer import ensure_table
from hailstorm.snapshots import SnapshotStore
from hailstorm.topology import BoltSpec, RowError, SinkSpec, Table, Topology

__all__ = ["RebuildResult", "rebuild_sink", "rebuilt_rows", "write_rebuilt"]

CHUNK_ROWS = 5000
"""Rows per ``executemany`` batch."""


@dataclass(frozen=True)
class RebuildResult:
    """What :func:`rebuild_sink` wrote."""

    sink: str
    table: str
    epoch: int
    clock: Clock
    """The progress set (the committed clock on the sink's partitions)."""
    rows: int
    refused: int
    """Tuples of emit that are no row of the table (the sink would have rejected them)."""

    def describe(self, url: str) -> str:
        refused = f" ({self.refused} emitted tuples were no row)" if self.refused else ""
        return (f"rebuilt table {self.table} at {redact(url)} from committed round "
                f"{self.epoch}: {self.rows} rows{refused}; sink {self.sink}'s progress is "
                f"now {clock_to_json(self.clock)}")


def rebuilt_rows(table: Table, bolt: BoltSpec[Any, Any], states: Iterable[Any]
                 ) -> tuple[list[tuple[Any, ...]], int]:
    """The rows of ``table`` (last per table key) from ``bolt``'s per-key ``states`` (one
    per instance), and how many emitted tuples were no row."""
    rows: dict[Any, tuple[Any, ...]] = {}
    refused = 0
    run = execution_of(bolt)
    for state in states:
        for key in state:
            for t in run.outputs(key, key, run.value_for_emit(key, [state])):
                try:
                    row = table.to_row(t)
                except RowError:
                    refused += 1
                    continue
                rows[table.key_of(row)] = tuple(row[c] for c in table.column_names)
    return list(rows.values()), refused


def rebuild_sink(*, topology: Topology, sink: str, url: str, zk: str, store: SnapshotStore,
                 name: str | None = None, retry: RetryPolicy | None = None,
                 replace: bool = False) -> RebuildResult:
    """Rebuild ``sink``'s table at ``url`` from the committed round (module docstring) of
    the topology named ``name`` in ZooKeeper and the snapshot store (default: its own).

    The bolt's files are the ones the committed record lists (a renamed bolt's old ones
    too), read as the bolt's state now (Avro schema resolution, or its ``migrate=``).
    ``replace``: an existing table of that name is dropped and created with the sink's
    definition in the same transaction (a changed definition: :mod:`hailstorm.upgrade`);
    else it must have that definition. A round committed meanwhile rolls it back.

    Raises :class:`SinkConfigError` when the sink cannot be rebuilt, nothing is committed
    or a round committed meanwhile, :class:`~hailstorm.export.ExportError` when the round
    cannot be read.
    """
    refusal = rebuild_refusal(topology, sink)
    if refusal is not None:
        raise SinkConfigError(f"cannot rebuild sink {sink!r}: {refusal}")
    spec = topology.node(sink)
    assert isinstance(spec, SinkSpec) and isinstance(spec.target, Table)
    table = spec.target
    bolt = topology.node(spec.inputs[0])
    assert isinstance(bolt, BoltSpec)
    name = name or topology.name
    committed = read_committed(zk, name)
    if committed is None:
        raise SinkConfigError(f"nothing is committed for {name} in ZooKeeper at {zk}: "
                              "there is no round to rebuild from")
    chosen = committed_round(store, name, bolt.name, committed)
    if chosen is None:
        raise SinkConfigError(f"the committed round {committed.epoch} of {name} holds no "
                              f"snapshot of bolt {bolt.name}: there is no state to rebuild "
                              f"sink {sink!r} from")
    upgrade = topology.upgrades.get(bolt.name)
    migrate = upgrade.migrate if upgrade is not None else None

    def states() -> Iterator[Any]:
        for ref in chosen.refs:
            _, state = store.load(ref, bolt.state, migrate)
            yield state

    def still_committed() -> None:
        now = read_committed(zk, name)
        if now is None or now.epoch != committed.epoch:
            raise SinkConfigError(
                f"round {now.epoch if now else '?'} of {name} committed while sink {sink!r} "
                f"was rebuilt from round {committed.epoch}: nothing was written; stop the "
                "running topology and rebuild again")

    rows, refused = rebuilt_rows(table, bolt, states())
    topics = source_topics_of(topology, sink)
    progress: Clock = {p: o for p, o in committed.clock.items() if p[0] in topics and o >= 0}
    sink_id = sink_progress_id(name, sink)
    with_retries(lambda _attempt: write_rebuilt(url, table, sink_id, rows, progress,
                                                replace=replace, check=still_committed),
                 what=f"rebuild of sink {sink}", url=url, policy=retry or RetryPolicy())
    return RebuildResult(sink, table.name, committed.epoch, progress, len(rows), refused)


def write_rebuilt(url: str, table: Table, sink_id: str, rows: list[tuple[Any, ...]],
                  progress: Clock, *, replace: bool = False,
                  check: Callable[[], None] = lambda: None) -> None:
    """One transaction: the tables (created, or checked; ``replace``: dropped and created
    afresh) and the sentinel row, every row of the table, the sink's progress; ``check``
    raises (rolling it all back) when it must not commit."""
    db = Database(url)
    try:
        with db.transaction():
            q, p = db.dialect.quote, db.dialect.param
            db.advisory_lock("hailstorm:ddl")
            ensure_table(db, progress_shape(db.dialect), writer="hailstorm")
            db.execute(db.dialect.insert_sentinel(), (sink_id,))
            if replace:
                db.execute(f"DROP TABLE IF EXISTS {q(table.name)}")
            ensure_table(db, shape_of(table), writer=f"sink {sink_id}")
            found = db.execute(db.dialect.lock_sentinel(), (sink_id,))
            epoch = int(found[0][0])
            db.execute(f"DELETE FROM {q(table.name)}")
            statement = write_statement(db.dialect, table)  # upsert: the table's columns
            for start in range(0, len(rows), CHUNK_ROWS):
                chunk = rows[start:start + CHUNK_ROWS]
                if db.kind == "postgresql":  # the table is empty now: COPY is the fastest
                    db.copy_rows(table.name, table.column_names, chunk)
                else:
                    db.executemany(statement, chunk)
            db.execute(f"DELETE FROM {q(PROGRESS_TABLE)} WHERE {q('sink')} = {p} "
                       f"AND {q('topic')} <> '{SENTINEL_TOPIC}'", (sink_id,))
            if progress:
                db.executemany(db.dialect.write_progress(), [
                    (sink_id, topic, number, offset, epoch)
                    for (topic, number), offset in sorted(progress.items())])
            check()
    finally:
        db.close()
