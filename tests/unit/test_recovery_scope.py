"""Local or global recovery (issue 42): which instances failed, and whether they could
restart alone (:mod:`hailstorm.protocol.alone`). The decision is recorded with every
recovery; the machine acts on it when the run turned local recovery on
(``tests/unit/test_negotiator_local.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.negotiator.recovery_scope import RecoveryScope, failed_instances, recovery_scope
from hailstorm.protocol.alone import Shape, alone_nodes
from hailstorm.protocol.layout import (
    ExpectedRecord,
    ProcessorReport,
    ProcessorState,
    RecoveryRecord,
    expected_processor_ids,
    parse_processor_id,
)
from hailstorm.protocol.states import (
    Flowing,
    Initialize,
    MasterState,
    SpoutsPaused,
    SpoutsRewind,
)

# lines (spout, 2 partitions) -> counts (bolt x2) -> out (sink), and
# lines -> sums (bolt x1) -> totals (bolt x2) -> out
EXPECTED = frozenset(expected_processor_ids({"lines": [("words", 0), ("words", 1)]},
                                            {"counts": 2, "sums": 1, "totals": 2}, {"out": 1}))
EDGES = frozenset({("lines", "counts"), ("counts", "out"), ("lines", "sums"),
                   ("sums", "totals"), ("totals", "out")})
SHAPE = Shape(EDGES)
SUMS = "bolt:sums:0"
S0, S1 = "spout:lines:words:0", "spout:lines:words:1"
C0, C1 = "bolt:counts:0", "bolt:counts:1"
T0, T1 = "bolt:totals:0", "bolt:totals:1"
OUT = "sink:out:0"
FLOWING_STATES: list[MasterState] = [Flowing(7), Flowing(7, {("words", 0): 3}), SpoutsPaused(7)]


def running() -> dict[str, ProcessorReport | None]:
    """Every instance flowing in epoch 7."""
    return {p: ProcessorReport(p, ProcessorState.FLOWING, 7) for p in sorted(EXPECTED)}


def test_a_lost_node_a_new_incarnation_and_an_own_error_fail_their_instance() -> None:
    living = running()
    del living[C1]
    living[T0] = ProcessorReport(T0, ProcessorState.JOINING, 0)
    living[OUT] = ProcessorReport(OUT, ProcessorState.FLOWING, 7, error="OSError: disk")
    assert failed_instances(EXPECTED, living) == {C1, T0, OUT}


def test_a_broken_connection_fails_the_peer_not_the_one_that_noticed() -> None:
    living = running()
    living[S0] = ProcessorReport(S0, ProcessorState.FLOWING, 7,
                                 error=f"DataPlaneError: sending to {C1} failed",
                                 lost_peer=C1)
    assert failed_instances(EXPECTED, living) == {C1}
    living[S1] = ProcessorReport(S1, ProcessorState.FLOWING, 7, error="x", lost_peer="bolt:x:9")
    assert failed_instances(EXPECTED, living) == {C1}  # no peer of this topology
    living[S1] = ProcessorReport(S1, ProcessorState.FLOWING, 7, detached=(C0, "bolt:x:9"))
    assert failed_instances(EXPECTED, living) == {C0, C1}  # gone on without: failed


@pytest.mark.parametrize("state", FLOWING_STATES)
@pytest.mark.parametrize("failed", [(C1,), (C0, C1)])
def test_bolts_fed_by_spouts_can_restart_alone_in_every_running_state(
        state: MasterState, failed: tuple[str, ...]) -> None:
    scope = recovery_scope(state, failed, EXPECTED, SHAPE, enabled=True)
    assert scope == RecoveryScope(True, tuple(sorted(failed)), scope.reason)
    assert str(scope).startswith("local: ") and all(f in scope.reason for f in failed)
    off = recovery_scope(state, failed, EXPECTED, SHAPE, enabled=False)
    assert not off.local and str(off).startswith("global: local recovery is off; ")


@pytest.mark.parametrize(("failed", "why"), [
    ((OUT,), "sink:out:0 is a sink"),
    ((S0,), "spout:lines:words:0 is a spout"),
    ((S0, C0), "spout:lines:words:0 is a spout"),
    ((T1,), "bolt:totals:1 reads sums"),
    ((C1, T1), "bolt:totals:1 reads sums"),  # two at once: the one that cannot decides
    ((SUMS,), "bolt:sums:0 feeds totals, which absorbed what it sent past its last "
              "watermark"),
    ((S0, S1, C0, C1, SUMS), "5 of 8 instances failed"),
    ((), "no instance failed"),
])
def test_what_cannot_restart_alone_restarts_everything_naming_why(
        failed: tuple[str, ...], why: str) -> None:
    scope = recovery_scope(Flowing(7), failed, EXPECTED, SHAPE, enabled=True)
    assert not scope.local and why in scope.reason


@pytest.mark.parametrize("state", [Initialize(7), SpoutsRewind(7, {})])
def test_a_failure_while_a_recovery_is_under_way_restarts_everything(
        state: MasterState) -> None:
    scope = recovery_scope(state, (C1,), EXPECTED, SHAPE, enabled=True)
    assert not scope.local and "a recovery is under way" in scope.reason


def test_without_the_graph_a_bolt_cannot_restart_alone() -> None:
    scope = recovery_scope(Flowing(7), (C1,), EXPECTED, Shape(), enabled=True)
    assert not scope.local and "inputs are unknown" in scope.reason


def test_the_graph_comes_from_the_expected_record() -> None:
    graph = {"nodes": [{"name": "counts", "kind": "bolt", "compacting": True},
                       {"name": "out", "kind": "sink", "mode": "merge"}, {"bad": 1}],
             "edges": [{"source": "lines", "target": "counts", "routing": "key"},
                       {"bad": 1}]}
    assert Shape.of_graph(graph) == Shape(frozenset({("lines", "counts")}),
                                          frozenset({"counts"}), frozenset({"out"}))
    assert Shape.of_graph(None) == Shape.of_graph({"edges": "nonsense"}) == Shape()


def test_a_compacting_bolt_feeding_a_merge_table_restarts_everything() -> None:
    merging = Shape(EDGES, frozenset({"counts"}), frozenset({"out"}))
    scope = recovery_scope(Flowing(7), (C1,), EXPECTED, merging, enabled=True)
    assert not scope.local and "compacts its rows and feeds the merge table of out" in \
        scope.reason
    for other in (Shape(EDGES, frozenset({"counts"})), Shape(EDGES, merging=frozenset({"out"}))):
        assert recovery_scope(Flowing(7), (C1,), EXPECTED, other, enabled=True).local


def test_the_processors_follow_the_same_rule() -> None:
    graph = {"nodes": [], "edges": [{"source": s, "target": t} for s, t in sorted(EDGES)]}
    assert alone_nodes(EXPECTED, graph) == {"counts"}
    assert alone_nodes(EXPECTED, None) == set()


STATES = st.sampled_from([*FLOWING_STATES, Initialize(7), SpoutsRewind(7, {})])


@settings(deadline=None)  # a loaded CI machine: correctness, not speed
@given(state=STATES, failed=st.sets(st.sampled_from(sorted(EXPECTED))), enabled=st.booleans())
def test_a_local_recovery_restarts_only_what_can_be_replayed_to(
        state: MasterState, failed: set[str], enabled: bool) -> None:
    scope = recovery_scope(state, failed, EXPECTED, SHAPE, enabled=enabled)
    assert scope.failed == tuple(sorted(failed))
    assert scope == recovery_scope(state, sorted(failed), EXPECTED, SHAPE, enabled=enabled)
    if scope.local:
        assert enabled and failed and isinstance(state, Flowing | SpoutsPaused)
        assert len(failed) * 2 <= len(EXPECTED)
        for name in failed:
            pid = parse_processor_id(name)
            assert pid.name == "counts"  # fed by the spout, feeding the sink
    elif enabled and failed and isinstance(state, Flowing | SpoutsPaused) \
            and len(failed) * 2 <= len(EXPECTED):
        assert any(parse_processor_id(f).name != "counts" for f in failed)


def test_the_expected_record_says_whether_the_run_recovers_locally() -> None:
    record = ExpectedRecord(tuple(sorted(EXPECTED)), local_recovery=True)
    assert ExpectedRecord.from_json(record.to_json()).local_recovery
    plain = ExpectedRecord(tuple(sorted(EXPECTED)))
    assert b"local_recovery" not in plain.to_json()
    assert not ExpectedRecord.from_json(plain.to_json()).local_recovery


def test_the_recovery_record_keeps_the_scope() -> None:
    record = RecoveryRecord(8, 1.5, "Flowing(None)", "bolt:counts:1 lost", "n1",
                            "global: local recovery is off; bolt:counts:1 can restart alone")
    assert RecoveryRecord.from_json(record.to_json()) == record
    older = RecoveryRecord(8, 1.5, "Flowing(None)", "r", "n1")
    assert b"scope" not in older.to_json() and RecoveryRecord.from_json(older.to_json()) == older
