"""One benchmark job on Quix Streams, run by the Python of its venv (:mod:`peer_envs`).

    <quix venv>/bin/python bench/peer_quix.py JOB REQUEST_JSON OUT_JSON

An ``Application`` with ``processing_guarantee="exactly-once"`` (Kafka transactions), commits
every second (as hailstorm's rounds), its RocksDB state in the work directory, reads the
topic from its beginning; ``group_by`` re-keys the stream through Quix's repartition topic
(its way to aggregate by a key other than the message's), then a stateful ``apply`` keeps the
running figures per key. Quix runs one consumer per process, so ``threads`` processes of the
same consumer group share the partitions, each writing its part of the result (a key
whose partition moved between them in a rebalance keeps its higher running figure). Each
process stops when no message arrived for ``IDLE_S`` (``Application.run(timeout=...)``).
The time runs from the processes starting their ``run`` to the last one's last message
(its return less ``IDLE_S``). See
:mod:`peer_runs` for the request and the answer.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import sys
import time
from pathlib import Path
from typing import Any

IDLE_S = 5.0
"""A process stops when no message arrived for this long (its share of the topic is done)."""


def _word_count(app: Any, request: dict[str, Any], latest: dict[str, Any]) -> Any:
    word = re.compile(request["word_pattern"])
    topic = app.topic(request["topic"], value_deserializer="str")
    words = app.dataframe(topic).apply(lambda line: word.findall(line.lower()), expand=True)
    words = words.group_by(lambda w: w, name="word")

    def count(w: str, state: Any) -> tuple[str, int]:
        total = state.get("count", 0) + 1
        state.set("count", total)
        return w, total

    return words.apply(count, stateful=True).update(
        lambda kv: latest.__setitem__(kv[0], kv[1]))


def _user_totals(app: Any, request: dict[str, Any], latest: dict[str, Any]) -> Any:
    topic = app.topic(request["topic"], value_deserializer="json")
    events = app.dataframe(topic).group_by("user")

    def totals(event: dict[str, Any], state: Any) -> tuple[str, list[int]]:
        figures = state.get("figures", [0, 0])
        figures = [figures[0] + event["amount"], figures[1] + 1]
        state.set("figures", figures)
        return event["user"], figures

    return events.apply(totals, stateful=True).update(
        lambda kv: latest.__setitem__(kv[0], kv[1]))


JOBS = {"word_count": _word_count, "user_totals": _user_totals}


def _process(job: str, request: dict[str, Any], index: int, out: str) -> None:
    from quixstreams import Application

    app = Application(broker_address=request["bootstrap"],
                      consumer_group="hailstorm-bench-quix", auto_offset_reset="earliest",
                      processing_guarantee="exactly-once", commit_interval=1.0,
                      state_dir=f"{request['work_dir']}/state-{index}", loglevel="WARNING")
    latest: dict[str, Any] = {}
    JOBS[job](app, request, latest)
    started = time.time()
    app.run(timeout=IDLE_S)
    ended = time.time() - IDLE_S
    Path(out).write_text(json.dumps({"span": [started, ended], "result": list(latest.items())}))


def _progress(value: Any) -> int:
    """How far a running figure is: a count, or the event count of ``[amount, count]``."""
    return value if isinstance(value, int) else int(value[1])


def main(argv: list[str]) -> None:
    job, request_file, out = argv
    request = json.loads(Path(request_file).read_text())
    parts = [f"{request['work_dir']}/part-{i}.json" for i in range(request["threads"])]
    processes = [multiprocessing.Process(target=_process, args=(job, request, i, part))
                 for i, part in enumerate(parts)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a Quix process exited with {p.exitcode}")
    spans, result = [], {}
    for part in parts:
        answer = json.loads(Path(part).read_text())
        spans.append(answer["span"])
        for key, value in answer["result"]:
            if key not in result or _progress(value) > _progress(result[key]):
                result[key] = value
    seconds = max(s[1] for s in spans) - min(s[0] for s in spans)
    Path(out).write_text(json.dumps({"seconds": seconds, "result": sorted(result.items())}))


if __name__ == "__main__":
    main(sys.argv[1:])
