"""Snapshot overhead: word count throughput with a snapshot every second against every minute.

    .venv/bin/python bench/snapshot_overhead.py [--lines 300000] [--intervals 1,60]

Starts an embedded stack of its own (brought down afterwards), produces N lines
(``bench/common.sample_lines``) to the topic ``words`` (4 partitions) once, then runs
``topologies/wordcount.py`` once per snapshot interval, one after the other, each under a
fresh topology name (so each run reads the same backlog from offset 0: the same workload).

What is measured, per run: the clock starts at the moment the master entered ``Flowing`` for
the first time (its ``entered_at``, written by the negotiator; spouts start reading then) and
stops when the **bolts have processed every produced offset**: the spouts have read every
line (the sum of their ``hailstorm_messages_in_total``, scraped from their ``/metrics`` every
0.1 s, is N) and the 2 ``counts`` bolt instances have received everything the spouts sent
(the sum of their ``hailstorm_messages_in_total`` equals the spouts'
``hailstorm_messages_out_total``: pre-aggregated contributions, one per word and fetched
batch). With no faults everything a spout sends reaches one bolt instance once, so that is
the instant the bolts' processed position covers every offset, whatever the snapshot
interval; with a 60 s interval the commit of those offsets would wait for the next round,
so the commit is not the measure. The same poll records when the spouts had read every line
and how many rounds had been committed by then.

For runs with an interval up to ``--commit-up-to`` seconds (default 5) the script then also
waits for the commit covering every offset and checks the committed state equals the
single-process baseline's ``Counter`` (measured last, in the same run).

Prints one JSON line of figures and a human summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import (  # noqa: E402
    baseline_word_count,
    bench_logs,
    embedded_stack,
    machine,
    metric_total,
    processor_metrics,
    report,
    sample_lines,
)

from hailstorm import kafka  # noqa: E402
from hailstorm.dev.harness import (  # noqa: E402
    SQLITE,
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
)
from topologies.wordcount import words_of  # noqa: E402

TOPIC = "words"
PARTITIONS = 4
BOLTS = 2
MESSAGES_IN = "hailstorm_messages_in_total"
MESSAGES_OUT = "hailstorm_messages_out_total"


def one_run(stack: StackAddresses, interval: float, lines: int, words: int,
            target: dict[tuple[str, int], int], commit_up_to: float, timeout: float,
            logs: Path) -> tuple[dict[str, Any], dict[str, int] | None]:
    """Deploy word count with ``interval``, time the backlog; (figures, committed state)."""
    with TopologyRun(stack, REPO / "topologies" / "wordcount.py", log_dir=logs / f"i{interval}",
                     negotiators=1, snapshot_interval=interval, timeout=60,
                     database=SQLITE) as run:
        run.start()
        flowing = run.wait_flowing(300)
        started = flowing.entered_at
        spouts_s: float | None = None
        rounds = 0

        def processed() -> float | None:
            nonlocal spouts_s, rounds
            now = time.time()
            spouts = processor_metrics(run, "spout")
            if len(spouts) < PARTITIONS or sum(m.get(MESSAGES_IN, 0) for m in spouts.values()) \
                    != lines:
                return None
            # A processor counts a batch's output before its input, so with every line in, the
            # output of one scrape is final; spouts count a batch after sending it.
            spouts_sent = sum(m.get(MESSAGES_OUT, 0) for m in spouts.values())
            if spouts_s is None:
                spouts_s = now - started
            if metric_total(run, "bolt", MESSAGES_IN, "counts", instances=BOLTS) == spouts_sent:
                committed = run.committed()
                rounds = 0 if committed is None else committed.epoch
                return now - started
            return None

        processed_s: float = wait_for("the bolts to process every word", processed, timeout,
                                      run.alive, poll=0.1)
        committed_s: float | None = None
        state: dict[str, int] | None = None
        if interval <= commit_up_to:
            committed = wait_for("a commit covering every offset", lambda: run.covers(target),
                                 timeout, run.alive, poll=0.05)
            committed_s = time.time() - started
            state = run.committed_bolt_states(committed)["counts"].merged
        run.stop()
    figures = {
        "snapshot_interval_s": interval,
        "bolts_processed_s": round(processed_s, 2),
        "lines_per_s": round(lines / processed_s),
        "words_per_s": round(words / processed_s),
        "spouts_read_s": None if spouts_s is None else round(spouts_s, 2),
        "committed_epoch_when_processed": rounds,
        "committed_s": None if committed_s is None else round(committed_s, 2),
    }
    return figures, state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--intervals", default="1,60",
                        help="Snapshot intervals (s) to compare, run in this order.")
    parser.add_argument("--commit-up-to", type=float, default=5.0,
                        help="Also wait for the final commit (and check the state) for "
                             "intervals up to this many seconds.")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    intervals = [float(x) for x in args.intervals.split(",") if x.strip()]

    lines = sample_lines(args.lines)
    words = sum(len(words_of(line)) for line in lines)
    runs: list[dict[str, Any]] = []
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        kafka.create_topic(stack.kafka, TOPIC, PARTITIONS)
        partitions = kafka.partitions_of(stack.kafka, TOPIC)
        produced = Produced(TOPIC)
        produce(stack.kafka, produced, [line.encode() for line in lines], partitions)
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        logs = bench_logs("hailstorm-bench-overhead-")
        states = []
        for interval in intervals:
            figures, state = one_run(stack, interval, args.lines, words, target,
                                     args.commit_up_to, args.timeout, logs)
            runs.append(figures)
            if state is not None:
                states.append(state)
        baseline_s, counts = baseline_word_count(stack.kafka, TOPIC, PARTITIONS, args.lines,
                                                 words_of)
    if any(state != dict(counts) for state in states):
        print("MISMATCH: a committed state differs from the baseline Counter", file=sys.stderr)
        return 1
    by_interval = {r["snapshot_interval_s"]: r for r in runs}
    fastest = max(runs, key=lambda r: r["lines_per_s"])
    summary = [f"{args.lines} lines ({words} words) backlog, {PARTITIONS} partitions, "
               f"{BOLTS} bolt instances, {machine()['cores']} cores; time from Flowing until "
               f"the bolts had processed every word"]
    for r in runs:
        commit = "" if r["committed_s"] is None else f", committed after {r['committed_s']} s"
        summary.append(
            f"  snapshot every {r['snapshot_interval_s']:g} s: {r['lines_per_s']:,} lines/s "
            f"({r['bolts_processed_s']} s; spouts had read everything after "
            f"{r['spouts_read_s']} s; committed epoch then {r['committed_epoch_when_processed']}"
            f"{commit})")
    ratio = None
    if 1.0 in by_interval and 60.0 in by_interval:
        ratio = round(by_interval[1.0]["lines_per_s"] / by_interval[60.0]["lines_per_s"], 3)
        summary.append(f"  1 s / 60 s throughput: {ratio}")
    summary.append(f"  baseline: {args.lines / baseline_s:,.0f} lines/s (one process, Counter); "
                   f"committed states == baseline Counter: {len(states)} checked")
    report("snapshot_overhead", {
        "lines": args.lines, "words": words, "partitions": PARTITIONS, "bolt_instances": BOLTS,
        "runs": runs, "ratio_1s_to_60s": ratio, "fastest_interval_s":
            fastest["snapshot_interval_s"],
        "baseline_lines_per_s": round(args.lines / baseline_s), "states_checked": len(states),
        **machine()}, "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
