"""The word count across hosts: ZooKeeper, Kafka, PostgreSQL, the Spark master and two Spark
workers each run on a test host of their own (a network namespace the test makes, see
:mod:`hailstorm.dev.netns`); the driver and the negotiators run on the test's own host.

Processors bind and advertise their host's address (``--host auto``), so their frames cross
the links between the worker hosts. Pulling the cable of a worker host that runs processors in
the middle of the run costs a recovery on the other workers and nothing else (Spark gives the
cut-off executor up once it heard no heartbeat from it for 20 s, and the stage's next attempt
runs on the other workers): the run ends
exactly in the model's state, and the cut-off processors, once the cable is back, are zombies
that change nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.dev.netns import NetworkUnavailable, TestNetwork
from hailstorm.dev.services import (
    SPARK_MASTER,
    SPARK_MASTER_VAR,
    DevStack,
    pid_alive,
    spark_worker_name,
)
from hailstorm.exposure import ALLOW_OPEN_FLAG

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WORKERS = ("worker-1", "worker-2", "worker-3")
HOSTS = ("zookeeper", "kafka", "postgres", "spark-master", *WORKERS)
SLOTS = 4
"""Task slots per worker, fewer than the word count's 7 processors: no worker can hold the
barrier stage alone, so every placement Spark can make spreads it over two workers at
least, and any two workers (8 slots) can hold it once a third is cut off."""
ALL_EXECUTORS = (
    ("spark.cores.max", str(SLOTS * len(WORKERS))),
    ("spark.executor.cores", str(SLOTS)),
    ("spark.scheduler.minRegisteredResourcesRatio", "1.0"),
    ("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s"),
)
"""One executor per worker, and the driver starts the stage once every executor registered.
How Spark places a barrier stage depends on which executors are free when it offers them (a
resubmitted stage's may still be ending its old tasks; two executors on one worker once took
the whole stage): with workers smaller than the stage, the placement is across hosts
whatever the timing."""


@pytest.fixture(scope="module")
def network() -> Iterator[TestNetwork]:
    """Seven test hosts on one switched network."""
    try:
        net = TestNetwork(HOSTS).__enter__()
    except NetworkUnavailable as exc:
        pytest.skip(f"network namespaces cannot be made here: {exc}")
    try:
        yield net
    finally:
        net.close()


@pytest.fixture(scope="module")
def stack(network: TestNetwork) -> Iterator[DevStack]:
    """A dev stack with every service on a test host of its own."""
    state_dir = Path(tempfile.mkdtemp(prefix="hailstorm-hosts-"))
    os.chmod(state_dir, 0o755)  # the 'postgres' user reaches its data directory
    hosts = {name: network.hosts[name] for name in ("zookeeper", "kafka", "postgres")}
    hosts[SPARK_MASTER] = network.hosts["spark-master"]
    for i, worker in enumerate(WORKERS, 1):
        hosts[spark_worker_name(i)] = network.hosts[worker]
    dev = DevStack(state_dir, hosts=hosts, spark_workers=len(WORKERS), spark_cores=SLOTS,
                   startup_timeout=120)
    try:
        dev.up()
        yield dev
    finally:
        dev.down()  # every process out of the namespaces before they are removed
        shutil.rmtree(state_dir, ignore_errors=True)


def test_services_listen_on_their_own_hosts(network: TestNetwork, stack: DevStack) -> None:
    env = stack.env()
    addresses = {name: network.hosts[name].address for name in HOSTS}
    assert env["HAILSTORM_ZK"].startswith(f"{addresses['zookeeper']}:")
    assert env["HAILSTORM_KAFKA"].startswith(f"{addresses['kafka']}:")
    assert f"@{addresses['postgres']}:" in env["HAILSTORM_DATABASE_URL"]
    assert env[SPARK_MASTER_VAR].startswith(f"spark://{addresses['spark-master']}:")


def test_word_count_across_hosts_survives_a_pulled_cable(network: TestNetwork, stack: DevStack,
                                                         tmp_path: Path) -> None:
    env = stack.env()
    addresses = StackAddresses.from_env(env)
    workers = {network.hosts[w].address: w for w in WORKERS}
    topic = "words"
    kafka.recreate_topic(addresses.kafka, topic, 4)
    partitions = kafka.partitions_of(addresses.kafka, topic)
    produced = Produced(topic)
    lines = wordcount_lines(9000, seed=43)
    with TopologyRun(addresses, REPO / "topologies" / "wordcount.py",
                     log_dir=tmp_path / "logs", master=env[SPARK_MASTER_VAR],
                     processor_host="auto", driver_address=network.controller,
                     spark_conf=ALL_EXECUTORS) as run:
        # ZooKeeper off loopback and open: refused unless said so (docs/security.md).
        run.driver_options.append(ALLOW_OPEN_FLAG)
        run.negotiator_options.append(ALLOW_OPEN_FLAG)
        run.start()
        run.wait_flowing(300)
        produce(addresses.kafka, produced, lines[:3000], partitions)
        run.wait_committed(produced.clock(), 300)
        hosts_used = {report.info["host"] for report in run.processors().values()}
        # Every processor advertises its worker host's address, and two hosts at least run
        # some: frames between them cross the test network.
        assert len(hosts_used) >= 2 and hosts_used <= set(workers), hosts_used

        victim = sorted(hosts_used)[0]
        cut_off = {int(report.info["pid"]) for report in run.processors().values()
                   if report.info["host"] == victim}
        run.expect_restart(time.time(), f"the cable of {workers[victim]} was pulled")
        network.cut(workers[victim])
        produce(addresses.kafka, produced, lines[3000:6000], partitions)
        run.wait_committed(produced.clock(), 300)
        # The fault took effect: the round that covers the new lines ran without the host.
        survivors = {report.info["host"] for report in run.processors().values()}
        assert survivors and victim not in survivors, survivors
        # The stage attempt failed because Spark gave the cut-off executor up (no heartbeat
        # for 20 s), not because the surviving tasks gave up after abandoned recoveries.
        given_up = [line for line in run.log("driver").splitlines()
                    if "failed (Spark lost executor" in line]
        assert given_up and "heartbeat timed out" in given_up[0], given_up

        # Plugged back in, its processors learn that their sessions expired and end.
        network.restore(workers[victim])
        wait_for("the cut-off processors to end",
                 lambda: not any(pid_alive(pid) for pid in cut_off), 180)
        produce(addresses.kafka, produced, lines[6000:], partitions)
        comparison = run.final_comparison(produced)
    assert comparison.ok, comparison.first()
