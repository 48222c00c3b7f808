"""Repeated log lines summed up: the first line of a kind is logged, the rest of its
interval counted and told in one line.

Pure (the caller passes the time). :class:`~hailstorm.bad_records.QuarantineDigest` sums up
quarantined records this way, :mod:`hailstorm.kafka` the lines librdkafka repeats while a
broker is out (a reconnect a few times a second for every client).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["RepeatDigest"]

K = TypeVar("K", bound=Hashable)


@dataclass
class _Tally:
    started: float
    count: int = 0
    latest: str = ""


def _more_like_it(_key: object, count: int, seconds: float, latest: str) -> str:
    lines = "line" if count == 1 else "lines"
    return f"{count:,} more {lines} like this in {seconds:.0f} s; the latest: {latest}"


@dataclass
class RepeatDigest(Generic[K]):
    """At most one log line per key and ``interval`` seconds: a key not seen in the last
    interval is logged at once, later lines of it are counted and summed up in one line
    (``summary(key, count, seconds, latest)``) when the interval ends (:meth:`due`, which
    every :meth:`add` runs) or at the end (:meth:`drain`)."""

    interval: float = 10.0
    summary: Callable[[K, int, float, str], str] = _more_like_it
    _tallies: dict[K, _Tally] = field(default_factory=dict)

    def add(self, key: K, line: str, now: float, latest: str | None = None) -> list[str]:
        """A line of kind ``key`` at ``now``; returns the lines to log now: summaries of
        intervals that ended, and ``line`` itself when its key was quiet. A summary quotes
        the latest counted line as ``latest`` (``line`` by default)."""
        lines = self.due(now)
        tally = self._tallies.get(key)
        if tally is None:
            self._tallies[key] = _Tally(now)
            lines.append(line)
        else:
            tally.count += 1
            tally.latest = line if latest is None else latest
        return lines

    def due(self, now: float) -> list[str]:
        """Summaries of the intervals ended by ``now`` (a key quiet for a whole interval
        is forgotten: its next line is logged at once)."""
        lines = []
        for key, tally in list(self._tallies.items()):
            if now - tally.started < self.interval:
                continue
            if tally.count:
                lines.append(self._summary(key, tally, now))
                self._tallies[key] = _Tally(now)
            else:
                del self._tallies[key]
        return lines

    def drain(self, now: float) -> list[str]:
        """Summaries of everything counted and not logged yet (closing)."""
        lines = [self._summary(key, tally, now) for key, tally in self._tallies.items()
                 if tally.count]
        self._tallies.clear()
        return lines

    def _summary(self, key: K, tally: _Tally, now: float) -> str:
        return self.summary(key, tally.count, max(0.0, now - tally.started), tally.latest)
