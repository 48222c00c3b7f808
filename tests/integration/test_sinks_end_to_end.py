"""Word count into a real table, exactly once, through kills of every kind of processor.

The run kills a bolt, a spout and (on PostgreSQL) the sink (kill -9 of their Spark Python
workers), lets the sink's ZooKeeper session expire under it (SIGSTOP until the server dropped
it), and makes the sink die right after a database commit, before it could tell ZooKeeper
(a failpoint: that window is too narrow to hit at random). The table must end exactly as the
reference model says, and every restart must be one of these.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from databases import query
from deployments import WORDCOUNT

from hailstorm import kafka
from hailstorm.dev.harness import (
    SQLITE,
    BackgroundProducer,
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.model import run_model

pytestmark = pytest.mark.integration

TOPIC = "words"


def table_of(url: str) -> dict[str, int]:
    return {word: count for word, count in query(url, "SELECT word, count FROM word_counts")}


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_word_counts_table_is_exactly_the_model_through_kills(
    database: str,
    stack_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HAILSTORM_FAILPOINTS", "sink.after_commit@4")
    monkeypatch.setenv("HAILSTORM_FAILPOINTS_DIR", str(tmp_path / "failpoints"))
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    lines = wordcount_lines(40000, seed={"postgresql": 17, "sqlite": 18}[database])
    rng = random.Random(5)

    # PostgreSQL: the harness's default, a new database on the stack's server.
    with TopologyRun(stack, WORDCOUNT, log_dir=tmp_path / "logs",
                     database=None if database == "postgresql" else SQLITE) as run:
        run.start()
        run.wait_flowing(timeout=300)
        # The failpoint first: the sink commits at least once a round (each second) while
        # lines arrive, so its first incarnation dies right after its fourth commit, with
        # lines in flight. They arrive over six seconds: produced at once, they were all
        # committed in one round, and an idle topology skips its rounds, so no fourth commit
        # came. The kills come after its recovery, one at a time: a failpoint firing during a
        # kill's recovery would hide which of the two each restart was.
        fired = tmp_path / "failpoints" / "sink.after_commit"
        with BackgroundProducer(stack.kafka, produced, lines[:15000], partitions, rate=2500,
                                chunk=250) as producer:
            wait_for("the sink's failpoint to fire", fired.exists, 120, run.alive)
            producer.join(120)
        run.wait_recovered(fired.stat().st_mtime, timeout=300)
        # Each kill waits for its own recovery (one naming its victim), not for any Flowing:
        # the negotiator may not have noticed the kill yet when the wait begins.
        bolt = run.kill_processor(role="bolt", rng=rng)
        produce(stack.kafka, produced, lines[15000:30000], partitions)
        run.require_recovery(bolt, 180)
        spout = run.kill_processor(role="spout", rng=rng)
        produce(stack.kafka, produced, lines[30000:35000], partitions)
        if database == "postgresql":  # (the suite's time: SQLite gets the failpoint only)
            # The sink itself: SIGKILL, then a ZooKeeper session that expires under it.
            run.require_recovery(spout, 180)
            killed = run.kill_processor(role="sink", rng=rng)
            assert killed.target == "sink:word_counts:0"
            run.require_recovery(killed, 180)
            run.expire_zk_session(processor="sink:word_counts:0")
        produce(stack.kafka, produced, lines[35000:], partitions)
        run.wait_committed({(TOPIC, p): o for p, o in produced.last_offsets().items()},
                           timeout=300)
        run.check_recoveries()  # the kills and the sink's failpoint explain every one

    expected = {key[0]: row["count"] for key, row in
                run_model(run.topology, produced.model_messages()).table("word_counts").items()}
    assert run.database.startswith(database)
    assert table_of(run.database) == expected


def test_rows_reach_the_table_without_waiting_for_a_round(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """With no snapshot round for an hour, the sink still writes what its low water mark
    covers: once the stream goes quiet, no frame wakes it, so it commits when idle."""
    url = f"sqlite:///{tmp_path}/sink.db"
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    with TopologyRun(stack, WORDCOUNT, log_dir=tmp_path / "logs", database=url,
                     snapshot_interval=3600) as run:
        run.start()
        run.wait_flowing(timeout=300)
        produce(stack.kafka, produced, wordcount_lines(3000, seed=17), partitions)
        expected = {key[0]: row["count"] for key, row in
                    run_model(run.topology, produced.model_messages()).table("word_counts")
                    .items()}
        wait_for("the table to hold every produced line",
                 lambda: table_of(url) == expected if (tmp_path / "sink.db").exists() else False,
                 120, run.alive, poll=0.5)
        assert run.committed() is None, "a round committed: the table may have waited for it"
        run.check_recoveries()
