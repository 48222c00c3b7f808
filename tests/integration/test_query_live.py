"""``hailstorm query --live``: the word count's running ``counts`` instances answer for the
keys they own, over their authenticated data-plane ports, with the clock their values are
at; before and after the owner of a key is SIGKILLed, the answers equal the model's state
at that clock. A query without the run's secret, or with another one, gets nothing."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deployments import WORDCOUNT, deployed

from hailstorm import kafka
from hailstorm.auth import SECRET_FILE_VAR
from hailstorm.harness import Produced, StackAddresses, TopologyRun, produce, wordcount_lines
from hailstorm.model import run_model
from hailstorm.protocol.clock import clock_to_json
from hailstorm.routing import route

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPIC = "words"
ABSENT = "zzzabsentword"


def _secret_file(path: Path) -> Path:
    path.write_bytes(secrets.token_bytes(32))
    path.chmod(0o600)
    return path


def _query_live(run: TopologyRun, keys: list[str], secret: Path | None
                ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in run.env.items() if k != SECRET_FILE_VAR}
    if secret is not None:
        env[SECRET_FILE_VAR] = str(secret)
    return subprocess.run(
        [sys.executable, "-m", "hailstorm", "query", str(WORDCOUNT), "counts", *keys,
         "--live", "--name", run.name],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def _answers(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in map(json.loads, result.stdout.splitlines())}


def _check_against_model(run: TopologyRun, produced: Produced, keys: list[str],
                         secret: Path) -> dict[str, dict[str, Any]]:
    """Ask for ``keys`` (and one absent word) once a round includes everything produced;
    every value is the model's, exactly at a clock that includes everything produced."""
    committed = run.wait_committed(produced.clock(), 240)
    model = run_model(run.topology, produced.model_messages()).bolt_state("counts")
    result = _query_live(run, [*keys, ABSENT], secret)
    assert result.returncode == 1, result.stderr  # the absent word
    answers = _answers(result)
    assert ABSENT in answers, (result.stdout, result.stderr)
    assert answers[ABSENT]["found"] is False and answers[ABSENT]["value"] is None
    everything = clock_to_json(produced.clock())
    for key in keys:
        row = answers[key]
        assert row["found"] and row["value"] == model[key], (key, row, model.get(key))
        assert row["processor"] == f"bolt:counts:{route(key, 2)}"
        assert row["exact"] and row["epoch"] >= committed.epoch, row
        assert all(row["clock"].get(p, -1) >= o for p, o in everything.items()), row
        assert row["absorbed"] == {p: o for p, o in everything.items()
                                   if p in row["absorbed"]}, row
    return answers


def test_live_values_equal_the_model_before_and_after_the_owner_is_killed(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    lines = wordcount_lines(6000, seed=47)
    secret = _secret_file(tmp_path / "run.secret")
    with deployed(stack, WORDCOUNT, tmp_path / "logs") as run:
        run.env[SECRET_FILE_VAR] = str(secret)
        run.start()
        run.wait_flowing(240)
        produce(stack.kafka, produced, lines[:3000], partitions)
        words = Counter(w for line in lines[:3000] for w in line.decode().lower().split())
        keys = [w for w, _ in words.most_common(6) if w.isalpha()]
        first = _check_against_model(run, produced, keys, secret)

        # Not for strangers: no secret, or another run's.
        missing = _query_live(run, keys, None)
        assert missing.returncode == 1 and "secret" in missing.stderr, missing.stderr
        other = _query_live(run, keys, _secret_file(tmp_path / "other.secret"))
        assert other.returncode == 1 and "did not accept the secret" in other.stderr, \
            other.stderr

        owner = f"bolt:counts:{route(keys[0], 2)}"
        pid = int(run.processors()[owner].info["pid"])
        run.kill_processor(pid)
        produce(stack.kafka, produced, lines[3000:], partitions)
        run.wait_flowing(240)
        second = _check_against_model(run, produced, keys, secret)
        assert second[keys[0]]["epoch"] > first[keys[0]]["epoch"]
        run.check_recoveries()
    assert os.stat(secret).st_mode & 0o077 == 0
