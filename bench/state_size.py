"""State size: bytes per key in memory and in snapshots, for a few per-key monoids.

    .venv/bin/python bench/state_size.py [--keys 100000]
        [--monoids count,mean,hll10,totals,pageviews]

Needs no services. For each monoid, builds the state of one bolt instance with N distinct
string keys (16 hex digits of a hash by default, ``--key-style sequential`` for
``key-0000000`` ...) the way a bolt would (``absorb`` of lifted values, several
observations per key), and measures:

* **memory**: ``tracemalloc`` bytes still allocated once the state is built (the dict, the
  key strings, the per-key inner states), divided by N; a second figure, a
  ``sys.getsizeof``-based walk (dict + keys + values, shared objects counted once), checks it;
* **snapshot**: the size of the Avro snapshot file :class:`DirectorySnapshotStore` writes for
  it (in a temporary directory), divided by N, with the write and load times.

Prints one JSON line of figures and a human summary.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import machine, report  # noqa: E402

from hailstorm.monoids import (  # noqa: E402
    Count,
    HyperLogLog,
    KeyedMap,
    Mean,
    Record,
    Sum,
    TumblingWindow,
    per_key,
)
from hailstorm.snapshots import DirectorySnapshotStore  # noqa: E402

PAGE_STATS = Record({"views": Count(), "users": HyperLogLog(10), "latency": Mean()})
PAGE_WINDOWS = TumblingWindow(300_000, PAGE_STATS, unit="ms")
OBSERVATIONS_PER_KEY = 3
"""Values absorbed per key (so a count is 3, a mean has 3 samples, an HLL 3 items)."""


def _monoids() -> dict[str, tuple[KeyedMap, Callable[[random.Random], Any]]]:
    """name -> (the per-key monoid, a lift of one random observation to its inner state)."""
    hll = HyperLogLog(10)
    return {
        "count": (per_key(Count()), lambda rng: 1),
        "mean": (per_key(Mean()), lambda rng: Mean.lift(rng.random() * 100)),
        "hll10": (per_key(hll), lambda rng: hll.lift(rng.randrange(1 << 30))),
        # topologies/user_totals.py's state: a Record of a Sum and a Count per user
        "totals": (per_key(Record({"spent": Sum(), "events": Count()})),
                   lambda rng: {"spent": rng.randrange(1000), "events": 1}),
        # topologies/pageviews.py's state: 5-minute windows of views, users and latency,
        # each observation in one of two windows
        "pageviews": (per_key(PAGE_WINDOWS), lambda rng: PAGE_WINDOWS.lift_unexpiring(
            rng.randrange(600_000), PAGE_STATS.lift(
                views=1, users=hll.lift(rng.randrange(1 << 30)),
                latency=Mean.lift(rng.random() * 100)))),
    }


def key_names(keys: int, style: str) -> list[str]:
    """N distinct keys: ``key-0000000``... (sequential, compresses very well in a snapshot)
    or 16 hex digits of a hash of the index (random, like user ids or URLs' hashes)."""
    if style == "sequential":
        return [f"key-{i:07d}" for i in range(keys)]
    return [hashlib.blake2b(i.to_bytes(8, "big"), digest_size=8).hexdigest()
            for i in range(keys)]


def build_state(monoid: KeyedMap, lift: Callable[[random.Random], Any], names: list[str],
                seed: int = 5) -> dict[Any, Any]:
    """The state of N keys, each absorbing ``OBSERVATIONS_PER_KEY`` lifted values."""
    rng = random.Random(seed)
    state = monoid.empty()
    for _ in range(OBSERVATIONS_PER_KEY):
        for name in names:
            state = monoid.absorb(state, {name: lift(rng)})
    return state


def getsizeof_deep(state: dict[Any, Any]) -> int:
    """``sys.getsizeof`` of the dict, its keys and values (recursing into tuples), each
    distinct object once (small ints and interned floats shared by CPython count once)."""
    seen: set[int] = set()
    total = 0
    stack: list[Any] = [state]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, tuple | list):
            stack.extend(obj)
    return total


def measure(name: str, monoid: KeyedMap, lift: Callable[[random.Random], Any], keys: int,
            style: str, store: DirectorySnapshotStore) -> dict[str, Any]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    state = build_state(monoid, lift, key_names(keys, style))
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    deep = getsizeof_deep(state)
    started = time.perf_counter()
    ref = store.put(topology="statesize", bolt=name, instance=0, parallelism=1, epoch=1,
                    clock={("t", 0): keys - 1}, monoid=monoid, state=state)
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    _, loaded = store.load(ref, monoid)
    load_s = time.perf_counter() - started
    if len(loaded) != keys:
        raise AssertionError(f"{name}: loaded {len(loaded)} keys, wrote {keys}")
    del state, loaded
    return {
        "monoid": monoid.describe(), "keys": keys,
        "memory_bytes": traced, "memory_bytes_per_key": round(traced / keys, 1),
        "getsizeof_bytes_per_key": round(deep / keys, 1),
        "snapshot_bytes": ref.size_bytes, "snapshot_bytes_per_key": round(ref.size_bytes / keys, 1),
        "snapshot_write_s": round(write_s, 3), "snapshot_load_s": round(load_s, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--key-style", choices=("random", "sequential"), default="random",
                        help="16 hex digits of a hash (default), or key-0000000...")
    parser.add_argument("--monoids", default="count,mean,hll10",
                        help="Comma-separated subset of count, mean, hll10, totals, "
                             "pageviews.")
    args = parser.parse_args(argv)
    available = _monoids()
    names = [n.strip() for n in args.monoids.split(",") if n.strip()]
    unknown = [n for n in names if n not in available]
    if unknown:
        parser.error(f"unknown monoids {unknown}; choose from {sorted(available)}")
    root = Path(tempfile.mkdtemp(prefix="hailstorm-statesize-"))
    try:
        store = DirectorySnapshotStore(root)
        results = {n: measure(n, *available[n], args.keys, args.key_style, store) for n in names}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = [f"{args.keys:,} {args.key_style} keys per state ({OBSERVATIONS_PER_KEY} observations "
             f"per key), one instance; snapshots are deflate-compressed Avro"]
    for r in results.values():
        lines.append(
            f"  {r['monoid']:<28} memory {r['memory_bytes_per_key']:>7.1f} B/key "
            f"(getsizeof {r['getsizeof_bytes_per_key']:.1f}), snapshot "
            f"{r['snapshot_bytes_per_key']:>7.1f} B/key ({r['snapshot_bytes'] / 1e6:.1f} MB, "
            f"written in {r['snapshot_write_s']:.2f} s, loaded in {r['snapshot_load_s']:.2f} s)")
    report("state_size", {"keys": args.keys, "key_style": args.key_style,
                          "observations_per_key": OBSERVATIONS_PER_KEY, "results": results,
                          **machine()}, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
