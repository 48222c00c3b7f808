"""The processors' ZooKeeper adapter against a real ZooKeeper."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hailstorm.coordination import CoordinationError, Coordinator
from hailstorm.dev.harness import wait_for
from hailstorm.dev.services import DevStack, StackState
from hailstorm.outages import utc
from hailstorm.protocol.layout import (
    ATTEMPT_INFO,
    ExpectedRecord,
    Flowing,
    Initialize,
    MasterRecord,
    ProcessorReport,
    ProcessorState,
    SnapshotReport,
    SpoutsPaused,
    TopologyPaths,
)
from hailstorm.protocol.records import TopologyRecords

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


def test_a_node_of_an_ended_stage_attempt_is_taken_over_and_its_owner_ends(
        hosts: str, name: str, made: list[Coordinator]) -> None:
    """Spark SIGKILLs a failed attempt's processors, whose sessions outlive them: the new
    attempt's incarnation takes the node over once the driver named its attempt (never one
    of its own attempt, nor before), and the old owner's next report ends it (that report
    names the ended attempt: the negotiator never counts it). An old owner still alive
    learns at once that its attempt ended (``superseded``: its processor then ends and
    frees its task slot, which the new attempt may be waiting for)."""
    old = Coordinator(hosts, name, BOLT, {ATTEMPT_INFO: "a1"})
    made.append(old)
    old.register(timeout=5)
    records = TopologyRecords(old.client, TopologyPaths(name))
    records.write_expected(ExpectedRecord((BOLT,), attempt="a1"))
    same = Coordinator(hosts, name, BOLT, {ATTEMPT_INFO: "a1"})
    made.append(same)
    with pytest.raises(CoordinationError, match="still exists"):
        same.register(timeout=0.5)
    early = Coordinator(hosts, name, BOLT, {ATTEMPT_INFO: "a2"})
    made.append(early)
    with pytest.raises(CoordinationError, match="still exists"):
        early.register(timeout=0.5)  # the driver has not named a2 yet
    assert old.superseded is None
    records.start_attempt("a2")
    wait_for("the old owner to learn its attempt ended", lambda: old.superseded == "a2", 5)
    assert old.changed.is_set()
    new = Coordinator(hosts, name, BOLT, {ATTEMPT_INFO: "a2"})
    made.append(new)
    started = time.monotonic()
    new.register(timeout=10)
    assert time.monotonic() - started < 2, "no wait for the old session to expire"
    assert new.reports()[BOLT].attempt == "a2"
    with pytest.raises(CoordinationError, match="took it over"):
        old.report(ProcessorState.READY, 3, loaded={})
    assert old.lost.is_set()
    new.report(ProcessorState.READY, 3, loaded={})  # its own node: the owner is itself
    assert new.reports()[BOLT].attempt == "a2" and not new.lost.is_set()
    assert new.superseded is None


def test_a_predecessor_its_task_saw_end_is_taken_over_at_once(
        hosts: str, name: str, made: list[Coordinator]) -> None:
    """A processor's Spark task starts the next incarnation when one ends; a killed one's
    session outlives it. The next takes its node over at once when it replaces exactly
    that pid of the same task's worker on the same host, in one transaction (the node is
    never missing), and waits for the session otherwise."""
    info = {"pid": 4101, "worker": 4100, "host": "127.0.0.1", ATTEMPT_INFO: "a1"}
    old = Coordinator(hosts, name, BOLT, info)
    made.append(old)
    old.register(timeout=5)
    TopologyRecords(old.client, TopologyPaths(name)).write_expected(
        ExpectedRecord((BOLT,), attempt="a1"))
    node = TopologyPaths(name).living_node(BOLT)
    seen_missing = threading.Event()

    def watch(event: object) -> None:
        if old.client.exists(node) is None:
            seen_missing.set()
    old.client.exists(node, watch=watch)
    for replaces, other in ((4099, {}), (4101, {"worker": 4200}), (4101, {"host": "10.0.0.9"})):
        imposter = Coordinator(hosts, name, BOLT, {**info, "pid": 4102, **other},
                               replaces=replaces)
        made.append(imposter)
        with pytest.raises(CoordinationError, match="still exists"):
            imposter.register(timeout=0.5)
    new = Coordinator(hosts, name, BOLT, {**info, "pid": 4102}, replaces=4101)
    made.append(new)
    started = time.monotonic()
    new.register(timeout=10)
    assert time.monotonic() - started < 2, "no wait for the old session to expire"
    assert new.reports()[BOLT].info["pid"] == 4102
    assert not seen_missing.is_set(), "the node was replaced in one step"
    with pytest.raises(CoordinationError, match="took it over"):
        old.report(ProcessorState.READY, 3, loaded={})


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
    now = coord.master_now()  # read at once, whether or not the watch has followed yet
    assert now is not None and now.state == Flowing(3, {("words", 0): 1})
    assert coord.changed.wait(5)
    record = coord.master()
    assert record is not None and record.state == Flowing(3, {("words", 0): 1})


def test_a_negotiator_view_sees_every_write_that_returned_before_it(hosts: str,
                                                                   name: str) -> None:
    """The negotiator's view asks only for what changed since its last one (the rest it
    keeps until the node's watch fires): a write by another session that returned before
    a view began is in that view, every time, and each view equals a fresh reader's. The
    reader's kazoo callback thread is kept busy meanwhile, so that the watch events wait
    in its queue when the view begins."""
    from kazoo.client import KazooClient
    from kazoo.protocol.states import Callback

    from hailstorm.zookeeper import ensure_paths

    paths = TopologyPaths(name)
    writer, reader = KazooClient(hosts=hosts), KazooClient(hosts=hosts)
    writer.start(timeout=10)
    reader.start(timeout=10)
    try:
        ensure_paths(writer, paths.directories())
        writer.create(paths.master, MasterRecord(Flowing(1, None), 1.0).to_json())
        woken = threading.Event()

        def wake(_event: object) -> None:
            woken.set()
        records = TopologyRecords(reader, paths)
        records.read_view(wake)
        for epoch in range(2, 42):
            processor = f"spout:lines:w:{epoch % 3}"
            reader.handler.dispatch_callback(Callback("watch", time.sleep, (0.02,)))
            report = ProcessorReport(processor, ProcessorState.PAUSED, epoch).to_json()
            if writer.exists(paths.living_node(processor)) is None:
                writer.create(paths.living_node(processor), report)
            else:
                writer.set(paths.living_node(processor), report)
            if epoch % 5 == 0:
                writer.set(paths.master, MasterRecord(Flowing(epoch, None), 1.0).to_json())
            if epoch % 7 == 0:
                writer.delete(paths.living_node(processor))
            view = records.read_view(wake)
            fresh = TopologyRecords(writer, paths).read_view(lambda _event: None)
            assert view == fresh, f"epoch {epoch}"
            seen = view.reports.get(processor)
            assert (seen is None) if epoch % 7 == 0 else (seen is not None
                                                           and seen.epoch == epoch)
        assert woken.is_set()
    finally:
        for client in (reader, writer):
            client.stop()
            client.close()


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


def test_a_failed_processor_lingers_through_a_snapshot_round_until_the_restart(
        hosts: str, name: str, made: list[Coordinator]) -> None:
    """A snapshot round raises the epoch but restarts nothing: the failed processor keeps
    its session (so the negotiator reads its error, not a lost node) until an Initialize."""
    coord = Coordinator(hosts, name, BOLT)
    made.append(coord)
    coord.register(timeout=5)
    coord.report(ProcessorState.READY, 4, loaded={})
    paths = TopologyPaths(name)
    coord.client.create(paths.master, MasterRecord(Flowing(4, None), 1.0).to_json())
    failing = threading.Thread(target=coord.fail_visibly, args=("OSError: gone", 20.0))
    failing.start()
    time.sleep(0.5)
    coord.client.set(paths.master, MasterRecord(SpoutsPaused(5), 2.0).to_json())
    failing.join(1.5)
    assert failing.is_alive(), "a snapshot round ended the linger"
    assert coord.reports()[BOLT].error == "OSError: gone"
    coord.client.set(paths.master, MasterRecord(Initialize(6), 3.0).to_json())
    failing.join(5)
    assert not failing.is_alive(), "the restart did not end the linger"


def test_a_processor_failing_after_the_restart_does_not_linger(
        hosts: str, name: str, made: list[Coordinator]) -> None:
    """A peer's failure restarted the run first: lingering would only keep the living node
    that the next incarnation waits to see vanish, so the failed one leaves at once."""
    coord = Coordinator(hosts, name, BOLT)
    made.append(coord)
    coord.register(timeout=5)
    coord.report(ProcessorState.READY, 4, loaded={})
    coord.client.create(TopologyPaths(name).master,
                        MasterRecord(Initialize(6), 1.0).to_json())
    started = time.monotonic()
    coord.fail_visibly("DataPlaneError: sending to sink:word_counts:0 failed", linger=20.0,
                       joined=4)
    assert time.monotonic() - started < 5, "it lingered after the restart"
    assert coord.reports()[BOLT].error.startswith("DataPlaneError")


class Cuttable:
    """A TCP forwarder to ZooKeeper on 127.0.0.1 whose connections can be cut and whose
    listener can refuse new ones for a while: a network blip between a processor and a
    healthy ZooKeeper."""

    def __init__(self, target: str) -> None:
        host, port = target.split(",")[0].rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.hosts = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.open = threading.Event()
        self.open.set()
        self.sockets: list[socket.socket] = []
        self.stopped = False
        self.cut_on_request = threading.Event()
        """Set: the next bytes a client sends are dropped with every connection (a request
        in flight when the network fails)."""
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open.is_set():
                client.close()
                continue
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for a, b, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(a, b, upstream), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, upstream: bool) -> None:
        try:
            while data := source.recv(65536):
                if upstream and self.cut_on_request.is_set():
                    self.cut_on_request.clear()
                    self.cut()
                    return
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.close()

    def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        self.open.clear()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.sockets = []

    def close(self) -> None:
        self.stopped = True
        self.cut()
        self.listener.close()


def test_a_connection_blip_is_not_a_lost_session(hosts: str, name: str,
                                                 made: list[Coordinator]) -> None:
    """While disconnected, reads and writes wait for the reconnection instead of failing;
    the session, the living node and the processor survive."""
    proxy = Cuttable(hosts)
    try:
        coord = Coordinator(proxy.hosts, name, BOLT, session_timeout=10)
        made.append(coord)
        coord.register(timeout=5)
        owner = coord.client.client_id[0]
        writer = Coordinator(hosts, name, "bolt:other:0")
        made.append(writer)
        paths = TopologyPaths(name)
        writer.client.create(paths.master, MasterRecord(Flowing(2, None), 1.0).to_json())
        coord.changed.clear()
        proxy.cut_on_request.set()  # the read below is in flight when the network fails
        results: list[object] = []

        def read_and_report() -> None:
            try:
                results.append(coord.master())
                coord.report(ProcessorState.READY, 2, loaded={})
                results.append(coord.reports()[BOLT].state)
            except Exception as exc:  # the test asserts there is none
                results.append(exc)

        reader = threading.Thread(target=read_and_report)
        reader.start()
        assert coord.changed.wait(5), "the disconnection sets changed"
        time.sleep(2)  # the reads wait, disconnected
        assert results == [] and not coord.lost.is_set()
        proxy.open.set()
        reader.join(20)
        assert not reader.is_alive()
        assert results == [MasterRecord(Flowing(2, None), 1.0), ProcessorState.READY]
        assert coord.client.client_id[0] == owner, "the same session"
        coord.check()
        living = writer.reports()[BOLT]
        assert (living.state, living.epoch) == (ProcessorState.READY, 2)
    finally:
        proxy.close()


def test_a_zookeeper_outage_is_waited_out(dev_stack: StackState, hosts: str, name: str,
                                         made: list[Coordinator]) -> None:
    """The session's ZooKeeper itself SIGKILLed for 20 s (reads used to give up after twice
    the 6 s session timeout), then started again on its data and port: a read in flight
    waits, the processor says it waits for ZooKeeper, and the session (with its living
    node) survives: ZooKeeper restores it, and the client is back within its timeout.
    ``hailstorm status --watch --json`` meanwhile goes on showing what it last read,
    waiting for ZooKeeper, then current documents again."""
    coord = Coordinator(hosts, name, BOLT, session_timeout=6)
    made.append(coord)
    coord.register(timeout=5)
    owner = coord.client.client_id[0]
    server = DevStack(dev_stack.state_dir, startup_timeout=120)
    results: list[object] = []
    with _StatusWatching(hosts, name) as watching:
        wait_for("a first status document", lambda: watching.docs, 60, poll=0.2)

        def read() -> None:
            try:
                results.append(coord.reports()[BOLT].state)
            except Exception as exc:  # the test asserts there is none
                results.append(exc)

        server.stop_zookeeper()
        try:
            assert coord.changed.wait(10), "the disconnection sets changed"
            reader = threading.Thread(target=read)
            reader.start()
            time.sleep(20)
            assert results == [] and not coord.lost.is_set()
            assert coord.zookeeper.waiting
            waited = watching.waiting()
        finally:
            server.restart_zookeeper()
        reader.join(60)
        assert results == [ProcessorState.JOINING]
        assert coord.client.client_id[0] == owner, "the same session"
        coord.check()
        assert not coord.zookeeper.waiting

        assert waited, "status never said it waits for ZooKeeper"
        first = waited[0]["problems"][0]
        assert first.startswith(f"waiting for ZooKeeper at {hosts}, unavailable since "), first
        read_doc = watching.docs[watching.docs.index(waited[0]) - 1]  # the last current one
        assert first.endswith(f": what is shown was read at {utc(read_doc['time'])}"), first
        assert all(doc["time"] == read_doc["time"] for doc in waited)
        wait_for("a current status document again",
                 lambda: watching.docs[-1]["waiting"] is None, 60, poll=0.2)


class _StatusWatching:
    """``hailstorm status --name NAME --watch 0.5 --json`` running, its documents read."""

    def __init__(self, hosts: str, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hailstorm", "status", "--name", name, "--zk", hosts,
             "--watch", "0.5", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.docs: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.docs.append(json.loads(line))

    def waiting(self) -> list[dict[str, Any]]:
        return [doc for doc in self.docs if doc["waiting"]]

    def __enter__(self) -> _StatusWatching:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def test_stream_times_are_kept_per_position_and_trimmed(hosts: str, name: str,
                                                        made: list[Coordinator]) -> None:
    spout = "spout:views:page-views:2"
    coord = Coordinator(hosts, name, spout)
    made.append(coord)
    records = coord.records
    assert records.stream_times_at_or_below(spout, 100) is None
    for position, newest in ((10, 5), (20, 9), (35, 30)):
        records.write_stream_times(spout, position, {"page_windows": newest})
    records.write_stream_times(spout, 20, {"page_windows": 9})  # a second pause there
    assert records.stream_times_at_or_below(spout, 9) is None
    assert records.stream_times_at_or_below(spout, 20) == (20, {"page_windows": 9})
    assert records.stream_times_at_or_below(spout, 34) == (20, {"page_windows": 9})
    assert records.stream_times_at_or_below(spout, 99) == (35, {"page_windows": 30})
    records.trim_stream_times(spout, 35)  # keeps the greatest position below 35 too
    assert records.stream_times_at_or_below(spout, 19) is None
    assert records.stream_times_at_or_below(spout, 34) == (20, {"page_windows": 9})
    assert sorted(coord.client.get_children(coord.paths.stream_times_node(spout))) == [
        f"{20:020d}", f"{35:020d}"]
