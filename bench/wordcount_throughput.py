"""Word count throughput: hailstorm end to end against a single-process baseline.

    .venv/bin/python bench/wordcount_throughput.py [--lines 500000] [--snapshot-interval 1]
        [--sink postgresql|sqlite|kafka] [--backlog [--cold-broker]] [--timeline]

Starts an embedded stack of its own (brought down afterwards), then:

* hailstorm, live (the default): starts ``topologies/wordcount.py`` (one negotiator, the
  driver on Spark ``local[N]``) on the empty topic ``words`` (4 partitions), waits until it
  is Flowing, then produces N lines and measures lines/s from the first produced message
  until the committed clock covers every offset (and until the bolts had saved the snapshot
  of that round, from the ZooKeeper mtime of their snapshot reports). The producer shares
  the cores, and the rate cannot exceed the producer's;
* hailstorm, ``--backlog``: produces the N lines first, reads them once untimed (so the
  broker's JIT has compiled its fetch path, as it has for the peers that run after
  hailstorm; ``--cold-broker`` skips it), then starts the topology and
  measures from the moment the master is first Flowing (spouts start reading) until the
  committed clock covers every offset: the same backlog the baseline reads. It also
  reports when the sink's table first held every result (its ``hailstorm_progress``
  covering every offset: what a reader of the table waits for; the round that covers the
  same offsets commits later, and is what a recovery restarts from);
* either way the ``word_counts`` sink writes to the stack's PostgreSQL (``--sink sqlite``:
  a private SQLite file; ``--sink kafka``: an upsert ``Topic`` of 4 partitions, written in
  Kafka transactions, whose newest record per word must then equal the baseline's count),
  and the committed state must equal the baseline's Counter;
* baseline (always, in the same run, after the topology was stopped): one process,
  confluent-kafka batch consume, the topology's own ``words_of``, ``collections.Counter``;
  and the raw confluent-kafka consume rate of the same topic (no processing at all).

Prints one JSON line of figures and a human summary. ``--timeline`` adds to it, every 0.25
s of the hailstorm run, the tuples the spouts, bolts and sink had taken in and the master
state (scraping ``/metrics`` costs a little CPU of its own).
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
    VOCABULARIES,
    TableProgress,
    baseline_word_count,
    cpu_by_role,
    cpu_figures,
    embedded_stack,
    machine,
    machine_cpu,
    machine_used,
    pause_figures,
    processor_cpu,
    report,
    run_logs,
    sample_lines,
    warm_broker,
)
from peer_runs import add_peers_option, chosen_peers, peer_figures, run_peers  # noqa: E402
from peers import bytewax_skipped, note_bytewax_skipped, run_bytewax  # noqa: E402

from hailstorm import kafka  # noqa: E402
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce, wait_for  # noqa: E402
from hailstorm.protocol.layout import CommittedRecord, SnapshotReport  # noqa: E402
from topologies.wordcount import WORD, words_of  # noqa: E402

TOPIC = "words"
PARTITIONS = 4

TO_KAFKA = """
from hailstorm import Count, Topic, Topology, itself, per_key
from topologies.wordcount import words_of

topology = Topology("wordcount")
lines = topology.spout("lines", topic="words", decoder="text", explode=words_of)
counts = topology.bolt("counts", inputs=[lines], key=itself, state=per_key(Count()),
                       lift=Count.lift, emit=lambda word, count: [(word, count)],
                       parallelism=2, preaggregate=True)
topology.sink("word_counts", inputs=[counts], target=Topic(
    "{output}", key=lambda t: t[0], value=lambda t: {{"word": t[0], "count": t[1]}},
    partitions=4))
"""
"""``topologies/wordcount.py`` with its sink writing to a topic instead of a table."""


def topic_counts(bootstrap: str, topic: str) -> dict[str, int]:
    """The newest count per word on the output topic (read_committed)."""
    import json

    from hailstorm.dev.harness import topic_records

    return {record.key.decode(): json.loads(record.value)["count"]
            for record in topic_records(bootstrap, topic) if record.key and record.value}


def timeline_sample(run: TopologyRun, at: float) -> dict[str, Any]:
    """What the processors of each role took in so far (``hailstorm_messages_in_total``),
    and the master state, ``at`` seconds into the run."""
    sample: dict[str, Any] = {"t": round(at, 2)}
    for ident, metrics in run.processor_metrics().items():
        role = ident.split(":")[0]
        sample[role] = sample.get(role, 0) + int(metrics.get("hailstorm_messages_in_total", 0))
    master = run.master()
    sample["master"] = repr(master.state)[:60] if master else None
    return sample


def bolts_saved_after(run: TopologyRun, committed: CommittedRecord,
                      started_wall: float) -> float | None:
    """Seconds until the last bolt instance reported its snapshot of the committed round.

    From the ZooKeeper mtime of each ``snapshots/counts/<i>`` report; None when a report
    was already replaced by a later round's.
    """
    latest = 0.0
    for i in range(2):
        data, stat = run.zk.get(run.paths.snapshot_node(f"bolt:counts:{i}"))
        if SnapshotReport.from_json(data).epoch != committed.epoch:
            return None
        latest = max(latest, stat.mtime / 1000)
    return latest - started_wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    parser.add_argument("--sink", choices=("postgresql", "sqlite", "kafka"),
                        default="postgresql",
                        help="Where the word_counts sink writes (the stack's PostgreSQL, a "
                        "private SQLite file, or an upsert topic in Kafka transactions).")
    parser.add_argument("--backlog", action="store_true",
                        help="Produce every line before starting the topology and time "
                        "reading that backlog (as the baseline does), instead of producing "
                        "while it runs.")
    parser.add_argument("--vocabulary", choices=VOCABULARIES, default="zipf",
                        help="zipf: realistic text (50,000 words, Zipf s=1.1; the default). "
                        "toy: 300 equally likely words, a labelled best case.")
    parser.add_argument("--no-bytewax", action="store_true",
                        help="Skip the Bytewax peer (else the 'bench' extra's bytewax is "
                        "installed into this venv on first use).")
    add_peers_option(parser)
    parser.add_argument("--timeline", action="store_true",
                        help="Also print, every 0.25 s of the hailstorm run, the tuples the "
                             "spouts, bolts and sink took in and the master state.")
    parser.add_argument("--cold-broker", action="store_true",
                        help="--backlog: skip the untimed read of the topic before the "
                        "hailstorm run that warms the broker's fetch path (the peers, run "
                        "after hailstorm, always meet a warm broker).")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="Bound on waiting for the commit (s).")
    args = parser.parse_args(argv)
    others = chosen_peers(args.peers)

    lines = sample_lines(args.lines, vocabulary=args.vocabulary)
    values = [line.encode() for line in lines]
    words = sum(len(words_of(line)) for line in lines)
    distinct = len({w for line in lines for w in words_of(line)})
    del lines
    bytewax_why = bytewax_skipped(args.no_bytewax)
    with_bytewax = bytewax_why is None
    with embedded_stack() as env, run_logs("hailstorm-bench-logs-") as logs:
        stack = StackAddresses.from_env(env)
        kafka.create_topic(stack.kafka, TOPIC, PARTITIONS)
        partitions = kafka.partitions_of(stack.kafka, TOPIC)
        database = stack.database if args.sink == "postgresql" else None
        module = REPO / "topologies" / "wordcount.py"
        output = f"word-totals-{logs.name[-8:].lower()}"
        if args.sink == "kafka":
            module = logs / "wordcount_to_kafka.py"
            module.write_text(TO_KAFKA.format(output=output))
        with TopologyRun(stack, module, log_dir=logs,
                         negotiators=1, snapshot_interval=args.snapshot_interval,
                         timeout=60, database=database) as run:
            produced = Produced(TOPIC)
            if args.backlog:
                produce_started = time.monotonic()
                produce(stack.kafka, produced, values, partitions)
                produce_s = time.monotonic() - produce_started
                if not args.cold_broker:
                    warm_broker(stack.kafka, TOPIC, PARTITIONS, args.lines)
                run.start()
                wait_for("the master to be Flowing", run.flowing, 300, run.alive, poll=0.02)
                started_wall = time.time()
                started = time.monotonic()
                cpu_before, machine_before = processor_cpu(run), machine_cpu()
                print("hailstorm: flowing", flush=True)
            else:
                run.start()
                run.wait_flowing(300)
                started_wall = time.time()
                started = time.monotonic()
                cpu_before, machine_before = processor_cpu(run), machine_cpu()
                produce(stack.kafka, produced, values, partitions)
                produce_s = time.monotonic() - started
            target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
            clock_s: float | None = None
            table_s: float | None = None
            tables = None if args.sink == "kafka" else TableProgress(run.database, TOPIC)

            timeline: list[dict[str, Any]] = []

            def committed_or_clock() -> object:
                nonlocal clock_s, table_s
                if args.timeline and (not timeline or
                                      time.monotonic() - started - timeline[-1]["t"] >= 0.25):
                    timeline.append(timeline_sample(run, time.monotonic() - started))
                if table_s is None and tables is not None and tables.covers(
                        {p: o for (_t, p), o in target.items()}):
                    table_s = time.monotonic() - started
                master = run.master()
                clock = getattr(master.state, "clock", None) if master else None
                if clock_s is None and clock is not None and all(
                        clock.get(p, -1) >= o for p, o in target.items()):
                    clock_s = time.monotonic() - started
                return run.covers(target)

            committed = wait_for("a commit covering every offset", committed_or_clock,
                                 args.timeout, run.alive, poll=0.05)
            committed_s = time.monotonic() - started
            cpu = cpu_by_role(cpu_before, processor_cpu(run))
            whole_machine = machine_used(machine_before, machine_cpu())
            if tables is not None:
                tables.close()
            saved_s = bolts_saved_after(run, committed, started_wall)
            pauses = pause_figures(run)
            sink_metrics = run.processor_metrics().get("sink:word_counts:0", {})
            state = run.committed_bolt_states(committed)["counts"].merged
            run.stop()
        written = topic_counts(stack.kafka, output) if args.sink == "kafka" else None
        baseline_s, counts = baseline_word_count(stack.kafka, TOPIC, PARTITIONS, args.lines,
                                                 words_of)
        consume_s, _ = baseline_word_count(stack.kafka, TOPIC, PARTITIONS, args.lines,
                                           lambda _line: [])
        peers = {}
        if with_bytewax:
            for job in ("word_count", "word_count_final"):
                peers[job] = run_bytewax(job, stack.kafka, TOPIC)
        outcomes = run_peers("word_count", stack.kafka, TOPIC, PARTITIONS, args.lines,
                             dict(counts), word_pattern=WORD.pattern, peers=others)
    if dict(counts) != state:
        print(f"MISMATCH: hailstorm committed {sum(state.values())} words, baseline counted "
              f"{sum(counts.values())}", file=sys.stderr)
        return 1
    if written is not None and written != dict(counts):
        print(f"MISMATCH: the output topic holds {sum(written.values())} words, baseline "
              f"counted {sum(counts.values())}", file=sys.stderr)
        return 1
    commits = sink_metrics.get("hailstorm_sink_commit_seconds_count", 0)
    commit_ms = (round(1000 * sink_metrics["hailstorm_sink_commit_seconds_sum"] / commits, 1)
                 if commits else None)
    for job, peer in peers.items():
        if peer.result != dict(counts):
            print(f"MISMATCH: Bytewax {job} counted {sum(peer.result.values())} words, "
                  f"baseline {sum(counts.values())}", file=sys.stderr)
            return 1
    hailstorm_rate = args.lines / committed_s
    baseline_rate = args.lines / baseline_s
    consume_rate = args.lines / consume_s
    bytewax_rates = {job: args.lines / peer.seconds for job, peer in peers.items()}
    other_figures, other_lines = peer_figures(outcomes, args.lines, hailstorm_rate, "lines")
    cpu_numbers, cpu_line = cpu_figures(cpu, args.lines, "line", whole_machine)
    figures = {
        "vocabulary": args.vocabulary, "distinct_words": distinct,
        "lines": args.lines, "words": words, "partitions": PARTITIONS,
        "bolt_instances": 2, "snapshot_interval_s": args.snapshot_interval,
        "produce_s": round(produce_s, 2),
        "hailstorm_committed_s": round(committed_s, 2),
        "hailstorm_snapshot_clock_s": None if clock_s is None else round(clock_s, 2),
        "hailstorm_bolts_saved_s": None if saved_s is None else round(saved_s, 2),
        "hailstorm_lines_per_s": round(hailstorm_rate),
        "hailstorm_table_s": None if table_s is None else round(table_s, 2),
        "hailstorm_table_lines_per_s": None if table_s is None else round(args.lines / table_s),
        "ratio_table_to_baseline": None if table_s is None
        else round(args.lines / table_s / baseline_rate, 3),
        "baseline_s": round(baseline_s, 2), "baseline_lines_per_s": round(baseline_rate),
        "ratio_hailstorm_to_baseline": round(hailstorm_rate / baseline_rate, 3),
        "raw_consume_s": round(consume_s, 2), "raw_consume_lines_per_s": round(consume_rate),
        "ratio_hailstorm_to_raw_consume": round(hailstorm_rate / consume_rate, 3),
        **{f"bytewax_{job}_lines_per_s": round(rate) for job, rate in bytewax_rates.items()},
        **{f"ratio_hailstorm_to_bytewax_{job}": round(hailstorm_rate / rate, 3)
           for job, rate in bytewax_rates.items()},
        **other_figures, **pauses, **cpu_numbers,
        "sink_commits": int(commits), "sink_commit_mean_ms": commit_ms,
        "sink": args.sink, "mode": "backlog" if args.backlog else "live",
        "broker_warmed": args.backlog and not args.cold_broker,
        "result_equal": True, **machine(),
    }
    if args.timeline:
        figures["timeline"] = timeline
    skipped: list[str] = []
    note_bytewax_skipped(bytewax_why, figures, skipped)
    peer_lines = "".join(
        f"\n  Bytewax {job}: {rate:,.0f} lines/s (2 processes, recovery on, 1 s epochs); "
        f"hailstorm is {hailstorm_rate / rate:.2f}x"
        for job, rate in bytewax_rates.items()) + "".join(f"\n{line}" for line in skipped)
    label = "" if args.vocabulary == "zipf" else " (BEST CASE: toy vocabulary)"
    report("wordcount_throughput", figures, (
        f"{args.lines} lines ({words} words, {distinct} distinct, {args.vocabulary} "
        f"vocabulary{label}), {PARTITIONS} partitions, snapshot every "
        f"{args.snapshot_interval} s, sink in {args.sink}, {figures['cores']} cores, "
        f"{figures['mode']}\n"
        f"  hailstorm: {hailstorm_rate:,.0f} lines/s end to end (committed after "
        f"{committed_s:.1f} s; every result in the table after "
        f"{'?' if table_s is None else round(table_s, 2)} s; bolts had saved it after "
        f"{'?' if saved_s is None else round(saved_s, 1)} s; producing took "
        f"{produce_s:.1f} s{', before the start' if args.backlog else ''})\n"
        f"  baseline:  {baseline_rate:,.0f} lines/s (one process, Counter, {baseline_s:.1f} s)\n"
        f"  raw consume: {consume_rate:,.0f} lines/s (confluent-kafka, no processing)\n"
        f"  rounds:    {pauses['rounds']} committed; spouts paused {pauses['pause_mean_ms']} ms "
        f"on average per round, {pauses['pause_max_ms']} ms at most\n"
        f"  sink:      {int(commits)} commits, {commit_ms} ms each on average\n"
        f"  ratio:     {hailstorm_rate / baseline_rate:.2f}; committed state == baseline Counter"
        f"\n{cpu_line}" + peer_lines + "".join(f"\n{line}" for line in other_lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
