"""The exactly-once sink writer against real PostgreSQL and SQLite.

Each mode is driven like the runtime shell drives it: rows with their origins arrive in
random batches, commits happen through random low water marks, and the writer crashes at
random points; a new writer (next epoch) reads the progress and gets the rows again from a
replay clock at or below it, in a new interleaving of the partitions. The table must end
exactly as ``run_model(...).table(...)``. Then: two concurrent writers of one sink, an
older-epoch zombie, tables of the wrong shape, and a database that is down.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from databases import query

from hailstorm import SinkSpec, Table, Topology, load_topology, run_model
from hailstorm.halt import TopologyHalt
from hailstorm.model import Message, Origin
from hailstorm.protocol.clock import Clock, Partition, dominates
from hailstorm.sinks import (
    Database,
    DatabaseUnavailableError,
    FencedError,
    RetryPolicy,
    SchemaMismatchError,
    SinkWriter,
    parse_url,
)
from hailstorm.sinks.buffer import PreparedCommit
from hailstorm.sinks.db import create_postgres_database
from hailstorm.sinks.errors import SinkError
from hailstorm.sinks.sql import HIDDEN_COLUMNS, REWRITTEN_FILLFACTOR

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["apple", "kiwi", "fig", "plum", "pear", "lime", "date"]
P0: Partition = ("words", 0)
P1: Partition = ("words", 1)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"




# --------------------------------------------------------------------------- topologies


def words_of(line: str) -> list[str]:
    return line.split()


def wordcount(table_name: str) -> tuple[Topology, str, Table]:
    """topologies/wordcount.py (upsert of running totals), writing to ``table_name``."""
    topology = load_topology(str(ROOT / "topologies" / "wordcount.py"))
    node = topology.node("word_counts")
    assert isinstance(node, SinkSpec) and isinstance(node.target, Table)
    target = node.target
    table = Table(table_name, target.columns, key=target.key, mode=target.mode)
    return topology, "word_counts", table


def merge_topology(table_name: str) -> tuple[Topology, str, Table]:
    """Increments per word: occurrences and letters, added up by the database."""
    topology = Topology("merge_demo")
    lines = topology.spout("lines", topic="words", decoder="text", explode=words_of)
    table = Table(
        table_name,
        {"word": "text", "occurrences": "bigint", "letters": "bigint"},
        key=["word"],
        mode="merge",
        row=lambda w: {"word": w, "occurrences": 1, "letters": len(w)},
    )
    topology.sink("letters", inputs=[lines], target=table)
    return topology, "letters", table


def append_topology(table_name: str) -> tuple[Topology, str, Table]:
    """Every word of every line as a row, with its position in the line."""
    topology = Topology("append_demo")
    lines = topology.spout(
        "lines",
        topic="words",
        decoder="text",
        explode=lambda line: list(enumerate(line.split())),
    )
    table = Table(table_name, {"position": "integer", "word": "text"}, mode="append")
    topology.sink("word_log", inputs=[lines], target=table)
    return topology, "word_log", table


CASES = {"upsert": wordcount, "merge": merge_topology, "append": append_topology}


def random_messages(rng: random.Random, per_partition: int) -> dict[Partition, list[Message]]:
    by_partition: dict[Partition, list[Message]] = {}
    for p in (P0, P1):
        by_partition[p] = [
            Message(p[0], p[1], offset, " ".join(rng.choices(WORDS, k=rng.randint(0, 5))).encode())
            for offset in range(per_partition)
        ]
    return by_partition


def interleave(rng: random.Random, by_partition: dict[Partition, list[Message]]) -> list[Message]:
    """A consumption order: partitions interleaved at random, each one in offset order."""
    queues = {p: list(ms) for p, ms in by_partition.items()}
    order = []
    while any(queues.values()):
        p = rng.choice([p for p in sorted(queues) if queues[p]])
        order.append(queues[p].pop(0))
    return order


def rows_by_origin(topology: Topology, sink: str, order: list[Message]) -> dict[Origin, list[Any]]:
    produced: dict[Origin, list[Any]] = {}
    for origin, t in run_model(topology, order).sink_rows(sink):
        produced.setdefault(origin, []).append(t)
    return produced


def table_content(url: str, table: Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table as ``run_model(...).table(...)`` presents it."""
    names = table.column_names
    q = ", ".join(f'"{c}"' for c in names)
    if table.mode == "append":
        hidden = ", ".join(f'"{c}"' for c in HIDDEN_COLUMNS)
        rows = query(url, f'SELECT {hidden}, {q} FROM "{table.name}"')
        return {tuple(r[:4]): dict(zip(names, r[4:], strict=True)) for r in rows}
    rows = query(url, f'SELECT {q} FROM "{table.name}"')
    content = {}
    for r in rows:
        row = dict(zip(names, r, strict=True))
        content[table.key_of(row)] = row
    return content


# --------------------------------------------------------------------------- crashes


class BackgroundCommits:
    """A writer's commits as the sink's shell runs them on PostgreSQL: the transaction on a
    thread of its own (:meth:`SinkWriter.write`) while rows go on arriving, taken back
    (:meth:`SinkWriter.finish`) later, one at a time."""

    def __init__(self, history: list[Clock]) -> None:
        self.history = history
        self.running: tuple[SinkWriter, PreparedCommit, threading.Thread, list[BaseException]] \
            | None = None
        self.overlapped = 0
        """Commits during which rows were added."""

    def start(self, writer: SinkWriter, lwm: Clock) -> None:
        self.end()
        prepared = writer.prepare(dict(lwm))
        if prepared is None:
            self.history.append(writer.view)
            return
        errors: list[BaseException] = []

        def write() -> None:
            try:
                writer.write(prepared)
            except BaseException as exc:  # broad: re-raised by end()
                errors.append(exc)

        thread = threading.Thread(target=write)
        thread.start()
        self.running = (writer, prepared, thread, errors)

    def adding(self) -> None:
        """Rows are added now: counted if a commit may be running."""
        if self.running is not None and self.running[2].is_alive():
            self.overlapped += 1

    def end(self, *, crash: bool = False) -> None:
        """Wait for the running commit; take it back (a crash: the writer is lost, what
        the transaction wrote stays in the table)."""
        if self.running is None:
            return
        writer, prepared, thread, errors = self.running
        self.running = None
        thread.join()
        if errors:
            raise errors[0]
        self.history.append(prepared.selection.target if crash else writer.finish(prepared))


def drive_with_crashes(
    url: str, mode: str, seed: int, per_partition: int = 30, max_crashes: int = 3,
    background: bool = False,
) -> dict[str, int]:
    """Run one random scenario (module docstring); returns counters for sanity checks.
    ``background``: commits run as :class:`BackgroundCommits` while rows arrive."""
    rng = random.Random(seed)
    topology, sink, table = CASES[mode](unique(mode))
    by_partition = random_messages(rng, per_partition)
    first_order = interleave(rng, by_partition)
    expected = run_model(topology, first_order).table(sink)
    sink_id = f"sink:{sink}:{uuid.uuid4().hex[:6]}"

    def open_writer(epoch: int) -> SinkWriter:
        return SinkWriter.open(url, table, sink_id, epoch, copy_threshold=rng.choice([1, 10_000]))

    stats = {"crashes": 0, "commits": 0, "replayed_below_progress": 0}
    epoch = 1
    writer = open_writer(epoch)
    replay_from: Clock = {}
    history: list[Clock] = [{}]
    commits = BackgroundCommits(history)

    def commit(lwm: Clock) -> None:
        if background:
            commits.start(writer, lwm)
        else:
            history.append(writer.commit_through(lwm))
    while True:
        # What the bolts hold after reloading the round at replay_from, then a new order.
        done = [m for m in first_order if m.offset <= replay_from.get(m.source, -1)]
        rest = {
            p: [m for m in ms if m.offset > replay_from.get(p, -1)]
            for p, ms in by_partition.items()
        }
        order = interleave(rng, rest)
        produced = rows_by_origin(topology, sink, done + order)
        lwm: Clock = {p: replay_from.get(p, -1) for p in by_partition}
        crash_at = None
        if stats["crashes"] < max_crashes and rng.random() < 0.75:
            crash_at = rng.randrange(len(order) + 1)
        for i, message in enumerate(order):
            if i == crash_at:
                break
            rows = [(message.origin, t) for t in produced.get(message.origin, [])]
            cut = rng.randrange(len(rows) + 1)
            commits.adding()
            writer.add(rows[:cut])
            if rng.random() < 0.2:  # a commit while this message is half delivered
                commit(lwm)
            commits.adding()
            writer.add(rows[cut:])
            if message.offset <= writer.view.get(message.source, -1):
                stats["replayed_below_progress"] += 1
            lwm[message.source] = message.offset
            if rng.random() < 0.35:
                commit(lwm)
                stats["commits"] += 1
            if rng.random() < 0.3:
                commits.end()
        else:
            commits.end()
            writer.commit_through(lwm)
            writer.close()
            break
        commits.end(crash=True)
        writer.close()  # the crash: whatever was buffered is lost
        stats["crashes"] += 1
        epoch += 1
        writer = open_writer(epoch)
        progress = writer.view
        assert dominates(progress, history[-1])  # nothing committed was lost
        replay_from = rng.choice([h for h in history if dominates(progress, h)])
    assert table_content(url, table) == expected
    stats["overlapped"] = commits.overlapped
    return stats


@pytest.mark.parametrize("mode", ["upsert", "merge", "append"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_batches_and_crashes_end_in_the_model_table(
    db_url: str, mode: str, seed: int
) -> None:
    stats = drive_with_crashes(db_url, mode, seed)
    assert stats["commits"] > 0


@pytest.mark.parametrize("mode", ["upsert", "merge", "append"])
@pytest.mark.parametrize("seed", [5, 6])
def test_commits_written_while_rows_arrive_end_in_the_model_table(
    postgres_url: str, mode: str, seed: int
) -> None:
    """As the sink's shell commits on PostgreSQL: each transaction on a thread of its own
    while rows go on arriving (some for keys it selected), taken back later, with crashes
    in between."""
    stats = drive_with_crashes(postgres_url, mode, seed, background=True)
    assert stats["commits"] > 0 and stats["overlapped"] > 0


def test_replays_really_happen_in_these_scenarios(tmp_path: Path) -> None:
    totals = {"crashes": 0, "replayed_below_progress": 0}
    for seed in range(6):
        stats = drive_with_crashes(f"sqlite:///{tmp_path / f'{seed}.db'}", "merge", seed)
        for k in totals:
            totals[k] += stats[k]
    assert totals["crashes"] >= 3 and totals["replayed_below_progress"] > 0


def test_progress_is_stored_with_the_rows_and_never_moves_backwards(db_url: str) -> None:
    _, _, table = merge_topology(unique("merge"))
    sink_id = unique("sink")
    writer = SinkWriter.open(db_url, table, sink_id, 1)
    writer.add([((P0, 0), "a"), ((P0, 1), "b"), ((P1, 0), "a")])
    assert writer.commit_through({P0: 1, P1: -1}) == {P0: 1}
    assert writer.commit_through({P0: 0, P1: 0}) == {P0: 1, P1: 0}
    rows = query(
        db_url,
        f'SELECT topic, "partition", "offset", epoch FROM hailstorm_progress '
        f"WHERE sink = '{sink_id}' AND topic <> '' ORDER BY 2",
    )
    assert rows == [("words", 0, 1, 1), ("words", 1, 0, 1)]
    assert table_content(db_url, table) == {
        ("a",): {"word": "a", "occurrences": 2, "letters": 2},
        ("b",): {"word": "b", "occurrences": 1, "letters": 1},
    }
    writer.close()
    again = SinkWriter.open(db_url, table, sink_id, 2)
    assert again.progress() == {P0: 1, P1: 0}
    again.add([((P0, 1), "b"), ((P0, 2), "b")])  # (P0, 1) is a replay: skipped
    again.commit_through({P0: 2, P1: 0})
    assert table_content(db_url, table)[("b",)]["occurrences"] == 2
    again.close()


def test_upsert_replays_rows_below_the_progress_so_the_last_write_wins(db_url: str) -> None:
    """Run 1 read words:0@0 first (total 1) and committed it; after the crash the replay
    reads words:1@0 first, so words:0@0 now carries the final total 2 and arrives last:
    it is at or below the stored progress, and must be applied anyway."""
    _, _, table = wordcount(unique("replay"))
    sink_id = unique("sink")
    first = SinkWriter.open(db_url, table, sink_id, 1)
    first.add([((P0, 0), ("w", 1))])
    first.commit_through({P0: 0, P1: -1})
    first.close()
    second = SinkWriter.open(db_url, table, sink_id, 2)
    assert second.view == {P0: 0}
    second.add([((P1, 0), ("w", 1))])
    second.commit_through({P0: -1, P1: 0})  # a commit between the two rows
    second.add([((P0, 0), ("w", 2))])
    second.commit_through({P0: 0, P1: 0})
    second.close()
    assert table_content(db_url, table) == {("w",): {"word": "w", "count": 2}}


# --------------------------------------------------------------------------- zombies


def batches_of(
    topology: Topology, sink: str, seed: int
) -> tuple[list[tuple[list[Any], Clock]], dict[Any, Any]]:
    """The model's rows in batches of a few messages, each with the LWM after it."""
    rng = random.Random(seed)
    order = interleave(rng, random_messages(rng, 25))
    produced = rows_by_origin(topology, sink, order)
    expected = run_model(topology, order).table(sink)
    batches: list[tuple[list[Any], Clock]] = []
    lwm: Clock = {P0: -1, P1: -1}
    for start in range(0, len(order), 4):
        rows = []
        for message in order[start : start + 4]:
            rows += [(message.origin, t) for t in produced.get(message.origin, [])]
            lwm[message.source] = message.offset
        batches.append((rows, dict(lwm)))
    return batches, expected


@pytest.mark.parametrize("mode", ["upsert", "merge", "append"])
def test_two_writers_of_one_sink_leave_the_table_as_one_would(db_url: str, mode: str) -> None:
    topology, sink, table = CASES[mode](unique(mode))
    batches, expected = batches_of(topology, sink, seed=7)
    sink_id = unique("sink")
    writers = [SinkWriter.open(db_url, table, sink_id, 3) for _ in range(2)]
    barrier = threading.Barrier(2)
    fenced = [0, 0]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        writer = writers[i]
        try:
            for rows, lwm in batches:
                writer.add(rows)
                barrier.wait(timeout=60)  # both commit the same batch at the same time
                while True:
                    try:
                        writer.commit_through(lwm)
                        break
                    except FencedError as exc:
                        assert not exc.superseded
                        fenced[i] += 1
                        writer.progress()  # re-sync: skip what the other one applied
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for writer in writers:
        writer.close()
    assert not errors, errors
    assert sum(fenced) >= 1  # they really raced
    assert table_content(db_url, table) == expected


def test_an_older_epoch_zombie_is_fenced_and_writes_nothing(db_url: str) -> None:
    topology, sink, table = wordcount(unique("zombie"))
    batches, _ = batches_of(topology, sink, seed=11)
    (rows1, lwm1), (rows2, lwm2) = batches[0], batches[1]
    sink_id = unique("sink")
    zombie = SinkWriter.open(db_url, table, sink_id, 4)
    zombie.add(rows1)
    zombie.commit_through(lwm1)
    successor = SinkWriter.open(db_url, table, sink_id, 5)  # the restarted instance
    before = table_content(db_url, table)
    progress_sql = f"SELECT * FROM hailstorm_progress WHERE sink = '{sink_id}' ORDER BY 2, 3"
    progress_before = query(db_url, progress_sql)

    zombie.add(rows2)
    with pytest.raises(FencedError) as info:
        zombie.commit_through(lwm2)
    assert info.value.superseded and info.value.stored_epoch == 5
    assert "must stop" in str(info.value)
    assert table_content(db_url, table) == before
    assert query(db_url, progress_sql) == progress_before
    with pytest.raises(FencedError):
        zombie.progress()
    with pytest.raises(FencedError):
        SinkWriter.open(db_url, table, sink_id, 3)
    zombie.close()

    successor.add(rows1 + rows2)  # the replay
    assert successor.commit_through(lwm2) == lwm2
    successor.close()


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("ddl", "table", "expected"),
    [
        (
            'CREATE TABLE "{name}" (word text PRIMARY KEY, count text)',
            lambda name: Table(name, {"word": "text", "count": "bigint"}, key=["word"]),
            "column 'count' is text in the database but the sink writes bigint",
        ),
        (
            'CREATE TABLE "{name}" (word text, count bigint)',
            lambda name: Table(name, {"word": "text", "count": "bigint"}, key=["word"]),
            "the primary key is none but should be (word)",
        ),
        (
            'CREATE TABLE "{name}" (word text PRIMARY KEY)',
            lambda name: Table(name, {"word": "text", "count": "bigint"}, key=["word"]),
            "column 'count' (bigint) is missing",
        ),
        (
            'CREATE TABLE "{name}" (word text, position integer, _hs_topic text, '
            "_hs_partition integer, _hs_offset bigint, _hs_seq integer)",
            lambda name: Table(name, {"word": "text", "position": "integer"}, mode="append"),
            "there is no unique constraint on (_hs_topic, _hs_partition, _hs_offset, _hs_seq)",
        ),
    ],
)
def test_a_table_of_another_shape_is_a_clear_error(
    db_url: str, ddl: str, table: Any, expected: str
) -> None:
    name = unique("shape")
    query(db_url, ddl.format(name=name))
    shape_before = query(db_url, f'SELECT * FROM "{name}"')
    with pytest.raises(SchemaMismatchError) as info:
        SinkWriter.open(db_url, table(name), unique("sink"), 1)
    message = str(info.value)
    assert expected in [d.replace("TEXT", "text") for d in info.value.differences]
    assert f"table {name!r}" in message and "Fix:" in message and "never alters" in message
    password = parse_url(db_url).url.partition("@")[0].rpartition(":")[2]
    if db_url.startswith("postgresql"):
        assert password and password not in message and ":***@" in message
    assert query(db_url, f'SELECT * FROM "{name}"') == shape_before


def test_postgresql_tables_the_sink_rewrites_leave_room_on_each_page(
        postgres_url: str) -> None:
    """Upsert and merge tables are made with a fillfactor, so updates stay on their page
    (HOT) and skip the key's index; append tables are packed full."""
    names = {mode: unique(mode) for mode in ("upsert", "merge", "append")}
    for mode, name in names.items():
        key = ["word"] if mode != "append" else []
        table = Table(name, {"word": "text", "count": "bigint"}, key=key, mode=mode)
        SinkWriter.open(postgres_url, table, unique("sink"), 1).close()
    options = {name: query(postgres_url, "SELECT reloptions FROM pg_class WHERE relname = "
                                         f"'{name}'")[0][0] for name in names.values()}
    assert options == {names["upsert"]: [f"fillfactor={REWRITTEN_FILLFACTOR}"],
                       names["merge"]: [f"fillfactor={REWRITTEN_FILLFACTOR}"],
                       names["append"]: None}


def test_an_existing_table_of_the_right_shape_is_used(db_url: str) -> None:
    name = unique("existing")
    query(db_url, f'CREATE TABLE "{name}" ("count" bigint, word varchar(40) PRIMARY KEY)')
    table = Table(name, {"word": "text", "count": "bigint"}, key=["word"])
    writer = SinkWriter.open(db_url, table, unique("sink"), 1)
    writer.add([((P0, 0), ("w", 3))])
    writer.commit_through({P0: 0})
    writer.close()
    assert table_content(db_url, table) == {("w",): {"word": "w", "count": 3}}


@pytest.mark.parametrize("mode", ["upsert", "merge", "append"])
@pytest.mark.parametrize("copy_threshold", [1000, 2])  # row statements, and COPY (PostgreSQL)
def test_rows_the_database_refuses_go_to_the_rejected_table_exactly_once(
    db_url: str, mode: str, copy_threshold: int
) -> None:
    name = unique("checked")
    hidden = ", _hs_topic text NOT NULL, _hs_partition integer NOT NULL, _hs_offset bigint " \
             "NOT NULL, _hs_seq integer NOT NULL, UNIQUE (_hs_topic, _hs_partition, " \
             "_hs_offset, _hs_seq)" if mode == "append" else ", PRIMARY KEY (word)"
    query(db_url, f'CREATE TABLE "{name}" (word text NOT NULL, n bigint{hidden}, '
                  "CHECK (n < 100))")
    table = Table(name, {"word": "text", "n": "bigint"}, key=[] if mode == "append" else ["word"],
                  mode=mode)  # type: ignore[arg-type]
    sink = unique("sink")
    rows: list[tuple[Origin, Any]] = [((P0, 0), ("a", 1)), ((P0, 1), ("big", 500)),
                                      ((P1, 0), ("b", 2)), ((P1, 1), ("bad",))]
    writer = SinkWriter.open(db_url, table, sink, 1, copy_threshold=copy_threshold)
    writer.add(rows)
    writer.commit_through({P0: 1, P1: 1})
    writer.close()
    replay = SinkWriter.open(db_url, table, sink, 2, copy_threshold=copy_threshold)
    replay.add(rows)  # a replay below the progress rejects nothing again
    replay.commit_through({P0: 1, P1: 1})
    replay.close()
    assert {tuple(r) for r in query(db_url, f'SELECT word, n FROM "{name}"')} == {
        ("a", 1), ("b", 2)}
    rejected = query(db_url, f'SELECT sink, topic, partition, "offset", stage, record, error '
                             f'FROM "{name}_rejected" ORDER BY partition')
    assert [r[:6] for r in rejected] == [
        (sink, "words", 0, 1, "database", "('big', 500)"),
        (sink, "words", 1, 1, "row", "('bad',)"),
    ]
    assert "check" in rejected[0][6].lower()
    assert "has 1 values but the table has 2 columns" in rejected[1][6]


@pytest.mark.parametrize("mode", ["upsert", "merge"])
def test_refused_rows_are_found_among_many_and_the_others_written_once(
    db_url: str, mode: str
) -> None:
    name = unique("halves")
    query(db_url, f'CREATE TABLE "{name}" (word text NOT NULL, n bigint, PRIMARY KEY (word), '
                  "CHECK (n < 100))")
    table = Table(name, {"word": "text", "n": "bigint"}, key=["word"], mode=mode)  # type: ignore[arg-type]
    refused = {7, 8, 31}
    rows = [((P0, i), (f"w{i}", 500 if i in refused else i)) for i in range(50)]
    writer = SinkWriter.open(db_url, table, unique("sink"), 1, copy_threshold=4)
    writer.add(rows)
    writer.commit_through({P0: 49})
    # Two more commits through COPY on the same connection: the refusals rolled back what
    # they staged (and perhaps the staging table), and no row is staged twice.
    for commit in range(2):
        writer.add([((P0, 50 + commit * 10 + i), (f"x{i}", 1)) for i in range(10)])
        writer.commit_through({P0: 59 + commit * 10})
    writer.close()
    again = 2 if mode == "merge" else 1
    assert sorted(query(db_url, f'SELECT word, n FROM "{name}"')) == sorted(
        [(f"w{i}", i) for i in range(50) if i not in refused]
        + [(f"x{i}", again) for i in range(10)])
    assert sorted(r[0] for r in query(db_url, f'SELECT "offset" FROM "{name}_rejected"')) == \
        sorted(refused)


def test_with_on_error_fail_a_row_to_reject_stops_the_commit(db_url: str) -> None:
    table = Table(unique("failing"), {"word": "text", "n": "bigint"}, key=["word"])
    writer = SinkWriter.open(db_url, table, unique("sink"), 1, halt_as="out")
    writer.add([((P0, 0), ("a", 1)), ((P0, 1), ("b", "two"))])
    with pytest.raises(TopologyHalt, match=r"^\[halt\] out: row failed on the record at "
                                            r"words:0:1: table '.*': column 'n' = 'two' is a "
                                            r"str, not int"):
        writer.commit_through({P0: 1})
    assert writer.view == {} and writer.rows_rejected == 0
    writer.close()
    assert query(db_url, f'SELECT word FROM "{table.name}"') == []


# --------------------------------------------------------------------------- failures


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_a_database_that_is_down_is_retried_with_the_password_redacted(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Sup3r-Secret"
    if kind == "postgresql":
        url = f"postgresql://hailstorm:{secret}@127.0.0.1:{closed_port()}/hailstorm"
        shown = "postgresql://hailstorm:***@127.0.0.1"
    else:
        (tmp_path / "a-file").write_text("not a directory")
        url = f"sqlite:///{tmp_path}/a-file/x.db?password={secret}"
        shown = "password=***"
    _, _, table = wordcount("down")
    caplog.set_level(logging.WARNING, logger="hailstorm.sinks")
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError) as info:
        SinkWriter.open(
            url, table, "sink:word_counts:0", 1,
            retry=RetryPolicy(attempts=3, initial_delay=0.05, multiplier=2), connect_timeout=1,
        )  # fmt: skip
    assert time.monotonic() - started >= 0.15  # 0.05 + 0.1 of backoff
    attempts = [r for r in caplog.records if r.name == "hailstorm.sinks"]
    assert [r.levelname for r in attempts] == ["WARNING", "WARNING", "ERROR"]
    assert "retrying in 0.05 s" in attempts[0].getMessage()
    assert "retrying in 0.10 s" in attempts[1].getMessage()
    for text in [caplog.text, str(info.value), repr(info.value)]:
        assert secret not in text
    assert all(shown in r.getMessage() for r in attempts)
    assert shown in str(info.value) and "(3 attempts)" in str(info.value)
    assert ", unavailable since 20" in str(info.value)


def test_a_dropped_connection_is_retried_and_the_commit_lands_once(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, _, table = merge_topology(unique("dropped"))
    writer = SinkWriter.open(postgres_url, table, unique("sink"), 1)
    assert writer._db is not None and writer._db._pg is not None
    pid = writer._db._pg.info.backend_pid
    query(postgres_url, f"SELECT pg_terminate_backend({pid})")
    caplog.set_level(logging.WARNING, logger="hailstorm.sinks")
    writer.add([((P0, 0), "a"), ((P0, 1), "a")])
    assert writer.commit_through({P0: 1}) == {P0: 1}
    assert any("retrying" in r.getMessage() for r in caplog.records)
    assert table_content(postgres_url, table) == {
        ("a",): {"word": "a", "occurrences": 2, "letters": 2}
    }
    writer.close()


def test_a_commit_whose_acknowledgement_was_lost_is_not_applied_twice(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction committed, then the connection failed before the writer heard of it:
    the retry finds its own progress stored and does not apply the rows again."""
    _, _, table = merge_topology(unique("lost"))
    writer = SinkWriter.open(
        db_url, table, unique("sink"), 1, retry=RetryPolicy(attempts=3, initial_delay=0.01)
    )
    original = Database.transaction
    lost = [True]

    @contextlib.contextmanager
    def acknowledgement_lost(self: Database) -> Iterator[Database]:
        with original(self) as db:
            yield db
        if lost:
            lost.clear()
            raise sqlite3.OperationalError("disk I/O error")  # after COMMIT

    monkeypatch.setattr(Database, "transaction", acknowledgement_lost)
    writer.add([((P0, 0), "a"), ((P0, 1), "a")])
    assert writer.commit_through({P0: 1}) == {P0: 1}
    assert not lost
    writer.close()
    assert table_content(db_url, table) == {("a",): {"word": "a", "occurrences": 2, "letters": 2}}


def test_a_locked_sqlite_database_is_waited_for(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    _, _, table = merge_topology("locked")
    writer = SinkWriter.open(
        url, table, "sink:letters:0", 1,
        retry=RetryPolicy(attempts=10, initial_delay=0.05), connect_timeout=0.2,
    )  # fmt: skip
    blocker = sqlite3.connect(tmp_path / "locked.db", isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.8, lambda: blocker.execute("COMMIT"))
    release.start()
    writer.add([((P0, 0), "x")])
    assert writer.commit_through({P0: 0}) == {P0: 0}
    release.join()
    blocker.close()
    writer.close()
    assert table_content(url, table) == {("x",): {"word": "x", "occurrences": 1, "letters": 1}}


def test_a_private_database_is_created_on_the_server_and_only_once(postgres_url: str) -> None:
    name = unique("private")
    url = create_postgres_database(postgres_url, name)
    assert url.rsplit("/", 1)[1] == name
    assert query(url, "SELECT current_database()") == [(name,)]
    with pytest.raises(SinkError, match=f"cannot create database {name}") as failed:
        create_postgres_database(postgres_url, name)
    password = parse_url(postgres_url).target.split("@")[0].rsplit(":", 1)[-1]
    assert password not in str(failed.value)


def test_statements_queued_for_the_commit_land_with_it_or_roll_back_with_it(db_url: str) -> None:
    """:meth:`Database.at_commit` statements run after the block's own, in the order
    queued, and a failing one rolls back the whole transaction (the connection stays
    usable); :meth:`Database.execute_all` gives each statement's rows in order."""
    name = unique("queued")
    db = Database(db_url)
    try:
        with db.transaction():
            db.execute(f'CREATE TABLE "{name}" (k integer PRIMARY KEY, v integer NOT NULL)')
        with db.transaction():
            db.at_commit(f'UPDATE "{name}" SET v = v * 10', [()])  # after the insert below
            db.execute(f'INSERT INTO "{name}" VALUES (1, 1)')
            db.at_commit(f'INSERT INTO "{name}" VALUES ({db.dialect.placeholders(2)})',
                         [(2, 2), (3, 3)])
        assert query(db_url, f'SELECT k, v FROM "{name}" ORDER BY k') == \
            [(1, 10), (2, 2), (3, 3)]
        with pytest.raises((sqlite3.IntegrityError, psycopg.errors.IntegrityError)), \
                db.transaction():
            db.execute(f'INSERT INTO "{name}" VALUES (4, 4)')
            db.at_commit(f'INSERT INTO "{name}" VALUES ({db.dialect.placeholders(2)})',
                         [(5, 5), (2, 20)])  # the second is a duplicate key
        with db.transaction():
            counted, keys = db.execute_all([(f'SELECT count(*) FROM "{name}"', ()),
                                            (f'SELECT k FROM "{name}" ORDER BY k', ())])
        assert counted == [(3,)] and keys == [(1,), (2,), (3,)]
        with pytest.raises(SinkError, match="needs a transaction"):
            db.at_commit(f'DELETE FROM "{name}"', [()])
    finally:
        db.close()
