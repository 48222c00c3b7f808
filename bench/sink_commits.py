"""What one sink commit costs, by its size: wall time per commit of a
:class:`~hailstorm.sinks.SinkWriter` into an upsert table on the stack's PostgreSQL.

    .venv/bin/python bench/sink_commits.py [--commits 200] [--sizes 50,500,5000]
        [--busy N]

Each commit writes that many rows of new keys (``user_totals``' shape: a text key and two
bigints) with its progress, as a sink keeping up with a stream does. Beside the wall time,
the CPU this process spent on a commit: the rest is the wait for the server, during which
a sink's shell reads on (it runs a PostgreSQL commit on a thread of its own). ``--busy N`` runs N
processes spinning on the CPU meanwhile (labelled in the output): on a saturated 2-core
machine every round trip to the database also waits for the server to be scheduled, and a
commit's statement count shows in its wall time there first.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import embedded_stack, machine, percentile, report
from hailstorm.sinks import SinkWriter
from hailstorm.sinks.db import create_postgres_database
from hailstorm.topology import Table

TABLE = Table("bench_commits", columns={"user_id": "text", "spent": "bigint", "events": "bigint"},
              key=["user_id"], mode="upsert")
PARTITIONS = [("events", p) for p in range(4)]


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy(processes: int) -> Iterator[None]:
    """``processes`` processes spinning on the CPU, stopped by pid afterwards."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(processes)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.join(5)


def commit_times(url: str, size: int, commits: int) -> tuple[list[float], list[float]]:
    """Seconds per commit of ``size`` new keys, ``commits`` times (after two unmeasured):
    the wall time, and this process's CPU time (the rest is waiting for the server, which
    a sink spends reading on: its commit runs on a thread of its own)."""
    times: list[float] = []
    cpu: list[float] = []
    with SinkWriter.open(url, TABLE, f"bench/{size}", epoch=1) as writer:
        offset = 0
        for number in range(commits + 2):
            partitions = [PARTITIONS[i % len(PARTITIONS)] for i in range(size)]
            offsets = [offset + i // len(PARTITIONS) for i in range(size)]
            rows = [(f"user-{size}-{number}-{i}", i, 1) for i in range(size)]
            writer.add_columns(partitions, offsets, rows)
            offset += size
            started, used = time.perf_counter(), time.process_time()
            writer.commit_through({p: offset for p in PARTITIONS})
            if number >= 2:
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - used)
    return times, cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=200, help="Measured commits per size.")
    parser.add_argument("--sizes", default="50,500,5000", help="Rows per commit, comma-separated.")
    parser.add_argument("--busy", type=int, default=0,
                        help="Processes spinning on the CPU while commits run.")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: dict[str, dict[str, float]] = {}
    with embedded_stack("hailstorm-bench-commits-") as env:
        url = create_postgres_database(env["HAILSTORM_DATABASE_URL"], f"commits_{os.getpid()}")
        with busy(args.busy):
            for size in sizes:
                times, cpu = commit_times(url, size, args.commits)
                figures[str(size)] = {
                    "p50_ms": round(percentile(times, 0.5) * 1000, 2),
                    "p90_ms": round(percentile(times, 0.9) * 1000, 2),
                    "p99_ms": round(percentile(times, 0.99) * 1000, 2),
                    "us_per_row": round(percentile(times, 0.5) / size * 1e6, 2),
                    "cpu_p50_ms": round(percentile(cpu, 0.5) * 1000, 2),
                }
    label = f"with {args.busy} processes spinning" if args.busy else "on an idle machine"
    lines = [f"sink commits into PostgreSQL {label}, {args.commits} per size:"]
    lines += [f"  {size:>6} rows: p50 {f['p50_ms']} ms, p90 {f['p90_ms']} ms, "
              f"p99 {f['p99_ms']} ms ({f['us_per_row']} us a row at p50), this process's "
              f"CPU p50 {f['cpu_p50_ms']} ms"
              for size, f in ((int(k), v) for k, v in figures.items())]
    report("sink_commits", {"busy": args.busy, "commits": args.commits, "sizes": figures,
                            "machine": machine()}, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
