"""Sinks refuse to go backwards (hailstorm.processors.sink_guard), and what the ways forward
rely on: the acceptance record, which sinks ``hailstorm sink rebuild`` can rebuild and the
rows it writes. Pure: no database, no ZooKeeper."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm import Count, Sum, Table, Topic, Topology, by_key, itself, per_key
from hailstorm.export.sink_rebuild import rebuilt_rows
from hailstorm.processors.sink_guard import (
    SHOWN_PARTITIONS,
    CommittedRound,
    behind_reason,
    opening_shortfall,
    progress_shortfall,
)
from hailstorm.protocol.acceptance import SinkAcceptance, acceptance_node
from hailstorm.protocol.clock import NOTHING, Clock, Partition
from hailstorm.protocol.layout import LayoutError, TopologyPaths
from hailstorm.sinks.rebuild import rebuild_refusal, sink_progress_id, source_topics_of
from hailstorm.topology import BoltSpec

P0: Partition = ("words", 0)
P1: Partition = ("words", 1)
OTHER: Partition = ("clicks", 0)
"""A source partition no upstream of the sink carries."""
CARRIED = frozenset({P0, P1})
CLOCK: Clock = {P0: 151_399, P1: 150_000, OTHER: 70}


def saved(clock: Clock = CLOCK, epoch: int = 12) -> CommittedRound:
    return CommittedRound(epoch, dict(clock), saved=True)


# -- the opening decision ---------------------------------------------------------------


def test_nothing_committed_is_never_behind() -> None:
    assert opening_shortfall({}, None, CARRIED) == {}


def test_a_committed_clock_of_nothing_needs_no_progress() -> None:
    assert opening_shortfall({}, saved({P0: NOTHING, P1: NOTHING}), CARRIED) == {}


def test_a_sink_that_did_not_save_the_committed_round_starts_at_its_clock() -> None:
    """A sink added to the topology (or a new table or topic name) has no progress: legit."""
    new = CommittedRound(12, dict(CLOCK), saved=False)
    assert opening_shortfall({}, new, CARRIED) == {}


def test_a_recreated_database_is_behind_on_every_carried_partition() -> None:
    assert opening_shortfall({}, saved(), CARRIED) == {P0: (NOTHING, 151_399),
                                                       P1: (NOTHING, 150_000)}


def test_a_restored_backup_is_behind_where_it_is_older() -> None:
    stored = {P0: 100_000, P1: 150_000}
    assert opening_shortfall(stored, saved(), CARRIED) == {P0: (100_000, 151_399)}


def test_progress_at_or_ahead_of_the_committed_clock_goes_on() -> None:
    assert opening_shortfall({P0: 151_399, P1: 150_000}, saved(), CARRIED) == {}
    assert opening_shortfall({P0: 200_000, P1: 160_000}, saved(), CARRIED) == {}


def test_partitions_no_upstream_carries_need_no_progress() -> None:
    assert opening_shortfall({P0: 151_399, P1: 150_000}, saved(), CARRIED) == {}
    assert OTHER not in opening_shortfall({}, saved(), CARRIED)


def test_an_acceptance_covering_the_committed_clock_lets_it_go_on() -> None:
    assert opening_shortfall({}, saved(), CARRIED, accepted=dict(CLOCK)) == {}
    ahead = {p: o + 5 for p, o in CLOCK.items()}
    assert opening_shortfall({}, saved(), CARRIED, accepted=ahead) == {}


def test_an_older_acceptance_does_not_cover_a_newer_committed_clock() -> None:
    older = {P0: 100_000, P1: 150_000}
    assert opening_shortfall({}, saved(), CARRIED, accepted=older) == {
        P0: (NOTHING, 151_399), P1: (NOTHING, 150_000)}


clocks = st.dictionaries(st.sampled_from([P0, P1, OTHER]), st.integers(-1, 50), max_size=3)


@given(stored=clocks, committed=clocks, accepted=st.none() | clocks, was_saved=st.booleans())
def test_behind_exactly_where_a_saved_round_is_not_covered(
        stored: Clock, committed: Clock, accepted: Clock | None, was_saved: bool) -> None:
    """The whole rule, against a direct statement of it."""
    got = opening_shortfall(stored, CommittedRound(3, committed, was_saved), CARRIED, accepted)
    expected = {p: (stored.get(p, NOTHING), c) for p, c in committed.items()
                if p in CARRIED and stored.get(p, NOTHING) < c}
    if not was_saved or (accepted is not None and all(
            accepted.get(p, NOTHING) >= c for p, (_, c) in expected.items())):
        expected = {}
    assert got == expected
    for p, (have, need) in got.items():
        assert p in CARRIED and have < need


@given(stored=clocks, floor=clocks)
def test_running_progress_must_not_drop_below_what_the_writer_committed(
        stored: Clock, floor: Clock) -> None:
    got = progress_shortfall(stored, floor, CARRIED)
    covered = all(stored.get(p, NOTHING) >= o for p, o in floor.items() if p in CARRIED)
    assert (got == {}) == covered
    if got:
        assert list(got) == sorted(got)


# -- the halt line ----------------------------------------------------------------------


def test_the_halt_line_names_sink_table_progress_clock_and_ways_forward() -> None:
    line = behind_reason(
        "word_counts", "table word_counts at postgresql://app:***@db/prod",
        {P0: (NOTHING, 151_399), P1: (5, 150_000)},
        against="the committed clock of round 12",
        arguments="topologies/wordcount.py word_counts", rebuild=True)
    assert "\n" not in line
    for part in ("sink word_counts", "table word_counts at postgresql://app:***@db/prod",
                 '{"words:0": -1, "words:1": 5}', "committed clock of round 12",
                 '{"words:0": 151399, "words:1": 150000}',
                 "'hailstorm sink rebuild topologies/wordcount.py word_counts'",
                 "'hailstorm sink accept topologies/wordcount.py word_counts'",
                 "A sink behind the committed clock"):
        assert part in line


def test_the_halt_line_offers_only_acceptance_when_rebuilding_is_impossible() -> None:
    line = behind_reason("out", "topic totals", {P0: (NOTHING, 3)}, against="x",
                         arguments="t.py out --name t_1", rebuild=False)
    assert "rebuild" not in line
    assert "Accept the gap with 'hailstorm sink accept t.py out --name t_1'" in line


def test_the_halt_line_stays_short_with_many_partitions() -> None:
    many = {("words", i): (NOTHING, 10 + i) for i in range(SHOWN_PARTITIONS + 60)}
    line = behind_reason("s", "table s", many, against="c", arguments="t.py s", rebuild=False)
    assert "... 60 more" in line
    assert len(line) < 900


# -- the acceptance record ----------------------------------------------------------------


def test_an_acceptance_round_trips_and_lives_under_the_topology() -> None:
    acceptance = SinkAcceptance("word_counts", 12, dict(CLOCK), 1763831000.5)
    assert SinkAcceptance.from_json(acceptance.to_json()) == acceptance
    assert acceptance_node(TopologyPaths("wordcount"), "word_counts") == \
        "/hailstorm/wordcount/sink-acceptances/word_counts"


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"sink": "s"}', b'{"sink": "s", "epoch": 1, '
                                 b'"clock": {"nocolon": 1}, "accepted_at": 0}'])
def test_an_unreadable_acceptance_is_a_layout_error(raw: bytes) -> None:
    with pytest.raises(LayoutError):
        SinkAcceptance.from_json(raw)


def test_an_acceptance_names_one_sink() -> None:
    with pytest.raises(LayoutError):
        acceptance_node(TopologyPaths("wordcount"), "a/b")


# -- what can be rebuilt ------------------------------------------------------------------


def _topology() -> Topology:
    topology = Topology("rebuilds")
    words = topology.spout("lines", topic="words", decoder="text", explode=str.split)
    topology.spout("clicks", topic="clicks", decoder="text")
    counts = topology.bolt("counts", inputs=[words], key=itself, state=per_key(Count()),
                           lift=Count.lift, emit=lambda w, n: [(w, n)], parallelism=2)
    by_first = topology.bolt("by_first", inputs=[words], key=lambda w: w[:1],
                             state=per_key(Count()), lift=Count.lift,
                             emit=lambda w, n: [(w[:1], n)])
    initials = topology.bolt("initials", inputs=[words], key=lambda w: w[:1],
                             state=per_key(Count()), lift=Count.lift,
                             emit=by_key(lambda letter, n: [(letter, n)]))
    total = topology.bolt("total", inputs=[words], state=Sum(), lift=lambda _: 1,
                          emit=lambda _, n: [(n,)])
    upsert = Table("counts", columns={"word": "text", "count": "bigint"}, key=["word"])
    topology.sink("counts_table", inputs=[counts], target=upsert)
    topology.sink("merged", inputs=[counts], target=Table(
        "merged", columns={"word": "text", "count": "bigint"}, key=["word"], mode="merge"))
    topology.sink("topic", inputs=[counts], target=Topic("totals", key=lambda t: t[0]))
    topology.sink("by_first_table", inputs=[by_first], target=Table(
        "by_first", columns={"letter": "text", "count": "bigint"}, key=["letter"]))
    topology.sink("initials_table", inputs=[initials], target=Table(
        "initials", columns={"letter": "text", "count": "bigint"}, key=["letter"]))
    topology.sink("total_table", inputs=[total], target=Table(
        "total", columns={"n": "bigint"}, key=["n"]))
    return topology


def test_only_an_upsert_table_of_a_bolt_keyed_by_its_tuples_can_be_rebuilt() -> None:
    topology = _topology()
    assert rebuild_refusal(topology, "counts_table") is None
    assert "merge table" in (rebuild_refusal(topology, "merged") or "")
    assert "not a table" in (rebuild_refusal(topology, "topic") or "")
    assert "key=itself" in (rebuild_refusal(topology, "by_first_table") or "")
    assert rebuild_refusal(topology, "initials_table") is None  # emit=by_key reads keys
    assert "per_key" in (rebuild_refusal(topology, "total_table") or "")
    assert "not a sink" in (rebuild_refusal(topology, "counts") or "")


def test_a_sinks_partitions_are_those_of_the_topics_upstream() -> None:
    topology = _topology()
    assert source_topics_of(topology, "counts_table") == {"words"}
    assert sink_progress_id("rebuilds_1", "counts_table") == "rebuilds_1/sink:counts_table:0"


def test_rebuilt_rows_are_the_last_emit_of_every_key_of_every_instance() -> None:
    topology = _topology()
    bolt = topology.node("counts")
    sink = topology.node("counts_table")
    assert isinstance(bolt, BoltSpec)
    rows, refused = rebuilt_rows(sink.target, bolt, [{"a": 3, "b": 1}, {"c": 7}])  # type: ignore[union-attr]
    assert sorted(rows) == [("a", 3), ("b", 1), ("c", 7)]
    assert refused == 0


def test_emitted_tuples_that_are_no_row_are_counted_not_written() -> None:
    topology = Topology("refusing")
    words = topology.spout("lines", topic="words", decoder="text")
    counts = topology.bolt("counts", inputs=[words], key=itself, state=per_key(Count()),
                           lift=Count.lift, emit=lambda w, n: [(w, n if w != "bad" else "x")])
    topology.sink("t", inputs=[counts], target=Table(
        "t", columns={"word": "text", "count": "bigint"}, key=["word"]))
    bolt = topology.node("counts")
    assert isinstance(bolt, BoltSpec)
    rows, refused = rebuilt_rows(topology.node("t").target, bolt,  # type: ignore[union-attr]
                                 [{"good": 2, "bad": 1}])
    assert rows == [("good", 2)]
    assert refused == 1
