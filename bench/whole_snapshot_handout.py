"""Whole-snapshot hand-out: how long a bolt's absorbing thread stops to hand out a whole
snapshot of its state, behind its upstreams and keeping up with them.

    .venv/bin/python bench/whole_snapshot_handout.py [--keys 300000,1000000] [--runs 3]

Needs no services. A keyed bolt writes a whole snapshot every
:data:`~hailstorm.processors.deltas.DELTA_CHAIN_MAX` rounds at most (more often when its
deltas add up to more keys than its state holds); the snapshot is a copy of the state,
taken as it is handed out on the thread that absorbs tuples (a bolt behind its upstreams),
or by the snapshot writer thread while the bolt absorbs on (a bolt keeping up, see
:data:`~hailstorm.processors.deltas.WRITER_COPY_MAX`). For each state size, the ``totals``
bolt of ``topologies/user_totals.py`` (a ``Record`` of a ``Sum`` and a ``Count`` per user,
users as ``KeyedEvents`` names them, each seen once) is filled through its
:class:`~hailstorm.processors.bolt_core.BoltCore`, its round's clock given, and the call
that hands the snapshot out (``on_watermark``) timed, then the copy left to the writer
(``content.get()``); the least of ``--runs``. It times a part of hailstorm alone: no peer
or baseline loop runs beside it. Prints one JSON line and a summary.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import machine, report  # noqa: E402

from hailstorm.processors import WriteSnapshot  # noqa: E402
from hailstorm.processors.bolt_core import BoltCore  # noqa: E402
from hailstorm.runtime.task import GC_THRESHOLDS  # noqa: E402
from hailstorm.topology.loading import load_topology  # noqa: E402

PARTITION = ("events", 0)
BATCH = 10_000


def handout(bolt: Any, users: list[str], keeping_up: bool) -> tuple[float, float]:
    """Seconds the absorbing thread spent handing out a whole snapshot of one event per
    user, and seconds the writer then spent copying it."""
    core = BoltCore(bolt, ["spout"])
    core.keeping_up = keeping_up
    for start in range(0, len(users), BATCH):
        part = users[start:start + BATCH]
        core.on_data("spout", [PARTITION] * len(part), list(range(start, start + len(part))),
                     [{"user": user, "amount": 37, "country": "DE"} for user in part])
    last = len(users) - 1
    core.on_clock(1, {PARTITION: last})
    started = time.perf_counter()
    actions = core.on_watermark("spout", {PARTITION: last})
    handed = time.perf_counter() - started
    [write] = [a for a in actions if isinstance(a, WriteSnapshot)]
    assert not write.delta, "a bolt's first snapshot is whole"
    started = time.perf_counter()
    write.content.get()
    return handed, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="300000,1000000",
                        help="State sizes (users), comma-separated.")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    gc.set_threshold(*GC_THRESHOLDS)  # as the runtime sets it
    bolt = load_topology(str(REPO / "topologies" / "user_totals.py")).bolts[0]
    rng = random.Random(7)
    figures: dict[str, Any] = {"bolt": bolt.name, "runs": args.runs, **machine()}
    lines = []
    for keys in (int(k) for k in args.keys.split(",")):
        users = [f"u{rng.randrange(10**9):09d}" for _ in range(keys)]
        for mode, keeping_up in (("behind", False), ("keeping_up", True)):
            best = min((handout(bolt, users, keeping_up) for _ in range(args.runs)),
                       key=sum)
            figures[f"{keys}_{mode}_handout_ms"] = round(best[0] * 1000, 1)
            figures[f"{keys}_{mode}_writer_copy_ms"] = round(best[1] * 1000, 1)
            lines.append(f"{keys:,} keys, {mode.replace('_', ' ')}: the absorbing thread "
                         f"stops {best[0] * 1000:.1f} ms; the writer copies for "
                         f"{best[1] * 1000:.1f} ms")
    report("whole_snapshot_handout", figures, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
