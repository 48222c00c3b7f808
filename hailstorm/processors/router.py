"""Where a processor's output goes: :class:`Router` splits a batch among the instances of
the downstream nodes (by the bolts' stable key routing, pre-aggregating for ``preaggregate``
bolts), and :func:`latest_per_key` keeps an upsert sink's newest row per key. Pure.
"""

from __future__ import annotations

import itertools
import operator
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hailstorm.engine import Combined, CombinedGroups, execution_of, mapped
from hailstorm.lateness import Late, StreamTime
from hailstorm.processors.actions import (
    Batch,
    Contributions,
    Destination,
    Failed,
    PartitionKey,
    Preempted,
)
from hailstorm.topology import BoltSpec, RecordFailed, SinkSpec, Table
from hailstorm.vocabulary import late_row

__all__ = ["Router", "StagedCombination", "latest_per_key"]


class Router:
    """Splits a batch among the instances of the downstream nodes of one processor.

    A keyed bolt with ``parallelism > 1`` gets each tuple at the instance
    :meth:`~hailstorm.engine.BoltExecution.instance_for` names (the routing the reference
    model uses); other bolts and sinks get everything at instance 0.

    An upsert table sink gets only the **last** row of each table key in a batch
    (:func:`latest_per_key`): its table keeps one row per key and replaces it with the newest
    one, so the rows a batch supersedes would be overwritten before the next commit anyway.
    This is what keeps a bolt that emits a running total for every input tuple from sending
    its whole input on to the sink.

    With ``preaggregate`` (spouts only) a bolt declared ``preaggregate`` gets
    :class:`Contributions` instead: the batch combined per key
    (:meth:`~hailstorm.engine.BoltExecution.combine_contributions`), split at ``boundaries``.

    ``compacted`` (a compacting bolt's flushes) says the batch already holds one row set
    per group: the upsert sinks get it as it is (their buffer keeps the latest row per key
    anyway).

    ``lateness`` (spouts only): per bolt declaring ``late=``, the partition's
    :class:`~hailstorm.lateness.StreamTime`; that bolt gets only the tuples on time, and the
    late ones are listed in :attr:`late`.
    """

    def __init__(
        self, downstream: Sequence[BoltSpec | SinkSpec], *, preaggregate: bool = False,
        compacted: bool = False, lateness: Mapping[str, StreamTime] | None = None,
    ) -> None:
        self.downstream = list(downstream)
        self.preaggregate = preaggregate
        self.compacted = compacted
        self.lateness = dict(lateness or {})
        self.late: list[tuple[BoltSpec, PartitionKey, int, Any, Late]] = []
        """``(bolt, partition, offset, tuple, why)`` of the tuples late for a bolt: the
        caller sends them to the bolt's late topic and clears this."""
        self.destinations: list[Destination] = [
            (node.name, i)
            for node in self.downstream
            for i in range(node.parallelism if isinstance(node, BoltSpec) else 1)
        ]
        """Every instance that receives frames (CLOCK and WATERMARK go to all of them)."""
        self.failed: list[Failed] = []
        """``(partition, offset, tuple, failure)`` of the tuples pre-aggregation left out
        (a user function failed on them): the caller quarantines them and clears this."""

    def route(
        self, batch: Batch, boundaries: Sequence[int] = (),
        between: Callable[[], None] | None = None,
    ) -> dict[Destination, Batch]:
        """The non-empty per-destination parts of ``batch``, order kept within each.
        ``between`` is called between slices of the keys routed by hash (it may raise
        :class:`Preempted` to abandon the call).

        When pre-aggregating, ``batch`` must come from one partition with ascending
        offsets, and tuples at or below any of ``boundaries`` (offsets where a bolt splits
        or drops tuples: snapshot clocks, loaded clocks) are never combined with tuples
        above it. Unsplit parts share ``batch``'s lists: treat the result as read-only.
        """
        routed: dict[Destination, Batch] = {}
        if not batch.tuples:
            return routed
        whole = batch
        on_time, late_rows = self._judge(whole) if self.lateness else ({}, {})
        for node in self.downstream:
            if isinstance(node, SinkSpec) and node.late_of is not None:
                if node.name in late_rows:
                    routed[(node.name, 0)] = late_rows[node.name]
                continue
            batch = on_time.get(node.name, whole)
            if not batch.tuples:
                continue
            if self.preaggregate and isinstance(node, BoltSpec) and node.preaggregate:
                routed.update(_preaggregated(node, batch, boundaries, self.failed, between))
                continue
            if isinstance(node, SinkSpec):
                target = node.target
                if isinstance(target, Table) and target.mode == "upsert" and not self.compacted:
                    routed[(node.name, 0)] = latest_per_key(batch, target)
                else:
                    routed[(node.name, 0)] = batch
                continue
            if node.parallelism == 1 or node.key is None:
                routed[(node.name, 0)] = batch
                continue
            instances = _instances_for(node, batch.tuples, between)
            for i, columns in _by_instance(instances, node.parallelism,
                                           batch.partitions, batch.offsets, batch.tuples):
                routed[(node.name, i)] = Batch(*columns)
        return routed

    def _judge(self, batch: Batch) -> tuple[dict[str, Batch], dict[str, Batch]]:
        """Per bolt routing late data, the tuples of ``batch`` on time for it; per late
        sink, the late rows it receives. Late tuples for a late topic go to :attr:`late`."""
        on_time: dict[str, Batch] = {}
        late_rows: dict[str, Batch] = {}
        p, o, t = batch.partitions, batch.offsets, batch.tuples
        for name, judge in self.lateness.items():
            kept, late = judge.split(t)
            if not late:
                continue
            on_time[name] = Batch([p[i] for i in kept], [o[i] for i in kept],
                                  [t[i] for i in kept])
            bolt = judge.bolt
            if bolt.late_sink is None:
                self.late.extend((bolt, p[i], o[i], t[i], why) for i, why in late)
            else:
                late_rows[bolt.late_sink] = Batch(
                    [p[i] for i, _ in late], [o[i] for i, _ in late],
                    [late_row((p[i], o[i]), t[i], why) for i, why in late])
        return on_time, late_rows


def _preaggregated(
    bolt: BoltSpec, batch: Batch, boundaries: Sequence[int],
    failed: list[Failed], between: Callable[[], None] | None,
) -> dict[Destination, Contributions]:
    """``batch`` (one partition, ascending offsets) combined per group for ``bolt``'s
    instances, one run between consecutive ``boundaries`` at a time; each contribution's
    origin is the last offset of its run, and its tuple the last of its group (its key
    for ``emit=by_key``). Tuples left out go to ``failed``."""
    run = execution_of(bolt)
    parts = [Contributions() for _ in range(bolt.parallelism)]
    for start, stop in _runs(batch.offsets, boundaries):
        combined = run.combine_contributions(batch.tuples[start:stop])
        _note_failures(batch, start, combined.failures, failed)
        _route_combined(bolt, combined, batch.partitions[stop - 1], batch.offsets[stop - 1],
                        parts, between)
    return _nonempty(bolt, parts)


class StagedCombination:
    """One ``preaggregate`` bolt's share of what a spout stages, combined as it is staged
    (a chunk of a fetch at a time, while the chunk's objects are still in the CPU's
    caches) instead of when it is sent: for a bolt whose groups are its state keys
    (:attr:`~hailstorm.topology.BoltSpec.groups_by_key`), whose combined groups merge
    (:meth:`~hailstorm.engine.combining.Combining.combine_into`). :meth:`routed` then gives
    what :class:`Router` gives for all those tuples at once, runs between boundaries
    apart."""

    def __init__(self, bolt: BoltSpec) -> None:
        self.bolt = bolt
        self._run = execution_of(bolt)
        self._runs: list[_CombinedRun] = []

    def add(self, batch: Batch, boundaries: Sequence[int], failed: list[Failed]) -> None:
        """Combine ``batch`` (one partition, ascending offsets, after everything added
        before) into the runs; tuples left out go to ``failed``."""
        runs, offsets = self._runs, batch.offsets
        for start, stop in _runs(offsets, boundaries):
            first = offsets[start]
            if not runs or any(runs[-1].through <= b < first for b in boundaries):
                runs.append(_CombinedRun(batch.partitions[start], first, CombinedGroups()))
            last = runs[-1]
            last.through = offsets[stop - 1]
            tuples = batch.tuples if stop - start == len(offsets) else batch.tuples[start:stop]
            _note_failures(batch, start, self._run.combine_into(last.groups, tuples), failed)

    @property
    def groups(self) -> int:
        """How many groups everything added was combined into (one contribution each)."""
        return sum(len(run.groups.values) for run in self._runs)

    def routed(self, between: Callable[[], None] | None = None
               ) -> dict[Destination, Contributions]:
        """The contributions for the bolt's instances of everything added (each run's
        origin its last offset); ``between`` as for :meth:`Router.route`."""
        parts = [Contributions() for _ in range(self.bolt.parallelism)]
        for run in self._runs:
            _route_combined(self.bolt, run.groups.combined(), run.partition, run.through,
                            parts, between)
        return _nonempty(self.bolt, parts)


@dataclass(slots=True)
class _CombinedRun:
    """The groups combined from tuples between two boundaries, the last at ``through``."""

    partition: PartitionKey
    through: int
    groups: CombinedGroups


def _runs(offsets: Sequence[int], boundaries: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, stop)`` of the runs of ``offsets`` (ascending) that no boundary splits."""
    cuts = sorted({0, len(offsets), *(bisect_right(offsets, b) for b in boundaries)})
    return list(itertools.pairwise(cuts))


def _note_failures(batch: Batch, start: int, failures: list[tuple[int, RecordFailed]],
                   failed: list[Failed]) -> None:
    """List the tuples a combination left out (``failures``' indices from ``start`` of
    ``batch``)."""
    for index, failure in failures:
        i = start + index
        failed.append((batch.partitions[i], batch.offsets[i], batch.tuples[i], failure))


def _route_combined(bolt: BoltSpec, combined: Combined, partition: PartitionKey, origin: int,
                    parts: list[Contributions], between: Callable[[], None] | None) -> None:
    """Append ``combined`` (of a run ending at ``origin``) to the ``parts`` of ``bolt``'s
    instances: each group to the instance of its key."""
    run = execution_of(bolt)
    # emit=by_key reads no tuple: the key goes in its place (pickled once for both)
    subjects = combined.keys if bolt.emits_by_key else combined.tuples
    if bolt.parallelism == 1:
        split = [(0, [subjects, combined.keys, combined.values])]
    else:
        if bolt.keyed:  # the state key is the routing key
            instances = run.instance_of_key.many(combined.keys, between)
        else:
            instances = _instances_for(bolt, combined.tuples, between)
        split = _by_instance(instances, bolt.parallelism, subjects, combined.keys,
                             combined.values)
    for i, (tuples, keys, values) in split:
        part = parts[i]
        part.partitions.extend(itertools.repeat(partition, len(tuples)))
        part.offsets.extend(itertools.repeat(origin, len(tuples)))
        part.tuples.extend(tuples)
        part.keys.extend(keys)
        part.values.extend(values)


def _nonempty(bolt: BoltSpec, parts: list[Contributions]) -> dict[Destination, Contributions]:
    return {(bolt.name, i): part for i, part in enumerate(parts) if part.tuples}


def _instances_for(bolt: BoltSpec, tuples: Sequence[Any],
                   between: Callable[[], None] | None) -> list[int]:
    """:meth:`~hailstorm.engine.BoltExecution.instance_for` of every tuple, a batch at a time
    (keys mapped, then routed by the bolt's memo); tuple by tuple when a key fails, so
    those go where ``instance_for`` sends them."""
    key, run = bolt.key, execution_of(bolt)
    if key is not None:
        try:
            return run.instance_of_key.many(mapped(key, tuples), between)
        except Preempted:
            raise
        except Exception:  # the user's key failed on some tuple (any error): one by one,
            pass           # a failing tuple goes to instance 0, which names the failure
    return list(map(run.instance_for, tuples))


def _by_instance(instances: Sequence[int], parallelism: int, *columns: Sequence[Any]
                 ) -> list[tuple[int, list[list[Any]]]]:
    """``(instance, its items of each column)`` for every instance ``instances`` names,
    order kept within each (``instances[j]`` is the instance of item ``j``)."""
    split = []
    if any(len(column) != len(instances) for column in columns):
        raise ValueError("an instance for every item, and only those")
    for i in range(parallelism):
        mine = list(map(operator.eq, instances, itertools.repeat(i)))
        if True in mine:
            split.append((i, [list(itertools.compress(column, mine)) for column in columns]))
    return split


def latest_per_key(batch: Batch, table: Table) -> Batch:
    """The last tuple of each of ``table``'s keys in ``batch``, in their original order."""
    last = _last_of_keys(batch.tuples, table)
    if len(last) == len(batch.tuples):
        return batch
    keep = sorted(last.values())
    return Batch(
        [batch.partitions[i] for i in keep],
        [batch.offsets[i] for i in keep],
        [batch.tuples[i] for i in keep],
    )


def _last_of_keys(tuples: Sequence[Any], table: Table) -> dict[Any, int]:
    """Each table key of ``tuples`` -> the index of its last tuple; a tuple that does not
    become a row is a key of its own (:class:`_Unrowable`)."""
    keys = table.keys_of_many(tuples)
    if keys is not None:
        try:
            return dict(zip(keys, range(len(keys)), strict=True))
        except TypeError:  # an unhashable key: tuple by tuple, which keeps that one apart
            pass
    last: dict[Any, int] = {}
    to_row, key_of = table.to_row, table.key_of
    for index, t in enumerate(tuples):
        try:
            last[key_of(to_row(t, check=False))] = index
        except Exception:  # kept: the sink quarantines what does not become a row
            last[_Unrowable(index)] = index
    return last


@dataclass(frozen=True, slots=True)
class _Unrowable:
    """The key of a tuple with no row in :func:`latest_per_key` (never equal to a key)."""

    index: int
