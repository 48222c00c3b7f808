"""The word count across hosts: ZooKeeper, Kafka, PostgreSQL, the Spark master and two Spark
workers each run on a test host of their own (a network namespace the test makes, see
:mod:`hailstorm.netns`); the driver and the negotiators run on the test's own host.

Processors bind and advertise their host's address (``--host auto``), so their frames cross
the links between the worker hosts. Pulling one worker host's cable in the middle of the run
costs a recovery on the other worker and nothing else: the run ends exactly in the model's
state, and the cut-off processors, once the cable is back, are zombies that change nothing.
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
from hailstorm.devstack import (
    SPARK_MASTER,
    SPARK_MASTER_VAR,
    DevStack,
    pid_alive,
    spark_worker_name,
)
from hailstorm.harness import (
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.netns import NetworkUnavailable, TestNetwork

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WORKERS = ("worker-1", "worker-2")
HOSTS = ("zookeeper", "kafka", "postgres", "spark-master", *WORKERS)
SLOTS = 8
"""Task slots per worker: either worker alone can run the word count's 7 processors."""
EXECUTOR_CORES = SLOTS // 2
"""Each worker runs two executors of half its slots, so no single executor can hold the
whole stage."""
BOTH_EXECUTORS = (
    ("spark.cores.max", str(SLOTS * len(WORKERS))),
    ("spark.executor.cores", str(EXECUTOR_CORES)),
    ("spark.scheduler.minRegisteredResourcesRatio", "1.0"),
    ("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s"),
)
"""The driver starts the stage once every executor registered, and Spark places a barrier
stage only where the executors offered at once have a slot for every task. Offered all
executors, it hands out tasks one per executor in turn, so both workers get some. But when
a task ends (a stage attempt killed and resubmitted) Spark offers that task's executor
alone, and an executor with a slot per task can take the whole stage (one run had every
task on one worker): with executors smaller than the stage, only an offer of every
executor can place it."""


@pytest.fixture(scope="module")
def network() -> Iterator[TestNetwork]:
    """Six test hosts on one switched network."""
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
                     spark_conf=BOTH_EXECUTORS) as run:
        run.start()
        run.wait_flowing(300)
        produce(addresses.kafka, produced, lines[:3000], partitions)
        run.wait_committed(produced.clock(), 300)
        hosts_used = {report.info["host"] for report in run.processors().values()}
        # Every processor advertises its worker host's address, and both hosts run some:
        # frames between them cross the test network.
        assert hosts_used == set(workers), hosts_used

        victim = sorted(workers)[0]
        cut_off = {int(report.info["pid"]) for report in run.processors().values()
                   if report.info["host"] == victim}
        run.expect_restart(time.time(), f"the cable of {workers[victim]} was pulled")
        network.cut(workers[victim])
        produce(addresses.kafka, produced, lines[3000:6000], partitions)
        run.wait_committed(produced.clock(), 300)
        # The fault took effect: the round that covers the new lines ran without the host.
        survivors = {report.info["host"] for report in run.processors().values()}
        assert survivors and victim not in survivors, survivors

        # Plugged back in, its processors learn that their sessions expired and end.
        network.restore(workers[victim])
        wait_for("the cut-off processors to end",
                 lambda: not any(pid_alive(pid) for pid in cut_off), 180)
        produce(addresses.kafka, produced, lines[6000:], partitions)
        comparison = run.final_comparison(produced)
    assert comparison.ok, comparison.first()
