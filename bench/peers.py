"""The peers a benchmark compares hailstorm with, on the same Kafka topic in the same run.

* :func:`run_bytewax`: the same job as a Bytewax dataflow (PyPI ``bytewax``, the optional
  ``bench`` extra, which a benchmark installs into hailstorm's venv on first use: the jobs
  call the topologies' functions, so Bytewax runs beside hailstorm, not in a venv of its
  own like the other peers), reading the topic with Bytewax's own ``KafkaSource``
  (``tail=False``: it ends at the end of the backlog), recovery on (an SQLite recovery
  store, 1 s epochs), one worker in each of ``processes`` processes (a Bytewax cluster on
  loopback).
* the single-process confluent-kafka baseline lives in :mod:`common`.

A job is a function of this module's :data:`JOBS` (``name -> (build, merge)``): ``build``
adds the job's steps after the Kafka input and returns the stream of ``(key, value)``
results; each process keeps the latest value per key of what it wrote, and the parent
merges the processes' results.

Run as a script, this module is one process of such a cluster::

    python bench/peers.py JOB BOOTSTRAP TOPIC PROC_ID ADDRESSES RECOVERY_DIR OUT_FILE
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

EPOCH = timedelta(seconds=1)
"""Bytewax's epoch interval (its snapshot interval): as hailstorm's round every 1 s."""


@dataclass(frozen=True)
class PeerRun:
    """One peer's run: seconds from the first process starting its dataflow to the last one
    finishing (imports and cluster set-up excluded), and the merged result."""

    seconds: float
    result: dict[Any, Any]


def bytewax_available() -> bool:
    try:
        import bytewax  # noqa: F401
    except ImportError:
        return False
    return True


def bytewax_requirement() -> str:
    """The Bytewax that hailstorm's ``bench`` extra pins (``pyproject.toml``), as pip takes
    it."""
    from importlib.metadata import requires

    for requirement in requires("hailstorm") or ():
        name, _, marker = requirement.partition(";")
        if name.strip().startswith("bytewax") and '"bench"' in marker:
            return name.strip()
    raise LookupError("hailstorm's 'bench' extra names no bytewax (pyproject.toml)")


def bytewax_skipped(no_bytewax: bool, install: bool = True) -> str | None:
    """Why a bench runs no Bytewax (None: it runs it): told not to, or not installed and
    (``install``) its first-use install into this venv failed."""
    if no_bytewax:
        return "not run (--no-bytewax)"
    if bytewax_available():
        return None
    if not install:
        return ("not installed: it is in the optional 'bench' extra "
                "(.venv/bin/pip install -e '.[bench]')")
    return _install_bytewax()


def _install_bytewax() -> str | None:
    """pip-install :func:`bytewax_requirement` into this interpreter's venv, with a progress
    line; None when it then imports, else why not."""
    import importlib

    from peer_envs import PeerUnavailable, run_step

    requirement = bytewax_requirement()
    print(f"bench: installing {requirement} (the 'bench' extra) into {sys.prefix} "
          "(first run only)", file=sys.stderr, flush=True)
    try:
        run_step([sys.executable, "-m", "pip", "install", "--quiet",
                  "--disable-pip-version-check", requirement], f"pip install {requirement}")
    except PeerUnavailable as exc:
        return f"not installed: {exc}"
    importlib.invalidate_caches()
    return None if bytewax_available() else \
        f"not installed: {requirement} installed but does not import"


def note_bytewax_skipped(why: str | None, figures: dict[str, Any], lines: list[str]) -> None:
    """Say in a bench's JSON line (``bytewax_unavailable``) and summary why Bytewax has no
    figure, as :mod:`peer_runs` does for the other peers."""
    if why is not None:
        figures["bytewax_unavailable"] = why
        lines.append(f"  Bytewax:   no figure: {why}")


def run_bytewax(job: str, bootstrap: str, topic: str, processes: int = 2,
                timeout: float = 1800.0) -> PeerRun:
    """Run ``job`` on Bytewax over the whole of ``topic``; see the module docstring."""
    from bytewax.recovery import init_db_dir

    work = Path(tempfile.mkdtemp(prefix="hailstorm-bench-bytewax-"))
    recovery = work / "recovery"
    recovery.mkdir()
    init_db_dir(recovery, processes)
    ports = [_free_port() for _ in range(processes)]
    addresses = ";".join(f"127.0.0.1:{p}" for p in ports)
    outs = [work / f"out-{i}.pickle" for i in range(processes)]
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'bench'}")
    procs = [subprocess.Popen([sys.executable, __file__, job, bootstrap, topic, str(i),
                               addresses, str(recovery), str(outs[i])], env=env)
             for i in range(processes)]
    try:
        for proc in procs:
            if proc.wait(timeout) != 0:
                raise RuntimeError(f"a Bytewax process exited with {proc.returncode}")
        spans = [pickle.loads(out.read_bytes()) for out in outs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(work)  # its recovery databases take hundreds of MB a run
    _, merge = JOBS[job]
    result: dict[Any, Any] = {}
    for _span, part in spans:
        merge(result, part)
    started = min(s[0] for s, _ in spans)
    ended = max(s[1] for s, _ in spans)
    return PeerRun(ended - started, result)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------ jobs


def _word_count(messages: Any) -> Any:
    """Running count per word (what hailstorm's upsert table holds), as a Bytewax user
    would write it: split, key by word, ``stateful_map`` a running total."""
    import bytewax.operators as op

    from topologies.wordcount import words_of

    words = op.flat_map("split", messages, lambda m: words_of(m.value.decode()))
    keyed = op.key_on("word", words, lambda w: w)

    def running(total: int | None, _word: str) -> tuple[int, int]:
        total = (total or 0) + 1
        return total, total

    return op.stateful_map("count", keyed, running)


def _word_count_final(messages: Any) -> Any:
    """Bytewax's cheapest word count: ``count_final`` emits each word's count once, at the
    end of the input (a batch job's output, no running totals: its best case)."""
    import bytewax.operators as op

    from topologies.wordcount import words_of

    words = op.flat_map("split", messages, lambda m: words_of(m.value.decode()))
    return op.count_final("count", words, lambda w: w)


def _user_totals(messages: Any) -> Any:
    """Per-user running (sum of amounts, count of events) from JSON events."""
    import bytewax.operators as op

    events = op.map("parse", messages, lambda m: json.loads(m.value))
    keyed = op.key_on("user", events, lambda e: e["user"])

    def running(total: tuple[int, int] | None, event: dict[str, Any]) -> tuple[Any, Any]:
        amount, count = total or (0, 0)
        total = (amount + event["amount"], count + 1)
        return total, total

    return op.stateful_map("totals", keyed, running)


TOP_SPENDERS = 10
"""How many users :func:`_top_spenders` ranks per country (``topologies/top_spenders.py``)."""


def _top_spenders(messages: Any) -> Any:
    """Top ten spenders per country in two keyed stages, as ``topologies/top_spenders.py``:
    a running total per (country, user) with ``stateful_map``, then, keyed by country, a
    ``stateful_flat_map`` keeping the ten best users (ties by user id) that emits the
    country's whole ranking whenever the user is (still) in it."""
    import bytewax.operators as op

    events = op.map("parse", messages, lambda m: json.loads(m.value))
    by_user = op.key_on("country_user", events, lambda e: f"{e['country']}/{e['user']}")

    def running(total: int | None, event: dict[str, Any]) -> tuple[int, tuple[str, str, int]]:
        total = (total or 0) + event["amount"]
        return total, (event["country"], event["user"], total)

    spends = op.map("drop_key", op.stateful_map("totals", by_user, running), lambda kv: kv[1])
    by_country = op.key_on("country", spends, lambda spend: spend[0])

    def rank(kv: tuple[str, int]) -> tuple[int, str]:
        return -kv[1], kv[0]

    def top(best: dict[str, int] | None, spend: tuple[str, str, int]
            ) -> tuple[dict[str, int], list[tuple[tuple[str, int], ...]]]:
        best = best if best is not None else {}
        _, user, spent = spend
        if spent > best.get(user, -1):
            best[user] = spent
            if len(best) > TOP_SPENDERS:
                del best[max(best.items(), key=rank)[0]]
        if user not in best:
            return best, []
        return best, [tuple(sorted(best.items(), key=rank))]

    return op.stateful_flat_map("top", by_country, top)


def _pageviews(messages: Any) -> Any:
    """``topologies/pageviews.py``: a ``stateful_map`` keyed by Kafka partition drops the
    views late for their partition (window end + 5 min at or below its newest event time),
    then one keyed by page keeps per 5-minute window the views, a ``HyperLogLog`` of users
    (hailstorm's, for equal estimates) and the latency sum and count, and emits the view's
    window row."""
    import io

    import bytewax.operators as op
    from fastavro import parse_schema, schemaless_reader

    from topologies.pageviews import PAGE_VIEW_SCHEMA, USERS, WINDOW_MS

    schema = parse_schema(PAGE_VIEW_SCHEMA)
    by_partition = op.key_on("partition", messages, lambda m: str(m.partition))

    def judge(newest: int | None, m: Any) -> tuple[int | None, Any]:
        view = schemaless_reader(io.BytesIO(m.value), schema, schema)
        ts = view["ts"]
        if newest is not None and ts - ts % WINDOW_MS + 2 * WINDOW_MS <= newest:
            return newest, None
        return (ts if newest is None or ts > newest else newest), view

    views = op.filter_map("on_time", op.stateful_map("lateness", by_partition, judge),
                          lambda kv: kv[1])
    by_page = op.key_on("page", views, lambda v: v["page"])

    def windows(state: dict[int, list[Any]] | None, view: dict[str, Any]) -> tuple[Any, Any]:
        state = state if state is not None else {}
        start = view["ts"] - view["ts"] % WINDOW_MS
        users = USERS.lift(view["user"])
        figures = state.get(start)
        if figures is None:
            figures = state[start] = [1, users, view["latency_ms"], 1]
        else:
            figures[0] += 1
            figures[1] = USERS.absorb(figures[1], users)
            figures[2] += view["latency_ms"]
            figures[3] += 1
        row = (figures[0], round(USERS.estimate(figures[1])), figures[2] / figures[3])
        return state, (start, row)

    rows = op.stateful_map("windows", by_page, windows)
    return op.map("by_window", rows, lambda kv: ((kv[0], kv[1][0]), kv[1][1]))


def _latest(result: dict[Any, Any], part: dict[Any, Any]) -> None:
    """Keys are owned by one worker each: the parts do not overlap."""
    result.update(part)


JOBS: dict[str, tuple[Callable[[Any], Any], Callable[[dict[Any, Any], dict[Any, Any]], None]]] = {
    "word_count": (_word_count, _latest),
    "word_count_final": (_word_count_final, _latest),
    "user_totals": (_user_totals, _latest),
    "top_spenders": (_top_spenders, _latest),
    "pageviews": (_pageviews, _latest),
}


def _process_main(argv: list[str]) -> None:
    """One process of the Bytewax cluster (see the module docstring)."""
    job, bootstrap, topic, proc_id, addresses, recovery_dir, out = argv
    import bytewax.operators as op
    from bytewax.connectors.kafka import KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.recovery import RecoveryConfig
    from bytewax.testing import cluster_main

    latest: dict[Any, Any] = {}

    class _Partition(StatelessSinkPartition[Any]):
        def write_batch(self, items: list[Any]) -> None:
            latest.update(items)

    class _LatestSink(DynamicSink[Any]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> _Partition:
            return _Partition()

    build, _ = JOBS[job]
    flow = Dataflow(f"bench_{job}")
    messages = op.input("kafka", flow, KafkaSource([bootstrap], [topic], tail=False))
    op.output("latest", build(messages), _LatestSink())
    started = time.time()
    cluster_main(flow, addresses.split(";"), int(proc_id), epoch_interval=EPOCH,
                 recovery_config=RecoveryConfig(recovery_dir))
    ended = time.time()
    Path(out).write_bytes(pickle.dumps(((started, ended), latest)))


if __name__ == "__main__":
    _process_main(sys.argv[1:])
