"""A sink database's outage of the issue's length (issue 40): 10 minutes by default.

    .venv/bin/python bench/outages.py [--outage 600] [--rate 100]

Starts an embedded stack of its own (brought down afterwards) and runs
:func:`hailstorm.dev.harness.outages.postgres_outage`: word count into a PostgreSQL server of
its own, stopped by its pid once a round committed data and started again on its data after
``--outage`` seconds, while a producer writes ``--rate`` lines/s throughout (the lines are
sized to last the outage and a minute more). The driver runs with ``--max-restarts 1``.

Prints one JSON line (outage, the wait as ``status --json`` showed it, the driver's failed
stage attempts, the negotiator's restarts, seconds to finish after the outage, lost /
duplicated / wrong against the model) and a summary; exits 1 unless the run waited and
finished exactly with no failed attempt and no restart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import bench_logs, embedded_stack, machine, report  # noqa: E402

from hailstorm.dev.harness import StackAddresses  # noqa: E402
from hailstorm.dev.harness.outages import postgres_outage  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outage", type=float, default=600.0,
                        help="Seconds PostgreSQL stays down.")
    parser.add_argument("--rate", type=float, default=100.0, help="Lines produced per second.")
    args = parser.parse_args(argv)
    lines = int(args.rate * (args.outage + 90))
    logs = bench_logs("hailstorm-outages-")
    with embedded_stack() as env:
        result = postgres_outage(StackAddresses.from_env(env), logs, outage=args.outage,
                                 lines=lines, rate=args.rate, progress=print)
    figures = result.to_json()
    ok = bool(result.waiting_seen) and not result.failed_attempts and not result.restarts \
        and result.comparison is not None and result.comparison.ok
    report("outages", {**figures, "lines": lines, "rate": args.rate, "ok": ok,
                       "machine": machine(), "logs": str(logs)},
           f"PostgreSQL down {figures['outage_s']} s: "
           f"{'waited and finished exactly' if ok else 'FAILED'}, "
           f"{len(result.failed_attempts)} failed stage attempts, "
           f"{len(result.restarts)} restarts, finished {figures['finished_s']} s after the "
           f"outage; lost {figures['lost']}, duplicated {figures['duplicated']}, wrong "
           f"{figures['wrong']} (logs in {logs})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
