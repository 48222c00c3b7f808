"""Memory on an unbounded key space: the resident size of bolts counting events per key,
with a time to live, over millions of distinct keys.

    .venv/bin/python bench/ttl_memory.py [--events 10000000] [--without-ttl]

Starts an embedded stack of its own (brought down afterwards), produces ``--events`` text
events ``"<key> <event time, s>"`` to the topic ``ttl-keys`` (4 partitions): 1,000 events
per second of event time; 20% of them by 10,000 returning keys (Zipf s = 1.1), the rest
each by a key never seen before (so ``--events`` 10M gives about 8M distinct keys); 2% of
the events delayed by up to 90 s, which makes some late (the retention is 60 s). Then it
runs a topology of 4 spouts and 2 bolt instances keeping ``per_key(Count(), ttl=60)`` with
``event_time=`` and ``late=`` (pre-aggregated by the spouts, no sink; see the module
template below) on that backlog until a round covering every offset commits, sampling every
5 s each bolt process's resident set size (``VmRSS``), the keys it holds
(``hailstorm_state_keys``) and the keys it dropped (``hailstorm_keys_expired_total``).

``--without-ttl`` runs the same count without ``ttl=`` (every key kept) for comparison.
Prints the samples, one JSON line of figures and a summary; nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import embedded_stack, machine, processor_metrics, report, run_logs  # noqa: E402

from hailstorm import kafka  # noqa: E402
from hailstorm.dev.harness import StackAddresses, TopologyRun, wait_for  # noqa: E402

TOPIC = "ttl-keys"
PARTITIONS = 4
TTL_S = 60
RETURNING = 10_000

MODULE = '''"""Events per key, {variant} (written by bench/ttl_memory.py)."""
from hailstorm import Count, Topology, per_key


def event_of(line):
    key, ts = line.split(" ")
    return [(key, int(ts))]


topology = Topology("ttlbench")
events = topology.spout("events", topic="{topic}", decoder="text", explode=event_of)
topology.bolt("counts", inputs=[events], key=lambda e: e[0], lift=Count.lift,
              parallelism=2, preaggregate=True, {state})
'''
WITH_TTL = (f'state=per_key(Count(), ttl={TTL_S}), event_time=lambda e: e[1], '
            'late="ttlbench.late"')
WITHOUT_TTL = "state=per_key(Count())"


def events(count: int, seed: int = 7) -> Iterator[tuple[int, None, bytes]]:
    """``(partition, None, b"<key> <ts>")`` round-robin over the partitions."""
    rng = random.Random(seed)
    weights = [1 / (r + 1) ** 1.1 for r in range(RETURNING)]
    returning = iter(rng.choices(range(RETURNING), weights, k=count))
    for i in range(count):
        ts = i // 1000
        if rng.random() < 0.02:
            ts = max(0, ts - rng.randrange(90))
        key = f"r{next(returning)}" if rng.random() < 0.2 else f"k{i}"
        yield i % PARTITIONS, None, f"{key} {ts}".encode()


def rss_bytes(pid: int) -> int | None:
    """``VmRSS`` of process ``pid`` (None when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Sampler(threading.Thread):
    """Every ``interval`` s: per bolt, resident bytes, keys held and keys dropped."""

    def __init__(self, run: TopologyRun, started: float, interval: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.run_ = run
        self.started = started
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        metrics = processor_metrics(self.run_, "bolt")
        rss = {ident: rss_bytes(int(p.info["pid"])) for ident, p in
               self.run_.processors().items() if ident.startswith("bolt:")}
        answered = len(metrics) == len(rss)  # a bolt busy writing a snapshot may not

        def total(name: str) -> int | None:
            return round(sum(m.get(name, 0) for m in metrics.values())) if answered else None

        row: dict[str, Any] = {
            "s": round(time.monotonic() - self.started, 1),
            "rss_mb": sorted(round(v / 2**20) for v in rss.values() if v is not None),
            "keys_held": total("hailstorm_state_keys"),
            "keys_dropped": total("hailstorm_keys_expired_total"),
            "tuples_in": total("hailstorm_messages_in_total"),
        }
        self.samples.append(row)

        def shown(n: int | None, width: int) -> str:
            return f"{'n/a':>{width}}" if n is None else f"{n:>{width},}"

        print(f"  {row['s']:7.1f} s  bolts' RSS {row['rss_mb']} MB  keys held "
              f"{shown(row['keys_held'], 10)}  dropped {shown(row['keys_dropped'], 10)}  "
              f"contributions in {shown(row['tuples_in'], 11)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--without-ttl", action="store_true",
                        help="Count without ttl= (every key is kept), for comparison.")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args(argv)
    variant = "without a ttl" if args.without_ttl else f"with ttl={TTL_S} s"
    module = Path(tempfile.mkdtemp(prefix="hailstorm-ttl-bench-")) / "ttlbench.py"
    module.write_text(MODULE.format(variant=variant, topic=TOPIC,
                                    state=WITHOUT_TTL if args.without_ttl else WITH_TTL))
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        kafka.create_topic(stack.kafka, TOPIC, PARTITIONS)
        if not args.without_ttl:
            kafka.create_topic(stack.kafka, "ttlbench.late", 1)
        print(f"producing {args.events:,} events", flush=True)
        kafka.produce(stack.kafka, TOPIC, events(args.events))
        ends = kafka.log_ends(stack.kafka, [(TOPIC, p) for p in range(PARTITIONS)])
        target = {tp: end - 1 for tp, end in ends.items()}
        with run_logs("hailstorm-bench-logs-") as logs, TopologyRun(
                stack, module, log_dir=logs, negotiators=1, timeout=60) as run:
            run.start()
            wait_for("the master to be Flowing", run.flowing, 300, run.alive, poll=0.05)
            started = time.monotonic()
            print(f"hailstorm ({variant}): flowing", flush=True)
            sampler = Sampler(run, started)
            sampler.start()
            wait_for("a commit covering every offset", lambda: run.covers(target),
                     args.timeout, run.alive, poll=0.2)
            seconds = time.monotonic() - started
            sampler.done.set()
            sampler.join()
            sampler.sample()
            run.stop()
    samples = sampler.samples
    peak = max((sum(s["rss_mb"]) for s in samples), default=0)
    half = [s for s in samples if s["s"] >= seconds / 2]
    figures: dict[str, Any] = {
        "events": args.events, "ttl_s": None if args.without_ttl else TTL_S,
        "seconds": round(seconds, 1), "events_per_s": round(args.events / seconds),
        "peak_rss_mb_all_bolts": peak,
        "rss_mb_all_bolts_second_half": sorted({sum(s["rss_mb"]) for s in half}),
        "keys_held_end": samples[-1]["keys_held"],
        "keys_dropped_end": samples[-1]["keys_dropped"],
        "samples": len(samples), **machine(),
    }
    report("ttl_memory", figures, "\n".join([
        f"{args.events:,} events, 80% by keys never seen before, per_key(Count()) {variant}, "
        f"2 bolt instances, {PARTITIONS} partitions, backlog",
        f"  {args.events / seconds:,.0f} events/s (committed after {seconds:.0f} s)",
        f"  both bolts' resident size: at most {peak:,} MB; in the second half of the run "
        f"{min(figures['rss_mb_all_bolts_second_half'], default=0):,}-"
        f"{max(figures['rss_mb_all_bolts_second_half'], default=0):,} MB",
        f"  keys held at the end: {figures['keys_held_end']}; dropped: "
        f"{figures['keys_dropped_end']}",
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
