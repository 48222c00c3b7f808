"""The chaos harness's judgement, pure: which fault each recovery is due to, what evidence
each fault must leave, the restarts a plan implies, and a report that is OK only when every
fault bit."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.cli import main
from hailstorm.dev.harness import (
    MASTER_PHASES,
    ChaosReport,
    ChaosSchedule,
    Comparison,
    Explanation,
    Fault,
    Recovery,
    TopologyRun,
)
from hailstorm.dev.harness.evidence import (
    ABSORBABLE,
    COINCIDENCE_WINDOW,
    COINCIDENT_RECOVERY,
    FENCED,
    JOINED_RECOVERY,
    NEW_LEADER,
    RECOVERY_NAMES_VICTIM,
    SESSION_EXPIRED,
    STOPPED_BEFORE_COMMIT,
    VICTIM_GONE,
    VICTIM_RESUMED,
    VICTIM_STOPPED,
    absorbed,
    account,
    coincident_recovery,
    expects_recovery,
    fault_window,
    missing_evidence,
    names,
    planned_restarts,
    recovery_window,
)
from hailstorm.protocol.layout import RecoveryRecord

ROOT = Path(__file__).resolve().parents[2]



def _recovery(epoch: int, at: float, previous: str = "Flowing(None)",
              reason: str | None = None) -> RecoveryRecord:
    return RecoveryRecord(epoch, at, previous, reason if reason is not None else f"reason {epoch}")


def _hit(kind: str, target: str, at: float, phase: str = "Flowing", **more: Any) -> Fault:
    return Fault(kind, target, 1, at, 3, {}, phase=phase, **more)  # type: ignore[arg-type]


START = _recovery(1, 100.0, "NegotiatorDisconnected", "leader elected; no master state")


def test_a_recovery_is_due_to_the_fault_whose_victim_it_names_within_the_window() -> None:
    kill = _hit("processor", "spout:lines:words:2", 200.0)
    named = _recovery(5, 200.4, reason="bolt:counts:1 failed: DataPlaneError: "
                                       "spout:lines:words:2 closed its connection")
    assert recovery_window(6.0) == 22.0
    result = account([START, named], [kill])
    assert result.matched == {0: named} and not result.unexplained
    assert result.starts == [START] and result.restarts == 1
    # Naming another processor, before the fault, or after the window: not the fault's.
    other = _recovery(5, 200.4, reason="bolt:counts:0 lost (living node gone)")
    before = replace(named, at=198.0)
    late = replace(named, at=200.0 + recovery_window(6.0) + 0.5)
    for record in (other, before, late):
        result = account([START, record], [kill])
        assert result.matched == {} and result.unexplained == [record]
    # A prefix of another id is no name: bolt:counts:1 is not bolt:counts:10.
    assert names("bolt:counts:1 lost", "bolt:counts:1")
    assert not names("bolt:counts:10 lost", "bolt:counts:1")
    assert names("x: spout:l:w:1, sink:s:0 lost", "spout:l:w:1")


def test_one_fault_explains_one_recovery_and_its_retries_only() -> None:
    kill = _hit("processor", "bolt:counts:0", 200.0)
    first = _recovery(5, 201.0, reason="spout:lines:words:0 failed: sending to "
                                       "bolt:counts:0 failed: broken pipe")
    retried = _recovery(6, 232.0, "Initialize", "initialize of epoch 5 abandoned after 30 s")
    again = _recovery(8, 205.0, reason="bolt:counts:0 lost (living node gone)")  # flowed
    result = account([START, first, retried, again], [kill])
    assert result.matched == {0: first} and result.retries == [retried]
    assert result.unexplained == [again]
    # A retry of an unexplained recovery is not explained either.
    stray = _recovery(5, 500.0, reason="bolt:counts:1 lost (living node gone)")
    stray_retry = _recovery(6, 531.0, "SpoutsRewind({'w:0': 3})", "rewind abandoned")
    assert account([START, stray, stray_retry], [kill]).unexplained == [stray, stray_retry]


def test_faults_that_restart_nothing_explain_no_recovery() -> None:
    leader = _hit("negotiator", "negotiator-0", 200.0)
    stall = _hit("stall", "bolt:counts:1", 200.0)
    record = _recovery(5, 202.0, reason="bolt:counts:1 lost (living node gone)")
    assert account([START, record], [leader, stall]).unexplained == [record]
    # A stall that ended in a SIGKILL restarts, timed from the kill.
    crashed = replace(stall, lethal_at=240.0)
    late = replace(record, at=245.0)
    assert account([START, late], [crashed]).matched == {0: late}
    assert account([START, record], [crashed]).unexplained == [record]  # before the kill


def test_a_fault_timed_for_a_recovery_may_restart_it_without_naming_its_victim() -> None:
    trigger = _hit("processor", "spout:l:w:1", 200.0, trigger=True)
    planned = _hit("processor", "bolt:c:0", 203.0, phase="Initialize")
    first = _recovery(5, 200.2, reason="bolt:c:1 failed: spout:l:w:1 closed its connection")
    timed_out = _recovery(6, 203.0 + recovery_window(6.0) + 20,
                          "Initialize", "initialize of epoch 5 abandoned after 30 s: "
                                        "sink:s:0 not ready for epoch 5")
    result = account([START, first, timed_out], [trigger, planned])
    assert result.matched == {0: first, 1: timed_out} and not result.retries
    # Past the state's wait too: a retry of the trigger's recovery, the fault unmatched.
    later = replace(timed_out, at=203.0 + recovery_window(6.0) + 31)
    result = account([START, first, later], [trigger, planned])
    assert result.matched == {0: first} and result.retries == [later]


def test_broker_faults_may_fail_any_processor_and_declared_restarts_are_lenient() -> None:
    broker = _hit("broker", "kafka-2", 200.0)
    failed = _recovery(5, 240.0, reason="spout:l:w:3 failed: KafkaException: timed out")
    assert account([START, failed], [broker]).matched == {0: failed}
    assert account([START, replace(failed, at=261.5)], [broker]).unexplained
    declared = [Explanation(200.0, "the cable of worker-1 was pulled")]
    two = [_recovery(5, 230.0), _recovery(7, 300.0)]  # any reason, up to 120 s, any number
    result = account([START, *two], [], declared)
    assert result.declared == two and not result.unexplained
    assert account([START, _recovery(5, 321.5)], [], declared).unexplained


def test_retries_of_the_start_are_part_of_the_start() -> None:
    start_retry = _recovery(2, 131.0, "Initialize")  # processors slow to register
    stalled_rewind = _recovery(3, 170.0, "SpoutsRewind({'w:0': -1})")
    later_retry = _recovery(4, 210.0, "Initialize")
    assert account([START, start_retry], []).unexplained == []
    assert account([START, start_retry, stalled_rewind, later_retry], []).unexplained == [
        stalled_rewind, later_retry]


_TARGETS = ["spout:l:w:0", "spout:l:w:1", "bolt:c:0", "bolt:c:1", "sink:s:0"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["processor", "zk-session", "zombie", "negotiator",
                                           "stall", "broker"]),
                          st.sampled_from(_TARGETS), st.floats(0, 300),
                          st.sampled_from(MASTER_PHASES)), max_size=8),
       st.lists(st.tuples(st.floats(0, 400), st.sampled_from(_TARGETS),
                          st.sampled_from(["Flowing(None)", "SpoutsPaused", "Initialize"])),
                max_size=10))
def test_every_recovery_has_one_cause_at_most_and_a_fault_one_recovery(
        faults: list[tuple[str, str, float, str]],
        recoveries: list[tuple[float, str, str]]) -> None:
    hits = [_hit(kind, target, at, phase) for kind, target, at, phase in faults]
    records = [START] + [_recovery(i + 2, at, previous, f"{target} lost (living node gone)")
                         for i, (at, target, previous) in enumerate(recoveries)]
    result = account(records, hits)
    # Every recovery after the start lands in exactly one bucket.
    buckets = [list(result.matched.values()), result.retries, result.declared,
               result.unexplained, result.starts]
    assert sorted(r.epoch for bucket in buckets for r in bucket) == [r.epoch for r in records]
    assert len({r.epoch for r in result.matched.values()}) == len(result.matched)
    for index, record in result.matched.items():
        fault = hits[index]
        low, high = fault_window(fault, recovery_window(6.0), 30.0)
        assert low <= record.at <= high
        assert fault.kind in ("processor", "zk-session", "zombie", "broker")
        assert fault.kind == "broker" or names(record.reason, fault.target) \
            or (fault.phase in ("Initialize", "SpoutsRewind")
                and record.previous == "Initialize")
    assert result.restarts == len(records) - 1 - (len(result.starts) - 1)


def test_what_each_fault_must_leave_to_count_as_having_happened() -> None:
    kill = _hit("processor", "bolt:c:0", 1.0, evidence={VICTIM_GONE: True})
    assert missing_evidence(kill, recovered=True) == []
    assert missing_evidence(kill, recovered=False) == [RECOVERY_NAMES_VICTIM]
    gone_before = replace(kill, evidence={VICTIM_GONE: False})
    assert missing_evidence(gone_before, recovered=True) == [VICTIM_GONE]
    # An expiry counts only when the session it stopped really expired.
    expiry = _hit("zk-session", "bolt:c:0", 1.0, evidence={SESSION_EXPIRED: False})
    assert missing_evidence(expiry, recovered=True) == [SESSION_EXPIRED]
    zombie = _hit("zombie", "sink:s:0", 1.0,
                  evidence={STOPPED_BEFORE_COMMIT: True, FENCED: False})
    assert missing_evidence(zombie, recovered=True) == [FENCED]
    leader = _hit("negotiator", "negotiator-0", 1.0, evidence={VICTIM_GONE: True})
    assert missing_evidence(leader, recovered=False) == [NEW_LEADER]
    stall = _hit("stall", "bolt:c:1", 1.0, evidence={VICTIM_STOPPED: True,
                                                     VICTIM_RESUMED: True})
    assert missing_evidence(stall, recovered=False) == []
    crashed = replace(stall, lethal_at=5.0)
    assert missing_evidence(crashed, recovered=False) == [VICTIM_GONE, RECOVERY_NAMES_VICTIM]
    assert not expects_recovery(stall) and expects_recovery(crashed)


def test_a_process_ended_in_initialize_may_join_the_recovery_under_way() -> None:
    """Its Spark task's next incarnation joins the same Initialize, which the negotiator
    waits for: no recovery of its own, but it must show that it joined."""
    kill = _hit("processor", "bolt:c:0", 1.0, phase="Initialize",
                evidence={VICTIM_GONE: True, JOINED_RECOVERY: True})
    assert absorbed(kill) and not expects_recovery(kill)
    assert missing_evidence(kill, recovered=False) == []
    moved_on = replace(kill, evidence={VICTIM_GONE: True, JOINED_RECOVERY: False})
    assert not absorbed(moved_on) and expects_recovery(moved_on)
    assert missing_evidence(moved_on, recovered=False) == [RECOVERY_NAMES_VICTIM]
    flowing = replace(kill, phase="Flowing")  # only a recovery under way absorbs
    assert expects_recovery(flowing)
    task = _hit("task", "bolt:c:0", 1.0, phase="Initialize", evidence={VICTIM_GONE: True})
    assert expects_recovery(task)
    assert missing_evidence(task, recovered=False) == [RECOVERY_NAMES_VICTIM]


def test_a_zombie_stopped_in_a_recovery_its_replacement_joined_leaves_the_next_one_alone(
) -> None:
    """A failpoint restarts the run as a sink is made a zombie: its session expires in that
    Initialize, its replacement joins it, and no recovery names it. A kill of the same sink
    11 s later, within the zombie's window, causes the next recovery naming it: that one
    is the kill's (it was the zombie's, and the kill was left without one)."""
    failpoint = _recovery(6, 57.0, reason="sink:line_sizes:0 restarted (reports joining)")
    zombie = _hit("zombie", "sink:totals:0", 57.1, phase="Initialize",
                  evidence={STOPPED_BEFORE_COMMIT: True, FENCED: True, JOINED_RECOVERY: True})
    kill = _hit("processor", "sink:totals:0", 68.1, evidence={VICTIM_GONE: True})
    named = _recovery(9, 68.2, reason="sink:totals:0 lost: bolt:counts:0 reports its "
                                      "connection broke")
    declared = [Explanation(56.9, "failpoint sink.after_commit")]
    result = account([START, failpoint, named], [zombie, kill], declared)
    assert absorbed(zombie) and not expects_recovery(zombie)
    assert missing_evidence(zombie, recovered=False) == []
    assert result.matched == {1: named} and result.declared == [failpoint]
    assert not result.unexplained
    # Stopped a moment before that recovery began, its session still expired within it.
    early = replace(zombie, phase="Flowing", at=56.8)
    assert absorbed(early)
    assert account([START, failpoint, named], [early, kill], declared).matched == {1: named}
    # Not absorbed (its expiry came after that recovery had moved on): the zombie's own.
    own = replace(zombie, evidence={**zombie.evidence, JOINED_RECOVERY: False})
    assert account([START, failpoint, named], [own, kill], declared).matched == {0: named}


def test_a_kill_at_the_moment_something_else_restarts_everything_is_absorbed() -> None:
    """CI's case: a failpoint crashed ``sink:line_sizes:0`` and the test killed
    ``sink:totals:0`` 85 ms before the negotiator recorded the global recovery naming the
    failpoint's victim; the kill's victim restarted with everything, and no recovery named
    it. That recovery absorbed the kill, which shows it with its evidence; a recovery that
    names a victim, a local one, one too late, or a victim not restarted leaves the kill
    needing its own."""
    kill = _hit("processor", "sink:totals:0", 133.333, evidence={VICTIM_GONE: True})
    crash = RecoveryRecord(9, 133.418, "Flowing(None)", "sink:line_sizes:0 lost: "
                           "spout:sizes:words:2 reports its connection broke",
                           scope="global: sink:line_sizes:0 is a sink")
    restarted = ["sink:line_sizes:0", "sink:totals:0", "spout:sizes:words:2"]
    assert coincident_recovery(kill, [START, crash], restarted) == crash
    for recoveries, victims_restarted in (
            ([START, crash, _recovery(10, 140.0, reason="sink:totals:0 lost")], restarted),
            ([START, replace(crash, scope="local: sink:line_sizes:0 alone")], restarted),
            ([START, replace(crash, at=133.333 + COINCIDENCE_WINDOW + 0.1)], restarted),
            ([START, replace(crash, at=132.0)], restarted),
            ([START, crash], ["sink:line_sizes:0"])):
        assert coincident_recovery(kill, recoveries, victims_restarted) is None
    assert coincident_recovery(replace(kill, evidence={VICTIM_GONE: False}), [START, crash],
                               restarted) is None
    assert coincident_recovery(replace(kill, kind="zk-session"), [START, crash],
                               restarted) is None
    # Shown absorbed, the kill needs no recovery of its own and lacks no evidence; the
    # recovery goes to the failpoint that the test declared.
    assert expects_recovery(kill) and not absorbed(kill)
    shown = replace(kill, evidence={VICTIM_GONE: True, COINCIDENT_RECOVERY: True,
                                    JOINED_RECOVERY: True})
    assert absorbed(shown) and not expects_recovery(shown)
    assert missing_evidence(shown, recovered=False) == []
    result = account([START, crash], [shown], [Explanation(133.2, "failpoint")])
    assert result.matched == {} and result.declared == [crash] and not result.unexplained


def test_planned_restarts_are_a_range_from_the_plan() -> None:
    assert planned_restarts([]) == (0, 0)
    assert planned_restarts([("processor", "Flowing"), ("negotiator", "SpoutsPaused")]) == (1, 1)
    # A fault timed for a recovery state brings its trigger's restart; one in Initialize
    # may be absorbed by the recovery under way (none of its own).
    assert planned_restarts([("zk-session", "Initialize"), ("negotiator", "SpoutsRewind")]) \
        == (2, 3)
    assert planned_restarts([("task", "Initialize")]) == (1, 2)  # the next attempt may join
    assert planned_restarts([("stall", "Flowing"), ("broker", "Flowing")]) == (0, 2)
    kinds = ("processor",) * 4 + ("negotiator",) * 2 + ("zk-session",) * 2 + ("zombie",
                                                                              "stall")
    schedule = ChaosSchedule(kinds=kinds, count=10, spacing=2.0, seed=7)
    plan = schedule.plan()
    triggers = sum(p.phase in ("Initialize", "SpoutsRewind") for p in plan)
    absorbable = sum(p.phase == "Initialize" and p.kind in ABSORBABLE for p in plan)
    assert schedule.restarts() == (7 + triggers - absorbable, 8 + triggers)


def _bitten(kind: str, target: str, **evidence: bool) -> Recovery:
    fault = _hit(kind, target, 1.0, uncommitted=9, producing=True,
                 evidence={k.replace("_", " "): v for k, v in evidence.items()})
    return Recovery(fault, 1.0, 2.0)


def test_a_report_is_ok_only_when_every_fault_bit_unless_its_kind_may_miss() -> None:
    comparison = Comparison(keys_compared=1)
    kill = _bitten("processor", "bolt:c:0", victim_gone=True)
    unproven = _bitten("zk-session", "bolt:c:1", session_expired=False)
    unproven.missing = missing_evidence(unproven.fault, recovered=True)
    assert kill.bit and not unproven.bit
    report = ChaosReport("t", 9, 1, 0, [kill, unproven], comparison, 5, 1.0, restarts=2,
                         planned_restarts=(2, 2))
    assert not report.ok and report.ineffective() == [unproven]
    text = report.to_text()
    assert "NO EVIDENCE: session expired" in text
    assert "evidence: 1 of 2 faults left every piece of theirs; zk-session bolt:c:1 has no " \
           "session expired" in text
    excused = replace(report, may_miss=("zk-session",))
    assert excused.ok and "may be ineffective: zk-session (1 of them were)" in excused.to_text()
    assert json.loads(excused.to_json())["ineffective"] == ["zk-session bolt:c:1"]
    # An idle topology is no bite either.
    idle = replace(kill, fault=replace(kill.fault, uncommitted=0))
    assert not replace(report, faults=[idle], planned_restarts=None).ok


def test_a_report_is_ok_only_with_the_planned_number_of_restarts() -> None:
    comparison = Comparison(keys_compared=1)
    kill = _bitten("processor", "bolt:c:0", victim_gone=True)
    retry = _recovery(6, 40.0, "Initialize")
    report = ChaosReport("t", 9, 1, 0, [kill], comparison, 5, 1.0, restarts=2, retries=[retry],
                         planned_restarts=(1, 1))
    assert report.ok and report.caused_restarts == 1
    assert "restarts: 2 for 1 faults (planned 1..1), 1 retried, 0 unexplained" \
        in report.to_text()
    extra = replace(report, restarts=3)
    assert not extra.ok and "NOT AS PLANNED" in extra.to_text()
    assert not replace(report, restarts=1, retries=[], planned_restarts=(2, 3)).ok


def test_recovery_records_round_trip_through_json() -> None:
    record = RecoveryRecord(7, 1234.5, "Flowing({'words:0': 3})", "bolt:counts:1 lost", "neg-a")
    assert RecoveryRecord.from_json(record.to_json()) == record


def test_a_chaos_report_with_an_unexplained_recovery_is_not_ok() -> None:
    comparison = Comparison(keys_compared=1)
    clean = ChaosReport("wc", 10, 1, 0, [], comparison, 3, 1.0)
    assert clean.ok
    bad = ChaosReport("wc", 10, 1, 0, [], comparison, 3, 1.0, restarts=1,
                      unexplained=[_recovery(2, 5.0)])
    assert not bad.ok
    assert "1 unexplained" in bad.to_text() and "reason 2" in bad.to_text()
    assert bad.to_dict()["unexplained_recoveries"][0]["epoch"] == 2


def test_chaos_command_refuses_an_unknown_kind_to_excuse() -> None:
    result = CliRunner().invoke(main, ["chaos", str(ROOT / "topologies" / "wordcount.py"),
                                       "--may-miss", "processor,gremlin"])
    assert result.exit_code == 1 and "unknown fault kind(s) gremlin" in result.output


def test_a_kill_records_whether_its_victim_was_alive_and_is_gone() -> None:
    """The SIGKILL of a live process is evidence; one of a process already gone is not (the
    old harness ignored that, so a fault could fail to happen)."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    hit = _hit("processor", "bolt:c:0", 1.0)
    TopologyRun._sigkill(hit, live.pid)
    live.wait(10)
    assert hit.evidence == {VICTIM_GONE: True}
    late = _hit("processor", "bolt:c:0", 2.0)
    TopologyRun._sigkill(late, live.pid)  # reaped: nothing left to kill
    assert late.evidence == {VICTIM_GONE: False}
    assert "had ended before the SIGKILL" in late.detail
    assert missing_evidence(late, recovered=True) == [VICTIM_GONE]


def test_a_pair_is_killed_at_once_and_recovered_by_a_recovery_naming_either() -> None:
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pair = _hit("pair", "bolt:c:0", 1.0, others=("sink:s:0",))
    TopologyRun._sigkill(pair, first.pid, second.pid)
    first.wait(10)
    second.wait(10)
    assert pair.evidence == {VICTIM_GONE: True} and pair.victims == ("bolt:c:0", "sink:s:0")
    again = _hit("pair", "bolt:c:0", 2.0, others=("sink:s:0",))
    TopologyRun._sigkill(again, first.pid, second.pid)
    assert again.evidence == {VICTIM_GONE: False}
    # One victim gone already: nothing is killed (its pid may be another process's now).
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    half = _hit("pair", "bolt:c:0", 3.0, others=("sink:s:0",))
    TopologyRun._sigkill(half, alive.pid, first.pid)
    assert half.evidence == {VICTIM_GONE: False} and alive.poll() is None
    alive.kill()
    alive.wait(10)
    # One recovery for both: it may name either (or both).
    for reason in ("sink:s:0 restarted (reports joining)", "bolt:c:0, sink:s:0 restarted"):
        kill = _hit("pair", "bolt:c:0", 200.0, others=("sink:s:0",))
        record = _recovery(5, 200.5, reason=reason)
        result = account([START, record], [kill])
        assert result.matched == {0: record} and not result.unexplained
    assert expects_recovery(kill) and planned_restarts([("pair", "Flowing")]) == (1, 1)
    assert planned_restarts([("pair", "Initialize")]) == (1, 2)  # trigger; maybe absorbed
    # With local recovery, its victims may restart alone one after the other.
    assert planned_restarts([("pair", "Flowing")], local_recovery=True) == (1, 2)
    assert planned_restarts([("processor", "Flowing")], local_recovery=True) == (1, 1)


def test_the_other_victim_of_a_pair_joining_a_local_recovery_is_a_retry_of_it() -> None:
    """Seen once the first victim is replayed to, the second joins the local recovery in a
    new epoch: part of the pair's one recovery. Restarting everything from there, or with
    no fault behind the recovery joined, stays unexplained."""
    kill = _hit("pair", "bolt:c:0", 200.0, others=("bolt:c:1",))
    first = replace(_recovery(5, 200.5, reason="bolt:c:1 restarted (reports joining)"),
                    scope="local: bolt:c:1 can restart alone")
    joined = replace(_recovery(6, 200.9, "Replaying(bolt:c:1)",
                               "during the local recovery of bolt:c:1: bolt:c:0 restarted"),
                     scope="local: bolt:c:0, bolt:c:1 can restart alone")
    result = account([START, first, joined], [kill])
    assert result.matched == {0: first} and result.retries == [joined]
    assert not result.unexplained
    everything = replace(joined, scope="global: bolt:c:9 cannot restart alone")
    assert account([START, first, everything], [kill]).unexplained == [everything]
    assert account([START, joined], []).unexplained == [joined]


def test_the_other_victim_of_a_pair_registering_after_the_first_recovered_is_the_pairs() -> None:
    """Seen only once the first victim's local recovery was done (a round already pending),
    the second restarts alone in a recovery of its own: the pair's second, counted and
    reported with it. Not when it is global, names the first victim again, comes after
    the fault's window, or no pair's first recovery was local."""
    kill = _hit("pair", "bolt:counts:0", 200.0, others=("bolt:counts:1",))
    first = replace(_recovery(4, 200.1, reason="bolt:counts:0 restarted (reports joining); "
                                               "bolt:counts:0 restart alone from committed "
                                               "round 3"),
                    scope="local: bolt:counts:0 can restart alone")
    second = replace(_recovery(6, 200.7, "SpoutsPaused", "bolt:counts:1 restarted (reports "
                               "joining); bolt:counts:1 restart alone from committed round 3; "
                               "round 5 is abandoned"),
                     scope="local: bolt:counts:1 can restart alone")
    result = account([START, first, second], [kill])
    assert result.matched == {0: first} and result.apart == {0: second}
    assert not result.unexplained and not result.retries and result.restarts == 2
    for stray in (replace(second, scope="global: 5 of 7 instances failed"),
                  replace(second, reason="bolt:counts:0, bolt:counts:1 restarted"),
                  replace(second, at=200.0 + recovery_window(6.0) + 1)):
        result = account([START, first, stray], [kill])
        assert result.apart == {} and result.unexplained == [stray]
    everything = replace(first, scope="global: local recovery is off")
    assert account([START, everything, second], [kill]).unexplained == [second]
    # One second per pair: a third recovery of its victims is no part of it.
    third = replace(second, epoch=8, at=201.5)
    assert account([START, first, second, third], [kill]).unexplained == [third]
    # Reported beside the pair's first recovery.
    report = ChaosReport("wc", 9, 1, 0, [Recovery(kill, 0.5, 0.5, record=first, apart=second)],
                         Comparison(keys_compared=1), 7, 1.0, restarts=2)
    assert "the other registered after it was done, recovery epoch 6: bolt:counts:1" \
        in report.to_text()
    assert json.loads(report.to_json())["recoveries"][0]["apart_recovery"]["epoch"] == 6
