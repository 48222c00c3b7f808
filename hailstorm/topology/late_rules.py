"""What a bolt must say about late data (pure): window and ttl state drop what arrives
after its window closed or its key expired, so such a bolt declares where late tuples go
(``late="<topic>"``, ``late=Table(...)``) or that they are dropped (``late="drop"``). A
bolt that says nothing is refused with :func:`late_problem`'s explanation."""

from __future__ import annotations

from typing import Any

from hailstorm.monoids import KeyedMap, Monoid, Ttl, Window
from hailstorm.topology.tables import LATE_COLUMNS, Table

__all__ = ["DROP", "late_problem"]

DROP = "drop"
"""``late="drop"``: late tuples are dropped, knowingly (no topic may be called that)."""

CHOICES = ('late="<topology>.late" (a Kafka topic), late=late_table("<bolt>_late") (a table, '
           'from hailstorm.lateness), or late="drop" to drop them knowingly')
"""The three decisions, as the fix of every problem below says them."""


def late_problem(late: Any, state: Monoid[Any]) -> tuple[str, str] | None:
    """``(problem, fix)`` when ``late`` is no valid decision for a bolt keeping ``state``
    (None when it is one). Topic names are checked by the builder."""
    inner = state.inner if isinstance(state, KeyedMap) else state
    timed = isinstance(inner, Window | Ttl)
    if late is None:
        if not timed:
            return None
        what = ("keeps windows: a tuple that arrives after its window closed (retention "
                "past the window's end) would be dropped without a trace, and which tuples "
                "those are depends on how partitions interleave"
                if isinstance(inner, Window) else
                "expires idle keys: a tuple behind its partition by the retention or more "
                "might belong to a key already dropped")
        return (f"state {state.describe()} {what}; it needs late= to say what happens to "
                "late tuples",
                f"pass {CHOICES}")
    if isinstance(late, Table):
        missing = [c for c in LATE_COLUMNS if c not in late.columns] if late.row is None else []
        if missing:
            return (f"late table {late.name!r} lacks the column(s) {', '.join(missing)} of a "
                    "late row", "use hailstorm.lateness.late_table(name), or pass row= to "
                    "the Table")
    elif not isinstance(late, str):
        return f"late must be a topic name, a Table or \"drop\", got {late!r}", f"pass {CHOICES}"
    if not timed:
        return (f"late= is for window or ttl state, and {state.describe()} has none, so no "
                "tuple is ever late", "remove late=, or use TumblingWindow(...) or "
                "SlidingWindow(...) (or per_key(...) of one), or per_key(..., ttl=...)")
    if late == DROP and isinstance(inner, Ttl):
        return (f"{state.describe()} cannot drop late tuples: its sessions are dropped at a "
                "bound that only routing late tuples makes safe",
                'pass late="<topology>.late" or late=late_table("<bolt>_late")')
    return None
