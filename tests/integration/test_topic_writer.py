"""The topic writer on its own, against the real broker: a commit is one transaction of
records, dead letters and progress; a restart drops what is written; a newer writer fences
an older one, which then writes nothing visible."""

from __future__ import annotations

import uuid

import pytest

from hailstorm.dev.harness import topic_records
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
