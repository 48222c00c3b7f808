"""Windows, distinct users and late data: the pageviews topology against the baseline and
Bytewax.

    .venv/bin/python bench/pageviews_throughput.py [--views 1000000]

Starts an embedded stack of its own (brought down afterwards), produces ``--views`` Avro page
views (:class:`hailstorm.dev.workloads.PageViews`: 100,000 pages by Zipf's law s = 1.1, 1M users
s = 0.8, ``--per-second`` (1,000) views per second of event time, 5% delayed by up to
5 min, 0.5% by 5-30 min) to the topic ``page-views`` (4 partitions), then, after one untimed
read that warms the broker for every contender (``common.warm_broker``), on that same
backlog:

* hailstorm: ``topologies/pageviews.py`` (4 spouts judging lateness, 4 ``page_windows``
  bolt instances keeping per page 5-minute windows of views, a ``HyperLogLog`` of users and
  a ``Mean`` latency; late views to the topic ``pageviews.late``; the ``page_stats`` upsert
  table in the stack's PostgreSQL; a round every second), timed from the master's first
  ``Flowing`` until the committed clock covers every offset;
* baseline: one process, confluent-kafka batch consume, fastavro, the same lateness per
  partition, a dict of windows per page with the same ``HyperLogLog``;
* Bytewax (when installed): a ``stateful_map`` keyed by partition judging lateness, then
  one keyed by page keeping the windows, 2 processes, recovery on, 1 s epochs;
* Pathway, Quix Streams and PyFlink are not run (the reason is in the output): the windows'
  distinct users are hailstorm's ``HyperLogLog``, which a peer would have to reimplement.

The committed table must equal the baseline's windows, and Bytewax's too. Prints one JSON
line of figures and a human summary.
"""

from __future__ import annotations

import argparse
import io
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
from fastavro import parse_schema, schemaless_reader, schemaless_writer  # noqa: E402
from peer_runs import peers_not_run  # noqa: E402
from peers import bytewax_skipped, note_bytewax_skipped, run_bytewax  # noqa: E402

from hailstorm.dev.harness import StackAddresses  # noqa: E402
from hailstorm.dev.workloads import PageViews  # noqa: E402
from topologies.pageviews import PAGE_VIEW_SCHEMA, USERS, WINDOW_MS  # noqa: E402

TOPIC = "page-views"
PARTITIONS = 4
SCHEMA = parse_schema(PAGE_VIEW_SCHEMA)


class PageWindows:
    """The baseline's work, and Bytewax's per page: per (page, window start)
    ``[views, users HyperLogLog, latency sum, latency count]``; views late for their
    partition (window end + 5 min at or below its newest event time) are counted apart."""

    def __init__(self) -> None:
        self.windows: dict[tuple[str, int], list[Any]] = {}
        self.newest: dict[int, int] = {}
        self.late = 0

    def add(self, partition: int, view: dict[str, Any]) -> None:
        ts = view["ts"]
        start = ts - ts % WINDOW_MS
        newest = self.newest.get(partition)
        if newest is not None and start + 2 * WINDOW_MS <= newest:
            self.late += 1
            return
        if newest is None or ts > newest:
            self.newest[partition] = ts
        key = (view["page"], start)
        figures = self.windows.get(key)
        users = USERS.lift(view["user"])
        if figures is None:
            self.windows[key] = [1, users, view["latency_ms"], 1]
        else:
            figures[0] += 1
            figures[1] = USERS.absorb(figures[1], users)
            figures[2] += view["latency_ms"]
            figures[3] += 1

    def rows(self) -> dict[tuple[str, int], tuple[int, int, float]]:
        return {key: (views, round(USERS.estimate(users)), total / count)
                for key, (views, users, total, count) in self.windows.items()}


def baseline(bootstrap: str, total: int) -> tuple[float, PageWindows]:
    """One process: consume every partition from offset 0, decode, judge, aggregate."""
    work = PageWindows()

    def step(messages: list[Any]) -> None:
        for m in messages:
            work.add(m.partition(), schemaless_reader(io.BytesIO(m.value()), SCHEMA,
                                                      SCHEMA))  # type: ignore[arg-type]

    seconds = baseline_consume(bootstrap, TOPIC, PARTITIONS, total, step, messages=True)
    return seconds, work


def encoded(views: Any) -> list[bytes]:
    values = []
    for view in views:
        buffer = io.BytesIO()
        schemaless_writer(buffer, SCHEMA, view)
        values.append(buffer.getvalue())
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--views", type=int, default=1_000_000)
    parser.add_argument("--per-second", type=int, default=1_000,
                        help="Views per second of event time (fewer: a longer span, more "
                             "windows closed; default 1000).")
    parser.add_argument("--no-bytewax", action="store_true", help="Skip the Bytewax peer.")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)

    print(f"generating {args.views:,} page views", flush=True)
    values = encoded(PageViews(per_second=args.per_second).views(args.views))
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        ran = run_on_backlog(stack, REPO / "topologies" / "pageviews.py", TOPIC, PARTITIONS,
                             values, "page_stats", args.timeout)
        del values
        hailstorm_s, pauses, table = ran.seconds, ran.pauses, ran.table
        expired = round(sum(m.get("hailstorm_windows_expired_total", 0.0)
                            for m in ran.bolts.values()))
        keys_held = round(sum(m.get("hailstorm_state_keys", 0.0) for m in ran.bolts.values()))
        print("baseline", flush=True)
        baseline_s, work = baseline(stack.kafka, args.views)
        bytewax = None
        bytewax_why = bytewax_skipped(args.no_bytewax)
        if bytewax_why is None:
            print("Bytewax", flush=True)
            bytewax = run_bytewax("pageviews", stack.kafka, TOPIC)
    expected = work.rows()
    committed = {key: (row["views"], row["users"], row["mean_latency_ms"])
                 for key, row in table.items()}
    if committed != expected:
        print(f"MISMATCH: hailstorm's table has {len(committed)} windows, the baseline "
              f"{len(expected)}", file=sys.stderr)
        return 1
    if bytewax is not None and bytewax.result != expected:
        print(f"MISMATCH: Bytewax has {len(bytewax.result)} windows, the baseline "
              f"{len(expected)}", file=sys.stderr)
        return 1
    rate = args.views / hailstorm_s
    baseline_rate = args.views / baseline_s
    figures: dict[str, Any] = {
        "views": args.views, "views_per_event_second": args.per_second,
        "windows": len(expected), "late_views": work.late,
        "windows_expired": expired, "keys_held": keys_held,
        "partitions": PARTITIONS, "bolt_instances": 4,
        "hailstorm_s": round(hailstorm_s, 2), "hailstorm_views_per_s": round(rate),
        "baseline_s": round(baseline_s, 2), "baseline_views_per_s": round(baseline_rate),
        "ratio_hailstorm_to_baseline": round(rate / baseline_rate, 3), **pauses,
        "result_equal": True, **machine(),
    }
    lines = [
        f"{args.views:,} Avro page views, {len(expected):,} (page, 5-min window) rows, "
        f"{work.late:,} late views, {PARTITIONS} partitions, PostgreSQL upsert table, round "
        f"every 1 s, {figures['cores']} cores, backlog",
        f"  hailstorm: {rate:,.0f} views/s (committed after {hailstorm_s:.1f} s)",
        f"  baseline:  {baseline_rate:,.0f} views/s (one process, fastavro + dicts + the same "
        f"HyperLogLog, {baseline_s:.1f} s)",
        f"  rounds:    {pauses['rounds']} committed; spouts paused {pauses['pause_mean_ms']} ms "
        f"on average per round, {pauses['pause_max_ms']} ms at most",
        f"  state:     the bolts dropped {expired:,} closed windows of {len(expected):,}; "
        f"{keys_held:,} pages held at the end",
        f"  ratio:     {rate / baseline_rate:.2f}; committed table == baseline windows",
    ]
    cpu, cpu_line = cpu_figures(ran.cpu, args.views, "view", ran.whole_machine)
    figures.update(cpu)
    lines.append(cpu_line)
    note_bytewax_skipped(bytewax_why, figures, lines)
    if bytewax is not None:
        bytewax_rate = args.views / bytewax.seconds
        figures["bytewax_views_per_s"] = round(bytewax_rate)
        figures["ratio_hailstorm_to_bytewax"] = round(rate / bytewax_rate, 3)
        lines.append(f"  Bytewax:   {bytewax_rate:,.0f} views/s (two stateful_maps, 2 processes, "
                     f"recovery on, 1 s epochs); hailstorm is {rate / bytewax_rate:.2f}x")
    other_figures, other_lines = peers_not_run(
        "not run: the distinct users per window are hailstorm's own HyperLogLog (a peer "
        "would have to reimplement it bit for bit to reach the same estimates)")
    figures.update(other_figures)
    lines.extend(other_lines)
    report("pageviews_throughput", figures, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
