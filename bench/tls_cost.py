"""What TLS costs the data plane end to end: the realistic word count with TLS, and the same
code with the data plane in plaintext after the handshake, alternately, in one run.

    .venv/bin/python bench/tls_cost.py [--pairs 3] [--lines 300000] [--rev HEAD]

hailstorm has no plaintext data plane, and must not ship one. So this bench makes two
copies of the committed tree (``git archive REV``): one as it is, and one where the two
sides of every data-plane connection, once the TLS handshake authenticated the peer, end
TLS (``SSLSocket.unwrap``: a ``close_notify`` each way) and go on over the bare TCP socket.
That copy is for this measurement only: it never leaves the temporary directory. It counts
every connection it turned to plaintext in a file, which must not be empty after each of its
runs (else the copy did not run what it claims and the bench fails).

Each pair runs ``bench/wordcount_throughput.py --backlog --no-bytewax --peers none`` (its own
embedded stack: Zipf text over 50,000 words, 4 partitions, the PostgreSQL sink, 1 s rounds;
no peer, since TLS is what is measured) from each copy, the order alternating between
pairs. Prints every run's lines/s and the single-process
baseline of the same run, then one JSON line: the medians and the cost they give, and the
cost within each pair (the runs of a pair are minutes apart: the fairer comparison on a
machine whose speed drifts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from common import machine, report  # noqa: E402

MARK = "PLAINTEXT-CONNECTIONS"
"""The file in the plaintext copy's root that counts the connections it turned plaintext."""

_UNWRAP = (
    "    peer = peer_identity(tls)  # measurement copy (bench/tls_cost.py): kept for later\n"
    "    plain = tls.unwrap()  # plaintext from here\n"
    "    plain._plaintext_peer = peer  # type: ignore[attr-defined]\n"
    "    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "
    f"{MARK!r}), 'a') as mark:\n"
    "        mark.write('x')\n"
    "    return plain  # type: ignore[return-value]\n"
)

EDITS = (
    ("    _checked(tls, timeout, None)\n    return tls\n",
     "    _checked(tls, timeout, None)\n" + _UNWRAP),
    ("    _checked(tls, timeout, expected)\n    return tls\n",
     "    _checked(tls, timeout, expected)\n" + _UNWRAP),
    ("    cert: dict[str, Any] = dict(tls.getpeercert() or {})\n",
     "    if hasattr(tls, '_plaintext_peer'):\n        return str(tls._plaintext_peer)\n"
     "    cert: dict[str, Any] = dict(tls.getpeercert() or {})\n"),
)
"""``hailstorm/auth.py``: ``accept_peer`` and ``greet_peer`` return the bare socket, and
``peer_identity`` the name its certificate held."""


def tree(rev: str, into: Path, plaintext: bool) -> Path:
    """A copy of ``rev`` in ``into`` (with the plaintext edits when asked)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev],
                             check=True, capture_output=True).stdout
    archive_path = into.parent / f"{into.name}.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(into, filter="data")
    archive_path.unlink()
    if plaintext:
        auth = into / "hailstorm" / "auth.py"
        text = auth.read_text()
        for old, new in EDITS:
            if text.count(old) != 1:
                raise SystemExit(f"hailstorm/auth.py at {rev}: the text to change is there "
                                 f"{text.count(old)} times, not once; update bench/tls_cost.py")
            text = text.replace(old, new)
        auth.write_text(text)
    return into


def run_once(copy: Path, lines: int, timeout: float) -> dict[str, object]:
    """One word count run from ``copy``; its JSON figures."""
    env = dict(os.environ, PYTHONPATH=str(copy))
    proc = subprocess.run(
        [sys.executable, str(copy / "bench" / "wordcount_throughput.py"), "--backlog",
         "--no-bytewax", "--peers", "none", "--lines", str(lines)],
        cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    figures = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not figures:
        raise SystemExit(f"the run from {copy} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return figures[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="Runs of each copy.")
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--rev", default="HEAD", help="The commit to measure.")
    parser.add_argument("--timeout", type=float, default=1800.0, help="Seconds per run.")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hailstorm-tls-cost-"))
    copies = {"tls": tree(args.rev, work / "tls", False),
              "plaintext": tree(args.rev, work / "plaintext", True)}
    mark = copies["plaintext"] / MARK
    rates: dict[str, list[int]] = {"tls": [], "plaintext": []}
    baselines: dict[str, list[int]] = {"tls": [], "plaintext": []}
    for pair in range(args.pairs):
        order = ("tls", "plaintext") if pair % 2 == 0 else ("plaintext", "tls")
        for kind in order:
            mark.unlink(missing_ok=True)
            figures = run_once(copies[kind], args.lines, args.timeout)
            turned = mark.stat().st_size if mark.exists() else 0
            if kind == "plaintext" and turned == 0:
                raise SystemExit("the plaintext copy turned no connection plaintext")
            rates[kind].append(int(figures["hailstorm_lines_per_s"]))  # type: ignore[call-overload]
            baselines[kind].append(int(figures["baseline_lines_per_s"]))  # type: ignore[call-overload]
            print(f"pair {pair + 1} {kind:9s}: hailstorm {rates[kind][-1]:,} lines/s, "
                  f"single-process baseline {baselines[kind][-1]:,} lines/s"
                  + (f" ({turned} connection ends in plaintext)" if kind == "plaintext" else ""),
                  flush=True)
    median = {kind: statistics.median(values) for kind, values in rates.items()}
    cost = 1 - median["tls"] / median["plaintext"]
    paired = [round(1 - t / p, 3) for t, p in zip(rates["tls"], rates["plaintext"], strict=True)]
    report("tls_cost", {
        "lines": args.lines, "pairs": args.pairs, "rev": args.rev,
        "tls_lines_per_s": rates["tls"], "plaintext_lines_per_s": rates["plaintext"],
        "tls_baseline_lines_per_s": baselines["tls"],
        "plaintext_baseline_lines_per_s": baselines["plaintext"],
        "median_tls": median["tls"], "median_plaintext": median["plaintext"],
        "tls_cost": round(cost, 3), "tls_cost_per_pair": paired,
        "tls_cost_per_pair_median": statistics.median(paired), **machine(), "work": str(work),
    }, f"the word count ({args.lines} lines of Zipf text): median {median['tls']:,.0f} "
       f"lines/s with TLS, {median['plaintext']:,.0f} in plaintext after the handshake "
       f"(TLS costs {cost:.1%} by the medians; within each pair {paired}, median "
       f"{statistics.median(paired):.1%}; runs {rates['tls']} and {rates['plaintext']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
