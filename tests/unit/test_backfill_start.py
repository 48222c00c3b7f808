"""Where a bolt without committed state starts (``start=``): the loaded clock its empty
state stands for (``fresh_clock``), what the plan says and refuses when the records before
its inputs' log start are gone, and the spout's halt naming the culprit."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.kafka import lost_offsets_message
from hailstorm.monoids import Count, Max, per_key
from hailstorm.protocol.clock import NOTHING, fresh_clock
from hailstorm.topology import Table, Topology, TopologyError
from hailstorm.upgrade.describe import describe_topology
from hailstorm.upgrade.plan import (
    Action,
    Plan,
    StoredState,
    gone_before,
    make_plan,
    source_topics,
)

WORDS = Table("word_counts", columns={"word": "text", "n": "bigint"}, key=["word"],
              mode="upsert")
LONGEST = Table("longest_word", columns={"n": "bigint"}, mode="append")


def wordcount(*, longest: dict[str, Any] | None = None, version: int = 1,
              start: str | None = None, other_topic: bool = False) -> Topology:
    """A word count; with ``longest`` (its upgrade arguments) a second bolt and sink, on
    topic ``other`` when ``other_topic``."""
    t = Topology("wc")
    lines = t.spout("lines", "words", decoder="text")
    extra: dict[str, Any] = {"version": version} if version != 1 else {}
    if start is not None:
        extra["start"] = start
    counts = t.bolt("counts", [lines], state=per_key(Count()), lift=lambda w: 1,
                    key=str.lower, parallelism=2, emit=lambda w, n: [(w, n)], **extra)
    t.sink("word_counts", [counts], WORDS)
    if longest is not None:
        source = t.spout("others", "other", decoder="text") if other_topic else lines
        bolt = t.bolt("longest", [source], state=Max(), lift=len, emit=lambda w, n: [(n,)],
                      **longest)
        t.sink("longest_word", [bolt], LONGEST)
    return t


def plan_of(old: Topology, new: Topology, log_starts: dict[tuple[str, int], int] | None
            ) -> Plan:
    stored = {n: StoredState(str(d.state), d.schema, d.parallelism or 1)
              for n, d in describe_topology(old).items() if d.kind == "bolt"}
    return make_plan(describe_topology(old), stored, describe_topology(new), (), log_starts)


def line(plan: Plan, node: str) -> tuple[Action, str]:
    [found] = [n for n in plan.nodes if n.node == node]
    return found.action, found.line()


RETAINED = {("words", 0): 3000, ("words", 1): 0}


# ------------------------------------------------------------------ fresh_clock


def test_no_start_stands_for_nothing() -> None:
    assert fresh_clock(None, {("words", 0): 10}, {("words", 0): 5}) == {}


def test_latest_is_the_committed_clock() -> None:
    committed = {("words", 0): 15310, ("words", 1): NOTHING}
    assert fresh_clock("latest", committed, {}) == committed
    assert fresh_clock("latest", None, {}) == {}


def test_earliest_is_everything_before_the_log_start() -> None:
    committed = {("words", 0): 15310, ("words", 1): 20}
    assert fresh_clock("earliest", committed, {("words", 0): 3000, ("words", 1): 0}) == \
        {("words", 0): 2999}


def test_earliest_never_passes_the_committed_round() -> None:
    """Retention past the committed clock: the other bolts' need stays the low water
    mark, so the halt for the committed state's lost records stays too."""
    assert fresh_clock("earliest", {("words", 0): 100}, {("words", 0): 3000}) == \
        {("words", 0): 100}


def test_an_unknown_start_is_an_error() -> None:
    with pytest.raises(ValueError, match="start must be"):
        fresh_clock("now", {}, {})


partitions = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2))
offsets = st.integers(NOTHING, 10_000)


@given(st.dictionaries(partitions, offsets), st.dictionaries(partitions, st.integers(0, 10_000)),
       st.sampled_from([None, "earliest", "latest"]))
def test_a_fresh_clock_is_never_beyond_the_committed_round(
        committed: dict[tuple[str, int], int], starts: dict[tuple[str, int], int],
        start: str | None) -> None:
    """The low water mark over the bolts stays at or below what every carried bolt loaded
    (the committed clock): a fresh bolt never makes the spouts skip a record a carried bolt
    needs, and it never asks for a record before the log start unless it declares none."""
    clock = fresh_clock(start, committed, starts)
    for p, mark in clock.items():
        assert mark <= committed.get(p, NOTHING)
        assert mark > NOTHING or start == "latest"
    if start == "earliest":
        for p, log_start in starts.items():
            expected = min(log_start - 1, committed.get(p, NOTHING))
            assert clock.get(p, NOTHING) == max(expected, NOTHING)
            # the spouts read it from the log start, or from the committed round on
            assert clock.get(p, NOTHING) + 1 >= min(log_start, committed.get(p, NOTHING) + 1)


# ------------------------------------------------------------------ the plan


def test_a_new_bolt_whose_records_are_gone_is_refused_naming_it() -> None:
    plan = plan_of(wordcount(), wordcount(longest={}), RETAINED)
    action, text = line(plan, "longest")
    assert action is Action.REFUSE
    assert text == (
        "bolt longest: refuse: no committed state: it would read its inputs from offset 0, "
        "but records are gone: words:0 offsets 0..2999. Fix: declare start='earliest' on "
        "the bolt (read from the log start, without them) or start='latest' (start empty at "
        "the committed round's clock)")
    assert line(plan, "counts")[0] is Action.CARRY


def test_start_earliest_says_what_is_missing() -> None:
    plan = plan_of(wordcount(), wordcount(longest={"start": "earliest"}), RETAINED)
    assert line(plan, "longest") == (Action.NEW, (
        "bolt longest: new: no committed state: starts empty and reads the retained records "
        "of its inputs from their log start (start='earliest'; gone: words:0 offsets "
        "0..2999)"))
    assert not plan.refused


def test_start_earliest_with_nothing_gone() -> None:
    plan = plan_of(wordcount(), wordcount(longest={"start": "earliest"}), {("words", 0): 0})
    assert line(plan, "longest")[1].endswith("(start='earliest'; nothing is gone)")


def test_start_latest_reads_nothing_before_the_committed_round() -> None:
    plan = plan_of(wordcount(), wordcount(longest={"start": "latest"}), RETAINED)
    assert line(plan, "longest") == (Action.NEW, (
        "bolt longest: new: no committed state: starts empty at the committed round's clock "
        "(start='latest'): no record up to it is read"))


def test_a_raised_version_is_checked_too() -> None:
    refused = plan_of(wordcount(), wordcount(version=2), RETAINED)
    assert line(refused, "counts")[0] is Action.REFUSE
    assert "version 1 -> 2: its state is dropped: it would read" in line(refused, "counts")[1]
    plan = plan_of(wordcount(), wordcount(version=2, start="latest"), RETAINED)
    assert line(plan, "counts") == (Action.RESTART, (
        "bolt counts: restart: version 1 -> 2: its state is dropped: starts empty at the "
        "committed round's clock (start='latest'): no record up to it is read"))
    assert plan.discarded == {"counts"}


def test_nothing_gone_or_unknown_is_read_from_offset_0() -> None:
    for starts in ({("words", 0): 0}, None):
        action, text = line(plan_of(wordcount(), wordcount(longest={}), starts), "longest")
        assert action is Action.NEW
        assert text.endswith("starts empty and reads the retained records of its inputs "
                             "(from offset 0)")


def test_only_the_bolts_own_topics_count() -> None:
    plan = plan_of(wordcount(), wordcount(longest={}, other_topic=True), RETAINED)
    assert line(plan, "longest")[0] is Action.NEW
    assert source_topics("longest", describe_topology(wordcount(longest={},
                                                                other_topic=True))) == {"other"}
    assert source_topics("longest_word", describe_topology(wordcount(longest={}))) == {"words"}


def test_a_first_deployment_is_not_checked() -> None:
    plan = make_plan(None, {}, describe_topology(wordcount(longest={})), (), RETAINED)
    assert not plan.refused


def test_gone_before() -> None:
    assert gone_before({"words"}, {**RETAINED, ("other", 0): 5}) == {("words", 0): 3000}


def test_start_is_described_and_checked() -> None:
    assert describe_topology(wordcount(longest={"start": "latest"}))["longest"].start == "latest"
    with pytest.raises(TopologyError, match="start must be 'earliest' or 'latest'"):
        wordcount(longest={"start": "now"})


# ------------------------------------------------------------------ the spout's halt


def test_the_halt_blames_a_fresh_bolt_when_the_committed_state_does_not_need_the_records(
        ) -> None:
    text = lost_offsets_message("words", 0, 0, 3000, 15311, committed=15310)
    assert "a bolt without committed state (new, or a raised version=) must read from " \
        "offset 0" in text
    assert "the committed state (through offset 15310) does not need them" in text
    assert "start='earliest'" in text and "hailstorm plan" in text


def test_the_halt_blames_the_committed_state_when_it_needs_them() -> None:
    for committed in (None, 15310):
        text = lost_offsets_message("words", 0, 15311, 16000, 17000, committed=committed)
        assert "records the committed state depends on are gone" in text


def test_a_new_bolt_fed_only_through_carried_bolts_starts_at_the_committed_clock() -> None:
    def chained() -> Topology:
        t = wordcount()
        totals = t.bolt("totals", [t.node("counts")], state=Count(), lift=lambda wn: 1,
                        emit=lambda wn, n: [n])
        t.bolt("again", [totals], state=Count(), lift=lambda n: 1)
        return t

    for gone in (None, RETAINED):  # records it could not get anyway are no reason to refuse
        plan = plan_of(wordcount(), chained(), gone)
        for bolt in ("totals", "again"):
            action, text = line(plan, bolt)
            assert action is Action.NEW
            assert text.endswith("no committed state: starts empty at the committed round's "
                                 "clock: it is fed only through carried bolts, which send "
                                 "what they emit from then on (no record is replayed for it)")
    assert not line(plan_of(wordcount(), wordcount(longest={}), None), "longest")[1] \
        .endswith("(no record is replayed for it)")


def test_a_new_bolt_reading_a_spout_and_a_carried_bolt_is_told_what_it_misses() -> None:
    def mixed() -> Topology:
        t = wordcount()
        t.bolt("both", [t.node("lines"), t.node("counts")], state=Count(), lift=lambda x: 1)
        return t

    action, text = line(plan_of(wordcount(), mixed(), {("words", 0): 0}), "both")
    assert action is Action.NEW
    assert text.endswith("(from offset 0); but its input counts is carried and sends only "
                         "what it emits from the committed round on, not its history")


def test_a_new_bolt_reading_a_spout_and_a_carried_bolt_catches_up_holding_it() -> None:
    t = wordcount()
    t.bolt("both", [t.node("lines"), t.node("counts")], state=Count(), lift=lambda x: 1)
    committed = {("words", 0): 99, ("words", 1): 49}
    plan = make_plan(describe_topology(wordcount()),
                     {n: StoredState(str(d.state), d.schema, d.parallelism or 1)
                      for n, d in describe_topology(wordcount()).items() if d.kind == "bolt"},
                     describe_topology(t), (), None, committed)
    assert line(plan, "both")[1].endswith(
        "not its history; backfilled from offsets words:0 0..99, words:1 0..49 (150 records) "
        "on its own clock while rounds keep committing; it joins the rounds' clock when "
        "it reaches it")
    action, text = line(plan, "counts")
    assert action is Action.CARRY
    assert text.endswith("; held while both catches up: it reads the backfill with them, drops "
                         "what its state holds, and moves past the committed round when the "
                         "backfill does (its readers get what it emits on the backfill's "
                         "clock)")
    assert line(plan, "word_counts")[1].endswith("; catches up with counts")


def test_a_bolt_still_catching_up_goes_on_and_feeds_its_history() -> None:
    """Deployed again while ``counts`` catches up on its own clock (the committed record's
    entry): the plan says its backfill goes on, and a new bolt fed only through it is
    built from history (it sends its backfill), not started at the committed clock."""
    t = wordcount()
    t.bolt("totals", [t.node("counts")], state=Count(), lift=lambda x: 1)
    committed = {("words", 0): 99, ("words", 1): 49}
    stored = {n: StoredState(str(d.state), d.schema, d.parallelism or 1)
              for n, d in describe_topology(wordcount()).items() if d.kind == "bolt"}
    plan = make_plan(describe_topology(wordcount()), stored, describe_topology(t), (), None,
                     committed, own_clocks={"counts": {("words", 0): 9, ("words", 1): 4}})
    action, text = line(plan, "counts")
    assert action is Action.CARRY
    assert text.endswith("; still catching up: carried at its own clock (words:0 9, "
                         "words:1 4), and its backfill goes on from there")
    action, text = line(plan, "totals")
    assert action is Action.NEW
    assert "; but its input counts is carried, still catching up, and sends only what it " \
        "emits from its own clock (words:0 9, words:1 4) on, not its history before it" in text
    assert "; backfilled from offsets words:0 0..99, words:1 0..49 (150 records)" in text
    current = make_plan(describe_topology(wordcount()), stored, describe_topology(t), (),
                        None, committed)
    assert "(no record is replayed for it)" in line(current, "totals")[1]
