"""The join example (topologies/enriched_views.py: a lookup join of views with profiles, a
windowed join of views with clicks) through the real runtime on PostgreSQL, across a kill -9
of a join bolt: bolt states and both tables equal the model's, and the tables equal a direct
computation over what was produced."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    BackgroundProducer,
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    produce,
    wait_for,
)
from hailstorm.model import run_model

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "topologies" / "enriched_views.py"
WINDOW_MS = 10 * 60 * 1000
USERS = 300


def _module(tmp_path: Path, suffix: str) -> tuple[Path, dict[str, str]]:
    """The example with topics and tables of this test's own."""
    topics = {name: f"{name}-{suffix}" for name in ("user-views", "user-profiles", "ad-clicks")}
    text = EXAMPLE.read_text()
    for name, topic in topics.items():
        text = text.replace(f'topic="{name}"', f'topic="{topic}"')
    for table in ("user_activity", "view_clicks"):
        text = text.replace(f'Table(\n        "{table}",', f'Table(\n        "{table}_{suffix}",')
    module = tmp_path / f"enriched_views_{suffix}.py"
    module.write_text(text)
    return module, topics


def _views(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"v{seed}-{i}", "user": f"u{rng.randrange(USERS)}",
             "page": f"/p{rng.randrange(5)}", "ts": rng.randrange(40 * 60 * 1000)}
            for i in range(n)]


def _profiles(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(USERS)}", "version": rng.randrange(1000),
             "country": rng.choice(["DE", "FR", "JP", "BR"]), "plan": rng.choice(["free", "pro"])}
            for _ in range(n)]


def _clicks(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"c{seed}-{i}", "user": f"u{rng.randrange(USERS)}",
             "page": f"/p{rng.randrange(5)}", "ts": rng.randrange(40 * 60 * 1000)}
            for i in range(n)]


def _encoded(values: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(v).encode() for v in values]


def test_joins_are_exact_across_a_kill(stack_env: dict[str, str], tmp_path: Path) -> None:
    stack = StackAddresses.from_env(stack_env)
    suffix = uuid.uuid4().hex[:8]
    module, topics = _module(tmp_path, suffix)
    for topic in topics.values():
        kafka.create_topic(stack.kafka, topic, 2)
    produced = {name: Produced(topic) for name, topic in topics.items()}
    views = _views(3_000, 1) + _views(3_000, 2)
    profiles = _profiles(400, 3) + _profiles(400, 4)
    clicks = _clicks(4_000, 5)
    with TopologyRun(stack, module, log_dir=tmp_path / "logs") as run:
        run.start()
        run.wait_flowing(240)
        produce(stack.kafka, produced["user-views"], _encoded(views[:3_000]), [0, 1])
        produce(stack.kafka, produced["user-profiles"], _encoded(profiles[:400]), [0, 1])
        with BackgroundProducer(stack.kafka, produced["ad-clicks"], _encoded(clicks),
                                [0, 1], rate=1_000) as producer:
            wait_for("the producer to be half-way", lambda: producer.sent >= 2_000, 60)
            run.kill_processor(role="bolt", rng=random.Random(7))
            producer.join(120)
        produce(stack.kafka, produced["user-profiles"], _encoded(profiles[400:]), [0, 1])
        produce(stack.kafka, produced["user-views"], _encoded(views[3_000:]), [0, 1])
        target = {(p.topic, part): o for p in produced.values()
                  for part, o in p.last_offsets().items()}
        committed = run.wait_committed(target, 240)
        assert dict(committed.clock) == target
        states = run.committed_bolt_states(committed)
        tables = run.sink_tables()
        run.check_recoveries()

    messages = sorted((m for p in produced.values() for m in p.model_messages()),
                      key=lambda m: (m.topic, m.partition, m.offset))
    model = run_model(run.topology, messages)
    assert not model.dead_letters
    comparison = compare_with_model(model, states, tables)
    assert comparison.ok, comparison.first()
    for bolt in ("user_activity", "view_clicks"):  # (view_clicks may drop closed windows)
        assert [model.comparable(bolt, s) for s in states[bolt].instances] == [
            model.comparable(bolt, s) for s in model.instance_states(bolt)], bolt

    # Independently of the topology's functions: the joins by hand.
    latest: dict[str, dict[str, Any]] = {}
    for p in profiles:
        current = latest.get(p["user"])
        if current is None or (p["version"], sorted(p.items())) > (current["version"],
                                                                   sorted(current.items())):
            latest[p["user"]] = p
    activity = tables["user_activity_table"]
    assert {k[0] for k in activity} == {v["user"] for v in views}
    for (user,), row in activity.items():
        mine = [v for v in views if v["user"] == user]
        assert row["views"] == len(mine) and row["last_view_ms"] == max(v["ts"] for v in mine)
        assert row["country"] == latest.get(user, {}).get("country")
    clicks_at: dict[tuple[str, int], list[str]] = {}
    for c in clicks:
        clicks_at.setdefault((c["user"], c["ts"] - c["ts"] % WINDOW_MS), []).append(c["page"])
    joined = tables["view_clicks_table"]
    assert len(joined) == len(views)
    for v in views:
        start = v["ts"] - v["ts"] % WINDOW_MS
        pages = clicks_at.get((v["user"], start), [])
        row = joined[(v["id"], start)]
        assert (row["clicks"], row["clicks_on_page"]) == (len(pages), pages.count(v["page"]))
