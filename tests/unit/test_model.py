"""The sequential reference model, and the shared decode/lift/emit functions it runs."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import (
    Avro,
    Collect,
    Count,
    DecodeError,
    Message,
    Sum,
    Table,
    TopK,
    Topology,
    TumblingWindow,
    messages,
    per_key,
    route,
    run_model,
)
from hailstorm.decoders import decode_many, resolve_decoder
from hailstorm.engine import execution_of, tuples_of, tuples_of_many
from hailstorm.model import RecordHalt
from hailstorm.topology import BoltSpec, OnError, RowError


def word_topology(parallelism: int = 1) -> Topology:
    topology = Topology("words")
    lines = topology.spout("lines", topic="lines", decoder="text", explode=str.split)
    topology.bolt(
        "counts",
        inputs=[lines],
        key=lambda w: w,
        state=per_key(Count()),
        lift=lambda w: 1,
        emit=lambda w, n: [(w, n)],
        parallelism=parallelism,
    )
    topology.sink("out", inputs=["counts"], target=Collect())
    return topology


# --------------------------------------------------------------------------- dead letters


def test_dead_letters_are_counted_and_not_fatal() -> None:
    batch = messages("lines", ["a b", b"\xff oops", "b"])
    result = run_model(word_topology(), batch)
    assert result.messages_processed == 3
    assert len(result.dead_letters) == 1
    dead = result.dead_letters[0]
    assert (dead.node, dead.topic, dead.stage) == ("lines", "words.dead-letter", "decode")
    assert dead.message == Message("lines", 0, 1, b"\xff oops")
    assert dead.error.startswith("text decoder: UnicodeDecodeError:")
    assert result.bolt_state("counts") == {"a": 1, "b": 2}


def test_explode_failure_is_a_dead_letter_but_a_wrong_return_type_is_a_bug() -> None:
    topology = Topology("t", dead_letter="rejects")
    src = topology.spout("src", topic="in", decoder="json", explode=lambda d: [d["x"]])
    topology.sink("out", inputs=[src], target=Collect())
    result = run_model(topology, messages("in", [{"x": 1}, {"y": 2}, {"x": 3}]))
    assert [t for _, t in result.sink_rows("out")] == [1, 3]
    (dead,) = result.dead_letters
    assert (dead.topic, dead.stage) == ("rejects", "explode")
    assert dead.error == "spout 'src': explode failed: KeyError: 'x'"

    broken = Topology("t")
    src = broken.spout("src", topic="in", decoder="json", explode=lambda d: (d["x"], d["x"]))
    broken.sink("out", inputs=[src], target=Collect())
    with pytest.raises(TypeError, match=r"explode returned \(1, 1\); it must return a list"):
        run_model(broken, messages("in", [{"x": 1}]))


def test_explode_to_zero_tuples() -> None:
    result = run_model(word_topology(), messages("lines", ["", "   ", "x"]))
    assert result.messages_processed == 3
    assert result.dead_letters == []
    assert result.outputs("lines") == [((("lines", 0), 2), "x")]
    assert result.sink_rows("out") == [((("lines", 0), 2), ("x", 1))]


def test_tombstones_are_dead_letters() -> None:
    result = run_model(word_topology(), [Message("lines", 0, 0, None)])
    assert result.dead_letters[0].error == "text decoder: message has no value (tombstone)"


def test_message_on_an_unread_topic_is_an_error() -> None:
    with pytest.raises(ValueError, match="no spout of topology 'words' reads it"):
        run_model(word_topology(), messages("other", ["x"]))


# --------------------------------------------------------------------------- origins


def test_origins_propagate_through_bolts() -> None:
    topology = Topology("chain")
    src = topology.spout("src", topic="t", decoder="text", explode=str.split)
    totals = topology.bolt(
        "totals",
        inputs=[src],
        key=lambda w: w,
        state=per_key(Count()),
        lift=lambda w: 1,
        emit=lambda w, n: [(w, n)],
        parallelism=2,
    )
    doubled = topology.bolt(
        "doubled",
        inputs=[totals],
        state=Sum(),
        lift=lambda wn: wn[1],
        emit=lambda wn, total: [(wn[0], "x"), (wn[0], "y")],
    )
    topology.sink("out", inputs=[doubled, totals], target=Collect())
    batch = [
        Message("t", 1, 7, b"a b"),
        Message("t", 0, 3, b"a"),
    ]
    result = run_model(topology, batch)
    p1, p0 = (("t", 1), 7), (("t", 0), 3)
    # Depth-first: everything caused by "a" reaches the sink before "b" is processed.
    assert result.sink_rows("out") == [
        (p1, ("a", "x")),
        (p1, ("a", "y")),
        (p1, ("a", 1)),
        (p1, ("b", "x")),
        (p1, ("b", "y")),
        (p1, ("b", 1)),
        (p0, ("a", "x")),
        (p0, ("a", "y")),
        (p0, ("a", 2)),
    ]
    assert result.outputs("totals") == [(p1, ("a", 1)), (p1, ("b", 1)), (p0, ("a", 2))]
    assert result.bolt_state("doubled") == 1 + 1 + 2


# --------------------------------------------------------------------------- instances


def test_instance_split_merges_to_the_whole_state() -> None:
    words = "the cat and the dog and the bird saw a cat".split()
    batch = messages("lines", [" ".join(words[i : i + 3]) for i in range(0, len(words), 3)])
    split = run_model(word_topology(parallelism=3), batch)
    single = run_model(word_topology(parallelism=1), batch)
    expected = {"the": 3, "cat": 2, "and": 2, "dog": 1, "bird": 1, "saw": 1, "a": 1}
    assert single.bolt_state("counts") == expected
    assert split.bolt_state("counts") == expected
    instances = split.instance_states("counts")
    assert len(instances) == 3
    assert sorted(k for state in instances for k in state) == sorted(expected)
    for index, state in enumerate(instances):
        assert all(route(word, 3) == index for word in state)
    # The same running totals reach the sink either way.
    assert split.sink_rows("out") == single.sink_rows("out")


# --------------------------------------------------------------------------- tables


def table_topology(table: Table) -> Topology:
    topology = Topology("tables")
    src = topology.spout("src", topic="t", decoder="json", explode=lambda rows: rows)
    topology.sink("out", inputs=[src], target=table)
    return topology


def test_upsert_keeps_the_last_row_per_key() -> None:
    table = Table("scores", columns={"who": "text", "n": "bigint"}, key=["who"])
    result = run_model(table_topology(table), messages("t", [[["a", 1], ["b", 5]], [["a", 3]]]))
    assert result.table("out") == {("a",): {"who": "a", "n": 3}, ("b",): {"who": "b", "n": 5}}


def test_merge_adds_non_key_columns() -> None:
    table = Table(
        "totals",
        columns={"day": "text", "shop": "text", "n": "bigint", "amount": "double precision"},
        key=["day", "shop"],
        mode="merge",
    )
    rows = [[["mon", "x", 1, 2.5], ["mon", "y", 1, 1.0]], [["mon", "x", 2, 0.5]]]
    result = run_model(table_topology(table), messages("t", rows))
    assert result.table("out") == {
        ("mon", "x"): {"day": "mon", "shop": "x", "n": 3, "amount": 3.0},
        ("mon", "y"): {"day": "mon", "shop": "y", "n": 1, "amount": 1.0},
    }


def test_append_keeps_every_row_keyed_by_origin() -> None:
    table = Table("log", columns={"event": "text"}, mode="append")
    result = run_model(table_topology(table), messages("t", [[["a"], ["a"]], [["b"]]], partition=2))
    assert result.table("out") == {
        ("t", 2, 0, 0): {"event": "a"},
        ("t", 2, 0, 1): {"event": "a"},
        ("t", 2, 1, 0): {"event": "b"},
    }


def test_row_function_and_dicts() -> None:
    table = Table(
        "people",
        columns={"name": "text", "age": "integer"},
        key=["name"],
        row=lambda t: {"name": t["n"].title(), "age": t["a"]},
    )
    result = run_model(table_topology(table), messages("t", [[{"n": "ann", "a": 30}]]))
    assert result.table("out") == {("Ann",): {"name": "Ann", "age": 30}}
    plain = Table("people", columns={"name": "text", "age": "integer"}, key=["name"])
    assert plain.to_row({"age": 1, "name": "x"}) == {"age": 1, "name": "x"}
    with pytest.raises(RowError, match=r"missing \['age'\], unexpected \['agee'\]"):
        plain.to_row({"name": "x", "agee": 1})
    with pytest.raises(RowError, match="has 3 values but the table has 2 columns"):
        plain.to_row(("x", 1, 2))


def test_bad_rows_are_rejected_rows() -> None:
    table = Table("t", columns={"a": "text", "b": "text"}, key=["a"])
    result = run_model(table_topology(table), messages("t", [[["only-one"]], [["x", "y"]]]))
    assert result.table("out") == {("x",): {"a": "x", "b": "y"}}
    [rejected] = result.rejected_rows["out"]
    assert (rejected.origin, rejected.stage, rejected.record) == ((("t", 0), 0), "row",
                                                                  "['only-one']")
    assert "has 1 values but the table has 2 columns" in rejected.error


def test_table_of_a_collect_sink_explains() -> None:
    result = run_model(word_topology(), [])
    with pytest.raises(KeyError, match="writes to collect"):
        result.table("out")
    with pytest.raises(KeyError, match="is a bolt, not a sink"):
        result.sink_rows("counts")
    with pytest.raises(KeyError, match="is a spout, not a bolt"):
        result.bolt_state("lines")


def test_bolt_errors_quarantine_the_tuple() -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t", decoder="text")
    topology.bolt("b", inputs=[src], state=Sum(), lift=int)
    result = run_model(topology, messages("t", ["1", "x", "3"]))
    assert result.bolt_state("b") == 4
    assert [(d.node, d.topic, d.stage, d.message.offset, d.message.value, d.error)
            for d in result.dead_letters] == [
        ("b", "t.dead-letter", "lift", 1, b"'x'",
         "ValueError: invalid literal for int() with base 10: 'x'"),
    ]
    floats = Topology("f")
    src = floats.spout("src", topic="t", decoder="text")
    floats.bolt("b", inputs=[src], state=Sum(), lift=float)  # a long Sum refuses floats
    result = run_model(floats, messages("t", ["1", "2.5"]))
    assert result.bolt_state("b") == 0
    assert [(d.stage, d.error) for d in result.dead_letters] == [
        ("monoid", "TypeError: Sum(long) takes int values, not float 1.0"),
        ("monoid", "TypeError: Sum(long) takes int values, not float 2.5"),
    ]


def test_keys_events_and_values_the_state_cannot_hold_are_quarantined() -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t", decoder="json")
    topology.bolt("b", inputs=[src], key=lambda e: e["k"], lift=lambda e: e["n"],
                  state=per_key(TumblingWindow(60, Sum())), event_time=lambda e: e["at"],
                  parallelism=2, late="drop")
    events = [{"k": "a", "n": 1, "at": 5}, {"k": {"x": 1}, "n": 1, "at": 5},
              {"k": "a", "n": 2**63, "at": 5}, {"k": "a", "n": 1, "at": 5.5},
              {"k": ["a"], "n": 1, "at": 5}, {"k": "b", "n": 1, "at": 7}]
    result = run_model(topology, messages("t", events))
    assert [(d.stage, d.message.offset) for d in result.dead_letters] == [
        ("key", 1), ("monoid", 2), ("event_time", 3), ("key", 4)]
    assert result.dead_letters[0].error == "TypeError: unhashable type: 'dict'"
    assert result.bolt_state("b") == {"a": (5, {0: 1}), "b": (7, {0: 1})}


def poisoned_topology(stage: str, on_error: OnError) -> Topology:
    """A topology whose ``stage`` function raises on the tuple ``"bad"``."""
    topology = Topology("t", on_error=on_error)

    def poison(where: str) -> Callable[..., Any]:
        def function(*args: Any) -> Any:
            if where == stage and args[0] == "bad":
                raise ValueError("poison")
            return {"key": args[0], "lift": 1, "event_time": 0}.get(where, [args[0]])
        return function

    src = topology.spout("src", topic="t",
                         decoder=lambda raw: poison("decode")(raw.decode())[0])
    bolt = topology.bolt("b", inputs=[src], state=per_key(TumblingWindow(60, Count())),
                         key=poison("key"), lift=poison("lift"), event_time=poison("event_time"),
                         emit=lambda t, v: poison("emit")(t), late="drop")
    topology.sink("out", inputs=[bolt], target=Table(
        "out", columns={"w": "text"}, mode="append",
        row=lambda t: {"w": poison("row")(t)[0]}))
    return topology


@pytest.mark.parametrize("stage", ["decode", "key", "lift", "event_time", "emit", "row"])
def test_each_stage_quarantines_or_stops_per_policy(stage: str) -> None:
    result = run_model(poisoned_topology(stage, "quarantine"), messages("t", ["ok", "bad", "ok"]))
    assert list(result.table("out")) == [("t", 0, 0, 0), ("t", 0, 2, 0)]
    quarantined = [(d.node, d.stage, d.message.offset) for d in result.dead_letters] + [
        ("out", r.stage, r.origin[1]) for r in result.rejected_rows["out"]]
    node = {"decode": "src", "row": "out"}.get(stage, "b")
    assert quarantined == [(node, stage, 1)]
    with pytest.raises(RecordHalt, match=rf"^{node}: {stage} failed on the record at t:0:1: "
                                         r".*poison.* \(the topology has on_error=\"fail\""):
        run_model(poisoned_topology(stage, "fail"), messages("t", ["ok", "bad", "ok"]))


# --------------------------------------------------------------------------- shared bolt code


def keyed_bolt(window: int | None = None) -> BoltSpec:
    """The top two per key of ``(key, item, score)`` tuples; with ``window``, per tumbling
    window of that many units of the score (as event time) too."""
    topology = Topology("t")
    src = topology.spout("src", topic="t")
    top = TopK(2, score_type="long")
    return topology.bolt(
        "b",
        inputs=[src],
        key=lambda t: t[0],
        state=per_key(top if window is None else TumblingWindow(window, top)),
        lift=lambda t: TopK.lift(t[1], t[2]),
        emit=lambda t, top: [(t[0], TopK.top(top) if window is None else top)],
        **({} if window is None else {"event_time": lambda t: t[2], "late": "drop"}),
    )


scored = st.lists(
    st.tuples(st.sampled_from("ab"), st.sampled_from("xyz"), st.integers(0, 9)), max_size=20
)


@given(scored, st.lists(st.booleans(), min_size=20, max_size=20))
def test_emit_over_split_states_matches_one_state(
    tuples: list[tuple[str, str, int]], goes_to_b: list[bool]
) -> None:
    """The runtime's A/B split (any assignment of tuples) emits what one state emits."""
    bolt = keyed_bolt()
    run = execution_of(bolt)
    single, expected = run.process_batch(bolt.state.empty(), tuples)
    a, b = bolt.state.empty(), bolt.state.empty()
    emitted = []
    for index, (t, to_b) in enumerate(zip(tuples, goes_to_b, strict=False)):
        key, value = run.contribution(t)
        if to_b:
            b = run.absorb(b, key, value)
        else:
            a = run.absorb(a, key, value)
        emitted += [(index, out) for out in run.outputs(t, key, run.value_for_emit(key, (a, b)))]
    assert emitted == expected
    assert bolt.state.combine(a, b) == single
    assert run.absorb_all(bolt.state.empty(), tuples) == single


@given(scored, st.lists(st.integers(0, 2), min_size=20, max_size=20),
       st.lists(st.sampled_from("abc"), max_size=8), st.integers(1, 3),
       st.sampled_from([None, 5]))
def test_values_for_emit_of_a_batch_are_each_keys_value(
    tuples: list[tuple[str, str, int]], segment_of: list[int], keys: list[str],
    segments: int, window: int | None,
) -> None:
    """A compacting bolt's values for a batch of keys (looked up a segment at a time) are
    what ``value_for_emit`` gives each key, over any split of the state, for keys in one,
    several or no segment, with and without windows."""
    bolt = keyed_bolt(window)
    run = execution_of(bolt)
    states = [bolt.state.empty() for _ in range(segments)]
    for t, i in zip(tuples, segment_of, strict=False):
        key, value = run.contribution(t)
        states[i % segments] = run.absorb(states[i % segments], key, value)
    assert run.values_for_emit(keys, states) == [run.value_for_emit(k, states) for k in keys]


def test_windowed_contributions() -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t")
    bolt = topology.bolt(
        "b",
        inputs=[src],
        key=lambda t: t[0],
        state=per_key(TumblingWindow(60, Count())),
        lift=lambda t: 1,
        event_time=lambda t: t[1],
        emit=lambda t, windows: [(t[0], windows)],
        late="drop",
    )
    run = execution_of(bolt)
    assert run.contribution(("p", 61)) == ("p", (61, {60: 1}))
    state, outputs = run.process_batch(bolt.state.empty(), [("p", 61), ("p", 5), ("q", 0)])
    assert state == {"p": (61, {60: 1, 0: 1}), "q": (0, {0: 1})}
    assert outputs[1] == (1, ("p", (61, {60: 1, 0: 1})))
    assert run.value_for_emit("missing", (state,)) == (None, {})


def test_emit_must_return_a_list() -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t", decoder="text")
    topology.bolt("b", inputs=[src], state=Count(), lift=lambda t: 1, emit=lambda t, n: (t, n))
    with pytest.raises(TypeError, match=r"emit returned \('x', 1\); .* e\.g\. \[\('x', 1\)\]"):
        run_model(topology, messages("t", ["x"]))


def test_split_by_instance_uses_route() -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t")
    bolt = topology.bolt(
        "b", inputs=[src], key=lambda t: t, state=per_key(Count()), lift=len, parallelism=4
    )
    words = ["a", "b", "c", "d", "e", "f"]
    groups = execution_of(bolt).split_by_instance(words)
    assert [[w for w in words if route(w, 4) == i] for i in range(4)] == groups
    assert [execution_of(bolt).instance_for(w) for w in words] == [route(w, 4) for w in words]


# --------------------------------------------------------------------------- decoders


PAGE_VIEW = {
    "type": "record",
    "name": "PageView",
    "fields": [{"name": "page", "type": "string"}, {"name": "ms", "type": "long"}],
}


def avro_bytes(record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(PAGE_VIEW), record)
    return buffer.getvalue()


def test_decoders() -> None:
    avro = Avro(PAGE_VIEW)
    assert avro.decode(avro_bytes({"page": "/a", "ms": 5})) == {"page": "/a", "ms": 5}
    assert Avro(json.dumps(PAGE_VIEW)).describe() == "avro(PageView)"
    with pytest.raises(DecodeError, match="trailing bytes") as caught:
        avro.decode(avro_bytes({"page": "/a", "ms": 5}) + b"\x00")
    assert caught.value.stage == "decode"
    with pytest.raises(DecodeError) as truncated:
        avro.decode(avro_bytes({"page": "/a", "ms": 5})[:2])
    assert truncated.value.original is not None
    assert resolve_decoder("json").decode(b'{"a": [1]}') == {"a": [1]}
    assert resolve_decoder("bytes").decode(b"\xff") == b"\xff"
    assert resolve_decoder("text").decode("é".encode()) == "é"
    upper = resolve_decoder(lambda raw: raw.decode().upper())
    assert upper.decode(b"ab") == "AB"
    with pytest.raises(DecodeError, match="UnicodeDecodeError"):
        resolve_decoder(lambda raw: raw.decode("ascii")).decode(b"\xff")
    results = decode_many(resolve_decoder("json"), [b"1", b"{", None])
    assert results[0] == 1
    assert isinstance(results[1], DecodeError) and isinstance(results[2], DecodeError)
    with pytest.raises(ValueError, match="unknown decoder 'xml'"):
        resolve_decoder("xml")


def test_spout_batch_helper() -> None:
    topology = Topology("t")
    spout = topology.spout("s", topic="t", decoder="json", explode=lambda v: v["items"])
    results = tuples_of_many(spout, [b'{"items": [1, 2]}', b"nope", b'{"items": []}'])
    assert results[0] == [1, 2]
    assert isinstance(results[1], DecodeError)
    assert results[2] == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"a b", b"", b"\xff", None, b"boom", b"gen x", b"none",
                                 "é c".encode()]), max_size=12),
       st.sampled_from(["text", "bytes"]))
def test_a_batch_is_decoded_and_exploded_as_one_message_at_a_time(
    raws: list[bytes | None], decoder: str,
) -> None:
    """The batch fast path gives what tuples_of gives message by message: tuples, or the
    DecodeError of a tombstone, an undecodable value or a failing explode."""
    def explode(value: str | bytes) -> object:
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if text == "boom":
            raise ValueError("boom")
        if text.startswith("gen"):
            return (w for w in text.split())
        return None if text == "none" else text.split()

    spout = Topology("t").spout("s", topic="t", decoder=decoder, explode=explode)
    batch = tuples_of_many(spout, raws)
    for raw, result in zip(raws, batch, strict=True):
        try:
            expected: object = tuples_of(spout, raw)
        except DecodeError as exc:
            assert isinstance(result, DecodeError) and str(result) == str(exc)
            continue
        assert result == expected
