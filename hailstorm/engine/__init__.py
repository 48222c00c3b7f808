"""The engine: what runs a topology's declared code. A spout's message decoded and exploded
(:mod:`~hailstorm.engine.spout`), a bolt's per-tuple and batch code with the fast paths its
declaration allows (:mod:`~hailstorm.engine.bolt`) and its pre-aggregation
(:mod:`~hailstorm.engine.combining`), and the rules for calling user
functions (:mod:`~hailstorm.engine.calls`). Pure.

It stands on the declarations (:mod:`hailstorm.topology`, :mod:`hailstorm.monoids`), and
both the processors' cores and the fast reference model (:mod:`hailstorm.model`) run a bolt
through it; it imports neither, nor the independent oracle, which computes everything again.
"""

from hailstorm.engine.bolt import BoltExecution, execution_of
from hailstorm.engine.calls import as_output_list, drained, mapped
from hailstorm.engine.combining import Combined, CombinedGroups
from hailstorm.engine.spout import tuples_of, tuples_of_many

__all__ = [
    "BoltExecution",
    "Combined",
    "CombinedGroups",
    "as_output_list",
    "drained",
    "execution_of",
    "mapped",
    "tuples_of",
    "tuples_of_many",
]
