"""The negotiator's deadlines while a processor waits out an outage (issue 40). Pure."""

from __future__ import annotations

from dataclasses import replace

from hailstorm.negotiator.machine import Config, View
from hailstorm.negotiator.machine import step as machine_step
from hailstorm.negotiator.outages import deadline_origin, step, waiting_in
from hailstorm.protocol.layout import ProcessorReport, ProcessorState, expected_processor_ids
from hailstorm.protocol.states import Flowing, Initialize

P0 = ("words", 0)
S0, B0, K0 = "spout:lines:words:0", "bolt:counts:0", "sink:out:0"
EXPECTED = frozenset(expected_processor_ids({"lines": [P0]}, {"counts": 1}, {"out": 1}))
CONFIG = Config()  # every timeout 60 s
T0 = 1000.0
DB_DOWN = ("the database at postgresql://hailstorm:***@127.0.0.1:5432/hailstorm, "
           "unavailable since 2026-11-27T05:40:00Z")


def _living(epoch: int, waiting: str | None, sink_state: ProcessorState) -> dict[
        str, ProcessorReport | None]:
    return {
        S0: ProcessorReport(S0, ProcessorState.REWOUND, epoch, position={P0: 9}),
        B0: ProcessorReport(B0, ProcessorState.READY, epoch, loaded={}),
        K0: ProcessorReport(K0, sink_state, epoch, waiting=waiting),
    }


def _view(living: dict[str, ProcessorReport | None], now: float) -> View:
    return View(now, T0, EXPECTED, living)


def test_initialize_is_not_abandoned_while_the_sink_waits_for_its_database() -> None:
    """The sink cannot get ready while its database is down: without a wait reported the
    machine restarts at the deadline; with one, the deadline starts over."""
    blocked = _living(5, None, ProcessorState.JOINING)
    assert machine_step(Initialize(5), _view(blocked, T0 + 61), CONFIG).next_state == \
        Initialize(6)
    waiting = _living(5, DB_DOWN, ProcessorState.JOINING)
    before = step(Initialize(5), _view(waiting, T0 + 30), CONFIG)
    assert before.next_state is None and before.wake_at == T0 + 60  # no busy loop
    renewed = step(Initialize(5), _view(waiting, T0 + 61), CONFIG)
    assert renewed.next_state == Initialize(5), "entered again: the same epoch, a new deadline"
    assert "starts over" in renewed.reason and f"{K0}: waiting for {DB_DOWN}" in renewed.reason


def test_a_snapshot_round_waits_for_a_sink_that_waits_for_its_database() -> None:
    round_ = Flowing(7, {P0: 15})
    living = _living(7, DB_DOWN, ProcessorState.READY)
    assert step(round_, _view(living, T0 + 61), CONFIG).next_state == round_
    assert machine_step(round_, _view(_living(7, None, ProcessorState.READY), T0 + 61),
                        CONFIG).next_state == Initialize(8)


def test_a_failure_still_restarts_during_an_outage() -> None:
    """Only deadlines are held: a processor that failed is a failure, outage or not."""
    living = _living(7, DB_DOWN, ProcessorState.READY)
    living[B0] = ProcessorReport(B0, ProcessorState.READY, 7, loaded={}, error="MemoryError")
    decision = step(Flowing(7, {P0: 15}), _view(living, T0 + 1), CONFIG)
    assert decision.next_state == Initialize(8) and "MemoryError" in decision.reason


def test_a_round_still_starts_when_it_is_due() -> None:
    living = _living(7, DB_DOWN, ProcessorState.READY)
    due = step(Flowing(7, None), _view(living, T0 + 61), CONFIG)
    assert due == machine_step(Flowing(7, None), _view(living, T0 + 61), CONFIG)
    assert due.next_state is not None and not isinstance(due.next_state, Initialize)


def test_moves_no_deadline_forced_are_made_as_usual() -> None:
    ready = _living(5, None, ProcessorState.READY)
    ready[S0] = ProcessorReport(S0, ProcessorState.READY, 5)
    ready[K0] = replace(ready[K0], waiting=DB_DOWN)  # type: ignore[type-var]
    assert step(Initialize(5), _view(ready, T0 + 1), CONFIG) == machine_step(
        Initialize(5), _view(ready, T0 + 1), CONFIG)


def test_only_a_wait_of_an_expected_processor_of_this_run_counts() -> None:
    stranger = {"sink:other:0": ProcessorReport("sink:other:0", ProcessorState.READY, 5,
                                                waiting=DB_DOWN)}
    assert waiting_in(_view(stranger, T0), 5) is None
    future = {K0: ProcessorReport(K0, ProcessorState.READY, 9, waiting=DB_DOWN)}
    assert waiting_in(_view(future, T0), 5) is None
    assert waiting_in(_view({K0: ProcessorReport(K0, ProcessorState.READY, 5,
                                                 waiting=DB_DOWN)}, T0), 5) == \
        f"{K0}: waiting for {DB_DOWN}"


def test_a_report_with_a_wait_survives_its_json() -> None:
    report = ProcessorReport(K0, ProcessorState.READY, 5, waiting=DB_DOWN)
    assert ProcessorReport.from_json(report.to_json()) == report
    assert b"waiting" not in replace(report, waiting=None).to_json()


def test_a_wait_starts_over_when_zookeeper_answers_again() -> None:
    """A ZooKeeper outage: nobody could report while it lasted, so the leader counts the
    current state's deadline from the reconnection, as from a takeover (issue 40); a standby
    has no deadline to count."""
    assert deadline_origin(T0, leader_since=T0 - 500, reconnected_at=0.0) == T0
    assert deadline_origin(T0, leader_since=T0 + 5, reconnected_at=0.0) == T0 + 5
    assert deadline_origin(T0, leader_since=T0 - 500, reconnected_at=T0 + 130) == T0 + 130
    assert deadline_origin(T0, leader_since=None, reconnected_at=T0 + 130) == T0
    assert deadline_origin(T0, T0 - 500, 0.0, wait_ended_at=T0 + 58) == T0 + 58, \
        "a deadline renewed during an outage that ended just before it: its whole time"
    living = _living(7, None, ProcessorState.READY)
    round_ = Flowing(7, {P0: 15})
    back = deadline_origin(T0, leader_since=T0 - 500, reconnected_at=T0 + 130)
    assert step(round_, View(T0 + 140, back, EXPECTED, living), CONFIG).next_state is None, \
        "60 s after the state's entry, but 10 s after ZooKeeper came back: no restart"


def test_a_wait_reported_by_a_processor_of_the_failed_stage_attempt_holds_nothing() -> None:
    """Its node only outlives it by the session timeout: its wait is not the run's."""
    living = _living(5, DB_DOWN, ProcessorState.JOINING)
    assert waiting_in(_view(living, T0), 5) is not None
    assert waiting_in(replace(_view(living, T0), attempt="a2"), 5) is None
