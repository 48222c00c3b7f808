"""The batches processors exchange and the actions a core asks its shell to take.

A :class:`Batch` is columnar: ``(partition, offset, tuple)`` per tuple, the origin of each
tuple being the Kafka message it came from; :class:`Contributions` are tuples combined per
key by a spout for a ``preaggregate`` bolt. A bolt core answers what arrived with
:data:`Action` s, in order: forward a clock, forward a watermark, write a snapshot, emit.
Pure: no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from hailstorm.errors import ProtocolError
from hailstorm.topology import RecordFailed

__all__ = [
    "Action",
    "Batch",
    "Contributions",
    "Destination",
    "Emit",
    "Failed",
    "ForwardClock",
    "ForwardWatermark",
    "Marks",
    "PartitionKey",
    "Preempted",
    "ProtocolViolation",
    "SnapshotContent",
    "WriteSnapshot",
]

Destination = tuple[str, int]
"""A receiving processor instance: ``(node name, instance index)``."""

PartitionKey = Any
"""How a core names a source partition: ``(topic, n)`` (:data:`hailstorm.protocol.clock.Partition`)
or, to spare per-tuple conversions, its :class:`hailstorm.protocol.wire.PartitionTable` index (batch
columns can then be passed straight from and to wire frames). Cores only use it as a
dictionary key; everything one core is given (data, watermarks, clocks, its loaded clock)
must use the same kind."""

Marks = dict[PartitionKey, int]
"""A clock or watermark keyed by :data:`PartitionKey`."""

Failed = tuple[PartitionKey, int, Any, RecordFailed]
"""A tuple a user function failed on: ``(partition, offset, tuple, failure)``; the shell
quarantines it (or halts, per the topology's ``on_error``)."""


class ProtocolViolation(ProtocolError, RuntimeError):
    """A peer broke the data-plane protocol (e.g. a tuple above a snapshot clock arrived
    before the clock itself). The processor must fail and the topology recover."""


@dataclass(slots=True)
class Batch:
    """Tuples with their origins, as three parallel lists (the shape of a DATA frame)."""

    partitions: list[PartitionKey] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    tuples: list[Any] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tuples)

    @classmethod
    def of_outputs(cls, partitions: Sequence[PartitionKey], offsets: Sequence[int],
                   produced: Sequence[list[Any]]) -> Batch:
        """The tuples ``produced[i]`` that one input ``i`` (from ``partitions[i]`` at
        ``offsets[i]``) gave, each with that input's origin, in order."""
        counts = list(map(len, produced))
        if counts.count(1) == len(counts):  # one tuple each: the columns as they are
            return cls(list(partitions), list(offsets), list(map(itemgetter(0), produced)))
        return cls(list(chain.from_iterable(map(repeat, partitions, counts))),
                   list(chain.from_iterable(map(repeat, offsets, counts))),
                   list(chain.from_iterable(produced)))


@dataclass(slots=True)
class Contributions(Batch):
    """Pre-aggregated contributions for a ``preaggregate`` bolt (the shape of a DATA frame
    with contributions): ``values[i]`` is the combined value of a group of tuples under
    state key ``keys[i]``, ``tuples[i]`` the group's last tuple (what emit receives; the
    key again for ``emit=by_key``, which reads no tuple), and the origin the highest offset
    of the tuples combined. A group never spans a snapshot clock."""

    keys: list[Any] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)


class Preempted(Exception):
    """Raised by a ``between`` hook of :meth:`Router.route` to abandon the routing."""


@dataclass(frozen=True, slots=True)
class ForwardClock:
    """Send CLOCK ``(epoch, clock)`` to every destination, before any later data
    (``partial``: CLOCK_PART, some parts of a barrier round's clock)."""

    epoch: int
    clock: Marks
    partial: bool = False


@dataclass(frozen=True, slots=True)
class ForwardWatermark:
    """Send WATERMARK ``watermark`` to every destination, after the data already returned."""

    watermark: Marks


class SnapshotContent:
    """What a snapshot holds, copied out of the bolt's state the first time it is asked
    for (:meth:`get`), by whichever thread asks first: the snapshot writer, as soon as it
    takes the round, or the bolt's core, when it needs the state it was copied from again.
    Until then that state stays as it was (the core absorbs nothing into it), so the copy
    is off the thread that absorbs tuples. Safe to share between two threads."""

    __slots__ = ("_copy", "_lock", "_value")

    def __init__(self, copy: Callable[[], Any]) -> None:
        self._copy: Callable[[], Any] | None = copy
        self._lock = threading.Lock()
        self._value: Any = None

    def get(self) -> Any:
        """The content (copied on the first call)."""
        with self._lock:
            if self._copy is not None:
                self._value, self._copy = self._copy(), None
            return self._value

    @property
    def copied(self) -> bool:
        """:meth:`get` was called: the state it was copied from may change again."""
        return self._copy is None


@dataclass(frozen=True, slots=True, eq=False)
class WriteSnapshot:
    """Persist :attr:`state` (a private copy) as the bolt's snapshot of round ``epoch``.

    ``clock`` is the clock the state is exactly at: the round's clock, raised pointwise to
    the bolt's loaded clock (and earlier rounds' clocks) where those are ahead. Report the
    round to the master only once the write is durable. ``content`` is the state itself or
    a :class:`SnapshotContent` that copies it when first read.
    """

    epoch: int
    clock: Marks
    content: Any
    delta: bool = False
    """The state holds only the keys (of a keyed state) whose values changed since this
    instance's previous snapshot (the last one handed out, or the one it loaded): write it
    as a delta on top of that one."""
    on_whole: bool = False
    """With :attr:`delta`, a differential snapshot: the keys changed since this instance's
    last whole snapshot (one this core handed out), on top of that one instead."""

    @property
    def state(self) -> Any:
        """The snapshot's state (copied out of the bolt's on first use: see
        :class:`SnapshotContent`)."""
        content = self.content
        return content.get() if isinstance(content, SnapshotContent) else content

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WriteSnapshot):
            return NotImplemented
        return (self.epoch, self.clock, self.delta, self.on_whole, self.state) == \
            (other.epoch, other.clock, other.delta, other.on_whole, other.state)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Emit:
    """Send ``batch`` downstream (routed), before any action after it: a compacting bolt's
    rows, held back since its last flush."""

    batch: Batch


Action = ForwardClock | ForwardWatermark | WriteSnapshot | Emit
"""What a bolt core asks its shell to do, in order."""
