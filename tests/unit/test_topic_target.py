"""The Topic sink target: validation, encoding, buffering and the model. Pure."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Count, Topic, Topology, TopologyError, messages, per_key, run_model
from hailstorm.sinks.buffer import RowBuffer
from hailstorm.sinks.topic import parse_progress, progress_topic, progress_value
from hailstorm.topic import encode_key
from hailstorm.topology import RowError

P0, P1 = ("in", 0), ("in", 1)
SCHEMA = {"type": "record", "name": "Total",
          "fields": [{"name": "word", "type": "string"}, {"name": "count", "type": "long"}]}


def totals(**options: Any) -> Topic:
    return Topic("word-totals", key=lambda t: t[0], **options)


@pytest.mark.parametrize(("options", "message"), [
    ({"name": "bad topic"}, "not a valid Kafka topic name"),
    ({"mode": "merge"}, "mode 'merge' is not one of upsert, append"),
    ({"key": None}, "upsert mode needs key="),
    ({"key": 3}, "key must be a function"),
    ({"encoder": "xml"}, "encoder 'xml' is not one of"),
    ({"encoder": "avro"}, "the avro encoder needs schema="),
    ({"encoder": "avro", "schema": {"type": "record", "name": "x", "fields": [
        {"name": "a", "type": "nope"}]}}, "the Avro schema is not valid"),
    ({"schema": SCHEMA}, "schema= is used by the avro encoder only"),
    ({"partitioner": "random"}, "partitioner 'random' is not one of"),
    ({"partitions": 0}, "partitions must be an int >= 1"),
])
def test_a_topic_is_validated_when_the_topology_loads(options: dict[str, Any],
                                                      message: str) -> None:
    arguments: dict[str, Any] = {"name": "word-totals", "key": lambda t: t[0], **options}
    with pytest.raises(TopologyError, match=message):
        Topic(**arguments)


def test_json_values_are_canonical_and_keys_are_plain() -> None:
    topic = totals(value=lambda t: {"word": t[0], "count": t[1]})
    value = '{"count":3,"word":"été"}'.encode()
    assert topic.record_of(("été", 3)) == ("été".encode(), value, None, None)
    assert encode_key(b"raw") == b"raw"
    assert encode_key(None) is None
    assert encode_key(("a", 1)) == encode_key(["a", 1]) == b'["a",1]'
    assert encode_key(7) == b"7"


class Colour(enum.IntEnum):
    RED = 1


flat = (st.none() | st.booleans() | st.integers()
        | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
        | st.text(st.characters(codec="utf-8")) | st.text()
        | st.floats(allow_nan=True, allow_infinity=True) | st.just(Colour.RED))
json_values = st.recursive(
    flat, lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.text(max_size=5) | st.integers(0, 3), inner, max_size=4),
    max_leaves=12)


def standard_json(value: Any) -> str:
    """What the standard library makes of ``value`` as canonical JSON, or that it fails."""
    try:
        return repr(json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False,
                               ensure_ascii=False).encode("utf-8"))
    except Exception:  # any refusal: compared as "failed"
        return "failed"


@given(json_values)
def test_json_values_have_the_standard_librarys_canonical_bytes(value: Any) -> None:
    """orjson writes the flat values it is given exactly as the standard library does, and
    anything else is the standard library's: every value, the same bytes or a RowError."""
    topic = Topic("t", mode="append")
    try:
        written = repr(topic.encode_value(value))
    except RowError:
        written = "failed"
    assert written == standard_json(value)


def test_avro_values_round_trip_through_the_schema() -> None:
    topic = totals(value=lambda t: {"word": t[0], "count": t[1]}, encoder="avro", schema=SCHEMA)
    _key, value, _partition, _headers = topic.record_of(("a", 2))
    assert topic.decode_value(value) == {"word": "a", "count": 2}
    with pytest.raises(RowError, match="cannot encode"):
        topic.record_of(("a", "two"))


@pytest.mark.parametrize(("topic", "t", "message"), [
    (Topic("t", key=lambda t: t[0], encoder="bytes"), ("a", 1), "the bytes encoder needs bytes"),
    (Topic("t", key=lambda t: t["missing"]), {"a": 1}, "the key failed: KeyError"),
    (Topic("t", key=lambda t: None), ("a", 1), "an upsert record needs a key"),
    (Topic("t", mode="append", value=lambda t: 1 / 0), 1, "the value failed"),
    (Topic("t", key=lambda t: t, value=lambda t: float("nan")), 1, "cannot encode"),
    (Topic("t", mode="append", partitioner=lambda t: -1), 1, "not a partition number"),
])
def test_tuples_that_are_no_record_are_row_errors(topic: Topic, t: Any, message: str) -> None:
    with pytest.raises(RowError, match=message):
        topic.record_of(t)


def test_a_partitioner_function_picks_the_partition() -> None:
    topic = Topic("t", mode="append", partitioner=lambda t: t % 3)
    assert topic.record_of(5) == (None, b"5", 2, None)


def test_progress_records_round_trip_and_name_their_topic() -> None:
    assert progress_topic("wordcount", "totals") == "wordcount.totals.progress"
    assert parse_progress(progress_value(4, {P0: 10, P1: -1})) == (4, {P0: 10, P1: -1})
    with pytest.raises(ValueError, match="not a progress record"):
        parse_progress(json.dumps([1]).encode())


def test_upsert_buffers_keep_the_latest_arrival_per_record_key() -> None:
    buffer = RowBuffer(totals(), floor={P0: 10})
    buffer.add_many([P0, P1, P0], [3, 1, 12], [("a", 1), ("b", 1), ("a", 2)])
    selection = buffer.select({P0: 12, P1: 0})
    assert selection.rows == [(b"a", b'["a",2]', None, None)]
    assert selection.origins == [(P0, 12)]
    buffer.confirm(selection)
    assert buffer.select({P0: 12, P1: 1}).rows == [(b"b", b'["b",1]', None, None)]


def test_append_buffers_drop_records_at_or_below_the_progress_and_number_the_rest() -> None:
    buffer = RowBuffer(Topic("log", mode="append"), floor={P0: 4})
    buffer.add_many([P0, P0, P0, P0], [4, 5, 5, 6], ["x", "y", "z", "w"])
    selection = buffer.select({P0: 5})
    assert selection.rows == [(None, b'"y"', None, None, "in", 0, 5, 0),
                              (None, b'"z"', None, None, "in", 0, 5, 1)]
    buffer.add(P0, 7, object())  # not JSON: rejected, once
    assert [r.stage for r in buffer.select({P0: 7}).rejected] == ["row"]


def test_the_model_keeps_the_newest_record_per_key_and_every_appended_one() -> None:
    topology = Topology("t")
    words = topology.spout("words", topic="in", decoder="text", explode=str.split)
    counts = topology.bolt("counts", inputs=[words], key=lambda w: w, state=per_key(Count()),
                           lift=lambda w: 1, emit=lambda w, n: [(w, n)])
    topology.sink("totals", inputs=[counts], target=totals())
    topology.sink("log", inputs=[words], target=Topic("log", mode="append",
                                                      value=lambda w: w.upper()))
    result = run_model(topology, messages("in", ["a b a", "b"]))
    assert result.table("totals") == {
        (b"a",): {"key": b"a", "value": b'["a",2]'},
        (b"b",): {"key": b"b", "value": b'["b",2]'},
    }
    assert result.table("log") == {
        ("in", 0, 0, 0): {"key": None, "value": b'"A"'},
        ("in", 0, 0, 1): {"key": None, "value": b'"B"'},
        ("in", 0, 0, 2): {"key": None, "value": b'"A"'},
        ("in", 0, 1, 0): {"key": None, "value": b'"B"'},
    }


def test_a_compacting_bolt_may_feed_an_upsert_topic_only() -> None:
    topology = Topology("t")
    words = topology.spout("words", topic="in", decoder="text", explode=str.split)
    counts = topology.bolt("counts", inputs=[words], key=lambda w: w, state=per_key(Count()),
                           lift=lambda w: 1, emit=lambda w, n: [(w, n)], preaggregate=True)
    topology.sink("totals", inputs=[counts], target=totals())
    topology.validate()
    with pytest.raises(TopologyError, match="only upsert tables and topics"):
        topology.sink("log", inputs=[counts], target=Topic("log", mode="append"))
        topology.validate()


# -- exactly once through crashes, against the model ------------------------------------

Arrival = tuple[tuple[str, int], int, tuple[str, int]]
"""(partition, offset, (word, running total))."""


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[Arrival], list[int], list[tuple[int, int]]]:
    """Running totals of words from two partitions, interleaved; commit points; crashes
    (after arrival i, the replay starts at arrival j <= i)."""
    per_partition = [draw(st.lists(st.sampled_from("abc"), max_size=8)) for _ in range(2)]
    order = draw(st.permutations([p for p, words in enumerate(per_partition) for _ in words]))
    seen = [0, 0]
    counts: dict[str, int] = {}
    arrivals: list[Arrival] = []
    for p in order:
        word = per_partition[p][seen[p]]
        counts[word] = counts.get(word, 0) + 1
        arrivals.append((("in", p), seen[p], (word, counts[word])))
        seen[p] += 1
    commits = draw(st.lists(st.integers(0, len(arrivals)), max_size=4))
    crash = draw(st.lists(st.integers(0, len(arrivals)), max_size=2))
    return arrivals, sorted(commits), [(c, draw(st.integers(0, c))) for c in sorted(crash)]


def _lwm(arrivals: list[Arrival]) -> dict[tuple[str, int], int]:
    """The mark through which every record has arrived: per partition, the offset before
    the first one still missing."""
    mark = {("in", 0): -1, ("in", 1): -1}
    for partition, offset, _t in arrivals:
        mark[partition] = max(mark[partition], offset)
    return mark


@settings(max_examples=300, deadline=None)
@given(runs(), st.sampled_from(["upsert", "append"]))
def test_committed_records_are_exactly_the_models_through_crashes(
    run: tuple[list[Arrival], list[int], list[tuple[int, int]]], mode: str,
) -> None:
    """A simulated writer: commits at the marks, crashes that lose the buffer and replay
    from an earlier point with the progress re-read. The committed log holds every append
    record exactly once; its newest record per key is the final total."""
    arrivals, commit_points, crashes = run
    topic = totals() if mode == "upsert" else Topic("log", mode="append")
    progress: dict[tuple[str, int], int] = {}
    log: list[tuple[Any, ...]] = []
    buffer = RowBuffer(topic, floor=progress)
    position = 0
    events = sorted([(c, "commit", 0) for c in commit_points]
                    + [(c, "crash", j) for c, j in crashes]
                    + [(len(arrivals), "commit", 0)])
    for point, kind, restart in events:
        while position < point:
            partition, offset, t = arrivals[position]
            buffer.add(partition, offset, t)
            position += 1
        if kind == "commit":
            selection = buffer.select(_lwm(arrivals[:position]))
            log.extend(selection.rows)
            progress = selection.target
            buffer.confirm(selection)
        else:  # the buffer is lost; the replay starts at an earlier arrival, at or
            # before the first one the progress does not cover (a committed round)
            buffer = RowBuffer(topic, floor=progress)
            uncovered = next((i for i, (p, o, _t) in enumerate(arrivals)
                              if o > progress.get(p, -1)), len(arrivals))
            position = min(position, restart, uncovered)
    final: dict[bytes, bytes] = {}
    for _partition, _offset, (word, count) in arrivals:
        final[word.encode()] = json.dumps([word, count]).replace(" ", "").encode()
    if mode == "upsert":
        newest = {row[0]: row[1] for row in log}
        assert newest == final
    else:
        origins = [row[4:] for row in log]
        assert sorted(origins) == sorted((p[0], p[1], o, 0) for p, o, _t in arrivals)


def test_a_buffer_says_whether_a_commit_would_write_anything() -> None:
    buffer = RowBuffer(Topic("log", mode="append"), floor={P0: 4})
    buffer.add(P0, 4, "old")  # at the progress: dropped
    assert not buffer.holds_through({P0: 10})
    buffer.add(P0, 6, "x")
    assert not buffer.holds_through({P0: 5}) and buffer.holds_through({P0: 6})
    upsert = RowBuffer(totals())
    upsert.add(P1, 3, ("a", 1))
    assert not upsert.holds_through({P0: 9}) and upsert.holds_through({P1: 3})
    upsert.add(P0, 1, object())  # no record: rejected, also something to write
    assert upsert.holds_through({P0: 1})
