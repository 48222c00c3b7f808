"""The processors' ZooKeeper adapter against a real ZooKeeper."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from hailstorm.coordination import CoordinationError, Coordinator
from negotiator.layout import (
    Flowing,
    MasterRecord,
    ProcessorReport,
    ProcessorState,
    SnapshotReport,
    TopologyPaths,
)

pytestmark = pytest.mark.integration

BOLT = "bolt:counts:0"


@pytest.fixture()
def hosts(zookeeper: object) -> str:
    return str(zookeeper.hosts)  # type: ignore[attr-defined]


@pytest.fixture()
def name() -> str:
    return f"coord_{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def made() -> Iterator[list[Coordinator]]:
    coordinators: list[Coordinator] = []
    yield coordinators
    for c in coordinators:
        c.close()


def test_register_report_and_snapshot_report(hosts: str, name: str,
                                              made: list[Coordinator]) -> None:
    coord = Coordinator(hosts, name, BOLT, {"port": 1234, "pid": 42})
    made.append(coord)
    coord.register(timeout=5)
    paths = TopologyPaths(name)
    raw, stat = coord.client.get(paths.living_node(BOLT))
    report = ProcessorReport.from_json(raw)
    assert (report.state, report.epoch, dict(report.info)) == (
        ProcessorState.JOINING, 0, {"port": 1234, "pid": 42})
    assert stat.ephemeralOwner == coord.client.client_id[0]
    coord.report(ProcessorState.READY, 3, loaded={})
    assert coord.reports()[BOLT].state is ProcessorState.READY
    assert coord.reports()[BOLT].info["port"] == 1234
    clock = {("words", 0): 7}
    for epoch in (4, 5):  # created, then overwritten
        coord.write_snapshot_report(SnapshotReport(BOLT, epoch, clock, f"file:///x/{epoch}"))
    saved = SnapshotReport.from_json(coord.client.get(paths.snapshot_node(BOLT))[0])
    assert (saved.epoch, saved.clock) == (5, clock)
    assert coord.committed() is None
    with pytest.raises(CoordinationError, match="hailstorm run"):
        coord.expected()


def test_a_new_incarnation_waits_for_the_old_node(hosts: str, name: str,
                                                 made: list[Coordinator]) -> None:
    old = Coordinator(hosts, name, BOLT)
    made.append(old)
    old.register(timeout=5)
    impatient = Coordinator(hosts, name, BOLT)
    made.append(impatient)
    with pytest.raises(CoordinationError, match="still exists"):
        impatient.register(timeout=0.5)
    new = Coordinator(hosts, name, BOLT)
    made.append(new)
    threading.Timer(0.5, old.close).start()
    started = time.monotonic()
    new.register(timeout=10)
    assert 0.3 < time.monotonic() - started < 5
    assert new.reports()[BOLT].state is ProcessorState.JOINING


def test_master_watch_fires_on_creation_and_change(hosts: str, name: str,
                                                   made: list[Coordinator]) -> None:
    coord = Coordinator(hosts, name, BOLT)
    made.append(coord)
    coord.register(timeout=5)
    assert coord.master() is None
    assert not coord.changed.is_set()
    paths = TopologyPaths(name)
    coord.client.create(paths.master, MasterRecord(Flowing(2, None), 1.0).to_json())
    assert coord.changed.wait(5)
    record = coord.master()
    assert record is not None and record.state == Flowing(2, None)
    coord.client.set(paths.master, MasterRecord(Flowing(3, {("words", 0): 1}), 2.0).to_json())
    assert coord.changed.wait(5)
    record = coord.master()
    assert record is not None and record.state == Flowing(3, {("words", 0): 1})


def test_errors_are_reported_on_the_living_node(hosts: str, name: str,
                                               made: list[Coordinator]) -> None:
    coord = Coordinator(hosts, name, BOLT)
    made.append(coord)
    coord.register(timeout=5)
    coord.report(ProcessorState.READY, 4, loaded={})
    coord.fail_visibly("ValueError: boom\nmore lines", linger=0.2)
    report = coord.reports()[BOLT]
    assert (report.state, report.epoch, report.error) == (
        ProcessorState.READY, 4, "ValueError: boom")
