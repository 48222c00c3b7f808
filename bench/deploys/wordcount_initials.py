"""Word count re-sharded, with a new bolt and sink over the whole history: words counted by
their first letter into ``word_initials``, backfilled from offset 0 while the carried bolts
keep committing (a mid-run deploy for ``hailstorm chaos topologies/wordcount.py --deploy``;
see wordcount_variants.py)."""

from wordcount_variants import wordcount

topology = wordcount(parallelism=3, initials=True)
