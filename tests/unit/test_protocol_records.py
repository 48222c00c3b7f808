"""The one reader and writer of a topology's records (hailstorm.protocol.records), on an
in-memory stand-in for a kazoo client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.exceptions import NodeExistsError, NoNodeError

from hailstorm.protocol.layout import (
    CommittedRecord,
    ExpectedRecord,
    LayoutError,
    MasterRecord,
    NegotiatorRecord,
    ProcessorReport,
    ProcessorState,
    RecoveryRecord,
    SnapshotReport,
    StopRequest,
    TopologyPaths,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.protocol.states import Flowing

PATHS = TopologyPaths("wc")


@dataclass
class Stat:
    version: int


@dataclass
class Answer:
    """An asynchronous read's result."""

    value: Any = None
    error: Exception | None = None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class FakeZk:
    """Nodes in a dict; records every watch armed (path, kind)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.watched: list[tuple[str, str]] = []

    def put(self, path: str, data: bytes) -> None:
        self.nodes[path] = (data, self.nodes.get(path, (b"", -1))[1] + 1)

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Stat]:
        if watch is not None:
            self.watched.append((path, "get"))
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, Stat(version)

    def get_async(self, path: str, watch: Any = None) -> Answer:
        """As kazoo's: the answer (or the error) when asked for it."""
        try:
            return Answer(self.get(path, watch))
        except NoNodeError as exc:
            return Answer(error=exc)

    def exists(self, path: str, watch: Any = None) -> Stat | None:
        if watch is not None:
            self.watched.append((path, "exists"))
        return Stat(self.nodes[path][1]) if path in self.nodes else None

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        if watch is not None:
            self.watched.append((path, "children"))
        if path not in self.nodes:
            raise NoNodeError(path)
        prefix = path + "/"
        return [p[len(prefix):] for p in self.nodes
                if p.startswith(prefix) and "/" not in p[len(prefix):]]

    def set(self, path: str, data: bytes) -> None:
        if path not in self.nodes:
            raise NoNodeError(path)
        self.put(path, data)

    def delete(self, path: str) -> None:
        if path not in self.nodes:
            raise NoNodeError(path)
        del self.nodes[path]

    def create(self, path: str, data: bytes, makepath: bool = False) -> None:
        if path in self.nodes:
            raise NodeExistsError(path)
        parent = path.rsplit("/", 1)[0]
        while makepath and parent and parent not in self.nodes:
            self.nodes[parent] = (b"", 0)
            parent = parent.rsplit("/", 1)[0]
        self.put(path, data)


def test_absent_nodes_read_as_none_and_directories_as_empty() -> None:
    records = TopologyRecords(FakeZk(), "wc")  # type: ignore[arg-type]
    assert records.master() is None and records.committed() is None
    assert records.expected() is None
    assert records.read_master().version is None
    assert records.reports() == {} and records.snapshot_reports() == {}
    assert records.recoveries() == [] and records.negotiators() == []


def test_records_are_typed_with_their_versions() -> None:
    zk = FakeZk()
    master = MasterRecord(Flowing(3), 1.0, "n1", "why")
    zk.put(PATHS.master, master.to_json())
    zk.put(PATHS.master, master.to_json())
    zk.put(PATHS.expected, ExpectedRecord(("bolt:counts:0",)).to_json())
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    read = records.read_master()
    assert read.record == master and read.version == 1
    expected = records.expected()
    assert expected is not None and expected.processors == ("bolt:counts:0",)


def test_a_bad_single_record_raises_unless_someone_is_told() -> None:
    zk = FakeZk()
    zk.put(PATHS.master, b"not json")
    with pytest.raises(LayoutError):
        TopologyRecords(zk, PATHS).master()  # type: ignore[arg-type]
    told: list[str] = []
    records = TopologyRecords(zk, PATHS,  # type: ignore[arg-type]
                              on_unreadable=lambda subject, exc: told.append(subject))
    read = records.read_master()
    assert read.record is None and read.version == 0  # the node exists: compare-and-set
    assert told == ["master"]


def test_listings_hold_none_for_a_bad_child_and_never_fail() -> None:
    zk = FakeZk()
    good = ProcessorReport("bolt:counts:0", ProcessorState.READY, 4)
    zk.put(PATHS.living, b"")
    zk.put(PATHS.living_node("bolt:counts:0"), good.to_json())
    zk.put(PATHS.living_node("bolt:counts:1"), b"{}")
    zk.put(PATHS.snapshots, b"")
    zk.put(PATHS.snapshot_dir("counts"), b"")
    snap = SnapshotReport("bolt:counts:0", 4, {("w", 0): 7}, "file:///x")
    zk.put(PATHS.snapshot_node("bolt:counts:0"), snap.to_json())
    zk.put(PATHS.recoveries, b"")
    zk.put(f"{PATHS.recoveries}/r-0000000001", RecoveryRecord(1, 1.0, "x", "start").to_json())
    zk.put(f"{PATHS.recoveries}/r-0000000002", b"[]")
    zk.put(f"{PATHS.recoveries}/r-0000000003", RecoveryRecord(2, 2.0, "y", "lost").to_json())
    zk.put(PATHS.negotiators, b"")
    zk.put(PATHS.negotiator_node("n1"), NegotiatorRecord("n1", "h", 9, True).to_json())
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    assert records.reports() == {"bolt:counts:0": good, "bolt:counts:1": None}
    assert records.snapshot_reports() == {("counts", "0"): snap}
    assert [r.epoch for r in records.recoveries()] == [1, 2]
    assert [r.epoch for r in records.recoveries(last=1)] == [2]
    assert records.negotiators() == [NegotiatorRecord("n1", "h", 9, True)]
    told: list[str] = []
    TopologyRecords(zk, PATHS,  # type: ignore[arg-type]
                    on_unreadable=lambda subject, exc: told.append(subject)).recoveries()
    assert told == ["recoveries/r-0000000002"]


def test_reads_with_a_watch_arm_it_also_on_absent_nodes() -> None:
    zk = FakeZk()
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    assert records.master(watch=lambda _event: None) is None
    assert records.reports(watch=lambda _event: None) == {}
    assert zk.watched == [(PATHS.master, "get"), (PATHS.master, "exists"),
                          (PATHS.living, "children"), (PATHS.living, "exists")]


class Vanishing(FakeZk):
    """A living node deleted between the listing and the reads."""

    def __init__(self, gone: str) -> None:
        super().__init__()
        self.gone = gone

    def get_async(self, path: str, watch: Any = None) -> Answer:
        answer = super().get_async(path, watch)
        if path == self.gone:
            self.nodes.pop(path, None)
            return Answer(error=NoNodeError(path))
        return answer


def test_reports_are_read_all_at_once_and_a_vanished_one_is_absent_and_watched() -> None:
    gone = PATHS.living_node("bolt:counts:1")
    zk = Vanishing(gone)
    zk.put(PATHS.living, b"")
    reports = [ProcessorReport(f"bolt:counts:{i}", ProcessorState.READY, 4) for i in range(3)]
    for report in reports:
        zk.put(PATHS.living_node(report.processor), report.to_json())
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    assert records.reports(watch=lambda _event: None) == {
        "bolt:counts:0": reports[0], "bolt:counts:2": reports[2]}
    assert (gone, "exists") in zk.watched  # armed on the vanished node too
    assert {p for p, kind in zk.watched if kind == "get"} == {
        PATHS.living_node(r.processor) for r in reports}


def test_writes_create_or_replace() -> None:
    zk = FakeZk()
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    snap = SnapshotReport("sink:out:0", 2, {("w", 0): 1}, "table:out")
    records.write_snapshot_report(snap)
    records.write_snapshot_report(snap)
    assert zk.nodes[PATHS.snapshot_node("sink:out:0")] == (snap.to_json(), 1)
    records.write_expected(ExpectedRecord(("sink:out:0",)))
    assert records.expected() == ExpectedRecord(("sink:out:0",))
    with pytest.raises(NoNodeError):  # a living node is its owner's to create
        records.write_report(ProcessorReport("sink:out:0", ProcessorState.READY, 2))
    committed = CommittedRecord(2, {("w", 0): 1}, {"sink:out:0": "table:out"})
    zk.put(PATHS.committed, committed.to_json())
    assert records.committed() == committed


def test_every_operation_goes_through_call() -> None:
    zk = FakeZk()
    calls: list[str] = []

    def call(operation: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(operation.__name__)
        return operation(*args, **kwargs)

    records = TopologyRecords(zk, PATHS, call=call)  # type: ignore[arg-type]
    records.write_expected(ExpectedRecord(("bolt:counts:0",)))
    records.expected()
    assert calls == ["set", "create", "get"]


def test_a_stop_request_is_written_read_and_cleared() -> None:
    zk = FakeZk()
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    assert records.stop_request() is None
    records.clear_stop()  # absent is fine
    records.request_stop(StopRequest("me", 1.0))
    assert records.stop_request() == StopRequest("me", 1.0)
    records.clear_stop()
    assert records.stop_request() is None
