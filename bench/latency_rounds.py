"""Where in a snapshot round ``bench/latency.py``'s tail comes from.

A round loads every stage at once for a moment (the spouts mark their clock parts and
report to ZooKeeper, the negotiator fixes the clock, each bolt copies and writes the keys
changed since the last round, the sink commits the round), so the messages sent just
before and after a round begins tend to wait longest. :class:`RoundStarts` records when
each round began, as a watch on the master node sees it; :func:`by_round_phase` folds the
latencies by the time between a message's sending and the start of the round it was sent
in, in fifths of the snapshot interval.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from common import percentile

PHASES = 5
"""Into how many equal parts :func:`by_round_phase` cuts the snapshot interval (the last
part also takes what is sent later than one interval after a round began: a late round)."""


class RoundStarts:
    """The wall time (``time.time_ns()``) each snapshot round of ``run`` (a
    :class:`~hailstorm.dev.harness.TopologyRun`) began: when a kazoo ``DataWatch`` on its
    master node first read a ``SpoutsPaused`` of a new epoch. The processors follow the
    master with the same kind of watch, so this is when they learn of the round too, give
    or take a read."""

    def __init__(self, run: Any) -> None:
        from kazoo.recipe.watchers import DataWatch

        self.times: list[int] = []
        self._epochs: set[int] = set()
        self._lock = threading.Lock()
        self._stopped = False
        DataWatch(run.zk, run.paths.master, self._changed)

    def _changed(self, data: bytes | None, _stat: Any) -> bool | None:
        from hailstorm.protocol.layout import MasterRecord
        from hailstorm.protocol.states import SpoutsPaused

        if self._stopped:
            return False  # the watch ends
        if data is None:
            return None
        seen = time.time_ns()
        state = MasterRecord.from_json(data).state
        if isinstance(state, SpoutsPaused):
            with self._lock:
                if state.epoch not in self._epochs:
                    self._epochs.add(state.epoch)
                    self.times.append(seen)
        return None

    def stop(self) -> list[int]:
        """End the watch (at its next event); the start times seen, in order."""
        self._stopped = True
        with self._lock:
            return sorted(self.times)


def by_round_phase(arrived: Sequence[tuple[int, int]], starts: Sequence[int],
                   interval_s: float) -> list[dict[str, Any]]:
    """The latency (ms) of the messages ``arrived`` (``(sent_ns, seen_ns)`` each) by the
    time from the start of the round they were sent in (the last of ``starts`` at or before
    their sending) to their sending, in :data:`PHASES` parts of ``interval_s``: each part's
    bounds in seconds, its messages, p50 and p99. Messages sent before the first start are
    left out; a part without messages is left out."""
    width_ns = interval_s * 1e9 / PHASES
    phases: list[list[float]] = [[] for _ in range(PHASES)]
    for sent, seen in arrived:
        at = bisect_right(starts, sent) - 1
        if at < 0:
            continue
        phase = min(int((sent - starts[at]) // width_ns), PHASES - 1)
        phases[phase].append((seen - sent) / 1e6)
    step = interval_s / PHASES
    return [{"from_s": round(i * step, 3), "to_s": None if i == PHASES - 1 else
             round((i + 1) * step, 3), "messages": len(values),
             "p50": round(percentile(values, 0.5), 1), "p99": round(percentile(values, 0.99), 1)}
            for i, values in enumerate(phases) if values]


def describe_phases(phases: Sequence[dict[str, Any]]) -> str:
    """One line of :func:`by_round_phase`'s parts: ``from-to s p50/p99``."""
    parts = [(f"{p['from_s']:g} s on" if p["to_s"] is None else f"{p['from_s']:g}-{p['to_s']:g} s")
             + f" {p['p50']:.0f}/{p['p99']:.0f}" for p in phases]
    return "; ".join(parts) if parts else "no round began while the load ran"
