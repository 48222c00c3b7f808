"""Word count really runs: negotiator + driver (Spark local) + processors, real ZooKeeper and
Kafka; the committed snapshots must equal the reference model exactly, also after a
processor is SIGKILLed mid-run."""

from __future__ import annotations

import contextlib
import os
import random
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

from hailstorm import kafka
from hailstorm.devstack import pid_alive
from hailstorm.model import Message, run_model
from hailstorm.snapshots import DirectorySnapshotStore
from hailstorm.topology import BoltSpec, load_topology
from negotiator.layout import CommittedRecord, MasterRecord, ProcessorReport, TopologyPaths

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordcount.py"
TOPIC = "words"
PARTITIONS = 4
VOCABULARY = [f"{a}{b}" for a in ("al", "be", "ce", "do", "ek", "fu", "ga", "hi")
              for b in ("ta", "ro", "mi", "nu", "xo", "sa", "le", "pi", "qu", "zy")]


def wait_for(what: str, predicate: Callable[[], Any], timeout: float,
             alive: Callable[[], None] = lambda: None) -> Any:
    """Poll ``predicate`` (test code only) until truthy; ``alive`` raises if a process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def lines(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(0, 9))) + rng.choice(
        ["", ".", "!", " 42"]) for _ in range(count)]


def produce(bootstrap: str, texts: list[str], partitions: list[int]) -> dict[int, int]:
    """Produce round-robin over ``partitions``; the last offset written to each."""
    last: dict[int, int] = {}
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

    out = kafka.producer(bootstrap)
    for i, text in enumerate(texts):
        while True:
            try:
                out.produce(TOPIC, value=text.encode(), partition=partitions[i % len(partitions)],
                            on_delivery=delivered)
                break
            except BufferError:
                out.poll(0.1)
    assert out.flush(60) == 0 and not errors, errors
    return last


class Run:
    """One deployment: a negotiator and a driver subprocess for a fresh topology name."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.name = f"wc_{uuid.uuid4().hex[:8]}"
        self.zk_hosts = env["HAILSTORM_ZK"]
        self.bootstrap = env["HAILSTORM_KAFKA"]
        self.snapshots = tmp / "snapshots"
        self.logs = tmp
        self.paths = TopologyPaths(self.name)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.processor_pids: set[int] = set()
        kafka.create_topic(self.bootstrap, TOPIC, PARTITIONS)
        self.partitions = kafka.partitions_of(self.bootstrap, TOPIC)
        self.zk = KazooClient(hosts=self.zk_hosts)
        self.zk.start(timeout=20)
        self.env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable,
                        HAILSTORM_ZK=self.zk_hosts, HAILSTORM_KAFKA=self.bootstrap,
                        HAILSTORM_SNAPSHOTS=str(self.snapshots))

    def spawn(self, label: str, args: list[str]) -> None:
        with (self.logs / f"{label}.log").open("wb") as out:
            self.procs[label] = subprocess.Popen([sys.executable, *args], cwd=REPO,
                                                 env=self.env, stdout=out,
                                                 stderr=subprocess.STDOUT)

    def start(self) -> None:
        self.spawn("negotiator", ["-m", "negotiator", str(TOPOLOGY), "--name", self.name,
                                  "--snapshot-interval", "1", "--timeout", "30"])
        self.spawn("driver", ["-m", "hailstorm", "run", str(TOPOLOGY), "--name", self.name])

    def alive(self) -> None:
        for label, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{label} exited with {proc.returncode}:\n"
                                     f"{self.log(label)[-3000:]}")

    def log(self, label: str) -> str:
        path = self.logs / f"{label}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def committed(self) -> CommittedRecord | None:
        try:
            return CommittedRecord.from_json(self.zk.get(self.paths.committed)[0])
        except NoNodeError:
            return None

    def master(self) -> MasterRecord | None:
        try:
            return MasterRecord.from_json(self.zk.get(self.paths.master)[0])
        except NoNodeError:
            return None

    def reports(self) -> dict[str, ProcessorReport]:
        result = {}
        for child in self.zk.get_children(self.paths.living):
            try:
                report = ProcessorReport.from_json(self.zk.get(f"{self.paths.living}/{child}")[0])
            except NoNodeError:
                continue
            result[child] = report
            if "pid" in report.info:
                self.processor_pids.add(int(report.info["pid"]))
        return result

    def covers(self, target: dict[int, int]) -> CommittedRecord | None:
        committed = self.committed()
        if committed is None:
            return None
        if all(committed.clock.get((TOPIC, p), -1) >= o for p, o in target.items()):
            return committed
        return None

    def stop(self) -> None:
        self.reports_safely()
        for label in ("driver", "negotiator"):
            proc = self.procs.get(label)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(pid_alive(p) for p in self.processor_pids):
            time.sleep(0.2)
        for pid in self.processor_pids:  # grandchildren we started through Spark
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.zk.stop()
        self.zk.close()
        for label in self.procs:
            sys.stderr.write(f"--- {label}.log (tail)\n{self.log(label)[-6000:]}\n")

    def reports_safely(self) -> None:
        with contextlib.suppress(Exception):
            self.reports()


@pytest.fixture()
def deployment(stack_env: dict[str, str], tmp_path: Path) -> Iterator[Run]:
    run = Run(stack_env, tmp_path)
    try:
        yield run
    finally:
        run.stop()


def read_messages(bootstrap: str, clock: dict[Any, int]) -> list[Message]:
    messages: list[Message] = []
    for (topic, partition), last in sorted(clock.items()):
        for record in kafka.read_range(bootstrap, topic, partition, 0, last, timeout=60):
            messages.append(Message(topic, partition, record.offset, record.value))
    return messages


def assert_matches_model(run: Run, committed: CommittedRecord) -> None:
    """Every counts instance's committed snapshot equals the model's state exactly."""
    topology = load_topology(str(TOPOLOGY))
    bolt = topology.node("counts")
    assert isinstance(bolt, BoltSpec)
    model = run_model(topology, read_messages(run.bootstrap, dict(committed.clock)))
    store = DirectorySnapshotStore(run.snapshots)
    states = []
    for i in range(bolt.parallelism):
        ref = committed.snapshot_for(f"bolt:counts:{i}")
        assert ref is not None, committed
        clock, state = store.load(ref, bolt.state)
        assert clock == committed.clock
        assert state == model.instance_states("counts")[i], f"instance {i} differs"
        states.append(state)
    merged = bolt.state.combine_all(states)
    assert merged == model.bolt_state("counts")
    assert sum(merged.values()) > 50_000


def test_wordcount_commits_exactly_the_model_state(deployment: Run) -> None:
    run = deployment
    dead_topic = "wordcount.dead-letter"
    kafka.create_topic(run.bootstrap, dead_topic, 1)
    target = produce(run.bootstrap, lines(10_000, seed=1), run.partitions)
    run.start()
    wait_for("a first commit", run.committed, 240, run.alive)
    bad = [b"\xff\xfe not utf-8", b"ok \xc3", b"\x80"]
    out = kafka.producer(run.bootstrap)
    for i, value in enumerate(bad):
        out.produce(TOPIC, value=value, partition=run.partitions[i % len(run.partitions)])
    assert out.flush(30) == 0
    target.update(produce(run.bootstrap, lines(10_000, seed=2), run.partitions))
    committed = wait_for("a commit covering every produced offset",
                         lambda: run.covers(target), 240, run.alive)
    assert_matches_model(run, committed)
    letters = [r.value for r in kafka.read_range(run.bootstrap, dead_topic, 0, 0, 2, timeout=30)]
    assert sorted(letters) == sorted(bad)  # type: ignore[type-var]
    reports = run.reports()
    assert len(reports) == PARTITIONS + 2 + 1
    assert all(r.error is None for r in reports.values())


@pytest.mark.parametrize("victim", ["bolt:counts:1", "spout:lines:words:2"])
def test_wordcount_survives_a_sigkilled_processor(deployment: Run, victim: str) -> None:
    run = deployment
    target = produce(run.bootstrap, lines(5_000, seed=3), run.partitions)
    run.start()
    first = wait_for("a first commit", run.committed, 240, run.alive)
    reports = wait_for("every processor's report", lambda: len(r := run.reports()) == 7 and r,
                       30, run.alive)
    pid = int(reports[victim].info["pid"])
    # Keep producing in the background and kill the victim while data flows.
    produced: list[dict[int, int]] = []

    def keep_producing() -> None:
        for chunk in range(20):
            produced.append(produce(run.bootstrap, lines(500, seed=100 + chunk), run.partitions))
            time.sleep(0.1)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    wait_for("the producer to be half-way", lambda: len(produced) >= 10, 60)
    os.kill(pid, signal.SIGKILL)
    producer.join(120)
    assert not producer.is_alive() and len(produced) == 20
    for last in produced:
        for p, o in last.items():
            target[p] = max(target.get(p, -1), o)
    wait_for(
        "the topology to restart with a new incarnation of the victim",
        lambda: (m := run.master()) and m.state.epoch > first.epoch
        and (r := run.reports().get(victim)) and int(r.info["pid"]) != pid, 180, run.alive)
    committed = wait_for("a commit covering every produced offset",
                         lambda: run.covers(target), 240, run.alive)
    assert not pid_alive(pid)
    assert_matches_model(run, committed)
    assert "failed" in run.log("driver")


POISON_TOPOLOGY = '''
from hailstorm import Count, Topology, per_key


def lift(word):
    if word == "poison":
        raise ValueError("poisoned word")
    return 1


topology = Topology("poison")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
topology.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()), lift=lift,
              parallelism=1)
'''


def test_an_exception_in_a_bolt_is_reported_and_fails_the_stage(
    deployment: Run, tmp_path: Path
) -> None:
    """A user function raising ends the processor visibly: error report, negotiator
    restart naming it, Spark stage failed and resubmitted."""
    run = deployment
    topic = f"poison-{uuid.uuid4().hex[:8]}"
    module = tmp_path / "poison.py"
    module.write_text(POISON_TOPOLOGY.replace("{topic}", topic))
    kafka.create_topic(run.bootstrap, topic, 1)
    out = kafka.producer(run.bootstrap)
    for text in ["fine words", "more fine words", "a poison pill", "never reached"]:
        out.produce(topic, value=text.encode(), partition=0)
    assert out.flush(30) == 0
    run.spawn("negotiator", ["-m", "negotiator", str(module), "--name", run.name,
                             "--snapshot-interval", "1", "--timeout", "30"])
    run.spawn("driver", ["-m", "hailstorm", "run", str(module), "--name", run.name])
    wait_for("the negotiator to restart because of the error",
             lambda: "bolt:counts:0 failed: ValueError: poisoned word" in run.log("negotiator"),
             180, run.alive)
    wait_for("the stage to fail and be resubmitted",
             lambda: "resubmitting" in run.log("driver"), 60, run.alive)
    driver = run.log("driver")
    assert "in bolt 'counts', processing tuple 'poison'" in driver or "poison" in driver
    assert run.committed() is None or all(
        o < 2 for o in run.committed().clock.values())  # type: ignore[union-attr]
