"""The chaos harness reads back dead letters, late records and rejected rows and compares
them exactly once with both models: what the engine's writers put in Kafka and in
``<table>_rejected`` reads back as the models predict, and a record lost, written twice or
changed is counted as such (the error text and the writer's bookkeeping are not compared)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Count, Sum, Table, Topology, TumblingWindow, per_key
from hailstorm.dead_letters import VALUE_LIMIT, DeadLetterTopic
from hailstorm.dev.harness import BoltStates, compare_with_model
from hailstorm.dev.harness.compare import Comparison, Difference, compare_side_outputs
from hailstorm.dev.harness.side_outputs import (
    SideRecord,
    letter_read,
    predicted,
    rejected_read,
    side_output_places,
)
from hailstorm.model import ModelResult, run_model
from hailstorm.oracle import run_oracle
from hailstorm.sinks.topic import ORIGIN_HEADER, SEQ_HEADER
from hailstorm.topic import Topic
from hailstorm.vocabulary import DeadLetter, Message


def _record_key(row: tuple[str, int]) -> str:
    if row[0] == "no-record":
        raise ValueError("no record for no-record")
    return row[0]


def _row(row: tuple[str, int]) -> dict[str, Any]:
    if row[0] == "no-row":
        raise ValueError("no row for no-row")
    return {"k": row[0], "total": row[1]}


def side_topology() -> Topology:
    """Every side output: a spout's dead letters, a bolt's, late records, a table sink's
    rejected rows and a topic sink's (dead letters too)."""
    top = Topology("side", dead_letter="side.dead")
    events = top.spout("events", topic="ev", decoder="json")
    top.bolt("windows", inputs=[events], key=lambda e: e["k"],
             state=per_key(TumblingWindow(10, Count(), retention=0)), lift=Count.lift,
             event_time=lambda e: e["t"], late="side.late")
    totals = top.bolt("totals", inputs=[events], key=lambda e: e["k"], state=per_key(Sum()),
                      lift=lambda e: e["n"], emit=lambda e, total: [(e["k"], total)])
    top.sink("table", inputs=[totals], target=Table(
        "side_totals", columns={"k": "text", "total": "bigint"}, key=["k"], row=_row))
    top.sink("topic", inputs=[totals], target=Topic("side.out", key=_record_key))
    return top


EVENTS: list[Any] = [
    {"k": "a", "t": 1, "n": 1}, b"{not json", {"k": "b", "t": 50, "n": 2},
    {"k": "a", "t": 3, "n": 3},  # late: [0, 10) closed at 50
    {"k": "a", "t": 55},  # no "n": the lift fails
    {"k": "no-row", "t": 56, "n": 1}, {"k": "no-record", "t": 57, "n": 1},
    {"k": "c", "t": 58, "n": 4}, b"\xff" * (VALUE_LIMIT + 10),  # cut at the limit
]


def _messages() -> list[Message]:
    out = []
    for i, value in enumerate(EVENTS):
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        out.append(Message("ev", 0, i, raw) if i < len(EVENTS) - 1 else Message("ev", 1, 0, raw))
    return out


def _model() -> ModelResult:
    return run_model(side_topology(), _messages())


def written(model: ModelResult, topology: Topology) -> list[SideRecord]:
    """What the runtime writes for ``model``'s side outputs, made with the engine's own
    writers' code (:class:`DeadLetterTopic`, the topic writer's headers), read back as
    :func:`~hailstorm.dev.harness.results.read_side_outputs` reads it."""
    records = []
    letters = [*model.dead_letters, *model.late]
    for sink, rows in model.rejected_rows.items():
        target = topology.node(sink).target  # type: ignore[union-attr]
        for r in rows:
            if isinstance(target, Topic):  # TopicWriter._dead_letter
                (source, number), offset = r.origin
                letters.append(DeadLetter(sink, topology.dead_letter_topic, Message(
                    source, number, offset, r.record.encode()), r.error, r.stage))
            else:
                (source, number), offset = r.origin
                records.append(rejected_read(target.rejected_table, (
                    f"side/sink:{sink}:1", source, number, offset, r.stage, r.record)))
    for n, letter in enumerate(letters):
        key, value, _partition, headers = DeadLetterTopic(letter.topic).record_of(letter)
        (source, number), offset = letter.message.origin
        extra = [(ORIGIN_HEADER, f"{source}:{number}:{offset}".encode()),
                 (SEQ_HEADER, str(n).encode())]
        records.append(letter_read(letter.topic, key, value, dict([*headers, *extra])))
    return records


def test_what_the_runtime_writes_reads_back_as_both_models_predict() -> None:
    topology = side_topology()
    model = _model()
    oracle = run_oracle(topology, _messages())
    stages = Counter(d.stage for d in [*model.dead_letters, *model.late])
    assert stages == {"decode": 2, "lift": 1, "late": 1}
    assert {s: len(r) for s, r in model.rejected_rows.items()} == {"table": 1, "topic": 1}
    back = written(model, topology)
    assert Counter(back) == Counter(predicted(model)) == Counter(predicted(oracle))
    cut = [r for r in back if r.size is not None]
    assert len(cut) == 1 and cut[0].size == VALUE_LIMIT + 10 and len(cut[0].value or b"") \
        == VALUE_LIMIT
    late = next(r for r in back if r.stage == "late")
    assert late.place == "side.late" and dict(late.details)["window_start"] == "0"
    assert side_output_places(topology) == ["side.dead", "side.late", "side_totals_rejected"]


def _states(model: ModelResult) -> dict[str, BoltStates]:
    return {b.name: BoltStates(b.name, {}, model.instance_states(b.name),
                               model.bolt_state(b.name), [{}] * b.parallelism)
            for b in model.topology.bolts}


def test_compare_with_model_holds_the_side_outputs_to_both_models() -> None:
    model = _model()
    tables = {s: model.table(s) for s in ("table", "topic")}
    back = written(model, model.topology)
    exact = compare_with_model(model, _states(model), tables, side_outputs=back)
    assert exact.ok and exact.side is not None and exact.oracle is not None, exact.oracle_lines()
    assert (exact.side.read, exact.side.expected) == (len(back), len(back)) == (6, 6)
    assert exact.oracle.side is not None and exact.oracle.side.ok
    late = next(r for r in back if r.stage == "late")
    twice = compare_with_model(model, _states(model), tables, side_outputs=[*back, late])
    assert (twice.lost, twice.duplicated, twice.wrong) == (0, 1, 0) and not twice.ok
    assert twice.oracle is not None and twice.oracle.duplicated == 1
    assert twice.differences == [Difference("side.late (windows, late)", late.origin, None,
                                            late.brief(), "duplicated")]
    not_read = compare_with_model(model, _states(model), tables)
    assert not_read.ok and not_read.side is None


def _tally(expected: list[SideRecord], actual: list[SideRecord]) -> tuple[int, int, int]:
    result = Comparison()
    noted: list[Difference] = []
    tally = compare_side_outputs(expected, actual, result, noted.append)
    assert (result.lost, result.duplicated, result.wrong) == \
        (tally.lost, tally.duplicated, tally.wrong)
    assert len(noted) == tally.lost + tally.duplicated + tally.wrong
    return tally.lost, tally.duplicated, tally.wrong


def test_error_texts_and_bookkeeping_are_not_compared_the_rest_is() -> None:
    model = _model()
    back = written(model, model.topology)
    letter = next(d for d in model.dead_letters if d.stage == "lift")
    key, value, _p, headers = DeadLetterTopic(letter.topic).record_of(letter)
    h = dict(headers)
    other_error = letter_read(letter.topic, key, value, {**h, "hailstorm.error": b"other"})
    assert other_error in back  # the error text differs: the same record
    changed = [
        letter_read(letter.topic, key, b"other value", h),
        letter_read(letter.topic, b"ev:9:9", value, h),
        letter_read(letter.topic, key, value, {**h, "hailstorm.window_start": b"0"}),
    ]
    original = letter_read(letter.topic, key, value, h)
    for wrong in changed:
        assert _tally(back, [wrong if r == original else r for r in back]) == (0, 0, 1)
    moved = letter_read("side.late", key, value, h)  # on the wrong topic
    assert _tally(back, [moved if r == original else r for r in back]) == (1, 1, 0)
    assert _tally(back, [r for r in back if r != original]) == (1, 0, 0)


def test_a_rejected_row_names_its_sink_not_its_instance() -> None:
    row = rejected_read("t_rejected", ("top/sink:my_sink:3", "ev", 1, 7, "row", "('x',)"))
    assert (row.node, row.origin, row.stage, row.value) == ("my_sink", (("ev", 1), 7), "row",
                                                            "('x',)")
    assert rejected_read("t_rejected", ("odd", "ev", 1, 7, "row", "r")).node == "odd"


@settings(max_examples=50)
@given(st.lists(st.integers(0, 5), max_size=30), st.data())
def test_the_counts_are_exact_for_any_multiset(values: list[int], data: st.DataObject) -> None:
    def record(n: int) -> SideRecord:
        return SideRecord("t", "node", (("ev", n % 2), n), "late", str(n).encode())

    expected = [record(n) for n in values]
    actual = data.draw(st.permutations(expected))
    assert _tally(expected, actual) == (0, 0, 0)
    dropped = data.draw(st.integers(0, len(actual)))
    doubled = data.draw(st.lists(st.sampled_from(actual), max_size=3)) if actual else []
    assert _tally(expected, actual[dropped:] + doubled) == \
        _net(expected, actual[dropped:] + doubled)


def _net(expected: list[SideRecord], actual: list[SideRecord]) -> tuple[int, int, int]:
    """By hand: every record of this test differs by its offset, so nothing pairs as
    wrong."""
    want, got = Counter(expected), Counter(actual)
    return sum((want - got).values()), sum((got - want).values()), 0
