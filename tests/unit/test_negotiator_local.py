"""Local recovery in the negotiator's machine (issue 42): a bolt fed by spouts restarts
alone (Restarting, Replaying, back to Flowing) while the others flow; anything else that
goes wrong on the way restarts everything, with the reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.negotiator.local import scope_of, upstream_spouts
from hailstorm.negotiator.machine import Config, Decision, View, step
from hailstorm.negotiator.roster import screen
from hailstorm.protocol.alone import Shape
from hailstorm.protocol.clock import Clock
from hailstorm.protocol.layout import (
    ATTEMPT_INFO,
    CommittedRecord,
    MasterRecord,
    ProcessorReport,
    ProcessorState,
    StopRequest,
    expected_processor_ids,
)
from hailstorm.protocol.states import (
    Flowing,
    Initialize,
    MasterState,
    Replaying,
    Restarting,
    SpoutsPaused,
    Stopped,
    is_legal,
    label,
)

# lines (spout, 2 partitions) -> counts (bolt x2) -> out (sink), and
# lines -> sums (bolt x1) -> totals (bolt x2) -> out
P0, P1 = ("words", 0), ("words", 1)
S0, S1 = "spout:lines:words:0", "spout:lines:words:1"
C0, C1 = "bolt:counts:0", "bolt:counts:1"
T0_, T1_ = "bolt:totals:0", "bolt:totals:1"
OUT = "sink:out:0"
SUMS = "bolt:sums:0"
EXPECTED = frozenset(expected_processor_ids({"lines": [P0, P1]},
                                            {"counts": 2, "sums": 1, "totals": 2}, {"out": 1}))
INPUTS = {"counts": frozenset({"lines"}), "sums": frozenset({"lines"}),
          "totals": frozenset({"sums"}), "out": frozenset({"counts", "totals"})}
SHAPE = Shape(frozenset((s, t) for t, sources in INPUTS.items() for s in sources))
CONFIG = Config()
RUN = 3
K: Clock = {P0: 40, P1: 55}
COMMITTED = CommittedRecord(6, K, {C0: "s/c0", C1: "s/c1", SUMS: "s/s0", T0_: "s/t0",
                                   T1_: "s/t1",
                                   OUT: "s/out"}, 900.0)
NOW = 1000.0


def flowing(epoch: int = 7, **changed: ProcessorReport) -> dict[str, ProcessorReport | None]:
    """Every instance flowing in ``epoch``, in the run of ``Initialize(RUN)``."""
    living: dict[str, ProcessorReport | None] = {
        p: ProcessorReport(p, ProcessorState.FLOWING, epoch, run=RUN) for p in EXPECTED}
    living.update(changed)
    return living


def joining(pid: str) -> ProcessorReport:
    return ProcessorReport(pid, ProcessorState.JOINING, 0)


def view(living: Mapping[str, ProcessorReport | None], *, now: float = NOW,
         entered_at: float = NOW - 1, committed: CommittedRecord | None = COMMITTED,
         highest: int = 7, stop: StopRequest | None = None, local: bool = True) -> View:
    return View(now, entered_at, EXPECTED, dict(living), {}, committed, highest, stop, INPUTS,
                None, SHAPE, local)


def check(state: MasterState, v: View, config: Config = CONFIG) -> Decision:
    d = step(state, v, config)
    assert d == step(state, v, config), "step must be deterministic"
    if d.next_state is not None:
        assert is_legal(state, d.next_state), f"{label(state)} -> {label(d.next_state)}"
    else:
        assert d.wake_at is not None and d.wake_at > v.entered_at
    return d


RUNNING: list[MasterState] = [Flowing(7), SpoutsPaused(7), Flowing(7, {P0: 60, P1: 70})]


@pytest.mark.parametrize("state", RUNNING)
def test_a_restarted_bolt_fed_by_spouts_restarts_alone_from_the_committed_round(
        state: MasterState) -> None:
    d = check(state, view(flowing(**{C1: joining(C1)})))
    assert d.next_state == Restarting(8, RUN, (C1,), K)
    assert d.scope is not None and d.scope.local and d.scope.failed == (C1,)
    assert "bolt:counts:1 restarted" in d.reason and "restart alone" in d.reason
    assert ("abandoned" in d.reason) == (state != Flowing(7))
    # Off, the same failure restarts everything, saying it could have been local.
    off = check(state, view(flowing(**{C1: joining(C1)}), local=False))
    assert off.next_state == Initialize(8)
    assert off.scope is not None and "local recovery is off" in str(off.scope)


@pytest.mark.parametrize(("living", "committed", "why"), [
    (flowing(**{OUT: joining(OUT)}), COMMITTED, "is a sink"),
    (flowing(**{T1_: joining(T1_)}), COMMITTED, "reads sums"),
    (flowing(**{SUMS: joining(SUMS)}), COMMITTED, "feeds totals"),
    (flowing(**{S0: joining(S0)}), COMMITTED, "is a spout"),
    (flowing(**{C1: joining(C1)}), None, "no round committed yet"),
    (flowing(**{C1: joining(C1), C0: ProcessorReport(C0, ProcessorState.FLOWING, 7)}),
     COMMITTED, "did not all say which run"),
    (flowing(**{C1: joining(C1), C0: ProcessorReport(C0, ProcessorState.FLOWING, 7, run=5)}),
     COMMITTED, "did not all say which run"),
    # One that noticed through its connection and failed with it restarts too.
    (flowing(**{C1: joining(C1), S0: ProcessorReport(S0, ProcessorState.FLOWING, 7, run=RUN,
                                                     error="send failed", lost_peer=C1)}),
     COMMITTED, "spout:lines:words:0 failed too"),
])
def test_what_cannot_restart_alone_restarts_everything_with_the_reason(
        living: dict[str, ProcessorReport | None], committed: CommittedRecord | None,
        why: str) -> None:
    d = check(Flowing(7), view(living, committed=committed))
    assert d.next_state == Initialize(8)
    assert d.scope is not None and not d.scope.local and why in d.scope.reason


def test_a_stage_attempt_ended_restarts_everything() -> None:
    living = flowing(**{C1: joining(C1)})
    v = replace(view(living), attempt="a2")
    living = {p: replace(r, info={ATTEMPT_INFO: "a1" if p == OUT else "a2"})
              for p, r in living.items() if r is not None}
    d = check(Flowing(7), replace(v, living=living))
    assert isinstance(d.next_state, Initialize)
    scope = scope_of(Flowing(7), replace(v, living=living), CONFIG,
                     screen(replace(v, living=living), 7))
    assert not scope.local


def test_nodes_catching_up_restart_everything() -> None:
    d = check(Flowing(7, catching_up=frozenset({"totals"})), view(flowing(**{C1: joining(C1)})))
    assert isinstance(d.next_state, Initialize) and d.scope is not None
    assert "catching up" in d.scope.reason


RESTARTING = Restarting(8, RUN, (C1,), K)


def loaded(pid: str, clock: Clock = K, epoch: int = 8) -> ProcessorReport:
    return ProcessorReport(pid, ProcessorState.READY, epoch, loaded=dict(clock), run=RUN)


def test_restarting_waits_for_the_instance_then_replays_to_it() -> None:
    for pending in (joining(C1), None,
                    ProcessorReport(C1, ProcessorState.FLOWING, 7, error="killed", run=RUN)):
        living = flowing(**({} if pending is None else {C1: pending}))
        if pending is None:
            del living[C1]  # the node is gone: its new incarnation is on its way
        d = check(RESTARTING, view(living, entered_at=NOW - 1))
        assert d.next_state is None and "waiting for bolt:counts:1 to load" in d.reason
        assert d.wake_at == NOW - 1 + CONFIG.initialize_timeout
    d = check(RESTARTING, view(flowing(**{C1: loaded(C1)})))
    assert d.next_state == Replaying(8, RUN, (C1,), K)


@pytest.mark.parametrize(("changed", "why"), [
    ({C1: loaded(C1, {P0: 40, P1: 50})}, "bolt:counts:1 loaded"),
    ({C1: ProcessorReport(C1, ProcessorState.READY, 8, error="boom", run=RUN)},
     "bolt:counts:1 failed: boom"),
    # A new incarnation reports joining in epoch 0: failing before it was ready is failing.
    ({C1: ProcessorReport(C1, ProcessorState.JOINING, 0, error="corrupt snapshot")},
     "bolt:counts:1 failed: corrupt snapshot"),
    ({C1: replace(loaded(C1), run=RUN + 1)}, "joined the run of Initialize(4)"),
    ({C0: joining(C0), SUMS: joining(SUMS)}, "restarted"),
    ({S0: ProcessorReport(S0, ProcessorState.FLOWING, 7, error="x", run=RUN)},
     "spout:lines:words:0 failed"),
])
def test_anything_else_failing_while_restarting_makes_the_recovery_global(
        changed: dict[str, ProcessorReport], why: str) -> None:
    d = check(RESTARTING, view(flowing(**changed)))
    assert d.next_state == Initialize(9) and why in d.reason


def test_a_survivor_lost_while_restarting_makes_the_recovery_global() -> None:
    living = flowing(**{C1: loaded(C1)})
    del living[T0_]
    d = check(RESTARTING, view(living))
    assert d.next_state == Initialize(9) and "bolt:totals:0 lost" in d.reason


def test_a_restart_that_never_loads_is_abandoned_for_a_global_one() -> None:
    d = check(RESTARTING, view(flowing(**{C1: joining(C1)}), now=NOW + 61, entered_at=NOW))
    assert d.next_state == Initialize(9)
    assert "local recovery of epoch 8 abandoned after 60 s: bolt:counts:1 not ready" in d.reason


REPLAYING = Replaying(8, RUN, (C1,), K)


def replayed(pid: str, *to: str, epoch: int = 8) -> ProcessorReport:
    return ProcessorReport(pid, ProcessorState.FLOWING, epoch, run=RUN, replayed=to)


def test_replaying_waits_for_every_upstream_spout_then_flows() -> None:
    assert [str(s) for s in upstream_spouts(C1, view({}), screen(view({}), 8))] == [S0, S1]
    assert upstream_spouts(T1_, view({}), screen(view({}), 8)) == ()
    base = {C1: loaded(C1)}
    d = check(REPLAYING, view(flowing(**base, **{S0: replayed(S0, C1)})))
    assert d.next_state is None and "replaying spout:lines:words:1 to bolt:counts:1" in d.reason
    stale = check(REPLAYING, view(flowing(**base, **{S0: replayed(S0, C1),
                                                    S1: replayed(S1, C1, epoch=7)})))
    assert stale.next_state is None, "a replay of an earlier recovery is not this one's"
    done = check(REPLAYING, view(flowing(**base, **{S0: replayed(S0, C1),
                                                   S1: replayed(S1, C0, C1)}), highest=8))
    assert done.next_state == SpoutsPaused(9), "a round at once commits the recovered state"
    assert "local recovery done" in done.reason


def test_a_replay_that_never_joins_is_abandoned_for_a_global_one() -> None:
    d = check(REPLAYING, view(flowing(**{C1: loaded(C1)}), now=NOW + 61, entered_at=NOW))
    assert d.next_state == Initialize(9) and "did not reach the live stream" in d.reason


def test_a_peer_a_spout_goes_on_without_is_the_one_that_failed() -> None:
    """A spout whose connection to a bolt that restarts alone broke goes on without it and
    says so (``detached``, after a grace): the bolt failed. With no new incarnation of it
    registered by then, its whole Spark task may be gone and nothing would restart it
    alone: everything restarts, naming it. Once its next incarnation registered, it
    restarts alone."""
    s0 = ProcessorReport(S0, ProcessorState.FLOWING, 7, run=RUN, detached=(C1,))
    d = check(Flowing(7), view(flowing(**{S0: s0})))
    assert d.next_state == Initialize(8)
    assert "bolt:counts:1 lost: spout:lines:words:0 reports its connection broke" in d.reason
    assert d.scope is not None and "no new incarnation of bolt:counts:1" in d.scope.reason
    d = check(Flowing(7), view(flowing(**{S0: s0, C1: joining(C1)})))
    assert d.next_state == Restarting(8, RUN, (C1,), K)
    # While it restarts and is replayed to, going on without it is no new failure.
    loaded_c1 = loaded(C1)
    assert check(RESTARTING, view(flowing(**{S0: s0, C1: loaded_c1}))).next_state == REPLAYING
    waiting = check(REPLAYING, view(flowing(**{S0: s0, C1: loaded_c1})))
    assert waiting.next_state is None
    other = replace(s0, detached=(C0,))
    assert check(REPLAYING, view(flowing(**{S0: other, C1: loaded_c1}))).next_state == \
        Initialize(9)


def test_two_instances_killed_at_once_restart_alone_in_one_recovery() -> None:
    """They are seen one after the other: the second joins the recovery of the first, in
    its epoch (one recovery); the first's own restart goes on."""
    living = flowing(**{C1: loaded(C1), C0: joining(C0)})
    d = check(RESTARTING, view(living))
    assert d.next_state == Restarting(8, RUN, (C0, C1), K)
    assert "bolt:counts:0 restarted" in d.reason and "restart alone too" in d.reason
    assert d.scope is not None and d.scope.local
    both = Restarting(8, RUN, (C0, C1), K)
    assert is_legal(RESTARTING, both) and not is_legal(both, RESTARTING)
    assert not is_legal(RESTARTING, Restarting(8, RUN + 1, (C0, C1), K))
    # Not when something else failed too, or the newcomer cannot restart alone.
    for changed in ({C0: joining(C0), S0: joining(S0)}, {SUMS: joining(SUMS)}):
        d = check(RESTARTING, view(flowing(**{C1: loaded(C1), **changed})))
        assert d.next_state == Initialize(9), changed


def test_an_instance_failing_while_replaying_joins_the_recovery_in_a_new_epoch() -> None:
    """Two instances killed at once may be seen as far apart as a replay: the second joins
    the recovery once it is replaying too, in a new epoch, where the first restarts again
    and the spouts replay to both from the committed clock (what the first was replayed
    is not kept)."""
    d = check(REPLAYING, view(flowing(**{C1: loaded(C1), C0: joining(C0)})))
    assert d.next_state == Restarting(9, RUN, (C0, C1), K)
    assert "during the local recovery of bolt:counts:1: bolt:counts:0 restarted" in d.reason
    assert d.scope is not None and d.scope.local
    assert not is_legal(REPLAYING, Restarting(8, RUN, (C0, C1), K)), "a new epoch"
    assert not is_legal(REPLAYING, Restarting(9, RUN, (C0,), K)), "keeps its instances"
    assert not is_legal(REPLAYING, Restarting(9, RUN, (C0, C1), {P0: 1})), "and its clock"


@pytest.mark.parametrize(("changed", "why"), [
    ({SUMS: joining(SUMS)}, "bolt:sums:0 restarted"),  # it cannot restart alone
    ({C0: joining(C0), S0: joining(S0)}, "restarted"),  # nor can a spout
    ({C1: ProcessorReport(C1, ProcessorState.READY, 8, error="boom", run=RUN)},
     "bolt:counts:1 failed: boom"),  # the restarted one failed again
])
def test_anything_else_failing_while_replaying_makes_the_recovery_global(
        changed: dict[str, ProcessorReport], why: str) -> None:
    d = check(REPLAYING, view(flowing(**{C1: loaded(C1), **changed})))
    assert d.next_state == Initialize(9) and "during the local recovery" in d.reason
    assert why in d.reason


@pytest.mark.parametrize("state", [RESTARTING, REPLAYING])
def test_a_stop_during_a_local_recovery_stops_at_the_committed_clock(
        state: MasterState) -> None:
    d = check(state, view(flowing(**{C1: loaded(C1)}), stop=StopRequest("me", 1.0)))
    assert d.next_state == Stopped(8, K, "me")


def test_the_local_states_survive_the_master_record() -> None:
    for state in (RESTARTING, REPLAYING):
        record = MasterRecord(state, 1.5, "n1", "why")
        assert MasterRecord.from_json(record.to_json()) == record
    assert label(RESTARTING) == "Restarting(bolt:counts:1)"


def test_reports_keep_their_run_and_replays() -> None:
    gone = ProcessorReport(S0, ProcessorState.FLOWING, 8, detached=(C1, C0, C1))
    assert gone.detached == (C0, C1)
    assert ProcessorReport.from_json(gone.to_json()) == gone
    r = replayed(S0, C1, C0)
    assert r.replayed == (C0, C1)
    assert ProcessorReport.from_json(r.to_json()) == r
    older = ProcessorReport(S0, ProcessorState.FLOWING, 7)
    assert b"run" not in older.to_json() and b"replayed" not in older.to_json()


STATES = st.sampled_from([*RUNNING, RESTARTING, REPLAYING])
REPORTS = st.one_of(
    st.none(),
    st.builds(ProcessorReport, st.sampled_from(sorted(EXPECTED)),
              st.sampled_from(list(ProcessorState)), st.integers(0, 9),
              loaded=st.sampled_from([None, K, {P0: 1, P1: 2}]),
              error=st.sampled_from([None, "boom"]),
              run=st.sampled_from([None, RUN, RUN + 1]),
              replayed=st.sampled_from([(), (C1,), (C0,)])))


@settings(deadline=None, max_examples=400)
@given(state=STATES, reports=st.dictionaries(st.sampled_from(sorted(EXPECTED)), REPORTS),
       now=st.floats(NOW, NOW + 120), enabled=st.booleans())
def test_every_local_decision_is_legal_and_earned(
        state: MasterState, reports: dict[str, ProcessorReport | None], now: float,
        enabled: bool) -> None:
    living = {p: (r if r is None or r.processor == p else replace(r, processor=p))
              for p, r in reports.items()}
    v = view(living, now=now, entered_at=NOW)
    d = check(state, replace(v, local_recovery=enabled))
    new = d.next_state
    if isinstance(new, Restarting):
        assert enabled and new.clock == K and set(new.instances) <= {C0, C1}
        if isinstance(state, Restarting | Replaying):  # more instances joined it
            assert new.run == state.run and set(state.instances) < set(new.instances)
        assert all(r.run == new.run for p, r in living.items()  # the usable reports
                   if r is not None and p not in new.instances and r.epoch <= state.epoch)
    if isinstance(state, Restarting) and isinstance(new, Replaying):
        for name in state.instances:
            report = living[name]
            assert report is not None and report.state is ProcessorState.READY
            assert report.epoch == state.epoch and report.loaded == K
    if isinstance(state, Replaying) and isinstance(new, SpoutsPaused):
        for spout in (S0, S1):
            report = living[spout]
            assert report is not None and report.epoch == state.epoch
            assert set(state.instances) <= set(report.replayed)
