"""Spout cost: what one spout instance spends per message, by phase, in one process.

    .venv/bin/python bench/spout_cost.py [--workload user-totals] [--messages 400000]
                                         [--batch 10000] [--runs 5]

Needs no services. Runs the spout of a workload's topology (its :class:`SpoutCore`, reading
one partition, with the topology's own decoder, ``explode``, the downstream bolts' ``key``,
``lift`` and pre-aggregation, and routing) over the workload's realistic messages, fetched
``--batch`` at a time as a spout's consume returns them, and encodes the DATA frames it
would send. Like the runtime it stages each fetch ``SPOUT_CHUNK`` messages at a time and
flushes when :meth:`SpoutCore.flush_due` says (every fetch but the last comes back full: a
backlog, which a spout of pre-aggregated bolts combines fetch after fetch). Per phase, the
CPU time per message (``time.process_time``):

* **stage**: decoding and exploding the messages (:meth:`SpoutCore.stage`), and for a
  spout that :attr:`~SpoutCore.combines_when_staged`, keying, lifting and combining;
* **flush**: judging lateness, keying, lifting, combining per key (what was not combined
  when staged) and routing (:meth:`SpoutCore.flush`);
* **encode**: the DATA frames of every destination (:func:`encode_frames`).

The run with the least CPU in all is reported (``--runs``). A processor's cyclic garbage
collector is set as the runtime sets it. In a topology run every processor shares the
machine with the broker, the other processors and the database, and pays for TLS, its
queues, its consumer's threads and its metrics besides. Yet in the same hour (2026-12-04)
a per-user-totals spout cost 3.08 us a message here and 3.9 us an event in
``bench/user_totals_throughput.py``, a page-views spout 12.86 and 13.0, a word-count spout
4.54 and 7.6 ("Where the time goes" in ``docs/performance.md``): most of a spout's time is
its own code's, which this measures with less noise than a topology run. It times a part
of hailstorm alone: no peer or baseline loop runs beside it (the throughput benches do).

Workloads (``hailstorm.dev.workloads``, seeded):

* ``user-totals``: ``KeyedEvents`` over 1M users (Zipf 0.6), ``topologies/user_totals.py``;
* ``two-stage``: the same events, ``topologies/top_spenders.py``;
* ``pageviews``: ``PageViews`` as Avro, ``topologies/pageviews.py``;
* ``wordcount``: ``ZipfText`` lines (50,000 words, Zipf 1.1), ``topologies/wordcount.py``.

Prints one JSON line of figures and a human summary.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import machine, phase_figures, report, sample_lines  # noqa: E402
from pageviews_throughput import encoded  # noqa: E402

from hailstorm.dev.workloads import KeyedEvents, PageViews  # noqa: E402
from hailstorm.processors import Batch, Contributions  # noqa: E402
from hailstorm.processors.spout_core import SpoutCore  # noqa: E402
from hailstorm.protocol.wire import DataBatch, encode_frames  # noqa: E402
from hailstorm.runtime.spout import SPOUT_CHUNK  # noqa: E402
from hailstorm.runtime.task import GC_THRESHOLDS  # noqa: E402
from hailstorm.topology import SpoutSpec  # noqa: E402
from hailstorm.topology.loading import load_topology  # noqa: E402

PHASES = ("stage", "flush", "encode")


def _keyed_events(count: int) -> list[bytes]:
    return list(KeyedEvents(keys=1_000_000).events(count))


def _page_views(count: int) -> list[bytes]:
    return encoded(PageViews().views(count))


def _text_lines(count: int) -> list[bytes]:
    return [line.encode() for line in sample_lines(count)]


WORKLOADS: dict[str, tuple[str, Callable[[int], list[bytes]]]] = {
    "user-totals": ("user_totals.py", _keyed_events),
    "two-stage": ("top_spenders.py", _keyed_events),
    "pageviews": ("pageviews.py", _page_views),
    "wordcount": ("wordcount.py", _text_lines),
}


def frame_of(part: Batch | Contributions, partition: int) -> DataBatch:
    """The DATA frame a spout of wire partition ``partition`` sends for ``part`` (of
    :attr:`SpoutOutput.batches`)."""
    if isinstance(part, Contributions):
        return DataBatch.of([partition] * len(part), part.offsets, part.tuples, part.keys,
                            part.values)
    return DataBatch.of([partition] * len(part), part.offsets, part.tuples)


def one_run(topology: Any, spout: SpoutSpec, messages: list[bytes],
            batch: int) -> dict[str, float]:
    """CPU seconds per phase of one spout instance reading ``messages`` from offset 0."""
    core = SpoutCore(spout, 0, topology.downstream_of(spout))
    core.start({})
    core.resume()
    spent = dict.fromkeys(PHASES, 0.0)
    clock = time.process_time
    for start in range(0, len(messages), batch):
        fetched = messages[start:start + batch]
        full = start + batch < len(messages)  # a backlog waits behind every fetch but the last
        for at in range(start, start + len(fetched), SPOUT_CHUNK):
            values = messages[at:min(at + SPOUT_CHUNK, start + len(fetched))]
            began = clock()
            core.stage(list(range(at, at + len(values))), values)
            spent["stage"] += clock() - began
            if core.flush_due(fetch_ended=at + SPOUT_CHUNK >= start + len(fetched),
                              fetch_full=full):
                began = clock()
                out = core.flush()
                flushed = clock()
                encode_frames([frame_of(part, 0) for part in out.batches.values()])
                spent["flush"] += flushed - began
                spent["encode"] += clock() - flushed
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="user-totals")
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--batch", type=int, default=10_000,
                        help="Messages a consume call returns (the runtime's most: 10,000).")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if args.messages < 1 or args.batch < 1 or args.runs < 1:
        parser.error("--messages, --batch and --runs must be positive")

    file, generate = WORKLOADS[args.workload]
    topology = load_topology(str(REPO / "topologies" / file))
    spout = topology.spouts[0]
    print(f"generating {args.messages:,} messages ({args.workload})", flush=True)
    messages = generate(args.messages)
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    runs = []
    try:
        for run in range(args.runs):
            runs.append(one_run(topology, spout, messages, args.batch))
            print(f"run {run + 1}/{args.runs}: {sum(runs[-1].values()):.2f} s of CPU",
                  flush=True)
    finally:
        gc.set_threshold(*thresholds)
    measured, summary = phase_figures(runs, len(messages), "message")
    figures = {
        **machine(), "workload": args.workload, "topology": f"topologies/{file}",
        "spout": spout.name, "messages": len(messages), "batch": args.batch, "runs": args.runs,
        **measured,
    }
    report("spout_cost", figures,
           f"{args.workload}: one spout of topologies/{file}, {len(messages):,} messages in "
           f"batches of {args.batch:,}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
