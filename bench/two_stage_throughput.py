"""A two-stage pipeline (bolt -> bolt -> sink): hailstorm against the baseline and the peers.

    .venv/bin/python bench/two_stage_throughput.py [--events 2000000] [--users 2000000]

Starts an embedded stack of its own (brought down afterwards), produces ``--events`` JSON
events (:class:`hailstorm.dev.workloads.KeyedEvents`: users drawn by Zipf's law, s = 0.6, from
``--users``, each user in one of 10 countries) to the topic ``events`` (4 partitions),
then, after one untimed read that warms the broker for every contender
(``common.warm_broker``), on that same backlog:

* hailstorm: ``topologies/top_spenders.py`` (4 spouts; the ``totals`` bolt, a running sum
  per (country, user), 2 instances; the ``top`` bolt, TopK(10) per country over those
  running sums, 2 instances; the ``top_spenders`` upsert table in the stack's PostgreSQL;
  a round every second), timed from the master's first ``Flowing`` until the committed
  clock covers every offset. The first bolt feeds a bolt, so the spouts cannot
  pre-aggregate for it: every event crosses both stages;
* baseline: one process, confluent-kafka batch consume, ``json.loads``, a dict of totals
  per country and user, then, once at the end (inside the timing), each country's top ten
  with ``heapq.nsmallest``. It emits no running rankings and writes nothing;
* Bytewax (the ``bench`` extra, installed on first use): the same two keyed stages,
  ``stateful_map`` running totals per (country, user), then per country a
  ``stateful_flat_map`` keeping the top ten and emitting the ranking when it holds the
  user; 2 processes, recovery on, 1 s epochs, results kept in memory (no database);
* Pathway, Quix Streams and PyFlink (``--peers``, all by default; ``bench/peer_runs.py``):
  the same two keyed stages, each engine's own way (``bench/peer_<name>.py``), each in a
  venv of its own, with its fault tolerance on.

The result does not depend on timing or arrival order: totals only grow, a country keeps
each user's highest total, and ties are broken by user id (see the topology's docstring).
The committed table must equal the baseline's top ten per country, and Bytewax's too; a
peer reaching another ranking gets no figure, and the reason is printed.
Prints one JSON line of figures and a human summary.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
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
from topologies.top_spenders import TOP  # noqa: E402

TOPIC = "events"
PARTITIONS = 4
BOLT_INSTANCES = {"totals": 2, "top": 2}

Ranking = tuple[tuple[str, int], ...]
"""A country's ``(user, spent)`` pairs, best first."""


def _rank(kv: tuple[str, int]) -> tuple[int, str]:
    """Best first: spent descending, then user id ascending (TopK's order)."""
    return -kv[1], kv[0]


class TopSpenders:
    """The baseline's work: totals per country and user, a batch at a time; the top ten
    per country once, at the end (:meth:`rankings`)."""

    def __init__(self) -> None:
        self.by_country: dict[str, dict[str, int]] = {}

    def __call__(self, batch: list[bytes | None]) -> None:
        by_country = self.by_country
        for value in batch:
            if value is None:
                continue
            event = json.loads(value)
            users = by_country.get(event["country"])
            if users is None:
                users = by_country[event["country"]] = {}
            user = event["user"]
            users[user] = users.get(user, 0) + event["amount"]

    def rankings(self) -> dict[str, Ranking]:
        """Each country's top ten, best first."""
        return {country: tuple(heapq.nsmallest(TOP, users.items(), key=_rank))
                for country, users in self.by_country.items()}


def table_rankings(table: dict[tuple[Any, ...], dict[str, Any]]) -> dict[str, Ranking] | None:
    """The ``top_spenders`` table as rankings per country; None unless every country's
    ranks are exactly 1..n."""
    rows: dict[str, list[tuple[int, str, int]]] = {}
    for row in table.values():
        rows.setdefault(row["country"], []).append((row["rank"], row["user_id"], row["spent"]))
    result: dict[str, Ranking] = {}
    for country, ranked in rows.items():
        ranked.sort()
        if [r for r, _, _ in ranked] != list(range(1, len(ranked) + 1)):
            return None
        result[country] = tuple((user, spent) for _, user, spent in ranked)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
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
        ran = run_on_backlog(stack, REPO / "topologies" / "top_spenders.py", TOPIC, PARTITIONS,
                             values, "top_spenders", args.timeout)
        del values
        hailstorm_s, pauses, table = ran.seconds, ran.pauses, ran.table
        print("baseline", flush=True)
        baseline = TopSpenders()
        consumed_s = baseline_consume(stack.kafka, TOPIC, PARTITIONS, args.events, baseline)
        ranked_at = time.perf_counter()
        expected = baseline.rankings()
        baseline_s = consumed_s + time.perf_counter() - ranked_at
        bytewax = None
        bytewax_why = bytewax_skipped(args.no_bytewax)
        if bytewax_why is None:
            print("Bytewax", flush=True)
            bytewax = run_bytewax("top_spenders", stack.kafka, TOPIC)
        outcomes = run_peers("top_spenders", stack.kafka, TOPIC, PARTITIONS, args.events,
                             expected, normalise=lambda ranking: tuple(map(tuple, ranking)),
                             peers=others, top=TOP)
    distinct = sum(len(users) for users in baseline.by_country.values())
    committed = table_rankings(table)
    if committed != expected:
        print(f"MISMATCH: hailstorm's table has {len(table)} rows"
              f"{'' if committed is not None else ' with gaps in the ranks'}, the baseline "
              f"{sum(len(r) for r in expected.values())}", file=sys.stderr)
        return 1
    if bytewax is not None and bytewax.result != expected:
        print("MISMATCH: Bytewax's top spenders differ from the baseline's", file=sys.stderr)
        return 1
    rate = args.events / hailstorm_s
    baseline_rate = args.events / baseline_s
    figures: dict[str, Any] = {
        "events": args.events, "users": args.users, "distinct_users": distinct,
        "countries": len(expected), "top": TOP, "table_rows": len(table),
        "partitions": PARTITIONS, "bolt_instances": BOLT_INSTANCES,
        "hailstorm_s": round(hailstorm_s, 2), "hailstorm_events_per_s": round(rate),
        "baseline_s": round(baseline_s, 2), "baseline_events_per_s": round(baseline_rate),
        "ratio_hailstorm_to_baseline": round(rate / baseline_rate, 3), **pauses,
        "result_equal": True, **machine(),
    }
    lines = [
        f"{args.events:,} events, {distinct:,} distinct users in {len(expected)} countries, "
        f"{PARTITIONS} partitions, two keyed stages (running totals -> top {TOP} per "
        f"country), PostgreSQL upsert table, round every 1 s, {figures['cores']} cores, "
        "backlog",
        f"  hailstorm: {rate:,.0f} events/s (committed after {hailstorm_s:.1f} s)",
        f"  baseline:  {baseline_rate:,.0f} events/s (one process, json + dict, top {TOP} "
        f"once at the end, {baseline_s:.1f} s)",
        f"  rounds:    {pauses['rounds']} committed; spouts paused {pauses['pause_mean_ms']} ms "
        f"on average per round, {pauses['pause_max_ms']} ms at most",
        f"  ratio:     {rate / baseline_rate:.2f}; committed table == baseline's top {TOP} "
        "per country",
    ]
    cpu, cpu_line = cpu_figures(ran.cpu, args.events, "event", ran.whole_machine)
    figures.update(cpu)
    lines.append(cpu_line)
    note_bytewax_skipped(bytewax_why, figures, lines)
    if bytewax is not None:
        bytewax_rate = args.events / bytewax.seconds
        figures["bytewax_s"] = round(bytewax.seconds, 2)
        figures["bytewax_events_per_s"] = round(bytewax_rate)
        figures["ratio_hailstorm_to_bytewax"] = round(rate / bytewax_rate, 3)
        lines.append(f"  Bytewax:   {bytewax_rate:,.0f} events/s (stateful_map -> "
                     f"stateful_flat_map, 2 processes, recovery on, 1 s epochs, no database); "
                     f"hailstorm is {rate / bytewax_rate:.2f}x; its rankings == baseline's")
    other_figures, other_lines = peer_figures(outcomes, args.events, rate, "events")
    figures.update(other_figures)
    lines.extend(other_lines)
    report("two_stage_throughput", figures, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
