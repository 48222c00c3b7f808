"""``bench/spout_cost.py`` runs each workload's spout in one process and reports its phases
(a few hundred messages here: the figures are the bench's, this only keeps it working)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import spout_cost


@pytest.mark.parametrize("workload", sorted(spout_cost.WORKLOADS))
def test_every_workload_reports_its_phases_per_message(
        workload: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert spout_cost.main(["--workload", workload, "--messages", "300", "--batch", "100",
                            "--runs", "2"]) == 0
    line = next(out for out in capsys.readouterr().out.splitlines() if out.startswith("{"))
    figures = json.loads(line)
    assert figures["bench"] == "spout_cost" and figures["messages"] == 300
    phases = [figures[f"us_per_message_{phase}"] for phase in spout_cost.PHASES]
    assert all(value >= 0 for value in phases)
    assert sum(phases) == pytest.approx(figures["us_per_message"], abs=0.01)


def test_nonsense_sizes_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        spout_cost.main(["--messages", "0"])
    assert "must be positive" in capsys.readouterr().err
