"""The embedded dev stack against its real services (issue: foundation)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError

from hailstorm import kafka
from hailstorm.dev.services import DevStack, pid_alive, stop_pid

pytestmark = pytest.mark.integration


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_zookeeper_create_cas_ephemeral(zookeeper) -> None:
    owner = KazooClient(hosts=zookeeper.hosts)
    watcher = KazooClient(hosts=zookeeper.hosts)
    owner.start(timeout=15)
    watcher.start(timeout=15)
    try:
        path = f"/test/{_unique('cas')}"
        owner.create(path, b"v0", makepath=True)
        _data, stat = watcher.get(path)
        owner.set(path, b"v1", version=stat.version)
        with pytest.raises(BadVersionError):
            watcher.set(path, b"stale", version=stat.version)  # CAS on a stale version fails
        assert watcher.get(path)[0] == b"v1"

        ephemeral = f"{path}/living"
        owner.create(ephemeral, b"here", ephemeral=True)
        assert watcher.exists(ephemeral)
        owner.stop()
        owner.close()
        # The session is closed cleanly, so the ephemeral node goes at once.
        assert watcher.exists(ephemeral) is None
    finally:
        watcher.stop()
        watcher.close()


def test_broker_partitions_produce_and_seek(kafka_bootstrap: str) -> None:
    topic = _unique("seek")
    assert kafka.create_topic(kafka_bootstrap, topic, 4)
    assert not kafka.create_topic(kafka_bootstrap, topic, 4)  # already exists: harmless
    assert kafka.partitions_of(kafka_bootstrap, topic) == [0, 1, 2, 3]
    messages = [(i % 4, f"k{i}".encode(), f"v{i}".encode()) for i in range(400)]
    assert kafka.produce(kafka_bootstrap, topic, messages) == 400

    # Partition 2 holds v2, v6, v10, ... at offsets 0, 1, 2, ...; start reading at offset 37.
    records = list(kafka.read_range(kafka_bootstrap, topic, 2, 37, 99))
    assert [r.offset for r in records] == list(range(37, 100))
    assert [r.value for r in records] == [f"v{2 + 4 * o}".encode() for o in range(37, 100)]
    assert records[0].key == f"k{2 + 4 * 37}".encode()


def test_broker_watermarks_are_exact(kafka_bootstrap: str) -> None:
    """Apache Kafka's high watermark is the log end: ``hailstorm status`` shows exact lag."""
    topic = _unique("hwm")
    kafka.create_topic(kafka_bootstrap, topic, 1)
    out = kafka.producer(kafka_bootstrap, **{"linger.ms": 200})
    for i in range(10):
        out.produce(topic, value=f"m{i}".encode(), partition=0)
    assert out.flush(30) == 0  # one batch of 10 records at offsets 0..9

    consumer = kafka.consumer(kafka_bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    records = list(kafka.read_range(kafka_bootstrap, topic, 0, 0, 9))
    assert [r.offset for r in records] == list(range(10))
    assert (low, high) == (0, 10)


def test_postgres_transaction(postgres_url: str) -> None:
    table = _unique("tx")
    with psycopg.connect(postgres_url) as conn:
        conn.execute(f"CREATE TABLE {table} (k text PRIMARY KEY, v bigint)")
        conn.commit()
        with conn.transaction():
            conn.execute(f"INSERT INTO {table} VALUES ('a', 1)")
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute(f"INSERT INTO {table} VALUES ('b', 2)")
            raise RuntimeError("roll back")
        rows = conn.execute(f"SELECT k, v FROM {table} ORDER BY k").fetchall()
    assert rows == [("a", 1)]


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hailstorm-cli-"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        DevStack(path).down()  # in case a test failed half-way
        shutil.rmtree(path, ignore_errors=True)


def hailstorm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hailstorm", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


def test_dev_up_twice_status_env_down(state_dir: Path) -> None:
    """Running services are left alone, stopped ones start again on their data, 'dev down'
    signals only what it started, and only 'dev down --wipe' deletes the data."""
    first = hailstorm("dev", "up", "--state-dir", str(state_dir))
    assert first.returncode == 0, first.stderr
    pids = [row.pid for row in DevStack(state_dir).status()]
    assert all(pids)
    # What it writes is its owner's only: the stack file holds the database's password.
    assert stat.S_IMODE((state_dir / "stack.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((state_dir / "snapshots").stat().st_mode) == 0o700

    second = hailstorm("dev", "up", "--state-dir", str(state_dir))
    assert second.returncode == 0, second.stderr
    assert "already running" in second.stderr
    assert [row.pid for row in DevStack(state_dir).status()] == pids  # nothing restarted

    status = hailstorm("dev", "status", "--state-dir", str(state_dir))
    assert status.returncode == 0 and status.stdout.count("running") == 3

    env = hailstorm("dev", "env", "--state-dir", str(state_dir))
    assert env.returncode == 0
    names = [line.split("=", 1)[0] for line in env.stdout.splitlines()]
    assert names == [
        "export HAILSTORM_ZK",
        "export HAILSTORM_KAFKA",
        "export HAILSTORM_DATABASE_URL",
        "export HAILSTORM_SNAPSHOTS",
    ]

    _stopped_services_come_back_on_their_data(state_dir)
    _down_stops_only_recorded_processes(state_dir)
    down = hailstorm("dev", "down", "--wipe", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(pid) for pid in pids if pid)  # postmaster included
    assert not (state_dir / "stack.json").exists()
    assert not (state_dir / "postgres").exists() and not (state_dir / "zookeeper").exists()
    assert hailstorm("dev", "status", "--state-dir", str(state_dir)).returncode == 1


def _stopped_services_come_back_on_their_data(state_dir: Path) -> None:
    """A service stopped under the stack (here: SIGKILLed by its pid, Kafka's node too)
    comes back on its data and its port, nothing it acknowledged lost; 'dev down' keeps the
    data for the next 'up' (the caller wipes it)."""
    before = DevStack(state_dir).load()
    assert before is not None
    url, zk_hosts = before.database_url("hailstorm"), before.address("zookeeper")
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE kept (k text PRIMARY KEY)")
        conn.execute("INSERT INTO kept VALUES ('a'), ('b')")
    zk = KazooClient(hosts=zk_hosts)
    zk.start(timeout=15)
    zk.create("/kept", b"here")
    zk.stop()
    zk.close()
    topic = _unique("kept")
    kafka.create_topic(before.kafka_bootstrap, topic, 2)
    values = [f"v{i}".encode() for i in range(100)]
    kafka.produce(before.kafka_bootstrap, topic, [(i % 2, None, v) for i, v in enumerate(values)])
    for name in ("postgres", "zookeeper", "kafka-1"):
        record = before.services[name]
        stop_pid(record.pid, record.marker, sig=signal.SIGKILL, timeout=10)

    again = hailstorm("dev", "up", "--state-dir", str(state_dir))
    assert again.returncode == 0, again.stderr
    assert "starting postgres again on its data" in again.stderr
    after = DevStack(state_dir).load()
    assert after is not None
    assert {n: r.port for n, r in after.services.items()} == {
        n: r.port for n, r in before.services.items()}

    def everything_kept() -> None:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT k FROM kept ORDER BY k").fetchall() == [("a",), ("b",)]
        client = KazooClient(hosts=zk_hosts)
        client.start(timeout=15)
        try:
            assert client.get("/kept")[0] == b"here"
        finally:
            client.stop()
            client.close()
        for partition in (0, 1):
            assert [r.value for r in kafka.read_range(before.kafka_bootstrap, topic, partition,
                                                      0, 49, timeout=60)] == values[partition::2]

    everything_kept()
    down = hailstorm("dev", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0 and "data is kept" in down.stderr, down.stderr
    assert (state_dir / "postgres" / "data").exists() and (state_dir / "stack.json").exists()
    assert hailstorm("dev", "up", "--state-dir", str(state_dir)).returncode == 0
    everything_kept()


def _down_stops_only_recorded_processes(state_dir: Path) -> None:
    """A recycled pid is never signalled: with Kafka's record pointing at a bystander
    process, 'dev down' stops the rest and leaves the bystander alone."""
    stack = DevStack(state_dir)
    state = stack.load()
    assert state is not None
    real_kafka = state.services["kafka-1"]
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        stack._save(replace(state, services={**state.services,
                                             "kafka-1": replace(real_kafka, pid=bystander.pid)}))
        stack.down()
        assert bystander.poll() is None, "down signalled a process it did not start"
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()
        stop_pid(real_kafka.pid, real_kafka.marker)
        stack._save(state)  # the true record again, for the caller's 'down --wipe'
    assert not pid_alive(real_kafka.pid)


def test_port_in_use_is_one_clear_line(state_dir: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = hailstorm("dev", "up", "--state-dir", str(state_dir), "--zk-port", str(port))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert f"port {port}" in errors[0] and "--zk-port 0" in errors[0]


def test_java_missing_is_one_clear_line(state_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # no java here
    result = hailstorm("dev", "up", "--state-dir", str(state_dir), env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: java not found"), result.stderr
    assert "openjdk-17-jre-headless" in lines[-1]


def _without_maven(tmp_path: Path) -> dict[str, str]:
    """An environment with Java (JAVA_HOME) but no Maven, and an empty artifact cache."""
    java = Path(shutil.which("java") or "/usr/bin/java").resolve()
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env.update(PATH=str(Path(sys.executable).parent), JAVA_HOME=str(java.parent.parent),
               HAILSTORM_CACHE=str(tmp_path / "cache"))
    return env


def test_maven_missing_is_one_clear_line(state_dir: Path, tmp_path: Path) -> None:
    result = hailstorm("dev", "up", "--state-dir", str(state_dir), env=_without_maven(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: mvn not found"), result.stderr
    assert "apt-get install maven" in lines[-1]


def test_a_failed_kafka_download_is_one_clear_line(state_dir: Path, tmp_path: Path) -> None:
    """Maven that cannot reach Maven Central (here: one that always fails as it would)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text("#!/bin/sh\necho '[ERROR] Failed to execute goal: Could not resolve "
                   "dependencies for project hailstorm.dev:kafka-runtime'\nexit 1\n")
    mvn.chmod(0o755)
    env = _without_maven(tmp_path)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = hailstorm("dev", "up", "--state-dir", str(state_dir), env=env)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: fetching Apache Kafka"), result.stderr
    assert "Could not resolve dependencies" in last and "Maven Central" in last
    assert not (tmp_path / "cache" / "kafka_2.13-4.1.1" / "libs").exists()  # nothing half-made


def test_demo_runs_word_count_through_a_crash_and_leaves_nothing_running(
    state_dir: Path,
) -> None:
    demo_dir = state_dir / "demo"
    result = hailstorm("demo", "--state-dir", str(demo_dir), "--lines", "20000")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kill -9 bolt:counts:" in result.stdout
    assert "the table equals the reference model exactly" in result.stdout
    started = [int(pid) for pid in re.findall(r"stopped [\w-]+ \(pid (\d+)\)", result.stdout)]
    assert len(started) == 3
    assert not any(pid_alive(pid) for pid in started)
    assert not (demo_dir / "stack.json").exists()
