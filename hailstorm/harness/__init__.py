"""The kill-test harness behind ``hailstorm chaos`` and the runtime tests (being split into
modules by concern; for now all of it is in :mod:`hailstorm.harness.run`)."""

from hailstorm.harness.run import *  # noqa: F403
from hailstorm.harness.run import (
    BY_HAND,
    ZOMBIE_ENDED,
    ZOMBIE_FENCED,
    Explanation,
    compare_tables,
    keyed_append_rows,
    topic_records,
    unexplained,
    zombie_outcome,
)
from hailstorm.harness.run import __all__ as _run_all

__all__ = [
    *_run_all,
    "BY_HAND",
    "ZOMBIE_ENDED",
    "ZOMBIE_FENCED",
    "Explanation",
    "compare_tables",
    "keyed_append_rows",
    "topic_records",
    "unexplained",
    "zombie_outcome",
]
