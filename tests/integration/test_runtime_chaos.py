"""Chaos: ``hailstorm chaos`` on word count keeps exactly the model's state while Spark
workers are SIGKILLed, the negotiator leader is SIGKILLed, processors' ZooKeeper sessions
expire, a sink turns zombie, a bolt stalls and two processors die at once, in every master
state; every fault must be shown to have bitten, and the command's report says so."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from deployments import hailstorm_command

from hailstorm import kafka
from hailstorm.dev.harness import MASTER_PHASES, ZOMBIE_FENCED, ChaosSchedule, StackAddresses
from hailstorm.dev.harness.evidence import ABSORBABLE, FENCED, STOPPED_BEFORE_COMMIT
from hailstorm.dev.harness.faults import RECOVERY_PHASES

pytestmark = pytest.mark.integration

def chaos_on_wordcount(stack_env: dict[str, str], tmp_path: Path, *options: str,
                       ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``hailstorm chaos --use-env`` on word count with ``options`` (600 lines/s, faults 2 s
    apart, sinks on the stack's PostgreSQL, logs in ``tmp_path``), printed; the command and
    its JSON report."""
    done, seconds = hailstorm_command(
        StackAddresses.from_env(stack_env), "chaos", "topologies/wordcount.py", "--use-env",
        *options, "--rate", "600", "--spacing", "2", "--json", str(tmp_path / "report.json"),
        "--log-dir", str(tmp_path / "logs"),
        timeout=840, extra_env={"HAILSTORM_DATABASE_URL": stack_env["HAILSTORM_DATABASE_URL"]})
    print(f"hailstorm chaos: {seconds:.0f} s\n{done.stdout}\n{done.stderr[-5000:]}")
    return done, json.loads((tmp_path / "report.json").read_text())


KINDS = ("processor", "task", "negotiator", "zk-session", "zombie", "stall", "pair")
SEED = 7
MESSAGES = 40_000


def test_chaos_command_keeps_wordcount_exact_under_faults_of_every_kind(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """``hailstorm chaos --use-env`` on the session's stack: 40k realistic lines (Zipf:
    50,000 words, most rare, so a stale upsert of a zombie would stay in the table; 10
    words a line, at 600 lines/s, longer while faults remain); 7 faults, one of every kind:
    a kill -9 of a random spout's, bolt's or sink's process (its Spark task restarts it)
    and of another's Spark task (Spark resubmits the stage), the negotiator leader killed,
    a ZooKeeper session expired, a zombie sink, a stalled bolt and two processes killed at
    the same moment, in a seeded random order, timed for every master state (a round
    pending among them); on PostgreSQL. Every fault must bite, with its evidence,
    and cause exactly the restarts the plan implies; the states, the table and the dead
    letters must equal both oracles and the count by hand, and the command exit 0 with a
    report of 0 lost, 0 duplicated, 0 wrong. Longer plans (more faults of each kind, other
    topologies, broker faults) run with ``hailstorm chaos`` outside the suite:
    docs/chaos.md."""
    schedule = ChaosSchedule(kinds=KINDS, count=len(KINDS), spacing=2.0, seed=SEED)
    plan = schedule.plan()
    assert sorted(p.kind for p in plan) == sorted(KINDS)
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], "words", 4)  # no earlier tests' lines
    done, report = chaos_on_wordcount(
        stack_env, tmp_path, "--messages", str(MESSAGES), "--kills", str(len(KINDS)),
        "--kinds", ",".join(KINDS), "--seed", str(SEED))
    text = done.stdout
    assert report["topology"] == "wordcount" and report["seed"] == SEED
    assert report["faults_by_kind"] == {"processor": 1, "task": 1, "negotiator": 1,
                                        "zk-session": 1, "zombie": 1, "stall": 1, "pair": 1}
    faults = report["recoveries"]
    # Two processes killed at the same moment: one recovery restarted both.
    pair = next(r for r in faults if r["kind"] == "pair")
    assert "at once" in pair["detail"] and pair["evidence"]["victim gone"], pair
    # The zombie stopped just before a commit, resumed after its replacement committed, and
    # its table fenced it: it wrote nothing.
    zombie = next(r for r in faults if r["kind"] == "zombie")
    assert zombie["target"].startswith("sink:"), text
    assert zombie["evidence"] == {STOPPED_BEFORE_COMMIT: True, FENCED: True}, text
    assert ZOMBIE_FENCED in zombie["detail"]
    # Timed for every master state; the recovery phases after a trigger (two at once).
    assert set(report["faults_by_phase"]) == set(MASTER_PHASES), text
    assert report["triggers"] == sum(p.phase in RECOVERY_PHASES for p in plan)
    assert all(r["target"].startswith(("spout:", "bolt:", "sink:", "negotiator-"))
               for r in faults)
    assert all(r["committed_after"] is not None for r in faults), text
    # Every fault hit uncommitted data while the producer still wrote, and left every
    # piece of its evidence: each one that fails a processor with the recovery it caused.
    assert report["ineffective"] == [] and all(r["bit"] for r in faults), text
    assert all(r["recovery"] is not None for r in faults if r["expects_recovery"]), text
    # Exactly the restarts the plan implies (retries of a recovery aside), none unexplained.
    low, high = schedule.restarts()
    # A stall may end in a kill or not; a process ended in Initialize may join that
    # recovery (no restart of its own) or come after it moved on.
    absorbable = sum(p.phase == "Initialize" and p.kind in ABSORBABLE for p in plan)
    assert report["planned_restarts"] == [low, high] and high - low <= 1 + absorbable
    assert low <= report["caused_restarts"] <= high, text
    assert report["unexplained_recoveries"] == [], text
    assert report["messages"] >= MESSAGES  # more when the faults outlast the workload
    # Exact against the model, the oracle and the count by hand; the models agree.
    assert (report["lost"], report["duplicated"], report["wrong"],
            report["instance_mismatches"]) == (0, 0, 0, []), text
    oracle = report["against_oracle"]
    assert oracle is not None and (oracle["lost"], oracle["duplicated"], oracle["wrong"]) \
        == (0, 0, 0) and oracle["keys_compared"] == report["keys_compared"], text
    assert report["model_disagreements"] == [], text
    independent = report["independent"]
    assert (independent["lost"], independent["duplicated"], independent["wrong"]) == (0, 0, 0)
    # The counts bolt's words and the word_counts rows: tens of thousands of words.
    assert report["keys_compared"] == 2 * independent["rows"] > 20_000
    # The dead-letter topic and the rejected rows were read back: none, as both models say.
    side = report["side_outputs"]
    assert side["places"] == sorted(["wordcount.dead-letter", "word_counts_rejected"]), text
    assert side["read"] == 0, text
    assert side["model"]["expected"] == side["oracle"]["expected"] == 0
    assert report["database"].startswith("postgresql://")
    # The command says so, and exits 0.
    assert "result: 0 lost, 0 duplicated, 0 wrong" in text
    assert "0 lost, 0 duplicated, 0 wrong\nthe model and the oracle agree" in text
    assert "OK: exactly the model's state" in text
    assert report["ok"] and done.returncode == 0, text


LOCAL_KINDS = ("processor", "pair", "zk-session")
LOCAL_PHASES = ("Flowing", "SpoutsPaused", "RoundPending")
"""The master states a local recovery starts in (a fault in a recovery restarts everything,
with or without local recovery: the test above times faults for those)."""
LOCAL_SEED = 8


@pytest.mark.parametrize("standby", [False, True], ids=["reading", "standby"])
def test_chaos_with_local_recovery_restarts_killed_bolts_alone(
    stack_env: dict[str, str], tmp_path: Path, standby: bool
) -> None:
    """``hailstorm chaos --local-recovery --victims bolt`` (and ``--standby``: each victim's
    warm standby becomes its next incarnation): counts instances killed, two
    killed at once, one whose ZooKeeper session expired, while the topology flows, while a
    round pauses the spouts and while a round is pending, on PostgreSQL. Each restarts
    alone: only the victims have new processes, one recovery for both of a pair (or one
    each, when the second's next incarnation registers after the first's recovery was
    done), the recovery record says ``local``. The states, the table and the dead letters
    still equal both oracles and the count by hand, with exactly the restarts the plan
    implies. (A killed Spark task fails the barrier stage: every processor restarts, with
    or without local recovery; the chaos test above kills one.)"""
    schedule = ChaosSchedule(kinds=LOCAL_KINDS, count=5, spacing=2.0, seed=LOCAL_SEED,
                             phases=LOCAL_PHASES)
    plan = schedule.plan()
    assert {p.phase for p in plan} == set(LOCAL_PHASES)
    assert {p.kind for p in plan} == set(LOCAL_KINDS)
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], "words", 4)
    done, report = chaos_on_wordcount(
        stack_env, tmp_path, "--messages", "30000", "--kills", str(len(plan)),
        "--kinds", ",".join(LOCAL_KINDS), "--phases", ",".join(LOCAL_PHASES),
        "--victims", "bolt", "--local-recovery", *(["--standby"] if standby else []),
        "--seed", str(LOCAL_SEED))
    text = done.stdout
    faults = report["recoveries"]
    assert set(report["faults_by_phase"]) == set(LOCAL_PHASES), text
    assert report["triggers"] == 0 and len(faults) == len(plan), text
    for r in faults:  # restarted alone: only the victims have new processes
        assert r["target"].startswith("bolt:"), r
        victims = {r["target"], *(["bolt:counts:0", "bolt:counts:1"] if r["kind"] == "pair"
                                  else [])}
        assert set(r["restarted"]) == victims, r
        assert r["recovery"]["scope"].startswith("local: "), r
        apart = r["apart_recovery"]
        assert apart is None or apart["scope"].startswith("local: "), r
    assert report["ineffective"] == [] and report["unexplained_recoveries"] == [], text
    low, high = schedule.restarts(local_recovery=True)
    assert report["planned_restarts"] == [low, high], text
    assert low <= report["caused_restarts"] <= high, text
    assert (report["lost"], report["duplicated"], report["wrong"],
            report["instance_mismatches"]) == (0, 0, 0, []), text
    oracle = report["against_oracle"]
    assert (oracle["lost"], oracle["duplicated"], oracle["wrong"]) == (0, 0, 0), text
    independent = report["independent"]
    assert (independent["lost"], independent["duplicated"], independent["wrong"]) == (0, 0, 0)
    assert report["ok"] and done.returncode == 0, text
