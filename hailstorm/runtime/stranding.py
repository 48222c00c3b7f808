"""Processors stranded on a lost host, seen from ZooKeeper by the driver. Pure.

A processor's Spark task restarts its instance in place when the process ends (a crash, a
kill, a stopped process that lost its session: :mod:`hailstorm.runtime.supervision`), and
the next incarnation registers in ZooKeeper within a second or so. A processor whose whole
host is cut off cannot do that, and Spark learns of the loss only when its own timeouts
expire (a standalone master's 60 s, an executor's 120 s): until then the barrier stage
holds the cut-off tasks, the negotiator's ``Initialize`` waits for processors that cannot
come, and nothing recovers.

:class:`StrandingWatch` follows the living processors of one stage attempt: a processor
that registered in the attempt, then left, and has had no successor for
:func:`stranding_grace` is *stranded*; the driver then fails the stage attempt, and Spark
submits the next on the slots that are left (see ``docs/deployment.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["STRANDED_SESSIONS", "StrandingWatch", "stranding_grace"]

STRANDED_SESSIONS = 3.0
"""Session timeouts a processor of the attempt may be missing before it counts as stranded.
A killed incarnation's successor registers at once; a stopped one's node goes when its
session expires and its successor comes half a session timeout later
(:data:`~hailstorm.runtime.supervision.STOPPED_FACTOR`), restart pauses of a second at most
(:data:`~hailstorm.runtime.supervision.RESTART_DELAYS`) aside."""

MIN_GRACE = 10.0
"""Seconds a processor may be missing before it counts as stranded, whatever the session
timeout."""


def stranding_grace(session_timeout: float) -> float:
    """How long (seconds) a processor of the attempt may be missing before it is
    stranded, for processors with ZooKeeper sessions of ``session_timeout`` seconds."""
    return max(MIN_GRACE, STRANDED_SESSIONS * session_timeout)


@dataclass
class StrandingWatch:
    """The processors of one stage attempt that left ZooKeeper without a successor.

    Feed it every reading of the living processors (:meth:`observe`), and
    :meth:`unknown` when ZooKeeper could not be read: an absence counts only while
    readings see it, never across a gap in them."""

    grace: float
    attempt: str | None = None
    seen: set[str] = field(default_factory=set)
    """Processors that registered in :attr:`attempt`."""
    missing_since: dict[str, float] = field(default_factory=dict)
    """Processors of :attr:`seen` that are not living, since when (the readings' clock)."""

    def observe(self, now: float, attempt: str | None,
                living: Iterable[str]) -> list[tuple[str, float]]:
        """Take a reading at ``now``: ``living``, the processors registered in stage attempt
        ``attempt``. Returns the stranded ones with how long each has been missing
        (sorted by id); a new attempt starts over."""
        if attempt != self.attempt:
            self.attempt = attempt
            self.seen.clear()
            self.missing_since.clear()
        alive = set(living)
        self.seen |= alive
        for processor in alive:
            self.missing_since.pop(processor, None)
        for processor in self.seen - alive:
            self.missing_since.setdefault(processor, now)
        return sorted((processor, now - since) for processor, since in self.missing_since.items()
                      if now - since >= self.grace)

    def unknown(self) -> None:
        """ZooKeeper could not be read: absences are timed again from the next reading."""
        self.missing_since.clear()
