"""Sinks never go backwards: is a sink's stored progress below what it already wrote? Pure.

Bolts reload the committed round at clock ``C`` and never emit again what it holds, so a
sink that saved that round (its table, or topic, covered ``C``) gets no row at or below
``C[p]`` again. If its stored progress is now below ``C[p]`` (a re-created or restored
database, a truncated ``hailstorm_progress``, a progress topic that lost its records),
the rows in between would never be delivered: the sink stops the topology instead
(:class:`~hailstorm.halt.TopologyHalt`, with :func:`behind_reason`).

What is legitimate, and passes:

* nothing committed yet, or a committed clock at ``-1`` for this sink's partitions;
* a sink instance that did not save the committed round into this target (a sink added
  to the topology, an instance added by more parallelism, a new table or topic name): it
  starts at the committed clock, with what its table holds;
* progress at or **above** the committed clock (it wrote past the last round; merge and
  append rows it already holds are dropped by origin);
* partitions no upstream of the sink carries (it never writes progress for them);
* a gap the operator accepted for this committed clock (``hailstorm sink accept``): an
  accepted clock that covers the committed one.

While the sink runs, a re-read progress (after a fenced commit) must not be below what
the writer itself last committed: :func:`progress_shortfall` against its own view.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from hailstorm.protocol.clock import NOTHING, Clock, Partition, partition_key

__all__ = [
    "SHOWN_PARTITIONS",
    "CommittedRound",
    "Shortfall",
    "behind_reason",
    "opening_shortfall",
    "progress_shortfall",
]

SHOWN_PARTITIONS = 4
"""Partitions a halt line names before it says how many more are behind."""

Shortfall = dict[Partition, tuple[int, int]]
"""Partition -> (stored progress, the offset it must cover), for partitions behind."""


@dataclass(frozen=True)
class CommittedRound:
    """The committed round as one sink instance sees it."""

    epoch: int
    clock: Clock
    saved: bool
    """This instance saved the round into the same target (the committed record lists it
    with the target's ref)."""


def progress_shortfall(stored: Mapping[Partition, int], floor: Mapping[Partition, int],
                       carried: Collection[Partition]) -> Shortfall:
    """The partitions of ``carried`` whose ``stored`` progress is below ``floor`` (absent
    means ``-1`` on both sides), with both offsets."""
    return {p: (stored.get(p, NOTHING), needed) for p, needed in sorted(floor.items())
            if p in carried and stored.get(p, NOTHING) < needed}


def opening_shortfall(stored: Mapping[Partition, int], committed: CommittedRound | None,
                      carried: Collection[Partition],
                      accepted: Mapping[Partition, int] | None = None) -> Shortfall:
    """What a sink opening on ``stored`` progress lacks of the committed round it saved
    (empty: it may go on). ``accepted``: the clock an operator accepted a gap at."""
    if committed is None or not committed.saved:
        return {}
    shortfall = progress_shortfall(stored, committed.clock, carried)
    if accepted is not None and all(accepted.get(p, NOTHING) >= needed
                                    for p, (_, needed) in shortfall.items()):
        return {}
    return shortfall


def _offsets(shortfall: Shortfall, which: int) -> str:
    shown = list(shortfall.items())[:SHOWN_PARTITIONS]
    text = ", ".join(f'"{partition_key(p)}": {pair[which]}' for p, pair in shown)
    more = len(shortfall) - len(shown)
    return "{" + text + (f", ... {more} more" if more > 0 else "") + "}"


def behind_reason(sink: str, where: str, shortfall: Shortfall, *, against: str,
                  arguments: str, rebuild: bool) -> str:
    """One line: the sink, its table or topic (``where``), its stored progress, the clock
    it must cover (``against``: e.g. ``"the committed clock of round 12"``), and the ways
    forward, commands with ``arguments`` (``TOPOLOGY SINK [--name NAME]``); ``rebuild``:
    ``hailstorm sink rebuild`` can rebuild this sink's table."""
    rebuild_it = (f"Rebuild it from the committed round with 'hailstorm sink rebuild "
                  f"{arguments}', or accept" if rebuild else "Accept")
    return (
        f"sink {sink} ({where}) is behind: its stored progress {_offsets(shortfall, 0)} is "
        f"below {against} {_offsets(shortfall, 1)}, which it had already written (a "
        "re-created or restored database, a truncated progress table, or a lost progress "
        f"topic); the rows in between would never be delivered again. {rebuild_it} "
        f"the gap with 'hailstorm sink accept {arguments}' (docs/sinks.md, \"A "
        "sink behind the committed clock\")"
    )
