"""The word count on the dev stack's Spark standalone cluster (pyspark's own master and worker
classes): a worker JVM SIGKILLed in the middle costs a recovery and nothing else, the
worker comes back with ``dev up``, and a cluster too small for the topology is refused at
once with one line naming both numbers."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wordcount_lines,
)
from hailstorm.dev.services import SPARK_MASTER, SPARK_MASTER_VAR, DevStack, spark_worker_name

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(spark_cluster_stack: DevStack) -> DevStack:
    """A dev stack with a Spark master and three workers of four task slots each."""
    return spark_cluster_stack


def test_the_stack_runs_and_exports_a_spark_cluster(cluster: DevStack) -> None:
    env = cluster.env()
    master = env[SPARK_MASTER_VAR]
    assert master.startswith("spark://127.0.0.1:")
    rows = {row.name: row for row in cluster.status()}
    assert all(rows[name].running for name in
               (SPARK_MASTER, *(spark_worker_name(i) for i in (1, 2, 3))))


def test_word_count_recovers_exactly_from_a_killed_worker(cluster: DevStack,
                                                         tmp_path: Path) -> None:
    env = cluster.env()
    stack = StackAddresses.from_env(env)
    topic = "words"
    kafka.recreate_topic(stack.kafka, topic, 4)
    partitions = kafka.partitions_of(stack.kafka, topic)
    produced = Produced(topic)
    lines = wordcount_lines(10000, seed=41)
    with TopologyRun(stack, REPO / "topologies" / "wordcount.py", log_dir=tmp_path / "logs",
                     master=env[SPARK_MASTER_VAR]) as run:
        run.start()
        run.wait_flowing(300)
        produce(stack.kafka, produced, lines[:5000], partitions)
        run.wait_committed(produced.clock(), 300)
        state = cluster.load()
        assert state is not None
        worker = state.services[spark_worker_name(random.Random(3).randint(1, 3))]
        run.expect_restart(time.time(), f"SIGKILL of the Spark worker JVM {worker.name}")
        os.kill(worker.pid, signal.SIGKILL)  # its executors follow it (WorkerWatcher)
        produce(stack.kafka, produced, lines[5000:], partitions)
        comparison = run.final_comparison(produced)
    assert comparison.ok, comparison.first()
    # The worker comes back with dev up (the other services are left alone).
    cluster.up()
    assert all(row.running for row in cluster.status())


BIG = '''
from hailstorm import Count, Table, Topology, per_key

topology = Topology("too_wide")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
counts = topology.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                       lift=lambda w: 1, emit=lambda w, n: [(w, n)], parallelism=12)
topology.sink("totals", inputs=[counts], target=Table(
    "too_wide", columns={{"word": "text", "n": "bigint"}}, key=["word"]))
'''


def test_a_cluster_with_too_few_slots_is_refused_at_once(cluster: DevStack,
                                                        tmp_path: Path) -> None:
    env = cluster.env()
    topic = f"wide-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(env["HAILSTORM_KAFKA"], topic, 2)
    module = tmp_path / "too_wide.py"
    module.write_text(BIG.format(topic=topic))  # 2 spouts + 12 bolts + 1 sink = 15 > 12
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "hailstorm", "run", str(module), "--name",
         f"too_wide_{uuid.uuid4().hex[:6]}", "--slot-wait", "30"],
        cwd=REPO, env={**os.environ, **env, "PYSPARK_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "offers 12 task slots, but the topology has 15 processor instances" in result.stderr
    # Not Spark's minutes of resubmitting: the slot wait (long enough for the executors of a
    # worker the previous test restarted to register on a slow machine) and one context start.
    assert time.monotonic() - started < 120
