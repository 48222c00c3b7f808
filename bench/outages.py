"""Outages of the issue's length (issue 40): a sink database down 10 minutes, or (``--kafka``)
the only Kafka broker down 2 minutes.

    .venv/bin/python bench/outages.py [--outage 600] [--rate 100]
    .venv/bin/python bench/outages.py --kafka [--outage 120] [--rate 100] [--partitions 4]

Starts an embedded stack of its own (brought down afterwards) and runs
:func:`hailstorm.dev.harness.outages.postgres_outage`: word count into a PostgreSQL server of
its own, stopped by its pid once a round committed data and started again on its data after
``--outage`` seconds, while a producer writes ``--rate`` lines/s throughout (the lines are
sized to last the outage and a minute more). The driver runs with ``--max-restarts 1``.
With ``--kafka``, :func:`~hailstorm.dev.harness.outages.kafka_outage`: word stream (Kafka in,
transactional topic sinks out) while the stack's broker is SIGKILLed and, after
``--outage`` seconds, started again on its data and port (the producer holds meanwhile).

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

from common import bench_logs, embedded_dev_stack, machine, report  # noqa: E402

from hailstorm.dev.harness import StackAddresses  # noqa: E402
from hailstorm.dev.harness.outages import kafka_outage, postgres_outage  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kafka", action="store_true",
                        help="Stop the Kafka broker instead of the sink's database.")
    parser.add_argument("--outage", type=float, default=None,
                        help="Seconds the service stays down (600 for PostgreSQL, 120 for "
                             "Kafka).")
    parser.add_argument("--rate", type=float, default=100.0, help="Lines produced per second.")
    parser.add_argument("--partitions", type=int, default=4,
                        help="Partitions of the source topic (a spout instance each).")
    args = parser.parse_args(argv)
    outage = args.outage if args.outage is not None else 120.0 if args.kafka else 600.0
    service = "Kafka" if args.kafka else "PostgreSQL"
    lines = int(args.rate * (outage + 90))
    logs = bench_logs("hailstorm-outages-")
    with embedded_dev_stack() as (stack, env):
        addresses = StackAddresses.from_env(env)
        result = kafka_outage(addresses, stack, logs, outage=outage, lines=lines,
                              rate=args.rate, partitions=args.partitions,
                              progress=print) if args.kafka else \
            postgres_outage(addresses, logs, outage=outage, lines=lines, rate=args.rate,
                            partitions=args.partitions, progress=print)
    figures = result.to_json()
    ok = bool(result.waiting_seen) and not result.failed_attempts and not result.restarts \
        and result.comparison is not None and result.comparison.ok
    report("outages", {**figures, "service": service, "lines": lines, "rate": args.rate,
                       "partitions": args.partitions,
                       "ok": ok, "machine": machine(), "logs": str(logs)},
           f"{service} down {figures['outage_s']} s: "
           f"{'waited and finished exactly' if ok else 'FAILED'}, "
           f"{len(result.failed_attempts)} failed stage attempts, "
           f"{len(result.restarts)} restarts, finished {figures['finished_s']} s after the "
           f"outage; lost {figures['lost']}, duplicated {figures['duplicated']}, wrong "
           f"{figures['wrong']} (logs in {logs})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
