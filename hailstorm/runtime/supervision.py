"""What a processor's Spark task does when the process running its instance ends. Pure.

A Spark task does not run its processor instance itself: it forks a process per incarnation
of it and supervises them (:mod:`hailstorm.runtime.supervisor`). When an incarnation ends
because the topology restarted (a newer ``Initialize``), because it failed (its own error, or
a peer's broken connection), or because it was killed (SIGKILL, the kernel's out-of-memory
killer), the task starts the next incarnation at once: no Spark task or stage fails, so
Spark resubmits nothing and every other instance's task keeps its process and its slot. The
negotiator recovers the topology as before; only Spark's part of the recovery is gone.

What still ends the task:

* the topology stopped, or the driver started another stage attempt: it ends cleanly;
* the topology halted (:mod:`hailstorm.halt`): it fails with the halt, so the driver stops;
* incarnations keep ending without a round committed in between (:data:`LOCAL_RESTARTS`
  in a row: a processor failing on every replay fails right after the topology recovered,
  so flowing again is no progress): it fails with the last cause, and Spark's stage
  resubmission (with the driver's backoff and its give-up) takes over, as for a hung
  process that only a new stage replaces.

An incarnation stopped (SIGSTOP: the task sees it stopped; a frozen cgroup freezes the task
too) for longer than
:data:`STOPPED_FACTOR` times its ZooKeeper session timeout lost its session: the topology
recovers without it, so the task starts its replacement and leaves the stopped process
alone; if it resumes, it finds its session lost and ends (a zombie, fenced like one whose
task Spark could not kill).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

__all__ = [
    "LOCAL_RESTARTS",
    "RESTART_DELAYS",
    "STOPPED_FACTOR",
    "Ended",
    "Escalate",
    "Finish",
    "Outcome",
    "Restart",
    "Supervision",
    "replace_stopped",
]

LOCAL_RESTARTS = 3
"""Incarnations in a row that may end without a round committed in between before the
task fails and leaves the restart to Spark's stage resubmission."""

RESTART_DELAYS = (0.0, 0.2, 1.0)
"""Pause before the 1st, 2nd, 3rd restart in a row: the first is immediate (a crash is
recovery time), later ones give a failing dependency a moment."""

STOPPED_FACTOR = 1.5
"""An incarnation stopped for this many session timeouts lost its session (ZooKeeper
expired it after one): it is replaced."""


class Ended(enum.Enum):
    """How an incarnation ended."""

    STOPPED = "stopped"
    """The topology stopped: the task ends cleanly."""
    SUPERSEDED = "superseded"
    """The driver started another stage attempt: the task's attempt is over."""
    HALTED = "halted"
    """The topology halted: restarting cannot help."""
    RESTARTED = "restarted"
    """The topology restarted (a newer ``Initialize``): a new incarnation joins."""
    FAILED = "failed"
    """It raised an error (its own, or a consequence of a peer's failure)."""
    KILLED = "killed"
    """It died without saying why (a signal, a crashed interpreter)."""
    LOST = "lost"
    """It stayed stopped past its session: replaced, left to end when it resumes."""


@dataclass(frozen=True)
class Outcome:
    """How one incarnation ended, what it said, and whether its run committed a round."""

    ended: Ended
    cause: str = ""
    """``Type: message`` of its error (or what killed it); empty for a clean end."""
    progressed: bool = False
    """It saw a round of its run commit before it ended."""

    def to_json(self) -> str:
        return json.dumps({"ended": self.ended.value, "cause": self.cause})

    @classmethod
    def from_json(cls, text: str, progressed: bool) -> Outcome:
        """The outcome an incarnation wrote (one JSON object), or :attr:`Ended.KILLED` when
        it wrote none or garbage (it died mid-write)."""
        try:
            raw = json.loads(text)
            return cls(Ended(raw["ended"]), str(raw.get("cause", "")), progressed)
        except (ValueError, KeyError, TypeError):
            return cls(Ended.KILLED, "it ended without saying why", progressed)


@dataclass(frozen=True)
class Restart:
    """Start the next incarnation after ``delay`` seconds."""

    delay: float
    reason: str


@dataclass(frozen=True)
class Finish:
    """End the task cleanly."""


@dataclass(frozen=True)
class Escalate:
    """Fail the task with ``cause`` (``Type: message``): Spark resubmits the stage, or the
    driver stops (a halt)."""

    cause: str


Action = Restart | Finish | Escalate


class Supervision:
    """The task's decisions over its incarnations' outcomes (one per task)."""

    def __init__(self, limit: int = LOCAL_RESTARTS) -> None:
        self.limit = limit
        self.in_a_row = 0
        """Restarts since an incarnation last saw a round commit."""
        self.restarts = 0
        """Restarts in this task, in all."""

    def after(self, outcome: Outcome) -> Action:
        """What to do now that an incarnation ended with ``outcome``."""
        if outcome.ended in (Ended.STOPPED, Ended.SUPERSEDED):
            return Finish()
        if outcome.ended is Ended.HALTED:
            return Escalate(outcome.cause)
        if outcome.progressed:
            self.in_a_row = 0
        if self.in_a_row >= self.limit:
            return Escalate(
                f"{outcome.cause or outcome.ended.value} ({self.in_a_row + 1} incarnations in "
                f"a row ended without a round committed in between; leaving the restart "
                f"to Spark)")
        delay = RESTART_DELAYS[min(self.in_a_row, len(RESTART_DELAYS) - 1)]
        self.in_a_row += 1
        self.restarts += 1
        reason = outcome.ended.value + (f" ({outcome.cause})" if outcome.cause else "")
        return Restart(delay, reason)


def replace_stopped(stopped_for: float, session_timeout: float) -> bool:
    """Has an incarnation stopped for ``stopped_for`` seconds lost its session, so that the
    task replaces it?"""
    return stopped_for > STOPPED_FACTOR * session_timeout
