"""Numbers added per key, then emitted, a batch at a time (pure).

A bolt whose state is keyed ``Count`` or ``Sum`` and whose ``emit`` sees a key's value
(:attr:`~hailstorm.engine.BoltExecution.adds_keys`) emits every tuple with its key's
running total. When a batch comes from one partition and goes to one segment, and at most
one other segment exists (a round pending), :func:`add_and_emit` adds the whole batch
first, noting each running total, then calls ``emit`` over the batch: the same outputs,
in the same order, as a step per tuple (each tuple sees its key's total just after its own
contribution, merged with the other segment as
:meth:`~hailstorm.engine.BoltExecution.value_for_emit` merges it), without that step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from hailstorm.processors.actions import Batch, Failed, PartitionKey
from hailstorm.topology import RecordFailed

if TYPE_CHECKING:
    from hailstorm.engine import BoltExecution

__all__ = ["AddedBatch", "add_and_emit"]

_ABSENT: Any = object()


@dataclass(frozen=True, slots=True)
class AddedBatch:
    """What :func:`add_and_emit` did: the tuples emitted, and the keys added to, one per
    tuple."""

    out: Batch
    keys: list[Any]


def add_and_emit(run: BoltExecution, segments: Sequence[dict[Any, Any]], into: int,
                 partitions: Sequence[PartitionKey], offsets: Sequence[int],
                 tuples: Sequence[Any], contributions: Iterable[tuple[Any, Any]],
                 failed: list[Failed]) -> AddedBatch:
    """Add every ``(key, value)`` of ``contributions`` (one per tuple) into
    ``segments[into]`` in order, then emit each tuple with its key's total merged across
    the (one or two) ``segments``. A tuple ``emit`` fails on goes to ``failed`` (its
    contribution stays); a value that does not add raises, naming its tuple (the processor
    then fails, as when a step per tuple raises)."""
    if len(segments) > 2:
        raise ValueError(f"add_and_emit merges at most two segments, not {len(segments)}")
    pairs = contributions if isinstance(contributions, list) else list(contributions)
    keys = list(map(itemgetter(0), pairs))
    totals = segments[into]
    get = totals.get
    running: list[Any] = []
    note = running.append
    try:
        for key, value in pairs:
            total = totals[key] = get(key, 0) + value
            note(total)
    except Exception as exc:  # broad: a value that does not add, noted, re-raised
        at = len(running)
        exc.add_note(f"in bolt {run.name!r}, processing tuple {tuples[at]!r} from "
                     f"{(partitions[at], offsets[at])}")
        raise
    values = running if len(segments) == 1 else _merged(segments, into, keys, running)
    produced = run.outputs_many(tuples, keys, values)
    if produced is None:  # emit failed on some tuple: one by one, naming it
        emitted = _Emitted(run, failed)
        produced = list(map(emitted, partitions, offsets, tuples, keys, values))
    return AddedBatch(Batch.of_outputs(partitions, offsets, produced), keys)


def _merged(segments: Sequence[dict[Any, Any]], into: int, keys: Sequence[Any],
            running: Sequence[Any]) -> list[Any]:
    """Each running total merged with the other segment's value of its key, as
    ``Sum.combine_all`` merges two values: added (numbers add alike in either order, -0.0
    and big ints included); a key only ``into`` holds keeps its total as it is."""
    other_get = segments[1 - into].get
    return [total if (other := other_get(key, _ABSENT)) is _ABSENT else other + total
            for key, total in zip(keys, running, strict=True)]


@dataclass(frozen=True, slots=True)
class _Emitted:
    """``emit``'s output for one tuple, none when it fails on the tuple (which goes to
    ``failed``)."""

    run: BoltExecution
    failed: list[Failed]

    def __call__(self, p: PartitionKey, o: int, t: Any, key: Any, value: Any) -> list[Any]:
        try:
            return self.run.outputs(t, key, value)
        except RecordFailed as failure:
            self.failed.append((p, o, t, failure))
            return []
        except Exception as exc:  # broad: any user failure, noted, re-raised
            exc.add_note(f"in bolt {self.run.name!r}, processing tuple {t!r} from {(p, o)}")
            raise
