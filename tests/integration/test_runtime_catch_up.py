"""A new bolt catching up on its own clock while the others keep committing (issue 41), on
the real stack: a word count committed a history, then the topology is deployed again with
a new bolt and a new sink reading it. The plan says what the backfill reads; the run
commits rounds for the carried bolt (its clock moving with the lines produced meanwhile)
while the new bolt's own clock climbs through the history, without a failed stage attempt
or a restart, until it joins the rounds; then every state and table equals the model's.
``bench/catch_up.py`` runs the same with 2M lines of history."""

from __future__ import annotations

from pathlib import Path

import pytest

from hailstorm.dev.harness import StackAddresses
from hailstorm.dev.harness.catch_up import CatchUpResult, catch_up_run, comparison_line

pytestmark = [pytest.mark.integration,
              pytest.mark.timeout(1200)]  # two deployments; each start waits for Spark

HISTORY = 20_000
"""Lines committed before the new bolt is deployed (four words each)."""


def test_new_bolt_catches_up_while_the_others_commit(stack_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    result = catch_up_run(StackAddresses.from_env(stack_env), tmp_path, history=HISTORY,
                          live=4_000, rate=200)
    topic = next(iter(result.history))[0]
    ranges = ", ".join(f"{topic}:{p[1]} 0..{o}" for p, o in sorted(result.history.items()))
    assert (f"bolt cased: new: no committed state: starts empty and reads the retained "
            f"records of its inputs (from offset 0); backfilled from offsets {ranges} "
            f"({sum(o + 1 for o in result.history.values())} records)") in result.plan
    assert "sink cased_counts: new: writes what its inputs emit from now on; catches up " \
        "with cased" in result.plan
    assert result.clock_moved, "the round's clock did not move meanwhile"
    assert_converged(result)


def test_new_bolt_reading_a_spout_and_a_carried_bolt_catches_up_holding_it(
        stack_env: dict[str, str], tmp_path: Path) -> None:
    """The mixed shape: the new bolt ``both`` reads the spout's history and what the
    carried ``counts`` emits from the deploy's clock on. ``counts`` and its table are held
    with it (they read the backfill and drop what they hold), so rounds commit throughout,
    and every state and table ends equal to a count by hand of exactly that."""
    result = catch_up_run(StackAddresses.from_env(stack_env), tmp_path, history=HISTORY,
                          live=4_000, rate=200, shape="mixed")
    topic = next(iter(result.history))[0]
    ranges = ", ".join(f"{topic}:{p[1]} 0..{o}" for p, o in sorted(result.history.items()))
    assert (f"bolt both: new: no committed state: starts empty and reads the retained "
            f"records of its inputs (from offset 0); but its input counts is carried and "
            f"sends only what it emits from the committed round on, not its history; "
            f"backfilled from offsets {ranges} "
            f"({sum(o + 1 for o in result.history.values())} records)") in result.plan
    assert "bolt counts: carry: per_key(Count) state carried; held while both catches up" \
        in result.plan
    assert "sink word_counts: carry: " in result.plan
    assert "; catches up with counts" in result.plan
    # counts committed on a clock of its own (held) while the round's clock moved on
    assert "; counts at {" in result.rounds, result.rounds
    assert_converged(result)


def assert_converged(result: CatchUpResult) -> None:
    """Rounds committed while the new bolt caught up, nothing restarted or failed, and
    every state and table equals the count by hand and the model."""
    assert result.catching_up >= 3, f"{result.catching_up} rounds committed while catching up"
    assert not result.restarts and not result.failed_attempts, \
        (result.restarts, result.failed_attempts)
    assert result.by_hand is not None and result.by_hand.ok, \
        comparison_line(result.by_hand, "a count by hand")
    assert result.comparison is not None and result.comparison.ok, \
        comparison_line(result.comparison)
    print(f"joined {result.joined_s} s after the first round catching up")
