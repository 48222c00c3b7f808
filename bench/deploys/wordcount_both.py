"""Word count with a new bolt reading the spout *and* the carried ``counts``: per word, how
often it was seen over the whole history and the highest running total ``counts`` emitted
for it after the deploy. It catches up from offset 0 on its own clock, ``counts`` and its
table held with it (a mid-run deploy for ``hailstorm chaos topologies/wordcount.py
--deploy``; see wordcount_variants.py)."""

from wordcount_variants import wordcount

topology = wordcount(both=True)
