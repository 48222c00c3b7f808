"""Trending hashtags: the ten most used hashtags of every minute.

Messages on the topic ``posts`` are JSON objects such as
``{"ts": 1700000000, "text": "Loving the #Python #sprint"}``, ``ts`` being the time the post
was written in epoch seconds. A hashtag is ``#`` followed by letters, digits or ``_``,
compared case-insensitively; a post counts once for each distinct tag it mentions. A post
belongs to the minute ``ts - ts % 60`` of its own timestamp (event time), whenever and in
whatever order it is processed.

* ``tag_counts`` counts posts per ``(minute, tag)`` (two instances, split by that key) and
  emits ``(minute, tag, running_total)`` after every post;
* ``top_tags`` keeps, per minute, ``TopK(10)`` over tags scored by those running totals.
  This is exact: a tag's total only grows, and TopK keeps each tag's highest score, so the
  state is the top ten of the current totals. Whenever the post's tag is (still) in the
  top ten it emits the minute's whole ranking: ``(minute, rank, tag, count)`` for ranks
  1..n, ties broken alphabetically;
* the sink upserts those rows into ``trending_tags(minute, rank, tag, count)`` keyed by
  ``(minute, rank)``, so the table holds the current top ten of every minute;
* a second sink writes the same rankings back into Kafka, exactly once: the upsert topic
  ``trending-tags``, keyed ``[minute, rank]`` (JSON), value
  ``{"minute": ..., "rank": ..., "tag": ..., "count": ...}``; its newest record per key is
  the table's row.

Posts that are not JSON, or lack ``ts``/``text``, go to ``trending.dead-letter``.
State grows by one entry per (minute, tag) and one ranking per minute.
"""

import re
from typing import Any

from hailstorm import Count, Table, Topic, TopK, Topology, itself, per_key

TOP = 10
HASHTAG = re.compile(r"#(\w+)")


def tags_of(post: dict[str, Any]) -> list[tuple[int, str]]:
    """``(minute, tag)`` for each distinct hashtag of a post."""
    ts = int(post["ts"])
    minute = ts - ts % 60
    tags = dict.fromkeys(tag.lower() for tag in HASHTAG.findall(post["text"]))
    return [(minute, tag) for tag in tags]


def ranking(minute_count: tuple[int, str, int], top: dict[str, int]) -> list[tuple[Any, ...]]:
    """The minute's ranking rows, or nothing when the tag is outside the top ten."""
    minute, tag, _ = minute_count
    if tag not in top:
        return []
    return [(minute, rank, t, n) for rank, (t, n) in enumerate(TopK.top(top), start=1)]


topology = Topology("trending")

posts = topology.spout("posts", topic="posts", decoder="json", explode=tags_of)

tag_counts = topology.bolt(
    "tag_counts",
    inputs=[posts],
    key=itself,
    state=per_key(Count(), key_type=("long", "string")),
    lift=Count.lift,
    emit=lambda minute_tag, count: [(*minute_tag, count)],
    parallelism=2,
)

top_tags = topology.bolt(
    "top_tags",
    inputs=[tag_counts],
    key=lambda minute_tag_count: minute_tag_count[0],
    state=per_key(TopK(TOP, item_type="string", score_type="long"), key_type="long"),
    lift=lambda minute_tag_count: TopK.lift(minute_tag_count[1], minute_tag_count[2]),
    emit=ranking,
    parallelism=2,
)

topology.sink(
    "trending_tags",
    inputs=[top_tags],
    target=Table(
        "trending_tags",
        columns={"minute": "bigint", "rank": "integer", "tag": "text", "count": "bigint"},
        key=["minute", "rank"],
        mode="upsert",
    ),
)

topology.sink(
    "trending_topic",
    inputs=[top_tags],
    target=Topic(
        "trending-tags",
        key=lambda row: [row[0], row[1]],
        value=lambda row: {"minute": row[0], "rank": row[1], "tag": row[2], "count": row[3]},
    ),
)
