"""The peers' benchmark plumbing (``bench/peer_runs.py``, ``bench/peer_quix.py``): pure, no
peer runs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from peer_quix import _progress
from peer_runs import PEERS, PeerOutcome, peer_figures, peers_not_run
from peers import (
    bytewax_available,
    bytewax_requirement,
    bytewax_skipped,
    note_bytewax_skipped,
)


def test_a_benchmark_running_no_peer_says_why_for_each() -> None:
    figures, lines = peers_not_run("not run: no such job")
    assert figures == {f"{name}_unavailable": "not run: no such job" for name in PEERS}
    assert len(lines) == len(PEERS) and all("no figure: not run" in line for line in lines)


def test_a_benchmark_without_bytewax_says_why() -> None:
    """Told not to run it, or without the ``bench`` extra: the JSON line and the summary
    say so (never a silent gap in the table)."""
    figures: dict[str, object] = {}
    lines: list[str] = []
    note_bytewax_skipped(bytewax_skipped(True), figures, lines)
    assert figures == {"bytewax_unavailable": "not run (--no-bytewax)"}
    assert lines == ["  Bytewax:   no figure: not run (--no-bytewax)"]
    why = bytewax_skipped(False, install=False)  # a unit test installs nothing
    assert (why is None) == bytewax_available()
    if why is not None:
        assert "'bench' extra" in why
    note_bytewax_skipped(None, figures, lines)  # it ran: nothing added
    assert len(figures) == 1 and len(lines) == 1


def test_the_bytewax_a_bench_installs_is_the_one_the_bench_extra_pins() -> None:
    """One pin, in pyproject.toml: the first-use install reads it from the metadata."""
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    requirement = bytewax_requirement()
    assert requirement.startswith("bytewax==")
    assert f'bench = ["{requirement}"]' in pyproject


def test_a_peer_with_a_time_gets_a_rate_and_hailstorms_ratio_to_it() -> None:
    figures, _ = peer_figures([PeerOutcome("pathway", "Pathway", 10.0)], 1000, 200.0, "events")
    assert figures == {"pathway_events_per_s": 100, "ratio_hailstorm_to_pathway": 2.0}


def test_quix_keeps_the_further_running_figure_of_a_key_two_processes_wrote() -> None:
    assert _progress(7) == 7
    assert _progress([120, 3]) == 3  # user totals: [amount, events]
    assert _progress([["u1", 50], ["u2", 40]]) == 90  # a ranking: totals only grow
