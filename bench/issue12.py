"""Issue 12's figures in one command: every realistic benchmark, several runs, medians.

    .venv/bin/python bench/issue12.py [--runs 3] [--only wordcount-300k,user-totals]
                                      [--no-bytewax] [--peers pathway,quix,pyflink]
                                      [--out runs.jsonl]

Runs the benchmark scripts of :data:`WORKLOADS` ``--runs`` times each, one after the other,
each run in a process of its own on an embedded stack of its own (so every run compares
hailstorm, the single-process baseline, Bytewax and, where the script runs them, Pathway,
Quix Streams and PyFlink on the same topic, as the scripts do alone). The workloads take
turns (word count 300k, word count 2M, ..., then again) so that a slow spell of the machine
does not fall on one of them. Every run's JSON line goes to ``--out`` (if given) as it
arrives; at the end it prints, per workload, the median and the range of hailstorm's rate,
the baseline's and each peer's, of hailstorm's ratio to each, against the issue's targets,
and of the CPU hailstorm's processors used per item, as a Markdown table and one JSON line.

This VM's rates move by up to 20% between runs of the same code, so one run says little
about a ratio near its target: that is why this exists. Tests never run it. With ``--runs 3``
and Bytewax installed, on the 2-core machine (2026-12-02): word count 2M, per-user totals
and two stages with ``--peers pathway,pyflink`` 47 minutes; word count 300k with Quix
Streams too, 8 minutes; page views 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    """One benchmark invocation and the issue's targets for it (None: no target)."""

    args: tuple[str, ...]
    baseline_target: float | None
    bytewax_target: float | None
    other_peers: bool = False
    """Whether the script runs Pathway, Quix Streams and PyFlink too (``--peers``)."""


WORKLOADS: dict[str, Workload] = {
    "wordcount-300k": Workload(("wordcount_throughput.py", "--backlog", "--lines", "300000"),
                               0.8, 3.0, other_peers=True),
    "wordcount-2m": Workload(("wordcount_throughput.py", "--backlog", "--lines", "2000000"),
                             0.8, 3.0, other_peers=True),
    "user-totals": Workload(("user_totals_throughput.py",), 0.5, 2.0, other_peers=True),
    "two-stage": Workload(("two_stage_throughput.py",), 0.5, 2.0, other_peers=True),
    "pageviews": Workload(("pageviews_throughput.py",), None, None),
}
"""The issue's workloads, in the order they take turns."""

PEERS = ("bytewax", "pathway", "quix", "pyflink")
"""Every peer a benchmark line may carry a rate of (``<peer>_<unit>_per_s``)."""

FIGURES = ("hailstorm", "baseline", *PEERS, "to_baseline", *(f"to_{p}" for p in PEERS), "cpu",
           "machine")

ROLE_SUFFIXES = ("_spouts", "_bolts", "_sinks")
"""The endings of a line's CPU figures per role (``cpu_us_per_<item>_<role>s``)."""


PEER_LABELS = {"bytewax": "Bytewax", "pathway": "Pathway", "quix": "Quix", "pyflink": "PyFlink"}


def figures_of(line: dict[str, Any]) -> dict[str, float | None]:
    """The figures of one benchmark JSON line: the rates (per second, whatever the unit:
    lines, events or views; Bytewax's running totals where a script also runs its end-only
    variant) of hailstorm, the baseline and each peer, hailstorm's ratio to each, and
    ``cpu``: the CPU microseconds its processors used per item (line, event, view), every
    role summed, and ``machine``: the whole machine's over the same time (None in a line
    without them)."""
    def rate(prefix: str) -> float | None:
        for key in (f"{prefix}_lines_per_s", f"{prefix}_events_per_s",
                    f"{prefix}_views_per_s", f"{prefix}_word_count_lines_per_s"):
            if line.get(key) is not None:
                return float(line[key])
        return None

    def ratio(peer: str) -> float | None:
        value = line.get(f"ratio_hailstorm_to_{peer}",
                         line.get(f"ratio_hailstorm_to_{peer}_word_count"))
        return None if value is None else float(value)

    cpu = [float(v) for k, v in line.items()
           if k.startswith("cpu_us_per_") and k.endswith(ROLE_SUFFIXES) and v is not None]
    machine = next((float(v) for k, v in line.items()
                    if k.startswith("cpu_us_per_") and k.endswith("_machine") and v is not None),
                   None)
    return {"hailstorm": rate("hailstorm"), "baseline": rate("baseline"),
            **{peer: rate(peer) for peer in PEERS},
            "to_baseline": line.get("ratio_hailstorm_to_baseline"),
            **{f"to_{peer}": ratio(peer) for peer in PEERS},
            "cpu": round(sum(cpu), 1) if cpu else None, "machine": machine}


def summarize(runs: list[dict[str, Any]], workload: Workload) -> dict[str, Any]:
    """Median, minimum and maximum of each figure over ``runs`` (benchmark JSON lines), and
    in how many runs each ratio met its target."""
    per_run = [figures_of(run) for run in runs]
    summary: dict[str, Any] = {"runs": len(runs)}
    for name in FIGURES:
        values = sorted(v for f in per_run if (v := f[name]) is not None)
        summary[name] = ({"median": statistics.median(values), "min": values[0],
                          "max": values[-1], "all": values} if values else None)
    for name, target in (("to_baseline", workload.baseline_target),
                         ("to_bytewax", workload.bytewax_target)):
        values = [v for f in per_run if (v := f[name]) is not None]
        summary[f"{name}_met"] = (None if target is None or not values
                                  else sum(v >= target for v in values))
    return summary


def markdown(summaries: dict[str, dict[str, Any]]) -> str:
    """The summaries as the table ``docs/performance.md`` shows."""
    def rate(figure: dict[str, Any] | None, digits: int = 0) -> str:
        if figure is None:
            return "-"
        if figure["min"] == figure["max"]:
            return f"{figure['median']:,.{digits}f}"
        return (f"{figure['median']:,.{digits}f} "
                f"({figure['min']:,.{digits}f}-{figure['max']:,.{digits}f})")

    def ratio(summary: dict[str, Any], name: str, target: float | None) -> str:
        figure = summary[name]
        if figure is None:
            return "-"
        text = f"**{figure['median']:.2f}** ({', '.join(f'{v:.2f}' for v in figure['all'])}"
        if target is not None:
            text += f"; >= {target:g} in {summary[name + '_met']} of {len(figure['all'])}"
        return text + ")"

    lines = ["| workload | runs | hailstorm /s | baseline /s | hailstorm / baseline | "
             + " | ".join(f"hailstorm / {PEER_LABELS[p]}" for p in PEERS)
             + " | processors' CPU, us an item | the machine's CPU, us an item |",
             "|---|---|---|---|---|" + "---|" * (len(PEERS) + 2)]
    for name, s in summaries.items():
        w = WORKLOADS[name]
        targets = {"bytewax": w.bytewax_target}
        lines.append(f"| {name} | {s['runs']} | {rate(s['hailstorm'])} | {rate(s['baseline'])} "
                     f"| {ratio(s, 'to_baseline', w.baseline_target)} | "
                     + " | ".join(ratio(s, f"to_{p}", targets.get(p)) for p in PEERS)
                     + f" | {rate(s['cpu'], 1)} | {rate(s['machine'], 1)} |")
    return "\n".join(lines)


def run_once(workload: Workload, no_bytewax: bool, peers: str,
             timeout: float) -> dict[str, Any]:
    """One run of ``workload``'s script; its JSON line. Raises RuntimeError with the
    script's last output when it fails or prints none."""
    command = [sys.executable, str(REPO / "bench" / workload.args[0]), *workload.args[1:]]
    if no_bytewax:
        command.append("--no-bytewax")
    if workload.other_peers:
        command.extend(("--peers", peers))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{tail}")
    line: dict[str, Any] = json.loads(lines[-1])
    if line.get("result_equal") is False:
        raise RuntimeError(f"{' '.join(command)}: the results differ (see its output)")
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="Runs of each workload.")
    parser.add_argument("--only", default=",".join(WORKLOADS),
                        help=f"Comma-separated workloads (default: all of {', '.join(WORKLOADS)}).")
    parser.add_argument("--no-bytewax", action="store_true", help="Skip the Bytewax peer.")
    parser.add_argument("--peers", default="pathway,quix,pyflink",
                        help="The other peers, for the workloads whose script runs them "
                        "(comma-separated; 'none' for none).")
    parser.add_argument("--out", type=Path,
                        help="A file every run's JSON line is appended to (default: none).")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="Bound on one run (s).")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in WORKLOADS]
    if unknown or not chosen or args.runs < 1:
        parser.error(f"--only takes some of {', '.join(WORKLOADS)} (got {args.only!r}); "
                     "--runs must be at least 1")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
    total = args.runs * len(chosen)
    started = time.monotonic()
    for i in range(args.runs):
        for j, name in enumerate(chosen):
            step = i * len(chosen) + j + 1
            print(f"[{step}/{total}] {name}, run {i + 1} ...", flush=True)
            line = run_once(WORKLOADS[name], args.no_bytewax, args.peers, args.timeout)
            line["workload"] = name
            if args.out is not None:
                with args.out.open("a") as out:
                    out.write(json.dumps(line, sort_keys=True) + "\n")
            results[name].append(line)
            f = figures_of(line)
            bytewax = f"{f['to_bytewax']} of Bytewax" if f["to_bytewax"] is not None else \
                f"Bytewax {line.get('bytewax_unavailable', 'gave no figure')}"
            print(f"[{step}/{total}] {name}, run {i + 1}: hailstorm {f['hailstorm']:,.0f}/s, "
                  f"{f['to_baseline']} of the baseline, {bytewax} "
                  f"({time.monotonic() - started:.0f} s so far)", flush=True)
    summaries = {name: summarize(runs, WORKLOADS[name]) for name, runs in results.items()}
    print(json.dumps({"bench": "issue12", "summaries": summaries}, sort_keys=True))
    print(markdown(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
