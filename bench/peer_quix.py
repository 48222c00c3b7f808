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
(its return less ``IDLE_S``). Quix refuses a ``group_by`` after another, so the two stages
of ``top_spenders`` meet in a topic of their own (the first writes its running totals keyed
by country). See :mod:`peer_runs` for the request and the answer.
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


def _top_spenders(app: Any, request: dict[str, Any], latest: dict[str, Any]) -> Any:
    top = int(request["top"])
    topic = app.topic(request["topic"], value_deserializer="json")
    events = app.dataframe(topic).group_by(
        lambda event: f"{event['country']}/{event['user']}", name="country_user")

    def totals(event: dict[str, Any], state: Any) -> dict[str, Any]:
        spent = state.get("spent", 0) + event["amount"]
        state.set("spent", spent)
        return {"country": event["country"], "user": event["user"], "spent": spent}

    def ranking(spend: dict[str, Any], state: Any) -> tuple[str, list[list[Any]]]:
        # A total only grows: the best score of each user seen, cut to the top, is exact.
        best = dict(state.get("best", []))
        best[spend["user"]] = max(best.get(spend["user"], 0), spend["spent"])
        ranked = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        state.set("best", ranked)
        return spend["country"], [list(kv) for kv in ranked]

    # Quix refuses a group_by after a group_by: the second stage reads a topic of its own
    # that the first writes keyed by country.
    from quixstreams.models import TopicConfig

    spends_topic = app.topic(f"{request['topic']}-spends-{Path(request['work_dir']).name}",
                             key_serializer="str", value_serializer="json",
                             key_deserializer="str", value_deserializer="json",
                             config=TopicConfig(num_partitions=request["partitions"],
                                                replication_factor=1))
    events.apply(totals, stateful=True).to_topic(spends_topic,
                                                 key=lambda spend: spend["country"])
    return app.dataframe(spends_topic).apply(ranking, stateful=True).update(
        lambda kv: latest.__setitem__(kv[0], kv[1]))


JOBS = {"word_count": _word_count, "user_totals": _user_totals,
        "top_spenders": _top_spenders}


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
    """How far a running figure is: a count, the event count of ``[amount, count]``, or
    what a ranking's users spent (totals only grow)."""
    if isinstance(value, int):
        return value
    if value and isinstance(value[0], list):
        return sum(spent for _user, spent in value)
    return int(value[1])


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
