"""Keyed aggregation over a million users: hailstorm against the baseline and Bytewax.

    .venv/bin/python bench/user_totals_throughput.py [--events 3000000] [--users 2000000]

Starts an embedded stack of its own (brought down afterwards), produces ``--events`` JSON
events (:class:`hailstorm.dev.workloads.KeyedEvents`: users drawn by Zipf's law, s = 0.6, from
``--users``; 3M events touch about 1.3M distinct users, half of them once) to the topic
``events`` (4 partitions), then, after one untimed read that warms the broker for every
contender (``common.warm_broker``), on that same backlog:

* hailstorm: ``topologies/user_totals.py`` (4 spouts, 2 ``totals`` bolt instances, the
  ``user_totals`` upsert table in the stack's PostgreSQL, a round every second), timed
  from the master's first ``Flowing`` until the committed clock covers every offset;
* baseline: one process, confluent-kafka batch consume, ``json.loads``, a dict of
  ``[spent, events]`` per user;
* Bytewax (the ``bench`` extra, installed on first use): the same running totals with
  ``stateful_map``, 2 processes, recovery on, 1 s epochs.

The committed table must equal the baseline's totals, and Bytewax's too. Prints one JSON
line of figures and a human summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import (  # noqa: E402
    baseline_consume,
    cpu_figures,
    embedded_stack,
    machine,
    report,
    run_on_backlog,
)
from peer_runs import add_peers_option, chosen_peers, peer_figures, run_peers  # noqa: E402
from peers import bytewax_skipped, note_bytewax_skipped, run_bytewax  # noqa: E402

from hailstorm.dev.harness import StackAddresses  # noqa: E402
from hailstorm.dev.workloads import KeyedEvents  # noqa: E402

TOPIC = "events"
PARTITIONS = 4


class Totals:
    """The baseline's work: running ``[spent, events]`` per user, a batch at a time."""

    def __init__(self) -> None:
        self.by_user: dict[str, list[int]] = {}

    def __call__(self, batch: list[bytes | None]) -> None:
        by_user = self.by_user
        for value in batch:
            if value is None:
                continue
            event = json.loads(value)
            figures = by_user.get(event["user"])
            if figures is None:
                by_user[event["user"]] = [event["amount"], 1]
            else:
                figures[0] += event["amount"]
                figures[1] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--users", type=int, default=2_000_000)
    parser.add_argument("--no-bytewax", action="store_true", help="Skip the Bytewax peer.")
    add_peers_option(parser)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    others = chosen_peers(args.peers)

    print(f"generating {args.events:,} events over {args.users:,} users", flush=True)
    values = list(KeyedEvents(keys=args.users).events(args.events))
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        ran = run_on_backlog(stack, REPO / "topologies" / "user_totals.py", TOPIC, PARTITIONS,
                             values, "user_totals", args.timeout)
        del values
        hailstorm_s, pauses, table = ran.seconds, ran.pauses, ran.table
        print("baseline", flush=True)
        totals = Totals()
        baseline_s = baseline_consume(stack.kafka, TOPIC, PARTITIONS, args.events, totals)
        bytewax = None
        bytewax_why = bytewax_skipped(args.no_bytewax)
        if bytewax_why is None:
            print("Bytewax", flush=True)
            bytewax = run_bytewax("user_totals", stack.kafka, TOPIC)
        expected = {user: (spent, count) for user, (spent, count) in totals.by_user.items()}
        outcomes = run_peers("user_totals", stack.kafka, TOPIC, PARTITIONS, args.events,
                             expected, normalise=tuple, peers=others)
    committed = {key[0]: (row["spent"], row["events"]) for key, row in table.items()}
    if committed != expected:
        print(f"MISMATCH: hailstorm's table has {len(committed)} users, the baseline "
              f"{len(expected)}", file=sys.stderr)
        return 1
    if bytewax is not None and {u: tuple(v) for u, v in bytewax.result.items()} != expected:
        print("MISMATCH: Bytewax's totals differ from the baseline's", file=sys.stderr)
        return 1
    rate = args.events / hailstorm_s
    baseline_rate = args.events / baseline_s
    figures: dict[str, Any] = {
        "events": args.events, "users": args.users, "distinct_users": len(expected),
        "partitions": PARTITIONS, "bolt_instances": 2,
        "hailstorm_s": round(hailstorm_s, 2), "hailstorm_events_per_s": round(rate),
        "baseline_s": round(baseline_s, 2), "baseline_events_per_s": round(baseline_rate),
        "ratio_hailstorm_to_baseline": round(rate / baseline_rate, 3), **pauses,
        "result_equal": True, **machine(),
    }
    lines = [
        f"{args.events:,} events, {len(expected):,} distinct users, {PARTITIONS} partitions, "
        f"PostgreSQL upsert table, round every 1 s, {figures['cores']} cores, backlog",
        f"  hailstorm: {rate:,.0f} events/s (committed after {hailstorm_s:.1f} s)",
        f"  baseline:  {baseline_rate:,.0f} events/s (one process, json + dict, "
        f"{baseline_s:.1f} s)",
        f"  rounds:    {pauses['rounds']} committed; spouts paused {pauses['pause_mean_ms']} ms "
        f"on average per round, {pauses['pause_max_ms']} ms at most",
        f"  ratio:     {rate / baseline_rate:.2f}; committed table == baseline totals",
    ]
    cpu, cpu_line = cpu_figures(ran.cpu, args.events, "event", ran.whole_machine)
    figures.update(cpu)
    lines.append(cpu_line)
    note_bytewax_skipped(bytewax_why, figures, lines)
    if bytewax is not None:
        bytewax_rate = args.events / bytewax.seconds
        figures["bytewax_events_per_s"] = round(bytewax_rate)
        figures["ratio_hailstorm_to_bytewax"] = round(rate / bytewax_rate, 3)
        lines.append(f"  Bytewax:   {bytewax_rate:,.0f} events/s (stateful_map, 2 processes, "
                     f"recovery on, 1 s epochs); hailstorm is {rate / bytewax_rate:.2f}x")
    other_figures, other_lines = peer_figures(outcomes, args.events, rate, "events")
    figures.update(other_figures)
    lines.extend(other_lines)
    report("user_totals_throughput", figures, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
