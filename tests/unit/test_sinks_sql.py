"""The pure parts of the database sinks: SQL per dialect and mode, table-shape checks, the
row buffer (merge pre-aggregation, append numbering, upsert superseding, progress), URL
redaction, retries, and the export's state-to-row mapping. No database."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Count, HyperLogLog, Max, Mean, Record, Sum, Table, per_key
from hailstorm.export import state_mapping
from hailstorm.protocol.clock import UNBOUNDED, Clock, Partition
from hailstorm.sinks import (
    DatabaseUnavailableError,
    RetryPolicy,
    RowBuffer,
    SinkConfigError,
    is_transient,
    parse_url,
    redact,
    scrub,
    with_retries,
)
from hailstorm.sinks.buffer import advance
from hailstorm.sinks.db import Outage
from hailstorm.sinks.sql import (
    HIDDEN_COLUMNS,
    REWRITTEN_FILLFACTOR,
    PostgresDialect,
    SqliteDialect,
    TableShape,
    mismatch_message,
    shape_differences,
    shape_of,
    sqlite_affinity,
    type_family,
    write_statement,
)
from hailstorm.topology import RowError

PG = PostgresDialect()
LITE = SqliteDialect()
P0: Partition = ("words", 0)
P1: Partition = ("words", 1)

COUNTS = Table("word_counts", {"word": "text", "count": "bigint"}, key=["word"], mode="upsert")
TOTALS = Table(
    "totals",
    {"region": "text", "day": "date", "views": "bigint", "amount": "double precision"},
    key=["region", "day"],
    mode="merge",
)
LOG = Table("events", {"word": "text", "position": "integer"}, mode="append")


# --------------------------------------------------------------------------- redaction


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://app:s3cret@db:5432/prod", "postgresql://app:***@db:5432/prod"),
        ("postgresql://app:s3cr%40t@db/prod?sslmode=require", "postgresql://app:***@db/prod?sslmode=require"),
        ("postgresql://app:p@ss/w:rd@db/prod", "postgresql://app:***@db/prod"),
        ("postgresql://app@db/prod", "postgresql://app@db/prod"),
        ("postgresql://db/prod?user=app&password=hunter2", "postgresql://db/prod?user=app&password=***"),
        ("postgres://:only@db/x", "postgres://:***@db/x"),
        ("sqlite:///hailstorm.db", "sqlite:///hailstorm.db"),
        ("host=db password=hunter2 dbname=x", "host=db password=*** dbname=x"),
    ],
)  # fmt: skip
def test_redact(url: str, expected: str) -> None:
    assert redact(url) == expected


def test_scrub_masks_the_password_anywhere_in_a_message() -> None:
    url = "postgresql://app:s3cr%40t@db/prod"
    text = 'FATAL: bad "s3cr@t" / s3cr%40t at postgresql://other:zzz@h/x'
    cleaned = scrub(text, url)
    assert "s3cr" not in cleaned and "zzz" not in cleaned
    assert cleaned.count("***") == 3


def test_parse_url() -> None:
    assert parse_url("postgresql://u:p@h/db").kind == "postgresql"
    assert parse_url("sqlite:///rel/x.db").target == "rel/x.db"
    assert parse_url("sqlite:////abs/x.db").target == "/abs/x.db"
    assert str(parse_url("postgres://u:p@h/db")) == "postgres://u:***@h/db"
    with pytest.raises(SinkConfigError) as info:
        parse_url("mysql://u:topsecret@h/db")
    assert "topsecret" not in str(info.value) and "sqlite:///" in str(info.value)


# --------------------------------------------------------------------------- SQL


def test_upsert_statements() -> None:
    assert write_statement(PG, COUNTS) == (
        'INSERT INTO "word_counts" ("word", "count") VALUES (%s, %s) '
        'ON CONFLICT ("word") DO UPDATE SET "count" = excluded."count"'
    )
    assert write_statement(LITE, COUNTS) == (
        'INSERT INTO "word_counts" ("word", "count") VALUES (?, ?) '
        'ON CONFLICT ("word") DO UPDATE SET "count" = excluded."count"'
    )


def test_merge_statements_add_to_the_stored_values() -> None:
    sql = write_statement(PG, TOTALS)
    assert sql.startswith(
        'INSERT INTO "totals" ("region", "day", "views", "amount") VALUES (%s, %s, %s, %s) '
    )
    assert sql.endswith(
        'ON CONFLICT ("region", "day") DO UPDATE SET '
        '"views" = "totals"."views" + excluded."views", '
        '"amount" = "totals"."amount" + excluded."amount"'
    )
    staged = write_statement(PG, TOTALS, source="_hs_stage_totals")
    assert ('SELECT "region", "day", "views", "amount" FROM "_hs_stage_totals" '
            'ORDER BY "region", "day" ON CONFLICT') in staged
    assert 'WHERE true ORDER BY "region", "day" ON CONFLICT' in \
        write_statement(LITE, TOTALS, source="stage")
    assert 'ORDER BY "_hs_topic", "_hs_partition", "_hs_offset", "_hs_seq" ON CONFLICT' in \
        write_statement(PG, LOG, source="stage")


def test_append_statements_ignore_duplicate_origins() -> None:
    assert write_statement(LITE, LOG) == (
        'INSERT INTO "events" ("word", "position", "_hs_topic", "_hs_partition", '
        '"_hs_offset", "_hs_seq") VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT ("_hs_topic", '
        '"_hs_partition", "_hs_offset", "_hs_seq") DO NOTHING'
    )


def test_key_only_tables_do_nothing_on_conflict() -> None:
    seen = Table("seen", {"word": "text"}, key=["word"], mode="upsert")
    assert write_statement(PG, seen).endswith('ON CONFLICT ("word") DO NOTHING')


def test_create_table_per_mode() -> None:
    assert PG.create_table(shape_of(COUNTS)) == (
        'CREATE TABLE IF NOT EXISTS "word_counts" ("word" text NOT NULL, "count" bigint, '
        'PRIMARY KEY ("word")) WITH (fillfactor = 50)'
    )
    assert LITE.create_table(shape_of(COUNTS)).endswith('PRIMARY KEY ("word"))')
    assert "fillfactor" not in PG.create_table(shape_of(LOG))  # rows are never rewritten
    append = LITE.create_table(shape_of(LOG))
    assert '"_hs_offset" bigint NOT NULL' in append
    hidden = '"_hs_topic", "_hs_partition", "_hs_offset", "_hs_seq"'
    assert f'CONSTRAINT "events_hs_origin" UNIQUE ({hidden})' in append
    assert "PRIMARY KEY" not in append
    json_table = TableShape("docs", {"id": "bigint", "body": "jsonb", "raw": "bytea"}, ("id",))
    assert '"body" text, "raw" blob' in LITE.create_table(json_table)
    assert '"body" jsonb, "raw" bytea' in PG.create_table(json_table)


def test_fillfactor_is_a_storage_choice_not_part_of_the_shape() -> None:
    assert shape_of(COUNTS).fillfactor == REWRITTEN_FILLFACTOR
    assert shape_of(COUNTS) == TableShape("word_counts", {"word": "text", "count": "bigint"},
                                          ("word",))
    with pytest.raises(ValueError, match="fillfactor"):
        TableShape("t", {"a": "text"}, fillfactor=5)


def test_progress_statements_lock_in_postgres_only() -> None:
    assert PG.lock_sentinel().endswith("FOR UPDATE")
    assert "FOR UPDATE" not in LITE.lock_sentinel()
    for dialect in (PG, LITE):
        ddl = dialect.create_progress_table()
        assert 'PRIMARY KEY ("sink", "topic", "partition")' in ddl
        assert '"offset" bigint NOT NULL' in ddl
        assert "ON CONFLICT" in dialect.write_progress()


# --------------------------------------------------------------------------- shapes


def test_type_families_and_compatibility() -> None:
    assert type_family("character varying(20)") == type_family("text") == "text"
    assert type_family("timestamp with time zone") == "timestamptz"
    assert PG.compatible("integer", "bigint") and not PG.compatible("bigint", "integer")
    assert PG.compatible("numeric(10,2)", "numeric") and not PG.compatible("bigint", "text")
    assert PG.compatible("jsonb", "json")
    assert sqlite_affinity("double precision") == "REAL"
    assert sqlite_affinity("varchar(3)") == "TEXT" and sqlite_affinity("boolean") == "NUMERIC"
    assert LITE.compatible("bigint", "INTEGER") and not LITE.compatible("bigint", "TEXT")
    assert LITE.compatible("jsonb", "text")


def test_shape_differences_name_each_problem() -> None:
    expected = shape_of(COUNTS)
    same = TableShape("word_counts", {"count": "bigint", "word": "text"}, ("word",))
    assert shape_differences(PG, expected, same) == []
    other = TableShape("word_counts", {"word": "text", "count": "text", "extra": "integer"}, ())
    problems = shape_differences(PG, expected, other)
    assert problems == [
        "column 'count' is text in the database but the sink writes bigint",
        "column 'extra' (integer) is not one the sink writes",
        "the primary key is none but should be (word)",
    ]
    message = mismatch_message(expected, "postgresql://u:***@h/db", problems)
    assert message.startswith("table 'word_counts' in postgresql://u:***@h/db does not match")
    assert "Fix: hailstorm never alters an existing table" in message
    assert 'ALTER TABLE "word_counts" RENAME TO "word_counts_old"' in message


def test_append_tables_need_the_hidden_unique_key() -> None:
    expected = shape_of(LOG)
    without = TableShape("events", dict(expected.columns), (), ())
    assert shape_differences(LITE, expected, without) == [
        "there is no unique constraint on (_hs_topic, _hs_partition, _hs_offset, _hs_seq)"
    ]
    missing = TableShape("events", {"word": "text", "position": "integer"}, (), ())
    problems = shape_differences(LITE, expected, missing)
    assert "column '_hs_seq' (integer) is missing" in problems
    assert set(HIDDEN_COLUMNS) <= set(expected.columns)


# --------------------------------------------------------------------------- the buffer


def origin(p: Partition, offset: int) -> tuple[Partition, int]:
    return (p, offset)


def test_merge_pre_aggregates_a_batch_per_key() -> None:
    table = Table("t", {"word": "text", "n": "bigint", "letters": "bigint"}, ["word"], "merge")
    buffer = RowBuffer(table)
    for p, offset, word in [(P0, 0, "a"), (P0, 1, "bb"), (P1, 0, "a"), (P0, 2, "a"), (P1, 1, "a")]:
        buffer.add(p, offset, (word, 1, len(word)))
    selection = buffer.select({P0: 1, P1: 0})
    assert selection.rows == [("a", 2, 2), ("bb", 1, 2)]
    assert selection.target == {P0: 1, P1: 0} and selection.received == 3
    buffer.confirm(selection)
    assert len(buffer) == 2
    assert buffer.select({P0: 5, P1: 5}).rows == [("a", 2, 2)]


def test_merge_and_append_skip_rows_at_or_below_the_progress() -> None:
    for table in (Table("t", {"w": "text", "n": "bigint"}, ["w"], "merge"), LOG):
        buffer = RowBuffer(table, floor={P0: 4})
        buffer.add(P0, 3, ("x", 1))
        buffer.add(P0, 4, ("x", 1))
        buffer.add(P0, 5, ("x", 1))
        assert len(buffer) == 1
        buffer.resync({P0: 5})
        assert len(buffer) == 0 and buffer.select({P0: 9}).rows == []


def test_append_numbers_rows_of_one_origin_in_arrival_order() -> None:
    buffer = RowBuffer(LOG)
    buffer.add(P0, 7, ("b", 1), sender="bolt:x:1")
    buffer.add(P0, 7, ("a", 0), sender="bolt:x:0")
    buffer.add(P1, 2, ("z", 0), sender="bolt:x:0")
    buffer.add(P0, 7, ("c", 2), sender="bolt:x:0")
    rows = buffer.select({P0: 7, P1: 2}).rows
    assert rows == [
        ("a", 0, "words", 0, 7, 0),
        ("c", 2, "words", 0, 7, 1),  # same sender: arrival order
        ("b", 1, "words", 0, 7, 2),  # senders in a fixed order, whatever the interleaving
        ("z", 0, "words", 1, 2, 0),
    ]


def test_upsert_keeps_the_latest_arrival_per_key_and_reapplies_old_rows() -> None:
    buffer = RowBuffer(COUNTS, floor={P0: 10, P1: 10})
    buffer.add(P1, 9, ("w", 5))  # arrives first, from a partition the LWM holds back
    buffer.add(P0, 3, ("w", 6))  # arrives later: the newer total
    buffer.add(P0, 4, ("v", 1))
    selection = buffer.select({P0: 3, P1: 8})
    assert selection.rows == [("w", 6)]  # at or below the progress, applied anyway
    buffer.confirm(selection)
    assert buffer.select({P0: 20, P1: 20}).rows == [("v", 1)]  # w=5 never overwrites w=6


P2: Partition = ("words", 2)


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(st.lists(st.tuples(st.sampled_from([P0, P1, P2]), st.integers(0, 30),
                                        st.sampled_from("abcdef"), st.integers(0, 9)),
                              max_size=12), max_size=6),
    lwm=st.dictionaries(st.sampled_from([P0, P1]), st.integers(-1, 30)),
)
def test_an_upsert_commit_takes_the_latest_row_of_each_key_at_or_below_the_mark(
    batches: list[list[tuple[Partition, int, str, int]]], lwm: Clock,
) -> None:
    """Batches (``add_many``) keep the last arrival per key; a selection takes those whose
    origin is at or below the mark (a partition the mark lacks: none), in arrival order of
    the keys, each with its origin."""
    buffer = RowBuffer(COUNTS)
    latest: dict[str, tuple[Partition, int, tuple[str, int]]] = {}
    for batch in batches:
        buffer.add_many([p for p, _o, _w, _n in batch], [o for _p, o, _w, _n in batch],
                        [(w, n) for _p, _o, w, n in batch])
        for p, o, w, n in batch:
            latest[w] = (p, o, (w, n))
    selection = buffer.select(lwm)
    taken = [(p, o, row) for p, o, row in latest.values() if o <= lwm.get(p, -1)]
    assert selection.rows == [row for _p, _o, row in taken]
    origins = [(p, o) for p, o, _row in taken]
    assert selection.origins == origins and list(selection.origins) == origins
    half = len(origins) // 2  # as a refused row is looked for, in halves
    assert selection.origins[half:] == origins[half:] and len(selection.origins) == len(origins)
    assert [selection.origins[i] for i in range(len(origins))] == origins
    buffer.confirm(selection)
    assert len(buffer) == len(latest) - len(taken)


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(st.tuples(st.sampled_from([P0, P1, P2]), st.integers(0, 30),
                              st.sampled_from("abcdef"), st.integers(0, 9)), max_size=15),
    after=st.lists(st.tuples(st.sampled_from([P0, P1, P2]), st.integers(0, 40),
                             st.sampled_from("abcdefgh"), st.integers(0, 9)), max_size=8),
    lwm=st.dictionaries(st.sampled_from([P0, P1]), st.integers(-1, 30)),
)
def test_a_commit_forgets_what_it_selected_and_keeps_what_arrived_since(
    before: list[tuple[Partition, int, str, int]], after: list[tuple[Partition, int, str, int]],
    lwm: Clock,
) -> None:
    """Rows added between a selection and its confirm (a sink reads on while its commit
    runs) stay, whatever their origin, in arrival order of the keys: a key's row added
    since replaces the selected one (the last arrival wins). The selected rows not
    replaced are forgotten, and every key above the mark stays."""
    buffer = RowBuffer(COUNTS)
    latest: dict[str, tuple[Partition, int, tuple[str, int]]] = {}
    for rows in (before, after):
        if rows is after:
            selection = buffer.select(lwm)
            selected = {w for w, (p, o, _row) in latest.items() if o <= lwm.get(p, -1)}
        buffer.add_many([p for p, _o, _w, _n in rows], [o for _p, o, _w, _n in rows],
                        [(w, n) for _p, _o, w, n in rows])
        for p, o, w, n in rows:
            latest[w] = (p, o, (w, n))
    buffer.confirm(selection)
    added_since = {w for _p, _o, w, _n in after}
    kept = [entry for w, entry in latest.items() if w not in selected or w in added_since]
    assert len(buffer) == len(kept)
    everything = buffer.select(dict.fromkeys([P0, P1, P2], 99))
    assert everything.rows == [row for _p, _o, row in kept]
    assert everything.origins == [(p, o) for p, o, _row in kept]


def test_a_commit_with_nothing_arrived_since_forgets_exactly_its_selection() -> None:
    """With no row added between a selection and its confirm, the rows it selected are
    forgotten (by their keys) and every row above its mark stays."""
    buffer = RowBuffer(COUNTS)
    buffer.add_many([P0, P1, P0, P1], [1, 2, 3, 4], [("a", 1), ("b", 2), ("c", 3), ("d", 4)])
    selection = buffer.select({P0: 3, P1: 2})
    assert selection.rows == [("a", 1), ("b", 2), ("c", 3)]
    buffer.confirm(selection)
    assert len(buffer) == 1
    assert buffer.select({P0: 99, P1: 99}).rows == [("d", 4)]


def test_a_batch_that_stops_part_way_keeps_what_it_added_for_the_next_commit() -> None:
    """A key whose hash fails with something else than TypeError stops ``add_many`` part
    way: the rows added before it stay for the next commit, not cleared by the commit
    that was selected before them."""
    buffer = RowBuffer(Table("blobs", {"k": "bytea", "n": "bigint"}, key=["k"],
                             mode="upsert"))
    buffer.add_many([P0], [0], [(b"a", 1)])
    selection = buffer.select({P0: 0})
    with pytest.raises(ValueError):  # a writable memoryview is not hashable
        buffer.add_many([P0, P0], [5, 6], [(b"a", 9), (memoryview(bytearray(b"b")), 2)])
    buffer.confirm(selection)
    assert buffer.select({P0: 9}).rows == [(b"a", 9)]


@pytest.mark.parametrize("mode", ["upsert", "merge", "append"])
def test_tuples_that_are_no_row_are_rejected_once(mode: str) -> None:
    table = Table("t", {"w": "text", "n": "bigint"}, key=[] if mode == "append" else ["w"],
                  mode=mode)  # type: ignore[arg-type]
    buffer = RowBuffer(table, floor={P0: 1})
    buffer.add_many([P0, P0, P0, P1], [1, 2, 3, 0], [("x",), ("y", 2, 3), ("z",), ("b", 2)])
    assert buffer.rejected == 2  # ("x",) at offset 1 is within the progress: recorded before
    selection = buffer.select({P0: 2, P1: 0})
    assert [(r.origin, r.stage, r.record) for r in selection.rejected] == [((P0, 2), "row",
                                                                            "('y', 2, 3)")]
    assert "has 3 values but the table has 2 columns" in selection.rejected[0].error
    assert selection.origins == [(P1, 0)] and len(selection.rows) == 1
    buffer.confirm(selection)
    assert buffer.rejected == 1  # (P0, 3) waits for a commit that covers it
    buffer.resync({P0: 3})  # another writer committed it
    assert buffer.rejected == 0 and buffer.select({P0: 9, P1: 9}).rejected == []


@pytest.mark.parametrize(("columns", "key", "mode", "row", "problem"), [
    ({"w": "text", "n": "bigint"}, ["w"], "upsert", ("a", True), "is a bool, not int"),
    ({"w": "text", "n": "bigint"}, ["w"], "upsert", ("a", 2**63), "out of the range"),
    ({"w": "text", "n": "integer"}, ["w"], "upsert", ("a", 2**31), "out of the range"),
    ({"w": "text", "n": "bigint"}, ["w"], "upsert", (None, 1), "is null"),
    ({"w": "text", "n": "bigint"}, ["w"], "upsert", (3, 1), "is a int, not str"),
    ({"w": "text", "n": "bigint"}, ["w"], "merge", ("a", None), "is null"),
    ({"w": "text", "n": "double precision"}, ["w"], "merge", ("a", "1"), "is a str"),
    ({"w": "json", "n": "bigint"}, ["w"], "upsert", ({"a": 1}, 1), "is a dict, not str"),
])
def test_values_their_column_cannot_hold_are_row_errors(
    columns: dict[str, str], key: list[str], mode: str, row: tuple[Any, ...], problem: str
) -> None:
    table = Table("t", columns, key=key, mode=mode)  # type: ignore[arg-type]
    with pytest.raises(RowError, match=problem):
        table.to_row(row)
    assert not table.rows_fit([row])
    assert table.to_row(row, check=False) == dict(zip(columns, row, strict=True))


def test_rows_that_fit_pass_a_batch_at_a_time() -> None:
    table = Table("t", {"w": "text", "n": "bigint", "avg": "double precision",
                        "seen": "timestamp"}, key=["w"])
    rows = [("a", 1, 1.5, None), ("b", -(2**63), 2, "2026-11-23 10:00:00")]
    assert table.rows_fit(rows)
    for row in rows:
        table.to_row(row)
    unhashable = Table("t", {"w": "json", "n": "bigint"}, key=["w", "n"])
    with pytest.raises(RowError, match="is a list, not str"):
        unhashable.to_row((["x"], 1))


def test_a_batch_with_a_value_its_column_cannot_hold_rejects_only_that_tuple() -> None:
    buffer = RowBuffer(COUNTS)
    buffer.add_many([P0, P0, P0], [1, 2, 3], [("a", 1), ("b", 1.5), ("c", 3)])
    selection = buffer.select({P0: 3})
    assert selection.rows == [("a", 1), ("c", 3)]
    assert [(r.origin, r.record) for r in selection.rejected] == [((P0, 2), "('b', 1.5)")]


def test_selection_origins_follow_the_rows() -> None:
    merge = RowBuffer(Table("t", {"w": "text", "n": "bigint"}, ["w"], "merge"))
    merge.add_many([P0, P1, P0], [4, 2, 6], [("b", 1), ("a", 1), ("b", 1)])
    selection = merge.select({P0: 9, P1: 9})
    assert list(zip(selection.rows, selection.origins, strict=True)) == [
        (("a", 1), (P1, 2)), (("b", 2), (P0, 6))]  # merged: the last tuple's origin
    upsert = RowBuffer(COUNTS)
    upsert.add_many([P0, P1], [4, 2], [("b", 1), ("a", 1)])
    selection = upsert.select({P0: 9, P1: 9})
    assert list(zip(selection.rows, selection.origins, strict=True)) == [
        (("b", 1), (P0, 4)), (("a", 1), (P1, 2))]


def test_progress_never_moves_backwards() -> None:
    assert advance({P0: 5, P1: 2}, {P0: 3, P1: 4}) == {P0: 5, P1: 4}
    assert advance({}, {P0: -1}) == {}
    assert advance({P0: 1}, {P1: UNBOUNDED}) == {P0: 1}


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    rows=st.lists(
        st.tuples(st.sampled_from([P0, P1]), st.sampled_from("abc"), st.integers(0, 3)),
        max_size=40,
    ),
)
def test_merge_commits_with_crashes_add_every_delta_exactly_once(
    data: st.DataObject, rows: list[tuple[Partition, str, int]]
) -> None:
    """A model of the writer: commits apply a selection and store its target atomically;
    a crash loses the buffer, and the replay starts from the stored progress or earlier."""
    table = Table("t", {"w": "text", "n": "bigint"}, ["w"], "merge")
    messages: dict[Partition, list[tuple[str, int]]] = {P0: [], P1: []}
    for p, word, n in rows:
        messages[p].append((word, n))
    expected: dict[str, int] = {}
    for _, word, n in rows:
        expected[word] = expected.get(word, 0) + n
    stored: dict[str, int] = {}
    progress: Clock = {}
    replay_from: Clock = {}
    for incarnation in range(4):  # up to three crash; the last one runs to the end
        buffer = RowBuffer(table, floor=progress)
        lwm: Clock = dict(replay_from)
        queues = {
            p: [(p, o, row) for o, row in enumerate(messages[p]) if o > replay_from.get(p, -1)]
            for p in (P0, P1)
        }
        stream = []  # a random interleaving that keeps each partition's order
        while any(queues.values()):
            p = data.draw(st.sampled_from([p for p in (P0, P1) if queues[p]]))
            stream.append(queues[p].pop(0))
        crash_at = data.draw(st.integers(0, len(stream))) if incarnation < 3 else len(stream)
        for i, (p, offset, row) in enumerate(stream):
            if i == crash_at:
                break
            buffer.add(p, offset, row)
            lwm[p] = offset
            if data.draw(st.booleans()):
                selection = buffer.select(lwm)
                for word, n in selection.rows:
                    stored[word] = stored.get(word, 0) + n
                progress = selection.target
                buffer.confirm(selection)
        else:
            selection = buffer.select({P0: 99, P1: 99})
            for word, n in selection.rows:
                stored[word] = stored.get(word, 0) + n
            progress = selection.target
            break
        replay_from = data.draw(st.sampled_from([{}, progress]))
    else:
        raise AssertionError("the last incarnation never crashes")
    assert stored == expected


# --------------------------------------------------------------------------- retries


def test_retry_policy_backs_off_exponentially() -> None:
    policy = RetryPolicy(attempts=5, initial_delay=0.5, max_delay=3.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    assert policy.gives_up(5) and not policy.gives_up(4)


def test_a_policy_without_a_limit_waits_any_outage_out_at_its_longest_delay() -> None:
    forever = RetryPolicy(attempts=None, initial_delay=0.25, max_delay=10.0)
    assert not any(forever.gives_up(n) for n in (1, 8, 10_000, 10**9))
    assert [forever.delay(n) for n in (1, 2, 6, 7, 10_000, 10**9)] == [
        0.25, 0.5, 8.0, 10.0, 10.0, 10.0]


def test_with_retries_reports_the_outage_and_its_end() -> None:
    """An outage longer than any finite policy: reported on every failure with the same
    start, then None once an attempt succeeds."""
    import psycopg

    seen: list[Outage | None] = []

    def op(attempt: int) -> str:
        if attempt < 20:
            raise psycopg.OperationalError("connection refused")
        return "done"

    result = with_retries(op, what="sink x", url="postgresql://u:secret@h/db",
                          policy=RetryPolicy(attempts=None, initial_delay=0, max_delay=0),
                          on_outage=seen.append)
    assert result == "done" and seen[-1] is None
    outages = [o for o in seen if o is not None]
    assert len(outages) == 19 and len({o.since for o in outages}) == 1
    assert all("secret" not in o.what + o.error for o in outages)
    assert outages[-1].describe().startswith("the database at postgresql://u:***@h/db, "
                                             "unavailable since 20")


def test_transient_errors() -> None:
    import psycopg

    assert is_transient(sqlite3.OperationalError("database is locked"))
    assert is_transient(sqlite3.OperationalError("unable to open database file"))
    assert not is_transient(sqlite3.OperationalError("no such table: x"))
    assert is_transient(psycopg.OperationalError("connection refused"))
    # Refused at connection time (libpq gives no SQLSTATE): waiting would not help.
    for refusal in ('connection failed: connection to server at "127.0.0.1", port 5432 '
                    'failed: FATAL:  password authentication failed for user "hailstorm"',
                    'FATAL:  database "nope" does not exist',
                    'FATAL:  no pg_hba.conf entry for host "10.0.0.9"'):
        assert not is_transient(psycopg.OperationalError(refusal))
    assert is_transient(psycopg.OperationalError(
        "FATAL:  the database system is starting up"))
    assert is_transient(psycopg.OperationalError("terminating connection due to "
                                                 "administrator command"))
    assert not is_transient(psycopg.errors.UndefinedTable("no such table"))
    assert not is_transient(ValueError("x"))


def test_with_retries_logs_each_attempt_redacted_then_gives_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = "postgresql://app:hunter2@db.example:5432/prod"
    calls: list[int] = []
    resets: list[int] = []

    def op(attempt: int) -> None:
        calls.append(attempt)
        raise sqlite3.OperationalError("database is locked (password hunter2)")

    caplog.set_level(logging.WARNING, logger="hailstorm.sinks")
    with pytest.raises(DatabaseUnavailableError) as info:
        with_retries(
            op, what="sink s", url=url, policy=RetryPolicy(3, 0.001, 0.002),
            reset=lambda: resets.append(1),
        )  # fmt: skip
    assert calls == [1, 2, 3] and len(resets) == 3
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING", "ERROR"]
    assert "attempt 2 of 3" in caplog.records[1].getMessage()
    for text in [*(r.getMessage() for r in caplog.records), str(info.value)]:
        assert "hunter2" not in text and "app:***@db.example" in text


def test_with_retries_lets_other_errors_through_at_once() -> None:
    calls: list[int] = []

    def op(attempt: int) -> int:
        calls.append(attempt)
        if attempt < 2:
            raise sqlite3.OperationalError("database is busy")
        return 42

    assert with_retries(op, what="x", url="sqlite:///x", policy=RetryPolicy(3, 0.0)) == 42

    def broken(_: int) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        with_retries(broken, what="x", url="sqlite:///x", policy=RetryPolicy(3, 0.0))


# --------------------------------------------------------------------------- export rows


def columns(mapping: Any) -> dict[str, str]:
    return dict(mapping.key_columns + mapping.value_columns)


@pytest.mark.parametrize(
    ("monoid", "expected", "state", "rows"),
    [
        (per_key(Count()), {"key": "text", "value": "bigint"}, {"a": 2}, [("a", 2)]),
        (per_key(Sum("double"), key_type="long"), {"key": "bigint", "value": "double precision"},
         {7: 1.5}, [(7, 1.5)]),
        (per_key(Max("string"), key_type=("string", "long")),
         {"key_0": "text", "key_1": "bigint", "value": "text"}, {("fr", 3): "z"},
         [("fr", 3, "z")]),
        (per_key(Mean()), {"key": "text", "value": "text"}, {"a": (3.0, 2)}, [("a", "[3.0,2]")]),
        (per_key(Record({"views": Count(), "mean": Mean()})),
         {"key": "text", "views": "bigint", "mean": "text"},
         {"p": {"views": 4, "mean": (1.0, 1)}}, [("p", 4, "[1.0,1]")]),
        (Sum(), {"value": "bigint"}, 12, [(12,)]),
    ],
)  # fmt: skip
def test_state_mapping(
    monoid: Any, expected: dict[str, str], state: Any, rows: list[tuple[Any, ...]]
) -> None:
    mapping = state_mapping(monoid)
    assert columns(mapping) == expected
    assert list(mapping.rows(state)) == rows
    assert mapping.shape("t").primary_key == tuple(c for c, _ in mapping.key_columns)


def test_state_mapping_of_sketches_is_json_text() -> None:
    hll = HyperLogLog(4)
    mapping = state_mapping(per_key(hll))
    [(key, text)] = list(mapping.rows({"k": hll.lift("x")}))
    assert key == "k" and isinstance(text, str) and text.startswith('"')
