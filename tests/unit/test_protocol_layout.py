"""The ZooKeeper layout (hailstorm.protocol.layout): ids, paths and JSON records."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.protocol.layout import (
    ATTEMPT_INFO,
    CommittedRecord,
    ExpectedRecord,
    LayoutError,
    MasterRecord,
    ProcessorId,
    ProcessorReport,
    ProcessorState,
    Role,
    SnapshotReport,
    StopRequest,
    TopologyPaths,
    decode,
    expected_processor_ids,
    is_garbage,
    parse_processor_id,
    processor_label,
)
from hailstorm.protocol.states import Flowing, Initialize, SpoutsPaused, SpoutsRewind, Stopped

P0, P1 = ("words", 0), ("words", 1)


def test_processor_ids_round_trip() -> None:
    spout = ProcessorId.spout("lines", ("words", 3))
    assert str(spout) == "spout:lines:words:3"
    assert spout.partition == ("words", 3)
    assert parse_processor_id("spout:lines:words:3") == spout
    assert str(ProcessorId.bolt("counts", 1)) == "bolt:counts:1"
    assert parse_processor_id("sink:word_counts:0") == ProcessorId(Role.SINK, "word_counts", 0)
    assert parse_processor_id("bolt:counts:1").partition is None


@pytest.mark.parametrize(
    "text",
    ["", "bolt", "bolt:counts", "bolt:counts:x", "bolt:counts:-1", "spout:lines:3",
     "spout:lines:a/b:0", "worker:x:0", "bolt:a:b:1", "bolt::1"],
)
def test_bad_processor_ids(text: str) -> None:
    with pytest.raises(LayoutError):
        parse_processor_id(text)


def test_expected_processor_ids() -> None:
    ids = expected_processor_ids({"lines": [P0, P1]}, {"counts": 2}, {"out": 1})
    assert ids == ["bolt:counts:0", "bolt:counts:1", "sink:out:0", "spout:lines:words:0",
                   "spout:lines:words:1"]
    record = ExpectedRecord(tuple(ids))
    assert record.partitions == {P0, P1}
    assert ExpectedRecord.from_json(record.to_json()) == record
    graph = {"nodes": [{"name": "lines", "kind": "spout"}], "edges": []}
    with_graph = ExpectedRecord.from_json(ExpectedRecord(tuple(ids), graph).to_json())
    assert with_graph.graph == graph and with_graph.processors == record.processors
    with pytest.raises(LayoutError, match="'graph' must be an object"):
        ExpectedRecord.from_json({"processors": ids, "graph": [1]})


def test_a_stage_attempt_is_named_in_expected_and_in_each_report() -> None:
    ids = ("bolt:counts:0",)
    assert ExpectedRecord.from_json(ExpectedRecord(ids).to_json()).attempt is None
    assert ExpectedRecord.from_json(ExpectedRecord(ids, attempt="9f").to_json()).attempt == "9f"
    with pytest.raises(LayoutError, match="'attempt' must be a string"):
        ExpectedRecord.from_json({"processors": list(ids), "attempt": 3})
    report = ProcessorReport("bolt:counts:0", ProcessorState.READY, 4,
                             info={ATTEMPT_INFO: "9f", "pid": 1})
    assert ProcessorReport.from_json(report.to_json()).attempt == "9f"
    assert report.of_attempt("9f") and report.of_attempt(None)
    assert not report.of_attempt("a0")
    untold = ProcessorReport("bolt:counts:0", ProcessorState.READY, 4, info={ATTEMPT_INFO: 7})
    assert untold.attempt is None and not untold.of_attempt("9f") and untold.of_attempt(None)


def test_paths() -> None:
    paths = TopologyPaths("wordcount")
    assert paths.master == "/hailstorm/wordcount/master"
    assert paths.living_node("bolt:counts:1") == "/hailstorm/wordcount/living/bolt:counts:1"
    assert paths.snapshot_node("bolt:counts:1") == "/hailstorm/wordcount/snapshots/counts/1"
    assert paths.election == "/hailstorm/wordcount/election"
    assert paths.expected == "/hailstorm/wordcount/expected"
    assert paths.committed == "/hailstorm/wordcount/committed"
    with pytest.raises(LayoutError):
        paths.snapshot_node("spout:lines:words:0")
    with pytest.raises(LayoutError):
        TopologyPaths("a/b")


@pytest.mark.parametrize(
    "state",
    [Initialize(1), SpoutsRewind(2, {P0: -1, P1: 7}), Flowing(2), Flowing(3, {P0: 4}),
     SpoutsPaused(3), SpoutsPaused(3, barrier=False),
     Stopped(4, {P0: 4}, "hailstorm stop (ann@box)"), Stopped(1)],
)
def test_master_record_round_trip(
    state: Initialize | SpoutsRewind | Flowing | SpoutsPaused | Stopped,
) -> None:
    record = MasterRecord(state, 12.5, "host:1", "why")
    assert MasterRecord.from_json(record.to_json()) == record
    assert decode(record.to_json())["state"] == type(state).__name__


def test_a_pause_written_before_barrier_rounds_stops_the_spouts() -> None:
    raw = decode(MasterRecord(SpoutsPaused(3), 1.0).to_json())
    assert raw["barrier"] is True
    del raw["barrier"]
    assert MasterRecord.from_json(raw).state == SpoutsPaused(3, barrier=False)


def test_a_stopped_master_record_says_who_stopped_it_and_a_stop_request_round_trips(
) -> None:
    record = MasterRecord(Stopped(4, {P0: 4}, "me"), 1.0)
    assert decode(record.to_json())["by"] == "me"
    assert "by" not in decode(MasterRecord(Flowing(4), 1.0).to_json())
    request = StopRequest("hailstorm stop (ann@box)", 12.5)
    assert StopRequest.from_json(request.to_json()) == request
    with pytest.raises(LayoutError):
        StopRequest.from_json(b'{"at": 1}')
    assert TopologyPaths("wc").stop == "/hailstorm/wc/stop"


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b"{}", b'{"state": "Dancing", "epoch": 1, "entered_at": 0}',
     b'{"state": "SpoutsRewind", "epoch": 1, "entered_at": 0}',
     b'{"state": "Flowing", "epoch": "x", "entered_at": 0}', b"\xff"],
)
def test_bad_master_records(raw: bytes) -> None:
    with pytest.raises(LayoutError):
        MasterRecord.from_json(raw)


clocks = st.dictionaries(st.tuples(st.sampled_from(["a", "b.c"]), st.integers(0, 5)),
                         st.integers(-1, 10**12))


@settings(max_examples=60, deadline=None)
@given(
    state=st.sampled_from(list(ProcessorState)), epoch=st.integers(0, 10**6),
    position=st.none() | clocks, loaded=st.none() | clocks,
    error=st.none() | st.text(max_size=20), corrupt=st.none() | st.text(max_size=20),
    lost_peer=st.none() | st.sampled_from(["spout:s:t:0", "sink:out:0"]),
    swept_after=st.none() | st.integers(0, 10**6),
)
def test_processor_report_round_trip(state: ProcessorState, epoch: int, position: dict | None,
                                     loaded: dict | None, error: str | None,
                                     corrupt: str | None, lost_peer: str | None,
                                     swept_after: int | None) -> None:
    r = ProcessorReport("bolt:counts:1", state, epoch, position, loaded, error, {"pid": 7},
                        corrupt, lost_peer=lost_peer, swept_after=swept_after)
    assert ProcessorReport.from_json(r.to_json()) == r
    assert decode(r.to_json())["role"] == "bolt"


def test_processor_report_role_must_match_id() -> None:
    raw = b'{"processor": "bolt:c:0", "role": "spout", "state": "ready", "epoch": 1}'
    with pytest.raises(LayoutError):
        ProcessorReport.from_json(raw)
    with pytest.raises(LayoutError):
        ProcessorReport.from_json(b'{"processor": "bolt:c:0", "state": "asleep", "epoch": 1}')


def test_snapshot_report_round_trip() -> None:
    s = SnapshotReport("bolt:counts:0", 7, {P0: 3, P1: -1}, "file:///s/7/counts-0.avro")
    assert SnapshotReport.from_json(s.to_json()) == s
    sink = SnapshotReport("sink:x:0", 1, {P0: 3}, "table:x")  # sinks report committed rounds
    assert SnapshotReport.from_json(sink.to_json()) == sink
    with pytest.raises(LayoutError):
        SnapshotReport.from_json(SnapshotReport("spout:s:t:0", 1, {}, "r").to_json())


def test_committed_record_keeps_one_previous() -> None:
    first = CommittedRecord(3, {P0: 1}, {"bolt:c:0": "r3"}, 1.0)
    second = first.succeeded_by(5, {P0: 4}, {"bolt:c:0": "r5"}, 2.0)
    third = second.succeeded_by(7, {P0: 9}, {"bolt:c:0": "r7"}, 3.0, 0.5, 0.125)
    fourth = third.succeeded_by(9, {P0: 12}, {"bolt:c:0": "r9"}, 4.0)
    assert (third.snapshot_s, third.pause_s) == (0.5, 0.125)
    assert fourth.previous == replace(third, previous=None), "timings stay with their round"
    assert CommittedRecord.from_json(fourth.to_json()) == fourth
    assert third.previous is not None and third.previous.epoch == 5
    assert third.previous.previous is None
    assert CommittedRecord.from_json(third.to_json()) == third
    assert third.live_refs() == {"r5", "r7"}
    assert third.snapshot_for("bolt:c:0") == "r7"
    assert third.snapshot_for("bolt:c:1") is None


def test_a_confirmed_committed_record_keeps_when_until_a_round_succeeds_it() -> None:
    first = CommittedRecord(3, {P0: 1}, {"bolt:c:0": "r3"}, 1.0)
    assert first.confirmed_at is None and first.standing_at == 1.0
    confirmed = first.confirmed(4.5)
    assert confirmed.standing_at == 4.5
    assert CommittedRecord.from_json(confirmed.to_json()) == confirmed
    assert b"confirmed_at" not in first.to_json()
    second = confirmed.succeeded_by(5, {P0: 4}, {"bolt:c:0": "r5"}, 6.0)
    assert second.confirmed_at is None and second.previous == replace(first, previous=None)


def test_is_garbage() -> None:
    rec = CommittedRecord(3, {P0: 1}, {"b": "r3"}).succeeded_by(5, {P0: 4}, {"b": "r5"}, 1)
    assert not is_garbage(None, 1, "r1")
    assert is_garbage(rec, 1, "r1")
    assert is_garbage(rec, 4, "abandoned-round-4")
    assert not is_garbage(rec, 3, "r3") and not is_garbage(rec, 5, "r5")
    assert not is_garbage(rec, 6, "in-progress"), "newer rounds may still be running"


def test_negotiator_nodes_and_records() -> None:
    from hailstorm.protocol.layout import NegotiatorRecord, TopologyPaths

    paths = TopologyPaths("wc")
    assert paths.negotiators == "/hailstorm/wc/negotiators"
    assert paths.negotiators in paths.directories()
    assert paths.negotiator_node("host-a:4242") == "/hailstorm/wc/negotiators/host-a:4242"
    assert paths.negotiator_node("a/b c") == "/hailstorm/wc/negotiators/a_b_c"
    assert paths.negotiator_node("..") == "/hailstorm/wc/negotiators/_"
    record = NegotiatorRecord("host-a:4242", "127.0.0.1", 9100, True)
    assert NegotiatorRecord.from_json(record.to_json()) == record
    assert NegotiatorRecord.from_json(b'{"host": "h"}') == NegotiatorRecord("", "h", None, False)
    with pytest.raises(LayoutError):
        NegotiatorRecord.from_json(b'{"id": "x"}')


@pytest.mark.parametrize("name", ["wordcount\n", "a/b", "..\n"])
def test_names_with_a_trailing_newline_or_a_slash_are_refused(name: str) -> None:
    """'$' would match before a final newline; ZooKeeper path segments end in '\\Z'."""
    with pytest.raises(LayoutError):
        TopologyPaths(name)


NAMES = st.sampled_from(["clicks", "views", "lines", "words"])


@given(st.lists(st.one_of(
    st.builds(ProcessorId.spout, NAMES, st.tuples(NAMES, st.integers(0, 3))),
    st.builds(ProcessorId.bolt, NAMES, st.integers(0, 3)),
    st.builds(ProcessorId.sink, NAMES, st.integers(0, 3)),
), unique=True))
def test_a_label_says_a_spout_named_after_its_topic_once_and_names_one_id(
    ids: list[ProcessorId],
) -> None:
    labels = {processor_label(str(pid)): pid for pid in ids}
    assert len(labels) == len(ids), "distinct ids, distinct labels"
    for label, pid in labels.items():
        repeated = pid.role is Role.SPOUT and pid.name == pid.topic
        assert label == (f"spout:{pid.name}:{pid.instance}" if repeated else str(pid))
    assert processor_label("spout:clicks:clicks:0") == "spout:clicks:0"
    assert processor_label("spout:lines:words:0") == "spout:lines:words:0"
