"""A new bolt added to a topology with a long history (issue 41): 2M lines by default.

    .venv/bin/python bench/catch_up.py [--history 2000000] [--live 20000] [--rate 200]
                                       [--text zipf|toy] [--shape new|mixed]

Starts an embedded stack of its own (brought down afterwards) and runs
:func:`hailstorm.dev.harness.catch_up.catch_up_run`: a word count commits ``--history``
lines with 1 s rounds, then is deployed again with a new bolt (and, with ``--shape new``, a
new sink; ``mixed``: the new bolt also reads the carried one, which has a table) while
``--live`` lines are produced at ``--rate`` a second. Prints the plan, every committed round (its
time, the round's clock and the new nodes' own clocks while they catch up) and one JSON
line; exits 1 unless rounds committed while the new bolt caught up, the carried bolt's
clock moved meanwhile, nothing restarted, no stage attempt failed and every state and
table equals a count by hand (``collections.Counter``, no hailstorm code) and, up to
300,000 lines in all (``MODEL_LINES``), the model and the oracle.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import bench_logs, embedded_stack, machine, report  # noqa: E402

from hailstorm.dev.harness import StackAddresses  # noqa: E402
from hailstorm.dev.harness.catch_up import catch_up_run, comparison_line  # noqa: E402
from hailstorm.dev.harness.compare import Comparison  # noqa: E402


def _tally(comparison: Comparison | None) -> dict[str, int] | None:
    if comparison is None:
        return None
    return {"keys": comparison.keys_compared, "lost": comparison.lost,
            "duplicated": comparison.duplicated, "wrong": comparison.wrong}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=2_000_000,
                        help="Lines committed before the new bolt is deployed.")
    parser.add_argument("--live", type=int, default=20_000,
                        help="Lines produced while it catches up.")
    parser.add_argument("--rate", type=float, default=200.0, help="Live lines per second.")
    parser.add_argument("--text", choices=("zipf", "toy"), default="zipf",
                        help="zipf: realistic text (50,000 words by Zipf's law: the new "
                             "bolt's state grows to hundreds of thousands of keys); toy: ten "
                             "words, as the integration test uses (a best case).")
    parser.add_argument("--shape", choices=("new", "mixed"), default="new",
                        help="new: the new bolt reads the spout alone (the carried bolt "
                             "stays on the live clock); mixed: it reads the spout and the "
                             "carried bolt, which is held with its table while it catches "
                             "up.")
    args = parser.parse_args(argv)
    logs = bench_logs("hailstorm-catch-up-")
    with embedded_stack() as env:
        result = catch_up_run(StackAddresses.from_env(env), logs, history=args.history,
                              live=args.live, rate=args.rate, text=args.text,
                              shape=args.shape)
    hand, model = result.by_hand, result.comparison
    report("catch_up", {"history": args.history, "live": args.live, "rate": args.rate,
                        "text": args.text, "shape": args.shape,
                        "rounds_catching_up": result.catching_up,
                        "clock_moved": result.clock_moved, "joined_s": result.joined_s,
                        "restarts": result.restarts,
                        "failed_attempts": result.failed_attempts,
                        "by_hand": _tally(hand), "model": _tally(model), "ok": result.ok,
                        "machine": machine(), "logs": str(logs)},
           f"{args.history} lines of history: {result.catching_up} rounds committed while the "
           f"new bolt caught up (joined after {result.joined_s} s), "
           f"{len(result.restarts)} restarts, {len(result.failed_attempts)} failed stage "
           f"attempts; {comparison_line(hand, 'a count by hand') if hand else 'not compared'}; "
           f"{comparison_line(model) if model else 'not compared with the model'} "
           f"(logs in {logs})")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
