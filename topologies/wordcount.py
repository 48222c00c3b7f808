"""Word count: how many times each word appeared, kept up to date in a table.

Each message of the Kafka topic ``words`` is one UTF-8 line of text. The line is
lowercased and split on everything that is not a letter (so ``"Don't stop!"`` gives
``don``, ``t``, ``stop``). The ``counts`` bolt keeps a count per word, split over two
instances by word, and emits the word's running total; the sink upserts it into
``word_counts(word text primary key, count bigint)``, so the table always holds the latest
total of every word. Since only that upsert table reads the bolt, the spouts may count the
words of each fetched batch themselves (``preaggregate=True``) and send one
``(word, count)`` contribution per word and batch instead of every word.

Messages that are not valid UTF-8 go to the dead-letter topic ``wordcount.dead-letter``.
"""

import re

from hailstorm import Count, Table, Topology, itself, per_key

WORD = re.compile(r"[^\W\d_]+")
"""A run of letters (any alphabet); digits, punctuation and spaces separate words."""


def words_of(line: str) -> list[str]:
    """The lowercase words of a line."""
    return WORD.findall(line.lower())


topology = Topology("wordcount")

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
    "word_counts",
    inputs=[counts],
    target=Table(
        "word_counts",
        columns={"word": "text", "count": "bigint"},
        key=["word"],
        mode="upsert",
    ),
)
