"""Pathway, Quix Streams and PyFlink on the same topic as hailstorm, in the same run.

Each peer runs one job (``word_count``: a running count per word, the words split as
``topologies/wordcount.py`` splits them; ``user_totals``: per user the sum of amounts and the
number of events, as ``topologies/user_totals.py``; ``top_spenders``: the ``top`` users of
each country by their running totals, ties by user id, as ``topologies/top_spenders.py``)
over the whole topic from its beginning,
with the peer's own fault tolerance on (Pathway persistence, Quix exactly-once, Flink
exactly-once checkpoints every second), in its own venv (:mod:`peer_envs`), as a script of
``bench/peer_<name>.py`` run as::

    <venv>/bin/python bench/peer_NAME.py JOB REQUEST_JSON OUT_JSON

The request is a JSON object (``bootstrap``, ``topic``, ``partitions``, ``records``,
``word_pattern``, ``top``, ``work_dir``, ``threads`` and, for PyFlink, ``connector_jar``);
the answer ``{"seconds": ..., "result": [[key, value], ...]}`` where the value is the count
(word count), ``[amount, count]`` (user totals) or the country's ranking ``[[user, spent],
...]`` best first (top spenders), and the seconds run from the peer's dataflow starting to
its end of the topic (imports and set-up excluded, as for Bytewax in :mod:`peers`).

:func:`run_peers` returns one :class:`PeerOutcome` per peer: a rate, or why there is none
(the peer could not be installed, failed, timed out, or reached another result than
hailstorm's, which is reported, never hidden).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peer_envs import PEERS, PeerUnavailable, flink_kafka_connector, peer_python

BENCH = Path(__file__).resolve().parent

THREADS = 2
"""Workers (threads, or Flink's parallelism) each peer uses: the machine's two cores."""


@dataclass(frozen=True)
class PeerOutcome:
    """One peer's run of one job: its seconds, or the reason it has none."""

    peer: str
    label: str
    seconds: float | None
    reason: str | None = None

    def rate(self, records: int) -> float | None:
        return None if self.seconds is None else records / self.seconds


def run_peers(job: str, bootstrap: str, topic: str, partitions: int, records: int,
              expected: dict[Any, Any], normalise: Callable[[Any], Any] = lambda v: v,
              word_pattern: str = "", peers: Iterable[str] = tuple(PEERS),
              timeout: float = 1800.0, top: int = 0) -> list[PeerOutcome]:
    """Run ``job`` on each of ``peers`` and check each result equals ``expected``
    (``top``: the users ranked per country of ``top_spenders``)."""
    outcomes = []
    for name in peers:
        label = PEERS[name].label
        print(f"{label}: {job}", file=sys.stderr, flush=True)
        try:
            seconds, result = _run_one(name, job, {
                "bootstrap": bootstrap, "topic": topic, "partitions": partitions,
                "records": records, "word_pattern": word_pattern, "threads": THREADS,
                "top": top,
            }, timeout)
        except PeerUnavailable as exc:
            outcomes.append(PeerOutcome(name, label, None, str(exc)))
            continue
        got = {key: normalise(value) for key, value in result}
        if got != expected:
            wrong = sum(1 for k, v in expected.items() if got.get(k) != v)
            extra = len(got.keys() - expected.keys())
            outcomes.append(PeerOutcome(name, label, None,
                                        f"result differs from hailstorm's: {wrong} of "
                                        f"{len(expected)} keys missing or wrong, {extra} extra"))
            continue
        outcomes.append(PeerOutcome(name, label, seconds))
    return outcomes


def _run_one(name: str, job: str, request: dict[str, Any],
             timeout: float) -> tuple[float, list[list[Any]]]:
    python = peer_python(name)
    if name == "pyflink":
        request["connector_jar"] = str(flink_kafka_connector())
    work = Path(tempfile.mkdtemp(prefix=f"hailstorm-bench-{name}-"))
    request["work_dir"] = str(work)
    request_file = work / "request.json"
    request_file.write_text(json.dumps(request))
    out = work / "out.json"
    log = work / "peer.log"
    env = dict(os.environ, PATHWAY_THREADS=str(request["threads"]))
    env.pop("PYTHONPATH", None)
    with log.open("w") as sink:
        try:
            done = subprocess.run([str(python), str(BENCH / f"peer_{name}.py"), job,
                                   str(request_file), str(out)], stdout=sink, stderr=sink,
                                  env=env, cwd=work, timeout=timeout)
        except subprocess.TimeoutExpired:
            _discard_all_but(work, log)
            raise PeerUnavailable(
                f"no end of the topic after {timeout:.0f} s (log: {log})") from None
    if done.returncode != 0 or not out.exists():
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        _discard_all_but(work, log)
        raise PeerUnavailable(f"exited with {done.returncode} (log: {log}): {tail}")
    answer = json.loads(out.read_text())
    shutil.rmtree(work)
    return float(answer["seconds"]), answer["result"]


def _discard_all_but(work: Path, log: Path) -> None:
    """Remove a failed peer's work directory but its log, which the reason names: its
    checkpoints and persisted state take hundreds of MB a run."""
    for entry in work.iterdir():
        if entry != log:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def peer_figures(outcomes: list[PeerOutcome], records: int, rate: float,
                 unit: str) -> tuple[dict[str, Any], list[str]]:
    """The JSON figures and the summary lines of the peers against hailstorm's ``rate``."""
    figures: dict[str, Any] = {}
    lines = []
    for outcome in outcomes:
        peer_rate = outcome.rate(records)
        if peer_rate is None:
            figures[f"{outcome.peer}_unavailable"] = outcome.reason
            lines.append(f"  {outcome.label}: no figure: {outcome.reason}")
            continue
        figures[f"{outcome.peer}_{unit}_per_s"] = round(peer_rate)
        figures[f"ratio_hailstorm_to_{outcome.peer}"] = round(rate / peer_rate, 3)
        lines.append(f"  {outcome.label}: {peer_rate:,.0f} {unit}/s ({THREADS} workers, its "
                     f"own fault tolerance on); hailstorm is {rate / peer_rate:.2f}x")
    return figures, lines


def peers_not_run(reason: str) -> tuple[dict[str, Any], list[str]]:
    """:func:`peer_figures` of every peer for a benchmark that runs none of them, and why."""
    return peer_figures([PeerOutcome(name, peer.label, None, reason)
                         for name, peer in PEERS.items()], 0, 0.0, "")


def add_peers_option(parser: Any) -> None:
    """``--peers``: which of Pathway, Quix Streams and PyFlink run (all by default)."""
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"Comma-separated peers to run besides Bytewax, of "
                        f"{', '.join(PEERS)} (default: all; 'none' for none). Each runs "
                        f"in a venv of its own, made on first use.")


def chosen_peers(option: str) -> list[str]:
    """The peers ``--peers`` names, checked."""
    names = [] if option == "none" else [n.strip() for n in option.split(",") if n.strip()]
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise SystemExit(f"--peers: unknown {', '.join(unknown)} (known: {', '.join(PEERS)})")
    return names
