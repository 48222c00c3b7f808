"""The negotiator against a real ZooKeeper, with scripted stand-in processors.

Stand-ins are plain kazoo clients (one session each) following the processor protocol of
docs/negotiator.md; they fake Kafka: a spout "emits" ``advance`` offsets per flowing period.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from hailstorm.negotiator.machine import Config
from hailstorm.negotiator.shell import Shell, election_lost
from hailstorm.protocol.clock import Clock, dominates
from hailstorm.protocol.layout import (
    CommittedRecord,
    ExpectedRecord,
    MasterRecord,
    ProcessorId,
    ProcessorReport,
    ProcessorState,
    RecoveryRecord,
    Role,
    SnapshotReport,
    TopologyPaths,
    expected_processor_ids,
    parse_processor_id,
)
from hailstorm.protocol.states import Flowing, Initialize, SpoutsPaused, SpoutsRewind

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = [("events", 0), ("events", 1)]
EXPECTED = expected_processor_ids({"src": PARTITIONS}, {"agg": 2}, {"out": 1})
BOLTS = [p for p in EXPECTED if p.startswith("bolt:")]
FAST = Config(snapshot_interval=0.3, initialize_timeout=15, rewind_timeout=15,
              pause_timeout=15, snapshot_timeout=15)


@pytest.fixture(scope="module")
def zk_hosts(request: pytest.FixtureRequest) -> str:
    """The session ZooKeeper (``NEGOTIATOR_TEST_ZK`` overrides it for quick local runs)."""
    override = os.environ.get("NEGOTIATOR_TEST_ZK")
    if override:
        return override
    return str(request.getfixturevalue("zookeeper").hosts)


@pytest.fixture()
def topology() -> str:
    return f"negotiator_{uuid.uuid4().hex[:10]}"


def connect(hosts: str, timeout: float = 10.0) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=timeout)
    client.start(timeout=15)
    return client


@pytest.fixture()
def zk(zk_hosts: str) -> Iterator[KazooClient]:
    client = connect(zk_hosts)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``predicate`` (test code only) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def read_master(client: KazooClient, paths: TopologyPaths) -> MasterRecord | None:
    try:
        return MasterRecord.from_json(client.get(paths.master)[0])
    except NoNodeError:
        return None


def read_committed(client: KazooClient, paths: TopologyPaths) -> CommittedRecord | None:
    try:
        return CommittedRecord.from_json(client.get(paths.committed)[0])
    except NoNodeError:
        return None


# --------------------------------------------------------------------------- stand-ins


class StandIn:
    """A processor following the protocol, with its own ZooKeeper session.

    It creates ``living/<id>`` (ephemeral) saying ``joining``, then answers each master
    state once: Initialize -> ready (bolts: ``loaded`` = the committed clock they "load");
    SpoutsRewind -> rewound at C[p]; SpoutsPaused -> paused at its position (advanced by
    ``advance`` since the last pause); Flowing(C) -> bolts write a snapshot report after
    ``snapshot_delay`` seconds.
    """

    def __init__(self, hosts: str, paths: TopologyPaths, pid: str, *, advance: int = 5,
                 snapshot_delay: float = 0.0) -> None:
        self.paths = paths
        self.pid = parse_processor_id(pid)
        self.advance = advance
        self.snapshot_delay = snapshot_delay
        self.position = -1
        self.rewinds: list[tuple[int, Clock]] = []
        self.answered: set[tuple[str, int]] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._timers: list[threading.Timer] = []
        self.client = connect(hosts)
        for path in paths.directories():
            self.client.ensure_path(path)
        self.node = paths.living_node(self.pid)
        self.client.create(self.node, self._report(ProcessorState.JOINING, 0), ephemeral=True)
        self._thread = threading.Thread(target=self._loop, name=pid, daemon=True)
        self._thread.start()

    def _report(self, state: ProcessorState, epoch: int, **kw: Any) -> bytes:
        return ProcessorReport(str(self.pid), state, epoch, **kw).to_json()

    def _watch(self, _event: object) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                try:
                    raw, _ = self.client.get(self.paths.master, watch=self._watch)
                except NoNodeError:
                    self.client.exists(self.paths.master, watch=self._watch)
                else:
                    self._react(MasterRecord.from_json(raw).state)
            except Exception:  # the session was closed by crash()
                if self._stop.is_set():
                    return
                raise
            self._wake.wait(5)

    def _react(self, state: Any) -> None:
        key = (type(state).__name__ + str(getattr(state, "clock", "")), state.epoch)
        if key in self.answered:
            return
        self.answered.add(key)
        role, e = self.pid.role, state.epoch
        if isinstance(state, Initialize):
            loaded = None
            if role is Role.BOLT:
                committed = read_committed(self.client, self.paths)
                loaded = dict(committed.clock) if committed else {}
            self.client.set(self.node, self._report(ProcessorState.READY, e, loaded=loaded))
        elif role is Role.SPOUT and isinstance(state, SpoutsRewind):
            part = self.pid.partition
            assert part is not None
            self.position = state.clock[part]
            self.rewinds.append((e, dict(state.clock)))
            self.client.set(self.node, self._report(
                ProcessorState.REWOUND, e, position={part: self.position}))
        elif role is Role.SPOUT and isinstance(state, SpoutsPaused):
            part = self.pid.partition
            assert part is not None
            self.position += self.advance
            self.client.set(self.node, self._report(
                ProcessorState.PAUSED, e, position={part: self.position}))
        elif (role in (Role.BOLT, Role.SINK) and isinstance(state, Flowing)
              and state.clock is not None):
            timer = threading.Timer(self.snapshot_delay, self._save, (e, dict(state.clock)))
            self._timers.append(timer)
            timer.start()

    def _save(self, epoch: int, clock: Clock) -> None:
        if self._stop.is_set():
            return
        path = self.paths.snapshot_node(self.pid)
        data = SnapshotReport(str(self.pid), epoch, clock, f"mem://{self.pid}/{epoch}").to_json()
        try:
            self.client.set(path, data)
        except NoNodeError:
            self.client.create(path, data, makepath=True)

    def crash(self) -> None:
        """End the session (the ephemeral node disappears at once)."""
        self._stop.set()
        self._wake.set()
        for timer in self._timers:
            timer.cancel()
        self.client.stop()
        self.client.close()
        self._thread.join(5)


class Deployment:
    """The driver's part (the expected list) plus one stand-in per expected processor."""

    def __init__(self, hosts: str, topology: str, **kw: Any) -> None:
        self.hosts = hosts
        self.paths = TopologyPaths(topology)
        self.kw = kw
        driver = connect(hosts)
        try:
            driver.create(self.paths.expected, ExpectedRecord(tuple(EXPECTED)).to_json(),
                          makepath=True)
        finally:
            driver.stop()
            driver.close()
        self.procs = {pid: StandIn(hosts, self.paths, pid, **kw) for pid in EXPECTED}

    def restart(self, pid: str) -> StandIn:
        self.procs[pid].crash()
        self.procs[pid] = StandIn(self.hosts, self.paths, pid, **self.kw)
        return self.procs[pid]

    def close(self) -> None:
        for proc in self.procs.values():
            if not proc._stop.is_set():
                proc.crash()


@pytest.fixture()
def deployment(zk_hosts: str, topology: str) -> Iterator[Callable[..., Deployment]]:
    made: list[Deployment] = []

    def make(**kw: Any) -> Deployment:
        made.append(Deployment(zk_hosts, topology, **kw))
        return made[-1]

    try:
        yield make
    finally:
        for d in made:
            d.close()


class ShellThread:
    """An in-process negotiator on its own ZooKeeper session."""

    def __init__(self, hosts: str, topology: str, identifier: str, config: Config = FAST,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = connect(hosts, timeout=4.0)
        self.shell = Shell(self.client, topology, config, identifier, clock=clock)
        self.thread = threading.Thread(target=self.shell.run, name=identifier, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.shell.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()
        self.client.stop()
        self.client.close()


@pytest.fixture()
def negotiators(zk_hosts: str, topology: str) -> Iterator[Callable[..., ShellThread]]:
    started: list[ShellThread] = []

    def start(identifier: str, config: Config = FAST,
              clock: Callable[[], float] = time.time) -> ShellThread:
        started.append(ShellThread(zk_hosts, topology, identifier, config, clock))
        return started[-1]

    try:
        yield start
    finally:
        for n in started:
            if n.thread.is_alive():
                n.stop()


def committed_epoch(client: KazooClient, paths: TopologyPaths) -> int:
    committed = read_committed(client, paths)
    return committed.epoch if committed else -1


# --------------------------------------------------------------------------- tests


def test_full_snapshot_round_commits_the_right_clock(
    zk: KazooClient, topology: str, deployment: Callable[..., Deployment],
    negotiators: Callable[..., ShellThread],
) -> None:
    dep = deployment(advance=5)
    negotiators("solo")
    paths = dep.paths
    first = wait_for("a first commit", lambda: read_committed(zk, paths))
    # Fresh start: rewind to -1 everywhere, spouts emit offsets 0..4, pause at 4.
    assert first.clock == {p: 4 for p in PARTITIONS}
    savers = [*BOLTS, *(p for p in EXPECTED if p.startswith("sink:"))]
    assert first.snapshots == {b: f"mem://{b}/{first.epoch}" for b in savers}
    assert first.previous is None
    for spout in (p for p in dep.procs.values() if p.pid.role is Role.SPOUT):
        assert spout.rewinds == [(spout.rewinds[0][0], {p: -1 for p in PARTITIONS})]
    second = wait_for("a second commit", lambda: (c := read_committed(zk, paths))
                      and c.epoch > first.epoch and c)
    assert second.clock == {p: 9 for p in PARTITIONS}
    assert second.previous is not None and second.previous.epoch == first.epoch
    assert dominates(second.clock, first.clock)
    master = read_master(zk, paths)
    assert master is not None and master.leader == "solo"
    assert master.state.epoch >= second.epoch


def test_lost_processor_restarts_the_topology_and_recovers_the_lwm(
    zk: KazooClient, topology: str, deployment: Callable[..., Deployment],
    negotiators: Callable[..., ShellThread],
) -> None:
    dep = deployment(advance=3)
    negotiators("solo")
    paths = dep.paths
    wait_for("two commits", lambda: committed_epoch(zk, paths) > 0
             and (c := read_committed(zk, paths)) and c.previous)
    victim = BOLTS[1]
    dep.procs[victim].crash()
    master = wait_for("Initialize after the loss", lambda: (m := read_master(zk, paths))
                      and isinstance(m.state, Initialize) and m)
    assert victim in master.reason and "lost" in master.reason
    # Both moves to Initialize are on record (the start, then this recovery), each written
    # in the same transaction as the master.
    records = [RecoveryRecord.from_json(zk.get(f"{paths.recoveries}/{child}")[0])
               for child in sorted(zk.get_children(paths.recoveries))]
    assert [r.is_start for r in records] == [True, False]
    assert records[1].epoch == master.state.epoch and records[1].reason == master.reason
    assert records[1].previous.startswith(("Flowing", "SpoutsPaused"))
    # Nothing commits while the bolt is gone.
    committed = read_committed(zk, paths)
    assert committed is not None
    time.sleep(0.5)
    master_now = read_master(zk, paths)
    assert master_now is not None and isinstance(master_now.state, Initialize)
    assert read_committed(zk, paths) == committed
    # The processor comes back (new incarnation): the topology rewinds to the committed clock.
    dep.procs[victim] = StandIn(dep.hosts, paths, victim, advance=3)
    spout = dep.procs[expected_spout(0)]
    wait_for("a rewind after recovery", lambda: spout.rewinds
             and spout.rewinds[-1][0] == master.state.epoch)
    assert spout.rewinds[-1][1] == committed.clock, "LWM = min of bolt loads = committed"
    later = wait_for("a commit after recovery",
                     lambda: (c := read_committed(zk, paths)) and c.epoch > master.state.epoch
                     and c)
    assert dominates(later.clock, committed.clock)


def expected_spout(partition: int) -> str:
    return str(ProcessorId.spout("src", ("events", partition)))


def test_two_negotiators_elect_exactly_one_leader(
    zk: KazooClient, topology: str, deployment: Callable[..., Deployment],
    negotiators: Callable[..., ShellThread],
) -> None:
    dep = deployment()
    a, b = negotiators("alpha"), negotiators("beta")
    paths = dep.paths
    wait_for("a commit", lambda: read_committed(zk, paths))
    leaders = [n for n in (a, b) if n.shell.is_leader]
    assert len(leaders) == 1
    leader = leaders[0]
    standby = b if leader is a else a
    for _ in range(10):  # stays stable while rounds go on
        master = read_master(zk, paths)
        assert master is not None and master.leader == leader.shell.identifier
        assert [n.shell.is_leader for n in (a, b)].count(True) == 1
        time.sleep(0.1)
    assert sorted(zk.Lock(paths.election).contenders()) == ["alpha", "beta"]
    # Hand-over: the standby continues the same topology from ZooKeeper.
    leader.stop()
    wait_for("the standby to lead", lambda: standby.shell.is_leader, timeout=15)
    # Read the epoch only now: the old leader may commit one last round while it stops.
    before = committed_epoch(zk, paths)
    wait_for("a commit by the new leader", lambda: committed_epoch(zk, paths) > before)
    master = read_master(zk, paths)
    assert master is not None and master.leader == standby.shell.identifier


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "hailstorm.negotiator", *args], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT)


def test_sigkill_of_the_leader_mid_round(
    zk: KazooClient, zk_hosts: str, topology: str, deployment: Callable[..., Deployment],
    tmp_path: Path,
) -> None:
    dep = deployment(advance=4, snapshot_delay=1.5)
    paths = dep.paths
    procs: dict[str, subprocess.Popen[bytes]] = {}
    history: list[CommittedRecord] = []
    seen = threading.Event()

    def record(data: bytes | None, _stat: object) -> None:
        if data:
            history.append(CommittedRecord.from_json(data))
            seen.set()

    zk.DataWatch(paths.committed, record)
    try:
        for name in ("first", "second"):
            procs[name] = _spawn(
                ["--name", topology, "--zk", zk_hosts, "--id", name, "--snapshot-interval",
                 "0.3", "--timeout", "20", "--session-timeout", "2", "--log-level", "DEBUG"],
                tmp_path / f"{name}.log",
            )
            if name == "first":  # let "first" win the election
                wait_for("first to lead", lambda: (m := read_master(zk, paths))
                         and m.leader == "first")
        # Kill the leader while a snapshot round is in flight (bolts save 1.5 s late).
        in_round = wait_for(
            "a snapshot round in progress",
            lambda: (m := read_master(zk, paths)) and isinstance(m.state, Flowing)
            and m.state.clock is not None and committed_epoch(zk, paths) >= 0
            and m.leader == "first" and m)
        os.kill(procs["first"].pid, signal.SIGKILL)
        procs["first"].wait(10)
        killed_round = in_round.state.epoch
        # The standby takes over (after the dead session expires) and finishes that round.
        wait_for("the standby to lead", lambda: (m := read_master(zk, paths))
                 and m.leader == "second", timeout=30)
        wait_for("the interrupted round to be committed or superseded",
                 lambda: committed_epoch(zk, paths) > killed_round, timeout=30)
        committed = read_committed(zk, paths)
        assert committed is not None
        finished = [c for c in history if c.epoch == killed_round]
        if finished:  # the standby finished the interrupted round...
            assert finished[0].clock == in_round.state.clock
        else:  # ...or restarted it safely; either way later rounds commit
            assert any(c.epoch > killed_round for c in history)
        for older, newer in itertools.pairwise(history):
            assert newer.epoch > older.epoch, [c.epoch for c in history]
            assert dominates(newer.clock, older.clock), "committed clock went backwards"
        assert procs["second"].poll() is None, "the standby must keep running"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(5)
        for name in procs:
            log = tmp_path / f"{name}.log"
            if log.exists():
                sys.stderr.write(f"--- {name}.log\n{log.read_text()[-4000:]}\n")
    second_log = (tmp_path / "second.log").read_text()
    assert "second: leading" in second_log
    assert "committed" in second_log


def test_a_deposed_leader_stops_acting_and_stands_by(
    zk: KazooClient, topology: str, deployment: Callable[..., Deployment],
    negotiators: Callable[..., ShellThread],
) -> None:
    """Deleting the leader's election node (what a session expiry does) deposes it: the
    fencing check makes its writes impossible, it re-enters the election as a standby and
    the other negotiator takes over."""
    dep = deployment()
    a, b = negotiators("alpha"), negotiators("beta")
    paths = dep.paths
    wait_for("a commit", lambda: read_committed(zk, paths))
    leader = a if a.shell.is_leader else b
    other = b if leader is a else a
    name = leader.shell.identifier
    nodes = [n for n in zk.get_children(paths.election)
             if zk.get(f"{paths.election}/{n}")[0].decode() == name]
    assert len(nodes) == 1
    zk.delete(f"{paths.election}/{nodes[0]}")
    wait_for("the other negotiator to lead", lambda: other.shell.is_leader, timeout=15)
    wait_for("the deposed one to stand by", lambda: not leader.shell.is_leader, timeout=15)
    before = committed_epoch(zk, paths)
    wait_for("commits by the new leader", lambda: committed_epoch(zk, paths) > before)
    master = read_master(zk, paths)
    assert master is not None and master.leader == other.shell.identifier
    assert sorted(zk.Lock(paths.election).contenders()) == ["alpha", "beta"]


def test_a_silent_bolt_times_out_the_round(
    zk: KazooClient, topology: str, deployment: Callable[..., Deployment],
    negotiators: Callable[..., ShellThread], caplog: pytest.LogCaptureFixture,
) -> None:
    """A bolt that never saves does not hang the topology: the round is abandoned, named."""
    caplog.set_level(logging.INFO, logger="negotiator")
    dep = deployment(snapshot_delay=60.0)
    negotiators("solo", Config(snapshot_interval=0.2, initialize_timeout=10,
                               rewind_timeout=10, pause_timeout=10, snapshot_timeout=1))
    line = wait_for("the round to be abandoned", lambda: next(
        (r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()), None))
    assert line.startswith("epoch=2 Flowing({'events:0': 4, 'events:1': 4}) -> epoch=3 "
                           "Initialize: snapshot round 2 abandoned after 1 s: "), line
    assert all(b in line for b in BOLTS) and line.endswith("did not report")
    assert read_committed(zk, dep.paths) is None


def test_a_new_leader_with_a_skewed_clock_gives_waits_their_full_time(
    zk: KazooClient, topology: str, deployment: Callable[..., Deployment],
    negotiators: Callable[..., ShellThread], caplog: pytest.LogCaptureFixture,
) -> None:
    """The master's entered_at is the old leader's wall clock: a new leader whose clock is
    an hour ahead must not see the round in progress as an hour late and abandon it."""
    caplog.set_level(logging.INFO, logger="negotiator")
    config = Config(snapshot_interval=0.2, initialize_timeout=10, rewind_timeout=10,
                    pause_timeout=10, snapshot_timeout=6)
    dep = deployment(snapshot_delay=2.0)
    first = negotiators("first", config)
    in_round = wait_for("a round in progress", lambda: (m := read_master(zk, dep.paths))
                        and isinstance(m.state, Flowing) and m.state.clock is not None and m)
    first.stop()
    negotiators("ahead", config, clock=lambda: time.time() + 3600)
    committed = wait_for("the round to commit", lambda: committed_epoch(zk, dep.paths)
                         >= in_round.state.epoch, 30)
    assert committed
    assert not [r for r in caplog.records if "abandoned" in r.getMessage()]


def test_a_write_failing_after_the_election_check_is_read_as_such(
        zk: KazooClient, topology: str) -> None:
    """ZooKeeper's answer to a failed transaction, as the leader reads it: a check that
    passed before a record that changed under it is no lost election (the operations before
    the failed one come back rolled back); a failed check is."""
    election, record = f"/{topology}/election", f"/{topology}/master"
    zk.create(election, b"", makepath=True)
    zk.create(record, b"v0")
    zk.set(record, b"v1")  # version 1: a write at version 0 fails
    changed = zk.transaction()
    changed.check(election, 0)
    changed.set_data(record, b"v2", version=0)
    assert not election_lost(changed.commit())
    gone = zk.transaction()
    gone.check(f"/{topology}/no-such-election-node", 0)
    gone.set_data(record, b"v2", version=1)
    assert election_lost(gone.commit())
    assert zk.get(record)[0] == b"v1"  # neither wrote
