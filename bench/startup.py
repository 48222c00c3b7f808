"""How long a topology takes to start, to commit its first round, and to stop.

    .venv/bin/python bench/startup.py [--runs 3] [--lines 3000] [--no-class-archive]

Every start of ``hailstorm run`` pays this, and so does every restart of the Spark stage
after a failure (a killed driver pays all of it again): it bounds how fast a topology comes
back, and it is most of what an integration test waits for.

Starts an embedded stack of its own (brought down afterwards), produces ``--lines`` lines
of realistic text (``common.sample_lines``: Zipf, s = 1.1, over 50,000 words) to the topic
``words`` (4 partitions), then ``--runs`` times deploys ``topologies/wordcount.py`` under a
fresh name (one negotiator, the driver on Spark ``local[N]``, 7 processor instances, the
stack's PostgreSQL, a round every second) and measures, from starting the negotiator and
the driver:

* **flowing**: until the master is first ``Flowing`` (the driver's Spark context, the
  stage's tasks, every processor registered, the spouts rewound);
* **committed**: until a commit covers every line;
* **stop**: from asking the driver and the negotiator to stop until both exited and every
  processor's Python worker was gone (``TopologyRun.stop``).

The first run of an invocation meets a broker and a ZooKeeper whose JITs are still cold.
The drivers map the install's class archive (:mod:`hailstorm.runtime.class_archive`; the
first run of an install without one writes it, which shows in its start and stop);
``--no-class-archive`` runs them without it.

Prints one JSON line (every run, and the medians) and a human summary.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import bench_logs, embedded_stack, machine, report, sample_lines  # noqa: E402

from hailstorm import kafka  # noqa: E402
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce  # noqa: E402

TOPIC = "words"
PARTITIONS = 4
TOPOLOGY = REPO / "topologies" / "wordcount.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="deployments in a row (default 3)")
    parser.add_argument("--lines", type=int, default=3000,
                        help="lines on the topic, read by every run (default 3000)")
    parser.add_argument("--no-class-archive", dest="class_archive", action="store_false",
                        help="run the drivers with --no-class-archive (by default they map "
                        "the install's archive; a first run without one writes it)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.lines < 1:
        parser.error("--runs and --lines must be at least 1")
    runs: list[dict[str, float]] = []
    processors = 0
    logs = bench_logs("hailstorm-bench-startup-")
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        kafka.recreate_topic(stack.kafka, TOPIC, PARTITIONS)
        produced = Produced(TOPIC)
        produce(stack.kafka, produced, [line.encode() for line in sample_lines(args.lines)],
                kafka.partitions_of(stack.kafka, TOPIC))
        target = produced.clock()
        for i in range(args.runs):
            print(f"run {i + 1} of {args.runs}: deploying the word count", file=sys.stderr,
                  flush=True)
            with TopologyRun(stack, TOPOLOGY, log_dir=logs / f"run{i}", negotiators=1,
                             snapshot_interval=1.0, timeout=60) as run:
                if not args.class_archive:
                    run.driver_options.append("--no-class-archive")
                started = time.monotonic()
                run.start()
                run.wait_flowing(300)
                flowing = time.monotonic() - started
                processors = run.expected_count()
                run.wait_committed(target, 300)
                committed = time.monotonic() - started
                stopping = time.monotonic()
                run.stop()
                stop = time.monotonic() - stopping
            runs.append({"flowing_s": round(flowing, 2), "committed_s": round(committed, 2),
                         "stop_s": round(stop, 2)})
            print(f"  flowing after {flowing:.1f} s, committed after {committed:.1f} s, "
                  f"stopped in {stop:.1f} s", file=sys.stderr, flush=True)
    medians = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
    report("startup", {"runs": runs, "median": medians, "lines": args.lines,
                       "processors": processors, "class_archive": args.class_archive,
                       "logs": str(logs), **machine()},
           f"word count ({processors} processors), median of {args.runs}: Flowing "
           f"after {medians['flowing_s']} s, every line committed after "
           f"{medians['committed_s']} s, stopped in {medians['stop_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
