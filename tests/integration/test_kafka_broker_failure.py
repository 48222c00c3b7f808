"""Broker failure: word count keeps exactly the model's state while the Kafka node leading the
most source partitions is SIGKILLed under a running producer and started again later.

Real components only: a three-node Apache Kafka cluster in KRaft mode (replication factor 3,
``min.insync.replicas=2``), ZooKeeper, the negotiators and the Spark driver of the harness.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    BackgroundProducer,
    ChaosSchedule,
    Produced,
    StackAddresses,
    TopologyRun,
    busiest_leader,
    compare_with_model,
    run_chaos,
    topic_layout,
    wordcount_lines,
)
from hailstorm.dev.services import DevStack, pid_alive
from hailstorm.model import run_model

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordcount.py"
TOPIC = "words"


class LeaderWatch:
    """Polls the cluster metadata on a thread: when did the victim's partitions move?"""

    def __init__(self, bootstrap: str, victim: int) -> None:
        self.bootstrap = bootstrap
        self.victim = victim
        self.moved_at: float | None = None
        self.led: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LeaderWatch:
        layout = topic_layout(self.bootstrap, [TOPIC])
        self.led = {p for p, leader in layout.leaders.items() if leader == self.victim}
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.25) and self.moved_at is None:
            try:
                layout = topic_layout(self.bootstrap, [TOPIC], timeout=3)
            except Exception:  # the metadata is unavailable for a moment: ask again
                continue
            if all(layout.leaders[p] not in (-1, self.victim) for p in self.led):
                self.moved_at = time.time()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_wordcount_is_exact_when_the_busiest_leader_dies(
    kafka_cluster_stack: DevStack, tmp_path: Path
) -> None:
    """30k lines at 2,000/s; 4 s in, SIGKILL the node leading the most `words` partitions,
    start it again 5 s later; nothing acknowledged is lost, nothing is counted twice."""
    cluster = kafka_cluster_stack
    state = cluster.load()
    assert state is not None
    stack = StackAddresses.from_env(state.env())
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    kafka.create_topic(stack.kafka, "wordcount.dead-letter", 1)
    layout = topic_layout(stack.kafka, [TOPIC])
    assert layout.brokers == (1, 2, 3) and layout.min_replicas() == 3
    values = wordcount_lines(30_000, seed=21)
    produced = Produced(TOPIC)
    with TopologyRun(stack, TOPOLOGY, log_dir=tmp_path / "logs", brokers=cluster) as run:
        run.start()
        run.wait_flowing(240)
        parts = kafka.partitions_of(stack.kafka, TOPIC)
        with BackgroundProducer(stack.kafka, produced, values, parts, rate=2_000) as producer:
            time.sleep(4)
            assert producer.running
            victim = busiest_leader(topic_layout(stack.kafka, [TOPIC]).leaders)
            with LeaderWatch(stack.kafka, victim) as watch:
                fault = run.kill_broker(downtime=5.0, producer=producer, rng=random.Random(1))
                assert fault.target == f"kafka-{victim}" and not pid_alive(fault.pid)
                recovery = run.measure_recovery(fault, 180, producer)
            producer.join(240)
        print(f"killed kafka-{victim} ({fault.detail}); leaders moved after "
              f"{None if watch.moved_at is None else round(watch.moved_at - fault.at, 1)} s; "
              f"Flowing after {recovery.flowing_after}, committed past it after "
              f"{recovery.committed_after}, back after {recovery.restored_after}")
        assert fault.acked and all(o >= 0 for o in fault.acked.values())
        assert watch.moved_at is not None, "the victim's partitions never got a new leader"
        assert recovery.committed_after is not None and recovery.restored_after is not None
        assert cluster.kafka_node_pid(victim) != fault.pid

        # The producer recorded exactly what the log holds: every value once, no gaps.
        assert produced.count == len(values)
        last = produced.last_offsets()
        for p in sorted(last):
            logged = [(r.offset, r.value) for r in
                      kafka.read_range(stack.kafka, TOPIC, p, 0, last[p], timeout=60)]
            assert sorted(produced.messages[p]) == logged
        assert sorted(v for p in last for _, v in produced.messages[p]) == sorted(values)

        target = {(TOPIC, p): o for p, o in last.items()}
        committed = run.wait_committed(target, 240)
        assert dict(committed.clock) == target
        model = run_model(run.topology, produced.model_messages())
        c = compare_with_model(model, run.committed_bolt_states(committed), run.sink_tables())
        assert (c.lost, c.duplicated, c.wrong, c.instance_mismatches) == (0, 0, 0, []), \
            c.first()
        assert c.keys_compared == 80 + 80
        run.check_recoveries()  # a broker fault restarts nothing it does not explain


def test_chaos_run_with_broker_faults_among_others(
    kafka_cluster_stack: DevStack, tmp_path: Path
) -> None:
    """run_chaos on the cluster: a negotiator-leader kill, then a broker kill while the
    producer still writes (24k lines at 1,000/s)."""
    state = kafka_cluster_stack.load()
    assert state is not None
    schedule = ChaosSchedule(kinds=("broker", "negotiator"), count=2, spacing=1.0, seed=1)
    assert [p.kind for p in schedule.plan()] == ["negotiator", "broker"]
    kafka.recreate_topic(state.env()["HAILSTORM_KAFKA"], TOPIC, 4)
    report = run_chaos(StackAddresses.from_env(state.env()), TOPOLOGY,
                       wordcount_lines(24_000, seed=43), schedule, log_dir=tmp_path / "logs",
                       rate=1_000, progress=print, brokers=kafka_cluster_stack)
    print(report.to_text())
    assert report.faults_by_kind() == {"broker": 1, "negotiator": 1}
    broker = next(r for r in report.faults if r.fault.kind == "broker")
    assert broker.fault.target.startswith("kafka-") and broker.restored_after is not None
    assert broker.fault.acked, "the broker died after the producer had finished"
    assert all(r.committed_after is not None for r in report.faults), report.to_text()
    c = report.comparison
    assert (c.lost, c.duplicated, c.wrong, c.instance_mismatches) == (0, 0, 0, []), \
        report.to_text()
    assert report.ok
