"""The negotiator's machine with a node catching up on its own clock: the rewind with two
clocks, rounds committing different clocks for different nodes, joining, and the
protocol violations and backward moves it refuses; the records' JSON forms."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from hailstorm.negotiator.machine import CommitClock, Config, Decision, View, step
from hailstorm.protocol.clock import Clock
from hailstorm.protocol.layout import (
    CommittedRecord,
    MasterRecord,
    ProcessorReport,
    ProcessorState,
    SnapshotReport,
    expected_processor_ids,
)
from hailstorm.protocol.states import (
    Flowing,
    Initialize,
    MasterState,
    SpoutsPaused,
    SpoutsRewind,
    is_legal,
)

P0, P1 = ("words", 0), ("words", 1)
S0, S1 = "spout:lines:words:0", "spout:lines:words:1"
COUNTS = ("bolt:counts:0", "bolt:counts:1")
CASED = ("bolt:cased:0",)
OUT = "sink:out:0"
EXPECTED = frozenset(expected_processor_ids({"lines": [P0, P1]}, {"counts": 2, "cased": 1},
                                            {"out": 1}))
INPUTS = {"counts": frozenset({"lines"}), "cased": frozenset({"lines"}),
          "out": frozenset({"cased"})}
CATCHING = frozenset({"cased", "out"})
K = {P0: 99, P1: 99}
COMMITTED = CommittedRecord(5, K, {b: f"file:///{b}/5" for b in COUNTS})
T0 = 1000.0


def view(living: Mapping[str, ProcessorReport], snapshots: Mapping[str, SnapshotReport] = {},
         committed: CommittedRecord | None = COMMITTED, inputs: Mapping[str, frozenset[str]]
         = INPUTS) -> View:
    return View(T0 + 1, T0, EXPECTED, dict(living), dict(snapshots), committed, 7,
                inputs=dict(inputs))


def step_checked(state: MasterState, v: View) -> Decision:
    d = step(state, v, Config())
    if d.next_state is not None:
        assert is_legal(state, d.next_state)
    return d


def ready(e: int, cased: Clock) -> dict[str, ProcessorReport]:
    loads = {b: K for b in COUNTS} | {b: cased for b in CASED}
    return {p: ProcessorReport(p, ProcessorState.READY, e, loaded=loads.get(p) if p in loads
                               else None) for p in EXPECTED}


def paused(e: int, live: Clock, backfill: Clock | None) -> dict[str, ProcessorReport]:
    out = ready(e, {})
    for pid, p in ((S0, P0), (S1, P1)):
        out[pid] = ProcessorReport(pid, ProcessorState.PAUSED, e, position={p: live[p]},
                                   backfill=None if backfill is None else {p: backfill[p]})
    return out


def saves(e: int, counts: Clock, cased: Clock, out: Clock) -> dict[str, SnapshotReport]:
    labels = {b: counts for b in COUNTS} | {b: cased for b in CASED} | {OUT: out}
    return {p: SnapshotReport(p, e, dict(c), f"file:///{p}/{e}") for p, c in labels.items()}


def test_rewind_with_two_clocks() -> None:
    d = step_checked(Initialize(8), view(ready(8, {})))
    assert d.next_state == SpoutsRewind(8, K, {P0: -1, P1: -1}, CATCHING)
    assert "cased, out catch up from" in d.reason
    # without the graph (an older driver) nobody catches up: one low water mark
    d = step_checked(Initialize(8), view(ready(8, {}), inputs={}))
    assert d.next_state == SpoutsRewind(8, {P0: -1, P1: -1})
    # a bolt still catching up loads its own clock, and the backfill starts there
    d = step_checked(Initialize(8), view(ready(8, {P0: 40, P1: 60})))
    assert d.next_state == SpoutsRewind(8, K, {P0: 40, P1: 60}, CATCHING)


def test_rounds_carry_the_nodes_catching_up() -> None:
    rewound = {p: ProcessorReport(p, ProcessorState.REWOUND, 8, position={q: 99})
               for p, q in ((S0, P0), (S1, P1))}
    d = step_checked(SpoutsRewind(8, K, {P0: -1, P1: -1}, CATCHING),
                     view(ready(8, {}) | rewound))
    assert d.next_state == Flowing(8, None, catching_up=CATCHING)
    d = step(Flowing(8, None, catching_up=CATCHING),
             View(T0 + 60, T0, EXPECTED, ready(8, {}), {}, COMMITTED, 8, inputs=INPUTS),
             Config())
    assert d.next_state == SpoutsPaused(9, CATCHING)
    d = step_checked(SpoutsPaused(9, CATCHING), view(paused(9, {P0: 120, P1: 130},
                                                            {P0: 30, P1: 40})))
    assert d.next_state == Flowing(9, {P0: 120, P1: 130}, {P0: 30, P1: 40}, CATCHING)
    # a spout whose cursors joined reports no backfill: its live position counts
    d = step_checked(SpoutsPaused(9, CATCHING), view(paused(9, {P0: 120, P1: 130},
                                                            None)))
    assert d.next_state == Flowing(9, {P0: 120, P1: 130}, {P0: 120, P1: 130}, CATCHING)


LIVE = {P0: 120, P1: 130}
BACK = {P0: 30, P1: 40}
ROUND = Flowing(9, LIVE, BACK, CATCHING)


def commit_of(d: Decision) -> CommitClock:
    commits = [a for a in d.actions if isinstance(a, CommitClock)]
    assert len(commits) == 1, d
    return commits[0]


def test_a_round_commits_each_node_at_its_clock() -> None:
    d = step_checked(ROUND, view(ready(8, {}), saves(9, LIVE, BACK, BACK)))
    assert d.next_state == Flowing(9, None, catching_up=CATCHING)
    commit = commit_of(d)
    assert commit.clock == LIVE and commit.clocks == {"cased": BACK, "out": BACK}
    assert "catching up: cased at" in d.reason
    # a bolt that loaded above the backfill clock somewhere saves its raised label
    raised = {P0: 50, P1: 40}
    commit = commit_of(step_checked(ROUND, view(ready(8, {}), saves(9, LIVE, raised, BACK))))
    assert commit.clocks == {"cased": raised, "out": BACK}


def test_joining() -> None:
    joined = Flowing(9, LIVE, LIVE, CATCHING)
    d = step_checked(joined, view(ready(8, {}), saves(9, LIVE, LIVE, LIVE)))
    assert commit_of(d).clocks == {}
    assert "cased, out caught up" in d.reason


def test_wrong_labels_restart() -> None:
    for counts, cased, out, who in (
            (BACK, BACK, BACK, "bolt:counts:0 saved round 9"),
            (LIVE, {P0: 29, P1: 40}, BACK, "bolt:cased:0 (catching up) saved round 9"),
            (LIVE, {P0: 121, P1: 130}, BACK, "bolt:cased:0 (catching up) saved round 9"),
            (LIVE, BACK, LIVE, "sink:out:0 saved round 9")):
        d = step_checked(ROUND, view(ready(8, {}), saves(9, counts, cased, out)))
        assert isinstance(d.next_state, Initialize), (counts, cased, out)
        assert d.reason.startswith(who), d.reason


def test_a_node_clock_never_goes_back() -> None:
    ahead = CommittedRecord(5, K, {b: f"file:///{b}/5" for b in COUNTS + CASED},
                            clocks={"cased": {P0: 35, P1: 40}})
    d = step_checked(ROUND, view(ready(8, {}), saves(9, LIVE, BACK, BACK), ahead))
    assert d.next_state == Flowing(9, None, catching_up=CATCHING)
    assert not any(isinstance(a, CommitClock) for a in d.actions)
    assert "cased would be at" in d.reason


@given(st.integers(-1, 99), st.integers(-1, 99), st.integers(0, 40), st.integers(0, 40))
def test_committed_clocks_lie_between_backfill_and_live(b0: int, b1: int, g0: int,
                                                        g1: int) -> None:
    """Whatever the cursors' positions, a commit records every node catching up between its
    backfill clock and the round's clock, and none at the round's clock."""
    live = {P0: 99 + g0, P1: 99 + g1}
    backfill = {P0: min(b0, live[P0]), P1: min(b1, live[P1])}
    state = Flowing(9, live, backfill, CATCHING)
    d = step_checked(state, view(ready(8, {}), saves(9, live, backfill, backfill)))
    commit = commit_of(d)
    assert commit.clock == live
    for node, clock in commit.clocks.items():
        assert all(backfill[p] <= clock[p] <= live[p] for p in (P0, P1))
        assert clock != live, node
    assert set(commit.clocks) == (set() if backfill == live else CATCHING)


def test_json_round_trips() -> None:
    for state in (SpoutsRewind(8, K, {P0: -1, P1: 3}, CATCHING), SpoutsPaused(9, CATCHING),
                  Flowing(9, LIVE, BACK, CATCHING), Flowing(9, None, catching_up=CATCHING),
                  Flowing(9, LIVE), SpoutsRewind(8, K)):
        record = MasterRecord(state, 1.5, "me", "why")
        assert MasterRecord.from_json(record.to_json()) == record
    assert b"catching_up" not in MasterRecord(Flowing(9, LIVE), 1.0).to_json()
    report = ProcessorReport(S0, ProcessorState.PAUSED, 9, {P0: 120}, backfill={P0: 30})
    assert ProcessorReport.from_json(report.to_json()) == report
    committed = COMMITTED.succeeded_by(9, LIVE, {}, 2.0, clocks={"cased": BACK})
    again = CommittedRecord.from_json(committed.to_json())
    assert again == committed and again.clock_of("cased") == BACK
    assert again.clock_of("counts") == LIVE and again.previous == COMMITTED
    assert Flowing(9, LIVE, BACK, CATCHING).clock_for("cased") == BACK
    assert Flowing(9, LIVE, BACK, CATCHING).clock_for("counts") == LIVE
