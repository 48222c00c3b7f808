"""The negotiator's pure state machine: every state x every event, and property tests."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hailstorm.negotiator.cadence import (
    BEHIND_WAIT_SHARE,
    CAUGHT_UP_SHARE,
    MIN_FLOWING_SHARE,
    next_round_due,
)
from hailstorm.negotiator.machine import (
    CommitClock,
    Config,
    ConfirmCommitted,
    Decision,
    FallBack,
    ForgetSnapshots,
    Ignored,
    View,
    step,
)
from hailstorm.protocol.clock import Clock, dominates
from hailstorm.protocol.layout import (
    ATTEMPT_INFO,
    CommittedRecord,
    ProcessorReport,
    ProcessorState,
    SnapshotReport,
    StopRequest,
    expected_processor_ids,
    parse_processor_id,
)
from hailstorm.protocol.states import (
    LEGAL_TRANSITIONS,
    Flowing,
    Initialize,
    MasterState,
    NegotiatorDisconnected,
    Phase,
    SpoutsPaused,
    SpoutsRewind,
    Stopped,
    is_legal,
    label,
)

P0, P1 = ("words", 0), ("words", 1)
S0, S1 = "spout:lines:words:0", "spout:lines:words:1"
B0, B1 = "bolt:counts:0", "bolt:counts:1"
K0 = "sink:out:0"
SPOUTS = {S0: P0, S1: P1}
BOLTS = (B0, B1)
SAVERS = (B0, B1, K0)
"""Every instance that must save a round before it commits: bolts and sinks."""
EXPECTED = frozenset(expected_processor_ids({"lines": [P0, P1]}, {"counts": 2}, {"out": 1}))
CONFIG = Config()  # interval 5 s, every timeout 60 s
T0 = 1000.0


def test_expected_fixture_is_what_we_think() -> None:
    assert {S0, S1, B0, B1, K0} == EXPECTED


# --------------------------------------------------------------------------- builders


def report(
    pid: str, state: ProcessorState, epoch: int, *, position: Clock | None = None,
    loaded: Clock | None = None, error: str | None = None,
) -> ProcessorReport:
    return ProcessorReport(pid, state, epoch, position, loaded, error)


def ready(e: int, loads: Mapping[str, Clock] | None = None) -> dict[str, ProcessorReport | None]:
    loads = loads or {}
    return {
        pid: report(pid, ProcessorState.READY, e,
                    loaded=dict(loads.get(pid, {})) if pid in BOLTS else None)
        for pid in EXPECTED
    }


def with_spouts(
    living: Mapping[str, ProcessorReport | None], state: ProcessorState, e: int,
    positions: Mapping[str, int],
) -> dict[str, ProcessorReport | None]:
    out = dict(living)
    for pid, offset in positions.items():
        out[pid] = report(pid, state, e, position={SPOUTS[pid]: offset})
    return out


def saved(
    e: int, clock: Clock, bolts: tuple[str, ...] = SAVERS
) -> dict[str, SnapshotReport | None]:
    return {b: SnapshotReport(b, e, dict(clock), f"file:///snap/{b}/{e}") for b in bolts}


def view(
    living: Mapping[str, ProcessorReport | None] | None = None,
    *, now: float = T0 + 1, entered_at: float = T0,
    snapshots: Mapping[str, SnapshotReport | None] | None = None,
    committed: CommittedRecord | None = None, expected: frozenset[str] | None = EXPECTED,
    highest: int = 0,
) -> View:
    return View(now, entered_at, expected, dict(living or {}), dict(snapshots or {}),
                committed, highest)


def check(state: MasterState, v: View, config: Config = CONFIG) -> Decision:
    """Step, and check what must hold for every decision."""
    d = step(state, v, config)
    assert d == step(state, v, config), "step must be deterministic"
    if d.next_state is not None:
        assert is_legal(state, d.next_state), f"{label(state)} -> {label(d.next_state)}"
        assert d.wake_at is None
    else:
        assert d.wake_at is not None and d.wake_at > v.entered_at, "every wait has a deadline"
        assert not d.commits
    return d


# States "in the middle of a round" used across tests (epoch 7, rewind clock R, snapshot C).
R: Clock = {P0: 9, P1: -1}
C: Clock = {P0: 15, P1: 4}
FLOWING_LIVING = with_spouts(ready(5, {B0: R, B1: R}), ProcessorState.REWOUND, 5,
                             {S0: 9, S1: -1})
PAUSED_LIVING = with_spouts(FLOWING_LIVING, ProcessorState.PAUSED, 7, {S0: 15, S1: 4})


# --------------------------------------------------------------------------- transitions


def test_transition_relation_is_complete_data() -> None:
    assert set(LEGAL_TRANSITIONS) == set(Phase)
    assert is_legal(Flowing(3), SpoutsPaused(4))
    assert not is_legal(Flowing(3), SpoutsPaused(3)), "a snapshot round starts a new epoch"
    assert not is_legal(Flowing(3), Flowing(4)), "Flowing keeps the epoch"
    assert is_legal(SpoutsPaused(3), Flowing(3)), "a round that changes nothing is skipped"
    assert not is_legal(SpoutsPaused(3), Flowing(4)), "a skipped round keeps its epoch"
    assert is_legal(SpoutsPaused(3), Flowing(3, C))
    assert not is_legal(Initialize(3), Initialize(3))
    assert not is_legal(Initialize(3), Initialize(2))
    assert not is_legal(Flowing(3, C), SpoutsPaused(4))
    for phase, targets in LEGAL_TRANSITIONS.items():
        if phase is not Phase.DISCONNECTED:
            assert Phase.INITIALIZE in targets, f"{phase} must be able to restart"
        assert Phase.DISCONNECTED not in targets, "only the absence of a node is Disconnected"


def test_labels() -> None:
    assert label(Flowing(3)) == "Flowing(None)"
    assert label(Flowing(3, {P0: 2})) == "Flowing({'words:0': 2})"
    assert label(SpoutsPaused(3)) == "SpoutsPaused"
    assert label(NegotiatorDisconnected()) == "NegotiatorDisconnected"


# --------------------------------------------------------------------------- Disconnected


@pytest.mark.parametrize(("known", "highest", "expect"), [(0, 0, 1), (0, 41, 42), (50, 41, 51)])
def test_disconnected_leader_initializes_a_new_epoch(known: int, highest: int, expect: int) -> None:
    d = check(NegotiatorDisconnected(known), view(highest=highest))
    assert d.next_state == Initialize(expect)
    assert "leader" in d.reason


def test_disconnected_ignores_everything_else() -> None:
    noisy = view(ready(99) | {"bolt:ghost:0": None}, expected=None, highest=3)
    assert check(NegotiatorDisconnected(), noisy).next_state == Initialize(4)


# --------------------------------------------------------------------------- Initialize


def test_initialize_waits_for_registration_with_deadline() -> None:
    d = check(Initialize(5), view({}))
    assert d.next_state is None
    assert d.wake_at == T0 + CONFIG.initialize_timeout
    assert "not registered" in d.reason and B1 in d.reason


def test_initialize_waits_without_expected_list() -> None:
    empty: frozenset[str] = frozenset()
    for expected in (None, empty):
        d = check(Initialize(5), view(ready(5), expected=expected))
        assert d.next_state is None and "no expected" in d.reason
    d = check(Initialize(5), view(ready(5), expected=None, now=T0 + 60))
    assert d.next_state == Initialize(6) and "no expected processors" in d.reason


def test_initialize_all_ready_rewinds_to_low_water_mark() -> None:
    d = check(Initialize(5), view(ready(5, {B0: {P0: 10, P1: 3}, B1: {P0: 7, P1: 8}})))
    assert d.next_state == SpoutsRewind(5, {P0: 7, P1: 3})


def test_initialize_bolt_without_snapshot_means_minus_one() -> None:
    d = check(Initialize(5), view(ready(5, {B0: {P0: 10, P1: 3}})))  # B1 loaded {}
    assert d.next_state == SpoutsRewind(5, {P0: -1, P1: -1})


def test_initialize_first_start_everything_minus_one() -> None:
    d = check(Initialize(1), view(ready(1)))
    assert d.next_state == SpoutsRewind(1, {P0: -1, P1: -1})


def test_initialize_lwm_covers_every_source_partition() -> None:
    # A bolt load naming an unknown partition does not widen the clock; missing ones are -1.
    loads = {B0: {P0: 4, ("other", 0): 9}, B1: {P0: 6}}
    d = check(Initialize(5), view(ready(5, loads)))
    assert d.next_state == SpoutsRewind(5, {P0: 4, P1: -1})


def test_initialize_bolt_ready_without_loaded_clock_is_not_ready() -> None:
    living = ready(5)
    living[B1] = report(B1, ProcessorState.READY, 5, loaded=None)
    d = check(Initialize(5), view(living))
    assert d.next_state is None and B1 in d.reason


@pytest.mark.parametrize("stale_epoch", [0, 3, 4])
def test_initialize_stale_ready_reports_do_not_count(stale_epoch: int) -> None:
    living = ready(5)
    living[S1] = report(S1, ProcessorState.READY, stale_epoch)
    d = check(Initialize(5), view(living))
    assert d.next_state is None and f"{S1} not ready for epoch 5" in d.reason


def test_initialize_joining_processor_is_waited_for() -> None:
    living = ready(5)
    living[K0] = report(K0, ProcessorState.JOINING, 4)
    d = check(Initialize(5), view(living))
    assert d.next_state is None and K0 in d.reason


def test_initialize_wrong_state_for_epoch_is_not_ready() -> None:
    living = ready(5)
    living[S0] = report(S0, ProcessorState.REWOUND, 5, position={P0: 1})
    assert check(Initialize(5), view(living)).next_state is None


def test_initialize_timeout_restarts_naming_the_laggards() -> None:
    living = ready(5)
    del living[B1]
    d = check(Initialize(5), view(living, now=T0 + 60))
    assert d.next_state == Initialize(6)
    assert d.reason.startswith("initialize of epoch 5 abandoned after 60 s")
    assert B1 in d.reason


def test_initialize_timeout_is_configurable() -> None:
    cfg = Config(initialize_timeout=2.5)
    assert check(Initialize(5), view({}, now=T0 + 2.4), cfg).next_state is None
    assert check(Initialize(5), view({}, now=T0 + 2.5), cfg).next_state == Initialize(6)


def test_initialize_error_in_this_epoch_restarts() -> None:
    living = ready(5)
    living[B0] = report(B0, ProcessorState.READY, 5, loaded={}, error="disk full")
    d = check(Initialize(5), view(living))
    assert d.next_state == Initialize(6) and "bolt:counts:0 failed: disk full" in d.reason


def _corrupt_report(ref: str) -> ProcessorReport:
    return ProcessorReport(B0, ProcessorState.JOINING, 5, error=f"corrupt snapshot {ref}: "
                           "checksum mismatch", corrupt=ref)


PREVIOUS = CommittedRecord(3, {P0: 5, P1: 2}, {b: f"file:///snap/{b}/3" for b in SAVERS})
COMMITTED = CommittedRecord(4, {P0: 8, P1: 3}, {b: f"file:///snap/{b}/4" for b in SAVERS},
                            previous=PREVIOUS)


def test_initialize_corrupt_committed_snapshot_falls_back_to_the_previous_round() -> None:
    living = ready(5)
    living[B0] = _corrupt_report("file:///snap/bolt:counts:0/4")
    d = check(Initialize(5), view(living, committed=COMMITTED, highest=5))
    assert d.next_state == Initialize(6)
    assert d.fallback == FallBack(4, "file:///snap/bolt:counts:0/4")
    assert "file:///snap/bolt:counts:0/4" in d.reason and "previous committed round 3" in d.reason


def test_initialize_corrupt_snapshot_wins_over_other_failures_of_the_stage() -> None:
    living = ready(5)  # B0 comes first in the roster, and failed for another reason
    living[B0] = report(B0, ProcessorState.READY, 5, loaded={}, error="the worker is gone")
    living[B1] = ProcessorReport(B1, ProcessorState.JOINING, 5, error="corrupt snapshot",
                                 corrupt="file:///snap/bolt:counts:1/4")
    d = check(Initialize(5), view(living, committed=COMMITTED, highest=5))
    assert d.fallback == FallBack(4, "file:///snap/bolt:counts:1/4")


def test_initialize_corrupt_snapshot_without_an_earlier_round_names_the_file() -> None:
    living = ready(5)
    living[B0] = _corrupt_report("file:///snap/bolt:counts:0/4")
    d = check(Initialize(5), view(living, committed=replace(COMMITTED, previous=None)))
    assert d.next_state == Initialize(6) and d.fallback is None
    assert "file:///snap/bolt:counts:0/4" in d.reason and "no earlier committed round" in d.reason


def test_initialize_corrupt_file_of_no_committed_round_is_an_ordinary_failure() -> None:
    living = ready(5)
    living[B0] = _corrupt_report("file:///elsewhere")
    d = check(Initialize(5), view(living, committed=COMMITTED))
    assert d.next_state == Initialize(6) and d.fallback is None
    assert "bolt:counts:0 failed: corrupt snapshot file:///elsewhere" in d.reason


def test_initialize_error_from_an_older_epoch_is_waited_out() -> None:
    living = ready(5)
    living[B0] = report(B0, ProcessorState.FLOWING, 4, error="boom")
    d = check(Initialize(5), view(living))
    assert d.next_state is None and B0 in d.reason


def test_initialize_loss_is_waited_for_not_restarted() -> None:
    """Initialize(e+1) would be the same as Initialize(e): a lost processor is awaited."""
    living = ready(5)
    del living[S0]
    d = check(Initialize(5), view(living))
    assert d.next_state is None and f"{S0} not registered" in d.reason


def test_initialize_new_epoch_skips_every_recorded_epoch() -> None:
    d = check(Initialize(5), view({}, now=T0 + 61, highest=9))
    assert d.next_state == Initialize(10)


# --------------------------------------------------------------------------- noise


def test_unknown_processors_are_ignored_and_noted() -> None:
    living = ready(5) | {"bolt:ghost:0": report("bolt:ghost:0", ProcessorState.READY, 5,
                                                loaded={}),
                         "not-an-id": None}
    d = check(Initialize(5), view(living))
    assert isinstance(d.next_state, SpoutsRewind)
    notes = {a.subject for a in d.actions if isinstance(a, Ignored)}
    assert notes == {"bolt:ghost:0", "not-an-id"}


def test_unparseable_expected_ids_are_ignored() -> None:
    d = check(Initialize(5), view(ready(5), expected=EXPECTED | {"nonsense"}))
    assert isinstance(d.next_state, SpoutsRewind)
    assert any(isinstance(a, Ignored) and a.subject == "nonsense" for a in d.actions)


def test_report_under_the_wrong_name_is_ignored() -> None:
    living = ready(5)
    living[S0] = report(S1, ProcessorState.READY, 5)
    d = check(Initialize(5), view(living))
    assert d.next_state is None
    assert any(isinstance(a, Ignored) and a.subject == S0 for a in d.actions)


def test_unreadable_report_is_ignored_not_fatal() -> None:
    living = dict(FLOWING_LIVING)
    living[K0] = None
    d = check(Flowing(7), view(living))
    assert d.next_state is None
    assert Ignored(K0, "unreadable report") in d.actions


def test_future_epoch_report_is_ignored() -> None:
    living = ready(5)
    living[S0] = report(S0, ProcessorState.READY, 6)
    d = check(Initialize(5), view(living))
    assert d.next_state is None
    assert any(isinstance(a, Ignored) and "future epoch 6" in a.why for a in d.actions)


# --------------------------------------------------------------------------- SpoutsRewind


REWIND = SpoutsRewind(5, R)


def test_rewind_waits_for_spouts_with_deadline() -> None:
    d = check(REWIND, view(ready(5, {B0: R, B1: R})))
    assert d.next_state is None and d.wake_at == T0 + 60
    assert S0 in d.reason and S1 in d.reason


def test_rewind_all_spouts_rewound_starts_flowing() -> None:
    d = check(REWIND, view(FLOWING_LIVING))
    assert d.next_state == Flowing(5, None)


def test_rewind_does_not_wait_for_bolts_or_sinks_to_answer_again() -> None:
    living = dict(FLOWING_LIVING)
    living[K0] = report(K0, ProcessorState.READY, 5)
    assert check(REWIND, view(living)).next_state == Flowing(5, None)


def test_rewind_stale_rewound_report_is_not_counted() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.REWOUND, 4, {S1: -1})
    d = check(REWIND, view(living))
    assert d.next_state is None and S1 in d.reason and S0 not in d.reason


def test_rewind_to_the_wrong_offset_restarts() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.REWOUND, 5, {S0: 10})
    d = check(REWIND, view(living))
    assert d.next_state == Initialize(6) and "rewound to offset 10" in d.reason


def test_rewind_timeout() -> None:
    living = with_spouts(ready(5), ProcessorState.REWOUND, 5, {S0: 9})
    d = check(REWIND, view(living, now=T0 + 60))
    assert d.next_state == Initialize(6)
    assert d.reason == f"rewind of epoch 5 abandoned after 60 s: {S1} did not report"


# --------------------------------------------------------------------------- Flowing(None)


def test_flowing_waits_for_the_snapshot_interval() -> None:
    d = check(Flowing(7), view(FLOWING_LIVING, now=T0 + 4.9))
    assert d.next_state is None and d.wake_at == T0 + 5


def test_flowing_interval_elapsed_pauses_spouts_in_a_new_epoch() -> None:
    d = check(Flowing(7), view(FLOWING_LIVING, now=T0 + 5))
    assert d.next_state == SpoutsPaused(8)
    assert d.reason == "snapshot interval 5.0s elapsed"


def test_the_next_round_is_due_an_interval_after_the_previous_one_started() -> None:
    # Round 7 paused the spouts 0.5 s and saved 1.5 s before the commit that entered
    # Flowing(7, None) at T0: it started at T0 - 2, so the next one is due at T0 + 3.
    round7 = CommittedRecord(7, {P0: 8}, {}, T0, pause_s=0.5, snapshot_s=1.5)
    d = check(Flowing(7), view(FLOWING_LIVING, now=T0 + 2.9, committed=round7))
    assert d.next_state is None and d.wake_at == T0 + 3
    d = check(Flowing(7), view(FLOWING_LIVING, now=T0 + 3, committed=round7))
    assert d.next_state == SpoutsPaused(8)


def test_a_round_slower_than_the_interval_still_leaves_half_an_interval_of_flowing() -> None:
    slow = CommittedRecord(7, {P0: 8}, {}, T0, pause_s=1.0, snapshot_s=9.0)
    d = check(Flowing(7), view(FLOWING_LIVING, now=T0 + 1, committed=slow))
    assert d.wake_at == T0 + 2.5


@pytest.mark.parametrize("committed", [
    CommittedRecord(6, {P0: 8}, {}, T0, pause_s=0.5, snapshot_s=1.5),  # an older round
    CommittedRecord(7, {P0: 8}, {}, T0, pause_s=None, snapshot_s=1.5),  # taken over mid-round
    CommittedRecord(7, {P0: 8}, {}, T0, pause_s=0.5, snapshot_s=None),
    None,
])
def test_without_the_rounds_durations_the_whole_interval_counts_from_the_state(
        committed: CommittedRecord | None) -> None:
    d = check(Flowing(7), view(FLOWING_LIVING, now=T0 + 1, committed=committed))
    assert d.wake_at == T0 + 5


@given(interval=st.floats(0.01, 100), pause=st.floats(0, 1000), save=st.floats(0, 1000))
def test_rounds_keep_the_interval_and_at_least_half_of_it_flowing(
        interval: float, pause: float, save: float) -> None:
    cfg = Config.uniform(snapshot_interval=interval)
    committed = CommittedRecord(7, {P0: 8}, {}, T0, pause_s=pause, snapshot_s=save)
    due = next_round_due(Flowing(7), view(FLOWING_LIVING, committed=committed), cfg)
    assert due >= T0 + MIN_FLOWING_SHARE * interval - 1e-9
    assert due == pytest.approx(max(T0 - pause - save + interval,
                                    T0 + MIN_FLOWING_SHARE * interval))


CAUGHT_UP_AT = T0 + CAUGHT_UP_SHARE * CONFIG.snapshot_interval


def test_spouts_caught_up_with_a_backlog_start_the_next_round_early() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.CAUGHT_UP, 7, {S0: 30})
    living = with_spouts(living, ProcessorState.FLOWING, 7, {S1: 2})  # never behind
    d = check(Flowing(7), view(living, now=T0 + 0.01))
    assert d.next_state is None and d.wake_at == CAUGHT_UP_AT
    d = check(Flowing(7), view(living, now=CAUGHT_UP_AT))
    assert d.next_state == SpoutsPaused(8) and "caught up" in d.reason


@pytest.mark.parametrize("s1", [
    report(S1, ProcessorState.BEHIND, 7, position={SPOUTS[S1]: 2}),  # still reading one
    report(S1, ProcessorState.CAUGHT_UP, 7, position={SPOUTS[S1]: 2}),  # no: S0 is behind
])
def test_a_spout_still_behind_keeps_the_interval(s1: ProcessorReport) -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.BEHIND, 7, {S0: 30})
    living[S1] = s1
    d = check(Flowing(7), view(living, now=CAUGHT_UP_AT))
    assert d.next_state is None and d.wake_at == T0 + 5


def test_a_round_due_while_a_spout_is_behind_waits_for_the_spouts_to_catch_up() -> None:
    due, late = T0 + 5, T0 + 5 + BEHIND_WAIT_SHARE * CONFIG.snapshot_interval
    living = with_spouts(FLOWING_LIVING, ProcessorState.BEHIND, 7, {S0: 30})
    living = with_spouts(living, ProcessorState.CAUGHT_UP, 7, {S1: 2})
    d = check(Flowing(7), view(living, now=due))
    assert d.next_state is None and d.wake_at == late and "catch up" in d.reason
    caught = with_spouts(living, ProcessorState.CAUGHT_UP, 7, {S0: 41})
    d = check(Flowing(7), view(caught, now=due + 0.3))
    assert d.next_state == SpoutsPaused(8)
    d = check(Flowing(7), view(living, now=late))  # the wait is bounded
    assert d.next_state == SpoutsPaused(8) and "still behind" in d.reason
    stale = with_spouts(FLOWING_LIVING, ProcessorState.BEHIND, 6, {S0: 30, S1: 2})
    assert check(Flowing(7), view(stale, now=due)).next_state == SpoutsPaused(8)


@given(interval=st.floats(0.01, 100), took=st.floats(0, 1000), now=st.floats(0, 1000),
       states=st.lists(st.sampled_from(sorted(set(ProcessorState) - {ProcessorState.JOINING})),
                       min_size=2, max_size=2))  # joining: a restart, not a round
def test_a_round_is_never_later_than_half_an_interval_past_due(
        interval: float, took: float, now: float, states: list[ProcessorState]) -> None:
    cfg = Config.uniform(snapshot_interval=interval)
    living = with_spouts(FLOWING_LIVING, states[0], 7, {S0: 30})
    living = with_spouts(living, states[1], 7, {S1: 2})
    committed = CommittedRecord(7, {P0: 8}, {}, T0, pause_s=0.0, snapshot_s=took)
    v = view(living, now=T0 + now, committed=committed)
    d = check(Flowing(7), v, cfg)
    if T0 + now >= next_round_due(Flowing(7), v, cfg) + BEHIND_WAIT_SHARE * interval:
        assert d.next_state == SpoutsPaused(8)
    elif d.next_state is None:
        assert d.wake_at is not None and d.wake_at > T0 + now


def test_catching_up_in_an_earlier_epoch_or_never_falling_behind_keeps_the_interval() -> None:
    for state, epoch in ((ProcessorState.CAUGHT_UP, 6), (ProcessorState.FLOWING, 7)):
        living = with_spouts(FLOWING_LIVING, state, epoch, {S0: 30, S1: 2})
        d = check(Flowing(7), view(living, now=CAUGHT_UP_AT))
        assert d.next_state is None and d.wake_at == T0 + 5


def test_early_rounds_start_half_an_interval_after_the_round_before_at_the_soonest() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.CAUGHT_UP, 7, {S0: 30, S1: 2})
    quick = CommittedRecord(7, {P0: 8}, {}, T0, pause_s=0.1, snapshot_s=0.4)
    d = check(Flowing(7), view(living, now=CAUGHT_UP_AT, committed=quick))
    assert d.next_state is None and d.wake_at == T0 + 2.0  # round 7 started at T0 - 0.5
    slow = CommittedRecord(7, {P0: 8}, {}, T0, pause_s=0.1, snapshot_s=2.9)
    d = check(Flowing(7), view(living, now=CAUGHT_UP_AT, committed=slow))
    assert d.next_state == SpoutsPaused(8)


@given(interval=st.floats(0.01, 100), took=st.floats(0, 1000), now=st.floats(0, 1000))
def test_rounds_start_at_most_twice_as_often_as_the_interval_says(
        interval: float, took: float, now: float) -> None:
    cfg = Config.uniform(snapshot_interval=interval)
    living = with_spouts(FLOWING_LIVING, ProcessorState.CAUGHT_UP, 7, {S0: 30, S1: 2})
    committed = CommittedRecord(7, {P0: 8}, {}, T0, pause_s=0.0, snapshot_s=took)
    d = check(Flowing(7), view(living, now=T0 + now, committed=committed), cfg)
    started = T0 - took  # round 7's start
    if d.next_state is not None:
        assert T0 + now >= started + MIN_FLOWING_SHARE * interval - 1e-9
        assert T0 + now >= T0 + CAUGHT_UP_SHARE * interval - 1e-9
    else:
        assert d.wake_at is not None and d.wake_at > T0 + now


def test_an_interval_already_due_is_not_postponed_by_catching_up() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.CAUGHT_UP, 7, {S0: 30, S1: 2})
    tiny = Config.uniform(snapshot_interval=0.05)
    d = check(Flowing(7), view(living, now=T0 + 0.05), tiny)
    assert d.next_state == SpoutsPaused(8) and "interval" in d.reason


def test_flowing_interval_respects_highest_recorded_epoch() -> None:
    d = check(Flowing(7), view(FLOWING_LIVING, now=T0 + 5, highest=12))
    assert d.next_state == SpoutsPaused(13)


def test_flowing_informational_flowing_reports_are_fine() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.FLOWING, 7, {S0: 30, S1: 2})
    assert check(Flowing(7), view(living, now=T0 + 5)).next_state == SpoutsPaused(8)


# --------------------------------------------------------------------------- SpoutsPaused


def test_paused_waits_with_deadline() -> None:
    d = check(SpoutsPaused(7), view(FLOWING_LIVING))
    assert d.next_state is None and d.wake_at == T0 + 60


def test_paused_all_spouts_paused_sets_the_snapshot_clock() -> None:
    d = check(SpoutsPaused(7), view(PAUSED_LIVING))
    assert d.next_state == Flowing(7, C)


def test_paused_nothing_emitted_is_minus_one() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.PAUSED, 7, {S0: -1, S1: -1})
    assert check(SpoutsPaused(7), view(living)).next_state == Flowing(7, {P0: -1, P1: -1})


def test_paused_report_from_the_previous_round_is_stale() -> None:
    living = with_spouts(PAUSED_LIVING, ProcessorState.PAUSED, 6, {S1: 3})
    d = check(SpoutsPaused(7), view(living))
    assert d.next_state is None and S1 in d.reason


def test_paused_report_without_its_partition_is_ignored() -> None:
    living = dict(PAUSED_LIVING)
    living[S1] = report(S1, ProcessorState.PAUSED, 7, position={P0: 3})
    d = check(SpoutsPaused(7), view(living))
    assert d.next_state is None
    assert any(isinstance(a, Ignored) and a.subject == S1 for a in d.actions)


def test_paused_timeout() -> None:
    living = with_spouts(FLOWING_LIVING, ProcessorState.PAUSED, 7, {S0: 15})
    d = check(SpoutsPaused(7), view(living, now=T0 + 60))
    assert d.next_state == Initialize(8)
    assert d.reason == (
        f"pause of snapshot round 7 abandoned after 60 s: {S1} did not report"
    )


def test_paused_two_spouts_on_one_partition_take_the_max() -> None:
    expected = EXPECTED | {"spout:mirror:words:0"}
    living = dict(PAUSED_LIVING)
    living["spout:mirror:words:0"] = report("spout:mirror:words:0", ProcessorState.PAUSED, 7,
                                            position={P0: 20})
    d = check(SpoutsPaused(7), view(living, expected=expected))
    assert d.next_state == Flowing(7, {P0: 20, P1: 4})


# A committed round at C whose round before was at C too: nothing changed since (settled).
SETTLED = CommittedRecord(6, dict(C), {b: f"s{b}" for b in SAVERS}, 1.0,
                          CommittedRecord(5, dict(C), {b: f"p{b}" for b in SAVERS}))


def test_a_round_with_nothing_read_since_a_settled_commit_is_skipped() -> None:
    d = check(SpoutsPaused(7), view(PAUSED_LIVING, committed=SETTLED))
    assert d.next_state == Flowing(7)
    kept = frozenset(f"{a}{b}" for a in "sp" for b in SAVERS)  # the committed and previous
    assert d.actions == (ConfirmCommitted(6), ForgetSnapshots(6, kept, frozenset({5, 6})))
    assert d.confirms == ConfirmCommitted(6)
    assert not d.commits
    assert d.reason == ("snapshot round 7 skipped: the spouts paused at the clock of committed "
                        "round 6 {'words:0': 15, 'words:1': 4}, and no record was read "
                        "since the round before it")


def test_the_first_round_after_the_last_record_is_taken_then_rounds_are_skipped() -> None:
    """The round after the one that committed the last records keeps what the bolts did
    after their last tuple (a sweep of closed windows)."""
    moved = CommittedRecord(6, dict(C), {}, 1.0, CommittedRecord(5, dict(R), {}))
    assert check(SpoutsPaused(7), view(PAUSED_LIVING, committed=moved)).next_state \
        == Flowing(7, C)
    first = CommittedRecord(6, dict(C), {})  # no round before it: a first commit
    assert check(SpoutsPaused(7), view(PAUSED_LIVING, committed=first)).next_state \
        == Flowing(7, C)


def test_a_round_saving_a_sweep_after_the_committed_snapshot_is_taken() -> None:
    """A bolt's sweep of closed windows takes seconds after the last tuple: what it drops
    after the committed round's snapshot, with nothing read since, needs a round at the
    same clock. Once a round after the drop committed, rounds are skipped again."""
    bolt = PAUSED_LIVING[B1]
    assert bolt is not None
    for after in (6, 7):  # after the committed snapshot (or a later, uncommitted one)
        living = PAUSED_LIVING | {B1: replace(bolt, swept_after=after)}
        d = check(SpoutsPaused(7), view(living, committed=SETTLED))
        assert d.next_state == Flowing(7, C) and not d.confirms, after
    living = PAUSED_LIVING | {B1: replace(bolt, swept_after=5)}  # round 6 holds the drop
    assert check(SpoutsPaused(7), view(living, committed=SETTLED)).next_state == Flowing(7)


@pytest.mark.parametrize("position", [16, 14])
def test_a_round_at_another_clock_than_the_committed_one_is_taken(position: int) -> None:
    living = with_spouts(PAUSED_LIVING, ProcessorState.PAUSED, 7, {S0: position})
    d = check(SpoutsPaused(7), view(living, committed=SETTLED))
    assert d.next_state == Flowing(7, {P0: position, P1: 4}) and not d.confirms


def test_a_partition_the_committed_round_has_not_seen_takes_a_round_once_read() -> None:
    grown = replace(SETTLED, clock={P0: 15}, previous=replace(SETTLED.previous, clock={P0: 15}))
    living = with_spouts(PAUSED_LIVING, ProcessorState.PAUSED, 7, {S1: -1})
    assert check(SpoutsPaused(7), view(living, committed=grown)).next_state == Flowing(7), \
        "a partition missing from a clock is at -1: nothing was read from it, skipped"
    living = with_spouts(PAUSED_LIVING, ProcessorState.PAUSED, 7, {S1: 0})
    assert check(SpoutsPaused(7), view(living, committed=grown)).next_state \
        == Flowing(7, {P0: 15, P1: 0})


def test_a_stop_or_a_node_catching_up_never_skips_its_round() -> None:
    """(Once every node caught up, rounds are skipped again.)"""
    stop = replace(view(PAUSED_LIVING, committed=SETTLED), stop=StopRequest("hailstorm stop", T0))
    assert check(SpoutsPaused(7), stop).next_state == Flowing(7, C)
    living = dict(PAUSED_LIVING)
    living[S0] = replace(living[S0], backfill={P0: 10})  # its backfill cursor is behind
    catching = check(SpoutsPaused(7, frozenset({"counts"})), view(living, committed=SETTLED))
    assert catching.next_state == Flowing(7, C, {P0: 10, P1: 4}, frozenset({"counts"}))
    joined = check(SpoutsPaused(7, frozenset({"counts"})), view(PAUSED_LIVING,
                                                                committed=SETTLED))
    assert joined.next_state == Flowing(7, None, catching_up=frozenset({"counts"})), \
        "every backfill cursor joined the live one and nobody is behind: skipped"
    behind = replace(SETTLED, clocks={"counts": {P0: 3, P1: -1}})
    assert check(SpoutsPaused(7), view(PAUSED_LIVING, committed=behind)).next_state \
        == Flowing(7, C)


# --------------------------------------------------------------------------- Flowing(C)


SNAP = Flowing(7, C)
PREV = CommittedRecord(5, dict(R), {B0: "r0", B1: "r1"}, 1.0,
                       CommittedRecord(3, {P0: 1, P1: -1}, {B0: "q0", B1: "q1"}))


def test_snapshot_waits_for_every_bolt_with_deadline() -> None:
    d = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C, (B0,)), committed=PREV))
    assert d.next_state is None and d.wake_at == T0 + 60
    assert B1 in d.reason and B0 not in d.reason


def test_snapshot_commits_when_every_bolt_saved_at_exactly_c() -> None:
    d = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C), committed=PREV))
    assert d.next_state == Flowing(7, None)
    refs = {B0: "file:///snap/bolt:counts:0/7", B1: "file:///snap/bolt:counts:1/7",
            K0: "file:///snap/sink:out:0/7"}
    assert d.commits == (CommitClock(7, C, refs),)
    forget = [a for a in d.actions if isinstance(a, ForgetSnapshots)]
    assert forget == [ForgetSnapshots(7, frozenset(refs.values()) | {"r0", "r1"},
                                      frozenset({7, 5}))]
    assert "q0" not in forget[0].keep, "older than the previous committed round: garbage"
    first = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C)))
    assert [a.keep_epochs for a in first.actions if isinstance(a, ForgetSnapshots)] == [
        frozenset({7})
    ]


def test_a_round_waits_for_every_sink_to_commit_through_c() -> None:
    """Bolts never re-emit what a committed round holds, so sinks must have it first."""
    d = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C, BOLTS), committed=PREV))
    assert d.next_state is None and not d.commits
    assert K0 in d.reason
    late = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C, BOLTS), committed=PREV,
                            now=T0 + 60))
    assert isinstance(late.next_state, Initialize) and K0 in late.reason


def test_snapshot_first_commit_without_previous_record() -> None:
    d = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C)))
    assert len(d.commits) == 1 and d.commits[0].clock == C


def test_snapshot_clock_equality_treats_missing_as_minus_one() -> None:
    state = Flowing(7, {P0: 15, P1: -1})
    d = check(state, view(PAUSED_LIVING, snapshots=saved(7, {P0: 15})))
    assert len(d.commits) == 1


def test_snapshot_stale_reports_do_not_count() -> None:
    snaps = saved(7, C, (B0,)) | saved(5, R, (B1,))
    d = check(SNAP, view(PAUSED_LIVING, snapshots=snaps, committed=PREV))
    assert d.next_state is None and B1 in d.reason


def test_snapshot_future_reports_are_ignored() -> None:
    snaps = saved(7, C, (B0,)) | saved(9, C, (B1,))
    d = check(SNAP, view(PAUSED_LIVING, snapshots=snaps, committed=PREV))
    assert d.next_state is None
    assert any(isinstance(a, Ignored) and "future epoch 9" in a.why for a in d.actions)


def test_snapshot_at_the_wrong_clock_restarts() -> None:
    snaps = saved(7, C, (B0,)) | saved(7, {P0: 15, P1: 5}, (B1,))
    d = check(SNAP, view(PAUSED_LIVING, snapshots=snaps, committed=PREV))
    assert d.next_state == Initialize(8) and not d.commits
    assert B1 in d.reason


def test_snapshot_from_unknown_or_unreadable_bolts_is_ignored() -> None:
    snaps = saved(7, C) | {"bolt:ghost:0": None, B1: None}
    d = check(SNAP, view(PAUSED_LIVING, snapshots=snaps, committed=PREV))
    assert d.next_state is None
    subjects = {a.subject for a in d.actions if isinstance(a, Ignored)}
    assert subjects == {"snapshot bolt:ghost:0", f"snapshot {B1}"}


def test_snapshot_not_dominating_the_committed_clock_is_not_committed() -> None:
    ahead = CommittedRecord(6, {P0: 20, P1: 0}, {B0: "a", B1: "b"})
    d = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C), committed=ahead))
    assert d.next_state == Flowing(7, None) and not d.commits
    assert "does not dominate" in d.reason


def test_snapshot_round_already_committed_is_not_committed_twice() -> None:
    done = CommittedRecord(7, dict(C), {B0: "x", B1: "y"})
    d = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C), committed=done))
    assert d.next_state == Flowing(7, None) and not d.commits


def test_snapshot_timeout_names_the_missing_bolt() -> None:
    d = check(SNAP, view(PAUSED_LIVING, snapshots=saved(7, C, (B0,)), now=T0 + 60))
    assert d.next_state == Initialize(8) and not d.commits
    assert d.reason == f"snapshot round 7 abandoned after 60 s: {B1}, {K0} did not report"


def test_duplicate_views_after_a_commit_do_not_commit_again() -> None:
    v = view(PAUSED_LIVING, snapshots=saved(7, C), committed=PREV)
    d = check(SNAP, v)
    assert d.next_state == Flowing(7, None) and d.commits
    again = check(Flowing(7, None), View(T0 + 1, T0 + 1, EXPECTED, v.living, v.snapshots,
                                         PREV.succeeded_by(7, C, {}, 2.0), 7))
    assert again.next_state is None and not again.commits
    # Next round: the same (now stale) snapshot reports never commit round 8.
    d8 = check(Flowing(8, {P0: 30, P1: 4}), view(PAUSED_LIVING, snapshots=saved(7, C)))
    assert d8.next_state is None and not d8.commits


# --------------------------------------------------------------------------- stage attempts
# Spark SIGKILLs a failed barrier stage's processors, whose ZooKeeper sessions (and living
# nodes) outlive them by the session timeout; the driver names each new attempt in
# ``expected`` and the machine counts only that attempt's reports.

NOW, BEFORE = "a2", "a1"


def of_attempt(living: Mapping[str, ProcessorReport | None], attempt: str,
               pids: frozenset[str] | None = None) -> dict[str, ProcessorReport | None]:
    """``living`` with the reports of ``pids`` (every one by default) of ``attempt``."""
    return {pid: r if r is None or (pids is not None and pid not in pids)
            else replace(r, info={**r.info, ATTEMPT_INFO: attempt})
            for pid, r in living.items()}


def in_attempt(v: View, attempt: str = NOW) -> View:
    return replace(v, attempt=attempt)


def test_initialize_does_not_count_ready_reports_of_the_failed_attempt() -> None:
    """The failed attempt's processors had all joined this epoch and answered ready: taken
    for the new attempt's, the run would flow with peers whose ports are closed."""
    living = of_attempt(of_attempt(ready(5), NOW), BEFORE, frozenset({B1}))
    d = check(Initialize(5), in_attempt(view(living)))
    assert d.next_state is None
    assert f"{B1} still of the failed stage attempt" in d.reason
    d = check(Initialize(5), in_attempt(view(of_attempt(ready(5), NOW))))
    assert isinstance(d.next_state, SpoutsRewind)


def test_initialize_waits_out_errors_the_failed_attempt_reported() -> None:
    """Its error is the failed attempt's, already acted on: restarting again for it would
    end the new attempt's processors that joined this epoch."""
    living = of_attempt(ready(5), NOW)
    living[B0] = report(B0, ProcessorState.READY, 5, loaded={}, error="broken pipe")
    living = of_attempt(living, BEFORE, frozenset({B0}))
    d = check(Initialize(5), in_attempt(view(living)))
    assert d.next_state is None and B0 in d.reason
    assert check(Initialize(5), in_attempt(view(living, now=T0 + 60))).next_state == \
        Initialize(6), "the deadline still holds"


def test_reports_without_an_attempt_count_when_the_driver_names_none() -> None:
    assert isinstance(check(Initialize(5), view(ready(5))).next_state, SpoutsRewind)
    assert check(Initialize(5), in_attempt(view(ready(5)))).next_state is None


@pytest.mark.parametrize(("state", "living"), [
    (SpoutsRewind(5, R), FLOWING_LIVING),
    (Flowing(5), FLOWING_LIVING),
    (SpoutsPaused(7), PAUSED_LIVING),
    (Flowing(7, C), PAUSED_LIVING),
])
def test_a_new_attempt_restarts_a_running_topology_at_once(
    state: MasterState, living: Mapping[str, ProcessorReport | None]
) -> None:
    """The driver starts an attempt only once every task of the last one ended: whatever
    still runs is gone, so the machine restarts without waiting for sessions to expire."""
    current = in_attempt(view(of_attempt(living, NOW)), NOW)
    assert not isinstance(check(state, current).next_state, Initialize)
    d = check(state, in_attempt(view(of_attempt(living, BEFORE)), NOW))
    assert d.next_state == Initialize(state.epoch + 1)
    assert d.reason.startswith("the driver started another stage attempt: ")
    assert "and 0 more" not in d.reason
    # Its processors end, their nodes go: the new attempt is still the cause named.
    gone = dict(of_attempt(living, BEFORE))
    del gone[min(gone)]
    d = check(state, in_attempt(view(gone), NOW))
    assert d.reason.startswith("the driver started another stage attempt: ")


def test_a_stopped_topology_starts_only_for_the_new_runs_processors() -> None:
    stopped = Stopped(9, C, "x")
    left = of_attempt({B0: report(B0, ProcessorState.READY, 9, loaded={})}, BEFORE)
    assert check(stopped, in_attempt(view(left))).next_state is None
    started = of_attempt({B0: report(B0, ProcessorState.JOINING, 0)}, NOW)
    assert check(stopped, in_attempt(view(started))).next_state == Initialize(10)


@given(stale=st.sets(st.sampled_from(sorted(EXPECTED)), min_size=1))
def test_no_epoch_ever_flows_on_a_report_of_another_attempt(stale: set[str]) -> None:
    living = of_attempt(of_attempt(ready(5), NOW), BEFORE, frozenset(stale))
    d = step(Initialize(5), in_attempt(view(living)), CONFIG)
    assert d.next_state is None
    assert all(pid in d.reason for pid in sorted(stale)[:5])


# --------------------------------------------------------------------------- stopping

STOP = StopRequest("hailstorm stop (ann@box)", T0)


def stopping(v: View) -> View:
    return replace(v, stop=STOP)


def test_labels_of_stopped() -> None:
    assert label(Stopped(9, C, "x")) == "Stopped({'words:0': 15, 'words:1': 4})"
    assert Stopped(9, C).phase is Phase.STOPPED


def test_a_stop_while_flowing_starts_a_last_round_at_once() -> None:
    """No waiting for the snapshot interval: the round commits what was read, and the
    spouts stop at its clock (no barrier: nothing beyond it flows before Stopped)."""
    d = check(Flowing(7), stopping(view(FLOWING_LIVING, now=T0 + 0.1)))
    assert d.next_state == SpoutsPaused(8, barrier=False)
    assert d.reason == "stop requested by hailstorm stop (ann@box): a last round commits " \
                       "what was read"


def test_the_last_rounds_pause_is_an_ordinary_pause() -> None:
    d = check(SpoutsPaused(7), stopping(view(PAUSED_LIVING)))
    assert d.next_state == Flowing(7, C)


def test_the_last_rounds_commit_enters_stopped_at_its_clock() -> None:
    d = check(SNAP, stopping(view(PAUSED_LIVING, snapshots=saved(7, C), committed=PREV)))
    assert d.next_state == Stopped(7, C, STOP.by)
    assert [c.clock for c in d.commits] == [C]
    assert any(isinstance(a, ForgetSnapshots) for a in d.actions)
    assert d.reason.startswith(f"stop requested by {STOP.by}: round 7 committed at")


def test_the_last_round_waits_for_every_saver_like_any_round() -> None:
    d = check(SNAP, stopping(view(PAUSED_LIVING, snapshots=saved(7, C, (B0, B1)))))
    assert d.next_state is None and K0 in d.reason


def test_a_last_round_already_committed_stops_at_the_committed_clock() -> None:
    committed = PREV.succeeded_by(7, C, {}, 2.0)
    d = check(SNAP, stopping(view(PAUSED_LIVING, committed=committed)))
    assert d.next_state == Stopped(7, C, STOP.by) and not d.commits


@pytest.mark.parametrize("committed", [None, PREV])
@pytest.mark.parametrize("state", [Initialize(5), REWIND], ids=label)
def test_a_stop_before_anything_flowed_stops_at_once_at_the_committed_clock(
    state: MasterState, committed: CommittedRecord | None,
) -> None:
    d = check(state, stopping(view(ready(5), committed=committed)))
    clock = committed.clock if committed is not None else {}
    assert d.next_state == Stopped(state.epoch, clock, STOP.by)
    assert "nothing flowed since the committed clock" in d.reason


def test_a_failure_during_the_last_round_recovers_then_stops() -> None:
    gone = {k: v for k, v in PAUSED_LIVING.items() if k != B1}
    d = check(SNAP, stopping(view(gone, committed=PREV)))
    assert d.next_state == Initialize(8)
    assert check(Initialize(8), stopping(view({}, committed=PREV))).next_state == \
        Stopped(8, PREV.clock, STOP.by)


def test_stopped_stays_while_the_request_stands_even_with_processors_around() -> None:
    living = dict(FLOWING_LIVING) | {B1: report(B1, ProcessorState.JOINING, 0)}
    for v in (view({}), view(living), view(FLOWING_LIVING)):
        d = check(Stopped(7, C, "x"), stopping(v))
        assert d.next_state is None and "stop request stands" in d.reason
        assert d.wake_at == v.now + CONFIG.initialize_timeout


def test_stopped_loses_no_sleep_over_processors_leaving_or_failing() -> None:
    broken = {B0: ProcessorReport(B0, ProcessorState.FLOWING, 7, None, None, "closed")}
    for living in ({}, broken):
        assert check(Stopped(7, C), stopping(view(living))).next_state is None


def test_a_new_run_starts_from_stopped_when_it_cleared_the_request_and_registered() -> None:
    assert check(Stopped(7, C), view({})).next_state is None, "no run yet"
    d = check(Stopped(7, C), view({S0: report(S0, ProcessorState.JOINING, 0)}, highest=9))
    assert d.next_state == Initialize(10)
    assert d.reason == f"a new run started after the stop ({S0} registered)"


def test_only_leaving_disconnected_or_stopped_is_a_start() -> None:
    from hailstorm.protocol.layout import RecoveryRecord
    from hailstorm.protocol.states import START_PHASES

    assert {Phase.DISCONNECTED, Phase.STOPPED} == START_PHASES
    for state in (NegotiatorDisconnected(), Stopped(3, C, "x")):
        assert RecoveryRecord(4, 0.0, label(state), "").is_start
    for state in (Initialize(3), REWIND, Flowing(3), Flowing(3, C), SpoutsPaused(3)):
        assert not RecoveryRecord(4, 0.0, label(state), "").is_start
    for phase, targets in LEGAL_TRANSITIONS.items():
        assert (Phase.STOPPED in targets) == (phase in {
            Phase.INITIALIZE, Phase.SPOUTS_REWIND, Phase.FLOWING_SNAPSHOT, Phase.RESTARTING,
            Phase.REPLAYING}), phase


def test_a_cooperative_run_stops_and_starts_again_from_the_committed_clock() -> None:
    m = Model()
    for _ in range(20):
        m.cooperate_all(advance=3)
        m.negotiate()
        m.now += 1
    m.stop = STOP
    for _ in range(6):
        m.cooperate_all(advance=3)
        m.negotiate()
        m.now += 0.1
    assert isinstance(m.state, Stopped) and m.committed is not None
    assert m.state.clock == m.committed.clock and m.state.by == STOP.by
    assert m.living == {}, "every processor left"
    stopped_at = dict(m.committed.clock)
    m.stop = None
    for pid in sorted(EXPECTED):
        m.living[pid] = report(pid, ProcessorState.JOINING, 0)
    d = m.negotiate()
    assert isinstance(d.next_state, Initialize)
    m.cooperate_all()
    assert m.negotiate().next_state == SpoutsRewind(m.state.epoch, stopped_at)


# --------------------------------------------------------------------------- failures matrix

RUNNING_STATES: dict[str, tuple[MasterState, Mapping[str, ProcessorReport | None]]] = {
    "SpoutsRewind": (REWIND, ready(5, {B0: R, B1: R})),
    "Flowing(None)": (Flowing(7), FLOWING_LIVING),
    "SpoutsPaused": (SpoutsPaused(7), FLOWING_LIVING),
    "Flowing(C)": (SNAP, PAUSED_LIVING),
}


@pytest.mark.parametrize("name", sorted(RUNNING_STATES))
@pytest.mark.parametrize("victim", sorted(EXPECTED))
def test_processor_loss_in_every_running_state(name: str, victim: str) -> None:
    state, living = RUNNING_STATES[name]
    gone = {k: v for k, v in living.items() if k != victim}
    d = check(state, view(gone))
    assert d.next_state == Initialize(state.epoch + 1)
    assert d.reason == f"{victim} lost (living node gone)"
    assert not d.commits


@pytest.mark.parametrize("name", sorted(RUNNING_STATES))
@pytest.mark.parametrize("victim", sorted(EXPECTED))
def test_processor_restart_in_every_running_state(name: str, victim: str) -> None:
    """A new incarnation (living node recreated between two reads) says 'joining'."""
    state, living = RUNNING_STATES[name]
    d = check(state, view(dict(living) | {victim: report(victim, ProcessorState.JOINING, 0)}))
    assert d.next_state == Initialize(state.epoch + 1)
    assert victim in d.reason and "restarted" in d.reason


@pytest.mark.parametrize("name", sorted(RUNNING_STATES))
@pytest.mark.parametrize("victim", sorted(EXPECTED))
def test_processor_error_in_every_running_state(name: str, victim: str) -> None:
    state, living = RUNNING_STATES[name]
    old = living[victim]
    assert old is not None
    broken = ProcessorReport(old.processor, old.state, old.epoch, old.position, old.loaded,
                             "ValueError: bad tuple")
    d = check(state, view(dict(living) | {victim: broken}))
    assert d.next_state == Initialize(state.epoch + 1)
    assert d.reason == f"{victim} failed: ValueError: bad tuple"


@pytest.mark.parametrize("name", sorted(RUNNING_STATES))
@pytest.mark.parametrize("victim", sorted(EXPECTED))
def test_a_broken_connection_names_the_peer_that_failed(name: str, victim: str) -> None:
    """Whoever noticed a peer's connection break reports it: the restart names the peer
    (its living node outlives it until its session expires), and a processor's own
    failure comes before the broken connections that follow from it."""
    state, living = RUNNING_STATES[name]
    noticed = min(pid for pid in EXPECTED if pid != victim)
    old = living[noticed]
    assert old is not None
    error = f"DataPlaneError: sending to {victim} failed: Broken pipe"
    broken = replace(old, error=error, lost_peer=victim)
    d = check(state, view(dict(living) | {noticed: broken}))
    assert d.next_state == Initialize(state.epoch + 1)
    assert d.reason == f"{victim} lost: {noticed} reports its connection broke: {error}"
    own = living[victim]
    assert own is not None
    failing = dict(living) | {noticed: broken, victim: replace(own, error="OSError: disk")}
    assert check(state, view(failing)).reason == f"{victim} failed: OSError: disk"


SATISFIED: dict[str, tuple[MasterState, View]] = {
    "SpoutsRewind": (REWIND, view(FLOWING_LIVING)),
    "Flowing(None)": (Flowing(7), view(FLOWING_LIVING, now=T0 + 5)),
    "SpoutsPaused": (SpoutsPaused(7), view(PAUSED_LIVING)),
    "Flowing(C)": (SNAP, view(PAUSED_LIVING, snapshots=saved(7, C))),
}


@pytest.mark.parametrize("name", sorted(SATISFIED))
def test_loss_beats_progress(name: str) -> None:
    """Even when the wait is satisfied, a lost processor restarts the topology."""
    state, v = SATISFIED[name]
    assert check(state, v).next_state not in (None, Initialize(state.epoch + 1))
    gone = {k: r for k, r in v.living.items() if k != K0}
    d = check(state, View(v.now, v.entered_at, v.expected, gone, v.snapshots))
    assert d.next_state == Initialize(state.epoch + 1) and not d.commits


@pytest.mark.parametrize("name", sorted(SATISFIED))
@pytest.mark.parametrize("expected", [None, frozenset()])
def test_expected_list_vanishing_mid_run_restarts(name: str, expected: frozenset[str] | None,
                                                  ) -> None:
    state, v = SATISFIED[name]
    d = check(state, View(v.now, v.entered_at, expected, v.living, v.snapshots))
    assert d.next_state == Initialize(state.epoch + 1) and not d.commits
    assert d.reason == "the expected processor list is gone"


EVENTS = ("nothing", "unknown", "unreadable", "stale", "future", "loss", "joining", "error",
          "timeout")
ALL_STATES: dict[str, tuple[MasterState, Mapping[str, ProcessorReport | None]]] = {
    "Initialize": (Initialize(5), ready(4)),
    **RUNNING_STATES,
}


def _apply(event: str, state: MasterState, living: Mapping[str, ProcessorReport | None],
           ) -> View:
    living = dict(living)
    now = T0 + 1
    victim = B1
    old = living[victim]
    assert old is not None
    if event == "unknown":
        living["sink:ghost:3"] = report("sink:ghost:3", ProcessorState.READY, state.epoch)
    elif event == "unreadable":
        living[victim] = None
    elif event == "stale":
        living[victim] = ProcessorReport(victim, old.state, state.epoch - 3, old.position,
                                         old.loaded)
    elif event == "future":
        living[victim] = ProcessorReport(victim, old.state, state.epoch + 3, old.position,
                                         old.loaded)
    elif event == "loss":
        del living[victim]
    elif event == "joining":
        living[victim] = report(victim, ProcessorState.JOINING, state.epoch)
    elif event == "error":
        living[victim] = ProcessorReport(victim, old.state, state.epoch, old.position,
                                         old.loaded, "boom")
    elif event == "timeout":
        now = T0 + 3600
    return view(living, now=now)


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("name", sorted(ALL_STATES))
def test_every_state_times_every_event(name: str, event: str) -> None:
    """Only failures and timeouts restart; noise never moves the machine nor crashes it."""
    state, living = ALL_STATES[name]
    d = check(state, _apply(event, state, living))
    restarts = {"loss", "joining", "error", "timeout"} if name != "Initialize" else {
        "error", "timeout"}
    if event == "timeout" and name == "Flowing(None)":
        assert d.next_state == SpoutsPaused(state.epoch + 1)
    elif event in restarts:
        assert d.next_state == Initialize(state.epoch + 1), d.reason
        assert d.reason
    else:
        assert d.next_state is None, d.reason
    assert not d.commits
    if event in {"unknown", "unreadable", "future"}:
        assert any(isinstance(a, Ignored) for a in d.actions)


def test_timeouts_of_every_wait_are_independent() -> None:
    cfg = Config(snapshot_interval=1, initialize_timeout=2, rewind_timeout=3,
                 pause_timeout=4, snapshot_timeout=5)
    cases: list[tuple[MasterState, float]] = [
        (Initialize(5), 2), (REWIND, 3), (Flowing(7), 1), (SpoutsPaused(7), 4), (SNAP, 5)]
    for state, deadline in cases:
        living = FLOWING_LIVING if state.epoch == 7 else ready(4)
        d = check(state, view(living, now=T0 + 0.5), cfg)
        assert d.wake_at == T0 + deadline, label(state)
        d = check(state, view(living, now=T0 + deadline), cfg)
        assert d.next_state is not None, label(state)


def test_config_rejects_non_positive_times() -> None:
    with pytest.raises(ValueError):
        Config(snapshot_interval=0)
    assert Config.uniform(2, 7).pause_timeout == 7


# --------------------------------------------------------------------------- a whole run


class Model:
    """A tiny in-memory stand-in for ZooKeeper plus a shell applying decisions.

    Holds the master state, the committed record and the processors' nodes; ``negotiate``
    steps the machine and checks every invariant on the way.
    """

    def __init__(self, config: Config = CONFIG) -> None:
        self.config = config
        self.now = T0
        self.state: MasterState = NegotiatorDisconnected()
        self.entered_at = T0
        self.living: dict[str, ProcessorReport | None] = {}
        self.snapshots: dict[str, SnapshotReport | None] = {}
        self.committed: CommittedRecord | None = None
        self.commits: list[CommitClock] = []
        self.spout_pos: dict[str, int] = dict.fromkeys(SPOUTS, -1)
        self.expected: frozenset[str] | None = EXPECTED
        self.older_load: set[str] = set()
        """Bolts that load the previous committed snapshot instead of the latest."""
        self.stop: StopRequest | None = None

    def highest(self) -> int:
        epochs = [self.state.epoch]
        if self.committed:
            epochs.append(self.committed.epoch)
        epochs += [r.epoch for r in self.living.values() if r is not None]
        epochs += [s.epoch for s in self.snapshots.values() if s is not None]
        return max(epochs)

    def view(self) -> View:
        return View(self.now, self.entered_at, self.expected, dict(self.living),
                    dict(self.snapshots), self.committed, self.highest(), self.stop)

    def negotiate(self) -> Decision:
        before = self.state
        v = self.view()
        d = step(before, v, self.config)
        assert d == step(before, v, self.config)
        if d.next_state is None:
            assert not d.commits
            assert d.wake_at is not None or isinstance(before, NegotiatorDisconnected)
            return d
        after = d.next_state
        assert is_legal(before, after), f"{label(before)} -> {label(after)}: {d.reason}"
        assert after.epoch >= before.epoch
        if after.phase in (Phase.INITIALIZE, Phase.SPOUTS_PAUSED):
            assert after.epoch > v.highest_epoch, "a new epoch exceeds every recorded one"
        for commit in d.commits:
            assert isinstance(before, Flowing) and before.clock is not None
            assert commit.epoch == before.epoch and commit.clock == before.clock
            # Every expected bolt instance reported a durable snapshot at exactly this clock.
            bolts = {p for p in (v.expected or ()) if p.startswith(("bolt:", "sink:"))}
            assert bolts, "this topology has bolts: nothing commits without them"
            assert set(commit.snapshots) == bolts
            for b in bolts:
                s = v.snapshots[b]
                assert s is not None and s.epoch == commit.epoch
                assert all(s.clock.get(p, -1) == o for p, o in commit.clock.items())
                assert commit.snapshots[b] == s.ref
            if self.committed is not None:
                assert commit.epoch > self.committed.epoch
                assert dominates(commit.clock, self.committed.clock), "committed went back"
                self.committed = self.committed.succeeded_by(
                    commit.epoch, commit.clock, commit.snapshots, self.now)
            else:
                self.committed = CommittedRecord(commit.epoch, dict(commit.clock),
                                                 dict(commit.snapshots), self.now)
            self.commits.append(commit)
            self.older_load.clear()
        if d.confirms is not None:  # a skipped round: nothing changed since the committed one
            assert isinstance(before, SpoutsPaused) and isinstance(after, Flowing)
            assert after.clock is None and after.epoch == before.epoch
            committed = self.committed
            assert committed is not None and committed.previous is not None
            assert d.confirms.epoch == committed.epoch and v.stop is None
            assert all(committed.clock.get(p, -1) == committed.previous.clock.get(p, -1)
                       for p in set(committed.clock) | set(committed.previous.clock))
            swept = [r.swept_after for name, r in v.living.items() if name in BOLTS
                     and r is not None and r.processor == name and r.epoch <= before.epoch
                     and r.swept_after is not None]
            assert all(after < committed.epoch for after in swept), \
                "skipped a round a bolt's sweep needed"
            event("a round skipped")
            self.committed = committed.confirmed(self.now)
        self.state = after
        self.entered_at = self.now
        return d

    # --- well-behaved processors

    def cooperate(self, pid: str, advance: int = 0) -> None:
        """``pid`` answers the current master state as the protocol says."""
        state = self.state
        role = parse_processor_id(pid).role
        match state:
            case Initialize(epoch=e):
                loaded = None
                if role == "bolt":
                    loaded = dict(self.committed.clock) if self.committed else {}
                    if pid in self.older_load and self.committed:
                        older = self.committed.previous
                        loaded = dict(older.clock) if older else {}
                self.living[pid] = report(pid, ProcessorState.READY, e, loaded=loaded)
            case SpoutsRewind(epoch=e, clock=clock) if role == "spout":
                self.spout_pos[pid] = clock[SPOUTS[pid]]
                self.living[pid] = report(pid, ProcessorState.REWOUND, e,
                                          position={SPOUTS[pid]: self.spout_pos[pid]})
            case Flowing(clock=None) if role == "spout":
                self.spout_pos[pid] += advance
            case SpoutsPaused(epoch=e) if role == "spout":
                self.living[pid] = report(pid, ProcessorState.PAUSED, e,
                                          position={SPOUTS[pid]: self.spout_pos[pid]})
            case Flowing(epoch=e, clock=clock) if role in ("bolt", "sink") and clock is not None:
                self.snapshots[pid] = SnapshotReport(pid, e, dict(clock), f"ref-{pid}-{e}")
            case Stopped():
                self.living.pop(pid, None)  # processors leave a stopped topology
            case _:
                pass

    def cooperate_all(self, advance: int = 1) -> None:
        for pid in sorted(EXPECTED):
            self.cooperate(pid, advance)


def test_a_cooperative_run_commits_increasing_clocks() -> None:
    m = Model()
    for _ in range(60):
        m.cooperate_all(advance=3)
        m.negotiate()
        m.now += 1
    assert len(m.commits) >= 5
    assert [c.epoch for c in m.commits] == sorted({c.epoch for c in m.commits})
    assert m.committed is not None and m.committed.previous is not None
    assert m.committed.clock[P0] > m.committed.previous.clock[P0]


def test_recovery_after_loss_rewinds_to_the_committed_clock() -> None:
    m = Model()
    for _ in range(30):
        m.cooperate_all(advance=2)
        m.negotiate()
        m.now += 1
    assert m.committed is not None
    committed = dict(m.committed.clock)
    del m.living[B1]
    d = m.negotiate()
    assert isinstance(d.next_state, Initialize) and B1 in d.reason
    m.living[B1] = report(B1, ProcessorState.JOINING, 0)
    m.cooperate_all()
    d = m.negotiate()
    assert d.next_state == SpoutsRewind(m.state.epoch, committed)


# --------------------------------------------------------------------------- properties

IDS = [*sorted(EXPECTED), "bolt:ghost:0", "spout:lines:words:7", "garbage"]
clocks = st.dictionaries(st.sampled_from([P0, P1, ("x", 0)]), st.integers(-1, 30), max_size=3)
reports = st.builds(
    ProcessorReport,
    processor=st.sampled_from(sorted(EXPECTED)),
    state=st.sampled_from(list(ProcessorState)),
    epoch=st.integers(-1, 12),
    position=st.none() | clocks,
    loaded=st.none() | clocks,
    error=st.none() | st.just("boom"),
    swept_after=st.none() | st.integers(0, 12),
)
snapshot_reports = st.builds(
    SnapshotReport, processor=st.sampled_from(list(BOLTS)), epoch=st.integers(0, 12),
    clock=clocks, ref=st.text("abc", min_size=1, max_size=3),
)
states = st.one_of(
    st.builds(NegotiatorDisconnected, st.integers(0, 10)),
    st.builds(Initialize, st.integers(1, 10)),
    st.builds(SpoutsRewind, st.integers(1, 10), clocks),
    st.builds(SpoutsPaused, st.integers(1, 10)),
    st.builds(Flowing, st.integers(1, 10), st.none() | clocks),
    st.builds(Stopped, st.integers(1, 10), clocks, st.just("hailstorm stop")),
)
committed_records = st.none() | st.builds(
    CommittedRecord, epoch=st.integers(0, 10), clock=clocks,
    snapshots=st.dictionaries(st.sampled_from(list(SAVERS)), st.just("r")),
)
views = st.builds(
    View,
    now=st.floats(0, 200),
    entered_at=st.floats(0, 100),
    expected=st.none() | st.frozensets(st.sampled_from(IDS)) | st.just(EXPECTED),
    living=st.dictionaries(st.sampled_from(IDS), st.none() | reports),
    snapshots=st.dictionaries(st.sampled_from(IDS), st.none() | snapshot_reports),
    committed=committed_records,
    highest_epoch=st.integers(0, 15),
    stop=st.none() | st.just(StopRequest("hailstorm stop", 1.0)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states, v=views)
def test_any_view_gives_a_legal_decision(state: MasterState, v: View) -> None:
    """Arbitrary (mostly implausible) views never crash the machine nor break a rule."""
    d = step(state, v, CONFIG)
    assert d == step(state, v, CONFIG)
    if d.next_state is None:
        assert d.wake_at is not None and not d.commits
        return
    assert is_legal(state, d.next_state)
    if d.next_state.phase in (Phase.INITIALIZE, Phase.SPOUTS_PAUSED):
        assert d.next_state.epoch > max(state.epoch, v.highest_epoch)
    for commit in d.commits:  # rare here: see the next test for views that commit
        _check_commit(state, v, commit)


def _check_commit(state: MasterState, v: View, commit: CommitClock) -> None:
    """What every commit must satisfy: the round's own clock, every saver's snapshot."""
    assert isinstance(state, Flowing) and commit.clock == state.clock
    assert v.committed is None or (commit.epoch > v.committed.epoch
                                   and dominates(commit.clock, v.committed.clock))
    savers = {p for p in (v.expected or ()) if p.startswith(("bolt:", "sink:"))}
    assert set(commit.snapshots) == savers
    for saver in savers:
        snap = v.snapshots[saver]
        assert snap is not None and snap.epoch == commit.epoch == state.epoch
        assert {p: snap.clock.get(p, -1) for p in commit.clock} == commit.clock
        assert commit.snapshots[saver] == snap.ref


#: Views of a snapshot round that may well commit: every processor flowing in the round,
#: each saver's report drawn among "saved this round at its clock", "saved this round at
#: another clock", "saved an older round" and "not yet".
round_clocks = st.dictionaries(st.sampled_from([P0, P1]), st.integers(-1, 30), min_size=2)


@st.composite
def snapshot_rounds(draw: st.DrawFn) -> tuple[Flowing, View]:
    e = draw(st.integers(2, 10))
    clock = draw(round_clocks)
    committed = draw(st.none() | st.builds(
        CommittedRecord, epoch=st.integers(0, e), clock=round_clocks,
        snapshots=st.just({b: "r" for b in SAVERS})))
    living = {pid: report(pid, ProcessorState.FLOWING, e) for pid in EXPECTED}
    snapshots: dict[str, SnapshotReport | None] = {}
    for saver in SAVERS:
        kind = draw(st.sampled_from(["saved"] * 6 + ["other clock", "older", "none"]))
        if kind == "saved":
            snapshots[saver] = SnapshotReport(saver, e, dict(clock), f"file:///{saver}/{e}")
        elif kind == "other clock":
            other = {p: o + 1 for p, o in clock.items()}
            snapshots[saver] = SnapshotReport(saver, e, other, f"file:///{saver}/{e}")
        elif kind == "older":
            snapshots[saver] = SnapshotReport(saver, e - 1, dict(clock), f"file:///{saver}/o")
    v = View(T0 + draw(st.floats(0, 100)), T0, EXPECTED, living, snapshots, committed, e)
    return Flowing(e, clock), v


@settings(max_examples=400, deadline=None)
@given(round_and_view=snapshot_rounds())
def test_a_round_commits_exactly_when_every_saver_saved_its_clock(
    round_and_view: tuple[Flowing, View],
) -> None:
    """The commit rule, exercised where commits happen (random views almost never commit):
    a round commits iff every bolt and sink saved this round at its clock and the clock
    dominates the committed one; a saver at another clock restarts the topology."""
    state, v = round_and_view
    assert state.clock is not None
    d = step(state, v, CONFIG)
    snaps = [v.snapshots.get(s) for s in SAVERS]
    all_saved = all(s is not None and s.epoch == state.epoch and s.clock == state.clock
                    for s in snaps)
    wrong_clock = any(s is not None and s.epoch == state.epoch and s.clock != state.clock
                      for s in snaps)
    already = v.committed is not None and v.committed.epoch >= state.epoch
    dominating = v.committed is None or dominates(state.clock, v.committed.clock)
    should_commit = all_saved and not already and dominating
    event("commits" if should_commit else "does not commit")
    assert bool(d.commits) == should_commit, d.reason
    for commit in d.commits:
        _check_commit(state, v, commit)
    if wrong_clock and not already:
        assert isinstance(d.next_state, Initialize), d.reason


class NegotiatorWorld(RuleBasedStateMachine):
    """Random interleavings of cooperation, failures, noise, time and negotiation."""

    def __init__(self) -> None:
        super().__init__()
        self.m = Model(Config(snapshot_interval=5, initialize_timeout=30, rewind_timeout=20,
                              pause_timeout=20, snapshot_timeout=25))
        self.committed_epochs: list[int] = []

    @rule(pid=st.sampled_from(sorted(EXPECTED)), advance=st.integers(0, 5))
    def cooperate(self, pid: str, advance: int) -> None:
        self.m.cooperate(pid, advance)

    @rule(advance=st.integers(0, 5))
    def everybody_cooperates(self, advance: int) -> None:
        self.m.cooperate_all(advance)

    @rule(cycles=st.integers(1, 20), advance=st.integers(0, 5),
          dt=st.sampled_from([0.5, 1.0, 2.5]))
    def smooth_sailing(self, cycles: int, advance: int, dt: float) -> None:
        """A stretch where everybody follows the protocol (so rounds do commit)."""
        for _ in range(cycles):
            self.m.cooperate_all(advance)
            self.negotiate()
            self.m.now += dt

    @rule(pid=st.sampled_from(list(BOLTS)))
    def bolt_loads_an_older_snapshot(self, pid: str) -> None:
        """E.g. its latest file was unreadable: the low water mark drops below the committed
        clock, so the next rounds may not dominate it (and must not be committed)."""
        self.m.older_load.add(pid)

    @rule(pid=st.sampled_from(list(BOLTS)), cycles=st.integers(1, 20))
    def idle_with_a_late_sweep(self, pid: str, cycles: int) -> None:
        """Nothing read for a while (rounds get skipped), then a bolt's sweep drops
        something: the next round must be taken."""
        self.smooth_sailing(cycles, 0, 2.5)
        self.sweep_drops_after_the_last_snapshot(pid)
        self.smooth_sailing(cycles, 0, 2.5)

    @rule(pid=st.sampled_from(list(BOLTS)))
    def sweep_drops_after_the_last_snapshot(self, pid: str) -> None:
        """The bolt's sweep of closed windows drops what its last snapshot lacks."""
        old = self.m.living.get(pid)
        last = self.m.snapshots.get(pid)
        after = last.epoch if last is not None else (
            self.m.committed.epoch if self.m.committed is not None else None)
        if old is not None and after is not None:
            self.m.living[pid] = replace(old, swept_after=after)

    @rule(pid=st.sampled_from(sorted(EXPECTED)))
    def lose(self, pid: str) -> None:
        self.m.living.pop(pid, None)

    @rule(pid=st.sampled_from(sorted(EXPECTED)))
    def restart(self, pid: str) -> None:
        self.m.living[pid] = report(pid, ProcessorState.JOINING, 0)
        if pid in SPOUTS:
            self.m.spout_pos[pid] = -1

    @rule(pid=st.sampled_from(sorted(EXPECTED)))
    def fail(self, pid: str) -> None:
        old = self.m.living.get(pid)
        if old is not None:
            self.m.living[pid] = ProcessorReport(pid, old.state, old.epoch, old.position,
                                                 old.loaded, "crash")

    @rule(pid=st.sampled_from(sorted(EXPECTED)), back=st.integers(1, 3))
    def stale_report(self, pid: str, back: int) -> None:
        old = self.m.living.get(pid)
        if old is not None:
            self.m.living[pid] = ProcessorReport(pid, old.state, max(old.epoch - back, 0),
                                                 old.position, old.loaded)

    @rule(r=reports, name=st.sampled_from(IDS))
    def noise(self, r: ProcessorReport, name: str) -> None:
        self.m.living[name] = r

    @rule(s=snapshot_reports)
    def stray_snapshot(self, s: SnapshotReport) -> None:
        self.m.snapshots[s.processor] = s

    @rule(dt=st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0, 40.0]))
    def tick(self, dt: float) -> None:
        self.m.now += dt

    @rule()
    def negotiate(self) -> None:
        self.m.negotiate()
        if self.m.committed is not None:
            self.committed_epochs.append(self.m.committed.epoch)

    @precondition(lambda self: self.m.expected is not None)
    @rule()
    def driver_forgets_expected(self) -> None:
        self.m.expected = None

    @precondition(lambda self: self.m.expected is None)
    @rule()
    def driver_writes_expected(self) -> None:
        self.m.expected = EXPECTED

    @rule()
    def request_stop(self) -> None:
        self.m.stop = StopRequest("hailstorm stop", self.m.now)

    @precondition(lambda self: self.m.stop is not None)
    @rule()
    def run_again(self) -> None:
        """A new ``hailstorm run``: clears the request; its processors register."""
        self.m.stop = None
        for pid in sorted(EXPECTED):
            self.restart(pid)

    @invariant()
    def stopped_at_the_committed_clock(self) -> None:
        """A stop never leaves anything read but uncommitted: Stopped is at the clock the
        committed record holds."""
        state = self.m.state
        if isinstance(state, Stopped):
            committed = self.m.committed
            assert state.clock == (committed.clock if committed is not None else {})

    @invariant()
    def committed_never_goes_back(self) -> None:
        assert self.committed_epochs == sorted(self.committed_epochs)
        commits = self.m.commits
        for older, newer in itertools.pairwise(commits):
            assert newer.epoch > older.epoch
            assert dominates(newer.clock, older.clock)


NegotiatorWorld.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestNegotiatorWorld = NegotiatorWorld.TestCase


@pytest.mark.parametrize("name", sorted(RUNNING_STATES))
def test_a_broken_connection_passed_on_names_the_first_to_break(name: str) -> None:
    """A killed sink closes nothing in order: a bolt that noticed it fails and closes its
    own connections, and a spout notices that. The spout's report names the bolt, the
    bolt's the sink: the restart names the sink, where the chain ends (a cycle ends it
    too)."""
    state, living = RUNNING_STATES[name]
    first, middle, last = sorted(EXPECTED)[:3]
    reports = dict(living)
    for pid, lost in ((first, middle), (middle, last)):
        old = reports[pid]
        assert old is not None
        reports[pid] = replace(old, error=f"DataPlaneError: {lost} closed its connection",
                               lost_peer=lost)
    assert check(state, view(reports)).reason == (
        f"{last} lost: {middle} reports its connection broke: DataPlaneError: {last} closed "
        "its connection")
    old = reports[middle]
    assert old is not None
    reports[middle] = replace(old, lost_peer=first)  # each names the other
    assert check(state, view(reports)).reason.startswith(f"{first} lost: {middle} reports")
