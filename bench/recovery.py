"""Recovery time after a bolt is killed, against the size of its state.

    .venv/bin/python bench/recovery.py [--keys 10000,100000,1000000] [--load-rate 300]
                                       [--kill process|task] [--local-recovery [--standby]]

Starts an embedded stack of its own (brought down afterwards). For each state size N (in
increasing order) on the same topic ``bench-keys`` (4 partitions):

1. produce the keys still missing (16-hex-digit keys, ``--keys-per-message`` per message),
   so the topic holds N distinct keys, each once;
2. deploy ``bench/keycount_topology.py`` (``per_key(Count())``, 2 bolt instances, snapshot
   every 1 s, one negotiator) under a fresh name: it reads the topic from offset 0; wait for
   a commit covering every offset ("build": from Flowing until that commit) and check the
   committed state holds N keys; read the committed snapshot files' sizes;
3. keep a light load running (``--load-rate`` messages/s of 10 existing keys each, so the
   state does not grow), wait 2 s, SIGKILL one ``counts`` bolt (``--kill process``: the
   processor's process, which its Spark task restarts; ``--kill task``: the Spark task's
   Python worker, as when an executor is lost: Spark resubmits the stage), and
   measure with :meth:`TopologyRun.measure_recovery` (``--local-recovery``: the run restarts
   the killed bolt alone, the others keep their processes and state; with ``--standby``
   its warm standby, holding the committed state, becomes the next incarnation):
   **flowing after** = from the kill
   until a master written after it is ``Flowing`` in a later epoch (every bolt reloaded its
   snapshot, spouts rewound); **caught up after** = from the kill until a commit whose
   clock is past the furthest position the topology had reached before the kill (the
   first round after the recovery, once the spouts read the replay); and which processors
   restarted (a new incarnation);
4. stop the load, wait for the commit covering everything produced and check exactly-once:
   N keys, counts summing to every key produced.

Prints one JSON line of figures and a human summary.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
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
    processor_metrics,
    report,
)

from hailstorm import kafka  # noqa: E402
from hailstorm.dev.harness import (  # noqa: E402
    SQLITE,
    BackgroundProducer,
    HarnessError,
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
)

TOPIC = "bench-keys"
PARTITIONS = 4
TOPOLOGY = REPO / "bench" / "keycount_topology.py"
LOAD_KEYS_PER_MESSAGE = 10


def key_name(i: int) -> str:
    return hashlib.blake2b(i.to_bytes(8, "big"), digest_size=8).hexdigest()


def one_size(stack: StackAddresses, size: int, keys: list[str], produced: Produced,
             key_messages: int, partitions: list[int], args: argparse.Namespace,
             logs: Path) -> dict[str, Any]:
    """Build a state of ``size`` keys, kill a bolt, measure; ``key_messages``: how many of
    the produced messages carry the distinct keys (the rest are load, 10 keys each)."""
    rng = random.Random(args.seed + size)
    pool = keys[:size]
    load = [" ".join(rng.choices(pool, k=LOAD_KEYS_PER_MESSAGE)).encode()
            for _ in range(int(args.load_rate * 300))]
    with TopologyRun(stack, TOPOLOGY, log_dir=logs / f"k{size}", negotiators=1,
                     snapshot_interval=1.0, timeout=60, database=SQLITE) as run:
        if args.local_recovery:
            run.driver_options = ["--local-recovery", *(["--standby"] if args.standby else [])]
        run.start()
        flowing = run.wait_flowing(300)
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        built = run.wait_committed(target, args.timeout)
        build_s = time.time() - flowing.entered_at
        states = run.committed_bolt_states(built)["counts"]
        if len(states.merged) != size:
            raise HarnessError(f"committed state has {len(states.merged)} keys, not {size}")
        sizes = committed_snapshot_sizes(stack.snapshots, built)
        write_max = max((m.get("hailstorm_snapshot_last_seconds", 0.0)
                         for m in processor_metrics(run, "bolt", "counts").values()),
                        default=None)
        before = produced.count
        with BackgroundProducer(stack.kafka, produced, load, partitions, args.load_rate):
            time.sleep(2.0)
            run.wait_flowing(args.timeout)
            fault = run.kill_processor(role="bolt", rng=rng, task=args.kill == "task")
            recovery = run.measure_recovery(fault, args.timeout)
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        final = run.wait_committed(target, args.timeout)
        merged = run.committed_bolt_states(final)["counts"].merged
        expected = size + (produced.count - key_messages) * LOAD_KEYS_PER_MESSAGE
        exact = len(merged) == size and sum(merged.values()) == expected
        run.stop()
    return {
        "keys": size, "messages_in_topic_before": before,
        "build_s": round(build_s, 2),
        "snapshot_bytes": sizes, "snapshot_bytes_total": sum(sizes.values()),
        "snapshot_bytes_per_key": round(sum(sizes.values()) / size, 1),
        "snapshot_write_s_max": None if write_max is None else round(write_max, 3),
        "killed": fault.target,
        "flowing_after_s": None if recovery.flowing_after is None
        else round(recovery.flowing_after, 2),
        "caught_up_after_s": None if recovery.committed_after is None
        else round(recovery.committed_after, 2),
        "restarted": recovery.restarted,
        "recovery": None if recovery.record is None else recovery.record.reason,
        "exactly_once": exact,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="10000,100000,1000000",
                        help="Comma-separated state sizes (distinct keys), e.g. "
                             "10000,100000,1000000.")
    parser.add_argument("--keys-per-message", type=int, default=100)
    parser.add_argument("--load-rate", type=float, default=300.0,
                        help="Messages/s of background load during the kill.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill", choices=("process", "task"), default="process",
                        help="SIGKILL the bolt's process (its Spark task restarts it) or its "
                             "Spark task's Python worker (Spark resubmits the stage)")
    parser.add_argument("--local-recovery", action="store_true",
                        help="Run with --local-recovery: the killed bolt restarts alone")
    parser.add_argument("--standby", action="store_true",
                        help="With --local-recovery, also --standby: a warm standby of each "
                             "bolt instance holds its committed state")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.standby and not args.local_recovery:
        parser.error("--standby needs --local-recovery")
    sizes = sorted(int(x) for x in args.keys.split(",") if x.strip())

    keys = [key_name(i) for i in range(sizes[-1])]
    results: list[dict[str, Any]] = []
    with embedded_stack() as env:
        stack = StackAddresses.from_env(env)
        kafka.create_topic(stack.kafka, TOPIC, PARTITIONS)
        partitions = kafka.partitions_of(stack.kafka, TOPIC)
        produced = Produced(TOPIC)
        logs = bench_logs("hailstorm-bench-recovery-")
        have = key_messages = 0
        for size in sizes:
            step = args.keys_per_message
            produce(stack.kafka, produced,
                    [" ".join(keys[i:min(i + step, size)]).encode()
                     for i in range(have, size, step)], partitions)
            key_messages += (size - have + step - 1) // step
            have = size
            results.append(one_size(stack, size, keys, produced, key_messages, partitions,
                                    args, logs))
            print(f"# {results[-1]}", file=sys.stderr, flush=True)
    summary = ["per_key(Count) state over 2 bolt instances, snapshot every 1 s, "
               f"{args.load_rate:g} msg/s load during the kill; SIGKILL of one bolt's {args.kill}"
               f"{' (local recovery' if args.local_recovery else ''}"
               f"{', warm standby' if args.standby else ''}"
               f"{')' if args.local_recovery else ''}"]
    for r in results:
        summary.append(
            f"  {r['keys']:>9,} keys: Flowing again after {r['flowing_after_s']} s, caught up "
            f"(committed past the pre-kill position) after {r['caught_up_after_s']} s; "
            f"snapshots {r['snapshot_bytes_total'] / 1e6:.2f} MB "
            f"({r['snapshot_bytes_per_key']} B/key, slowest write {r['snapshot_write_s_max']} s); "
            f"state built in {r['build_s']} s; exactly once: {r['exactly_once']}; "
            f"restarted {len(r['restarted'] or [])} processors")
    report("recovery", {"results": results, "load_rate": args.load_rate,
                        "keys_per_message": args.keys_per_message, "seed": args.seed,
                        "kill": args.kill, "local_recovery": args.local_recovery,
                        "standby": args.standby,
                        **machine()}, "\n".join(summary))
    return 0 if all(r["exactly_once"] and r["caught_up_after_s"] is not None
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
