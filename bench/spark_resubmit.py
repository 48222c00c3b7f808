"""How fast Spark runs a killed processor task again: one barrier stage against one job per
task (issue 42's scheduling question).

    .venv/bin/python bench/spark_resubmit.py [--tasks 6] [--kills 3]

No services: a Spark ``local[N]`` context built as ``hailstorm run`` builds it
(:func:`hailstorm.runtime.spark_stage.build_context`: hailstorm's Python daemon, one worker
per task, C1-only JVM). Every task writes its start time and pid to a file, then sleeps
until told to end. The bench SIGKILLs one task's Python worker (as ``bench/recovery.py``
kills a bolt's) and times, from the kill:

* **barrier**: the tasks run as one barrier stage (today's scheduling). Spark fails the
  stage; the siblings end by themselves (as processors do when the topology restarts:
  ``RestartRequired``), and the loop resubmits it at once (``hailstorm run`` waits
  ``SparkOptions.backoff_initial``, 0.1 s, more). Measured: until every task of the new
  attempt started (**all restarted**) and how many restarted (all of them);
* **jobs**: one single-task job per processor, submitted from one driver thread each, on
  ``local[N,F]`` (``F`` attempts per task: Spark's own task retry). Measured: until the
  killed task's retry started, and how many tasks restarted (one).

Prints one JSON line and a human summary (medians over ``--kills``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import machine, report  # noqa: E402

from hailstorm.dev.harness import wait_for  # noqa: E402
from hailstorm.runtime.spark_stage import SparkOptions, build_context  # noqa: E402

POLL = 0.01


def task_body(directory: str) -> Callable[[Iterator[int]], Iterator[int]]:
    """A task that records ``<index>.<pid>`` = "start pid" and sleeps until ``stop`` (one
    Python worker per task: a pid is an attempt)."""

    def run(indexes: Iterator[int]) -> Iterator[int]:
        for index in indexes:
            begun = time.time()
            Path(directory, f"{index}.{os.getpid()}").write_text(
                f"{begun} {os.getpid()} {os.getppid()}")
            abort = Path(directory, "abort")
            while not Path(directory, "stop").exists():
                # as a processor ends itself when the topology restarts without it
                if abort.exists() and abort.stat().st_mtime > begun:
                    raise RuntimeError("the attempt was aborted")
                time.sleep(0.05)
            yield index

    return run


def started(directory: Path) -> dict[str, tuple[float, int, int]]:
    """Every start file: name -> (time, pid, parent pid)."""
    found = {}
    for path in directory.iterdir():
        if path.name == "stop":
            continue
        text = path.read_text().split()
        if len(text) == 3:
            found[path.name] = (float(text[0]), int(text[1]), int(text[2]))
    return found


def wait_until(what: str, check: Callable[[], Any], timeout: float = 120.0) -> Any:
    return wait_for(what, check, timeout, poll=POLL)


def barrier_kill(context: Any, tasks: int, directory: Path) -> dict[str, float]:
    """One barrier stage, a worker killed, the stage resubmitted at once."""
    body = task_body(str(directory))
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            try:
                context.parallelize(range(tasks), tasks).barrier() \
                    .mapPartitions(body).collect()
            except Exception:  # the killed attempt: resubmit (hailstorm waits 0.1 s more)
                continue

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    first = wait_until("the first attempt",
                       lambda: s if len(s := started(directory)) >= tasks else None)
    victim = sorted(first.items())[0][1][1]
    before = set(first)
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)
    (directory / "abort").write_text("")  # the siblings end, as processors would
    again = wait_until("every task of a new attempt",
                       lambda: (new if len(new := set(started(directory)) - before) >= tasks
                                else None))
    starts = started(directory)
    latest = max(starts[name][0] for name in again)
    (directory / "stop").write_text("")
    done.set()
    thread.join(60)
    return {"all_restarted_s": latest - killed_at, "restarted": float(len(again))}


def jobs_kill(context: Any, tasks: int, directory: Path) -> dict[str, float]:
    """One single-task job per task (local[N,F]: Spark retries a failed task itself)."""
    body = task_body(str(directory))

    def job(index: int) -> None:
        context.setJobGroup(f"processor-{index}", f"processor {index}")
        context.parallelize([index], 1).mapPartitions(body).collect()

    threads = [threading.Thread(target=job, args=(i,), daemon=True) for i in range(tasks)]
    for thread in threads:
        thread.start()
    first = wait_until("every job's task",
                       lambda: s if len(s := started(directory)) >= tasks else None)
    name, (_, victim, _) = sorted(first.items())[0]
    index = name.split(".")[0]
    before = set(first)
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)
    retried = wait_until("the killed task's retry",
                         lambda: [n for n in set(started(directory)) - before
                                  if n.startswith(f"{index}.")] or None)
    time.sleep(1.0)  # anything else that restarted would show by now
    restarted = set(started(directory)) - before
    retry_at = started(directory)[retried[0]][0]
    print("# daemons before", {p for _, (_, _, p) in first.items()}, "after",
          started(directory)[retried[0]][2], file=sys.stderr)
    (directory / "stop").write_text("")
    for thread in threads:
        thread.join(60)
    return {"task_restarted_s": retry_at - killed_at, "restarted": float(len(restarted))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=6, help="processor tasks (default 6)")
    parser.add_argument("--kills", type=int, default=3, help="kills per scheduling")
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {"barrier": [], "jobs": []}
    for scheduling, measure, master in (
            ("barrier", barrier_kill, f"local[{args.tasks}]"),
            ("jobs", jobs_kill, f"local[{args.tasks},4]")):
        for _ in range(args.kills):  # a context each: no attempt outlives its measurement
            context = build_context(SparkOptions(master=master,
                                                 app_name=f"resubmit-{scheduling}"),
                                    slots=args.tasks)
            try:
                with tempfile.TemporaryDirectory(prefix="hailstorm-resubmit-") as tmp:
                    results[scheduling].append(measure(context, args.tasks, Path(tmp)))
                    print(f"# {scheduling}: {results[scheduling][-1]}", file=sys.stderr,
                          flush=True)
            finally:
                context.stop()
    medians = {s: {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
               for s, runs in results.items()}
    summary = (f"{args.tasks} tasks on local[{args.tasks}], SIGKILL of one task's Python "
               f"worker, medians of {args.kills}:\n"
               f"  barrier stage resubmitted at once: every task running again after "
               f"{medians['barrier']['all_restarted_s']} s ({args.tasks} restarted; "
               f"hailstorm run waits {SparkOptions().backoff_initial:g} s more before "
               "resubmitting)\n"
               f"  one job per task, Spark's task retry: the killed task running again "
               f"after {medians['jobs']['task_restarted_s']} s "
               f"({medians['jobs']['restarted']:g} restarted)")
    report("spark_resubmit", {"tasks": args.tasks, "kills": args.kills, "runs": results,
                              "medians": medians, **machine()}, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
