"""Late data through the real runtime (topologies/pageviews.py, PostgreSQL): views arrive out
of order on three partitions; a spout is killed right after a round committed views that
decide the lateness of the next ones, and a bolt is killed while views are produced. The
late topic (or table) holds exactly the model's late views, each once, and they equal a
computation by hand from each partition's content; the table equals the model's, and so do
the bolt states but for the closed windows the bolts dropped (some must have been)."""

from __future__ import annotations

import io
import random
import runpy
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deployments import run_killing_a_spout_then_a_bolt
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, compare_with_model
from hailstorm.model import run_model

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "topologies" / "pageviews.py"
_example = runpy.run_path(str(EXAMPLE))
WINDOW_MS: int = _example["WINDOW_MS"]
SCHEMA = parse_schema(_example["PAGE_VIEW_SCHEMA"])
PARTITIONS = 3


def _module(tmp_path: Path, suffix: str, late_to: str) -> tuple[Path, str, str]:
    """The example with a source topic, late topic (or late table) and table of this test's
    own."""
    topic, late = f"page-views-{suffix}", f"pageviews-{suffix}.late"
    text = EXAMPLE.read_text()
    text = text.replace('topic="page-views"', f'topic="{topic}"')
    if late_to == "topic":
        text = text.replace('late="pageviews.late"', f'late="{late}"')
    else:
        late = f"page_views_late_{suffix}"
        text = text.replace('late="pageviews.late"', f'late=late_table("{late}")')
        text = "from hailstorm.lateness import late_table\n" + text.replace(
            '"""Page views:', '"""Page views:', 1)
    text = text.replace('Table(\n        "page_stats",', f'Table(\n        "page_stats_{suffix}",')
    text = text.replace('Topology("pageviews")', f'Topology("pageviews_{suffix}")')
    module = tmp_path / f"pageviews_{suffix}.py"
    module.write_text(text)
    return module, topic, late


def _views(n: int, seed: int, start: int, ahead: int = 0) -> list[bytes]:
    """Views a second apart from ``start`` (ms); one in eight is delayed by up to 25 min,
    which makes many of those late (a window closes 10 min after it starts). The last
    ``ahead`` views are 30 min ahead (a clock running fast), which makes the next 20 min of
    views late too."""
    rng = random.Random(seed)
    values = []
    for i in range(n):
        ts = start + i * 1000
        if i >= n - ahead:
            ts += 30 * 60 * 1000
        elif rng.random() < 0.125:
            ts -= rng.randrange(25 * 60 * 1000)
        view = {"page": f"/p{rng.randrange(20)}", "user": f"u{rng.randrange(50)}",
                "ts": max(ts, 0), "latency_ms": rng.randrange(1, 500)}
        buffer = io.BytesIO()
        schemaless_writer(buffer, SCHEMA, view)
        values.append(buffer.getvalue())
    return values


def _late_by_hand(messages: list[Any]) -> Counter[tuple[int, int]]:
    """``(partition, offset)`` of the views whose window had closed (end + 5 min retention)
    at the newest event time earlier in their partition."""
    late: Counter[tuple[int, int]] = Counter()
    newest: dict[int, int] = {}
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        ts = schemaless_reader(io.BytesIO(m.value), SCHEMA, SCHEMA)["ts"]  # type: ignore[index]
        start = ts - ts % WINDOW_MS
        before = newest.get(m.partition)
        if before is not None and start + 2 * WINDOW_MS <= before:
            late[(m.partition, m.offset)] += 1
        newest[m.partition] = max(ts, before if before is not None else ts)
    return late


def _late_topic(bootstrap: str, topic: str) -> Counter[tuple[str, int, int, int]]:
    """What a read_committed consumer sees: (bolt, partition, offset, window start)."""
    end = kafka.log_ends(bootstrap, [(topic, 0)])[(topic, 0)]
    seen: Counter[tuple[str, int, int, int]] = Counter()
    for record in kafka.read_range(bootstrap, topic, 0, 0, end - 1):
        h = record.headers or {}
        assert h["hailstorm.stage"] == b"late"
        seen[(h["hailstorm.node"].decode(), int(h["hailstorm.partition"]),
              int(h["hailstorm.offset"]), int(h["hailstorm.window_start"]))] += 1
    return seen


@pytest.mark.parametrize("late_to", ["topic", "table"])
def test_late_views_are_routed_exactly_once_across_kills(
    stack_env: dict[str, str], tmp_path: Path, late_to: str
) -> None:
    stack = StackAddresses.from_env(stack_env)
    suffix = uuid.uuid4().hex[:8]
    module, topic, late_target = _module(tmp_path, suffix, late_to)
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    if late_to == "topic":
        kafka.create_topic(stack.kafka, late_target, 1)

    def stream_times_kept(run: TopologyRun, clock: dict[Any, int], _: Produced) -> None:
        for p in range(PARTITIONS):  # the spouts kept their stream times for a later rewind
            spout = f"spout:views:{topic}:{p}"
            assert run.records.stream_times_at_or_below(spout, clock[(topic, p)]) is not None

    # Every partition ends the first part with a view 30 min ahead; once a round committed
    # it, a spout is killed: every spout rewinds past those views, and only the stream times
    # they kept make the next 20 min of views late.
    ran = run_killing_a_spout_then_a_bolt(
        stack, module, topic, _views(3_000, 1, 0, ahead=PARTITIONS),
        _views(4_000, 2, 3_000_000), tmp_path / "logs", stream_times_kept,
        settle=True)  # a bolt sweeps closed windows in slices after the last tuple
    states, tables = ran.states, ran.tables

    messages = ran.produced.model_messages()
    model = run_model(ran.run.topology, messages)
    assert not model.dead_letters
    if late_to == "topic":
        predicted = Counter((d.node, d.message.partition, d.message.offset,
                             int(dict(d.details)["window_start"])) for d in model.late)
        assert _late_topic(stack.kafka, late_target) == predicted
    else:
        assert not model.late
        predicted = Counter(("page_windows", r["partition"], r["offset"], r["window_start"])
                            for r in model.table("page_windows_late").values())
        written = tables["page_windows_late"]
        assert Counter(("page_windows", r["partition"], r["offset"], r["window_start"])
                       for r in written.values()) == predicted
    assert len(predicted) > 100, "the data made too few late views to show anything"
    assert Counter((p, o) for _node, p, o, _start in predicted) == _late_by_hand(messages)
    comparison = compare_with_model(model, states, tables)
    assert comparison.ok, comparison.first()
    def windows(state: dict[str, Any]) -> int:
        return sum(len(buckets) for _t, buckets in state.values())

    kept, all_windows = windows(states["page_windows"].merged), windows(
        model.bolt_state("page_windows"))
    assert kept < all_windows, f"no closed window was dropped ({kept} of {all_windows} kept)"
    comparable = model.comparable  # the bolts dropped closed windows
    assert [comparable("page_windows", s) for s in states["page_windows"].instances] == [
        comparable("page_windows", s) for s in model.instance_states("page_windows")]
