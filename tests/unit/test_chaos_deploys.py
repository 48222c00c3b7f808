"""Mid-run deploys in a chaos run (``hailstorm chaos --deploy``), the pure parts: where the
schedule places them, what evidence and restarts they imply, which nodes a deploy starts at
the committed clock, and that those nodes are compared with the model over the messages
after that clock while every other node is compared with the model over all of them."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from hailstorm.dev.harness import BoltStates, ChaosSchedule
from hailstorm.dev.harness.compare import Comparison
from hailstorm.dev.harness.deploys import (
    combined,
    compare_deployed,
    in_deploy_order,
    started_at_deploy,
    withheld_at_deploys,
)
from hailstorm.dev.harness.evidence import (
    DEPLOYED,
    DRAINED,
    VICTIM_GONE,
    missing_evidence,
    planned_restarts,
)
from hailstorm.dev.harness.faults import Fault
from hailstorm.model import Message, ModelResult, run_model
from hailstorm.oracle import run_oracle
from hailstorm.topology import load_topology

RESHARD = "bench/deploys/wordcount_reshard.py"
LENGTHS = "bench/deploys/wordcount_lengths.py"
INITIALS = "bench/deploys/wordcount_initials.py"


@given(st.integers(0, 8), st.integers(0, 1000))
def test_deploys_are_placed_in_order_among_the_faults(count: int, seed: int) -> None:
    schedule = ChaosSchedule(count=count, seed=seed, deploys=(RESHARD, LENGTHS))
    plan = schedule.plan()
    assert len(plan) == count + 2
    deploys = [p for p in plan if p.kind == "deploy"]
    assert [p.module for p in deploys] == [RESHARD, LENGTHS]
    assert all(p.phase == "Flowing" for p in deploys)
    others = [p for p in plan if p.kind != "deploy"]
    assert others == ChaosSchedule(count=count, seed=seed).plan()  # the faults unchanged
    assert schedule.restarts() == ChaosSchedule(count=count, seed=seed).restarts()
    assert schedule.plan() == plan  # seeded


def test_a_deploy_restarts_nothing_and_needs_its_drain_and_start() -> None:
    assert planned_restarts([("deploy", "Flowing")]) == (0, 0)
    fault = Fault("deploy", "wordcount_reshard.py", 1, 0.0, 3, {})
    assert missing_evidence(fault, False) == [VICTIM_GONE, DRAINED, DEPLOYED]
    fault.evidence.update({VICTIM_GONE: True, DRAINED: True, DEPLOYED: True})
    assert missing_evidence(fault, False) == []


def test_a_deploy_starts_its_latest_bolts_and_their_sinks_at_its_clock() -> None:
    original = load_topology("topologies/wordcount.py")
    resharded, lengths = load_topology(RESHARD), load_topology(LENGTHS)
    assert started_at_deploy(original, resharded) == []
    assert started_at_deploy(resharded, lengths) == ["lengths", "word_lengths"]
    assert started_at_deploy(lengths, lengths) == []  # carried from then on
    assert started_at_deploy(original, load_topology(INITIALS)) == []  # backfilled: history


def test_a_backfilled_bolt_is_compared_over_every_message() -> None:
    original, initials = load_topology("topologies/wordcount.py"), load_topology(INITIALS)
    messages = _lines(0, ["apple avocado bb", "banana a", "cherry"])
    model = run_model(initials, messages)
    assert model.bolt_state("initials") == {"a": 3, "b": 2, "c": 1}
    assert {k: r["count"] for k, r in model.table("word_initials").items()} == {
        ("a",): 3, ("b",): 2, ("c",): 1}
    assert model.dead_letters == []  # every row fits its table
    names, comparison = compare_deployed(initials, [(initials, {("words", 0): 0})], original,
                                         messages, {}, {})
    assert (names, comparison) == ([], None)  # compared with the model over everything


def _lines(start: int, texts: list[str]) -> list[Message]:
    return [Message("words", i % 2, start + i // 2, text.encode())
            for i, text in enumerate(texts)]


def test_nodes_started_late_are_compared_after_the_clock_the_rest_over_everything() -> None:
    original, resharded, lengths = (load_topology(r) for r in (
        "topologies/wordcount.py", RESHARD, LENGTHS))
    before = _lines(0, ["a bb ccc", "a a", "bb dddd", "ccc"])
    after = _lines(2, ["eeeee a", "bb"])
    clock = {("words", 0): 1, ("words", 1): 1}
    everything = run_model(lengths, before + after)
    late = run_model(lengths, after)

    def committed(model: ModelResult, bolt: str) -> BoltStates:
        instances = model.instance_states(bolt)
        return BoltStates(bolt, clock, instances, model.bolt_state(bolt),
                          [clock] * len(instances))

    states = {"counts": committed(everything, "counts"), "lengths": committed(late, "lengths")}
    tables = {"word_counts": everything.table("word_counts"),
              "word_lengths": late.table("word_lengths")}
    names, comparison = compare_deployed(lengths, [(resharded, {}), (lengths, clock)],
                                         original, before + after, states, tables)
    assert names == ["lengths", "word_lengths"]
    assert comparison is not None and comparison.ok and comparison.keys_compared > 0
    assert late.bolt_state("lengths") == {5: 1, 1: 1, 2: 1}  # a count from the clock on
    assert {k: r["count"] for k, r in late.table("word_lengths").items()} == {
        (5,): 1, (1,): 1, (2,): 1}
    assert everything.dead_letters == []  # every row fits its table
    wrong = dict(states, lengths=committed(everything, "lengths"))
    _, compared = compare_deployed(lengths, [(lengths, clock)], resharded, before + after,
                                   wrong, tables)
    assert compared is not None and compared.duplicated > 0  # counted before the clock


def test_comparisons_of_disjoint_nodes_add_up() -> None:
    total = combined([Comparison(lost=1, keys_compared=3), Comparison(wrong=2, keys_compared=4)])
    assert (total.lost, total.wrong, total.keys_compared, total.ok) == (1, 2, 7, False)
    assert combined([Comparison(keys_compared=1, oracle=Comparison(keys_compared=1))]).ok


BOTH = "bench/deploys/wordcount_both.py"


def test_a_deploy_withholds_what_carried_bolts_emitted_before_it_from_new_nodes() -> None:
    original, both = load_topology("topologies/wordcount.py"), load_topology(BOTH)
    clock = {("words", 0): 1}
    assert withheld_at_deploys(original, [(both, clock)]) == {("counts", "both"): clock}
    assert withheld_at_deploys(original, [(load_topology(RESHARD), clock),
                                          (load_topology(INITIALS), {("words", 0): 5})]) == {}
    # a second deploy of the same code adds nothing: both is carried from then on
    assert withheld_at_deploys(original, [(both, clock), (both, {("words", 0): 9})]) == \
        {("counts", "both"): clock}


def test_the_model_and_the_oracle_withhold_alike_and_as_counted_by_hand() -> None:
    """``both`` reads the spout and ``counts``: with the edge from ``counts`` withheld up
    to a deploy's clock, each word was seen in every line but its highest running count
    comes only from the lines after the clock (where it occurs there at all)."""
    topology = load_topology(BOTH)
    lines = ["a b a", "b c", "a", "c d", "d d b"]
    messages = [Message("words", 0, o, line.encode()) for o, line in enumerate(lines)]
    cut = {("counts", "both"): {("words", 0): 2}}
    model = run_model(topology, messages, cut)
    oracle = run_oracle(topology, messages, cut)
    seen = Counter(" ".join(lines).split())
    after = set(" ".join(lines[3:]).split())
    want = {w: {"seen": n, "top": n if w in after else None} for w, n in seen.items()}
    assert model.bolt_state("both") == want
    assert oracle.bolt_state("both") == want
    assert run_model(topology, messages).bolt_state("both")["a"] == {"seen": 3, "top": 3}


def test_in_deploy_order_puts_each_deploys_history_first() -> None:
    p0 = [Message("words", 0, o, b"a") for o in range(4)]
    p1 = [Message("words", 1, o, b"a") for o in range(3)]
    clocks = [{("words", 0): 1, ("words", 1): 0}, {("words", 0): 2, ("words", 1): 2}]
    ordered = in_deploy_order(p0 + p1, clocks)
    assert [(m.partition, m.offset) for m in ordered] == [
        (0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (1, 2), (0, 3)]
    assert in_deploy_order(p0 + p1, []) == p0 + p1
    # both's highest running count from counts after the deploy is the word's final
    # count only in that order: in partition order, partition 1's history (all of it at or
    # below the clock) would come after partition 0's records above it
    topology = load_topology(BOTH)
    clock = {("words", 0): 1, ("words", 1): 2}
    cut = {("counts", "both"): clock}
    want = {"a": {"seen": 7, "top": 7}}
    assert run_model(topology, in_deploy_order(p0 + p1, [clock]), cut).bolt_state("both") \
        == want
    assert run_oracle(topology, in_deploy_order(p0 + p1, [clock]), cut).bolt_state("both") \
        == want
    assert run_model(topology, p0 + p1, cut).bolt_state("both") == {"a": {"seen": 7, "top": 4}}
