"""Word count into Kafka: running totals and line sizes written to topics exactly once.

Each message of the topic ``words`` is one UTF-8 line of text, split into lowercase words
as in ``wordcount``. Two outputs, each written in Kafka transactions with the sink's
progress, so a ``read_committed`` consumer sees every record exactly once:

* ``totals``: the ``counts`` bolt's running total of every word, upserted to the topic
  ``word-totals`` (key: the word; value: ``{"word": ..., "count": ...}`` as JSON). The topic
  is a changelog: its newest record per word is the word's count (compaction keeps it).
* ``line_sizes``: one Avro record ``{"chars": ..., "words": ...}`` per line, appended to
  ``line-sizes`` with the line's origin in the ``hailstorm.origin`` header.

Read them with any Kafka client set to ``isolation.level=read_committed``, e.g.
``kafka-console-consumer.sh --topic word-totals --isolation-level read_committed``.
"""

import re

from hailstorm import Count, Topic, Topology, itself, per_key

WORD = re.compile(r"[^\W\d_]+")

LINE_SIZE = {
    "type": "record",
    "name": "LineSize",
    "fields": [{"name": "chars", "type": "long"}, {"name": "words", "type": "long"}],
}


def words_of(line: str) -> list[str]:
    """The lowercase words of a line."""
    return WORD.findall(line.lower())


topology = Topology("wordstream")

lines = topology.spout("lines", topic="words", decoder="text", explode=words_of)

counts = topology.bolt(
    "counts",
    inputs=[lines],
    key=itself,
    state=per_key(Count()),
    lift=Count.lift,
    emit=lambda word, count: [(word, count)],
    parallelism=2,
    preaggregate=True,
)

topology.sink(
    "totals",
    inputs=[counts],
    target=Topic(
        "word-totals",
        key=lambda total: total[0],
        value=lambda total: {"word": total[0], "count": total[1]},
        partitions=4,
    ),
)

sizes = topology.spout(
    "sizes",
    topic="words",
    decoder="text",
    explode=lambda line: [{"chars": len(line), "words": len(words_of(line))}],
)

topology.sink(
    "line_sizes",
    inputs=[sizes],
    target=Topic("line-sizes", mode="append", encoder="avro", schema=LINE_SIZE),
)
