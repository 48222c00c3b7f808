"""The Spark runner: one barrier stage of long-lived tasks, resubmitted after a kill -9."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from pyspark import SparkContext
from spark_entries import record_pid_and_wait

from hailstorm.dev.services import pid_alive
from hailstorm.runtime.spark_stage import SparkOptions, StageRunner, build_context, stop_context

pytestmark = pytest.mark.integration


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_barrier_stage_is_resubmitted_after_a_worker_is_killed(tmp_path: Path) -> None:
    options = SparkOptions(app_name="hailstorm-test", backoff_initial=0.5)
    context = build_context(options, slots=3)
    try:
        runner = StageRunner(
            context, [(str(tmp_path), i) for i in range(3)], record_pid_and_wait, options
        )
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()

        def pids() -> list[int]:
            return sorted(int(p.suffix[1:]) for p in tmp_path.glob("*.*"))

        first = _wait_for(lambda: len(pids()) == 3 and pids(), 120, "three tasks")
        victim = first[0]
        os.kill(victim, signal.SIGKILL)
        # The barrier stage fails as a whole: every sibling goes, then all three come back.
        _wait_for(lambda: not any(pid_alive(p) for p in first), 120, "siblings to be killed")
        _wait_for(lambda: len(pids()) == 6, 120, "the stage to be resubmitted")
        assert runner.failures >= 1

        (tmp_path / "stop").touch()
        runner.stop()
        thread.join(60)
        assert not thread.is_alive()
        _wait_for(lambda: not any(pid_alive(p) for p in pids()), 60, "every task to end")
    finally:
        accumulators = context._accumulatorServer
        stop_context(context)
    assert SparkContext._active_spark_context is None
    # Shut down on a thread of its own, which ends: no server is left listening.
    _wait_for(lambda: accumulators.socket.fileno() == -1, 30, "the accumulator server to close")
