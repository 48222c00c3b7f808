"""The driver's resubmission backoff: doubling while failures repeat, reset after progress."""

from __future__ import annotations

from typing import Any

from hailstorm.spark_runner import SparkOptions, StageRunner


class ScriptedRunner(StageRunner):
    """A StageRunner whose stage fails ``failures`` times; records every backoff wait."""

    def __init__(self, failures: int, progress: list[bool]) -> None:
        options = SparkOptions(backoff_initial=1.0, backoff_max=8.0)
        progress_answers = iter(progress)
        super().__init__(
            session=None, assignments=[], entry=lambda _a: None, options=options,
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
