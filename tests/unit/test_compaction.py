"""Compaction: a ``preaggregate`` bolt emits once per group and flush, and holds its
watermark back until then. Against the per-tuple path and the reference model, through an
upsert sink buffer, with clocks, watermarks and flushes in any order."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Count, Sum, Table, Topology, TumblingWindow, per_key
from hailstorm.engine import execution_of
from hailstorm.model import Message, run_model
from hailstorm.processors import (
    Batch,
    BoltCore,
    Emit,
    ForwardWatermark,
    WriteSnapshot,
    compaction,
)
from hailstorm.protocol.clock import Partition
from hailstorm.sinks.buffer import RowBuffer
from hailstorm.topology import BoltSpec

P: Partition = ("lines", 0)
COUNTS = Table("counts", columns={"word": "text", "count": "bigint"}, key=["word"])
WINDOWS = Table("windows", columns={"word": "text", "start": "bigint", "total": "bigint"},
                key=["word", "start"])


def topology(shape: str) -> Topology:
    top = Topology("compact")
    src = top.spout("src", topic="lines", decoder="json")
    if shape == "count":
        bolt = top.bolt("b", inputs=[src], key=lambda t: t[0], state=per_key(Count()),
                        lift=Count.lift, emit=lambda t, n: [(t[0], n)], preaggregate=True)
        top.sink("out", inputs=[bolt], target=COUNTS)
    else:
        # Nothing expires: rows of data later than the retention depend on arrival order
        # (a documented condition of window state), which pre-aggregation changes.
        window = TumblingWindow(10, Sum(), retention=1000)
        bolt = top.bolt(
            "b", inputs=[src], key=lambda t: t[0], state=per_key(window),
            lift=lambda t: t[1], event_time=lambda t: t[1], preaggregate=True, late="drop",
            emit=lambda t, w: [(t[0], s, v) for s, v in sorted(w[1].items())
                               if s == t[1] // 10 * 10])
        top.sink("out", inputs=[bolt], target=WINDOWS)
    top.validate()
    return top


def spec_of(top: Topology) -> BoltSpec:
    node = top.node("b")
    assert isinstance(node, BoltSpec)
    return node


Step = tuple[str, int, list[tuple[str, int]]]
PARTITIONS = [("lines", 0), ("lines", 1)]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(0, 1),
                  st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 39)),
                           min_size=1, max_size=8)),
        st.tuples(st.just("watermark"), st.integers(0, 1), st.just([])),
        st.tuples(st.just("clock"), st.just(0), st.just([])),
        st.tuples(st.just("flush"), st.just(0), st.just([])),
    ),
    max_size=40,
)


class Sink:
    """An upsert table fed by one bolt instance: rows buffered, committed through each
    watermark (as the runtime's sink does)."""

    def __init__(self, table: Table) -> None:
        self.buffer = RowBuffer(table)
        self.table: dict[Any, tuple[Any, ...]] = {}
        self.applied: list[tuple[Any, ...]] = []

    def rows(self, batch: Batch) -> None:
        for p, o, t in zip(batch.partitions, batch.offsets, batch.tuples, strict=True):
            self.buffer.add(p, o, t)

    def watermark(self, marks: dict[Partition, int]) -> None:
        selection = self.buffer.select(marks)
        names = self.buffer.table.column_names
        for values in selection.rows:
            self.table[tuple(values[names.index(c)] for c in self.buffer.table.key)] = values
            self.applied.append(values)
        self.buffer.confirm(selection)


def drive(spec: BoltSpec, table: Table, steps: list[Step], compacting: bool,
          ) -> tuple[Sink, list[tuple[int, Any]], list[Batch]]:
    """Run ``steps`` through one bolt instance and a sink; end with a flush and a last
    watermark. Returns the sink, the snapshots written and the batches emitted."""
    core = BoltCore(spec, ["s0", "s1"])
    assert core.compacting == (spec.window is None)  # windows expire: never compacted
    core.compacting = core.compacting and compacting
    sink = Sink(table)
    offsets = [-1, -1]
    sent = [-1, -1]
    epoch = 0
    snapshots: list[tuple[int, Any]] = []
    emitted: list[Batch] = []

    def act(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Emit):
                emitted.append(action.batch)
                sink.rows(action.batch)
            elif isinstance(action, ForwardWatermark):
                # No row the watermark covers is still held back: after a crash the replay
                # starts above it and would never emit that row again.
                held = [(p, o) for p, o, _t in core._held.rows.values()
                        if o <= action.watermark.get(p, -1)]
                assert not held, f"watermark {action.watermark} passed held rows {held}"
                sink.watermark(action.watermark)
            elif isinstance(action, WriteSnapshot):
                snapshots.append((action.epoch, action.state))

    for kind, n, tuples in steps:
        if kind == "data":
            p = PARTITIONS[n]
            combined = execution_of(spec).combine_contributions(tuples)
            offsets[n] += len(tuples)
            out = core.on_contributions(f"s{n}", [p] * len(combined), [offsets[n]] * len(combined),
                                        combined.tuples, combined.keys, combined.values)
            emitted.append(out)
            sink.rows(out)
        elif kind == "watermark":
            sent[n] = offsets[n]
            act(core.on_watermark(f"s{n}", {PARTITIONS[n]: sent[n]}))
        elif kind == "clock":
            epoch += 1
            act(core.on_clock(epoch, dict(zip(PARTITIONS, offsets, strict=True))))
        else:
            act(core.flush())
    for n in (0, 1):
        act(core.on_watermark(f"s{n}", {PARTITIONS[n]: offsets[n] + 1}))
    act(core.flush())
    return sink, snapshots, emitted


def model_table(top: Topology, table: Table, steps: list[Step]) -> dict[Any, Any]:
    """The reference model's table for the same tuples, as ``key -> values``."""
    messages = []
    offsets = [-1, -1]
    for kind, n, tuples in steps:
        for t in tuples if kind == "data" else []:
            offsets[n] += 1
            messages.append(Message("lines", n, offsets[n], json.dumps(list(t)).encode()))
    rows = run_model(top, messages).table("out")
    return {key: tuple(row[c] for c in table.column_names) for key, row in rows.items()}


@settings(max_examples=150, deadline=None)
@given(steps=STEPS, shape=st.sampled_from(["count", "window"]))
def test_compaction_ends_in_the_per_tuple_table_and_the_models(
    steps: list[Step], shape: str
) -> None:
    top = topology(shape)
    spec = spec_of(top)
    table = COUNTS if shape == "count" else WINDOWS
    steps = [(k, n, [tuple(t) for t in ts]) for k, n, ts in steps]  # type: ignore[misc]
    per_tuple, per_tuple_snapshots, per_tuple_batches = drive(spec, table, steps, compacting=False)
    compacted, snapshots, batches = drive(spec, table, steps, compacting=True)
    assert compacted.table == per_tuple.table == model_table(top, table, steps)
    assert snapshots == per_tuple_snapshots  # the state is untouched by compaction
    # Every row it applied is one the per-tuple path emitted: a total the group really had.
    emitted_per_tuple = {t for batch in per_tuple_batches for t in batch.tuples}
    assert {t for batch in batches for t in batch.tuples} <= emitted_per_tuple
    assert len(compacted.applied) <= len(per_tuple.applied)
    for batch in batches:  # at most one row per group and flush
        assert len(batch.tuples) == len(set(batch.tuples))


def emit_some(t: tuple[str, int], n: int) -> list[tuple[str, int]]:
    """Rows by the tuple: none, one or two; a failure for offset-like value 13."""
    if t[1] == 13:
        raise ValueError("unlucky")
    return [(t[0], n)] * (t[1] % 3)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 15)),
                                 min_size=1, max_size=8), min_size=1, max_size=4))
def test_a_flush_emits_a_batch_at_a_time_as_it_would_row_by_row(
        batches: list[list[tuple[str, int]]]) -> None:
    top = Topology("compact")
    src = top.spout("src", topic="lines", decoder="json")
    spec = top.bolt("b", inputs=[src], key=lambda t: t[0], state=per_key(Count()),
                    lift=Count.lift, emit=emit_some, preaggregate=True)
    cores = [BoltCore(spec, ["s0"]), BoltCore(spec, ["s0"])]
    offset = -1
    for tuples in batches:
        combined = execution_of(spec).combine_contributions(tuples)
        offset += len(tuples)
        for core in cores:
            core.on_contributions("s0", [P] * len(combined), [offset] * len(combined),
                                  combined.tuples, combined.keys, combined.values)
    fast_core, slow_core = cores
    rows = fast_core._held.take_rows()
    assert rows == slow_core._held.take_rows()
    fast = compaction._emitted_at_once(execution_of(spec), fast_core._segments.states,
                                       dict(rows))
    slow = compaction._emitted_each(execution_of(spec), slow_core._segments.states,
                                    rows.items(), slow_core.failed)
    failing = any(t[1] == 13 for _p, _o, t in rows.values())
    assert (fast is None) == failing
    if fast is not None:
        assert (fast.partitions, fast.offsets, fast.tuples) == \
            (slow.partitions, slow.offsets, slow.tuples)
    assert len(slow_core.failed) == sum(t[1] == 13 for _p, _o, t in rows.values())
