"""Why a stage attempt failed, in one line that names the processor and the cause.

Spark reports a failed barrier stage with its own line ("barrier task ResultTask(9, 2)
finished unsuccessfully") and carries the failed task's Python traceback as text after it.
A processor task ends with :class:`ProcessorFailed`, whose message is marked with
:data:`MARK` and names the processor, so :func:`root_cause` finds it again on the driver.
The task Spark names is the first that failed, which may be a consequence of another's
failure (a closed connection, a newer ``Initialize``): then the negotiator's restart reason
("<processor> failed: <error>") is the better witness. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hailstorm.errors import HailstormError

MARK = "[failed] "
_MARKED = re.compile(re.escape(MARK) + r"(\S+): (.+)")
_EXECUTOR_LOST = re.compile(r"ExecutorLostFailure \(executor (\S+)[^)]*\) Reason:\s*([^\n]+)")
_NEGOTIATOR_FAILED = re.compile(r"^(\S+:\S+:\d+) failed: (.+)$")
_PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Halt|Exhausted|"
                           r"Required|Mismatch\w*)): (.+)$")
CAUSE_CHARS = 600
"""Longest cause kept: enough for a database URL (redacted) and the driver's error."""

CONSEQUENCES = (
    "RestartRequired",
    "closed its connection",
    "sending to ",
    "Connection reset",
    "Broken pipe",
    "TaskKilled",
    "the Spark worker that started this processor is gone",
    "connected before this processor joined",
    "the main thread took no frame",
)
"""Failures that follow another processor's: they name no cause of their own."""


class ProcessorFailed(HailstormError, RuntimeError):
    """What a processor task raises when it ends with an error: ``str()`` names it."""

    def __init__(self, processor: str, error: BaseException | str) -> None:
        self.processor = processor
        self.cause = error[:CAUSE_CHARS] if isinstance(error, str) else describe(error)
        super().__init__(f"{MARK}{processor}: {self.cause}")


def describe(error: BaseException, limit: int = CAUSE_CHARS) -> str:
    """``Type: message`` on one line, at most ``limit`` characters."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:limit] if text else type(error).__name__


@dataclass(frozen=True)
class Cause:
    """A failure: which processor (None: unknown) and what it said."""

    processor: str | None
    text: str

    def __str__(self) -> str:
        return f"{self.processor}: {self.text}" if self.processor else self.text

    @property
    def consequence(self) -> bool:
        """True when this failure only follows another one."""
        return any(mark in self.text for mark in CONSEQUENCES)


def carried_cause(text: str) -> Cause | None:
    """The failure a Spark error's text carries: a :class:`ProcessorFailed` when there is
    one, else an executor Spark gave up (a host cut off: no heartbeat), else the last
    Python exception line of its traceback."""
    marked = _MARKED.search(text)
    if marked:
        return Cause(marked.group(1), marked.group(2).strip()[:CAUSE_CHARS])
    lost = _EXECUTOR_LOST.search(text)
    if lost:
        return Cause(None, f"Spark lost executor {lost.group(1)}: {lost.group(2).strip()}"
                           [:CAUSE_CHARS])
    found = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("org.apache.", "java.", "py4j.", "scala.", ":")):
            continue
        python = _PYTHON_ERROR.match(line)
        if python:
            found = Cause(None, f"{python.group(1)}: {python.group(2)}"[:CAUSE_CHARS])
    return found


def negotiator_cause(reason: str | None) -> Cause | None:
    """The processor failure a negotiator's restart reason names (None: another reason)."""
    found = _NEGOTIATOR_FAILED.match((reason or "").strip())
    return Cause(found.group(1), found.group(2)[:CAUSE_CHARS]) if found else None


def first_line(text: str) -> str:
    """The first line of an error that says something (Spark's own, at worst)."""
    text = text.strip()
    for line in text.splitlines():
        line = line.strip().lstrip(": ")
        if "Error" in line or "Exception" in line:
            return line[:300]
    return (text.splitlines() or ["unknown error"])[0][:300]


def root_cause(spark_text: str, negotiator_reason: str | None = None) -> str:
    """The one line that says why a stage attempt failed: a processor's own failure before
    one that follows another's, the carried one before the negotiator's, and Spark's line
    only when neither names anything."""
    carried = carried_cause(spark_text)
    restarted = negotiator_cause(negotiator_reason)
    candidates = [c for c in (carried, restarted) if c is not None]
    for cause in candidates:
        if not cause.consequence:
            return str(cause)
    if candidates:
        return str(candidates[0])
    return first_line(spark_text)
