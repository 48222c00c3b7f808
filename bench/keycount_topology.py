"""Count per key: the topology of ``bench/recovery.py``.

Each message of the topic ``bench-keys`` is a line of space-separated keys; the ``counts``
bolt (2 instances, split by key) keeps ``per_key(Count())``. No emits, no sink: the state is
all there is, so its size (the number of distinct keys) is what the benchmark varies.
"""

from hailstorm import Count, Topology, per_key

topology = Topology("keycount")

keys = topology.spout("keys", topic="bench-keys", decoder="text", explode=str.split)

counts = topology.bolt(
    "counts",
    inputs=[keys],
    key=lambda k: k,
    state=per_key(Count()),
    lift=lambda k: 1,
    parallelism=2,
)
