"""Reading what a run committed: every bolt's state in the committed round's snapshots
(:class:`BoltStates`), sink tables and output topics as key -> row in the shape of
:meth:`hailstorm.model.ModelResult.table` (append sinks keyed by origin with
:func:`keyed_append_rows`), the raw records of a topic (:func:`topic_records`), and the dead
letters, late records and rejected rows (:func:`read_side_outputs`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hailstorm import kafka
from hailstorm.dev.harness.side_outputs import (
    SideRecord,
    letter_read,
    rejected_read,
    rejected_tables,
    side_output_topics,
)
from hailstorm.dev.harness.wait import HarnessError
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import CommittedRecord
from hailstorm.snapshots import open_store
from hailstorm.topic import Topic
from hailstorm.topology import Table, Topology


@dataclass(frozen=True)
class BoltStates:
    """One bolt's committed state: per instance and merged, with the round's clock."""

    bolt: str
    clock: dict[Partition, int]
    instances: list[Any]
    merged: Any
    instance_clocks: list[dict[Partition, int]]


def keyed_append_rows(
    rows: Iterable[tuple[tuple[str, int, int], Mapping[str, Any]]],
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Append-table rows ``((topic, partition, offset), row)`` keyed
    ``(topic, partition, offset, n)``, with ``n`` numbering the rows of one origin in a
    canonical order: two tables key alike exactly when they hold the same multiset of rows
    for every origin, whatever order the rows were written in."""
    by_origin: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for origin, row in rows:
        by_origin.setdefault((str(origin[0]), int(origin[1]), int(origin[2])), []).append(
            dict(row))
    keyed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for origin, group in by_origin.items():
        for n, row in enumerate(sorted(group, key=lambda r: repr(sorted(r.items())))):
            keyed[(*origin, n)] = row
    return keyed


def topic_ends(bootstrap: str, topic: str, wait: float = 10.0) -> dict[int, int]:
    """Partition -> where ``topic``'s readable log ends now (empty: no such topic). A topic
    created a moment ago may be listed before its partitions' leaders know of it (a
    cluster): asked again for up to ``wait`` s."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + wait
    while True:
        try:
            parts = [(topic, p) for p in kafka.partitions_of(bootstrap, topic)]
        except LookupError:
            return {}
        try:
            return {number: end
                    for (_name, number), end in kafka.log_ends(bootstrap, parts).items()}
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or time.monotonic() >= deadline \
                    or error.code() != KafkaError._UNKNOWN_PARTITION:
                raise
            time.sleep(0.2)


def topic_records(bootstrap: str, topic: str, since: Mapping[int, int] | None = None,
                  timeout: float = 60.0) -> list[kafka.Record]:
    """Every record of ``topic`` a ``read_committed`` consumer sees (from the offsets
    ``since`` gives per partition, else from the start), partition by partition in log
    order."""
    since = since or {}
    records: list[kafka.Record] = []
    for number, end in sorted(topic_ends(bootstrap, topic).items()):
        records.extend(kafka.read_range(bootstrap, topic, number, since.get(number, 0), end - 1,
                                        timeout))
    return records


def topic_rows(bootstrap: str, target: Topic, since: Mapping[int, int] | None = None,
               ) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A topic sink's output in :meth:`~hailstorm.model.ModelResult.table`'s shape, as a
    ``read_committed`` consumer sees it (from ``since``, see :func:`topic_records`): upsert
    topics keyed ``(key,)`` with the newest
    record per key; append topics keyed by origin (header ``hailstorm.origin``) with
    :func:`keyed_append_rows`, so that a duplicated record is an extra row."""
    from hailstorm.sinks.topic import ORIGIN_HEADER

    records = topic_records(bootstrap, target.name, since)
    if target.mode == "upsert":
        return {(r.key,): {"key": r.key, "value": r.value} for r in records}
    rows = []
    for r in records:
        origin = (r.headers or {}).get(ORIGIN_HEADER)
        if origin is None:
            raise HarnessError(f"a record of topic {target.name!r} at {r.partition}:{r.offset} "
                               f"has no {ORIGIN_HEADER} header: not written by its sink")
        source, partition, offset = origin.decode().split(":")
        rows.append(((source, int(partition), int(offset)), {"key": r.key, "value": r.value}))
    return keyed_append_rows(rows)


def read_bolt_states(topology: Topology, snapshots: Path | str,
                     committed: CommittedRecord) -> dict[str, BoltStates]:
    """Every bolt's state in the round ``committed``, from its snapshots in the store at
    ``snapshots`` (see
    :meth:`~hailstorm.dev.harness.deployment.Deployment.committed_bolt_states`)."""
    store = open_store(snapshots)
    result = {}
    for bolt in topology.bolts:
        instances, clocks = [], []
        for i in range(bolt.parallelism):
            ref = committed.snapshot_for(f"bolt:{bolt.name}:{i}")
            if ref is None:
                raise HarnessError(f"committed round {committed.epoch} has no snapshot "
                                   f"of bolt:{bolt.name}:{i}")
            clock, state = store.load(ref, bolt.state)
            instances.append(state)
            clocks.append(dict(clock))
        merged = instances[0] if len(instances) == 1 else bolt.state.combine_all(instances)
        result[bolt.name] = BoltStates(bolt.name, dict(committed.clock), instances, merged,
                                       clocks)
    return result


def read_sink_tables(topology: Topology, bootstrap: str, database: str,
                     topic_starts: Mapping[str, Mapping[int, int]],
                     ) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Every sink's table or topic, key tuple -> row (see
    :meth:`~hailstorm.dev.harness.deployment.Deployment.sink_tables`): tables without a URL
    are in ``database``, topics are read from ``topic_starts`` on."""
    from hailstorm.sinks.db import Database
    from hailstorm.sinks.sql import HIDDEN_COLUMNS

    result: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    for sink in topology.sinks:
        target = sink.target
        if isinstance(target, Topic):
            result[sink.name] = topic_rows(bootstrap, target,
                                           topic_starts.get(target.name))
            continue
        if not isinstance(target, Table):
            continue
        append = target.mode == "append"
        db = Database(target.url or database)
        try:
            columns = list(target.column_names)
            selected = columns + (list(HIDDEN_COLUMNS[:3]) if append else [])
            quoted = ", ".join(db.dialect.quote(c) for c in selected)
            with db.transaction() as tx:
                rows = tx.execute(f"SELECT {quoted} FROM {db.dialect.quote(target.name)}")
        finally:
            db.close()
        if append:
            result[sink.name] = keyed_append_rows(
                ((values[-3], values[-2], values[-1]),
                 dict(zip(columns, values[:-3], strict=True))) for values in rows)
            continue
        table = {}
        for values in rows:
            row = dict(zip(columns, values, strict=True))
            table[target.key_of(row)] = row
        result[sink.name] = table
    return result


def read_side_outputs(topology: Topology, bootstrap: str, database: str,
                      topic_starts: Mapping[str, Mapping[int, int]]) -> list[SideRecord]:
    """Every dead letter and late record on ``topology``'s side-output topics (as a
    ``read_committed`` consumer sees them from ``topic_starts`` on) and every row of its
    table sinks' ``<table>_rejected`` (tables without a URL in ``database``; a table never
    made holds none), see :mod:`~hailstorm.dev.harness.side_outputs`."""
    from hailstorm.sinks.db import Database

    records = [letter_read(topic, r.key, r.value, r.headers)
               for topic in side_output_topics(topology)
               for r in topic_records(bootstrap, topic, topic_starts.get(topic))]
    for target in rejected_tables(topology).values():
        name = target.rejected_table
        db = Database(target.url or database)
        try:
            with db.transaction() as tx:
                if tx.table_shape(name) is None:
                    continue
                q = db.dialect.quote
                rows = tx.execute(f"SELECT {q('sink')}, {q('topic')}, {q('partition')}, "
                                  f"{q('offset')}, {q('stage')}, {q('record')} FROM {q(name)}")
        finally:
            db.close()
        records.extend(rejected_read(name, row) for row in rows)
    return records
