"""Where a new bolt starts when records before its inputs' log start are gone (issue 41),
on the real stack: a word count committed its history, then retention (``delete_records``)
moved each partition's log start. A new bolt declaring no ``start=`` is refused by the plan
and by ``run`` with one line naming it; declared ``start="earliest"`` it is built from the
log start, ``start="latest"`` it starts at the committed round's clock; a new bolt fed only
by the carried one starts at that clock with no ``start=`` (nothing before it could reach it,
so nothing is replayed and the records gone are no reason to refuse); the carried bolt keeps
its state, and every state (and the new bolt's new table) equals the reference model
over what each was promised."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import TopicPartition
from deployments import hailstorm_command

from hailstorm import kafka
from hailstorm.cli import main
from hailstorm.dev.harness import (
    SQLITE,
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
)
from hailstorm.model import run_model
from hailstorm.protocol.layout import parse_processor_id

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WORDS = ["Apple", "apple", "APPLE", "Bob", "bob", "cat", "Cat", "dog", "Eel", "eel", "fox"]

PARTITIONS = 2
HEAD = '''
from hailstorm import Count, Topology, per_key

topology = Topology("backfill")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
topology.bolt("counts", inputs=[lines], key=lambda w: w.lower(), state=per_key(Count()),
              lift=lambda w: 1, parallelism=2, emit=lambda w, n: [w])
'''
NEW_BOLT = '''
topology.bolt("{bolt}", inputs=[lines], key=lambda w: w, state=per_key(Count()),
              lift=lambda w: 1, emit=lambda w, n: [(w, n)]{start})
'''
DOWNSTREAM = '''
topology.bolt("totals", inputs=[topology.node("counts")], state=Count(), lift=lambda w: 1)
'''
"""A new bolt fed only by the carried ``counts``: nothing from before the committed round
can reach it, so it starts at its clock, whatever was gone (no ``start=`` needed)."""
SINK = '''
from hailstorm import Table

topology.sink("cased_counts", [topology.node("cased")],
              Table("cased_counts_{suffix}", columns={{"word": "text", "n": "bigint"}},
                    key=["word"], mode="upsert"))
'''


def _module(tmp_path: Path, text: str, topic: str) -> Path:
    module = tmp_path / f"backfill_{uuid.uuid4().hex[:8]}.py"
    module.write_text(text.replace("{topic}", topic))
    return module


def _plan(stack: StackAddresses, module: str, name: str) -> tuple[int, str]:
    """``hailstorm plan --kafka`` in this process: its exit code and output."""
    env = {"HAILSTORM_ZK": stack.zk, "HAILSTORM_SNAPSHOTS": str(stack.snapshots),
           "HAILSTORM_KAFKA": stack.kafka}
    result = CliRunner().invoke(main, ["plan", module, "--name", name], env=env)
    return result.exit_code, result.output


def _lines(rng: random.Random, n: int) -> list[bytes]:
    return [" ".join(rng.choices(WORDS, k=4)).encode() for _ in range(n)]


def test_new_bolts_after_retention_start_where_declared(stack_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"backfill-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    partitions = kafka.partitions_of(stack.kafka, topic)
    name = f"backfill_{uuid.uuid4().hex[:8]}"
    rng = random.Random(4141)
    produced = Produced(topic)
    produce(stack.kafka, produced, _lines(rng, 3_000), partitions)
    logs = tmp_path / "logs"
    with TopologyRun(stack, _module(tmp_path, HEAD, topic), name=name, log_dir=logs,
                     negotiators=1, database=SQLITE) as run:
        run.start()
        committed = run.wait_committed(produced.clock(), 240)
    deployed_clock = dict(committed.clock)

    # Retention: the first half of each partition is gone.
    log_starts = {p: (o + 1) // 2 for p, o in produced.last_offsets().items()}
    admin = kafka.admin(stack.kafka)  # kept: its futures resolve only while it lives
    futures = admin.delete_records(
        [TopicPartition(topic, p, o) for p, o in log_starts.items()], request_timeout=30)
    for future in futures.values():
        future.result(30)

    undeclared = str(_module(tmp_path, HEAD + NEW_BOLT.format(bolt="cased", start=""), topic))
    code, output = _plan(stack, undeclared, name)
    gone = ", ".join(f"{topic}:{p} offsets 0..{o - 1}" for p, o in sorted(log_starts.items()))
    reason = (f"bolt cased: refuse: no committed state: it would read its inputs from offset "
              f"0, but records are gone: {gone}")
    assert code == 1 and reason in output, output
    refused, took = hailstorm_command(stack, "run", undeclared, "--name", name,
                                      "--log-level", "ERROR")
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    print(f"refused in {took:.1f} s: {errors}")
    assert refused.returncode != 0 and len(errors) == 1, refused.stderr[-3000:]
    assert errors[0].startswith(f"error: upgrade refused: {reason}"), errors

    declared = str(_module(tmp_path, HEAD
                           + NEW_BOLT.format(bolt="cased", start=', start="earliest"')
                           + NEW_BOLT.format(bolt="recent", start=', start="latest"')
                           + DOWNSTREAM + SINK.format(suffix=uuid.uuid4().hex[:8]), topic))
    code, output = _plan(stack, declared, name)
    print(output)
    assert code == 0, output
    assert (f"bolt cased: new: no committed state: starts empty and reads the retained "
            f"records of its inputs from their log start (start='earliest'; gone: {gone})"
            ) in output
    assert ("bolt recent: new: no committed state: starts empty at the committed round's "
            "clock (start='latest'): no record up to it is read") in output
    assert ("bolt totals: new: no committed state: starts empty at the committed round's "
            "clock: it is fed only through carried bolts, which send what they emit from then "
            "on (no record is replayed for it)") in output
    with TopologyRun(stack, declared, name=name, log_dir=logs, negotiators=1,
                     database=SQLITE) as run:
        started = time.monotonic()
        run.start()
        produce(stack.kafka, produced, _lines(rng, 1_000), partitions)
        committed = run.wait_committed(produced.clock(), 240)
        print(f"committed the new bolts and the new lines in {time.monotonic() - started:.1f} s"
              f"; recoveries: {[r.reason for r in run.recoveries()]}")
        states = run.committed_bolt_states(committed)
        assert {parse_processor_id(p).name for p in committed.snapshots} == \
            {"counts", "cased", "recent", "totals", "cased_counts"}
        messages = produced.model_messages()
        everything = run_model(run.topology, messages)
        retained = run_model(run.topology, [m for m in messages
                                            if m.offset >= log_starts[m.partition]])
        recent = run_model(run.topology, [
            m for m in messages if m.offset > deployed_clock[(topic, m.partition)]])
        assert states["counts"].instances == everything.instance_states("counts")
        assert states["cased"].instances == retained.instance_states("cased")
        assert states["recent"].instances == recent.instance_states("recent")
        # counts emits a word per word it counts: totals holds the words after the clock
        assert states["totals"].instances == recent.instance_states("totals")
        words_after = sum(len((m.value or b"").split()) for m in messages
                          if m.offset > deployed_clock[(topic, m.partition)])
        assert states["totals"].merged == words_after
        expected = retained.table("cased_counts")
        wait_for("the new sink's table to equal the model",
                 lambda: run.sink_tables()["cased_counts"] == expected, 60, run.alive)
        table = run.sink_tables()["cased_counts"]
        assert table == expected, "the new sink's table"
        print(f"cased_counts: {len(table)} rows equal to the model's")
