"""Chaos: word count keeps exactly the model's state while Spark workers are SIGKILLed, the
negotiator leader is SIGKILLed, processors' ZooKeeper sessions expire, a sink turns zombie
and a bolt stalls; every fault must be shown to have bitten."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    MASTER_PHASES,
    ZOMBIE_FENCED,
    ChaosSchedule,
    StackAddresses,
    run_chaos,
)
from hailstorm.dev.harness.evidence import FENCED, STOPPED_BEFORE_COMMIT, expects_recovery
from hailstorm.dev.harness.producing import zipf_text_lines

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordcount.py"


def test_wordcount_is_exact_under_ten_faults_of_every_kind(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """100k realistic lines (Zipf: 50,000 words, most rare, so a stale upsert of a zombie
    would stay in the table; 10 words a line, twice the uniform workload's, so at half its
    rate); 10 faults: 4 kill -9 of random spouts/bolts/sinks, 2 of the
    negotiator leader, 2 ZooKeeper session expiries, a zombie sink and a stalled bolt, in a
    seeded random order, timed for every master state; on PostgreSQL (the harness's
    default). Every fault must bite, with its evidence, and cause exactly the restarts the
    plan implies."""
    kinds = ("processor",) * 4 + ("negotiator",) * 2 + ("zk-session",) * 2 + ("zombie",
                                                                              "stall")
    schedule = ChaosSchedule(kinds=kinds, count=10, spacing=2.0, seed=7)
    assert sorted(p.kind for p in schedule.plan()) == sorted(kinds)
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], "words", 4)  # no earlier tests' lines
    report = run_chaos(StackAddresses.from_env(stack_env), TOPOLOGY,
                       zipf_text_lines(100_000, seed=42), schedule,
                       log_dir=tmp_path / "logs", rate=600, progress=print)
    print(report.to_text())
    assert report.faults_by_kind() == {"processor": 4, "negotiator": 2, "zk-session": 2,
                                       "zombie": 1, "stall": 1}
    # The zombie stopped just before a commit, resumed after its replacement committed, and
    # its table fenced it: it wrote nothing.
    zombie = next(r.fault for r in report.faults if r.fault.kind == "zombie")
    assert zombie.target.startswith("sink:"), report.to_text()
    assert zombie.evidence == {STOPPED_BEFORE_COMMIT: True, FENCED: True}, report.to_text()
    assert ZOMBIE_FENCED in zombie.detail
    # Timed for every master state; the recovery phases after a trigger (two at once).
    assert set(report.faults_by_phase()) == set(MASTER_PHASES), report.to_text()
    assert report.triggers == sum(p.phase in ("Initialize", "SpoutsRewind")
                                  for p in schedule.plan())
    assert all(r.fault.target.startswith(("spout:", "bolt:", "sink:", "negotiator-"))
               for r in report.faults)
    assert all(r.committed_after is not None for r in report.faults), report.to_text()
    # Every fault hit uncommitted data while the producer still wrote, and left every
    # piece of its evidence: each one that fails a processor with the recovery it caused.
    assert report.ineffective() == [], report.to_text()
    assert all(r.record is not None for r in report.faults if expects_recovery(r.fault)), \
        report.to_text()
    # Exactly the restarts the plan implies (retries of a recovery aside), none unexplained.
    low, high = schedule.restarts()
    assert report.planned_restarts == (low, high) and high - low <= 1
    assert low <= report.caused_restarts <= high and not report.unexplained, report.to_text()
    assert report.messages >= 100_000  # more when the faults outlast the workload
    c = report.comparison
    assert (c.lost, c.duplicated, c.wrong, c.instance_mismatches) == (0, 0, 0, []), \
        report.to_text()
    independent = report.independent
    assert independent is not None and independent.ok, report.to_text()
    # The counts bolt's words and the word_counts rows: tens of thousands of words.
    assert c.keys_compared == 2 * independent.keys_compared > 20_000
    assert report.database.startswith("postgresql://")
    assert report.ok


def test_chaos_command_reports_zero_lost_duplicated_wrong(tmp_path: Path) -> None:
    """`hailstorm chaos` on its own embedded stack, exit 0: a processor kill, a zombie sink
    (the driver's Spark settings for it go through the command line) and a stall, each of
    which must bite; the other kinds and the recovery states run in the test above (suite
    time)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable)
    result = subprocess.run(
        [sys.executable, "-m", "hailstorm", "chaos", "topologies/wordcount.py",
         "--messages", "50000", "--kills", "3", "--kinds", "processor,zombie,stall",
         "--phases", "Flowing,SpoutsPaused", "--seed", "1",
         "--json", str(tmp_path / "report.json")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=420)
    print(result.stdout[-5000:], result.stderr[-5000:])
    assert result.returncode == 0
    assert "0 lost, 0 duplicated, 0 wrong" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["lost"], report["duplicated"], report["wrong"]) == (0, 0, 0)
    assert report["faults_by_kind"] == {"processor": 1, "zombie": 1, "stall": 1}
    assert report["ineffective"] == [] and report["ok"]
    zombie = next(r for r in report["recoveries"] if r["kind"] == "zombie")
    assert zombie["evidence"] == {STOPPED_BEFORE_COMMIT: True, FENCED: True}
    assert report["messages"] >= 50_000  # more when the faults outlast the workload
