"""How the negotiator reads a failed write transaction (no ZooKeeper needed: the results
are the exceptions kazoo returns, one per operation), and which transitions it logs."""

from __future__ import annotations

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from hailstorm.negotiator.shell import election_lost, still_idle
from hailstorm.protocol.layout import CommittedRecord, StopRequest
from hailstorm.protocol.states import Flowing, Initialize, SpoutsPaused


def test_a_failed_election_check_is_a_lost_election() -> None:
    assert election_lost([NoNodeError(), RuntimeInconsistency(), RuntimeInconsistency()])
    assert election_lost([BadVersionError(), RuntimeInconsistency()])


def test_a_record_changed_under_a_passed_check_is_no_lost_election() -> None:
    """ZooKeeper answers the operations before the failed one with "rolled back": the check
    passed, this negotiator still leads, and it reads the records again."""
    assert not election_lost([RolledBackError(), BadVersionError(), RuntimeInconsistency()])
    assert not election_lost([RolledBackError(), RolledBackError(), NodeExistsError()])


def test_an_idle_topology_logs_its_pauses_and_skipped_rounds_once() -> None:
    clock = {("words", 0): 4}
    committed = CommittedRecord(5, clock, {}, 1.0, CommittedRecord(4, clock, {}))
    idle = committed.confirmed(2.0)
    pause, skip = (Flowing(6), SpoutsPaused(7)), (SpoutsPaused(7), Flowing(7))
    assert not still_idle(*pause, committed, None) and not still_idle(*skip, committed, None)
    assert still_idle(*pause, idle, None) and still_idle(*skip, idle, None)
    assert not still_idle(*pause, idle, StopRequest("hailstorm stop", 3.0))
    assert not still_idle(SpoutsPaused(7), Flowing(7, clock), idle, None), "a round: logged"
    assert not still_idle(Flowing(6), Initialize(7), idle, None)
