"""Sinks that follow a changed table (hailstorm.upgrade): how two table definitions differ,
and the plan's decision for a sink whose table changed: rebuilt from the committed state
with ``--rebuild``, else refused with the fix; never carried with a progress that would
leave the new table without every row not written since."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hailstorm.monoids import Count, per_key
from hailstorm.routing import itself
from hailstorm.sinks.rebuild import rebuild_refusal
from hailstorm.topic import Topic
from hailstorm.topology import Table, Topology
from hailstorm.upgrade.describe import NodeDescription, describe_topology
from hailstorm.upgrade.plan import Plan, StoredState, make_plan
from hailstorm.upgrade.tables import table_changes, table_definition

COLUMNS = {"word": "text", "count": "bigint"}


def wordcount(*, columns: dict[str, str] | None = None, name: str = "word_counts",
              mode: str = "upsert", row: Any = None, key: Any = itself,
              version: int = 1) -> Topology:
    t = Topology("wc")
    lines = t.spout("lines", "words", decoder="text")
    counts = t.bolt("counts", [lines], state=per_key(Count()), lift=Count.lift, key=key,
                    emit=lambda w, n: [(w, n)], parallelism=2, version=version)
    t.sink("word_counts", [counts], Table(name, columns=columns or COLUMNS,
                                          key=[] if mode == "append" else ["word"],
                                          mode=mode, row=row))  # type: ignore[arg-type]
    return t


def stored(topology: Topology) -> dict[str, StoredState]:
    return {n: StoredState(str(d.state), d.schema, d.parallelism or 1)
            for n, d in describe_topology(topology).items() if d.kind == "bolt"}


def plan_of(old: Topology, new: Topology, rebuild: tuple[str, ...] = ()) -> Plan:
    states = stored(old)
    refusals = {s.name: r for s in new.sinks if (r := rebuild_refusal(new, s.name))}
    return make_plan(describe_topology(old), states, describe_topology(new),
                     rebuild=rebuild, rebuild_refusals=refusals)


def sink_line(plan: Plan) -> str:
    [line] = [n.line() for n in plan.nodes if n.kind == "sink"]
    return line


def with_length(t: Any) -> dict[str, Any]:
    return {"word": t[0], "count": t[1], "length": len(t[0])}


LENGTH = {**COLUMNS, "length": "bigint"}


def test_a_table_recorded_and_read_back_is_the_same_definition() -> None:
    described = describe_topology(wordcount(columns=LENGTH, row=with_length))["word_counts"]
    assert described.table == {"name": "word_counts", "columns": {
        "word": "text", "count": "bigint", "length": "bigint"}, "key": ["word"],
        "mode": "upsert"}
    assert NodeDescription.from_json(described.to_json()) == described
    assert described.functions["row"] is not None


def test_an_added_column_is_refused_without_rebuild_naming_the_fix() -> None:
    plan = plan_of(wordcount(), wordcount(columns=LENGTH, row=with_length))
    assert plan.refused and plan.rebuilds == ()
    assert sink_line(plan) == (
        "sink word_counts: refuse: table word_counts changed (column length (bigint) added): "
        "its progress would leave the new table without every row not written since. Fix: "
        "pass --rebuild word_counts to rebuild it from the committed state of counts (the "
        "old table is replaced), undo the change, or write the new table from a sink of "
        "another name (it gets what its inputs emit from now on)")


def test_with_rebuild_the_table_is_rebuilt_from_the_committed_state() -> None:
    plan = plan_of(wordcount(), wordcount(columns=LENGTH, row=with_length),
                   rebuild=("word_counts",))
    assert not plan.refused and plan.rebuilds == ("word_counts",)
    assert sink_line(plan) == (
        "sink word_counts: rebuild: table word_counts changed (column length (bigint) "
        "added): rebuilt from the committed state of counts: table word_counts replaces "
        "table word_counts, with every key's row from the committed round, and the sink's "
        "progress is set to the committed clock, in one transaction")


def test_a_renamed_table_is_created_and_the_old_one_left() -> None:
    plan = plan_of(wordcount(), wordcount(name="counts_v2"), rebuild=("word_counts",))
    assert "table counts_v2 changed (now table counts_v2 (was word_counts)): rebuilt " \
        in sink_line(plan)
    assert "table counts_v2 is created (table word_counts is left as it is)" in sink_line(plan)


def test_an_unchanged_table_is_carried_and_a_rebuild_on_request_is_planned() -> None:
    assert sink_line(plan_of(wordcount(), wordcount())) == \
        "sink word_counts: carry: keeps its progress"
    asked = plan_of(wordcount(), wordcount(), rebuild=("word_counts",))
    assert asked.rebuilds == ("word_counts",)
    assert "table word_counts rebuilt on request (--rebuild word_counts)" in sink_line(asked)


def test_a_changed_row_function_is_carried_with_what_it_means() -> None:
    plan = plan_of(wordcount(row=lambda t: {"word": t[0], "count": t[1]}),
                   wordcount(row=lambda t: {"word": t[0], "count": t[1] * 2}))
    assert not plan.refused and plan.rebuilds == ()
    assert "its row function changed (fingerprint)" in sink_line(plan)
    assert "--rebuild word_counts rewrites every row" in sink_line(plan)


def test_a_table_that_cannot_be_rebuilt_is_refused_with_or_without_rebuild() -> None:
    old = wordcount(mode="merge")
    new = wordcount(mode="merge", columns=LENGTH, row=with_length)
    for rebuild in ((), ("word_counts",)):
        plan = plan_of(old, new, rebuild)
        assert plan.refused and plan.rebuilds == ()
        line = sink_line(plan)
        assert line.startswith("sink word_counts: refuse: table word_counts changed (column "
                               "length (bigint) added): it cannot be rebuilt from the "
                               "committed state (table 'word_counts' is a merge table")
        assert "Fix: undo the change, or write the new table from a sink of another name" \
            in line


def test_a_table_whose_bolt_starts_over_is_refused() -> None:
    plan = plan_of(wordcount(), wordcount(columns=LENGTH, row=with_length, version=2),
                   rebuild=("word_counts",))
    assert "its input counts has no committed state this run keeps" in sink_line(plan)
    assert plan.refused and plan.rebuilds == ()


def test_rebuild_of_no_kept_sink_is_a_note() -> None:
    plan = plan_of(wordcount(), wordcount(), rebuild=("nothing",))
    assert plan.notes == ("--rebuild nothing: no deployed sink of that name is kept, so "
                          "nothing is rebuilt",)


def test_a_definition_recorded_by_an_older_driver_is_not_compared() -> None:
    old = describe_topology(wordcount())
    old["word_counts"] = NodeDescription("word_counts", "sink", ("counts",), 1)
    new = wordcount(columns=LENGTH, row=with_length)
    plan = make_plan(old, stored(new), describe_topology(new))
    assert sink_line(plan) == "sink word_counts: carry: keeps its progress"


TYPES = st.sampled_from(["text", "bigint", "integer", "double precision", "boolean"])
NAMES = st.sampled_from(["a", "b", "c", "d", "e"])


@given(st.dictionaries(NAMES, TYPES, min_size=1), st.dictionaries(NAMES, TYPES, min_size=1),
       st.booleans())
def test_changes_are_empty_exactly_when_the_definitions_are_the_same(
    old_columns: dict[str, str], new_columns: dict[str, str], reorder: bool,
) -> None:
    """Column order does not count; every added, removed or retyped column is named once."""
    key = [sorted(old_columns)[0]]
    old = table_definition(Table("t", old_columns, key=key))
    if reorder:
        new_columns = dict(reversed(list(new_columns.items())))
    new_key = key if key[0] in new_columns else [sorted(new_columns)[0]]
    new = table_definition(Table("t", new_columns, key=new_key))
    changes = table_changes(old, new)
    same = old_columns == new_columns and key == new_key
    assert (changes == []) == same
    named = {c for c in set(old_columns) | set(new_columns)
             if old_columns.get(c) != new_columns.get(c)}
    assert {change.split()[1] for change in changes if change.startswith("column ")} == named


def to_topic(topic: str = "word-totals") -> Topology:
    """The word count writing its totals to a topic instead of a table."""
    t = Topology("wc")
    lines = t.spout("lines", "words", decoder="text")
    counts = t.bolt("counts", [lines], state=per_key(Count()), lift=Count.lift, key=itself,
                    emit=lambda w, n: [(w, n)], parallelism=2)
    t.sink("word_counts", [counts], Topic(topic, key=lambda r: r[0], value=lambda r: r[1]))
    return t


def test_a_sink_whose_target_changed_between_a_topic_and_a_table_is_refused() -> None:
    fix = "Fix: keep the old target, or write the new one from a sink of another name (it " \
        "gets what its inputs emit from now on)"
    for old, new, change in [(wordcount(), to_topic(), "table word_counts -> topic word-totals"),
                             (to_topic(), wordcount(), "topic word-totals -> table word_counts"),
                             (to_topic(), to_topic("totals-2"),
                              "topic word-totals -> topic totals-2")]:
        assert sink_line(plan_of(old, new)) == (
            f"sink word_counts: refuse: its target changed ({change}): the new one holds "
            f"none of the rows written so far, and the progress kept would leave it so. {fix}")
    assert sink_line(plan_of(to_topic(), to_topic())) == \
        "sink word_counts: carry: keeps its progress"
    # an older driver recorded no topic for a topic sink: not compared
    older = {n: d if d.kind != "sink" else NodeDescription(d.name, "sink", d.inputs, 1)
             for n, d in describe_topology(to_topic()).items()}
    plan = make_plan(older, stored(to_topic()), describe_topology(wordcount()))
    assert sink_line(plan) == "sink word_counts: carry: keeps its progress"
