"""The independent oracle (:mod:`hailstorm.oracle`) against the fast model
(:func:`hailstorm.run_model`): they must agree on every example topology with a realistic
workload, and on random topologies of every kind of state, window, ttl, join, late routing
and bad record (issue 47). A disagreement is a bug in one of them."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import hailstorm.oracle as oracle_module
from hailstorm import Message, load_topology, run_model
from hailstorm.dev.harness import compare
from hailstorm.dev.harness.compare import (
    compare_with_model,
    model_disagreements,
    oracle_disagreements,
)
from hailstorm.dev.harness.producing import keyed_events, zipf_text_lines
from hailstorm.dev.harness.results import BoltStates
from hailstorm.dev.workloads import PageViews
from hailstorm.joins import LookupJoin, WindowJoin
from hailstorm.lateness import late_table
from hailstorm.monoids import (
    Count,
    Last,
    Max,
    Mean,
    Monoid,
    Record,
    SetUnion,
    SlidingWindow,
    Sum,
    TopK,
    TumblingWindow,
    per_key,
)
from hailstorm.oracle import OracleHalt, OracleUnsupported, run_oracle
from hailstorm.topic import Topic
from hailstorm.topology import Table, Topology

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


def spread(topic: str, values: list[bytes], partitions: int = 3) -> list[Message]:
    """``values`` round-robin over ``partitions``, offsets counted per partition."""
    offsets = [0] * partitions
    out = []
    for i, value in enumerate(values):
        p = i % partitions
        out.append(Message(topic, p, offsets[p], value))
        offsets[p] += 1
    return out


def mixed(rng: random.Random, *streams: list[Message]) -> list[Message]:
    """The streams interleaved at random, each partition still in offset order."""
    queues = [list(s) for s in streams if s]
    out: list[Message] = []
    while queues:
        queue = rng.choice(queues)
        out.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    return out


def _json(values: list[Any]) -> list[bytes]:
    return [json.dumps(v).encode() for v in values]


# ------------------------------------------------------------------ realistic workloads

BAD = [b"\xff\xfe", b"not json", b"[1, 2]", b'{"user": 5}']


def _words() -> list[Message]:
    return spread("words", zipf_text_lines(600, 3) + BAD)


def _events() -> list[Message]:
    return spread("events", keyed_events(1500, 4) + BAD + [b'{"user": "u1", "amount": -3}'])


def _page_views() -> list[Message]:
    from topologies.pageviews import PAGE_VIEW_SCHEMA

    schema = parse_schema(PAGE_VIEW_SCHEMA)
    values = []
    for view in PageViews(pages=40, users=300, per_second=1, stragglers=0.05).views(1500, 5):
        out = io.BytesIO()
        schemaless_writer(out, schema, view)
        values.append(out.getvalue())
    return spread("page-views", values + BAD)


def _visits() -> list[Message]:
    views = [{"user": v["user"], "ts": v["ts"] - (2_400_000 if i % 40 == 0 else 0)}
             for i, v in enumerate(PageViews(pages=10, users=60, per_second=1).views(1500, 6))]
    return spread("user-views", _json(views) + BAD)


def _posts() -> list[Message]:
    rng = random.Random(7)
    tags = ["#python", "#Rust", "#ai", "#sprint", "#go", "#k8s", "#db", "#x"] + \
        [f"#t{i}" for i in range(20)]
    posts: list[Any] = [{"ts": 1_700_000_000 + i // 3 - rng.randint(0, 90),
                         "text": " ".join(rng.sample(tags, rng.randint(0, 4)))}
                        for i in range(1200)]
    return spread("posts", _json([*posts, {"ts": 5}, 7, "x"]) + BAD)


def _enriched() -> list[Message]:
    rng = random.Random(8)
    users = [f"u{i}" for i in range(30)]
    start = 1_700_000_000_000
    views = [{"id": f"v{i}", "user": rng.choice(users), "page": rng.choice("/ab"),
              "ts": start + i * 20_000 - rng.choice([0, 0, 0, 60_000, 5_000_000])}
             for i in range(700)]
    clicks = [{"id": f"c{i}", "user": rng.choice(users), "page": rng.choice("/ab"),
               "ts": start + i * 40_000 - rng.choice([0, 0, 90_000, 7_000_000])}
              for i in range(350)]
    profiles = [{"user": rng.choice(users), "version": rng.randint(1, 9),
                 "country": rng.choice(["DE", "FR"]), "plan": rng.choice(["pro", "free"])}
                for _ in range(120)]
    return mixed(rng, spread("user-views", _json(views) + BAD),
                 spread("ad-clicks", _json(clicks) + BAD, 2),
                 spread("user-profiles", _json(profiles) + BAD, 2))


def _numbers() -> list[Message]:
    rng = random.Random(9)

    def readings(n: int) -> list[Any]:
        return [{"ts": i // 2 - rng.choice([0, 0, 0, 3, 400]), "value": rng.randint(-50, 50)}
                for i in range(n)] + [{"ts": "x", "value": 1}, {"value": 3}]

    return mixed(rng, spread("numbers-a", _json(readings(600)) + BAD, 2),
                 spread("numbers-b", _json(readings(600)) + BAD, 2))


EXAMPLES: dict[str, Callable[[], list[Message]]] = {
    "wordcount": _words, "wordstream": _words, "user_totals": _events,
    "top_spenders": _events, "pageviews": _page_views, "visits": _visits,
    "trending": _posts, "enriched_views": _enriched, "window_average": _numbers,
}


def test_every_example_topology_has_a_workload() -> None:
    assert set(EXAMPLES) == {p.stem for p in TOPOLOGIES.glob("*.py") if p.stem != "__init__"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_oracle_agrees_with_the_model_on_every_example(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TOPOLOGIES.parent))
    topology = load_topology(str(TOPOLOGIES / f"{name}.py"))
    batch = EXAMPLES[name]()
    model, oracle = run_model(topology, batch), run_oracle(topology, batch)
    assert model_disagreements(model, oracle) == []
    assert oracle.dead_letters, "every workload has bad records"
    if any(b.late is not None for b in topology.bolts):
        assert oracle.late, "the workload reaches the late path"


# ------------------------------------------------------------------ random topologies


def digest(value: Any) -> int:
    """An int summing up a state, whatever the order of its dicts and sets."""
    if isinstance(value, dict):
        return sum(digest(k) * 31 + digest(v) for k, v in value.items()) % 1_000_003
    if isinstance(value, set | frozenset):
        return sum(map(digest, value)) % 1_000_003
    if isinstance(value, tuple | list):
        return sum((i + 1) * digest(v) for i, v in enumerate(value)) % 1_000_003
    if isinstance(value, bool) or value is None:
        return int(bool(value))
    if isinstance(value, int | float):
        return int(value) % 1_000_003
    return len(value) if isinstance(value, str | bytes) else 1


MONOIDS: dict[str, tuple[Callable[[], Monoid[Any]], Callable[[dict[str, Any]], Any]]] = {
    "count": (Count, Count.lift),
    "sum": (Sum, lambda t: t["v"]),
    "max": (lambda: Max("long"), lambda t: t["v"]),
    "mean": (Mean, lambda t: Mean.lift(t["v"])),
    "top": (lambda: TopK(3, score_type="long"), lambda t: TopK.lift(t["k"], t["v"])),
    "set": (lambda: SetUnion("long"), lambda t: SetUnion.lift(t["v"] % 5)),
    "record": (lambda: Record({"n": Count(), "s": Sum()}), lambda t: {"n": 1, "s": t["v"]}),
    "last": (lambda: Last("long"), lambda t: Last.lift((t["t"], 0), t["v"])),
}


def checks(monoid: Monoid[Any]) -> bool:
    """Whether ``monoid`` refuses values that are not its states (a float, here)."""
    return type(monoid).check is not Monoid.check


def failing(function: Callable[[Any], Any], modulus: int | None) -> Callable[[Any], Any]:
    """``function``, raising on records whose ``v`` is a multiple of ``modulus``."""
    if modulus is None:
        return function

    def bad(t: Any) -> Any:
        if t["v"] % modulus == 0:
            raise ValueError(f"bad record {t['v']}")
        return function(t)
    return bad


def record_of(message: Any) -> list[dict[str, Any]]:
    """A spout's explode: the JSON object ``{k, v, t}`` twice when ``v`` is 7 (KeyError
    and TypeError for anything else: a bad record)."""
    record = {"k": message["k"], "v": message["v"], "t": message["t"]}
    return [record, {**record, "k": record["k"] + "!"}] if record["v"] == 7 else [record]


def later_record_of(message: Any) -> list[dict[str, Any]]:
    """:func:`record_of`, 40 later in event time when ``v`` is odd."""
    return [{**r, "t": r["t"] + 40 * (r["v"] % 2)} for r in record_of(message)]


@st.composite
def random_topology(draw: st.DrawFn) -> Topology:
    """Spouts over one or two topics (two spouts may read the same topic), up to three
    bolts of any shipped monoid, windows, ttl and late routing, with functions that fail
    on some records, and table and topic sinks."""
    topology = Topology("t", on_error=draw(st.sampled_from(["quarantine"] * 5 + ["fail"])))
    spouts = [topology.spout("s0", topic="a", decoder="json", explode=record_of)]
    if draw(st.booleans()):
        spouts.append(topology.spout("s1", topic=draw(st.sampled_from(["a", "b"])),
                                     decoder="json", explode=later_record_of))
    sources: list[Any] = list(spouts)
    for i in range(draw(st.integers(1, 3))):
        inputs = draw(st.lists(st.sampled_from(sources), min_size=1, max_size=2,
                               unique_by=lambda n: n.name))
        from_spouts = all(n in spouts for n in inputs)
        make, lift = MONOIDS[draw(st.sampled_from(sorted(MONOIDS)))]
        timing = draw(st.sampled_from(["none", "tumbling", "sliding"]
                                      + (["ttl", "late-tumbling", "late-sliding"] * 3
                                         if from_spouts else [])))
        keyed = draw(st.booleans()) or timing == "ttl"
        size = draw(st.sampled_from([10, 20, 30]))
        retention = draw(st.sampled_from([None, 0, 25]))
        inner = make()
        state: Monoid[Any]
        if timing.endswith("tumbling"):
            state = TumblingWindow(size, inner, retention)
        elif timing.endswith("sliding"):
            state = SlidingWindow(size, draw(st.sampled_from([5, 10])), inner, retention)
        else:
            state = inner
        ttl = draw(st.sampled_from([10, 40])) if timing == "ttl" else None
        state = per_key(state, "string", ttl=ttl) if keyed else state
        late: Any = "drop" if timing in ("tumbling", "sliding") else None  # a decision
        if timing == "ttl" or timing.startswith("late"):
            late = draw(st.sampled_from(["t.late", late_table(f"late_{i}")]))
        bad = st.sampled_from([None, None, 3, 5])
        bolt = topology.bolt(
            f"b{i}", inputs=inputs, state=state,
            key=failing(lambda t: t["k"] if t["v"] != 11 else [t["k"]], draw(bad)),
            lift=failing(lift, draw(bad)) if draw(st.booleans()) or not checks(inner) else
            (lambda t, lift=lift: 0.5 if t["v"] == 13 else lift(t)),
            emit=failing(lambda t, value: [{"k": t["k"], "v": digest(value), "t": t["t"]}],
                         draw(bad)),
            parallelism=draw(st.sampled_from([1, 2, 3])) if keyed else 1,
            event_time=None if timing == "none" else failing(
                lambda t: t["t"] if t["v"] != 17 else "soon", draw(bad)),
            late=late)
        sources.append(bolt)
        sink = draw(st.sampled_from(["upsert", "merge", "append", "topic", "none"]))
        if sink == "topic":
            topology.sink(f"out_{i}", inputs=[bolt], target=Topic(
                f"out-{i}", key=lambda t: t["k"], value=lambda t: [t["v"], t["t"]]))
        elif sink != "none":
            topology.sink(f"out_{i}", inputs=[bolt], target=Table(
                f"out_{i}", columns={"k": "text", "v": draw(st.sampled_from(
                    ["bigint", "smallint"])), "t": "integer"},
                key=() if sink == "append" else ["k"], mode=sink,
                row=None if draw(st.booleans()) else
                (lambda t: t if t["v"] % 19 else {**t, "t": 2 ** 40})))
    return topology


RECORDS = st.one_of(
    st.fixed_dictionaries({"k": st.sampled_from(["a", "b", "c", "d"]),
                           "v": st.integers(0, 20), "t": st.integers(0, 120)}),
    st.sampled_from([5, "x", {"k": "a"}, None]),
)


@st.composite
def random_messages(draw: st.DrawFn) -> list[Message]:
    """Records (some bad: not JSON, a tombstone, the wrong shape) over partitions of the
    topics ``a`` and ``b``, in a random interleaving of offset-ordered partitions."""
    offsets: dict[tuple[str, int], int] = {}
    out = []
    for topic, partition, value in draw(st.lists(
            st.tuples(st.sampled_from(["a", "a", "b"]), st.integers(0, 2), RECORDS),
            min_size=8, max_size=40)):
        offset = offsets.get((topic, partition), 0)
        offsets[(topic, partition)] = offset + 1
        raw = None if value is None else b"\xff" if value == "x" else json.dumps(value).encode()
        out.append(Message(topic, partition, offset, raw))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_topology(), random_messages())
def test_the_oracle_agrees_with_the_model_on_random_topologies(
        topology: Topology, batch: list[Message]) -> None:
    read = {s.topic for s in topology.spouts}
    batch = [m for m in batch if m.topic in read]
    assert oracle_disagreements(topology, batch) == []
    _tally(topology, batch)


def test_a_tuple_whose_window_closes_at_the_stream_time_is_late_for_both() -> None:
    """The boundary the random topologies reach only now and then: [0, 10) with a
    retention of 5 closes at 15, so after a view at 15 a view at 3 is late."""
    topology = Topology("edge")
    views = topology.spout("views", topic="v", decoder="json")
    topology.bolt("windows", inputs=[views], key=lambda e: e["k"],
                  state=per_key(TumblingWindow(10, Count(), 5)), lift=Count.lift,
                  event_time=lambda e: e["t"], late="edge.late")
    batch = [Message("v", 0, offset, json.dumps({"k": "a", "t": t}).encode())
             for offset, t in enumerate([15, 3, 14])]
    assert oracle_disagreements(topology, batch) == []
    assert [(d.message.offset, d.topic) for d in run_oracle(topology, batch).late] == [
        (1, "edge.late")]


def _tally(topology: Topology, batch: list[Message]) -> None:
    """What the example reached (``pytest --hypothesis-show-statistics``)."""
    try:
        oracle = run_oracle(topology, batch)
    except OracleHalt as halt:
        event(f"halted at {halt.stage}")
        return
    for stage in sorted({d.stage for d in oracle.dead_letters}):
        event(f"dead letter at {stage}")
    late = oracle.late + [row for name, rows in oracle.sink_rows.items()
                          if name.endswith("_late") for row in rows]
    event(f"late records: {bool(late)}")
    event(f"rejected rows: {any(oracle.rejected_rows.values())}")


@st.composite
def random_join(draw: st.DrawFn) -> tuple[Topology, list[Message]]:
    """A lookup or window join (inner or left; tumbling or sliding; late routed or not)
    of two topics, over random events, some bad."""
    topology = Topology("j")
    how = draw(st.sampled_from(["inner", "left"]))
    if draw(st.booleans()):
        join: Any = LookupJoin(
            left=Count(), right=Last("long"), left_key=lambda e: e["k"],
            right_key=lambda e: e["k"], left_lift=lambda e: 1,
            right_lift=lambda e: Last.lift((e["t"], 0), e["v"]),
            row=lambda k, n, last: (k, n, Last.value(last)), how=how)
        late = None
    else:
        join = WindowJoin(
            size=draw(st.sampled_from([10, 30])), slide=draw(st.sampled_from([None, 5])),
            retention=draw(st.sampled_from([None, 0, 20])), left_key=lambda e: e["k"],
            right_key=lambda e: e["k"], left_id=lambda e: f"l{e['v']}",
            right_id=lambda e: f"r{e['v']}", left_time=lambda e: e["t"],
            right_time=lambda e: e["t"],
            row=lambda k, start, left, right: (k, start, digest(left) + digest(right)), how=how)
        late = draw(st.sampled_from(["drop", "j.late"]))
    left = topology.spout("left", topic="a", decoder="json", explode=join.left.explode())
    right = topology.spout("right", topic="b", decoder="json", explode=join.right.explode())
    bolt = join.bolt(topology, "joined", inputs=[left, right],
                     parallelism=draw(st.sampled_from([1, 2])), late=late)
    topology.sink("rows", inputs=[bolt], target=Topic("rows", key=lambda r: [r[0], r[1]]))
    return topology, [m for m in draw(random_messages())]


@settings(max_examples=100, deadline=None)
@given(random_join())
def test_the_oracle_agrees_with_the_model_on_random_joins(
        join: tuple[Topology, list[Message]]) -> None:
    topology, batch = join
    assert oracle_disagreements(topology, batch) == []


# ------------------------------------------------------------------ the oracle itself


def _counting(parallelism: int, on_error: str = "quarantine") -> Topology:
    topology = Topology("c", on_error=on_error)  # type: ignore[arg-type]
    words = topology.spout("words", topic="w", decoder="text", explode=str.split)
    counts = topology.bolt("counts", inputs=[words], key=lambda w: w, state=per_key(Count()),
                           lift=lambda w: 1 if w != "boom" else 1 // 0,
                           emit=lambda w, n: [(w, n)], parallelism=parallelism)
    topology.sink("table", inputs=[counts], target=Table(
        "counts", columns={"word": "text", "n": "smallint"}, key=["word"]))
    return topology


def test_the_oracle_counts_merged_across_instances() -> None:
    batch = spread("w", [b"a b a", b"c boom", b"a", b"\xff"], 2)
    oracle = run_oracle(_counting(3), batch)
    assert oracle.bolt_state("counts") == {"a": 3, "b": 1, "c": 1}
    assert oracle.table("table")[("a",)] == {"word": "a", "n": 3}
    assert [(d.node, d.stage) for d in oracle.dead_letters] == [
        ("counts", "lift"), ("words", "decode")]
    assert run_oracle(_counting(1), batch).bolt_state("counts") == {"a": 3, "b": 1, "c": 1}


def test_the_oracle_halts_where_the_model_does() -> None:
    batch = spread("w", [b"a", b"boom"], 1)
    with pytest.raises(OracleHalt) as halt:
        run_oracle(_counting(2, "fail"), batch)
    assert (halt.value.node, halt.value.stage, halt.value.origin) == ("counts", "lift",
                                                                      (("w", 0), 1))
    assert oracle_disagreements(_counting(2, "fail"), batch) == []


def test_a_column_that_cannot_hold_a_value_rejects_its_row() -> None:
    topology = Topology("s")
    events = topology.spout("events", topic="e", decoder="json")
    sums = topology.bolt("sums", inputs=[events], key=lambda e: e["k"], state=per_key(Sum()),
                         lift=lambda e: e["v"], emit=lambda e, total: [(e["k"], total)])
    topology.sink("table", inputs=[sums], target=Table(
        "sums", columns={"k": "text", "total": "smallint"}, key=["k"]))
    batch = spread("e", _json([{"k": "a", "v": 30_000}, {"k": "a", "v": 3_000},
                               {"k": "a", "v": 1}]), 1)
    oracle = run_oracle(topology, batch)
    assert oracle.table("table") == {("a",): {"k": "a", "total": 30_000}}  # smallint's range
    assert [(r.origin[1], r.stage, r.record) for r in oracle.rejected_rows["table"]] == [
        (1, "row", "('a', 33000)"), (2, "row", "('a', 33001)")]
    assert oracle_disagreements(topology, batch) == []


def test_non_keyed_parallel_state_with_an_emit_is_not_modelled() -> None:
    topology = Topology("u")
    words = topology.spout("words", topic="w", decoder="text")
    topology.bolt("total", inputs=[words], key=lambda w: w, state=Count(), lift=Count.lift,
                  emit=lambda w, n: [n], parallelism=2)
    with pytest.raises(OracleUnsupported, match="depends on which keys share an instance"):
        run_oracle(topology, [])


def test_a_model_bug_is_a_disagreement() -> None:
    """The comparison sees a state, a table and a dead letter the model got wrong."""
    topology = _counting(2)
    batch = spread("w", [b"a b", b"boom"], 1)
    model, oracle = run_model(topology, batch), run_oracle(topology, batch)
    model.instance_states("counts")[0]["zz"] = 1
    model.table("table")[("a",)]["n"] = 9
    model.dead_letters.clear()
    lines = model_disagreements(model, oracle)
    assert any(line.startswith("bolt counts['zz']: model 1, oracle <absent>") for line in lines)
    assert any(line.startswith("table table: model only:") for line in lines)
    assert any(line.startswith("dead letter: oracle only:") for line in lines)


# ------------------------------------------------------------------ the harness


def _committed(model: Any, merged: dict[str, Any]) -> dict[str, BoltStates]:
    instances = model.instance_states("counts")
    return {"counts": BoltStates("counts", {}, list(instances), merged, [{}] * len(instances))}


def test_a_run_is_compared_with_both_models() -> None:
    topology = _counting(2)
    batch = spread("w", [b"a b a", b"c"], 2)
    model = run_model(topology, batch)
    tables = {"table": {k: dict(v) for k, v in model.table("table").items()}}
    good = compare_with_model(model, _committed(model, {"a": 2, "b": 1, "c": 1}), tables)
    assert good.ok and good.oracle is not None and good.oracle.ok
    assert good.oracle.keys_compared == good.keys_compared == 6
    assert good.oracle_lines()[-1] == "the model and the oracle agree"
    tables["table"][("a",)]["n"] = 1
    bad = compare_with_model(model, _committed(model, {"a": 1, "b": 1, "c": 1}), tables)
    assert bad.oracle is not None and (bad.oracle.lost, bad.oracle.wrong) == (1, 1)
    assert not bad.ok and not bad.model_disagreements


def test_a_disagreement_between_the_models_fails_the_comparison() -> None:
    topology = _counting(2)
    model = run_model(topology, spread("w", [b"a b a"], 1))
    states = _committed(model, {"a": 2, "b": 1})
    model.instance_states("counts")[0]["a"] = 5  # a model bug: the run agrees with the oracle
    comparison = compare_with_model(model, states)
    assert comparison.oracle is not None and comparison.oracle.ok
    assert comparison.model_disagreements == ["bolt counts['a']: model 5, oracle 2"]
    assert not comparison.ok
    assert "BUG: the model and the oracle disagree (1 differences):" in comparison.oracle_lines()


def test_without_the_messages_the_oracle_says_why_it_did_not_run() -> None:
    topology = _counting(2)
    model = run_model(topology, iter(spread("w", [b"a"], 1)))
    comparison = compare_with_model(model, _committed(model, {"a": 1}))
    assert comparison.ok and comparison.oracle is None
    assert comparison.oracle_lines() == [
        "oracle: not run (the model was not given a list of messages)"]


def test_many_outputs_are_compared_by_count_and_content(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oracle_module, "OUTPUTS_KEPT", 2)
    monkeypatch.setattr(compare, "OUTPUTS_KEPT", 2)
    topology = _counting(2)
    batch = spread("w", [b"a b a", b"c"], 1)
    model, oracle = run_model(topology, batch), run_oracle(topology, batch)
    assert "counts" not in oracle.outputs and oracle.output_digests["counts"][0] == 4
    assert model_disagreements(model, oracle) == []
    model.outputs("counts")[0] = (model.outputs("counts")[0][0], ("a", 7))
    assert model_disagreements(model, oracle) == [
        "counts emitted: 4 tuples by the model, 4 by the oracle, not the same ones"]
