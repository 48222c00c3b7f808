"""The topic writer on its own, against the real broker: a commit is one transaction of
records, dead letters and progress; a restart drops what is written; a newer writer fences
an older one, which then writes nothing visible; commits written on a thread of their own
while records go on arriving, with crashes between, end in the model's records."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from typing import Any

import pytest

from hailstorm.dev.harness import topic_records
from hailstorm.dev.harness.results import topic_rows
from hailstorm.processors.sink_core import Commit
from hailstorm.protocol.clock import Clock, dominates
from hailstorm.runtime.sink import BackgroundWrite
from hailstorm.sinks import FencedError
from hailstorm.sinks.topic import ORIGIN_HEADER, TopicWriter
from hailstorm.topic import Topic

pytestmark = pytest.mark.integration

P0 = ("in", 0)


def test_records_dead_letters_progress_and_fencing(kafka_bootstrap: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = Topic(f"out-{suffix}", mode="append", value=lambda t: {"word": t[0], "n": t[1]})
    options = {"progress": f"t{suffix}.s.progress", "dead_letter_topic": f"dlq-{suffix}",
               "node": "s"}
    first = TopicWriter.open(kafka_bootstrap, topic, f"t{suffix}/sink:s:0", 1, **options)
    assert first.view == {}
    first.add_columns([P0] * 3, [0, 1, 2], [("a", 1), ("bad", object()), ("b", 2)])
    assert first.commit_through({P0: 2}) == {P0: 2}
    records = topic_records(kafka_bootstrap, topic.name)
    assert [r.value for r in records] == [b'{"n":1,"word":"a"}', b'{"n":2,"word":"b"}']
    assert [(r.headers or {})[ORIGIN_HEADER] for r in records] == [b"in:0:0", b"in:0:2"]
    [letter] = topic_records(kafka_bootstrap, f"dlq-{suffix}")
    assert (letter.headers or {})["hailstorm.stage"] == b"row"
    assert letter.key == b"in:0:1" and b"cannot encode" in (letter.headers or {})[
        "hailstorm.error"]

    # A newer incarnation reads the progress, drops what is written, and fences the old one.
    second = TopicWriter.open(kafka_bootstrap, topic, f"t{suffix}/sink:s:0", 2, **options)
    assert second.view == {P0: 2}
    second.add_columns([P0] * 2, [2, 3], [("b", 2), ("c", 3)])
    assert second.pending == 1
    first.add_columns([P0], [3], [("stale", 0)])
    with pytest.raises(FencedError) as fenced:
        first.commit_through({P0: 3})
    assert fenced.value.superseded
    second.commit_through({P0: 3})
    values = [r.value for r in topic_records(kafka_bootstrap, topic.name)]
    assert values == [b'{"n":1,"word":"a"}', b'{"n":2,"word":"b"}', b'{"n":3,"word":"c"}']
    first.close()
    second.close()


def background_run(bootstrap: str, mode: str, seed: int) -> dict[str, int]:
    """Running totals of words from two partitions into ``mode`` topic, as the sink's shell
    writes them: each commit's transaction on a thread of its own (the shell's
    :class:`BackgroundWrite`) while tuples go on arriving, taken back later; crashes lose
    the buffer and the running commit's take-back, and the upstream replays from a
    committed point. The ``read_committed`` records must be the model's: the newest per
    key each word's total (upsert), every tuple exactly once (append)."""
    rng = random.Random(seed)
    suffix = uuid.uuid4().hex[:8]
    topic = Topic(f"bg-{suffix}", key=lambda t: t[0], mode=mode, partitions=2,
                  value=(lambda t: {"word": t[0], "n": t[1]}) if mode == "upsert"
                  else (lambda t: t[0]))
    options = {"progress": f"t{suffix}.s.progress", "dead_letter_topic": f"dlq-{suffix}",
               "node": "s"}
    partitions = [("in", 0), ("in", 1)]
    words = {p: [rng.choice("abcdefg") for _ in range(40)] for p in partitions}
    stats = {"commits": 0, "overlapped": 0, "crashes": 0}
    history: list[Clock] = [{}]
    epoch = 0
    while True:
        epoch += 1
        writer = TopicWriter.open(bootstrap, topic, f"t{suffix}/sink:s:0", epoch, **options)
        assert dominates(writer.view, history[-1])  # nothing committed was lost
        # The bolt reloads a committed round, then reads on in a new order.
        replay_from = rng.choice([h for h in history if dominates(writer.view, h)])
        counts = Counter(w for p in partitions for w in words[p][:replay_from.get(p, -1) + 1])
        rest = [(p, o) for p in partitions for o in range(replay_from.get(p, -1) + 1, 40)]
        order = interleaved(rng.sample(rest, len(rest)))
        lwm = {p: replay_from.get(p, -1) for p in partitions}
        running: BackgroundWrite | None = None
        crash_at = rng.randrange(len(order)) if stats["crashes"] < 3 and rng.random() < 0.7 \
            else None
        for i, (p, offset) in enumerate(order):
            if i == crash_at:
                break
            word = words[p][offset]
            counts[word] += 1
            if running is not None and not running.ended.is_set():
                stats["overlapped"] += 1
            writer.add_columns([p], [offset], [(word, counts[word])])
            lwm[p] = offset
            if running is None and rng.random() < 0.3:
                prepared = writer.prepare(dict(lwm))
                if prepared is not None:
                    running = BackgroundWrite(Commit(dict(lwm), ()), prepared, writer.write,
                                              lambda: None, "test")
                    stats["commits"] += 1
            if running is not None and rng.random() < 0.25:
                history.append(take_back(writer, running))
                running = None
        else:
            if running is not None:
                history.append(take_back(writer, running))
            history.append(writer.commit_through(lwm))
            writer.close()
            break
        if running is not None:  # the crash: what the transaction wrote stays committed
            running.ended.wait()
            assert running.error is None
            history.append(running.prepared.selection.target)
        writer.close()
        stats["crashes"] += 1
    rows = topic_rows(bootstrap, topic)
    if mode == "upsert":
        totals = Counter(w for p in partitions for w in words[p])
        assert {key: json.loads(row["value"]) for (key,), row in rows.items()} == {
            w.encode(): {"word": w, "n": n} for w, n in totals.items()}
    else:
        assert {origin: row["value"] for origin, row in rows.items()} == {
            (p[0], p[1], o, 0): json.dumps(words[p][o]).encode()
            for p in partitions for o in range(40)}
    return stats


def interleaved(order: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """``order``'s partitions in its order, each partition's offsets ascending."""
    by_partition: dict[Any, list[int]] = {}
    for p, offset in order:
        by_partition.setdefault(p, []).append(offset)
    for offsets in by_partition.values():
        offsets.sort(reverse=True)
    return [(p, by_partition[p].pop()) for p, _offset in order]


def take_back(writer: TopicWriter, running: BackgroundWrite) -> Clock:
    """Wait for the background commit and adopt it, as the shell does."""
    running.ended.wait()
    if running.error is not None:
        raise running.error
    return writer.finish(running.prepared)


@pytest.mark.parametrize(("mode", "seed"), [("upsert", 1), ("append", 2)])
def test_commits_written_while_records_arrive_end_in_the_model_records(
        kafka_bootstrap: str, mode: str, seed: int) -> None:
    stats = background_run(kafka_bootstrap, mode, seed)
    assert stats["commits"] > 0 and stats["overlapped"] > 0 and stats["crashes"] > 0
