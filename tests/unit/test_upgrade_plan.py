"""The plan of an upgrade (hailstorm.upgrade): every kind of change a deployed topology may
see, decided from two pure descriptions, and the committed-record edits a run makes."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.monoids import Count, HyperLogLog, Max, Monoid, Record, Sum, TopK, per_key
from hailstorm.protocol.layout import CommittedRecord, ExpectedRecord
from hailstorm.topology import Table, Topology, TopologyError, by_key
from hailstorm.upgrade.deployed import edit_committed
from hailstorm.upgrade.describe import NodeDescription, describe_topology, fingerprint
from hailstorm.upgrade.plan import (
    Action,
    Plan,
    StoredState,
    UpgradeRefused,
    make_plan,
)

TABLE = Table("word_counts", columns={"word": "text", "n": "bigint"}, key=["word"],
              mode="upsert")


def lowered(word: str) -> str:
    return word.lower()


def wordcount(
    *, state: Monoid[Any] | None = None, key: Callable[[str], Any] = lowered,
    parallelism: int = 2, bolt: str = "counts", extra: bool = False, sink: bool = True,
    emit: Callable[[str, Any], Any] | None = None, **upgrade: Any,
) -> Topology:
    """The word count the tests change one way at a time."""
    t = Topology("wc")
    lines = t.spout("lines", "words", decoder="text")
    counts = t.bolt(bolt, [lines], state=state or per_key(Count()), lift=lambda w: 1,
                    key=key, parallelism=parallelism,
                    emit=emit or (lambda w, n: [(w, n)]), **upgrade)
    if sink:
        t.sink("word_counts", [counts], TABLE)
    if extra:
        longest = t.bolt("longest", [lines], state=Max(), lift=len, emit=lambda w, n: [(n,)])
        t.sink("longest_word", [longest], Table("longest_word", columns={"n": "bigint"},
                                                 mode="append"))
    return t


def stored(topology: Topology) -> dict[str, StoredState]:
    """The committed state a deployment of ``topology`` holds (as snapshot headers say)."""
    return {name: StoredState(str(d.state), d.schema, d.parallelism or 1)
            for name, d in describe_topology(topology).items() if d.kind == "bolt"}


def plan_of(old: Topology, new: Topology, allow_drop: tuple[str, ...] = ()) -> Plan:
    return make_plan(describe_topology(old), stored(old), describe_topology(new), allow_drop)


def decision(plan: Plan, node: str) -> tuple[Action, str]:
    [found] = [n for n in plan.nodes if n.node == node]
    return found.action, found.line()


def test_unchanged_topology_carries_everything() -> None:
    plan = plan_of(wordcount(), wordcount())
    assert [(n.node, n.action) for n in plan.nodes] == [
        ("lines", Action.CARRY), ("counts", Action.CARRY), ("word_counts", Action.CARRY)]
    assert not plan.refused and not plan.renames and not plan.discarded
    plan.check()


def test_parallelism_change_reshards() -> None:
    action, line = decision(plan_of(wordcount(), wordcount(parallelism=3)), "counts")
    assert action is Action.RESHARD
    assert "re-sharded from 2 to 3 instances" in line


def test_new_bolt_and_sink_start_from_the_retained_records() -> None:
    plan = plan_of(wordcount(), wordcount(extra=True))
    assert decision(plan, "longest")[0] is Action.NEW
    assert "from offset 0" in decision(plan, "longest")[1]
    assert decision(plan, "longest_word")[0] is Action.NEW
    assert decision(plan, "counts")[0] is Action.CARRY


def test_state_type_change_is_refused_with_the_fix() -> None:
    plan = plan_of(wordcount(), wordcount(state=per_key(Sum("double"))))
    action, line = decision(plan, "counts")
    assert action is Action.REFUSE
    assert "per_key(Count) cannot become per_key(Sum(double))" in line
    assert "migrate=" in line and "version=2" in line
    with pytest.raises(UpgradeRefused, match=r"^upgrade refused: bolt counts: refuse: state"):
        plan.check()


def test_state_type_change_with_migrate_converts() -> None:
    new = wordcount(state=per_key(Sum("double")), migrate=float)
    action, line = decision(plan_of(wordcount(), new), "counts")
    assert action is Action.CONVERT
    assert "per_key(Count) -> per_key(Sum(double)) by its migrate= function" in line


@pytest.mark.parametrize(("old", "new"), [
    (per_key(Sum("long")), per_key(Sum("double"))),
    (Sum("long"), Sum("double")),
    (per_key(Record({"n": Count()})), per_key(Record({"n": Count(), "total": Sum("double")}))),
    (per_key(Record({"n": Count(), "total": Sum("long")})), per_key(Record({"n": Count()}))),
])
def test_compatible_state_evolution_migrates(old: Monoid[Any], new: Monoid[Any]) -> None:
    action, line = decision(plan_of(wordcount(state=old), wordcount(state=new)), "counts")
    assert action is Action.MIGRATE, line
    assert "Avro schema resolution" in line


@pytest.mark.parametrize(("old", "new"), [
    (per_key(Sum("double")), per_key(Sum("long"))),
    (per_key(Count()), per_key(Sum("long"))),
    (per_key(Record({"n": Count()})), per_key(Record({"n": Sum("long")}))),
    (per_key(TopK(3)), per_key(TopK(5))),
    (per_key(Count()), per_key(Record({"n": Count()}))),
])
def test_incompatible_state_evolution_is_refused(old: Monoid[Any], new: Monoid[Any]) -> None:
    action, line = decision(plan_of(wordcount(state=old), wordcount(state=new)), "counts")
    assert action is Action.REFUSE, line


def test_key_function_change_is_refused_until_the_version_is_raised() -> None:
    old = wordcount()
    action, line = decision(plan_of(old, wordcount(key=lambda w: w)), "counts")
    assert action is Action.REFUSE
    assert "the key function changed" in line and "version=2" in line
    plan = plan_of(old, wordcount(key=lambda w: w, version=2))
    assert decision(plan, "counts")[0] is Action.RESTART
    assert plan.discarded == {"counts"}
    assert not plan.refused
    assert "keeps rows of the old state" in decision(plan, "word_counts")[1]
    assert decision(plan, "word_counts")[0] is Action.CARRY


def test_lift_change_is_refused_but_emit_change_is_carried() -> None:
    t = Topology("wc")
    lines = t.spout("lines", "words", decoder="text")
    t.bolt("counts", [lines], state=per_key(Count()), lift=lambda w: 2, key=lowered,
           parallelism=2, emit=lambda w, n: [(w, n)])
    t.sink("word_counts", ["counts"], TABLE)
    assert "the lift function changed" in decision(plan_of(wordcount(), t), "counts")[1]
    changed_emit = wordcount(emit=lambda w, n: [(w.upper(), n)])
    assert decision(plan_of(wordcount(), changed_emit), "counts")[0] is Action.CARRY


def test_a_new_state_type_brings_its_own_lift() -> None:
    t = Topology("wc")
    lines = t.spout("lines", "words", decoder="text")
    t.bolt("counts", [lines], state=per_key(Sum("double")), lift=lambda w: 1.0, key=lowered,
           parallelism=2, emit=lambda w, n: [(w, n)], migrate=float)
    t.sink("word_counts", ["counts"], TABLE)
    assert decision(plan_of(wordcount(), t), "counts")[0] is Action.CONVERT
    t.upgrades["counts"] = replace(t.upgrades["counts"], migrate=None)
    action, line = decision(plan_of(wordcount(), t), "counts")
    assert action is Action.REFUSE and "cannot become per_key(Sum(double))" in line


def test_a_lower_version_is_refused() -> None:
    action, line = decision(plan_of(wordcount(version=3), wordcount(version=2)), "counts")
    assert action is Action.REFUSE and "version=4" in line


def test_declared_rename_carries_the_state() -> None:
    plan = plan_of(wordcount(), wordcount(bolt="word_totals", previously="counts"))
    action, line = decision(plan, "word_totals")
    assert action is Action.CARRY and "renamed from counts" in line
    assert plan.renames == {"counts": "word_totals"}
    assert not plan.refused and not plan.discarded


def test_rename_with_a_parallelism_change_reshards_under_the_new_name() -> None:
    plan = plan_of(wordcount(), wordcount(bolt="totals", previously="counts", parallelism=4))
    assert decision(plan, "totals")[0] is Action.RESHARD
    assert plan.renames == {"counts": "totals"}


def test_an_applied_rename_is_a_plain_carry_the_next_time() -> None:
    renamed = wordcount(bolt="totals", previously="counts")
    plan = plan_of(renamed, renamed)
    assert decision(plan, "totals")[0] is Action.CARRY and not plan.renames


def test_undeclared_rename_refuses_the_drop() -> None:
    plan = plan_of(wordcount(), wordcount(bolt="totals"))
    assert decision(plan, "totals")[0] is Action.NEW
    action, line = decision(plan, "counts")
    assert action is Action.REFUSE
    assert "--allow-drop counts" in line and "previously='counts'" in line


def test_removed_node_is_dropped_only_when_allowed() -> None:
    old, new = wordcount(extra=True), wordcount()
    refused = plan_of(old, new)
    assert {n.node for n in refused.refused} == {"longest", "longest_word"}
    plan = plan_of(old, new, allow_drop=("longest", "longest_word"))
    assert decision(plan, "longest")[0] is Action.DROP
    assert decision(plan, "longest_word")[0] is Action.DROP
    assert plan.discarded == {"longest", "longest_word"} and not plan.refused
    assert plan_of(new, new, allow_drop=("counts",)).notes == (
        "--allow-drop counts: no deployed node of that name is removed, so nothing is dropped",)


def test_previously_naming_a_present_node_is_refused() -> None:
    t = wordcount(extra=True)
    t2 = Topology("wc")
    lines = t2.spout("lines", "words", decoder="text")
    t2.bolt("counts", [lines], state=per_key(Count()), lift=lambda w: 1, key=lowered,
            parallelism=2, emit=lambda w, n: [(w, n)])
    t2.bolt("longest2", [lines], state=Max(), lift=len, previously="counts")
    t2.sink("word_counts", ["counts"], TABLE)
    plan = plan_of(t, t2, allow_drop=("longest", "longest_word"))
    action, line = decision(plan, "longest2")
    assert action is Action.REFUSE and "still in the topology" in line


def test_non_keyed_state_cannot_be_split() -> None:
    old, new = wordcount(extra=True), wordcount(extra=True)
    deployed = describe_topology(old)
    states = stored(old)
    new_nodes = describe_topology(new)
    new_nodes["longest"] = replace(new_nodes["longest"], parallelism=2)
    plan = make_plan(deployed, states, new_nodes)
    action, line = decision(plan, "longest")
    assert action is Action.REFUSE and "not keyed" in line


def test_first_deployment_starts_everything_afresh() -> None:
    plan = make_plan(None, {}, describe_topology(wordcount()))
    assert {n.action for n in plan.nodes} == {Action.NEW}
    assert plan.notes == ("nothing deployed under this name: every node starts afresh",)


def test_older_driver_without_descriptions_compares_the_stored_state_only() -> None:
    old = wordcount()
    plan = make_plan(None, stored(old), describe_topology(wordcount(key=lambda w: w)))
    assert decision(plan, "counts")[0] is Action.CARRY  # the key change cannot be seen
    assert any("function changes cannot be checked" in n for n in plan.notes)
    type_change = make_plan(None, stored(old),
                            describe_topology(wordcount(state=per_key(Sum("double")))))
    assert decision(type_change, "counts")[0] is Action.REFUSE


def test_bolt_without_committed_state_is_new() -> None:
    old = wordcount()
    plan = make_plan(describe_topology(old), {}, describe_topology(wordcount(parallelism=3)))
    assert decision(plan, "counts")[0] is Action.NEW


def test_another_python_does_not_compare_fingerprints() -> None:
    old = {k: replace(v, python="3.10") for k, v in describe_topology(wordcount()).items()}
    plan = make_plan(old, stored(wordcount()), describe_topology(wordcount(key=lambda w: w)))
    assert decision(plan, "counts")[0] is Action.CARRY
    assert any("Python 3.10" in n for n in plan.notes)


def test_spout_topic_change_reads_the_new_topic_from_its_start() -> None:
    t = Topology("wc")
    lines = t.spout("lines", "other", decoder="text")
    t.bolt("counts", [lines], state=per_key(Count()), lift=lambda w: 1, key=lowered,
           parallelism=2, emit=lambda w, n: [(w, n)])
    t.sink("word_counts", ["counts"], TABLE)
    action, line = decision(plan_of(wordcount(), t), "lines")
    assert action is Action.NEW and "(was words)" in line


# -- fingerprints and descriptions -------------------------------------------------------


def test_fingerprint_ignores_where_the_code_is_but_not_what_it_does() -> None:
    a = lambda w: w.lower()  # noqa: E731
    b = lambda w: w.lower()  # noqa: E731

    def scale(k: int) -> Callable[[int], int]:
        return lambda x: x * k

    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(lambda w: w.upper())
    assert fingerprint(scale(2)) != fingerprint(scale(3))
    assert fingerprint(functools.partial(max, 1)) != fingerprint(functools.partial(max, 2))
    assert fingerprint(str.lower) != fingerprint(str.upper)
    assert fingerprint(None) is None
    assert fingerprint(lambda w, n=1: n) != fingerprint(lambda w, n=2: n)


def test_an_emit_by_key_is_described_by_its_function_and_its_kind() -> None:
    def emits(emit: Any) -> str | None:
        return describe_topology(wordcount(emit=emit))["counts"].functions["emit"]

    row = lambda w, n: [(w, n)]  # noqa: E731
    assert emits(by_key(row)) == emits(by_key(lambda w, n: [(w, n)]))
    assert emits(by_key(row)) != emits(row)  # the same code reading the key, not the tuple
    assert emits(by_key(row)) != emits(by_key(lambda w, n: [(w, n + 1)]))


def module_with(helper: str, pattern: str = "[a-z]+", limit: int = 3) -> dict[str, Any]:
    """A topology module's namespace: ``key`` calls the module's ``helper`` (returning
    ``helper``), ``split`` uses the module's compiled ``WORD`` and constant ``LIMIT``."""
    scope: dict[str, Any] = {"__name__": "user_topology"}
    exec(f"import re\nWORD = re.compile({pattern!r})\nLIMIT = {limit}\n"
         f"def helper(w):\n    return {helper}\n"
         "key = lambda w: helper(w)\n"
         "split = lambda line: WORD.findall(line)[:LIMIT]\n", scope)
    return scope


def test_fingerprint_follows_the_module_helpers_and_constants_it_names() -> None:
    lower = module_with("w.lower()")
    assert fingerprint(lower["key"]) == fingerprint(module_with("w.lower()")["key"])
    assert fingerprint(lower["key"]) != fingerprint(module_with("w.upper()")["key"])
    assert fingerprint(lower["split"]) != fingerprint(module_with("w", pattern="[a-z]")["split"])
    assert fingerprint(lower["split"]) != fingerprint(module_with("w", limit=4)["split"])
    assert fingerprint(lower["split"]) == fingerprint(module_with("w.upper()")["split"])


def test_fingerprints_of_another_scheme_are_not_compared() -> None:
    """Descriptions recorded before fingerprints followed helpers (no ``fingerprints``
    field): a changed key function is not refused, the plan says why, and the next deploy
    compares them."""
    old = {k: NodeDescription.from_json({f: v for f, v in d.to_json().items()
                                         if f != "fingerprints"})
           for k, d in describe_topology(wordcount()).items()}
    assert all(d.fingerprints == 1 for d in old.values())
    plan = make_plan(old, stored(wordcount()), describe_topology(wordcount(key=lambda w: w)))
    assert decision(plan, "counts")[0] is Action.CARRY
    assert "counts: functions not compared (deployed by a hailstorm that fingerprinted " \
        "them another way, scheme 1; now 2): the next deploy compares them" in plan.notes


def test_fingerprint_is_the_same_in_every_process() -> None:
    """Sets of strings iterate in an order that differs between processes; objects show
    their address: neither may change a fingerprint."""
    import subprocess
    import sys

    code = ("from hailstorm.upgrade.describe import fingerprint\n"
            "marker = object()\n"
            "def make():\n"
            "    words = {'alpha', 'beta', 'gamma', 'delta'}\n"
            "    return lambda w: (w in {'x', 'y', 'z', 'w'}, words, marker)\n"
            "print(fingerprint(make()))\n")
    prints = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
              for seed in ("1", "2", "3")}
    assert len(prints) == 1, prints


@given(st.sampled_from(["counts", "totals"]), st.integers(1, 8), st.integers(1, 5))
def test_descriptions_survive_the_expected_record(bolt: str, parallelism: int,
                                                  version: int) -> None:
    described = describe_topology(wordcount(bolt=bolt, parallelism=parallelism,
                                            version=version))
    nodes = {k: v.to_json() for k, v in described.items()}
    record = ExpectedRecord.from_json(ExpectedRecord(("bolt:x:0",), None, nodes).to_json())
    assert record.nodes is not None
    assert {k: NodeDescription.from_json(v) for k, v in record.nodes.items()} == described


def test_descriptions_with_bytes_defaults_are_json() -> None:
    t = wordcount(state=per_key(Record({"n": Count(), "users": HyperLogLog(6)})))
    nodes = {k: v.to_json() for k, v in describe_topology(t).items()}
    record = ExpectedRecord.from_json(ExpectedRecord(("bolt:x:0",), None, nodes).to_json())
    assert record.nodes is not None and record.nodes["counts"]["state"] == \
        "per_key(Record(n=Count, users=HyperLogLog(p=6)))"


def test_bolt_upgrade_arguments_are_checked() -> None:
    for bad, match in [({"version": 0}, "version must be"), ({"previously": "Bad"}, "valid"),
                       ({"previously": "counts"}, "own name"), ({"migrate": 3}, "function"),
                       ({"versoin": 2}, "unknown argument")]:
        with pytest.raises(TopologyError, match=match):
            wordcount(**bad)
    t = wordcount(previously="old", version=2, migrate=int)
    assert t.upgrades["counts"].previously == "old" and t.upgrades["counts"].version == 2


# -- the committed record's edits ---------------------------------------------------------


def test_edit_committed_renames_and_discards_bolt_instances() -> None:
    previous = CommittedRecord(3, {("words", 0): 5}, {
        "bolt:counts:0": "a3", "bolt:counts:1": "b3", "bolt:longest:0": "c3"}, 1.0)
    record = previous.succeeded_by(4, {("words", 0): 9}, {
        "bolt:counts:0": "a4", "bolt:counts:1": "b4", "bolt:longest:0": "c4",
        "sink:word_counts:0": "s"}, 2.0)
    edited = edit_committed(record, {"counts": "totals"}, {"longest"})
    assert edited.snapshots == {"bolt:totals:0": "a4", "bolt:totals:1": "b4",
                                "sink:word_counts:0": "s"}
    assert edited.clock == record.clock and edited.epoch == 4
    assert edited.previous is not None
    assert edited.previous.snapshots == {"bolt:totals:0": "a3", "bolt:totals:1": "b3"}


def test_a_new_bolt_catching_up_says_what_its_backfill_reads() -> None:
    committed = {("words", 0): 1499, ("words", 1): 1999}
    plan = make_plan(describe_topology(wordcount()), stored(wordcount()),
                     describe_topology(wordcount(extra=True)), (), None, committed)
    assert decision(plan, "longest")[1] == (
        "bolt longest: new: no committed state: starts empty and reads the retained records "
        "of its inputs (from offset 0); backfilled from offsets words:0 0..1499, words:1 "
        "0..1999 (3500 records) on its own clock while rounds keep committing; it "
        "joins the rounds' clock when it reaches it")
    assert decision(plan, "longest_word")[1].endswith("; catches up with longest")
    assert "backfilled" not in decision(plan, "counts")[1]
    starts = {("words", 0): 500, ("words", 1): 2000}
    earliest = make_plan(describe_topology(wordcount()), stored(wordcount()),
                         describe_topology(wordcount(version=2, start="earliest")), (),
                         starts, committed)
    assert decision(earliest, "counts")[0] is Action.RESTART
    assert decision(earliest, "counts")[1].endswith(
        "; backfilled from offsets words:0 500..1499 (1000 records) on its own clock while "
        "rounds keep committing; it joins the rounds' clock when it reaches it")
    latest = make_plan(describe_topology(wordcount()), stored(wordcount()),
                       describe_topology(wordcount(version=2, start="latest")), (),
                       starts, committed)
    assert "backfilled" not in decision(latest, "counts")[1]


def test_edit_committed_renames_and_drops_own_clocks() -> None:
    record = CommittedRecord(4, {("words", 0): 9}, {}, 2.0,
                             clocks={"counts": {("words", 0): 3}, "longest": {("words", 0): 1}})
    edited = edit_committed(record, {"counts": "totals"}, {"longest"})
    assert edited.clocks == {"totals": {("words", 0): 3}}
