"""More of the API through the real runtime, on PostgreSQL, across a kill: two spouts feeding
one bolt, a second-level TopK bolt whose keys spread over both its instances, and a merge and
an append table. Checked against the model and, independently of the topology's own
functions, against plain Python over the messages produced."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from pathlib import Path

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
from hailstorm.routing import route

pytestmark = pytest.mark.integration

MIXED = '''
from hailstorm import Count, Table, TopK, Topology, per_key


def visit(line):
    user, page = line.split(",")
    return [(user, page)]


topology = Topology("mixed")
clicks = topology.spout("clicks", topic="{clicks}", decoder="text", explode=visit)
views = topology.spout("views", topic="{views}", decoder="text", explode=visit)
pages = topology.bolt("pages", inputs=[clicks, views], key=lambda v: v[1],
                      state=per_key(Count()), lift=lambda v: 1,
                      emit=lambda v, n: [(v[1][0], v[1], n)], parallelism=2)
topology.bolt("top_pages", inputs=[pages], key=lambda t: t[0],
              state=per_key(TopK(3, item_type="string", score_type="long")),
              lift=lambda t: TopK.lift(t[1], t[2]), parallelism=2)
topology.sink("visits", inputs=[clicks, views], target=Table(
    "{prefix}_visits", columns={"user": "text", "n": "bigint"}, key=["user"], mode="merge",
    row=lambda v: {"user": v[0], "n": 1}))
topology.sink("click_log", inputs=[clicks], target=Table(
    "{prefix}_clicks", columns={"user": "text", "page": "text"}, mode="append"))
'''

#: Pages whose first letters route to both instances of ``top_pages``.
LETTERS = "abcdefgh"


def _lines(count: int, seed: int) -> list[bytes]:
    """``user,page`` lines: Zipf-like users (many seen once, a few hot), pages under eight
    first letters."""
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(5_000)]
    weights = [1 / (i + 1) for i in range(len(users))]
    pages = [f"{letter}{i}" for letter in LETTERS for i in range(12)]
    return [f"{rng.choices(users, weights)[0]},{rng.choice(pages)}".encode()
            for _ in range(count)]


def test_two_spouts_topk_merge_and_append_tables_are_exact_across_a_kill(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    assert {route(letter, 2) for letter in LETTERS} == {0, 1}  # both instances get keys
    stack = StackAddresses.from_env(stack_env)
    suffix = uuid.uuid4().hex[:8]
    topics = {"clicks": f"clicks-{suffix}", "views": f"views-{suffix}"}
    module = tmp_path / f"mixed_{suffix}.py"
    module.write_text(MIXED.replace("{clicks}", topics["clicks"])
                      .replace("{views}", topics["views"]).replace("{prefix}", f"m{suffix}"))
    for topic in topics.values():
        kafka.create_topic(stack.kafka, topic, 2)
    produced = {name: Produced(topic) for name, topic in topics.items()}
    with TopologyRun(stack, module, log_dir=tmp_path / "logs") as run:  # on PostgreSQL
        run.start()
        run.wait_flowing(240)
        produce(stack.kafka, produced["views"], _lines(4_000, seed=1), [0, 1])
        with BackgroundProducer(stack.kafka, produced["clicks"], _lines(8_000, seed=2),
                                [0, 1], rate=2_000) as producer:
            wait_for("the producer to be half-way", lambda: producer.sent >= 4_000, 60)
            run.kill_processor(role="bolt", rng=random.Random(3))
            producer.join(120)
        produce(stack.kafka, produced["views"], _lines(4_000, seed=4), [0, 1])
        target = {(p.topic, part): o for p in produced.values()
                  for part, o in p.last_offsets().items()}
        committed = run.wait_committed(target, 240)
        assert dict(committed.clock) == target
        states = run.committed_bolt_states(committed)
        tables = run.sink_tables()
        run.check_recoveries()
    assert run.database.startswith("postgresql://")  # the harness's default

    messages = sorted((m for p in produced.values() for m in p.model_messages()),
                      key=lambda m: (m.topic, m.partition, m.offset))
    model = run_model(run.topology, messages)
    comparison = compare_with_model(model, states, tables)
    assert comparison.ok, comparison.first()
    assert states["top_pages"].instances == model.instance_states("top_pages")
    assert all(states["top_pages"].instances), "both TopK instances hold keys"

    # Independently of the topology's functions: plain counting over what was produced.
    visits = [m.value.decode().split(",") for m in messages if m.value is not None]
    per_page = Counter(page for _user, page in visits)
    per_user = Counter(user for user, _page in visits)
    assert states["pages"].merged == dict(per_page)
    for letter in LETTERS:
        ranked = sorted(((n, page) for page, n in per_page.items() if page[0] == letter),
                        key=lambda x: (-x[0], x[1]))[:3]
        assert states["top_pages"].merged[letter] == {page: n for n, page in ranked}
    assert {key[0]: row["n"] for key, row in tables["visits"].items()} == dict(per_user)
    clicks = sorted((m.partition, m.offset, *m.value.decode().split(","))
                    for m in produced["clicks"].model_messages() if m.value is not None)
    logged = sorted((k[1], k[2], row["user"], row["page"])
                    for k, row in tables["click_log"].items())
    assert logged == clicks  # every click once, in the append table
