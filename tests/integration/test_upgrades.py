"""Upgrading a running topology on the real stack (issue 41): one deployment name, its
code changed between runs. A state type change and a changed key function are refused at
once with a one-line error naming the bolt (before Spark starts); a declared rename with a
new parallelism and a new state type (``migrate=``) carries the state exactly; a raised
version rebuilds the state under the new key function from the retained records."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
from deployments import hailstorm_command, hailstorm_plan

from hailstorm import kafka
from hailstorm.dev.harness import SQLITE, Produced, StackAddresses, TopologyRun, produce
from hailstorm.model import run_model
from hailstorm.protocol.layout import parse_processor_id

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 2
WORDS = ["Apple", "apple", "APPLE", "Bob", "bob", "cat", "Cat", "dog", "Eel", "eel", "fox"]

HEAD = '''
from hailstorm import Count, Sum, Topology, per_key

topology = Topology("upgrades")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
'''
COUNTS = HEAD + '''
topology.bolt("counts", inputs=[lines], key=lambda w: w.lower(), state=per_key(Count()),
              lift=lambda w: 1, parallelism=2)
'''
SUMS = HEAD + '''
topology.bolt("counts", inputs=[lines], key=lambda w: w.lower(), state=per_key(Sum("double")),
              lift=lambda w: 1.0, parallelism=2)
'''
CASED = HEAD + '''
topology.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
              lift=lambda w: 1, parallelism=2)
'''
RENAMED = HEAD + '''
topology.bolt("totals", inputs=[lines], key=lambda w: w.lower(), state=per_key(Sum("double")),
              lift=lambda w: 1.0, parallelism=3, previously="counts", migrate=float)
'''
RENAMED_CASED = HEAD + '''
topology.bolt("totals", inputs=[lines], key=lambda w: w, state=per_key(Sum("double")),
              lift=lambda w: 1.0, parallelism=3, previously="counts", migrate=float, version=2)
'''


def _module(tmp_path: Path, text: str, topic: str) -> Path:
    module = tmp_path / f"upgrades_{uuid.uuid4().hex[:8]}.py"
    module.write_text(text.replace("{topic}", topic))
    return module


def _lines(rng: random.Random, n: int) -> list[bytes]:
    return [" ".join(rng.choices(WORDS, k=4)).encode() for _ in range(n)]


def _exact(run: TopologyRun, produced: Produced, bolt: str) -> None:
    """The committed round covers everything produced and ``bolt``'s state equals the
    reference model of the running code over every message."""
    committed = run.wait_committed(produced.clock(), 240)
    states = run.committed_bolt_states(committed)
    model = run_model(run.topology, produced.model_messages())
    assert states[bolt].instances == model.instance_states(bolt), bolt
    bolts = {parse_processor_id(pid).name for pid in committed.snapshots}
    assert bolts == {bolt}, bolts


def test_refusals_rename_and_version_bump(stack_env: dict[str, str], tmp_path: Path) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"upgrades-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    partitions = kafka.partitions_of(stack.kafka, topic)
    name = f"upgrades_{uuid.uuid4().hex[:8]}"
    rng = random.Random(41)
    produced = Produced(topic)
    produce(stack.kafka, produced, _lines(rng, 3_000), partitions)
    logs = tmp_path / "logs"
    with TopologyRun(stack, _module(tmp_path, COUNTS, topic), name=name, log_dir=logs,
                     negotiators=1, database=SQLITE) as run:
        run.start()
        _exact(run, produced, "counts")

    for text, reason in [
        (SUMS, "bolt counts: refuse: state per_key(Count) cannot become per_key(Sum(double))"),
        (CASED, "bolt counts: refuse: the key function changed (fingerprint)"),
    ]:
        module = str(_module(tmp_path, text, topic))
        code, output = hailstorm_plan(stack, module, name)
        assert code == 1 and reason in output, output
        refused, took = hailstorm_command(stack, "run", module, "--name", name,
                                          "--log-level", "ERROR")
        errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        print(f"refused in {took:.1f} s: {errors}")
        assert refused.returncode != 0 and len(errors) == 1, refused.stderr[-3000:]
        assert errors[0].startswith(f"error: upgrade refused: {reason}"), errors
        assert "SparkContext" not in refused.stderr  # refused before Spark started

    renamed = str(_module(tmp_path, RENAMED, topic))
    code, output = hailstorm_plan(stack, renamed, name)
    assert code == 0, output
    assert ("bolt totals: convert: per_key(Count) -> per_key(Sum(double)) by its migrate= "
            "function (renamed from counts), re-sharded from 2 to 3 instances") in output
    with TopologyRun(stack, renamed, name=name, log_dir=logs, negotiators=1,
                     database=SQLITE) as run:
        run.start()
        produce(stack.kafka, produced, _lines(rng, 2_000), partitions)
        _exact(run, produced, "totals")

    cased = str(_module(tmp_path, RENAMED_CASED, topic))
    code, output = hailstorm_plan(stack, cased, name)
    assert code == 0 and "bolt totals: restart: version 1 -> 2" in output, output
    with TopologyRun(stack, cased, name=name, log_dir=logs, negotiators=1,
                     database=SQLITE) as run:
        run.start()
        produce(stack.kafka, produced, _lines(rng, 1_000), partitions)
        _exact(run, produced, "totals")
        states = run.committed_bolt_states()["totals"].merged
        assert {"Apple", "apple", "APPLE"} <= set(states)  # the new key space only
