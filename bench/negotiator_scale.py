"""The negotiator with a thousand processor instances: a round's commit overhead and the time
to decide a recovery (issue 42), against stand-ins (:mod:`hailstorm.dev.standins`).

    .venv/bin/python bench/negotiator_scale.py [--instances 1000] [--rounds 5] [--crashes 3]
                                               [--busy 2]

Starts a dev stack of its own (or uses ``--zk``; only ZooKeeper is used), writes the
expected list of a topology of ``--instances`` instances (30% spouts, one per partition of
one topic, 50% bolts, 20% sinks), registers a stand-in for each (a ZooKeeper session each;
they answer every master state at once, so what is measured is the negotiator's and
ZooKeeper's own work) and runs the negotiator daemon (``--snapshot-interval 1``). With
``--busy N``, N processes spin meanwhile, as a topology's processors keep the cores busy:
each ZooKeeper round trip then waits for its threads to be scheduled. It measures:

* **round overhead**: for ``--rounds`` committed rounds, the committed record's ``pause_s``
  (from SpoutsPaused until every spout's position was read: the clock) and ``snapshot_s``
  (from Flowing(C) until the commit: every bolt and sink instance's save read and the
  commit written), with every instance answering at once;
* **recovery decision**: ``--crashes`` times, from ending one bolt stand-in's session (its
  living node vanishes at once, as after a processor's clean exit or its session's expiry)
  until the negotiator recorded the move to Initialize naming it; then the stand-in comes
  back and the topology commits again before the next crash.

Prints one JSON line and a human summary (medians and maxima).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import embedded_stack, machine, report  # noqa: E402

from hailstorm.dev.standins import (  # noqa: E402
    StandInFleet,
    decide_recovery,
    negotiator_process,
    wait_commits,
    write_expected,
)
from hailstorm.protocol.layout import expected_processor_ids  # noqa: E402


def topology_of(instances: int) -> list[str]:
    """The expected ids of ``instances`` instances: 30% spouts, 50% bolts, 20% sinks."""
    spouts = max(1, instances * 3 // 10)
    sinks = max(1, instances // 5)
    bolts = max(1, instances - spouts - sinks)
    return expected_processor_ids({"src": [("events", p) for p in range(spouts)]},
                                  {"agg": bolts}, {"out": sinks})


def summary(values: list[float]) -> dict[str, float | None]:
    if not values:  # --crashes 0
        return {"median": None, "max": None}
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """``count`` processes spinning for as long as the block runs (stopped by their pids,
    even on failure): cores as busy as a topology's processors keep them, where every
    ZooKeeper round trip waits for its threads to be scheduled."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def run(hosts: str, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    name = f"scale_{uuid.uuid4().hex[:8]}"
    expected = topology_of(args.instances)
    write_expected(hosts, name, expected, [("src", "agg"), ("agg", "out")])
    started = time.monotonic()
    with StandInFleet(hosts, name, expected) as fleet:
        registered_s = time.monotonic() - started
        print(f"# {len(expected)} stand-ins registered in {registered_s:.1f} s",
              file=sys.stderr, flush=True)
        negotiator = negotiator_process(hosts, name, logs / "negotiator.log",
                                        snapshot_interval=args.interval, timeout=args.timeout)
        try:
            first = wait_commits(fleet.records, 1, 0, args.timeout)[0]
            print(f"# first commit after {time.monotonic() - started:.1f} s",
                  file=sys.stderr, flush=True)
            rounds = wait_commits(fleet.records, args.rounds, first.epoch, args.timeout)
            pauses = [r.pause_s for r in rounds if r.pause_s is not None]
            saves = [r.snapshot_s for r in rounds if r.snapshot_s is not None]
            decisions: list[float] = []
            last = rounds[-1].epoch
            bolts = [p for p in expected if p.startswith("bolt:")]
            for i in range(args.crashes):
                victim = bolts[(i * 7919) % len(bolts)]
                seconds, record = decide_recovery(fleet, victim, args.timeout)
                decisions.append(seconds)
                print(f"# {victim}: recovery decided after {seconds:.3f} s", file=sys.stderr,
                      flush=True)
                fleet.restart(victim)
                last = wait_commits(fleet.records, 1, max(last, record.epoch),
                                    args.timeout)[0].epoch
        finally:
            negotiator.send_signal(signal.SIGTERM)
            negotiator.wait(60)
    return {"instances": len(expected), "registered_s": round(registered_s, 2),
            "pause_s": summary(pauses), "snapshot_s": summary(saves),
            "round_s": summary([p + s for p, s in zip(pauses, saves, strict=False)]),
            "decision_s": summary(decisions), "answers": fleet.answers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--crashes", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0,
                        help="The negotiator's --snapshot-interval (default 1 s).")
    parser.add_argument("--busy", type=int, default=0,
                        help="Processes spinning on the cores meanwhile (default 0: idle "
                             "cores; 2 keeps a 2-core machine as busy as a topology run).")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--zk", help="A running ZooKeeper to use (default: a dev stack of "
                                     "the bench's own).")
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="hailstorm-bench-scale-logs-"))
    if args.zk:
        with busy_cores(args.busy):
            figures = run(args.zk, args, logs)
    else:
        with embedded_stack("hailstorm-bench-scale-", startup_timeout=300) as env, \
                busy_cores(args.busy):
            figures = run(env["HAILSTORM_ZK"], args, logs)
    text = (f"the negotiator with {figures['instances']} stand-in instances (registered in "
            f"{figures['registered_s']} s), a round every {args.interval:g} s, "
            f"{args.busy} processes spinning on the {os.cpu_count()} cores:\n"
            f"  round overhead (pause + save, everyone answering at once): median "
            f"{figures['round_s']['median']} s, max {figures['round_s']['max']} s "
            f"(pause {figures['pause_s']['median']} s, save {figures['snapshot_s']['median']} s)\n"
            f"  recovery decided (a bolt's session ended -> Initialize recorded): median "
            f"{figures['decision_s']['median']} s, max {figures['decision_s']['max']} s\n"
            f"  logs in {logs}")
    report("negotiator_scale", {**figures, "interval": args.interval, "busy": args.busy,
                                **machine()}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
