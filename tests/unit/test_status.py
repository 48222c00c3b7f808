"""``hailstorm status``: the document assembled from fake inputs, rates, rendering."""

from __future__ import annotations

import pytest
from rich.console import Console

from hailstorm.outages import Outage
from hailstorm.protocol.layout import (
    CommittedRecord,
    ExpectedRecord,
    Flowing,
    MasterRecord,
    NegotiatorRecord,
    ProcessorReport,
    ProcessorState,
    RecoveryRecord,
    SnapshotReport,
    Stopped,
)
from hailstorm.status import (
    Inputs,
    assemble,
    rates,
    render,
    resolve_name,
    waiting_for_zookeeper,
)
from hailstorm.topology import TopologyError

P0, P1 = ("words", 0), ("words", 1)
EXPECTED = ExpectedRecord(("spout:lines:words:0", "spout:lines:words:1", "bolt:counts:0",
                           "sink:out:0"))
REF = "file:///snaps/wc/counts/0/epoch-000000000007.avro"
OLD = "file:///snaps/wc/counts/0/epoch-000000000005.avro"


def inputs(**overrides: object) -> Inputs:
    base = Inputs(
        topology="wc",
        now=1000.0,
        master=MasterRecord(Flowing(8, None), 990.0, "neg-a", "round 7 committed"),
        committed=CommittedRecord(7, {P0: 41, P1: 9}, {"bolt:counts:0": REF}, 995.0,
                                  CommittedRecord(5, {P0: 20, P1: 3}, {"bolt:counts:0": OLD},
                                                  993.5),
                                  snapshot_s=0.25, pause_s=0.0625),
        expected=EXPECTED,
        reports={
            "spout:lines:words:0": ProcessorReport(
                "spout:lines:words:0", ProcessorState.FLOWING, 8, position={P0: 50},
                info={"host": "h1", "pid": 11, "metrics": 9001}),
            "spout:lines:words:1": ProcessorReport(
                "spout:lines:words:1", ProcessorState.FLOWING, 8, position={P1: 9},
                info={"host": "h1", "pid": 12, "metrics": 9002}),
            "bolt:counts:0": ProcessorReport(
                "bolt:counts:0", ProcessorState.READY, 6, loaded={},
                info={"host": "h2", "port": 7000, "pid": 13, "metrics": 9003}),
        },
        snapshots={"bolt:counts:0": SnapshotReport("bolt:counts:0", 7, {P0: 41, P1: 9}, REF)},
        negotiators=[NegotiatorRecord("neg-b", "h3", 9100, False),
                     NegotiatorRecord("neg-a", "h3", 9101, True)],
        log_ends={P0: 60, P1: 5},
        scrapes={
            "spout:lines:words:0": {"hailstorm_messages_in_total": 51.0,
                                    "hailstorm_messages_out_total": 200.0,
                                    "hailstorm_late_total": 3.0},
            "spout:lines:words:1": None,
            "bolt:counts:0": {"hailstorm_messages_in_total": 210.0,
                              "process_resident_memory_bytes": 75.0 * 2**20,
                              "hailstorm_state_keys": 33.0,
                              "hailstorm_snapshot_last_epoch": 7.0,
                              "hailstorm_snapshot_last_seconds": 0.0123},
            "negotiator:neg-a": {"hailstorm_negotiator_rounds_committed_total": 4.0,
                                 "hailstorm_negotiator_recoveries_total": 1.0,
                                 "hailstorm_negotiator_epoch": 8.0},
        },
        rates={"spout:lines:words:0": {"in": 12.34, "out": 50.0},
               "bolt:counts:0": {"cpu": 0.4567}},
        snapshot_sizes={REF: 4096},
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def test_master_committed_and_negotiators() -> None:
    doc = assemble(inputs())
    assert doc["state"] == "Flowing" and doc["epoch"] == 8 and doc["leader"] == "neg-a"
    assert doc["master"]["age_s"] == 10.0 and doc["master"]["clock"] is None
    assert doc["committed"] == {"epoch": 7, "clock": {"words:0": 41, "words:1": 9},
                                "committed_at": 995.0, "age_s": 5.0, "confirmed_at": None,
                                "confirmed_age_s": None, "snapshot_s": 0.25,
                                "pause_s": 0.0625, "snapshots": {"bolt:counts:0": REF},
                                "size_bytes": 4096, "catching_up": {},
                                "low_water_mark": {"words:0": 41, "words:1": 9}}
    assert doc["committed_previous"] == {
        "epoch": 5, "clock": {"words:0": 20, "words:1": 3}, "committed_at": 993.5,
        "age_s": 6.5, "confirmed_at": None, "confirmed_age_s": None, "snapshot_s": None,
        "pause_s": None, "snapshots": {"bolt:counts:0": OLD},
        "size_bytes": None, "catching_up": {}, "low_water_mark": {"words:0": 20, "words:1": 3}}
    assert [n["id"] for n in doc["negotiators"]] == ["neg-a", "neg-b"]
    assert doc["negotiators"][0] | {} == {
        "id": "neg-a", "host": "h3", "metrics": 9101, "leader": True,
        "rounds_committed": 4, "recoveries": 1, "epoch": 8}
    assert doc["negotiators"][1]["rounds_committed"] is None


def test_partitions_lag_and_a_log_end_below_what_was_read() -> None:
    doc = assemble(inputs())
    rows = {r["partition"]: r for r in doc["partitions"]}
    assert rows["words:0"] == {"partition": "words:0", "committed": 41, "position": 50,
                               "log_end": 60, "log_end_below_read": False, "lag": 9,
                               "committed_lag": 18}
    # The log ends at 5 but the spout already read offset 9: records were lost (a re-created
    # topic); the lag is unknown, not 0, and the problem is named.
    assert rows["words:1"]["log_end_below_read"] is True
    assert rows["words:1"]["lag"] is None
    assert any("words:1" in p and "records were lost" in p for p in doc["problems"])
    assert not any("words:0" in p for p in doc["problems"])
    no_kafka = {r["partition"]: r for r in assemble(inputs(log_ends=None))["partitions"]}
    assert no_kafka["words:0"]["lag"] is None and no_kafka["words:0"]["log_end"] is None
    assert "last stable offset" in doc["lag_note"]


def test_processors_with_metrics_and_missing_ones() -> None:
    doc = assemble(inputs())
    by_id = {p["id"]: p for p in doc["processors"]}
    assert [p["id"] for p in doc["processors"]] == [
        "spout:lines:words:0", "spout:lines:words:1", "bolt:counts:0", "sink:out:0"]
    spout = by_id["spout:lines:words:0"]
    assert spout["address"] == "h1" and spout["pid"] == 11 and spout["metrics_ok"]
    assert (spout["messages_in"], spout["messages_out"]) == (51, 200)
    assert (spout["in_per_s"], spout["out_per_s"]) == (12.3, 50.0)
    assert spout["late"] == 3
    assert by_id["spout:lines:words:1"]["metrics_ok"] is False
    bolt = by_id["bolt:counts:0"]
    assert bolt["address"] == "h2:7000" and bolt["state_keys"] == 33
    assert (bolt["cpu_percent"], bolt["memory_bytes"]) == (45.7, 75 * 2**20)
    assert (spout["cpu_percent"], spout["memory_bytes"]) == (None, None)
    assert bolt["rows_committed"] is None and bolt["late"] is None
    sink = by_id["sink:out:0"]
    assert sink["registered"] is False and sink["state"] is None and sink["address"] is None


def test_snapshots_with_size_and_duration_of_the_same_round_only() -> None:
    snap = assemble(inputs())["snapshots"][0]
    assert snap == {"processor": "bolt:counts:0", "epoch": 7,
                    "clock": {"words:0": 41, "words:1": 9}, "ref": REF, "committed": True,
                    "size_bytes": 4096, "duration_s": 0.0123}
    scrapes = dict(inputs().scrapes)
    scrapes["bolt:counts:0"] = {"hailstorm_snapshot_last_epoch": 6.0,
                                "hailstorm_snapshot_last_seconds": 1.0}
    assert assemble(inputs(scrapes=scrapes))["snapshots"][0]["duration_s"] is None


def test_nothing_running_yet() -> None:
    doc = assemble(Inputs("wc", 5.0))
    assert doc["state"] == "NegotiatorDisconnected" and doc["master"] is None
    assert doc["committed"] is None and doc["processors"] == [] and doc["partitions"] == []


def test_flowing_with_a_clock_is_labelled() -> None:
    master = MasterRecord(Flowing(9, {P0: 3, P1: 4}), 999.0, "neg-a")
    doc = assemble(inputs(master=master))
    assert doc["state"] == "Flowing(C)"
    assert doc["master"]["state"] == "Flowing"
    assert doc["master"]["clock"] == {"words:0": 3, "words:1": 4}


def test_rates_from_two_scrapes() -> None:
    a = {"hailstorm_messages_in_total": 100.0, "hailstorm_messages_out_total": 10.0,
         "process_cpu_seconds_total": 3.0}
    b = {"hailstorm_messages_in_total": 300.0, "hailstorm_messages_out_total": 30.0,
         "process_cpu_seconds_total": 4.5}
    assert rates(a, b, 2.0) == {"in": 100.0, "out": 10.0, "cpu": 0.75}
    restarted = {"hailstorm_messages_in_total": 50.0}
    assert rates(b, restarted, 1.0) == {"in": 50.0}
    # A process started again shows it by its start time, whatever its counters reached.
    old = {"hailstorm_messages_in_total": 100.0, "process_cpu_seconds_total": 3.0,
           "process_start_time_seconds": 1000.0}
    new = {"hailstorm_messages_in_total": 300.0, "process_cpu_seconds_total": 4.0,
           "process_start_time_seconds": 1010.0}
    assert rates(old, new, 2.0) == {"in": 150.0, "cpu": 2.0}
    assert rates(old, new | {"process_start_time_seconds": 1000.0}, 2.0) == {
        "in": 100.0, "cpu": 0.5}
    assert rates(None, b, 1.0) == {} and rates(a, b, 0.0) == {}


def test_render_draws_every_section() -> None:
    console = Console(width=200, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(render(assemble(inputs())))
    text = captured.get()
    for needle in ("wc", "Flowing", "epoch 8", "neg-a", "words:0", "5!", "bolt:counts:0",
                   "h2:7000", "missing", "4,096 B", "lag: offsets", "45.7 %", "75 MiB",
                       "records were lost"):
        assert needle in text, needle


def test_an_idle_topology_shows_when_its_committed_round_was_last_confirmed() -> None:
    base = inputs()
    assert base.committed is not None
    doc = assemble(inputs(committed=base.committed.confirmed(998.5)))
    assert doc["committed"]["confirmed_at"] == 998.5
    assert doc["committed"]["confirmed_age_s"] == 1.5
    console = Console(width=200, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(render(doc))
    assert "committed: round 7, 5.0 s ago; nothing read since (checked 1.5 s ago)" \
        in captured.get()


def test_resolve_name() -> None:
    assert resolve_name("anything", "given", lambda n: False) == "given"
    assert resolve_name("wc_1234", None, lambda n: n == "wc_1234") == "wc_1234"
    assert resolve_name("topologies/wordcount.py", None, lambda n: False) == "wordcount"
    with pytest.raises(TopologyError, match="no topology 'nosuch'"):
        resolve_name("nosuch", None, lambda n: False)
    with pytest.raises(TopologyError):
        resolve_name(None, None, lambda n: False)


def test_recoveries_and_graph_are_passed_on() -> None:
    graph = {"nodes": [{"name": "lines", "kind": "spout", "parallelism": None,
                        "caption": ["topic words"]}], "edges": [], "dead_letter_topics": []}
    doc = assemble(inputs(
        expected=ExpectedRecord(EXPECTED.processors, graph),
        recoveries=[RecoveryRecord(3, 900.0, "NegotiatorDisconnected", "leader elected"),
                    RecoveryRecord(6, 980.0, "Flowing", "bolt:counts:0 lost", "neg-a")]))
    assert doc["graph"] == graph
    assert doc["recoveries"] == [
        {"epoch": 3, "at": 900.0, "age_s": 100.0, "previous": "NegotiatorDisconnected",
         "reason": "leader elected", "start": True},
        {"epoch": 6, "at": 980.0, "age_s": 20.0, "previous": "Flowing",
         "reason": "bolt:counts:0 lost", "start": False}]
    assert assemble(inputs(expected=None))["graph"] is None
    assert doc["recovery_count"] == 1


def test_a_stopped_topology_says_who_stopped_it_and_its_processors_are_stopped() -> None:
    master = MasterRecord(Stopped(9, {P0: 41, P1: 9}, "hailstorm stop (ann@box)"), 999.0,
                          "neg-a", "stop requested by hailstorm stop (ann@box): ...")
    doc = assemble(inputs(master=master, reports={}, recoveries=[
        RecoveryRecord(3, 900.0, "NegotiatorDisconnected", "leader elected"),
        RecoveryRecord(10, 999.5, "Stopped({'words:0': 41})", "a new run started")]))
    assert doc["state"] == "Stopped" and doc["stopped"] is True
    assert doc["master"]["stopped_by"] == "hailstorm stop (ann@box)"
    assert doc["master"]["clock"] == {"words:0": 41, "words:1": 9}
    assert doc["recovery_count"] == 0, "a start after a stop is no recovery"
    assert assemble(inputs())["stopped"] is False
    console = Console(width=200, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(render(doc))
    text = captured.get()
    assert "Stopped" in text and "stopped" in text.replace("Stopped", "")
    assert "missing" not in text


def test_a_rounds_size_counts_the_store_files_only() -> None:
    committed = CommittedRecord(7, {P0: 41}, {"bolt:counts:0": REF, "sink:out:0": "table:out"},
                                995.0)
    doc = assemble(inputs(committed=committed, snapshot_sizes={REF: 4096}))
    assert doc["committed"]["size_bytes"] == 4096
    assert assemble(inputs(committed=committed, snapshot_sizes={}))["committed"][
        "size_bytes"] is None


def test_a_sink_waiting_for_its_database_is_a_problem_and_shown_as_such() -> None:
    """Issue 40: "waiting for <the database> since T" in the document, its problems (which
    the console lists) and the rendering."""
    down = ("the database at postgresql://hailstorm:***@127.0.0.1:5432/hailstorm, "
            "unavailable since 2026-11-27T05:40:00Z")
    reports = dict(inputs().reports)
    reports["sink:out:0"] = ProcessorReport("sink:out:0", ProcessorState.READY, 8,
                                            waiting=down, info={"host": "h2", "pid": 14})
    doc = assemble(inputs(reports=reports))
    sink = next(p for p in doc["processors"] if p["id"] == "sink:out:0")
    assert sink["waiting"] == down and sink["error"] is None
    assert f"sink:out:0 is waiting for {down}; the topology waits with it" in doc["problems"]
    assert all(p["waiting"] is None for p in doc["processors"] if p["id"] != "sink:out:0")
    console = Console(width=400, record=True)
    console.print(render(doc))
    assert f"waiting for {down}" in console.export_text()


def test_nodes_catching_up_and_the_low_water_mark() -> None:
    committed = CommittedRecord(7, {P0: 41, P1: 9}, {"bolt:counts:0": REF}, 995.0,
                                clocks={"cased": {P0: 12, P1: 9}})
    doc = assemble(inputs(committed=committed))
    assert doc["committed"]["catching_up"] == {"cased": {"words:0": 12, "words:1": 9}}
    assert doc["committed"]["low_water_mark"] == {"words:0": 12, "words:1": 9}
    console = Console(width=200, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(render(doc))
    assert "cased catching up on its own clock, at {'words:0': 12, 'words:1': 9}" \
        in captured.get()


ZK_DOWN = Outage("ZooKeeper at 127.0.0.1:2181", 1_795_000_000.0, 3, "ConnectionLoss()")


def test_while_zookeeper_is_down_the_last_document_is_shown_waiting_for_it() -> None:
    """Issue 40: a ZooKeeper outage under ``status --watch`` and the console is "waiting
    for ZooKeeper at ... since T" over what was last read, first of the problems and drawn
    right under the title; the figures stay those read (and their time)."""
    last = assemble(inputs())
    assert last["waiting"] is None
    doc = waiting_for_zookeeper(last, "wc", ZK_DOWN, now=1_795_000_030.0)
    wait = ("waiting for ZooKeeper at 127.0.0.1:2181, unavailable since 2026-11-18T"
            "11:06:40Z: what is shown was read at 1970-01-01T00:16:40Z")
    assert doc["problems"] == [wait, *last["problems"]]
    assert doc["waiting"] == "ZooKeeper at 127.0.0.1:2181, unavailable since 2026-11-18T11:06:40Z"
    assert {k: v for k, v in doc.items() if k not in ("problems", "waiting")} == \
        {k: v for k, v in last.items() if k not in ("problems", "waiting")}
    assert last["waiting"] is None and wait not in last["problems"], "the last one is kept"
    console = Console(width=400, record=True)
    console.print(render(doc))
    lines = console.export_text().splitlines()
    assert lines[1] == wait


def test_while_zookeeper_is_down_before_anything_was_read_the_document_is_empty() -> None:
    doc = waiting_for_zookeeper(None, "wc", ZK_DOWN, now=1_795_000_030.0)
    assert doc["problems"] == ["waiting for ZooKeeper at 127.0.0.1:2181, unavailable since "
                               "2026-11-18T11:06:40Z: nothing read yet"]
    assert (doc["master"], doc["processors"], doc["time"]) == (None, [], 1_795_000_030.0)
    Console(width=200, record=True).print(render(doc))
