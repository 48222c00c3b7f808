"""Offset clocks and low water marks: the pure heart of exactly-once.

A *clock* maps each Kafka source partition ``(topic, partition)`` to the offset of the
**last message included**. A snapshot at clock ``C`` contains exactly the effects of
messages with ``offset <= C[p]``; rewinding to ``C`` means reading ``p`` from ``C[p] + 1``;
a partition with nothing included yet has ``C[p] == -1`` (:data:`NOTHING`).

Everything here is pure: no I/O, no threads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

Partition = tuple[str, int]
"""A source partition: ``(topic, partition number)``."""

Clock = dict[Partition, int]
"""Partition -> offset of the last message included (``-1`` when none)."""

NOTHING = -1
"""Offset recorded for a partition from which nothing has been included yet."""

UNBOUNDED = 2**63 - 1
"""Low water mark of a partition no upstream carries (``+inf``; above any Kafka offset), so
that low water marks are ordinary clocks."""


def includes(clock: Mapping[Partition, int], partition: Partition, offset: int) -> bool:
    """True when the message at ``offset`` of ``partition`` is part of ``clock``."""
    return offset <= clock.get(partition, NOTHING)


def low_water_mark(
    clocks: Iterable[Mapping[Partition, int]], partitions: Iterable[Partition]
) -> Clock:
    """Pointwise minimum of ``clocks`` over ``partitions`` (absent entries count as -1).

    With no clocks at all nothing is known to be included, so every partition is -1.
    """
    clocks = list(clocks)
    return {p: min((c.get(p, NOTHING) for c in clocks), default=NOTHING) for p in partitions}


def merge_max(*clocks: Mapping[Partition, int]) -> Clock:
    """Pointwise maximum: the clock covering every message covered by any of ``clocks``."""
    merged: Clock = {}
    for clock in clocks:
        for p, o in clock.items():
            if o > merged.get(p, NOTHING - 1):
                merged[p] = o
    return merged


def dominates(newer: Mapping[Partition, int], older: Mapping[Partition, int]) -> bool:
    """True when ``newer`` includes everything ``older`` includes (pointwise >=)."""
    partitions = set(newer) | set(older)
    return all(newer.get(p, NOTHING) >= older.get(p, NOTHING) for p in partitions)


def same_clock(a: Mapping[Partition, int], b: Mapping[Partition, int]) -> bool:
    """Equal as clocks: a missing partition and :data:`NOTHING` (-1) mean the same."""
    return all(a.get(p, NOTHING) == b.get(p, NOTHING) for p in set(a) | set(b))


def partition_key(partition: Partition) -> str:
    """Stable text form ``topic:partition`` used in JSON (ZooKeeper nodes, reports)."""
    topic, number = partition
    return f"{topic}:{number}"


@functools.lru_cache(maxsize=65536)
def parse_partition_key(text: str) -> Partition:
    """Inverse of :func:`partition_key` (memoized: the same few keys fill every clock a
    negotiator reads, thousands of times a round)."""
    topic, _, number = text.rpartition(":")
    if not topic:
        raise ValueError(f"not a partition key (expected 'topic:number'): {text!r}")
    return topic, int(number)


def clock_to_json(clock: Mapping[Partition, int]) -> dict[str, int]:
    """JSON-safe form of a clock, keys sorted for stable output."""
    return {partition_key(p): clock[p] for p in sorted(clock)}


def clock_from_json(data: Mapping[str, int]) -> Clock:
    """Inverse of :func:`clock_to_json`."""
    return {parse_partition_key(k): int(v) for k, v in data.items()}


def fresh_clock(start: str | None, committed: Mapping[Partition, int] | None,
                log_starts: Mapping[Partition, int]) -> Clock:
    """The loaded clock of a bolt instance with no committed state (new, or a raised
    ``version=``), by its ``start=`` declaration: what its empty state stands for.

    ``None``: nothing (every partition -1): the spouts replay from offset 0, and a log
    start past it is the lost-offsets halt. ``"earliest"``: everything before each
    partition's log start (``log_starts``; a partition absent there: nothing), so the
    spouts replay from the log start. ``"latest"``: the ``committed`` round's clock, so no
    spout replays anything for it (None, nothing committed yet: nothing, like every other
    bolt of a first start). Never beyond ``committed``'s offsets for ``"earliest"``: a
    bolt's loaded clock is at most the round every other bolt loaded, so the low water
    mark stays where the other bolts need it.
    """
    if start is None:
        return {}
    if start == "latest":
        return dict(committed or {})
    if start == "earliest":
        marks = {p: max(NOTHING, s - 1) for p, s in log_starts.items()}
        if committed is not None:
            marks = {p: min(m, committed.get(p, NOTHING)) for p, m in marks.items()}
        return {p: m for p, m in marks.items() if m > NOTHING}
    raise ValueError(f"start must be 'earliest', 'latest' or None, got {start!r}")
