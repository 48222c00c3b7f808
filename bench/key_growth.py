"""Cost growth against the number of distinct keys: rate, peak RSS per processor, memory and
snapshot bytes per key, snapshot time and how long spouts stand paused in a snapshot round.

    .venv/bin/python bench/key_growth.py [--keys 10000,100000,1000000,10000000]
        [--occurrences 2] [--keys-per-line 100] [--snapshot-interval 1] [--rounds-after 2]
        [--timeout 1800] [--seed 1] [--tracemalloc-up-to 1000000]
    .venv/bin/python bench/key_growth.py --keys 10000,100000            # about 30 s

Starts an embedded stack of its own (brought down afterwards). For each key count N, in
increasing order, on a fresh topic ``bench-growth-N`` (4 partitions) and under a fresh
topology name:

1. **workload** (backlog): the N distinct keys are 16 hex digits of a hash of their index
   (``blake2b``, the keys of ``bench/recovery.py`` and ``bench/state_size.py``); every key
   occurs ``--occurrences`` times (default 2), all N x occurrences occurrences shuffled
   together (seeded), ``--keys-per-line`` (default 100) space-separated keys per message,
   messages round-robin over the partitions. So 10^7 keys are 2 x 10^7 tuples in 2 x 10^5
   messages of about 1.7 kB. Everything is produced before the topology starts;
2. **run**: ``bench/keycount_topology.py`` (``per_key(Count())``, 2 bolt instances split by
   key, 4 spouts, no sink; snapshot every ``--snapshot-interval`` s, one negotiator), its
   spout pointed at this topic. No sink on purpose: with one, the rate would be the rate of
   writing N rows to a table and the memory the sink's; without, the state is all there is;
3. **rate**: from the master's first ``Flowing`` (spouts start reading) until a committed
   round's clock covers every offset (the negotiator's ``committed_at``): keys/s (N over
   that time), tuples/s (N x occurrences over it) and messages/s. That includes waiting
   for the next round (rounds start every ``--snapshot-interval``, and a round's commit
   waits for the bolts' snapshots, which grow with the state), so with small N it is about
   one interval whatever N is. Hence also **processed**: from the same start until the 2
   bolt instances' ``hailstorm_messages_in_total`` (``/metrics``, scraped every 0.2 s, so
   meaningless below about 10^5 keys) add up to every tuple, and per processor its
   ``hailstorm_messages_in_total`` and ``_out_total`` over that time;
4. **at full state**: the run goes on until ``--rounds-after`` (default 2) more rounds
   committed; rounds run one after the other (``hailstorm/negotiator/machine.py``), so each of these
   started after the state was complete. A keyed bolt writes a round as a delta of the keys
   changed since its previous one (see ``docs/operations.md``), so these rounds write
   little or nothing, whatever N; the build rounds write the keys each one added. Each
   round's ``pause_s`` (how long the spouts stood paused: ``SpoutsPaused`` to
   ``Flowing(e, C)``) and ``snapshot_s`` (from ``Flowing(e, C)`` to the commit) come from
   the committed records (``hailstorm/protocol/layout.py``), polled every 0.05 s (each record also
   keeps the one before it, so none is missed); the build rounds are reported apart, and
   the negotiator's own figures over every round (``common.pause_figures``) too;
5. **memory**: every processor reports the pid of its Spark Python worker in ZooKeeper
   (``TopologyRun.processors()``, ``info["pid"]``); ``/proc/<pid>/status`` is read when the
   topology is first Flowing (state empty), every second, and at the end: ``VmHWM`` (the
   peak RSS of the worker since it was forked from Spark's Python daemon) and ``VmRSS``.
   Bytes per key from the bolts' RSS: the 2 bolt workers' ``VmRSS`` at the end, minus the
   same at the smallest N of the run, over the difference in keys (marginal cost), and the
   bolts' growth within the run (end minus first Flowing) over N;
6. **state**: after the topology stopped, the committed round's snapshot files are sized
   (``common.committed_snapshot_sizes``: bytes per key on disk) and loaded; the state must
   hold exactly N keys, each counted ``--occurrences`` times (exactly once), and its Python
   objects are sized with ``sys.getsizeof`` (each instance's dict and key strings; the
   counts are shared small ints) and, up to ``--tracemalloc-up-to`` keys, with
   ``tracemalloc`` while one instance's snapshot is loaded (``bench/state_size.py``'s
   figure: bytes still allocated once the state is built).

Prints one JSON line per key count (with a one-line summary), then a table per processor
and a summary table. Progress goes to stderr. Logs of the runs are kept in a
``hailstorm-bench-growth-*`` temporary directory.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import itertools
import random
import re
import sys
import time
import tracemalloc
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import (  # noqa: E402
    bench_logs,
    committed_snapshot_sizes,
    embedded_stack,
    machine,
    metric_total,
    pause_figures,
    processor_metrics,
    report,
)

from hailstorm import kafka  # noqa: E402
from hailstorm.dev.harness import (  # noqa: E402
    SQLITE,
    HarnessError,
    StackAddresses,
    TopologyRun,
    wait_for,
)
from hailstorm.protocol.layout import CommittedRecord  # noqa: E402
from hailstorm.snapshots import open_store  # noqa: E402

PARTITIONS = 4
BOLT = "counts"
BOLTS = 2
TOPOLOGY = REPO / "bench" / "keycount_topology.py"
KEY_LENGTH = 16
MESSAGES_IN = "hailstorm_messages_in_total"
MESSAGES_OUT = "hailstorm_messages_out_total"
POLL = 0.05
MEMORY_EVERY = 1.0
PROGRESS_EVERY = 15.0
SCRAPE_EVERY = 0.2
PRODUCE_SLICE = 20_000
"""Messages per producer (about 34 MB of 100-key lines)."""


def progress(text: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ workload


def key_table(count: int) -> bytes:
    """The ``count`` distinct keys, ``KEY_LENGTH`` bytes each, back to back: key ``i`` is
    the 16 hex digits of an 8-byte blake2b of ``i`` (``bench/recovery.py``'s ``key_name``).
    One buffer instead of a list of strings: 160 MB at 10^7 keys instead of about 730 MB."""
    table = bytearray(KEY_LENGTH * count)
    blake2b = hashlib.blake2b
    for i in range(count):
        table[KEY_LENGTH * i:KEY_LENGTH * (i + 1)] = \
            blake2b(i.to_bytes(8, "big"), digest_size=8).hexdigest().encode()
        if i and i % 2_000_000 == 0:
            progress(f"  {i:,} of {count:,} keys made")
    return bytes(table)


def workload(count: int, occurrences: int, seed: int) -> tuple[bytes, array[int]]:
    """(the key table, the shuffled order of key indices: each index ``occurrences``
    times)."""
    keys = key_table(count)
    order = array("I", range(count)) * occurrences
    random.Random(seed).shuffle(order)
    return keys, order


def lines(keys: bytes, order: array[int], per_line: int, partitions: int
          ) -> Iterator[tuple[int, bytes | None, bytes]]:
    """``(partition, None, line)``: ``per_line`` keys of ``order`` per line, round-robin."""
    total = (len(order) + per_line - 1) // per_line
    step = max(1, total // 10)
    for n, start in enumerate(range(0, len(order), per_line)):
        yield n % partitions, None, b" ".join(
            [keys[KEY_LENGTH * i:KEY_LENGTH * (i + 1)] for i in order[start:start + per_line]])
        if total >= 10_000 and n and n % step == 0:
            progress(f"  {n:,} of {total:,} messages handed to the producer")


def produce_workload(bootstrap: str, topic: str, count: int, args: argparse.Namespace
                     ) -> tuple[dict[tuple[str, int], int], int, float]:
    """Create ``topic``, produce the workload of ``count`` keys; (the last offset of every
    partition, messages, seconds to make and produce it)."""
    started = time.monotonic()
    progress(f"{count:,} keys: making {count * args.occurrences:,} shuffled occurrences")
    keys, order = workload(count, args.occurrences, args.seed + count)
    kafka.create_topic(bootstrap, topic, PARTITIONS)
    partitions = kafka.partitions_of(bootstrap, topic)
    progress(f"{count:,} keys: producing to {topic}")
    # In slices, so that each producer's final flush (60 s at most) has a bounded backlog.
    stream = lines(keys, order, args.keys_per_line, len(partitions))
    messages = 0
    while piece := list(itertools.islice(stream, PRODUCE_SLICE)):
        messages += kafka.produce(bootstrap, topic, piece)
    del keys, order
    ends = kafka.log_ends(bootstrap, [(topic, p) for p in partitions])
    target = {tp: end - 1 for tp, end in ends.items() if end > 0}
    if sum(ends.values()) != messages:
        raise HarnessError(f"{topic} holds {sum(ends.values())} messages, produced {messages}")
    return target, messages, time.monotonic() - started


def topology_module(topic: str, directory: Path) -> Path:
    """``bench/keycount_topology.py`` with its spout reading ``topic``: the same topology
    on a fresh topic (its own topic is the one ``bench/recovery.py`` grows)."""
    text, replaced = re.subn(r'topic="bench-keys"', f'topic="{topic}"', TOPOLOGY.read_text())
    if replaced != 1:
        raise RuntimeError(f"{TOPOLOGY} no longer names its topic as topic=\"bench-keys\"")
    path = directory / f"keycount_{topic.replace('-', '_')}.py"
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ memory


def proc_memory(pid: int) -> dict[str, int] | None:
    """``VmHWM`` and ``VmRSS`` of process ``pid`` in bytes (None: it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            found[name] = int(value.split()[0]) * 1024
    return found if len(found) == 2 else None


@dataclass
class Memory:
    """One processor's worker: its pid and what ``/proc`` said of it."""

    pid: int
    start_rss: int = 0
    rss: int = 0
    max_rss: int = 0
    hwm: int = 0

    def sample(self) -> None:
        seen = proc_memory(self.pid)
        if seen is None:
            return
        if not self.start_rss:
            self.start_rss = seen["VmRSS"]
        self.rss = seen["VmRSS"]
        self.max_rss = max(self.max_rss, seen["VmRSS"])
        self.hwm = max(self.hwm, seen["VmHWM"])


@dataclass
class Watch:
    """What the poll loop gathers: every committed record by epoch, memory per processor."""

    run: TopologyRun
    memory: dict[str, Memory] = field(default_factory=dict)
    rounds: dict[int, CommittedRecord] = field(default_factory=dict)
    last_memory: float = 0.0

    def pids(self, expected: int, timeout: float) -> None:
        """Wait until every processor reported its worker's pid, then sample them."""
        def reported() -> dict[str, int] | None:
            pids = {ident: int(r.info["pid"]) for ident, r in self.run.processors().items()
                    if "pid" in r.info}
            return pids if len(pids) >= expected else None

        pids: dict[str, int] = wait_for("every processor's pid", reported, timeout,
                                        self.run.alive, poll=POLL)
        self.memory = {ident: Memory(pid) for ident, pid in sorted(pids.items())}
        self.sample_memory()

    def sample_memory(self) -> None:
        for memory in self.memory.values():
            memory.sample()
        self.last_memory = time.monotonic()

    def poll(self) -> CommittedRecord | None:
        """Note the committed record (and the one it replaced); sample memory each second."""
        committed = self.run.committed()
        record = committed
        while record is not None and record.epoch not in self.rounds:
            self.rounds[record.epoch] = record
            record = record.previous
        if time.monotonic() - self.last_memory >= MEMORY_EVERY:
            self.sample_memory()
        return committed


def covered(committed: CommittedRecord | None, target: dict[tuple[str, int], int]) -> float:
    """The share of the target's messages the committed clock covers (0..1)."""
    if committed is None:
        return 0.0
    total = sum(o + 1 for o in target.values())
    done = sum(min(committed.clock.get(p, -1), o) + 1 for p, o in target.items())
    return done / total if total else 1.0


# ------------------------------------------------------------------------------ one size


def round_figures(records: list[CommittedRecord]) -> dict[str, Any]:
    """Pause and snapshot time of some committed rounds, in ms."""
    pauses = [r.pause_s for r in records if r.pause_s is not None]
    snaps = [r.snapshot_s for r in records if r.snapshot_s is not None]

    def ms(values: list[float], pick: Any) -> float | None:
        return round(1000 * pick(values), 1) if values else None

    return {
        "rounds": len(records),
        "pause_ms": [round(1000 * p, 1) for p in pauses],
        "pause_mean_ms": ms(pauses, lambda v: sum(v) / len(v)),
        "pause_max_ms": ms(pauses, max),
        "snapshot_ms": [round(1000 * s, 1) for s in snaps],
        "snapshot_max_ms": ms(snaps, max),
    }


def one_size(stack: StackAddresses, count: int, args: argparse.Namespace,
             logs: Path) -> dict[str, Any]:
    topic = f"bench-growth-{count}"
    target, messages, produce_s = produce_workload(stack.kafka, topic, count, args)
    tuples = count * args.occurrences
    progress(f"{count:,} keys: {messages:,} messages produced in {produce_s:.1f} s; "
             "starting the topology")
    module = topology_module(topic, logs)
    with TopologyRun(stack, module, log_dir=logs / f"k{count}", negotiators=1,
                     snapshot_interval=args.snapshot_interval, timeout=60,
                     database=SQLITE) as run:
        run.start()
        flowing = wait_for("the master to be Flowing", run.flowing, 300, run.alive,
                           poll=0.02)
        started = flowing.entered_at
        watch = Watch(run)
        watch.pids(run.expected_count(), 60)
        last_note = time.monotonic()

        processed_at: float | None = None
        last_scrape = 0.0

        def built() -> CommittedRecord | None:
            nonlocal last_note, processed_at, last_scrape
            committed = watch.poll()
            if processed_at is None and time.monotonic() - last_scrape >= SCRAPE_EVERY:
                last_scrape = time.monotonic()
                absorbed = metric_total(run, "bolt", MESSAGES_IN, BOLT, instances=BOLTS)
                if absorbed is not None and absorbed >= tuples:
                    processed_at = time.time()
            if time.monotonic() - last_note >= PROGRESS_EVERY:
                last_note = time.monotonic()
                progress(f"{count:,} keys: {time.time() - started:.0f} s; committed round "
                         f"{committed.epoch if committed else '-'} covers "
                         f"{100 * covered(committed, target):.0f}% of the messages")
            return committed if covered(committed, target) >= 1.0 else None

        seen: CommittedRecord = wait_for("a commit covering every offset", built,
                                         args.timeout, run.alive, poll=POLL)
        seen_at = time.time()
        # The first round that covered everything (a poll may have seen its successor).
        covering = min((r for r in watch.rounds.values() if covered(r, target) >= 1.0),
                       key=lambda r: r.epoch, default=seen)
        build_s = (covering.committed_at or seen_at) - started
        processed_s = min(build_s, (processed_at or seen_at) - started)
        metrics = {ident: m for ident, m in sorted(processor_metrics(run, "spout").items())}
        metrics.update(sorted(processor_metrics(run, "bolt", BOLT).items()))
        progress(f"{count:,} keys: committed everything after {build_s:.1f} s (round "
                 f"{covering.epoch}); waiting for {args.rounds_after} rounds at full state")

        def full_rounds() -> CommittedRecord | None:
            committed = watch.poll()
            done = sum(1 for e in watch.rounds if e > covering.epoch)
            return committed if done >= args.rounds_after else None

        last: CommittedRecord = wait_for(f"{args.rounds_after} more committed rounds",
                                         full_rounds, args.timeout, run.alive, poll=POLL)
        watch.sample_memory()
        bolt_metrics = processor_metrics(run, "bolt", BOLT)
        negotiator = pause_figures(run)
        monoid = run.topology.bolts[0].state
        run.stop()

    progress(f"{count:,} keys: checking the committed state")
    state = state_figures(stack, last, monoid, count, args)
    sizes = committed_snapshot_sizes(stack.snapshots, last)
    full = [watch.rounds[e] for e in sorted(watch.rounds) if e > covering.epoch]
    during = [watch.rounds[e] for e in sorted(watch.rounds) if e <= covering.epoch]
    processors: dict[str, dict[str, Any]] = {}
    for ident, memory in watch.memory.items():
        samples = metrics.get(ident, {})
        processors[ident] = {
            "pid": memory.pid,
            "peak_rss_bytes": memory.hwm,
            "rss_at_start_bytes": memory.start_rss,
            "rss_at_end_bytes": memory.rss,
            "messages_in": int(samples.get(MESSAGES_IN, 0)),
            "messages_out": int(samples.get(MESSAGES_OUT, 0)),
            "in_per_s": round(samples.get(MESSAGES_IN, 0) / processed_s),
            "out_per_s": round(samples.get(MESSAGES_OUT, 0) / processed_s),
        }
        if ident in bolt_metrics:
            processors[ident]["state_keys"] = int(bolt_metrics[ident].get(
                "hailstorm_state_keys", 0))
            processors[ident]["snapshot_last_s"] = round(bolt_metrics[ident].get(
                "hailstorm_snapshot_last_seconds", 0.0), 3)
    bolts = [p for ident, p in processors.items() if ident.startswith("bolt:")]
    spouts = [p for ident, p in processors.items() if ident.startswith("spout:")]
    bolt_rss = sum(p["rss_at_end_bytes"] for p in bolts)
    bolt_growth = bolt_rss - sum(p["rss_at_start_bytes"] for p in bolts)
    return {
        "keys": count, "occurrences": args.occurrences, "tuples": tuples,
        "messages": messages, "keys_per_line": args.keys_per_line, "topic": topic,
        "produce_s": round(produce_s, 1),
        "build_s": round(build_s, 2),
        "keys_per_s": round(count / build_s),
        "tuples_per_s": round(tuples / build_s),
        "messages_per_s": round(messages / build_s),
        "processed_s": round(processed_s, 2),
        "processed_keys_per_s": round(count / processed_s),
        "processed_tuples_per_s": round(tuples / processed_s),
        "build_round": covering.epoch,
        "processors": processors,
        "bolt_peak_rss_bytes": [p["peak_rss_bytes"] for p in bolts],
        "bolt_rss_at_end_bytes": bolt_rss,
        "spout_peak_rss_max_bytes": max((p["peak_rss_bytes"] for p in spouts), default=0),
        "bolt_rss_growth_bytes_per_key": round(bolt_growth / count, 1),
        **state,
        "snapshot_bytes": sizes,
        "snapshot_bytes_total": sum(sizes.values()),
        "snapshot_bytes_per_key": round(sum(sizes.values()) / count, 1),
        "full_state_rounds": round_figures(full),
        "build_rounds": round_figures(during),
        "negotiator_rounds": negotiator,
    }


def state_figures(stack: StackAddresses, committed: CommittedRecord, monoid: Any,
                  count: int, args: argparse.Namespace) -> dict[str, Any]:
    """Load the committed round's snapshots of every bolt instance: exactness and the
    Python objects' size (``sys.getsizeof``; ``tracemalloc`` up to the threshold)."""
    store = open_store(stack.snapshots)
    keys = total = 0
    wrong = 0
    objects = 0
    traced_per_key: float | None = None
    for i in range(BOLTS):
        ref = committed.snapshot_for(f"bolt:{BOLT}:{i}")
        if ref is None:
            raise HarnessError(f"round {committed.epoch} has no snapshot of bolt:{BOLT}:{i}")
        if i == 0 and count <= args.tracemalloc_up_to:
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            _clock, state = store.load(ref, monoid)
            gc.collect()
            traced = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            traced_per_key = traced / max(1, len(state))
        else:
            _clock, state = store.load(ref, monoid)
        keys += len(state)
        total += sum(state.values())
        wrong += sum(1 for v in state.values() if v != args.occurrences)
        shared = {id(v): v for v in state.values()}
        objects += (sys.getsizeof(state) + sum(map(sys.getsizeof, state))
                    + sum(map(sys.getsizeof, shared.values())))
        del state, shared
    # Instances are split by key, so keys never repeat across them: the sum is the distinct
    # count, and every key holding ``occurrences`` means each occurrence counted once.
    exact = keys == count and total == count * args.occurrences and wrong == 0
    return {
        "state_keys": keys, "state_total": total, "exactly_once": exact,
        "state_getsizeof_bytes_per_key": round(objects / count, 1),
        "state_tracemalloc_bytes_per_key": None if traced_per_key is None
        else round(traced_per_key, 1),
    }


# ------------------------------------------------------------------------------ output


def mb(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def size_summary(r: dict[str, Any]) -> str:
    full = r["full_state_rounds"]
    return (f"{r['keys']:,} keys: committed after {r['build_s']} s ({r['keys_per_s']:,} keys/s, "
            f"{r['tuples_per_s']:,} tuples/s), bolts processed everything after "
            f"{r['processed_s']} s ({r['processed_tuples_per_s']:,} tuples/s); bolt peak RSS "
            f"{' + '.join(mb(b) for b in r['bolt_peak_rss_bytes'])} MiB; state "
            f"{r['state_getsizeof_bytes_per_key']} B/key (getsizeof), snapshot "
            f"{r['snapshot_bytes_per_key']} B/key; rounds at full state: spouts paused "
            f"{full['pause_ms']} ms, snapshots {full['snapshot_ms']} ms; "
            f"exactly once: {r['exactly_once']}")


def short(ident: str) -> str:
    """``spout:keys:bench-growth-10000:0`` -> ``spout:keys:0`` (the topic is in the row)."""
    parts = ident.split(":")
    return ":".join([*parts[:2], parts[-1]]) if len(parts) > 3 else ident


def joined(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values) or "-"


def tables(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    out = [f"per processor (peak RSS = VmHWM of its Spark Python worker; rates over the time "
           f"until the bolts had processed every tuple; {args.occurrences} occurrences per key, "
           f"{args.keys_per_line} keys per message, snapshot every "
           f"{args.snapshot_interval:g} s)",
           f"  {'keys':>10} {'processor':<16} {'peak RSS MiB':>12} {'RSS start':>10} "
           f"{'RSS end':>8} {'in/s':>10} {'out/s':>10}"]
    for r in results:
        for ident, p in r["processors"].items():
            out.append(f"  {r['keys']:>10,} {short(ident):<16} {mb(p['peak_rss_bytes']):>12} "
                       f"{mb(p['rss_at_start_bytes']):>10} {mb(p['rss_at_end_bytes']):>8} "
                       f"{p['in_per_s']:>10,} {p['out_per_s']:>10,}")
    out.append("")
    out.append("| keys | committed after s | keys/s | tuples/s | processed after s | tuples/s "
               "processed | bolt peak RSS MiB | spout peak RSS MiB (max) | bolt RSS B/key "
               "(marginal; in run) | state B/key (getsizeof; tracemalloc) | snapshot B/key | "
               "snapshot ms at full state | pause ms at full state | build rounds pause ms (max) | "
               "exactly once |")
    out.append("|" + "---|" * 15)
    for r in results:
        marginal = r["bolt_rss_marginal_bytes_per_key"]
        traced = r["state_tracemalloc_bytes_per_key"]
        full, build = r["full_state_rounds"], r["build_rounds"]
        out.append(
            f"| {r['keys']:,} | {r['build_s']} | {r['keys_per_s']:,} | {r['tuples_per_s']:,} | "
            f"{r['processed_s']} | {r['processed_tuples_per_s']:,} | "
            f"{' + '.join(mb(b) for b in r['bolt_peak_rss_bytes'])} | "
            f"{mb(r['spout_peak_rss_max_bytes'])} | {'-' if marginal is None else marginal}; "
            f"{r['bolt_rss_growth_bytes_per_key']} | {r['state_getsizeof_bytes_per_key']}; "
            f"{'-' if traced is None else traced} | {r['snapshot_bytes_per_key']} | "
            f"{joined(full['snapshot_ms'])} | {joined(full['pause_ms'])} | "
            f"{build['pause_max_ms']} | {'yes' if r['exactly_once'] else 'NO'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="10000,100000,1000000,10000000",
                        help="Comma-separated numbers of distinct keys, one run each.")
    parser.add_argument("--occurrences", type=int, default=2,
                        help="How many times each distinct key occurs in the topic.")
    parser.add_argument("--keys-per-line", type=int, default=100,
                        help="Space-separated keys per Kafka message.")
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    parser.add_argument("--rounds-after", type=int, default=2,
                        help="Committed rounds to wait for once the state is complete (their "
                             "pause and snapshot time are those of the rounds at full state).")
    parser.add_argument("--tracemalloc-up-to", type=int, default=1_000_000,
                        help="Measure the loaded state with tracemalloc for key counts up to "
                             "this (slow and memory-hungry beyond).")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="Bound on each wait (the build, the rounds after it), seconds.")
    args = parser.parse_args(argv)
    sizes = sorted({int(x) for x in args.keys.split(",") if x.strip()})
    if not sizes or sizes[0] < 1 or args.occurrences < 1 or args.keys_per_line < 1 \
            or args.rounds_after < 1:
        parser.error("--keys, --occurrences, --keys-per-line and --rounds-after must be "
                     "positive")

    results: list[dict[str, Any]] = []
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        logs = bench_logs("hailstorm-bench-growth-")
        progress(f"stack up; logs in {logs}")
        for count in sizes:
            r = one_size(stack, count, args, logs)
            base = results[0] if results else r
            r["bolt_rss_marginal_bytes_per_key"] = None if base is r else round(
                (r["bolt_rss_at_end_bytes"] - base["bolt_rss_at_end_bytes"])
                / (r["keys"] - base["keys"]), 1)
            results.append(r)
            report("key_growth", {**r, **machine()}, size_summary(r))
            sys.stdout.flush()
    print(tables(results, args))
    return 0 if all(r["exactly_once"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
