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
    log: list[str] | None = None

    def get(self) -> Any:
        if self.log is not None:
            self.log.append("wait")
        if self.error is not None:
            raise self.error
        return self.value


@dataclass(frozen=True)
class Event:
    """A watch event: ``path`` None when the connection dropped."""

    path: str | None


class Handler:
    """kazoo's handler: callbacks run when dispatched (no callback waits here)."""

    def dispatch_callback(self, callback: Any) -> None:
        callback.func(*callback.args)


class FakeZk:
    """Nodes in a dict; records every watch armed (path, kind), and fires them."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.watched: list[tuple[str, str]] = []
        self.watches: dict[str, set[Any]] = {}
        """The watches armed on each path, until :meth:`fire` fires them."""
        self.log: list[str] = []
        """``ask`` for each asynchronous request, ``wait`` for each answer awaited."""
        self.handler = Handler()

    def _arm(self, path: str, kind: str, watch: Any) -> None:
        if watch is not None:
            self.watched.append((path, kind))
            self.watches.setdefault(path, set()).add(watch)

    def fire(self, path: str | None) -> None:
        """Fire the watches of ``path`` (None: every watch, as a dropped connection)."""
        paths = list(self.watches) if path is None else [path]
        for each in paths:
            for watch in self.watches.pop(each, set()):
                watch(Event(path))

    def sync(self, path: str) -> str:
        self.log += ["ask", "wait"]
        return path

    def asked(self) -> int:
        """Requests asked so far (a sync counts as one)."""
        return self.log.count("ask")

    def put(self, path: str, data: bytes) -> None:
        self.nodes[path] = (data, self.nodes.get(path, (b"", -1))[1] + 1)

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Stat]:
        if path not in self.nodes:
            if watch is not None:
                self.watched.append((path, "get"))  # asked, but ZooKeeper arms nothing
            raise NoNodeError(path)
        self._arm(path, "get", watch)
        data, version = self.nodes[path]
        return data, Stat(version)

    def get_async(self, path: str, watch: Any = None) -> Answer:
        """As kazoo's: the answer (or the error) when asked for it."""
        return self._asked(self.get, path, watch)

    def get_children_async(self, path: str, watch: Any = None) -> Answer:
        return self._asked(self.get_children, path, watch)

    def _asked(self, operation: Any, path: str, watch: Any) -> Answer:
        self.log.append("ask")
        try:
            return Answer(operation(path, watch), log=self.log)
        except NoNodeError as exc:
            return Answer(error=exc, log=self.log)

    def round_trips(self) -> int:
        """Waits for answers after asking (a wait after more waits is the same one)."""
        return sum(1 for before, now in zip(["wait", *self.log], self.log, strict=False)
                   if before == "ask" and now == "wait")

    def exists(self, path: str, watch: Any = None) -> Stat | None:
        self._arm(path, "exists", watch)
        return Stat(self.nodes[path][1]) if path in self.nodes else None

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        if path not in self.nodes:
            if watch is not None:
                self.watched.append((path, "children"))
            raise NoNodeError(path)
        self._arm(path, "children", watch)
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


def _view_layout(zk: FakeZk, *, stop: bool, bad: bool) -> None:
    """A topology's records as a running one has them: master, committed, expected,
    living reports of three processors, snapshot reports of a bolt and a sink."""
    zk.put(PATHS.master, MasterRecord(Flowing(3), 1.0, "n1", "why").to_json())
    zk.put(PATHS.committed, CommittedRecord(2, {("w", 0): 1}, {"sink:out:0": "table:out"}
                                            ).to_json())
    zk.put(PATHS.expected, ExpectedRecord(("spout:lines:w:0", "bolt:counts:0", "sink:out:0")
                                          ).to_json())
    zk.put(PATHS.living, b"")
    for processor in ("spout:lines:w:0", "bolt:counts:0", "sink:out:0"):
        zk.put(PATHS.living_node(processor),
               ProcessorReport(processor, ProcessorState.READY, 3).to_json())
    if bad:
        zk.put(PATHS.living_node("bolt:counts:1"), b"{}")
    zk.put(PATHS.snapshots, b"")
    for processor in ("bolt:counts:0", "sink:out:0"):
        zk.put(PATHS.snapshot_dir(processor.split(":")[1]), b"")
        zk.put(PATHS.snapshot_node(processor),
               SnapshotReport(processor, 3, {("w", 0): 7}, "file:///x").to_json())
    if stop:
        zk.put(PATHS.stop, StopRequest("me", 1.0).to_json())


@pytest.mark.parametrize(("empty", "stop", "bad"), [
    (True, False, False), (False, False, False), (False, True, False), (False, False, True)])
def test_a_view_reads_what_the_single_reads_read_in_three_round_trips(
        empty: bool, stop: bool, bad: bool) -> None:
    """``read_view`` gives what the records' own reads give and arms the watch on the same
    nodes (absent ones for their creation), in a sync and three round trips where they
    take one each (a running topology's); a new topology, with nodes still to be created,
    takes more."""
    zk = FakeZk()
    if not empty:
        _view_layout(zk, stop=stop, bad=bad)
    told: list[str] = []
    records = TopologyRecords(zk, PATHS,  # type: ignore[arg-type]
                              on_unreadable=lambda subject, exc: told.append(subject))

    def watch(_event: object) -> None:
        pass
    view = records.read_view(watch)
    view_watched, view_told, view_trips = set(zk.watched), list(told), zk.round_trips()
    zk.watched.clear()
    told.clear()
    assert view.master == records.read_master(watch)
    assert view.committed == records.read_committed(watch)
    assert view.expected == records.expected(watch)
    assert view.reports == records.reports(watch)
    assert view.snapshot_reports == records.snapshot_reports(watch)
    assert view.stop == records.stop_request(watch)
    assert view_watched == set(zk.watched)
    assert sorted(view_told) == sorted(told)
    if not empty:
        assert view_trips == 1 + 3
        assert len(view.reports) == 3 + bad and len(view.snapshot_reports) == 2


def test_a_view_arms_the_watch_on_a_report_gone_since_its_listing() -> None:
    gone = PATHS.living_node("spout:lines:w:0")
    zk = Vanishing(gone)
    _view_layout(zk, stop=False, bad=False)
    view = TopologyRecords(zk, PATHS).read_view(lambda _event: None)  # type: ignore[arg-type]
    assert sorted(view.reports) == ["bolt:counts:0", "sink:out:0"]
    assert (gone, "exists") in zk.watched


def _viewing() -> tuple[FakeZk, TopologyRecords, list[object]]:
    """A running topology's records, viewed once; the list collects the wake-ups."""
    zk = FakeZk()
    _view_layout(zk, stop=False, bad=False)
    woken: list[object] = []
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    records.read_view(woken.append)
    return zk, records, woken


def _fresh_view(zk: FakeZk) -> object:
    """What a reader that knows nothing yet reads now."""
    return TopologyRecords(zk, PATHS).read_view(lambda _event: None)  # type: ignore[arg-type]


def _asking(zk: FakeZk, records: TopologyRecords, watch: Any) -> tuple[Any, int]:
    """A view of ``records`` and how many requests it asked."""
    before = zk.asked()
    view = records.read_view(watch)
    return view, zk.asked() - before


def test_a_view_asks_only_for_what_changed_since_the_last() -> None:
    """Nodes whose watch has not fired are not asked again: an unchanged view costs its
    sync alone; a changed report one read; a new instance its listing and its report; a
    report gone the listing. Each view equals what a reader that knows nothing reads."""
    zk, records, woken = _viewing()
    view, asked = _asking(zk, records, woken.append)
    assert asked == 1 and view == _fresh_view(zk)

    report = PATHS.living_node("bolt:counts:0")
    zk.put(report, ProcessorReport("bolt:counts:0", ProcessorState.PAUSED, 4).to_json())
    zk.fire(report)
    assert len(woken) == 1  # the watch passed on the event
    view, asked = _asking(zk, records, woken.append)
    assert asked == 1 + 1 and view == _fresh_view(zk)
    assert view.reports["bolt:counts:0"].state is ProcessorState.PAUSED  # type: ignore[union-attr]

    joined = PATHS.living_node("bolt:counts:1")
    zk.put(joined, ProcessorReport("bolt:counts:1", ProcessorState.READY, 4).to_json())
    zk.fire(PATHS.living)
    view, asked = _asking(zk, records, woken.append)
    assert asked == 1 + 2 and view == _fresh_view(zk) and "bolt:counts:1" in view.reports

    zk.delete(joined)
    zk.fire(joined)
    zk.fire(PATHS.living)
    view, asked = _asking(zk, records, woken.append)
    assert asked == 1 + 1 and view == _fresh_view(zk) and "bolt:counts:1" not in view.reports


def test_a_stop_request_created_after_a_view_is_read_in_the_next() -> None:
    zk, records, woken = _viewing()
    assert records.read_view(woken.append).stop is None
    zk.put(PATHS.stop, StopRequest("me", 1.0).to_json())
    zk.fire(PATHS.stop)  # armed by the view's read of the absent node
    assert records.read_view(woken.append).stop == StopRequest("me", 1.0)


def test_a_dropped_connection_forgets_everything_known() -> None:
    """kazoo fires every watch with no path when the connection drops (and forgets them):
    the next view asks for everything again."""
    zk, records, woken = _viewing()
    everything = _asking(zk, TopologyRecords(zk, PATHS), lambda _e: None)[1]  # type: ignore[arg-type]
    zk.fire(None)
    view, asked = _asking(zk, records, woken.append)
    assert asked == everything and view == _fresh_view(zk)


class FiringDuringRead(FakeZk):
    """A node changes (and its watch fires) while a read of it is on its way: the answer
    predates the change."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.armed = False

    def get_async(self, path: str, watch: Any = None) -> Answer:
        answer = super().get_async(path, watch)
        if path == self.path and self.armed:
            self.armed = False
            self.put(path, ProcessorReport("sink:out:0", ProcessorState.PAUSED, 9).to_json())
            self.fire(path)
        return answer


def test_an_answer_older_than_its_watch_event_is_used_once_and_not_kept() -> None:
    report = PATHS.living_node("sink:out:0")
    zk = FiringDuringRead(report)
    _view_layout(zk, stop=False, bad=False)
    records = TopologyRecords(zk, PATHS)  # type: ignore[arg-type]
    watch = lambda _event: None  # noqa: E731
    records.read_view(watch)
    zk.put(report, ProcessorReport("sink:out:0", ProcessorState.PAUSED, 8).to_json())
    zk.fire(report)
    zk.armed = True
    first = records.read_view(watch)
    assert first.reports["sink:out:0"].epoch == 8  # type: ignore[union-attr]
    second = records.read_view(watch)  # not kept: asked again
    assert second.reports["sink:out:0"].epoch == 9  # type: ignore[union-attr]
