"""The driver's resubmission backoff: doubling while failures repeat, reset after progress."""

from __future__ import annotations

from typing import Any

import pytest

from hailstorm.runtime.spark_stage import (
    NotEnoughSlots,
    RestartsExhausted,
    SparkOptions,
    StageRunner,
)


class ScriptedRunner(StageRunner):
    """A StageRunner whose stage fails ``failures`` times; records every backoff wait."""

    def __init__(self, failures: int, progress: list[bool],
                 max_attempts: int | None = None) -> None:
        options = SparkOptions(backoff_initial=1.0, backoff_max=8.0, max_attempts=max_attempts)
        progress_answers = iter(progress)
        super().__init__(
            context=None, assignments=[], entry=lambda _a: None, options=options,
            made_progress=lambda _since: next(progress_answers, False),
        )
        self.failures_left = failures
        self.waits: list[float] = []
        real_wait = self.stopping.wait

        def wait(timeout: float | None = None) -> bool:
            self.waits.append(float(timeout or 0))
            return real_wait(0)

        self.stopping.wait = wait  # type: ignore[method-assign]

    def run_once(self) -> None:
        if self.failures_left == 0:
            self.stopping.set()
            return
        self.failures_left -= 1
        raise RuntimeError("Job aborted due to stage failure: a task died")

    def stop(self) -> Any:
        self.stopping.set()


def test_backoff_doubles_up_to_the_maximum() -> None:
    runner = ScriptedRunner(failures=6, progress=[])
    assert runner.run() == 6
    assert runner.waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_backoff_starts_over_when_the_topology_made_progress_in_between() -> None:
    runner = ScriptedRunner(failures=5, progress=[False, False, True, False, False])
    runner.run()
    assert runner.waits == [1.0, 2.0, 1.0, 2.0, 4.0]


def test_gives_up_after_max_consecutive_failures_without_progress() -> None:
    runner = ScriptedRunner(failures=10, progress=[], max_attempts=3)
    with pytest.raises(RestartsExhausted, match=r"3 consecutive failed stage attempts.*a task"):
        runner.run()
    assert runner.attempts == 3


def test_progress_resets_the_count_of_failures() -> None:
    runner = ScriptedRunner(failures=5, progress=[False, True, False, True, False],
                            max_attempts=3)
    assert runner.run() == 5  # never 3 in a row without a commit in between


class _Cluster:
    """Just enough of a SparkContext for the slot check: a cluster of ``slots``."""

    def __init__(self, slots: int) -> None:
        jsc = type("JSC", (), {
            "resourceProfileManager": lambda _s: type("RPM", (), {
                "defaultResourceProfile": lambda _r: "default"})(),
            "maxNumConcurrentTasks": lambda _s, _profile: slots})()
        self._jsc = type("J", (), {"sc": lambda _s: jsc})()
        self.master = "spark://m:7077"


def test_a_stage_spark_refuses_for_lack_of_slots_stops_with_both_numbers() -> None:
    runner = ScriptedRunner(failures=3, progress=[])
    runner.context = _Cluster(slots=4)
    runner.assignments = list(range(7))
    runner.options = SparkOptions(slot_wait=0)

    def refused() -> None:
        raise RuntimeError("[SPARK-24819]: Barrier execution mode does not allow run a barrier "
                           "stage that requires more slots than the total number of slots")

    runner.run_once = refused  # type: ignore[method-assign]
    with pytest.raises(NotEnoughSlots, match="offers 4 task slots, but the topology has 7"):
        runner.run()
    assert runner.attempts == 1
