"""The budget for bad records, and how quarantined records are logged. Pure.

A topology that quarantines (``on_error="quarantine"`` or a
:class:`~hailstorm.topology.Quarantine`) lets each spout and bolt fail on at most
``max_bad * window`` of any ``window`` consecutive records it handles; past that the
topology halts with the rate, the budget and a sample of the errors (:func:`over_budget`).

Each processor keeps one :class:`BadRecordBudget` for the nodes whose functions it runs,
one :class:`BadRecordWindow` per node, counting *positions*: a spout counts the offsets
of its partition (its decoder and explode, and the functions of the bolts it
pre-aggregates for: a message is bad for a node when one of its tuples failed there), a
bolt instance the tuples it received, numbered in arrival order. The sequential model
(:func:`~hailstorm.model.run_model`) keeps the same windows in its own order, so it
predicts the halt exactly when each window sees its records in the same order as the
runtime (a spout's partition always; a bolt instance fed from one partition).

:class:`QuarantineDigest` turns a stream of quarantined records into at most one log
line per (node, stage, error kind) and interval: the first record at once, then a count.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from hailstorm.repeats import RepeatDigest
from hailstorm.topology import Quarantine
from hailstorm.vocabulary import Origin

__all__ = [
    "ERROR_TEXT_LIMIT",
    "SAMPLED_ERRORS",
    "BadRecordBudget",
    "BadRecordWindow",
    "ErrorSample",
    "Fill",
    "QuarantineDigest",
    "error_kind",
    "over_budget",
    "positions_in_batch",
]

SAMPLED_ERRORS = 3
"""Distinct error texts a halt's reason shows per node (with their first origin)."""
ERROR_TEXT_LIMIT = 200
"""Characters of an error text kept in a halt's reason or a log line."""


def _cut(text: str) -> str:
    """``text`` on one line, cut at :data:`ERROR_TEXT_LIMIT` characters."""
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    return text if len(text) <= ERROR_TEXT_LIMIT else text[:ERROR_TEXT_LIMIT] + "..."


def _origin_text(origin: Origin) -> str:
    (topic, partition), offset = origin
    return f"{topic}:{partition}:{offset}"


@dataclass
class ErrorSample:
    """One distinct error of a node: its stage and text, where it first failed, how often."""

    stage: str
    error: str
    first: Origin
    count: int = 1

    def describe(self) -> str:
        times = "once" if self.count == 1 else f"{self.count:,} times"
        return f"{self.stage} {_cut(self.error)} ({times}, first at {_origin_text(self.first)})"


@dataclass(frozen=True)
class Fill:
    """How full one window is: ``bad`` failed among its last ``records`` (at most the
    policy's window), of which ``limit`` may fail."""

    bad: int
    records: int
    limit: int

    @property
    def rate(self) -> float:
        """The fraction of the window's records that failed."""
        return self.bad / self.records if self.records else 0.0

    @property
    def used(self) -> float:
        """The fraction of the budget used (above 1: over it; a budget of 0 bad records
        counts as one)."""
        return self.bad / max(self.limit, 1)


class BadRecordWindow:
    """The bad records among the last ``policy.window`` positions of one node.

    Positions ascend; ``first`` is the first position counted (a window holds fewer
    records until ``window`` positions were seen).
    """

    def __init__(self, policy: Quarantine, first: int) -> None:
        self.policy = policy
        self.first = first
        self.last = first - 1
        """The last position counted."""
        self._bad: deque[int] = deque()
        """Positions of the bad records within the window, ascending."""

    def _forget_before(self, position: int) -> None:
        bad, oldest = self._bad, position - self.policy.window
        while bad and bad[0] <= oldest:
            bad.popleft()

    def observe(self, through: int, bad: Iterable[int]) -> Fill | None:
        """Count positions up to ``through``, the ``bad`` ones (ascending, above those
        counted before; repeats count once) failed. Returns the window's :class:`Fill`
        at the first bad record that put it over the budget (None: within it); the rest is
        not counted then."""
        limit = self.policy.limit
        window = self._bad
        for position in bad:
            if window and position <= window[-1]:
                continue  # a record counts once, however many of its tuples failed
            self._forget_before(position)
            window.append(position)
            self.last = max(self.last, position)
            if limit is not None and len(window) > limit:
                return self.fill()
        self.last = max(self.last, through)
        self._forget_before(self.last)
        return None

    def fill(self) -> Fill:
        """How full the window is now."""
        records = min(self.policy.window, self.last - self.first + 1)
        limit = self.policy.limit
        return Fill(len(self._bad), max(records, len(self._bad)),
                    self.policy.window if limit is None else limit)


class BadRecordBudget:
    """The bad-record windows of one processor (``where``, its id), one per node whose
    functions it runs; nothing is counted without a budget (``policy`` None or without
    ``max_bad``). Start each incarnation with :meth:`restart`."""

    def __init__(self, policy: Quarantine | None, where: str) -> None:
        self.policy = policy if policy is not None and policy.max_bad is not None else None
        self.where = where
        self.first: int | None = None
        self.windows: dict[str, BadRecordWindow] = {}
        self.samples: dict[str, dict[tuple[str, str], ErrorSample]] = {}
        self.other_errors: dict[str, int] = {}
        """Per node, bad records whose error is none of the sampled ones."""

    def restart(self, first: int | None = None) -> None:
        """A new incarnation counts from scratch, from position ``first`` (None: from the
        first position :meth:`begin` or :meth:`observe` names)."""
        self.first = first
        self.windows.clear()
        self.samples.clear()
        self.other_errors.clear()

    def begin(self, position: int) -> None:
        """The processor handles records from ``position`` on (once per incarnation)."""
        if self.first is None:
            self.first = position

    def observe(self, through: int,
                failures: Iterable[tuple[str, int, str, str, Origin]] = ()) -> str | None:
        """Count every window up to position ``through``; ``failures`` are
        ``(node, position, stage, error, origin)`` of the bad records (positions ascending
        per node). Returns the reason to halt (:func:`over_budget`) for the first window
        over its budget, else None."""
        if self.policy is None:
            return None
        by_node: dict[str, list[tuple[str, int, str, str, Origin]]] = {}
        for one in failures:
            by_node.setdefault(one[0], []).append(one)
        for node, failed in by_node.items():
            window = self.windows.get(node)
            if window is None:
                self.begin(failed[0][1])
                assert self.first is not None
                window = self.windows[node] = BadRecordWindow(self.policy, self.first)
            tripped = window.observe(through, [f[1] for f in failed])
            for _node, position, stage, error, origin in failed:
                if tripped is None or position <= window.last:  # (none counted after it)
                    self._sample(node, stage, error, origin)
            if tripped is not None:
                return over_budget(node, self.where, self.policy, tripped,
                                   list(self.samples[node].values()),
                                   self.other_errors.get(node, 0))
        for node, window in self.windows.items():
            if node not in by_node:
                window.observe(through, ())
        return None

    def _sample(self, node: str, stage: str, error: str, origin: Origin) -> None:
        samples = self.samples.setdefault(node, {})
        sample = samples.get((stage, error))
        if sample is not None:
            sample.count += 1
        elif len(samples) < SAMPLED_ERRORS:
            samples[(stage, error)] = ErrorSample(stage, error, origin)
        else:
            self.other_errors[node] = self.other_errors.get(node, 0) + 1

    def fullest(self) -> Fill | None:
        """The window that used the largest part of its budget (None: no bad record in
        this incarnation)."""
        fills = [w.fill() for w in self.windows.values()]
        return max(fills, key=lambda f: (f.used, f.rate), default=None)


def over_budget(node: str, where: str, policy: Quarantine, fill: Fill,
                samples: list[ErrorSample], other_errors: int = 0) -> str:
    """Why a topology halts when ``node``'s window at processor ``where`` went over
    ``policy``'s budget: the rate, the budget and the sampled errors."""
    errors = "; ".join(s.describe() for s in samples)
    if other_errors:
        errors += f"; {other_errors:,} more with other errors"
    return (f"{node}: {fill.bad:,} of the last {fill.records:,} records at {where} failed "
            f"({fill.rate:.2%}), more than on_error={policy.describe()} allows "
            f"({fill.limit:,} of any {policy.window:,}); errors: {errors}. Fix the function "
            "or the records (see the dead-letter topic), or declare a larger budget, and "
            "start the topology again")


def positions_in_batch(failed: Sequence[tuple[Hashable, int]], partitions: Sequence[Hashable],
                       offsets: Sequence[int]) -> list[int]:
    """The index in a batch (``partitions[i], offsets[i]``) of each failed origin, in
    order: the first index with that origin not taken by an earlier one (tuples of one
    message come together, so a failed tuple is placed among its message's tuples); the
    batch's last index for an origin it does not hold."""
    wanted = set(failed)
    indices: dict[tuple[Hashable, int], list[int]] = {}
    for i, origin in enumerate(zip(partitions, offsets, strict=True)):
        if origin in wanted:
            indices.setdefault(origin, []).append(i)
    taken: dict[tuple[Hashable, int], int] = {}
    result = []
    for origin in failed:
        found, k = indices.get(origin, []), taken.get(origin, 0)
        result.append(found[k] if k < len(found) else len(offsets) - 1)
        taken[origin] = k + 1
    return result


def error_kind(error: str) -> str:
    """The exception's type in an error text ``"KeyError: 'amount'"`` (the text itself,
    cut, when it names none)."""
    head, colon, _ = error.partition(":")
    return head if colon and head.isidentifier() else _cut(error)


def _quarantine_summary(key: tuple[str, str, str], count: int, seconds: float,
                        latest: str) -> str:
    node, stage, kind = key
    records = "record" if count == 1 else "records"
    return (f"quarantined {count:,} more {records} at {node} ({stage}, {kind}) in "
            f"{seconds:.0f} s; the latest: {latest}")


class QuarantineDigest:
    """At most one log line per key (node, stage, error kind) and ``interval`` seconds:
    a key not seen in the last interval is logged at once, later records of it are
    counted and summed up in one line when the interval ends (:meth:`due`)."""

    def __init__(self, interval: float = 10.0) -> None:
        self._digest: RepeatDigest[tuple[str, str, str]] = RepeatDigest(
            interval, _quarantine_summary)

    def add(self, node: str, stage: str, error: str, origin: Origin, now: float,
            what: str = "the record") -> list[str]:
        """One quarantined record; returns the lines to log now."""
        line = f"{what} at {_origin_text(origin)} ({node} {stage}): {_cut(error)}"
        return self._digest.add((node, stage, error_kind(error)), f"quarantined {line}", now,
                                latest=line)

    def due(self, now: float) -> list[str]:
        """Summaries of the intervals ended by ``now`` (a key quiet for a whole interval
        is forgotten: its next record is logged at once)."""
        return self._digest.due(now)

    def drain(self, now: float) -> list[str]:
        """Summaries of everything counted and not logged yet (closing)."""
        return self._digest.drain(now)
