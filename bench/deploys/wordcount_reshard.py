"""Word count re-sharded: ``counts`` over three instances instead of two (a mid-run deploy
for ``hailstorm chaos topologies/wordcount.py --deploy``; see wordcount_variants.py)."""

from wordcount_variants import wordcount

topology = wordcount(parallelism=3)
