"""Pure cores of the data plane: spouts, bolts and their in-band markers.

Nothing here does I/O: no sockets, threads, ZooKeeper or Kafka. Each core is a small state
machine whose methods take what arrived (records, frames, master-state changes) and return
what to send or do. Thin shells wire them to TCP, Kafka and ZooKeeper. One object is meant
to cross to a shell's thread: a snapshot's :class:`SnapshotContent`, which a lock guards.

Every tuple travels with its *origin* ``(partition, offset)``: the Kafka message it came
from. Tuples a bolt emits inherit the origin of the input that caused them. Three kinds of
frames flow on each connection, in order:

* data: a :class:`Batch` of ``(partition, offset, tuple)``, or from a spout to a
  ``preaggregate`` bolt :class:`Contributions` (tuples combined per key; the origin is the
  highest offset combined);
* CLOCK ``(epoch, clock)``: the snapshot clock of a round, sent before any tuple whose
  offset is above it (:class:`ForwardClock`);
* WATERMARK ``{partition: offset}``: "every tuple with offset <= W[p] that I will ever send
  has been sent"; partitions absent are ones the sender never carries
  (:class:`ForwardWatermark`).

Modules: :mod:`~hailstorm.processors.actions` (batches and the actions a core returns),
:mod:`~hailstorm.processors.router` (where output goes),
:mod:`~hailstorm.processors.watermarks` (low water mark over upstream instances),
:mod:`~hailstorm.processors.bolt_core` (a bolt instance; its A/B state split at the snapshot
clock is :mod:`~hailstorm.processors.segments`, its delta snapshots
:mod:`~hailstorm.processors.deltas`, its held-back rows
:mod:`~hailstorm.processors.compaction`, its closed windows
:mod:`~hailstorm.processors.expiry`),
:mod:`~hailstorm.processors.held_output` (a bolt's output held while it drains its queue),
:mod:`~hailstorm.processors.spout_core` (one Kafka partition: rewind, pause, resume, route),
:mod:`~hailstorm.processors.sink_core` (a sink's commit cadence and when a round is covered).
The shells around them are :mod:`hailstorm.runtime`.
"""
from __future__ import annotations

from hailstorm.processors import actions
from hailstorm.processors.actions import *  # noqa: F403  (its __all__, re-exported below)
from hailstorm.processors.bolt_core import BoltCore
from hailstorm.processors.router import Router, latest_per_key
from hailstorm.processors.sink_core import SinkCore
from hailstorm.processors.spout_core import SpoutCore, SpoutOutput
from hailstorm.processors.watermarks import UpstreamWatermarks

__all__ = [  # the face: the actions module's names, the cores and the router
    *actions.__all__,
    "BoltCore",
    "Router",
    "SinkCore",
    "SpoutCore",
    "SpoutOutput",
    "UpstreamWatermarks",
    "latest_per_key",
]
