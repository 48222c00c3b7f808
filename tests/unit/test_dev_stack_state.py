"""The dev stack's recorded state: which services a stack has and what it exports. Pure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.dev.kafka_broker import (
    KAFKA_VERSION,
    FetchProgress,
    KafkaSetupError,
    NodePorts,
    ensure_kafka_libs,
)
from hailstorm.dev.services import (
    SERVICES,
    SPARK_MASTER,
    SPARK_MASTER_VAR,
    DevStack,
    DevStackError,
    Host,
    KafkaClusterState,
    ServiceRecord,
    StackState,
    failure_line,
    spark_worker_name,
)
from hailstorm.dev.services.state import (
    ServiceOnDisk,
    StartAction,
    plan_start,
    plan_up,
    restart_port,
)


def _record(name: str, port: int) -> ServiceRecord:
    return ServiceRecord(name=name, port=port, pid=1, log=f"{name}.log", marker=name)


def test_a_stack_with_spark_workers_lists_and_exports_its_cluster() -> None:
    state = StackState(state_dir="/tmp/x", database_password="pw", spark_workers=2,
                       spark_cores=4)
    assert state.service_names() == ["zookeeper", "kafka-1", "postgres", SPARK_MASTER,
                                     spark_worker_name(1), spark_worker_name(2)]
    assert state.spark_master_url is None
    state.services[SPARK_MASTER] = _record(SPARK_MASTER, 7077)
    assert state.spark_master_url == "spark://127.0.0.1:7077"
    again = StackState.from_json(state.to_json())
    assert (again.spark_workers, again.spark_cores) == (2, 4)
    assert again.spark_master_url == state.spark_master_url


def test_a_stack_without_spark_exports_no_master() -> None:
    state = StackState(state_dir="/tmp/x", database_password="pw")
    assert SPARK_MASTER not in state.service_names()
    old = StackState.from_json('{"state_dir": "/tmp/x", "services": {}}')  # before Spark
    assert old.spark_workers == 0 and old.spark_master_url is None
    state.services["zookeeper"] = _record("zookeeper", 2181)
    state.services["postgres"] = _record("postgres", 5432)
    assert SPARK_MASTER_VAR not in _env_without_kafka(state)


def _env_without_kafka(state: StackState) -> dict[str, str]:
    state.kafka = KafkaClusterState("id", "plaintext", {1: NodePorts(client=9092, controller=9093)})
    return state.env()


def test_services_on_test_hosts_are_exported_at_their_addresses() -> None:
    hosts = {"zookeeper": Host("10.200.0.11", "t-zk"), "kafka": Host("10.200.0.12", "t-kafka"),
             "postgres": Host("10.200.0.13", "t-pg"), SPARK_MASTER: Host("10.200.0.14", "t-m")}
    state = StackState(state_dir="/tmp/x", database_password="pw", hosts=hosts, spark_workers=1)
    for name, port in (("zookeeper", 2181), ("postgres", 5432), (SPARK_MASTER, 7077)):
        state.services[name] = _record(name, port)
    state.kafka = KafkaClusterState("id", "plaintext",
                                    {1: NodePorts(client=9092, controller=9093)},
                                    host="10.200.0.12")
    again = StackState.from_json(state.to_json())
    assert again.hosts == hosts and again.kafka == state.kafka
    env = again.env()
    assert env["HAILSTORM_ZK"] == "10.200.0.11:2181"
    assert env["HAILSTORM_KAFKA"] == "10.200.0.12:9092"
    assert env["HAILSTORM_DATABASE_URL"].endswith("@10.200.0.13:5432/hailstorm")
    assert env[SPARK_MASTER_VAR] == "spark://10.200.0.14:7077"
    assert again.host("kafka-1") == hosts["kafka"]
    assert again.host(spark_worker_name(1)) == Host()  # not placed: this machine's loopback


def test_a_host_starts_its_commands_in_its_namespace() -> None:
    assert Host().command(["java", "-version"]) == ["java", "-version"]
    assert Host("10.0.0.2", "ns1").command(["java"]) == ["ip", "netns", "exec", "ns1", "java"]


@pytest.mark.parametrize("address, netns", [("example.org", None), ("10.0.0.300", None),
                                            ("10.0.0.2", "-rf"), ("10.0.0.2", "a/b"),
                                            ("10.0.0.2", "")])
def test_a_bad_host_is_refused(address: str, netns: str | None) -> None:
    with pytest.raises(DevStackError):
        Host(address, netns)


def test_a_stack_refuses_to_place_a_service_it_does_not_have(tmp_path: Path) -> None:
    with pytest.raises(DevStackError, match="cannot place spark-worker-3"):
        DevStack(tmp_path, spark_workers=2, hosts={spark_worker_name(3): Host("10.0.0.2")})


# ------------------------------------------------------------- what 'up' does per service

_RUNNING = ServiceOnDisk(recorded=True, alive=True, has_data=True)
_STOPPED = ServiceOnDisk(recorded=True, alive=False, has_data=True)
_NOTHING = ServiceOnDisk(recorded=False, alive=False, has_data=False)


def test_up_keeps_a_running_service_and_restarts_a_stopped_one_on_its_data() -> None:
    plan = plan_up(True, {"zookeeper": _RUNNING, "kafka": _STOPPED, "postgres": _STOPPED})
    assert plan == {"zookeeper": StartAction.KEEP, "kafka": StartAction.RESTART,
                    "postgres": StartAction.RESTART}


def test_up_creates_only_what_has_no_data() -> None:
    assert plan_up(False, dict.fromkeys(SERVICES, _NOTHING)) == dict.fromkeys(
        SERVICES, StartAction.CREATE)
    # A record whose data directory is gone: nothing to keep, so made again.
    gone = ServiceOnDisk(recorded=True, alive=False, has_data=False)
    assert plan_start("postgres", gone) is StartAction.CREATE


@given(recorded=st.booleans(), alive=st.booleans(), has_data=st.booleans())
def test_no_plan_ever_recreates_a_service_that_has_data(recorded: bool, alive: bool,
                                                        has_data: bool) -> None:
    """CREATE (initdb, format) is the only action that would overwrite data: never with data."""
    action = plan_start("postgres", ServiceOnDisk(recorded, alive, has_data))
    if has_data:
        assert action is not StartAction.CREATE
    if action is StartAction.KEEP:
        assert recorded and alive


def test_data_without_its_state_file_is_refused_with_the_way_forward() -> None:
    found = {"zookeeper": _NOTHING, "kafka": ServiceOnDisk(False, False, True),
             "postgres": ServiceOnDisk(False, False, True)}
    with pytest.raises(DevStackError, match=r"kafka, postgres data .* dev reset"):
        plan_up(False, found)


@pytest.mark.parametrize("recorded, configured, free, expected", [
    (5432, 0, True, 5432),     # the port it had: clients keep their address
    (5432, 0, False, None),    # taken meanwhile: a free one
    (None, 0, True, None),     # never started: a free one
    (5432, 6000, True, 6000),  # asked for: that one
])
def test_a_restarted_service_keeps_its_port_where_possible(
        recorded: int | None, configured: int, free: bool, expected: int | None) -> None:
    assert restart_port(recorded, configured, free) == expected


def test_a_maven_fetch_says_how_far_it_got_every_few_seconds() -> None:
    fetch = FetchProgress(every=5.0)
    base = "Downloaded from central: https://repo.maven.apache.org/maven2/org/apache/kafka"
    lines = [
        (0.0, "[INFO] Scanning for projects..."),
        (0.5, f"{base}/kafka_2.13/4.1.1/kafka_2.13-4.1.1.pom (2.1 kB at 40 kB/s)"),
        (1.0, f"{base}/kafka-clients/4.1.1/kafka-clients-4.1.1.jar (6.6 MB at 3.1 MB/s)"),
        (6.0, f"{base}/kafka_2.13/4.1.1/kafka_2.13-4.1.1.jar (555 B at 14 kB/s)"),
        (6.5, "Downloading from central: https://repo.maven.apache.org/maven2/x.jar"),
    ]
    said = [fetch.observe(line, now) for now, line in lines]
    assert said == [
        None,
        f"fetching Apache Kafka {KAFKA_VERSION}: 1 downloaded, 0.0 MB so far "
        "(the latest kafka_2.13-4.1.1.pom)",
        None,  # within five seconds of the last line
        f"fetching Apache Kafka {KAFKA_VERSION}: 3 downloaded, 6.6 MB so far "
        "(the latest kafka_2.13-4.1.1.jar)",
        None,
    ]
    assert fetch.size == 2_100 + 6_600_000 + 555


FAKE_MAVEN = """#!/bin/sh
# Maven's output for a fetch: two downloads, then the jars in -DoutputDirectory.
for arg; do case $arg in -DoutputDirectory=*) out=${arg#-DoutputDirectory=};; esac; done
echo "Downloaded from central: https://repo/kafka_2.13-$VERSION.pom (2.1 kB at 40 kB/s)"
echo "Downloaded from central: https://repo/kafka_2.13-$VERSION.jar (6.6 MB at 3.1 MB/s)"
[ -n "$FAIL" ] && { echo "[ERROR] Could not resolve dependencies"; exit 1; }
mkdir -p "$out" && touch "$out/kafka_2.13-$VERSION.jar"
"""


def test_the_kafka_fetch_reports_progress_and_names_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "mvn").write_text(FAKE_MAVEN)
    (tools / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HAILSTORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VERSION", KAFKA_VERSION)
    monkeypatch.setenv("FAIL", "1")
    said: list[str] = []
    with pytest.raises(KafkaSetupError, match="Could not resolve dependencies"):
        ensure_kafka_libs(said.append)
    monkeypatch.delenv("FAIL")
    libs = ensure_kafka_libs(said.append)
    assert (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()
    assert said[0].startswith(f"fetching Apache Kafka {KAFKA_VERSION} from Maven Central")
    assert said[1] == (f"fetching Apache Kafka {KAFKA_VERSION}: 1 downloaded, 0.0 MB so far "
                       f"(the latest kafka_2.13-{KAFKA_VERSION}.pom)")
    assert ensure_kafka_libs(said.append) == libs and len(said) == 4  # cached: nothing said


def test_a_failed_tool_is_named_by_its_cause_not_a_stack_frame() -> None:
    trace = (
        "Exception in thread \"main\" java.lang.RuntimeException: formatting failed\n"
        "\tat kafka.tools.StorageTool$.execute(StorageTool.scala:120)\n"
        "Caused by: java.nio.file.FileSystemException: /data/meta.properties: No space left\n"
        "\tat java.base/sun.nio.fs.UnixException.translateToIOException(UnixException.java:100)\n"
        "\t... 3 more\n"
        "\tat kafka.tools.StorageTool.main(StorageTool.scala)\n"
    )
    assert failure_line(trace) == (
        "Caused by: java.nio.file.FileSystemException: /data/meta.properties: No space left")
    pg = "initdb: error: directory exists\ninitdb: hint: remove it\n\n"
    assert failure_line(pg) == "initdb: error: directory exists"
    assert failure_line("needs at least 1 GB\n") == "needs at least 1 GB"  # prose, not a frame
    assert failure_line("") == failure_line("\tat x.y(Z.java)\n") == "no output"
