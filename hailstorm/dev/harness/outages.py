"""Outages ridden out (issue 40): a service the topology needs is stopped by its pid while
data flows and started again on its data after ``outage`` seconds. The topology must wait
(the wait visible in ``hailstorm status --json``), then finish exactly as the model says,
with no failed stage attempt and no restart.

* :func:`postgres_outage`: word count into a PostgreSQL server of its own;
* :func:`kafka_outage`: word stream (Kafka in, Kafka out through transactional topic
  sinks) while the stack's only broker is down.

Used by ``tests/integration/test_outages.py`` (outages just past what the sinks used to give
up after) and ``bench/outages.py`` (the issue's 10 and 2 minutes).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hailstorm import kafka
from hailstorm.dev.harness.compare import Comparison, compare_with_model
from hailstorm.dev.harness.producing import BackgroundProducer, Produced, wordcount_lines
from hailstorm.dev.harness.run import TopologyRun
from hailstorm.dev.harness.stack import StackAddresses
from hailstorm.dev.harness.wait import HarnessError, wait_for
from hailstorm.dev.services import DevStack, StackState
from hailstorm.dev.services.kafka_cluster import KafkaCluster
from hailstorm.dev.services.state import StartAction
from hailstorm.model import run_model

__all__ = ["OutageResult", "Service", "kafka_outage", "own_postgres", "postgres_outage",
           "ride_out"]

REPO = Path(__file__).resolve().parents[3]
WORDCOUNT = REPO / "topologies" / "wordcount.py"
WORDSTREAM = REPO / "topologies" / "wordstream.py"
TOPIC = "words"


@contextlib.contextmanager
def own_postgres(startup_timeout: float = 90) -> Iterator[tuple[DevStack, StackState]]:
    """A PostgreSQL server of its own (the dev stack's, without ZooKeeper and Kafka) in a
    temporary directory; stopped and deleted afterwards."""
    state_dir = Path(tempfile.mkdtemp(prefix="hailstorm-pg-"))
    os.chmod(state_dir, 0o755)  # the 'postgres' user must reach its data directory
    (state_dir / "logs").mkdir()
    server = DevStack(state_dir, startup_timeout=startup_timeout)
    state = StackState(state_dir=str(state_dir), database_password=secrets.token_urlsafe(18))
    try:
        state.services["postgres"] = server._start_postgres(state, StartAction.CREATE)
        server._save(state)
        yield server, state
    finally:
        server.down(wipe=True)
        shutil.rmtree(state_dir, ignore_errors=True)


@dataclass
class OutageResult:
    """What a run through an outage showed."""

    outage_s: float
    """How long the service was down."""
    waiting_seen: list[str] = field(default_factory=list)
    """``status --json`` problems naming the wait, as first seen during the outage."""
    failed_attempts: list[str] = field(default_factory=list)
    """The driver's failed stage attempts (its restart budget spent)."""
    restarts: list[str] = field(default_factory=list)
    """The negotiator's recoveries from the outage on (their reasons)."""
    finished_s: float | None = None
    """Seconds from the end of the outage until a round committed every produced line."""
    comparison: Comparison | None = None

    def to_json(self) -> dict[str, Any]:
        c = self.comparison
        return {"outage_s": round(self.outage_s, 1), "waiting_seen": self.waiting_seen,
                "failed_attempts": self.failed_attempts, "restarts": self.restarts,
                "finished_s": None if self.finished_s is None else round(self.finished_s, 1),
                "lost": c and c.lost, "duplicated": c and c.duplicated,
                "wrong": c and c.wrong, "keys_compared": c and c.keys_compared}


def failed_attempts(run: TopologyRun) -> list[str]:
    """The lines of the driver's log saying that a stage attempt failed."""
    return [line for line in run.log("driver").splitlines()
            if "stage attempt" in line and "failed" in line]


def status_document(run: TopologyRun) -> dict[str, Any]:
    """``hailstorm status --json`` of ``run``, as an operator runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "hailstorm", "status", "--json", "--name", run.name,
         "--sample", "0.2"], env=run.env, capture_output=True, text=True, timeout=60,
        check=False)
    if result.returncode != 0:
        raise HarnessError(f"hailstorm status failed: {result.stderr.strip()[-500:]}")
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def waits_in_status(run: TopologyRun) -> list[str]:
    """The problems of ``status --json`` that say a processor waits."""
    return [p for p in status_document(run).get("problems", []) if "is waiting for" in p]


@dataclass(frozen=True)
class Service:
    """The service an outage takes away: its name, and how to stop it (returning the pid
    stopped) and start it again on its data."""

    name: str
    stop: Callable[[], int]
    restart: Callable[[], object]
    pause_producer: bool = False
    """Hold the producer during the outage (Kafka: the producer needs the broker too, and
    the harness's fails a message undelivered for 120 s)."""


def postgres_outage(stack: StackAddresses, log_dir: Path, *, outage: float,
                    lines: int = 20_000, rate: float = 200.0, partitions: int = 4,
                    progress: Callable[[str], None] = lambda _m: None) -> OutageResult:
    """Run word count into a PostgreSQL of its own; once a round committed data, stop the
    server (by its pid) for ``outage`` seconds while the producer goes on, then start it again
    on its data. The driver runs with ``--max-restarts 1``: before issue 40 the sink failed
    its task after about 26 s of retries, and that one failed stage attempt ended the run."""
    with own_postgres() as (server, state):
        return ride_out(stack, log_dir, WORDCOUNT,
                        Service("PostgreSQL", server.stop_postgres, server.restart_postgres),
                        database=state.database_url("hailstorm"), outage=outage, lines=lines,
                        rate=rate, partitions=partitions, progress=progress)


def kafka_outage(stack: StackAddresses, brokers: KafkaCluster, log_dir: Path, *,
                 outage: float, node: int = 1, lines: int = 20_000, rate: float = 200.0,
                 partitions: int = 4,
                 progress: Callable[[str], None] = lambda _m: None) -> OutageResult:
    """Run word stream (spouts reading Kafka, topic sinks writing it in transactions) on a
    stack whose only broker is Kafka node ``node`` of ``brokers``; once a round committed
    data, SIGKILL the broker for ``outage`` seconds, then start it again on its data (the
    same port). Before issue 40 the topic sinks gave up after 8 attempts (about 30 s) and
    failed their tasks: a failed stage attempt. The driver runs with ``--max-restarts 0``
    (word stream's processors may miss their first Initializes on a loaded machine, which
    is no outage); what counts is that no attempt fails and nothing restarts from the outage
    on, and that the driver never exits."""
    return ride_out(stack, log_dir, WORDSTREAM,
                    Service("Kafka", lambda: brokers.kill_kafka_node(node),
                            lambda: brokers.restart_kafka_node(node), pause_producer=True),
                    outage=outage, lines=lines, rate=rate, partitions=partitions,
                    progress=progress, max_restarts=0)


def ride_out(stack: StackAddresses, log_dir: Path, topology: Path, service: Service, *,
             outage: float, database: str | None = None, lines: int = 20_000,
             rate: float = 200.0, partitions: int = 4, max_restarts: int = 1,
             progress: Callable[[str], None] = lambda _m: None) -> OutageResult:
    """Run ``topology`` on ``stack``; once a round committed data, stop ``service`` for
    ``outage`` seconds while the topology runs, then start it again. The driver runs with
    ``--max-restarts max_restarts``. What the run showed: the wait in ``status --json``,
    failed stage attempts and restarts from the outage on, how long it took to finish, the
    comparison with the model."""
    kafka.recreate_topic(stack.kafka, TOPIC, partitions)
    kafka.create_topic(stack.kafka, "wordcount.dead-letter", 1)
    values = wordcount_lines(lines, seed=40)
    produced = Produced(TOPIC)
    with TopologyRun(stack, topology, log_dir=log_dir, database=database) as run:
        run.driver_options = ["--max-restarts", str(max_restarts)]
        run.start()
        run.wait_flowing(600)  # a loaded machine: Initializes abandoned until all start
        result = OutageResult(outage)
        parts = kafka.partitions_of(stack.kafka, TOPIC)
        with BackgroundProducer(stack.kafka, produced, values, parts, rate=rate) as producer:
            wait_for("a committed round with data", lambda: any(
                o >= 0 for o in (getattr(run.committed(), "clock", None) or {}).values()),
                120, run.alive)
            if service.pause_producer:
                producer.pause()
            failed_before = len(failed_attempts(run))
            pid = service.stop()
            stopped, stopped_at = time.monotonic(), time.time()
            progress(f"stopped {service.name} (pid {pid}) for {outage:.0f} s")
            try:
                result.waiting_seen = wait_for(f"a wait for {service.name} in status --json",
                                               lambda: waits_in_status(run), 120, run.alive)
                progress(f"status --json: {result.waiting_seen[0]}")
                while time.monotonic() - stopped < outage:
                    run.alive()  # the driver did not give up
                    time.sleep(min(5.0, max(0.0, outage - (time.monotonic() - stopped))))
            finally:
                service.restart()
                producer.resume()
            result.outage_s = time.monotonic() - stopped
            back = time.monotonic()
            progress(f"{service.name} is back after {result.outage_s:.0f} s")
            producer.join(max(120.0, 2 * lines / rate))
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        committed = run.wait_committed(target, 300)
        result.finished_s = time.monotonic() - back
        # Read at once: rounds go on committing, and the garbage collection of snapshots
        # keeps only the last two committed rounds' files.
        states, tables = run.committed_bolt_states(committed), run.sink_tables()
        model = run_model(run.topology, produced.model_messages())
        result.comparison = compare_with_model(model, states, tables)
        result.failed_attempts = failed_attempts(run)[failed_before:]
        result.restarts = [r.reason for r in run.recoveries()
                           if not r.is_start and r.at >= stopped_at]
        return result
