"""A new bolt catching up on its own clock while the others keep committing (issue 41), on
the real stack: a word count committed a history, then the topology is deployed again with
a new bolt and a new sink reading it. The plan says what the backfill reads; the run
commits rounds for the carried bolt (its clock moving with the lines produced meanwhile)
while the new bolt's own clock climbs through the history, without a failed stage attempt
or a restart, until it joins the rounds; then every state and table equals the model's.
``bench/catch_up.py`` runs the same with 2M lines of history."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest
from deployments import deployed

from hailstorm import kafka
from hailstorm.dev.harness import (
    SQLITE,
    BackgroundProducer,
    Produced,
    StackAddresses,
    compare_with_model,
    produce,
    wait_for,
)
from hailstorm.dev.harness.catch_up import (
    CATCH_UP_BASE,
    CATCH_UP_NEW,
    RoundLog,
    comparison_line,
    plan_output,
)
from hailstorm.model import run_model

pytestmark = pytest.mark.integration

PARTITIONS = 2
HISTORY = 30_000
"""Lines committed before the new bolt is deployed (four words each)."""
LIVE = 6_000
"""Lines produced while it catches up, at :data:`RATE` a second."""
RATE = 200


def test_new_bolt_catches_up_while_the_others_commit(stack_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"catchup-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    partitions = kafka.partitions_of(stack.kafka, topic)
    name = f"catchup_{uuid.uuid4().hex[:8]}"
    suffix = uuid.uuid4().hex[:8]
    rng = random.Random(4142)
    produced = Produced(topic)
    produce(stack.kafka, produced, _lines(rng, HISTORY), partitions)
    base = tmp_path / "base.py"
    base.write_text(CATCH_UP_BASE.format(topic=topic))
    logs = tmp_path / "logs"
    with deployed(stack, base, logs / "base", name=name, negotiators=1,
                  database=SQLITE) as run:
        run.start()
        committed = run.wait_committed(produced.clock(), 240)
    history = dict(committed.clock)

    changed = tmp_path / "changed.py"
    changed.write_text(CATCH_UP_BASE.format(topic=topic)
                       + CATCH_UP_NEW.format(table=f"cased_{suffix}"))
    output = plan_output(stack, str(changed), name)
    print(output)
    ranges = ", ".join(f"{topic}:{p[1]} 0..{o}" for p, o in sorted(history.items()))
    assert (f"bolt cased: new: no committed state: starts empty and reads the retained "
            f"records of its inputs (from offset 0); backfilled from offsets {ranges} "
            f"({sum(o + 1 for o in history.values())} records)") in output, output
    assert "sink cased_counts: new: writes what its inputs emit from now on; catches up " \
        "with cased" in output, output

    with deployed(stack, changed, logs / "changed", name=name, negotiators=1,
                  database=SQLITE) as run:
        rounds = RoundLog(run)
        started = time.monotonic()
        run.start()
        run.wait_flowing()
        with BackgroundProducer(stack.kafka, produced, _lines(rng, LIVE), partitions,
                                RATE) as producer:
            wait_for("the new bolt to join the rounds", rounds.joined, 240, run.alive)
            producer.join(60)
        committed = run.wait_committed(produced.clock(), 120)
        print(rounds.table(started))
        behind = rounds.catching_up("cased")
        assert len(behind) >= 3, f"{len(behind)} rounds committed while cased caught up"
        assert behind[-1].clock != behind[0].clock, "the carried bolt's clock did not move"
        restarts = [r.reason for r in run.recoveries() if not r.is_start]
        failed = [line for line in run.log("driver").splitlines()
                  if "stage attempt" in line and "failed" in line]
        assert not restarts and not failed, (restarts, failed)
        model = run_model(run.topology, produced.model_messages())
        wait_for("the new sink's table to equal the model",
                 lambda: run.sink_tables()["cased_counts"] == model.table("cased_counts"),
                 60, run.alive)
        comparison = compare_with_model(model, run.committed_bolt_states(committed),
                                        run.sink_tables())
        print(comparison_line(comparison))
        assert comparison.ok, comparison_line(comparison)


def _lines(rng: random.Random, n: int) -> list[bytes]:
    words = ["Apple", "apple", "Bob", "bob", "cat", "Cat", "dog", "Eel", "eel", "fox"]
    return [" ".join(rng.choices(words, k=4)).encode() for _ in range(n)]
