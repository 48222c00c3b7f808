"""How the negotiator reads a failed write transaction (no ZooKeeper needed: the results
are the exceptions kazoo returns, one per operation)."""

from __future__ import annotations

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from hailstorm.negotiator.shell import election_lost


def test_a_failed_election_check_is_a_lost_election() -> None:
    assert election_lost([NoNodeError(), RuntimeInconsistency(), RuntimeInconsistency()])
    assert election_lost([BadVersionError(), RuntimeInconsistency()])


def test_a_record_changed_under_a_passed_check_is_no_lost_election() -> None:
    """ZooKeeper answers the operations before the failed one with "rolled back": the check
    passed, this negotiator still leads, and it reads the records again."""
    assert not election_lost([RolledBackError(), BadVersionError(), RuntimeInconsistency()])
    assert not election_lost([RolledBackError(), RolledBackError(), NodeExistsError()])
