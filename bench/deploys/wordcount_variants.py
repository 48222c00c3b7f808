"""Changed versions of ``topologies/wordcount.py`` to deploy mid-run (``hailstorm chaos
--deploy``, docs/chaos.md): the same spout, ``counts`` bolt and ``word_counts`` sink (their
functions are the example's, so the upgrade plan carries their state), over ``parallelism``
instances; with ``lengths`` a new bolt counting words by length from the committed clock on
(``start="latest"``) into a new table ``word_lengths``; with ``initials`` a new bolt counting
words by their first letter over the whole history (backfilled from offset 0 while the rest
keeps committing) into a new table ``word_initials``; with ``both`` a new bolt reading the
spout *and* ``counts`` (which is held while it catches up): per word, how often it was seen
over the whole history and the highest running total ``counts`` emitted for it after the
deploy."""

import sys
from pathlib import Path

from hailstorm import Count, Max, Record, Table, Topology, itself, per_key

REPO = str(Path(__file__).resolve().parents[2])
if REPO not in sys.path:  # the example's words_of, whoever loads this (the CLI, an executor)
    sys.path.append(REPO)

from topologies.wordcount import words_of  # noqa: E402  (needs the repository on the path)

FIGURES = Record({"seen": Count(), "top": Max()})
"""``both``'s state per word."""


def wordcount(parallelism: int = 2, lengths: bool = False, initials: bool = False,
              both: bool = False) -> Topology:
    """The word count with ``counts`` over ``parallelism`` instances (and ``lengths``,
    ``initials``, ``both``)."""
    topology = Topology("wordcount")
    lines = topology.spout("lines", topic="words", decoder="text", explode=words_of)
    counts = topology.bolt(
        "counts", inputs=[lines], key=itself, state=per_key(Count()), lift=Count.lift,
        emit=lambda word, count: [(word, count)], parallelism=parallelism,
        preaggregate=not both)  # a bolt reads it: one emission a tuple
    topology.sink("word_counts", inputs=[counts], target=Table(
        "word_counts", columns={"word": "text", "count": "bigint"}, key=["word"],
        mode="upsert"))
    if lengths:
        by_length = topology.bolt(
            "lengths", inputs=[lines], key=len, state=per_key(Count(), "long"), lift=Count.lift,
            emit=lambda word, count: [(len(word), count)], start="latest")
        topology.sink("word_lengths", inputs=[by_length], target=Table(
            "word_lengths", columns={"length": "bigint", "count": "bigint"}, key=["length"]))
    if initials:
        by_initial = topology.bolt(
            "initials", inputs=[lines], key=lambda word: word[:1], state=per_key(Count()),
            lift=Count.lift, emit=lambda word, count: [(word[:1], count)], parallelism=2)
        topology.sink("word_initials", inputs=[by_initial], target=Table(
            "word_initials", columns={"initial": "text", "count": "bigint"}, key=["initial"],
            mode="upsert"))
    if both:
        topology.bolt(
            "both", inputs=[lines, counts], key=lambda t: t if isinstance(t, str) else t[0],
            state=per_key(FIGURES), parallelism=2,
            lift=lambda t: FIGURES.lift(seen=1) if isinstance(t, str) else FIGURES.lift(top=t[1]))
    return topology
