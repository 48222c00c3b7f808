"""Bolt cost: what one bolt instance spends per contribution, by phase, in one process.

    .venv/bin/python bench/bolt_cost.py [--workload user-totals] [--messages 400000]
                                        [--round-every 2] [--lag 4] [--warm 0]
                                        [--flush-every 4] [--runs 5]

Needs no services. The spouts of a workload's topology (one :class:`SpoutCore` per
partition, as ``bench/spout_cost.py`` runs one) turn the workload's realistic messages into
the DATA frames they would send, fetched ``--batch`` at a time; the frames for instance 0
of the first bolt then go, taking turns between the partitions, through that instance's
:class:`BoltCore` as the runtime drives it: each frame decoded, absorbed, followed by its
spout's watermark; a compacting bolt flushed every ``--flush-every`` frames (its rows built
for the wire);
a round's clock due every ``--round-every`` frames of each partition, given once the last
round was written (the negotiator starts one only after the last committed), at the
spouts' positions ``--lag`` frames ahead of the bolt (behind a backlog its inbound queue
holds many frames), so that the round stays pending while the bolt catches up, and its
snapshot handed out and written (to a temporary directory) once the watermarks cover it.
Per phase, the CPU time per contribution received (``time.process_time``):

* **decode**: the DATA frames' bytes to columns (:func:`decode_frame`);
* **absorb**: :meth:`BoltCore.on_contributions` (or ``on_data``);
* **flush**: a compacting bolt's rows and watermark (:meth:`BoltCore.flush`), and the
  frames they make (:func:`encode_frames`);
* **round**: learning clocks and watermarks, handing out snapshots
  (:meth:`BoltCore.on_clock`, :meth:`BoltCore.on_watermark`: a snapshot's copy of the
  changed keys);
* **write**: the snapshot writer's thread, writing them (:meth:`SnapshotStore.put`), each
  on the snapshot the runtime's writer builds it on (a delta on the last written, a
  differential one on the last whole one).

With ``--warm N`` the instance first takes the frames of ``N`` messages more, untimed: the
state and the snapshot chain of a bolt that ran a while. The snapshots written while timed
are counted by kind (whole, differential) with the keys they held per contribution.

The run with the least CPU in all is reported (``--runs``). The garbage collector is set
as the runtime sets it. In a topology run the bolt shares the cores with a dozen busy
processes and pays for TLS, its queues and its metrics besides: this measures its own
code with less noise. It times a part of hailstorm alone: no peer or baseline loop runs
beside it (the throughput benches do).

Workloads (``hailstorm.dev.workloads``, seeded), as in ``bench/spout_cost.py``:
``user-totals``, ``two-stage``, ``pageviews``, ``wordcount``. Prints one JSON line of
figures and a human summary.
"""

from __future__ import annotations

import argparse
import gc
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import machine, phase_figures, report  # noqa: E402
from spout_cost import WORKLOADS, frame_of  # noqa: E402

from hailstorm.processors import WriteSnapshot  # noqa: E402
from hailstorm.processors.bolt_core import BoltCore  # noqa: E402
from hailstorm.processors.spout_core import SpoutCore  # noqa: E402
from hailstorm.protocol.wire import (  # noqa: E402
    HEADER_SIZE,
    DataBatch,
    decode_frame,
    encode_frames,
)
from hailstorm.runtime.task import GC_THRESHOLDS  # noqa: E402
from hailstorm.snapshots import DirectorySnapshotStore  # noqa: E402
from hailstorm.topology.loading import load_topology  # noqa: E402

PHASES = ("decode", "absorb", "flush", "round", "write")
PARTITIONS = 4
FLUSH_EVERY = 4
"""Frames between a compacting bolt's flushes by default (the runtime flushes on a timer:
every 3 s behind a backlog, tens of frames)."""


def frames_for(topology: Any, messages: list[bytes], batch: int
               ) -> tuple[Any, list[tuple[int, int, bytes]]]:
    """The first bolt and ``(partition, last offset, encoded DATA frame)`` of what the
    spouts of ``PARTITIONS`` partitions send its instance 0, taking turns between the
    partitions (message ``i`` is in partition ``i % PARTITIONS``)."""
    spout = topology.spouts[0]
    bolt = topology.downstream_of(spout)[0]
    per_partition = [messages[p::PARTITIONS] for p in range(PARTITIONS)]
    cores = []
    for p in range(PARTITIONS):
        core = SpoutCore(spout, p, topology.downstream_of(spout))
        core.start({})
        core.resume()
        cores.append(core)
    frames: list[tuple[int, int, bytes]] = []
    longest = max(map(len, per_partition))
    for start in range(0, longest, batch):
        for p, core in enumerate(cores):
            values = per_partition[p][start:start + batch]
            if not values:
                continue
            core.stage(list(range(start, start + len(values))), values)
            part = core.flush().batches.get((bolt.name, 0))
            if part is not None and len(part):
                frames.append((p, start + len(values) - 1, encode_frames([frame_of(part, p)])))
    return bolt, frames


def _payloads(frames: list[tuple[int, int, bytes]]
              ) -> Iterator[tuple[int, int, int, memoryview]]:
    """``(partition, last offset, kind, payload)`` of the one frame in each."""
    for p, last, data in frames:
        _length, kind = struct.unpack_from(">IB", data)
        yield p, last, kind, memoryview(data)[HEADER_SIZE:]


def one_run(bolt: Any, frames: list[tuple[int, int, bytes]], round_every: int, lag: int,
            store_root: Path, warm: int = 0, flush_every: int = FLUSH_EVERY
            ) -> tuple[dict[str, float], int, dict[str, int]]:
    """CPU seconds per phase of one bolt instance taking ``frames`` after the first
    ``warm`` of them (untimed: the state of a bolt that ran a while), a compacting one
    flushed every ``flush_every`` frames; the contributions
    received and the snapshots written meanwhile (``rounds``; ``whole``,
    ``differential``, ``keys``: those of each kind, the keys in all)."""
    upstreams = [f"spout:{p}" for p in range(PARTITIONS)]
    core = BoltCore(bolt, upstreams, loaded_clock={}, loaded_state=bolt.state.empty(),
                    loaded_whole=True)
    store = DirectorySnapshotStore(tempfile.mkdtemp(dir=store_root))
    spent = dict.fromkeys(PHASES, 0.0)
    clock = time.process_time
    base = whole = None
    received = written = 0
    kinds = dict.fromkeys(("rounds", "whole", "differential", "keys"), 0)
    epoch = 0
    due = False
    seen = [0] * PARTITIONS
    lasts = [[last for q, last, _data in frames if q == p] for p in range(PARTITIONS)]

    def handle(actions: list[Any]) -> None:
        nonlocal base, whole, written
        for action in actions:
            if isinstance(action, WriteSnapshot):
                began = clock()
                on = whole if action.on_whole else base  # as the bolt's writer thread
                base = store.put(topology="bench", bolt=bolt.name, instance=0,
                                 parallelism=bolt.parallelism, epoch=action.epoch,
                                 clock={("bench", p): o for p, o in action.clock.items()},
                                 monoid=bolt.state,
                                 state=action.state, base=on if action.delta else None)
                spent["write"] += clock() - began
                written += 1
                whole = whole if action.delta else base
                kinds["rounds"] += 1
                kinds["keys"] += base.records
                if not action.delta:
                    kinds["whole"] += 1
                elif action.on_whole:
                    kinds["differential"] += 1

    for index, (p, last, kind, payload) in enumerate(_payloads(frames)):
        if index == warm and warm:  # the state of a bolt that ran a while: timed from here
            spent = dict.fromkeys(PHASES, 0.0)
            received = 0
            kinds = dict.fromkeys(kinds, 0)
        began = clock()
        frame = decode_frame(kind, payload)
        decoded = clock()
        assert isinstance(frame, DataBatch)
        if frame.keys is not None and frame.values is not None:
            core.on_contributions(upstreams[p], frame.partitions, frame.offsets, frame.tuples,
                                  frame.keys, frame.values)
        else:
            core.on_data(upstreams[p], frame.partitions, frame.offsets, frame.tuples)
        absorbed = clock()
        received += len(frame)
        seen[p] += 1
        actions = core.on_watermark(upstreams[p], {p: last})
        due = due or (p == 0 and seen[0] % round_every == 0)
        # A round due starts once the last one was written (the negotiator starts the next
        # only after the last committed), the spouts paused ``lag`` frames ahead.
        if due and written == epoch:
            due = False
            epoch += 1
            actions += core.on_clock(epoch, {q: lasts[q][min(seen[q] + lag, len(lasts[q])) - 1]
                                             for q in range(PARTITIONS) if lasts[q]})
        rounds = clock()
        spent["decode"] += decoded - began
        spent["absorb"] += absorbed - decoded
        spent["round"] += rounds - absorbed
        handle(actions)
        if core.compacting and index % flush_every == flush_every - 1:
            began = clock()
            flushed = core.flush()
            for action in flushed:
                rows = getattr(action, "batch", None)
                if rows is not None and len(rows):
                    encode_frames([DataBatch.of([0] * len(rows), rows.offsets, rows.tuples)])
            spent["flush"] += clock() - began
            handle(flushed)
    return spent, received, kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="user-totals")
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--batch", type=int, default=10_000,
                        help="Messages a spout's consume returns (the runtime's most: 10,000).")
    parser.add_argument("--round-every", type=int, default=2,
                        help="Frames of each partition between two rounds' clocks.")
    parser.add_argument("--lag", type=int, default=4,
                        help="Frames of each partition the bolt is behind its spouts when a "
                             "round's clock arrives (behind a backlog its inbound queue holds "
                             "up to 64 frames); the round stays pending until it catches up.")
    parser.add_argument("--warm", type=int, default=0,
                        help="Messages taken first, untimed, before the measured ones: the "
                             "state (and the snapshot chain) of a bolt that ran a while.")
    parser.add_argument("--flush-every", type=int, default=FLUSH_EVERY,
                        help="Frames between a compacting bolt's flushes (default 4). Behind "
                             "a backlog the runtime flushes every 3 s, tens of frames, into a "
                             "large state: with --warm 2600000 --flush-every 30 --round-every "
                             "1000 (no round) per-user totals' bolt cost 4.3-4.6 us a "
                             "contribution, nearer a run's, against 2.7-2.8 with the defaults "
                             "(2026-12-05, two runs each).")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if min(args.messages, args.batch, args.runs, args.round_every, args.flush_every) < 1 \
            or args.lag < 0 or args.warm < 0:
        parser.error("--messages, --batch, --round-every, --flush-every and --runs must be "
                     "positive, --lag and --warm at least 0")

    file, generate = WORKLOADS[args.workload]
    topology = load_topology(str(REPO / "topologies" / file))
    print(f"generating {args.warm + args.messages:,} messages ({args.workload})", flush=True)
    bolt, frames = frames_for(topology, generate(args.warm + args.messages), args.batch)
    warm = sum(1 for _p, last, _data in frames if last < args.warm // PARTITIONS)
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="hailstorm-bolt-cost-") as root:
            for run in range(args.runs):
                runs.append(one_run(bolt, frames, args.round_every, args.lag, Path(root),
                                    warm, args.flush_every))
                print(f"run {run + 1}/{args.runs}: {sum(runs[-1][0].values()):.2f} s of CPU",
                      flush=True)
    finally:
        gc.set_threshold(*thresholds)
    _best, received, written = min(runs, key=lambda r: sum(r[0].values()))
    snapshot_keys = written["keys"] / received if received else 0.0
    measured, summary = phase_figures([spent for spent, _r, _w in runs], received,
                                      "contribution")
    figures = {
        **machine(), "workload": args.workload, "topology": f"topologies/{file}",
        "bolt": bolt.name, "messages": args.messages, "warm_messages": args.warm,
        "frames": len(frames) - warm, "contributions": received,
        "rounds_written": written["rounds"], "whole_snapshots": written["whole"],
        "differential_snapshots": written["differential"],
        "snapshot_keys_per_contribution": round(snapshot_keys, 3),
        "round_every": args.round_every, "lag": args.lag, "flush_every": args.flush_every,
        "runs": args.runs, **measured,
    }
    report("bolt_cost", figures,
           f"{args.workload}: instance 0 of bolt {bolt.name!r} of topologies/{file}, "
           f"{received:,} contributions in {len(frames) - warm:,} frames from {PARTITIONS} "
           f"spouts{f' after {args.warm:,} messages untimed' if args.warm else ''}, "
           f"{written['rounds']} rounds written ({written['whole']} whole, "
           f"{written['differential']} differential; {snapshot_keys:.2f} keys a "
           f"contribution): {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
