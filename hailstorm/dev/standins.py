"""Stand-in processors: many instances of a topology that speak the processor protocol of
docs/negotiator.md to a real ZooKeeper and nothing else (no Kafka, no data plane), so the
negotiator can be run and measured against a topology of a thousand instances on one
machine (``tests/integration/test_negotiator_scale.py``, ``bench/negotiator_scale.py``).

Each stand-in owns its ephemeral ``living/<id>`` node on a ZooKeeper session of its own (its
connection thread shares one kazoo handler with the others). One thread follows the master
state for all of them and answers each state once, as a processor would, writing their
reports asynchronously through one client: Initialize -> ``ready`` (bolts: ``loaded`` = the
committed clock); SpoutsRewind(C) -> spouts ``rewound`` at ``C[p]``; SpoutsPaused -> spouts
``paused``, ``advance`` offsets further; Flowing(C) -> bolts and sinks save the round at
exactly ``C``. A crashed stand-in's session ends (its node vanishes at once); a restarted one
is a new incarnation: it reports ``joining`` and answers nothing before the next Initialize.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.retry import KazooRetry

from hailstorm.dev.harness.wait import wait_for
from hailstorm.protocol.clock import Clock
from hailstorm.protocol.layout import (
    CommittedRecord,
    ExpectedRecord,
    ProcessorId,
    ProcessorReport,
    ProcessorState,
    RecoveryRecord,
    Role,
    SnapshotReport,
    TopologyPaths,
    parse_processor_id,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.protocol.states import Flowing, Initialize, MasterState, SpoutsPaused, SpoutsRewind
from hailstorm.zookeeper import ensure_paths

__all__ = ["StandInFleet", "decide_recovery", "negotiator_process", "wait_commits",
           "write_expected"]

REPO = Path(__file__).resolve().parents[2]
log = logging.getLogger("hailstorm.standins")

SESSION_TIMEOUT = 10.0
"""The stand-ins' ZooKeeper session timeout (a crash ends its session at once anyway)."""


@dataclass
class _StandIn:
    pid: ProcessorId
    session: KazooClient
    joined: int | None = None
    """The Initialize epoch this incarnation joined (None: not yet)."""
    position: int = -1
    answered: set[tuple[str, int, bool]] = field(default_factory=set)


class StandInFleet:
    """Stand-ins for every processor in ``processors`` of ``topology`` (context manager)."""

    def __init__(self, hosts: str, topology: str, processors: Sequence[str], *,
                 advance: int = 5) -> None:
        self.hosts = hosts
        self.paths = TopologyPaths(topology)
        self.advance = advance
        self.handler = SequentialThreadingHandler()
        self.client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT, handler=self.handler)
        self.client.start(timeout=30)
        ensure_paths(self.client, self.paths.directories())
        self.records = TopologyRecords(self.client, self.paths)
        self._retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0, deadline=60)
        self.members: dict[str, _StandIn] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.answers = 0
        """Reports and snapshot reports written so far."""
        for pid in processors:
            self.members[pid] = self._incarnation(pid)
        self._thread = threading.Thread(target=self._follow, name="stand-ins", daemon=True)
        self._thread.start()

    def __enter__(self) -> StandInFleet:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- incarnations ---------------------------------------------------------------------

    def _incarnation(self, pid: str) -> _StandIn:
        session = KazooClient(hosts=self.hosts, timeout=SESSION_TIMEOUT, handler=self.handler)
        session.start(timeout=30)
        report = ProcessorReport(pid, ProcessorState.JOINING, 0, info={"pid": id(session)})
        try:
            session.create(self.paths.living_node(pid), report.to_json(), ephemeral=True)
        except NodeExistsError:
            session.stop()
            session.close()
            raise
        return _StandIn(parse_processor_id(pid), session)

    def crash(self, pid: str) -> None:
        """End ``pid``'s session: its living node vanishes at once."""
        with self._lock:
            member = self.members.pop(pid)
        member.session.stop()
        member.session.close()

    def restart(self, pid: str) -> None:
        """A new incarnation of a crashed ``pid``: it registers and reports ``joining``."""
        member = self._incarnation(pid)
        with self._lock:
            self.members[pid] = member
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(10)
        for member in list(self.members.values()):
            with contextlib.suppress(Exception):
                member.session.stop()
                member.session.close()
        self.client.stop()
        self.client.close()

    # -- the protocol ---------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                record = self.records.master(watch=lambda _event: self._wake.set())
                if record is not None:
                    self._answer(record.state)
            except KazooException as exc:  # a connection lost under load: read again
                log.warning("stand-ins: %s; reading the master again", exc)
                self._wake.set()
                time.sleep(0.1)
                continue
            self._wake.wait(5.0)

    def _answer(self, state: MasterState) -> None:
        key = (type(state).__name__, state.epoch, getattr(state, "clock", None) is not None)
        with self._lock:
            members = [m for m in self.members.values() if key not in m.answered]
        committed = self.records.committed() if isinstance(state, Initialize) else None
        writes = []
        for member in members:
            if isinstance(state, Initialize):
                if member.joined is not None and state.epoch > member.joined:
                    member.joined = None  # a processor ends; here the stand-in joins again
                if member.joined is None:
                    member.joined = state.epoch
            elif member.joined is None or state.epoch < member.joined:
                continue  # a new incarnation waits for an Initialize
            member.answered.add(key)
            write = self._reaction(member, state, committed.clock if committed else {})
            if write is not None:
                writes.append(write)
        pending = [(path, data, create, self.client.set_async(path, data))
                   for path, data, create in writes]  # all in flight at once
        for path, data, create, done in pending:
            try:
                try:
                    done.get(timeout=30)
                except ConnectionLoss:  # the session survives it: write again
                    self._retry(self.client.set, path, data)
            except NoNodeError:
                if not create:
                    continue  # a crashed stand-in's node
                with contextlib.suppress(NodeExistsError):
                    self._retry(self.client.create, path, data, makepath=True)
            self.answers += 1

    def _reaction(self, member: _StandIn, state: MasterState,
                  committed: Clock) -> tuple[str, bytes, bool] | None:
        """``(path, data, create if missing)`` of the stand-in's answer to ``state``."""
        pid, role, epoch = str(member.pid), member.pid.role, state.epoch
        node = self.paths.living_node(pid)
        info: dict[str, Any] = {"pid": id(member.session)}

        def report(answer: ProcessorState, **kw: Any) -> tuple[str, bytes, bool]:
            return node, ProcessorReport(pid, answer, epoch, info=info, **kw).to_json(), False

        if isinstance(state, Initialize):
            return report(ProcessorState.READY,
                          loaded=dict(committed) if role is Role.BOLT else None)
        partition = member.pid.partition
        if role is Role.SPOUT and partition is not None:
            if isinstance(state, SpoutsRewind):
                member.position = state.clock.get(partition, -1)
                return report(ProcessorState.REWOUND, position={partition: member.position})
            if isinstance(state, SpoutsPaused):
                member.position += self.advance
                return report(ProcessorState.PAUSED, position={partition: member.position})
        if role in (Role.BOLT, Role.SINK) and isinstance(state, Flowing) \
                and state.clock is not None:
            saved = SnapshotReport(pid, epoch, dict(state.clock), f"mem://{pid}/{epoch}")
            return self.paths.snapshot_node(pid), saved.to_json(), True
        return None


# -- the negotiator against them ------------------------------------------------------------


def negotiator_process(hosts: str, topology: str, log: Path, *, snapshot_interval: float,
                       timeout: float = 60.0) -> subprocess.Popen[bytes]:
    """The real negotiator daemon (``python -m hailstorm.negotiator``) for ``topology``,
    its output to ``log``; the caller ends it (by its pid)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hailstorm.negotiator", "--name", topology, "--zk", hosts,
             "--snapshot-interval", str(snapshot_interval), "--timeout", str(timeout),
             "--metrics-host", "none"], stdout=out, stderr=subprocess.STDOUT, env=env)


def wait_commits(records: TopologyRecords, count: int, after_epoch: int,
                 timeout: float) -> list[CommittedRecord]:
    """The next ``count`` committed rounds after ``after_epoch``, as they are committed
    (each read as soon as it is; raises :class:`HarnessError` after ``timeout`` s)."""
    seen: list[CommittedRecord] = []

    def next_one() -> bool:
        committed = records.committed()
        newest = seen[-1].epoch if seen else after_epoch
        if committed is not None and committed.epoch > newest:
            seen.append(committed)
        return len(seen) >= count

    wait_for(f"{count} commits after round {after_epoch}", next_one, timeout, poll=0.02)
    return seen


def decide_recovery(fleet: StandInFleet, victim: str, timeout: float) -> tuple[float,
                                                                               RecoveryRecord]:
    """Crash ``victim`` and wait for the negotiator's move to Initialize naming it: the
    seconds from the crash to that decision (the master's ``entered_at``) and its record."""
    records = fleet.records
    before = {r.epoch for r in records.recoveries()}
    crashed_at = time.time()
    fleet.crash(victim)

    def recorded() -> RecoveryRecord | None:
        return next((r for r in records.recoveries()
                     if r.epoch not in before and victim in r.reason), None)

    record: RecoveryRecord = wait_for(f"a recovery naming {victim}", recorded, timeout,
                                      poll=0.02)
    return record.at - crashed_at, record


def write_expected(hosts: str, topology: str, processors: Sequence[str],
                   edges: Sequence[tuple[str, str]]) -> None:
    """The driver's part: the expected list, with the DAG (its nodes, named and of the
    kind their processor ids say, and its ``(source, target)`` edges)."""
    client = KazooClient(hosts=hosts)
    client.start(timeout=30)
    try:
        kinds = {(pid := parse_processor_id(p)).name: str(pid.role) for p in processors}
        graph = {"nodes": [{"name": n, "kind": k} for n, k in sorted(kinds.items())],
                 "edges": [{"source": s, "target": t, "routing": "key"} for s, t in edges]}
        client.create(TopologyPaths(topology).expected,
                      ExpectedRecord(tuple(processors), graph).to_json(), makepath=True)
    finally:
        client.stop()
        client.close()
