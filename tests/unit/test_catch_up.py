"""Catching up on a node's own clock, the pure decisions (hailstorm.protocol.catchup): which
nodes catch up, the two rewind clocks, the labels a round accepts and what it commits."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from hailstorm.protocol.catchup import (
    behind_bolts,
    catching_up,
    commit_clocks,
    committed_low_water_mark,
    inputs_of_graph,
    label_accepted,
    loaded_by_node,
    plan_rewind,
    reads_history,
)
from hailstorm.protocol.clock import Clock, dominates, low_water_mark

P0, P1 = ("words", 0), ("words", 1)
PARTITIONS = (P0, P1)


@st.composite
def dags(draw: st.DrawFn) -> dict[str, frozenset[str]]:
    """Random topologies: spouts s0..s1, then nodes n0..nk each reading earlier ones."""
    spouts = ["s0", "s1"]
    nodes: dict[str, frozenset[str]] = {}
    for i in range(draw(st.integers(1, 6))):
        earlier = spouts + list(nodes)
        feeds = draw(st.sets(st.sampled_from(earlier), min_size=1, max_size=3))
        nodes[f"n{i}"] = frozenset(feeds)
    return nodes


def clocks(low: int = -1, high: int = 50) -> st.SearchStrategy[Clock]:
    return st.fixed_dictionaries({p: st.integers(low, high) for p in PARTITIONS})


@given(dags(), st.data())
def test_catching_up_is_the_behind_bolts_connected_part(inputs: dict[str, frozenset[str]],
                                                       data: st.DataObject) -> None:
    behind = data.draw(st.sets(st.sampled_from(sorted(inputs))))
    found = catching_up(inputs, behind)
    assert set(behind) <= found
    for node in found:  # every input is a spout or catches up too
        assert all(i not in inputs or i in found for i in inputs[node])
    # no node that does not catch up reads one that does (mixed clocks)
    assert not any(n not in found and inputs[n] & found for n in inputs)
    # and nothing more: each node is linked to a behind bolt through bolts and sinks
    # (either way along an edge; a spout links nothing)
    linked, todo = set(), list(behind)
    while todo:
        node = todo.pop()
        if node in linked:
            continue
        linked.add(node)
        todo.extend(i for i in inputs[node] if i in inputs)
        todo.extend(n for n, feeds in inputs.items() if node in feeds)
    assert found == linked


def test_catching_up_examples() -> None:
    inputs = {"counts": frozenset({"lines"}), "cased": frozenset({"lines"}),
              "out": frozenset({"counts"}), "cased_out": frozenset({"cased"}),
              "totals": frozenset({"cased"})}
    assert catching_up(inputs, {"cased"}) == {"cased", "cased_out", "totals"}
    assert catching_up(inputs, set()) == set()
    # a node reading a current bolt and one catching up: the current one is held with
    # its readers (it drops the backfill up to its clock, then emits on the backfill's)
    mixed = dict(inputs, both=frozenset({"counts", "cased"}))
    assert catching_up(mixed, {"cased"}) == set(mixed)
    # a new bolt reading a spout and a carried bolt: the same
    spout_and_bolt = dict(inputs, both=frozenset({"lines", "counts"}))
    assert catching_up(spout_and_bolt, {"both"}) == {"both", "counts", "out"}
    # fed by a node catching up, a behind bolt catches up with it
    chain = {"a": frozenset({"lines"}), "b": frozenset({"a", "lines"})}
    assert catching_up(chain, {"a", "b"}) == {"a", "b"}
    assert catching_up({}, {"a"}) == set()  # no graph recorded: nobody


def test_reads_history_unless_fed_only_through_carried_bolts() -> None:
    inputs = {"counts": frozenset({"lines"}), "totals": frozenset({"counts"}),
              "again": frozenset({"totals"}), "both": frozenset({"lines", "counts"}),
              "via": frozenset({"totals", "new"}), "new": frozenset({"lines"})}
    carried = {"counts"}
    assert [n for n in sorted(inputs) if not reads_history(n, inputs, carried)] == [
        "again", "totals"]
    assert all(reads_history(n, inputs, set()) for n in inputs)  # nothing carried: spouts
    assert not reads_history("totals", inputs, {"counts", "totals"})  # itself carried too


@given(st.dictionaries(st.sampled_from("abcdef"), st.sets(st.sampled_from("abcdefst")),
                       max_size=6), st.sets(st.sampled_from("abcdef")))
def test_reads_history_is_a_path_to_a_spout_avoiding_carried_bolts(
        raw: dict[str, set[str]], carried: set[str]) -> None:
    inputs = {n: frozenset(i - {n}) for n, i in raw.items()}  # s, t: spouts
    for node in inputs:
        # the same question answered the slow way: every path, depth first
        def reaches(name: str, path: frozenset[str]) -> bool:
            if name not in inputs:
                return True
            return any(reaches(i, path | {i}) for i in inputs[name]
                       if i not in carried and i not in path)
        assert reads_history(node, inputs, carried) == reaches(node, frozenset({node}))


def test_inputs_of_graph() -> None:
    graph = {"nodes": [{"name": "lines", "kind": "spout"}, {"name": "counts", "kind": "bolt"},
                       {"name": "out", "kind": "sink"}],
             "edges": [{"source": "lines", "target": "counts"},
                       {"source": "counts", "target": "out"}]}
    assert inputs_of_graph(graph) == {"counts": {"lines"}, "out": {"counts"}}
    assert inputs_of_graph(None) == {}
    assert inputs_of_graph({"nodes": [{"kind": "bolt"}]}) == {}


@given(st.dictionaries(st.sampled_from(["counts", "cased", "other"]),
                       st.lists(clocks(), min_size=1, max_size=3), min_size=1),
       st.none() | clocks(0, 50))
def test_plan_rewind(loads: dict[str, list[Clock]], committed: Clock | None) -> None:
    inputs = {b: frozenset({"lines"}) for b in loads}
    rewind = plan_rewind(loads, committed, inputs, PARTITIONS)
    behind = behind_bolts(loads, committed, PARTITIONS)
    assert rewind.catching_up == behind
    if not behind:  # as ever: the low water mark over every bolt instance
        assert rewind.backfill is None
        assert rewind.live == low_water_mark([c for cs in loads.values() for c in cs],
                                             PARTITIONS)
        return
    assert committed is not None and rewind.backfill is not None
    for bolt, instances in loads.items():
        for clock in instances:  # every bolt's cursor starts at or below what it loaded
            floor = rewind.backfill if bolt in behind else rewind.live
            assert dominates(clock, floor)
            if bolt not in behind:  # current bolts are at least at the committed clock
                assert dominates(clock, committed)
    assert dominates(rewind.live, rewind.backfill)
    if all(b in behind for b in loads):  # nobody current: the committed clock
        assert rewind.live == committed


@given(clocks(), clocks(), clocks())
def test_label_accepted_between_the_clocks(label: Clock, live: Clock, backfill: Clock) -> None:
    assert label_accepted(label, live, backfill) == (
        all(backfill[p] <= label[p] <= live[p] for p in PARTITIONS))


@given(st.dictionaries(st.sampled_from(["cased", "out", "x"]), clocks()), clocks())
def test_commit_clocks_keep_those_behind(labels: Mapping[str, Clock], live: Clock) -> None:
    committed = commit_clocks(labels, live)
    assert set(committed) == {n for n, c in labels.items() if c != live}
    assert all(committed[n] == labels[n] for n in committed)


def test_committed_low_water_mark() -> None:
    clock = {P0: 99, P1: 99}
    assert committed_low_water_mark(clock, {}) == clock
    assert committed_low_water_mark(clock, {"cased": {P0: 10, P1: 120}, "out": {P0: 50}}) \
        == {P0: 10, P1: -1}


def test_loaded_by_node_as_the_committed_record_tells() -> None:
    clock, own = {P0: 9, P1: 9}, {P0: 3, P1: 4}
    assert loaded_by_node(["cased", "counts", "new", "sink"], clock, {"cased": own, "sink": own},
                          {"counts", "cased"}) == {"cased": own, "counts": clock, "sink": own}
