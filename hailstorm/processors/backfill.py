"""A spout partition's second cursor, read for the nodes catching up on their own clock
(:mod:`hailstorm.protocol.catchup`, docs/upgrading.md): the pure rules the spout shell
follows.

The spout keeps its live :class:`~hailstorm.processors.SpoutCore` for every downstream
node, and, while the backfill cursor is behind it, a second core rewound to the backfill
clock whose destinations are the downstream nodes catching up. The live core's output
skips those until the cursors *join*; the backfill core reads at most
:data:`BACKFILL_BATCH` records per step, never beyond the live cursor's position, and at
most :class:`BackfillPace`'s budget per round: a round commits once every node saved it,
the nodes catching up included, so what they were sent before its pause must not take
them much longer to absorb than a round takes. Once the backfill cursor has read
everything up to the live one's position (and neither holds anything back), the live core
feeds the nodes catching up too and the second cursor closes. Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

from hailstorm.processors.spout_core import SpoutCore
from hailstorm.vocabulary import DeadLetter

__all__ = ["BACKFILL_BATCH", "BackfillPace", "joinable", "new_dead_letters", "within_live"]

BACKFILL_BATCH = 5_000
"""Records the backfill cursor reads per step of the spout, at most (a step also reads the
live cursor): bounds what a live record waits for behind the backfill."""

ROUND_TARGET_S = 1.0
"""A round while nodes catch up should commit within this many seconds of its clock."""
BUDGET_START = 2_000
BUDGET_MIN = 1_000
BUDGET_MAX = 1_000_000
"""Records the backfill cursor may read per round: at first, and the bounds."""

SPOUT_STAGES = frozenset({"decode", "explode"})
"""Dead-letter stages of the spout's own functions (not of a downstream bolt's)."""


def within_live(offsets: Sequence[int], values: Sequence[bytes | None], live_position: int
                ) -> tuple[Sequence[int], Sequence[bytes | None], bool]:
    """The fetched records at or below the live cursor's ``live_position`` (offsets
    ascending), and whether the fetch went beyond it: then the backfill cursor has read
    every record up to the live one."""
    keep = bisect_right(offsets, live_position)
    return offsets[:keep], values[:keep], keep < len(offsets)


def joinable(backfill: SpoutCore, live: SpoutCore, reached: bool) -> bool:
    """The backfill cursor may hand its nodes to the live one: it read everything up to
    the live position (``reached``: a fetch went beyond it) and emitted it, and neither
    core is paused or holds records back (both positions are then what their nodes got)."""
    if backfill.paused or live.paused:
        return False
    if backfill.staged or backfill.held or live.staged or live.held:
        return False
    return reached or backfill.position >= live.position


def new_dead_letters(dead: Iterable[DeadLetter], spout: str) -> list[DeadLetter]:
    """The backfill cursor's dead letters but those of the spout's own functions: it reads
    records the live cursor read before, and quarantined then; a bolt's (late data, a
    failed function while pre-aggregating) are the nodes catching up's own."""
    return [d for d in dead if not (d.node == spout and d.stage in SPOUT_STAGES)]


class BackfillPace:
    """How many records the backfill cursor may read per round, adapted to how long the
    rounds take to commit (additive-increase would be too slow from a small start: the
    budget grows by half while rounds commit within :data:`ROUND_TARGET_S`, and halves
    when one did not)."""

    def __init__(self, budget: int = BUDGET_START) -> None:
        self.budget = budget
        self.left = budget
        self._judged: int | None = None

    def round_committed(self, epoch: int, took: float | None) -> None:
        """Round ``epoch`` committed ``took`` seconds after its clock was set (None:
        unknown, nothing changes); each round is judged once."""
        if took is None or epoch == self._judged:
            return
        self._judged = epoch
        grown = self.budget * 3 // 2 if took <= ROUND_TARGET_S else self.budget // 2
        self.budget = max(BUDGET_MIN, min(BUDGET_MAX, grown))

    def round_started(self) -> None:
        """The spouts resumed with a round's clock: a new budget."""
        self.left = self.budget

    def allowed(self) -> int:
        """Records the next read may take (0: wait for the next round)."""
        return max(0, min(self.left, BACKFILL_BATCH))

    def read(self, records: int) -> None:
        """``records`` were read."""
        self.left -= records
