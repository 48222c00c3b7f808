"""The kill-test harness's pure parts: the model comparison, the fault plan, the report,
and the planning of broker faults."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from hailstorm import Count, Table, Topology, per_key
from hailstorm.cli import main
from hailstorm.dev.harness import (
    BY_HAND,
    DEFAULT_FAULT_KINDS,
    FAULT_KINDS,
    MASTER_PHASES,
    SQLITE,
    WORKLOADS,
    ZOMBIE_ENDED,
    ZOMBIE_FENCED,
    BackgroundProducer,
    BoltStates,
    ChaosReport,
    ChaosSchedule,
    Fault,
    HarnessError,
    Produced,
    ProducedTopics,
    Recovery,
    StackAddresses,
    TopicLayout,
    TopologyRun,
    broker_fault_problem,
    busiest_leader,
    compare_tables,
    compare_with_model,
    keyed_append_rows,
    private_database,
    zombie_outcome,
)
from hailstorm.dev.harness.chaos import cycled
from hailstorm.dev.harness.compare import model_disagreements
from hailstorm.dev.harness.deployment import _patient_read
from hailstorm.dev.harness.evidence import (
    NODE_BACK,
    VICTIM_GONE,
)
from hailstorm.dev.harness.faults import (
    describe_restarts,
    phase_name,
    restarted_processors,
)
from hailstorm.dev.harness.producing import routed
from hailstorm.dev.harness.side_outputs import side_output_topics
from hailstorm.dev.workloads import PAGE_VIEW_SCHEMA
from hailstorm.model import Message, ModelResult, messages, run_model
from hailstorm.oracle import run_oracle
from hailstorm.sinks.db import create_postgres_database
from hailstorm.sinks.errors import SinkError
from hailstorm.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]


def _model() -> tuple[Topology, ModelResult]:
    topology = Topology("t")
    lines = topology.spout("lines", topic="w", decoder="text", explode=str.split)
    topology.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                  lift=lambda w: 1, parallelism=2)
    return topology, run_model(topology, messages("w", ["a b a", "c a", "b"]))


def _states(model: ModelResult, merged: dict[str, Any]) -> dict[str, BoltStates]:
    instances = model.instance_states("counts")
    return {"counts": BoltStates("counts", {}, list(instances), merged, [{}, {}])}


def test_equal_states_compare_ok() -> None:
    _, model = _model()
    result = compare_with_model(model, _states(model, {"a": 3, "b": 2, "c": 1}))
    assert result.ok and (result.lost, result.duplicated, result.wrong) == (0, 0, 0)
    assert result.keys_compared == 3


def test_lower_is_lost_higher_is_duplicated_missing_is_lost() -> None:
    _, model = _model()
    result = compare_with_model(model, _states(model, {"a": 2, "b": 4, "d": 1}))
    assert (result.lost, result.duplicated, result.wrong) == (1 + 1, 2 + 1, 0)
    assert [(d.key, d.kind) for d in result.differences] == [
        ("a", "lost"), ("b", "duplicated"), ("c", "lost"), ("d", "duplicated")]
    assert not result.ok


def test_non_count_values_are_wrong() -> None:
    _, model = _model()
    result = compare_with_model(model, _states(model, {"a": "x", "b": 2, "c": 1}))
    assert (result.lost, result.duplicated, result.wrong) == (0, 0, 1)


def test_schedule_is_seeded_and_uses_every_kind() -> None:
    plan = ChaosSchedule(count=6, seed=1).plan()
    assert plan == ChaosSchedule(count=6, seed=1).plan()
    assert sorted(p.kind for p in plan) == ["negotiator", "processor", "stall", "task",
                                            "zk-session", "zombie"]
    assert all(1.0 <= p.delay <= 3.0 for p in plan)
    exact = ChaosSchedule(kinds=("processor",) * 4 + ("negotiator",), count=5, seed=3).plan()
    assert sorted(p.kind for p in exact) == ["negotiator"] + ["processor"] * 4


def test_schedule_times_every_phase_and_keeps_broker_faults_flowing() -> None:
    plan = ChaosSchedule(count=8, seed=5).plan()
    assert plan == ChaosSchedule(count=8, seed=5).plan()
    assert {p.phase for p in plan} == set(MASTER_PHASES)
    brokers = ChaosSchedule(kinds=("broker", "processor", "negotiator", "zk-session"), count=8,
                            seed=1).plan()
    assert all(p.phase == "Flowing" for p in brokers if p.kind == "broker")
    timed = [p.phase for p in brokers if p.kind != "broker"]
    assert len(timed) < len(MASTER_PHASES) or set(timed) == set(MASTER_PHASES)
    flowing = ChaosSchedule(count=5, seed=2, phases=("Flowing",)).plan()
    assert {p.phase for p in flowing} == {"Flowing"}


def test_report_counts_triggers_apart_and_tallies_phases() -> None:
    _, model = _model()
    comparison = compare_with_model(model, _states(model, {"a": 2, "b": 1, "c": 1}))

    def hit(kind: str, phase: str, trigger: bool = False) -> Recovery:
        fault = Fault(kind, "bolt:x:0", 1, 0.0, 3, {}, uncommitted=5,  # type: ignore[arg-type]
                      producing=True, phase=phase, trigger=trigger)
        return Recovery(fault, 1.0, 2.0)

    report = ChaosReport("t", 4, 1, 0, [hit("processor", "Initialize", trigger=True),
                                        hit("zk-session", "Initialize"),
                                        hit("processor", "SpoutsPaused")],
                         comparison, 4, 1.5)
    assert report.faults_by_kind() == {"processor": 1, "zk-session": 1}
    assert report.faults_by_phase() == {"Initialize": 2, "SpoutsPaused": 1}
    text = report.to_text()
    assert "faults: 2 planned (1 processor, 1 zk-session) and 1 triggers" in text
    assert "(pid 1, Initialize 3, trigger, 5 uncommitted)" in text
    data = json.loads(report.to_json())
    assert data["triggers"] == 1 and data["recoveries"][0]["trigger"] is True


def test_report_says_which_processors_each_fault_restarted() -> None:
    _, model = _model()
    comparison = compare_with_model(model, _states(model, {"a": 2, "b": 1, "c": 1}))
    living = {"spout:l:w:0": "h:10", "bolt:x:0": "h:11", "bolt:x:1": "h:12"}

    def recovered(target: str, after: dict[str, str]) -> Recovery:
        fault = Fault("processor", target, 1, 0.0, 3, {}, uncommitted=5, producing=True,
                      phase="Flowing", incarnations=dict(living))
        recovery = Recovery(fault, 1.0, 2.0)
        recovery.restarted = restarted_processors(fault.incarnations, after)
        return recovery

    everything = recovered("bolt:x:1", {"spout:l:w:0": "h:20", "bolt:x:0": "h:21",
                                        "bolt:x:1": "h:22"})
    alone = recovered("bolt:x:1", living | {"bolt:x:1": "h:30"})
    nothing = recovered("bolt:x:1", dict(living))
    gone = recovered("bolt:x:1", {k: v for k, v in living.items() if k != "bolt:x:1"})
    report = ChaosReport("t", 4, 1, 0, [everything, alone, nothing, gone], comparison, 4, 1.5)
    lines = [line for line in report.to_text().splitlines() if "bolt:x:1 (pid" in line]
    assert "restarted all 3" in lines[0]
    assert "restarted 1 of 3: bolt:x:1" in lines[1]
    assert "restarted none of 3" in lines[2]
    assert "restarted 1 of 3: bolt:x:1" in lines[3]
    data = json.loads(report.to_json())
    assert [r["restarted"] for r in data["recoveries"]][1:] == [["bolt:x:1"], [], ["bolt:x:1"]]
    assert data["recoveries"][0]["living"] == 3


@settings(deadline=None)  # a loaded CI machine: correctness, not speed
@given(before=st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("xyz")),
       after=st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("xyz")))
def test_a_processor_restarted_when_its_incarnation_changed_or_came_or_went(
        before: dict[str, str], after: dict[str, str]) -> None:
    restarted = restarted_processors(before, after)
    assert restarted == sorted(restarted)
    for p in before.keys() | after.keys():
        assert (p in restarted) == (before.get(p) != after.get(p))
    assert describe_restarts(restarted, len(before)).startswith("restarted ")


def test_report_renders_as_text_and_json() -> None:
    _, model = _model()
    comparison = compare_with_model(model, _states(model, {"a": 2, "b": 2, "c": 1}))
    report = ChaosReport("t", 3, 1, 0, [], comparison, 4, 1.5)
    assert "1 lost, 0 duplicated, 0 wrong" in report.to_text()
    assert "FAILED" in report.to_text()
    data = json.loads(report.to_json())
    assert (data["lost"], data["ok"], data["differences"][0]["key"]) == (1, False, "'a'")


# ------------------------------------------------------------------------------ broker faults


def test_busiest_leader_leads_the_most_partitions() -> None:
    leaders = {("w", 0): 2, ("w", 1): 3, ("w", 2): 2, ("w", 3): 1}
    assert busiest_leader(leaders) == 2
    assert busiest_leader({**leaders, ("w", 4): 3, ("w", 5): 3}) == 3
    assert busiest_leader({("w", 0): -1, ("w", 1): 3}) == 3  # no leader right now


def test_busiest_leader_breaks_ties_with_the_rng() -> None:
    tied = {("w", 0): 1, ("w", 1): 2, ("w", 2): 3, ("w", 3): 2, ("w", 4): 3}
    assert busiest_leader(tied) == 2  # the lowest id without an rng
    picks = {busiest_leader(tied, random.Random(seed)) for seed in range(40)}
    assert picks == {2, 3}
    assert busiest_leader(tied, random.Random(5)) == busiest_leader(tied, random.Random(5))


def test_busiest_leader_needs_a_leader() -> None:
    with pytest.raises(HarnessError, match="no partition has a leader"):
        busiest_leader({("w", 0): -1})
    with pytest.raises(HarnessError):
        busiest_leader({})


def test_broker_faults_are_refused_below_three_nodes() -> None:
    one = broker_fault_problem(1)
    assert one is not None and "the only broker" in one and "\n" not in one
    assert "--brokers 3" in one
    two = broker_fault_problem(2)
    assert two is not None and "one of 2 brokers" in two
    assert broker_fault_problem(3) is None
    assert broker_fault_problem(5, replicas=3) is None
    unreplicated = broker_fault_problem(3, replicas=1)
    assert unreplicated is not None and "1 replica" in unreplicated


def test_topic_layout_in_sync_and_leaders() -> None:
    parts = [("w", 0), ("w", 1), ("w", 2)]
    replicas = {p: (1, 2, 3) for p in parts}
    layout = TopicLayout((1, 2, 3), {("w", 0): 1, ("w", 1): 2, ("w", 2): 1}, replicas,
                         {p: (1, 2, 3) for p in parts})
    assert layout.fully_in_sync() and layout.min_replicas() == 3
    assert (layout.led_by(1), layout.led_by(2), layout.led_by(3)) == (2, 1, 0)
    lagging = TopicLayout((1, 2, 3), layout.leaders, replicas,
                          {**layout.in_sync, ("w", 1): (2, 3)})
    assert not lagging.fully_in_sync()
    leaderless = TopicLayout((2, 3), {**layout.leaders, ("w", 2): -1}, replicas,
                             layout.in_sync)
    assert not leaderless.fully_in_sync()


@pytest.mark.parametrize("seed", range(30))
def test_zombies_are_never_timed_for_a_recovery(seed: int) -> None:
    kinds = ("processor",) * 4 + ("negotiator",) * 2 + ("zk-session",) * 2 + ("zombie", "stall")
    plan = ChaosSchedule(kinds=kinds, count=10, seed=seed).plan()
    assert all(p.phase in ("Flowing", "SpoutsPaused") for p in plan if p.kind == "zombie")
    assert {p.phase for p in plan} == set(MASTER_PHASES)
    alone = ChaosSchedule(kinds=("zombie",), count=4, seed=seed).plan()
    assert all(p.phase in ("Flowing", "SpoutsPaused") for p in alone)


def test_a_round_pending_is_a_phase_of_its_own() -> None:
    from hailstorm.cli.chaos import DEFAULT_PHASES
    from hailstorm.protocol.states import Flowing, Initialize, SpoutsPaused

    assert phase_name(Flowing(3)) == "Flowing"
    assert phase_name(Flowing(3, {("w", 0): 5})) == "RoundPending"
    assert phase_name(SpoutsPaused(3)) == "SpoutsPaused"
    assert phase_name(Initialize(3)) == "Initialize" and phase_name(None) == "none"
    assert DEFAULT_PHASES.split(",") == list(MASTER_PHASES)


def test_a_pair_is_asked_for_by_name() -> None:
    assert "pair" in FAULT_KINDS and "pair" not in DEFAULT_FAULT_KINDS
    plan = ChaosSchedule(kinds=("processor", "pair"), count=6, seed=4).plan()
    assert {p.kind for p in plan} == {"processor", "pair"}
    assert {p.phase for p in plan} == set(MASTER_PHASES)


def test_broker_is_a_kind_but_not_a_default_one() -> None:
    assert "broker" in FAULT_KINDS and "broker" not in DEFAULT_FAULT_KINDS
    assert ChaosSchedule().kinds == DEFAULT_FAULT_KINDS
    plan = ChaosSchedule(kinds=("processor", "broker"), count=4, seed=2).plan()
    assert {p.kind for p in plan} == {"processor", "broker"}


def _broker_fault(acked: dict[str, int] | None) -> Fault:
    return Fault("broker", "kafka-2", 123, 1000.0, 4, {"w:0": 10, "w:1": 20}, "x", acked)


def test_broker_recovery_needs_a_commit_past_what_was_acknowledged_at_the_kill() -> None:
    fault = _broker_fault({"w:0": 50, "w:1": 15})
    assert TopologyRun._needed(fault, None) == {"w:0": 51, "w:1": 20}
    assert TopologyRun._needed(_broker_fault(None), None) == {"w:0": 10, "w:1": 20}
    # The producer stopped: what it wrote last is all there is to read.
    produced = Produced("w")
    produced.add(0, 50, b"a")
    produced.add(1, 15, b"b")
    stopped = BackgroundProducer("127.0.0.1:1", produced, [], [0, 1], 1.0)
    assert not stopped.running
    assert TopologyRun._needed(fault, stopped) == {"w:0": 50, "w:1": 20}
    produced.add(0, 60, b"c")
    assert TopologyRun._needed(fault, stopped) == {"w:0": 51, "w:1": 20}


def test_report_shows_broker_restarts() -> None:
    _, model = _model()
    comparison = compare_with_model(model, _states(model, {"a": 3, "b": 2, "c": 1}))
    fault = replace(_broker_fault({"w:0": 50}), uncommitted=7, producing=True,
                    evidence={VICTIM_GONE: True, NODE_BACK: True})
    back = Recovery(fault, 0.0, 12.5, restored_after=14.25)
    report = ChaosReport("t", 6, 2, 0, [back], comparison, 9, 30.0)
    assert report.ok
    assert "broker     kafka-2 (pid 123, ? 4, 7 uncommitted): Flowing after 0.0 s, " \
           "committed past it after 12.5 s; x, back in the cluster after 14.2 s" \
           in report.to_text()
    assert "effective: 1 of 1 faults" in report.to_text()
    data = json.loads(report.to_json())
    assert data["recoveries"][0]["restored_after"] == 14.25
    assert data["faults_by_kind"] == {"broker": 1}
    never = ChaosReport("t", 6, 2, 0, [Recovery(fault, 0.0, 12.5)], comparison, 9, 30.0)
    assert not never.ok
    idle = replace(back, fault=replace(fault, uncommitted=None))
    assert "effective: 0 of 1 faults" in ChaosReport("t", 6, 2, 0, [idle], comparison, 9,
                                                     30.0).to_text()


def test_chaos_command_refuses_broker_faults_on_one_node() -> None:
    result = CliRunner().invoke(main, ["chaos", str(ROOT / "topologies" / "wordcount.py"),
                                       "--kinds", "processor,broker", "--brokers", "1"])
    assert result.exit_code == 1
    assert "at least 3 nodes, this one has 1" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = CliRunner().invoke(main, ["chaos", str(ROOT / "topologies" / "wordcount.py"),
                                       "--kinds", "broker", "--use-env", "--brokers", "3"])
    assert result.exit_code == 1 and "--brokers sizes the embedded stack" in result.output


def test_chaos_help_names_broker_faults() -> None:
    result = subprocess.run([sys.executable, "-m", "hailstorm", "chaos", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=True)
    assert "--brokers" in result.stdout and "broker" in result.stdout


# --------------------------------------------------------------------------- append tables


def test_append_rows_key_alike_whatever_order_they_were_written_in() -> None:
    rows = [(("t", 0, 5), {"w": "b"}), (("t", 0, 5), {"w": "a"}), (("t", 1, 2), {"w": "a"})]
    assert keyed_append_rows(rows) == keyed_append_rows(list(reversed(rows)))
    assert keyed_append_rows(rows) == {("t", 0, 5, 0): {"w": "a"}, ("t", 0, 5, 1): {"w": "b"},
                                       ("t", 1, 2, 0): {"w": "a"}}
    # The same rows under another origin are not the same table.
    assert keyed_append_rows([(("t", 0, 6), {"w": "a"})]) != keyed_append_rows(rows[1:2])


def test_append_tables_are_compared_as_multisets_per_origin() -> None:
    topology = Topology("appends")
    lines = topology.spout("lines", topic="w", decoder="text",
                           explode=lambda line: [(w,) for w in line.split()])
    topology.sink("log", inputs=[lines],
                  target=Table("log", columns={"word": "text"}, mode="append"))
    model = run_model(topology, messages("w", ["b a a", "c"]))
    written = [((k[0], k[1], k[2]), row) for k, row in model.table("log").items()]
    same = keyed_append_rows(reversed(written))  # as a sink would have written them
    assert compare_with_model(model, {}, {"log": same}).ok
    missing = keyed_append_rows(written[1:])
    lost = compare_with_model(model, {}, {"log": missing})
    assert not lost.ok and lost.lost == 1
    doubled = keyed_append_rows([*written, written[0]])
    assert compare_with_model(model, {}, {"log": doubled}).duplicated == 1


def test_a_fault_is_effective_only_on_uncommitted_data_while_producing() -> None:
    base = Fault("processor", "bolt:counts:0", 1, 0.0, 3, {})
    assert not base.effective  # nothing known to be uncommitted
    assert replace(base, uncommitted=120, producing=True).effective
    assert replace(base, uncommitted=120).effective  # no producer: the data was there
    assert not replace(base, uncommitted=120, producing=False).effective
    assert not replace(base, uncommitted=0, producing=True).effective


def test_a_run_without_postgresql_or_told_sqlite_gets_a_sqlite_file(tmp_path: Path) -> None:
    bare = StackAddresses("zk:2181", "kafka:9092", tmp_path)
    file = f"sqlite:///{(tmp_path / 'sinks.sqlite').resolve()}"
    assert private_database(bare, None, tmp_path, "wc_1") == file
    on_pg = replace(bare, database="postgresql://u:p@127.0.0.1:5432/hailstorm")
    assert private_database(on_pg, SQLITE, tmp_path, "wc_1") == file
    assert private_database(on_pg, "sqlite:///x.db", tmp_path, "wc_1") == "sqlite:///x.db"


@pytest.mark.parametrize("name", ["", "1abc", "Upper", "a-b", "a;drop", "x" * 64])
def test_a_database_name_that_is_no_plain_identifier_is_refused(name: str) -> None:
    with pytest.raises(SinkError, match="database name"):
        create_postgres_database("postgresql://u:p@127.0.0.1:1/db", name)


_ZOMBIE_LOG = """\
2026-11-23 17:40:41,290 INFO [sink:word_counts:0 pid=8522] round 6: table committed
2026-11-23 17:40:58,192 ERROR [sink:word_counts:0 pid=8522] failed:
Traceback (most recent call last):
  File "/work/main/hailstorm/processors/runtime.py", line 541, in _receive
    raise DataPlaneError(f"{sender} closed its connection")
hailstorm.processors.runtime.DataPlaneError: bolt:counts:1 closed its connection

2026-11-23 17:40:58,200 ERROR [sink:word_counts:0 pid=8600] failed:
Traceback (most recent call last):
hailstorm.sinks.errors.FencedError: word_counts: fenced: epoch 9 owns this sink, this \
writer has epoch 7 (a zombie of an older run); it must stop. Nothing was written.
"""


def test_zombie_outcome_tells_fenced_from_ended_before_writing() -> None:
    assert zombie_outcome(_ZOMBIE_LOG, 8600) == ZOMBIE_FENCED
    ended = zombie_outcome(_ZOMBIE_LOG, 8522)
    assert ended.startswith(ZOMBIE_ENDED)
    assert "DataPlaneError: bolt:counts:1 closed its connection" in ended
    assert zombie_outcome(_ZOMBIE_LOG, 1) == f"{ZOMBIE_ENDED} (no log line)"


def test_zombie_faults_need_a_run_that_keeps_stopped_workers() -> None:
    assert "zombie" in DEFAULT_FAULT_KINDS
    run = object.__new__(TopologyRun)
    run.zombies = False
    with pytest.raises(HarnessError, match="zombies=True"):
        run.zombie_sink()


@pytest.mark.parametrize("topology_name", sorted(BY_HAND))
def test_tables_by_hand_equal_the_model_on_realistic_data(topology_name: str) -> None:
    """The hand-written expectations agree with run_model on each topology's own workload
    (with a few messages its decoder rejects), so a chaos run may hold the tables to both."""
    topology = load_topology(str(ROOT / "topologies" / f"{topology_name}.py"))
    generate = next(iter(WORKLOADS[topology_name].values()))
    values = [*generate(3_000, 4), b"\xff not utf-8", b'{"user": 7}', b"[]",
              b'{"user": "u1", "amount": -5, "country": "DE"}', b'{"user": "u2", "amount": 3}']
    msgs = [Message(topology.spouts[0].topic, i % 3, i // 3, v) for i, v in enumerate(values)]
    model = run_model(topology, msgs)
    expected = BY_HAND[topology_name](msgs)
    (sink,) = expected
    assert expected[sink] == model.table(sink)
    assert compare_tables(expected, {sink: model.table(sink)}).ok


def test_compare_tables_counts_lost_duplicated_and_wrong_rows() -> None:
    want = {"t": {("a",): {"n": 1}, ("b",): {"n": 2}, ("c",): {"n": 3}}}
    got = {"t": {("a",): {"n": 1}, ("b",): {"n": 5}, ("d",): {"n": 4}}}
    c = compare_tables(want, got)
    assert (c.lost, c.duplicated, c.wrong, c.keys_compared) == (1, 1, 1, 4)
    assert compare_tables(want, {}).lost == 3


def test_a_workload_the_faults_outlast_is_topped_up_from_where_it_ended() -> None:
    values = [b"a", b"b", b"c"]
    assert cycled(values, 0, 2) == [b"a", b"b"]
    assert cycled(values, 2, 5) == [b"c", b"a", b"b", b"c", b"a"]
    assert cycled([], 0, 3) == []


# ------------------------------------------------------------------ several source topics


def test_values_go_round_robin_per_topic_and_continue_where_they_left_off() -> None:
    sent: dict[str, int] = {}
    first = routed([("a", b"1"), ("b", b"2"), ("a", b"3")], None, [0, 1], sent)
    assert first == [("a", 0, b"1"), ("b", 0, b"2"), ("a", 1, b"3")]
    assert sent == {"a": 2, "b": 1}
    assert routed([b"4", ("b", b"5")], "a", [0, 1], sent) == [("a", 0, b"4"), ("b", 1, b"5")]
    with pytest.raises(HarnessError, match="several topics"):
        routed([b"plain"], None, [0, 1], {})


@given(st.lists(st.sampled_from(["views", "clicks", "profiles"]), max_size=200),
       st.integers(1, 5), st.integers(1, 60))
def test_every_topic_is_spread_evenly_however_the_topics_alternate(
        topics: list[str], partitions: int, chunk: int) -> None:
    sent: dict[str, int] = {}
    values = [(topic, b"x") for topic in topics]
    out = [r for start in range(0, len(values), chunk)  # as a BackgroundProducer's chunks
           for r in routed(values[start:start + chunk], None, list(range(partitions)), sent)]
    assert [t for t, _, _ in out] == topics
    for topic in set(topics):
        spread = Counter(p for t, p, _ in out if t == topic)
        counts = [spread.get(p, 0) for p in range(partitions)]
        assert max(counts) - min(counts) <= 1 and counts == sorted(counts, reverse=True)


def test_produced_topics_merge_their_clocks_and_messages() -> None:
    produced = ProducedTopics(["v", "c"])
    assert produced.topics == ("c", "v") and produced.default_topic is None
    produced.record("v", 1, 7, b"b")
    produced.record("v", 1, 3, b"a")
    produced.record("c", 0, 0, b"x")
    assert produced.count == 3
    assert produced.clock() == {("v", 1): 7, ("c", 0): 0}
    assert produced.model_messages() == [Message("c", 0, 0, b"x"), Message("v", 1, 3, b"a"),
                                         Message("v", 1, 7, b"b")]
    with pytest.raises(HarnessError, match="none of c, v"):
        produced.record("w", 0, 0, b"y")
    assert ProducedTopics(["only"]).default_topic == "only"
    single = Produced("v")
    single.record("v", 0, 4, b"z")
    assert single.clock() == {("v", 0): 4} and single.topics == ("v",)
    with pytest.raises(HarnessError):
        single.record("c", 0, 5, b"z")


def test_pageviews_workload_is_the_topologys_avro() -> None:
    from topologies.pageviews import PAGE_VIEW_SCHEMA as TOPOLOGY_SCHEMA

    assert PAGE_VIEW_SCHEMA == TOPOLOGY_SCHEMA
    topology = load_topology(str(ROOT / "topologies" / "pageviews.py"))
    assert side_output_topics(topology) == ["pageviews.dead-letter", "pageviews.late"]
    (generate,) = WORKLOADS["pageviews"].values()
    assert generate(50, 3) == generate(50, 3) != generate(50, 4)


@pytest.mark.parametrize("topology_name", ["pageviews", "enriched_views"])
def test_chaos_workloads_of_windows_and_joins_agree_with_both_models(topology_name: str) -> None:
    """Every value goes to a source topic of the topology and decodes; some are late; the
    fast model and the independent oracle agree on them, so a chaos run needs no count by
    hand for these topologies (``BY_HAND`` has none)."""
    topology = load_topology(str(ROOT / "topologies" / f"{topology_name}.py"))
    generate = next(iter(WORKLOADS[topology_name].values()))
    values = generate(4_000, 2)
    default = topology.source_topics[0] if len(topology.source_topics) == 1 else None
    offsets: Counter[tuple[str, int]] = Counter()
    msgs = []
    for topic, partition, value in routed(values, default, [0, 1, 2], {}):
        msgs.append(Message(topic, partition, offsets[(topic, partition)], value))
        offsets[(topic, partition)] += 1
    assert {m.topic for m in msgs} == set(topology.source_topics)
    msgs.sort(key=lambda m: (m.topic, m.partition, m.offset))
    model = run_model(topology, msgs)
    assert not model.dead_letters
    assert model.late
    assert model_disagreements(model, run_oracle(topology, msgs)) == []
    assert all(model.table(sink.name) for sink in topology.sinks)
    assert topology_name not in BY_HAND


def test_the_harness_reads_zookeeper_through_a_lost_connection() -> None:
    failures = [ConnectionLoss(), SessionExpiredError()]

    def read(path: str, *, watch: Any = None) -> tuple[bytes, str]:
        if failures:
            raise failures.pop(0)
        return b"data", path

    assert _patient_read(read, "/hailstorm/master") == (b"data", "/hailstorm/master")
    assert failures == []  # both losses happened, and were waited out


class _ReadRun(TopologyRun):
    """A run whose ZooKeeper reads are canned (no stack): what :meth:`why_not_recovered`
    reads."""

    def __init__(self, faults: list[Fault], recoveries: list[Any], master: Any,
                 committed: Any) -> None:
        self.faults, self._recoveries = faults, recoveries
        self._master, self._committed = master, committed
        self.planned, self.env = [], {}
        self.processor_session_timeout, self.timeout = 6.0, 30.0

    def recoveries(self) -> list[Any]:
        return self._recoveries

    def master(self) -> Any:
        return self._master

    def committed(self) -> Any:
        return self._committed


def test_a_recovery_without_a_commit_past_its_fault_says_what_it_saw() -> None:
    from hailstorm.protocol.layout import CommittedRecord, MasterRecord, RecoveryRecord
    from hailstorm.protocol.states import Flowing

    kill = Fault("processor", "sink:totals:0", 77, 1000.0, 12, {"w:0": 40, "w:1": 30},
                 phase="Flowing", evidence={VICTIM_GONE: True})
    other = RecoveryRecord(13, 1000.4, "Flowing", "sink:line_sizes:0 lost (living node gone)")
    ours = RecoveryRecord(14, 1003.0, "Flowing", "sink:totals:0 lost (living node gone)")
    committed = CommittedRecord(15, {("w", 0): 40, ("w", 1): 20}, {}, committed_at=1010.0)
    run = _ReadRun([kill], [other, ours],
                   MasterRecord(Flowing(16), 1011.0, leader="negotiator-0"), committed)
    text = run.why_not_recovered(Recovery(kill, 4.0, None, record=ours))
    assert "no commit past the processor fault on sink:totals:0 (pid 77" in text
    assert "recovery epoch 13 at 1000.4 (+0.4 s) from Flowing: sink:line_sizes:0 lost" \
        in text and "[unexplained]" in text
    assert "recovery epoch 14 at 1003.0 (+3.0 s)" in text
    assert "[matched to the processor fault on sink:totals:0 at 1000.0]" in text
    assert "committed at 1010.0 (+10.0 s after the fault)" in text
    assert "(committed, needed): {'w:1': (20, 30)}" in text
    run._committed = None
    assert "nothing committed; needed {'w:0': 40, 'w:1': 30}" \
        in run.why_not_recovered(Recovery(kill, None, None))
