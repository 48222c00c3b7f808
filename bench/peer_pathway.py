"""One benchmark job on Pathway, run by the Python of the venv :mod:`peer_envs` made for it.

    <pathway venv>/bin/python bench/peer_pathway.py JOB REQUEST_JSON OUT_JSON

Pathway reads the whole topic from its beginning (``pw.io.kafka.read`` in ``mode="static"``:
it stops at the end of the data there was when it started), persistence on (a filesystem
backend, snapshots every second, as hailstorm's rounds), ``PATHWAY_THREADS`` worker threads.
The job's running result per key is kept from ``pw.io.subscribe``'s changes; the time is
from ``pw.run`` starting to it returning (imports and the graph's construction excluded).
See :mod:`peer_runs` for the request and the answer.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pathway as pw


def _settings(request: dict[str, Any]) -> dict[str, str]:
    return {"bootstrap.servers": request["bootstrap"], "group.id": "hailstorm-bench-pathway",
            "auto.offset.reset": "earliest", "session.timeout.ms": "6000"}


def word_count(request: dict[str, Any]) -> tuple[pw.Table, list[str]]:
    """Running count per word: lowercase, split by the topology's word pattern."""
    word = re.compile(request["word_pattern"])
    lines = pw.io.kafka.read(_settings(request), topic=request["topic"], format="plaintext",
                             mode="static", autocommit_duration_ms=1000, name="lines")
    words = lines.select(word=pw.apply(lambda line: tuple(word.findall(line.lower())),
                                       pw.this.data)).flatten(pw.this.word)
    counts = words.groupby(pw.this.word).reduce(pw.this.word, count=pw.reducers.count())
    return counts, ["word", "count"]


class _Event(pw.Schema):
    user: str
    amount: int
    country: str


def user_totals(request: dict[str, Any]) -> tuple[pw.Table, list[str]]:
    """Per-user (sum of amounts, count of events), the JSON decoded by Pathway's reader."""
    events = pw.io.kafka.read(_settings(request), topic=request["topic"], format="json",
                              schema=_Event, mode="static", autocommit_duration_ms=1000,
                              name="events")
    totals = events.groupby(pw.this.user).reduce(
        pw.this.user, amount=pw.reducers.sum(pw.this.amount), count=pw.reducers.count())
    return totals, ["user", "amount", "count"]


def top_spenders(request: dict[str, Any]) -> tuple[pw.Table, list[str]]:
    """The top ``request["top"]`` users per country by their running totals (ties by user
    id): a total per (country, user), then per country the ``sorted_tuple`` of
    ``(-total, user)``, cut to the top."""
    top = int(request["top"])
    events = pw.io.kafka.read(_settings(request), topic=request["topic"], format="json",
                              schema=_Event, mode="static", autocommit_duration_ms=1000,
                              name="events")
    totals = events.groupby(pw.this.country, pw.this.user).reduce(
        pw.this.country, pw.this.user, spent=pw.reducers.sum(pw.this.amount))
    ranked = totals.select(pw.this.country, entry=pw.make_tuple(-pw.this.spent, pw.this.user))
    tops = ranked.groupby(pw.this.country).reduce(
        pw.this.country,
        ranking=pw.apply(lambda entries: tuple((user, -spent) for spent, user in entries[:top]),
                         pw.reducers.sorted_tuple(pw.this.entry)))
    return tops, ["country", "ranking"]


JOBS = {"word_count": word_count, "user_totals": user_totals, "top_spenders": top_spenders}


def main(argv: list[str]) -> None:
    job, request_file, out = argv
    request = json.loads(Path(request_file).read_text())
    table, columns = JOBS[job](request)
    latest: dict[str, Any] = {}

    def on_change(key: Any, row: dict[str, Any], time: int, is_addition: bool) -> None:
        if is_addition:
            values = [row[c] for c in columns[1:]]
            latest[row[columns[0]]] = values[0] if len(values) == 1 else values

    pw.io.subscribe(table, on_change=on_change)
    backend = pw.persistence.Backend.filesystem(request["work_dir"] + "/persistence")
    started = time.time()
    pw.run(persistence_config=pw.persistence.Config(backend, snapshot_interval_ms=1000),
           monitoring_level=pw.MonitoringLevel.NONE)
    ended = time.time()
    Path(out).write_text(json.dumps({"seconds": ended - started,
                                     "result": sorted(latest.items())}))


if __name__ == "__main__":
    main(sys.argv[1:])
