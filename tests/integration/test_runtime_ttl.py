"""A time to live through the real runtime (topologies/visits.py, PostgreSQL): user views
arrive out of order on three partitions over hours of event time; a spout is killed right
after a round committed views that decide the lateness of the next ones, and a bolt is
killed while views are produced. The late topic holds exactly the model's late views, each
once, and they equal a computation by hand; the visits table equals the model's, and so do
the bolt states but for the idle users the bolts dropped (many must have been)."""

from __future__ import annotations

import json
import random
import runpy
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deployments import run_killing_a_spout_then_a_bolt

from hailstorm import kafka
from hailstorm.dev.harness import (
    BoltStates,
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    wait_for,
)
from hailstorm.model import Message, run_model

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "topologies" / "visits.py"
IDLE_MS: int = runpy.run_path(str(EXAMPLE))["IDLE_MS"]
PARTITIONS = 3


def _module(tmp_path: Path, suffix: str) -> tuple[Path, str, str]:
    """The example with a source topic, late topic and table of this test's own."""
    topic, late = f"user-views-{suffix}", f"visits-{suffix}.late"
    text = EXAMPLE.read_text()
    text = text.replace('topic="user-views"', f'topic="{topic}"')
    text = text.replace('late="visits.late"', f'late="{late}"')
    text = text.replace('Table(\n        "user_visits",',
                        f'Table(\n        "user_visits_{suffix}",')
    text = text.replace('Topology("visits")', f'Topology("visits_{suffix}")')
    module = tmp_path / f"visits_{suffix}.py"
    module.write_text(text)
    return module, topic, late


def _views(n: int, seed: int, start: int, ahead: int = 0) -> list[bytes]:
    """Views 2 s apart from ``start`` (ms): half by 50 frequent users, half by 5,000 rare
    ones (often idle for more than 30 min); one in ten is delayed by up to 40 min (many of
    those are late). The last ``ahead`` views are an hour ahead (a clock running fast),
    which makes the next views late too."""
    rng = random.Random(seed)
    values = []
    for i in range(n):
        ts = start + i * 2000
        if i >= n - ahead:
            ts += 60 * 60 * 1000
        elif rng.random() < 0.1:
            ts -= rng.randrange(40 * 60 * 1000)
        user = f"u{rng.randrange(50)}" if rng.random() < 0.5 else f"v{rng.randrange(5000)}"
        values.append(json.dumps({"user": user, "ts": max(ts, 0)}).encode())
    return values


def _late_by_hand(messages: list[Message]) -> Counter[tuple[int, int]]:
    """``(partition, offset)`` of the views 30 min (the retention) or more behind the
    newest view earlier in their partition."""
    late: Counter[tuple[int, int]] = Counter()
    newest: dict[int, int] = {}
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        ts = json.loads(m.value or b"")["ts"]
        before = newest.get(m.partition)
        if before is not None and ts + IDLE_MS <= before:
            late[(m.partition, m.offset)] += 1
        else:
            newest[m.partition] = max(ts, before if before is not None else ts)
    return late


def _late_topic(bootstrap: str, topic: str) -> Counter[tuple[int, int]]:
    """What a read_committed consumer sees: (partition, offset) of each late view."""
    end = kafka.log_ends(bootstrap, [(topic, 0)])[(topic, 0)]
    seen: Counter[tuple[int, int]] = Counter()
    for record in kafka.read_range(bootstrap, topic, 0, 0, end - 1):
        h = record.headers or {}
        assert h["hailstorm.stage"] == b"late" and h["hailstorm.node"] == b"visits"
        seen[(int(h["hailstorm.partition"]), int(h["hailstorm.offset"]))] += 1
    return seen


def test_idle_users_are_dropped_and_late_views_routed_exactly_once_across_kills(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    module, topic, late_topic = _module(tmp_path, uuid.uuid4().hex[:8])
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    kafka.create_topic(stack.kafka, late_topic, 1)
    swept: list[dict[str, BoltStates]] = []

    def idle_users_dropped(run: TopologyRun, clock: dict[Any, int], produced: Produced) -> None:
        """Once the views end, the sweep's bound stops moving: within a few passes the
        bolts drop every idle user, and a later round records it (the round covering the
        last view may come before the restarted bolt's sweep got that far)."""
        users = len(run_model(run.topology, produced.model_messages()).bolt_state("visits"))

        def kept_under_half() -> bool:
            states = run.committed_bolt_states(run.committed())
            swept[:] = [states]
            return sum(1 for sessions in states["visits"].merged.values() if sessions) \
                < users / 2

        wait_for("the bolts to drop the idle users", kept_under_half, 60, run.alive, poll=1)

    # Every partition ends the first part with a view an hour ahead; once a round committed
    # it, a spout is killed: every spout rewinds past those views, and only the stream times
    # they kept make the next half hour of views late.
    ran = run_killing_a_spout_then_a_bolt(
        stack, module, topic, _views(3_000, 1, 0, ahead=PARTITIONS),
        _views(4_000, 2, 6_000_000), tmp_path / "logs", idle_users_dropped)
    states, tables = ran.states, ran.tables

    messages = ran.produced.model_messages()
    model = run_model(ran.run.topology, messages)
    assert not model.dead_letters
    predicted = Counter((d.message.partition, d.message.offset) for d in model.late)
    assert len(predicted) > 100, "the data made too few late views to show anything"
    assert predicted == _late_by_hand(messages)
    assert _late_topic(stack.kafka, late_topic) == predicted
    comparison = compare_with_model(model, states, tables)
    assert comparison.ok, comparison.first()
    users = len(model.bolt_state("visits"))
    later = swept[0]["visits"]  # a round after the sweep: as exact as the covering one
    kept = sum(1 for sessions in later.merged.values() if sessions)
    assert kept < users / 2, f"too few idle users were dropped ({kept} of {users} kept)"
    comparable = model.comparable  # the bolts dropped idle users
    expected = [comparable("visits", s) for s in model.instance_states("visits")]
    for instances in (states["visits"].instances, later.instances):
        assert [comparable("visits", s) for s in instances] == expected
