"""The example topologies on small inputs whose results were worked out by hand."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from hailstorm import Message, Topology, load_topology, messages, run_model
from hailstorm.testing import avro_round_trip

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def example(name: str) -> Topology:
    return load_topology(str(TOPOLOGIES / f"{name}.py"))


def interleave(*streams: list[Message]) -> list[Message]:
    """Round-robin over the streams (a different arrival order than concatenation)."""
    merged: list[Message] = []
    for i in range(max(len(s) for s in streams)):
        merged += [s[i] for s in streams if i < len(s)]
    return merged


# --------------------------------------------------------------------------- wordcount


def test_wordcount() -> None:
    batch = messages("words", ["The cat, the HAT!", "Cat-nap: 3 cats", b"\xc3\x28", ""])
    batch += messages("words", ["Über über"], partition=1)
    result = run_model(example("wordcount"), batch)

    assert result.messages_processed == 5
    assert [(d.message.offset, d.topic) for d in result.dead_letters] == [
        (2, "wordcount.dead-letter")
    ]
    assert result.table("word_counts") == {
        ("the",): {"word": "the", "count": 2},
        ("cat",): {"word": "cat", "count": 2},
        ("hat",): {"word": "hat", "count": 1},
        ("nap",): {"word": "nap", "count": 1},
        ("cats",): {"word": "cats", "count": 1},
        ("über",): {"word": "über", "count": 2},
    }
    # The bolt emits running totals, each carrying the origin of its line.
    first_line = (("words", 0), 0)
    assert result.sink_rows("word_counts")[:4] == [
        (first_line, ("the", 1)),
        (first_line, ("cat", 1)),
        (first_line, ("the", 2)),
        (first_line, ("hat", 1)),
    ]
    assert result.sink_rows("word_counts")[-1] == ((("words", 1), 0), ("über", 2))
    first, second = result.instance_states("counts")
    assert {**first, **second} == {"the": 2, "cat": 2, "hat": 1, "nap": 1, "cats": 1, "über": 2}
    assert not set(first) & set(second)


def test_wordstream_writes_totals_and_line_sizes_to_topics() -> None:
    topology = example("wordstream")
    result = run_model(topology, messages("words", ["The cat, the HAT!", "cat"]))
    assert result.table("totals") == {
        (b"the",): {"key": b"the", "value": b'{"count":2,"word":"the"}'},
        (b"cat",): {"key": b"cat", "value": b'{"count":2,"word":"cat"}'},
        (b"hat",): {"key": b"hat", "value": b'{"count":1,"word":"hat"}'},
    }
    sizes = topology.node("line_sizes").target
    assert [sizes.decode_value(row["value"]) for row in result.table("line_sizes").values()] \
        == [{"chars": 17, "words": 4}, {"chars": 3, "words": 1}]


# --------------------------------------------------------------------------- trending

M0 = 1_699_999_980  # 1_700_000_000 - 1_700_000_000 % 60
M1 = 1_700_000_040


def test_trending_counts_per_minute() -> None:
    posts: list[Any] = [
        {"ts": 1_700_000_000, "text": "#Python rocks #python #AI"},
        {"ts": 1_700_000_010, "text": "#ai again"},
        {"ts": 1_700_000_039, "text": "#rust, #ai and #python"},
        {"ts": 1_700_000_040, "text": "#rust"},
        "not json",
        {"ts": 1_700_000_045},
    ]
    result = run_model(example("trending"), messages("posts", posts))
    assert [(d.message.offset, d.stage) for d in result.dead_letters] == [
        (4, "decode"),
        (5, "explode"),
    ]
    assert result.table("trending_tags") == {
        (M0, 1): {"minute": M0, "rank": 1, "tag": "ai", "count": 3},
        (M0, 2): {"minute": M0, "rank": 2, "tag": "python", "count": 2},
        (M0, 3): {"minute": M0, "rank": 3, "tag": "rust", "count": 1},
        (M1, 1): {"minute": M1, "rank": 1, "tag": "rust", "count": 1},
    }
    assert result.bolt_state("tag_counts") == {
        (M0, "python"): 2,
        (M0, "ai"): 3,
        (M0, "rust"): 1,
        (M1, "rust"): 1,
    }


def test_trending_keeps_the_top_ten() -> None:
    posts = [
        {"ts": 60, "text": "#a #b #c #d #e #f #g #h #i #j #k #l"},
        {"ts": 61, "text": "#l #k"},
        {"ts": 62, "text": "#l"},
    ]
    result = run_model(example("trending"), messages("posts", posts))
    ranking = [
        (row["rank"], row["tag"], row["count"])
        for _, row in sorted(result.table("trending_tags").items())
    ]
    # l=3, k=2, then the ties at 1 alphabetically; i and j drop out.
    assert ranking == [
        (1, "l", 3),
        (2, "k", 2),
        (3, "a", 1),
        (4, "b", 1),
        (5, "c", 1),
        (6, "d", 1),
        (7, "e", 1),
        (8, "f", 1),
        (9, "g", 1),
        (10, "h", 1),
    ]
    # The same rankings, newest record per [minute, rank], on the trending-tags topic.
    assert {tuple(json.loads(key)): json.loads(row["value"])
            for (key,), row in result.table("trending_topic").items()} == {
        (60, row["rank"]): row for row in result.table("trending_tags").values()}


# --------------------------------------------------------------------------- pageviews


def page_view(page: str, user: str, ts: int, latency_ms: int) -> bytes:
    from topologies.pageviews import PAGE_VIEW_SCHEMA

    buffer = io.BytesIO()
    record = {"page": page, "user": user, "ts": ts, "latency_ms": latency_ms}
    schemaless_writer(buffer, parse_schema(PAGE_VIEW_SCHEMA), record)
    return buffer.getvalue()


def test_pageviews(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TOPOLOGIES.parent))
    views = [
        page_view("/home", "alice", 1_000, 100),
        page_view("/home", "bob", 2_000, 300),
        page_view("/home", "alice", 299_999, 200),
        page_view("/home", "carol", 300_000, 50),
        page_view("/about", "alice", 10_000, 40),
        b"",
        page_view("/home", "dave", 700_000, 10),
        page_view("/about", "erin", 100, 999),  # [0, 5 min) closed at 10 min: late
        page_view("/home", "frank", 300_001, 30),  # [5, 10 min) is open until 15 min
    ]
    result = run_model(example("pageviews"), messages("page-views", views))
    assert result.messages_processed == 9
    assert [d.message.offset for d in result.dead_letters] == [5]
    assert [(d.node, d.topic, d.stage, d.message.offset) for d in result.late] == [
        ("page_windows", "pageviews.late", "late", 7)]
    assert dict(result.late[0].details) == {
        "window_start": "0", "window_end": "300000", "event_time": "100",
        "stream_time": "700000"}
    columns = ("page", "window_start_ms", "views", "users", "mean_latency_ms")
    expected_rows = [
        ("/home", 0, 3, 2, 200.0),
        ("/home", 300_000, 2, 2, 40.0),
        ("/home", 600_000, 1, 1, 10.0),
        ("/about", 0, 1, 1, 40.0),
    ]
    assert result.table("page_stats") == {
        row[:2]: dict(zip(columns, row, strict=True)) for row in expected_rows
    }


# --------------------------------------------------------------------------- visits

MINUTE = 60_000


def test_visits_start_afresh_after_30_idle_minutes_in_any_order() -> None:
    alice = [{"user": "alice", "ts": m * MINUTE} for m in (0, 20, 45, 80, 100)]
    bob = [{"user": "bob", "ts": m * MINUTE} for m in (10, 50)]
    # alice: 0, 20, 45 (gaps 20, 25) make a visit; 80 is 35 min later: a new one with 100.
    # bob: 10, then 40 min idle: 50 starts a new visit.
    expected = {("alice",): {"user_id": "alice", "visit_start_ms": 80 * MINUTE,
                             "last_view_ms": 100 * MINUTE, "views": 2},
                ("bob",): {"user_id": "bob", "visit_start_ms": 50 * MINUTE,
                           "last_view_ms": 50 * MINUTE, "views": 1}}
    a, b = messages("user-views", alice), messages("user-views", bob, partition=1)
    for order in (a + b, b + a, interleave(a, b)):
        result = run_model(example("visits"), order)
        assert result.table("user_visits") == expected
        assert not result.late and not result.dead_letters
        assert result.bolt_state("visits")["alice"] == (
            0, 45 * MINUTE, {"views": 3, "first_ts": 0, "last_ts": 45 * MINUTE},
            80 * MINUTE, 100 * MINUTE,
            {"views": 2, "first_ts": 80 * MINUTE, "last_ts": 100 * MINUTE})


def test_visits_routes_views_30_minutes_behind_their_partition_as_late() -> None:
    views = [{"user": "u", "ts": 60 * MINUTE}, {"user": "u", "ts": 31 * MINUTE},
             {"user": "u", "ts": 30 * MINUTE}, {"user": 7, "ts": 0}]
    result = run_model(example("visits"), messages("user-views", views))
    assert [(d.topic, d.message.offset) for d in result.late] == [("visits.late", 2)]
    assert dict(result.late[0].details) == {
        "window_start": str(30 * MINUTE), "window_end": str(60 * MINUTE),
        "event_time": str(30 * MINUTE), "stream_time": str(60 * MINUTE)}
    assert [d.message.offset for d in result.dead_letters] == [3]
    assert result.table("user_visits")[("u",)]["views"] == 2  # 31 and 60: 29 min apart


# --------------------------------------------------------------------------- window average


def numbers(topic: str, readings: list[tuple[int, float]]) -> list[Message]:
    return messages(topic, [{"ts": ts, "value": value} for ts, value in readings])


A = numbers("numbers-a", [(1, 2), (7, 4), (12, 6)])
B = numbers("numbers-b", [(3, 10), (8, 0), (9, 5)])

# Windows [s, s + 10) every 5 s. By hand:
#   [-5, 5): 2, 10           -> 2 values, mean 6
#   [0, 10): 2, 10, 4, 0, 5  -> 5 values, mean 4.2   (busy: more than 3)
#   [5, 15): 4, 0, 5, 6      -> 4 values, mean 3.75  (busy)
#   [10, 20): 6              -> 1 value,  mean 6
EXPECTED_WINDOWS = {
    (-5,): {"window_start": -5, "window_end": 5, "count": 2, "average": 6.0},
    (0,): {"window_start": 0, "window_end": 10, "count": 5, "average": 4.2},
    (5,): {"window_start": 5, "window_end": 15, "count": 4, "average": 3.75},
    (10,): {"window_start": 10, "window_end": 20, "count": 1, "average": 6.0},
}


@pytest.mark.parametrize(
    "order",
    [A + B, B + A, interleave(A, B), interleave(B, A), list(reversed(A + B))],
    ids=["a-then-b", "b-then-a", "interleaved", "interleaved-b-first", "reversed"],
)
def test_window_average_is_independent_of_arrival_order(order: list[Message]) -> None:
    result = run_model(example("window_average"), order)
    assert result.table("window_averages") == EXPECTED_WINDOWS
    assert result.table("window_counters") == {
        ("busy_windows",): {"name": "busy_windows", "value": 2}
    }
    assert result.bolt_state("busy") == 2


def test_window_average_ignores_numbers_later_than_retention() -> None:
    late = numbers("numbers-a", [(400, 1), (50, 99)])  # 350 s behind the newest: ignored
    bad = [Message("numbers-b", 0, 0, b'{"ts": 1}')]
    result = run_model(example("window_average"), late + bad)
    assert set(result.table("window_averages")) == {(395,), (400,)}
    assert result.table("window_counters") == {}
    assert [(d.node, d.stage) for d in result.dead_letters] == [("numbers_b", "explode")]


# --------------------------------------------------------------------------- snapshots


def example_runs() -> list[tuple[str, list[Message]]]:
    return [
        ("wordcount", messages("words", ["a b a", "c"])),
        ("trending", messages("posts", [{"ts": 60, "text": "#a #b"}, {"ts": 130, "text": "#a"}])),
        ("pageviews", messages("page-views", [page_view("/", "u", 5, 10)])),
        ("window_average", A + B),
        ("top_spenders", messages("events", [{"user": "u1", "amount": 3, "country": "DE"},
                                             {"user": "u2", "amount": 5, "country": "DE"}])),
        ("visits", messages("user-views", [{"user": "u", "ts": 5}, {"user": "u", "ts": 9}])),
    ]


@pytest.mark.parametrize(
    "name", ["wordcount", "trending", "pageviews", "window_average", "top_spenders", "visits"])
def test_every_example_state_survives_an_avro_snapshot(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(TOPOLOGIES.parent))
    batch = dict(example_runs())[name]
    result = run_model(example(name), batch)
    for bolt in result.topology.bolts:
        for state in result.instance_states(bolt.name):
            assert avro_round_trip(bolt.state, state) == state
