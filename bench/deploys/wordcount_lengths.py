"""Word count re-sharded, with a new bolt and sink started at the committed clock: words
counted by length into ``word_lengths`` (``start="latest"``; a mid-run deploy for
``hailstorm chaos topologies/wordcount.py --deploy``; see wordcount_variants.py)."""

from wordcount_variants import wordcount

topology = wordcount(parallelism=3, lengths=True)
