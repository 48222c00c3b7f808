"""A secured cluster: the embedded Kafka with only a SASL_SSL client listener (SCRAM-SHA-256,
TLS with a CA the stack makes). Word count runs end to end through it with the credentials
from a properties file; a wrong password is one clear error; the password never shows in a
log, in ``hailstorm status`` or on a command line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from deployments import command_lines

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce, wordcount_lines
from hailstorm.dev.services import StackState
from hailstorm.model import run_model

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordcount.py"
TOPIC = "words"


@pytest.fixture
def secured(secured_stack: StackState) -> StackState:
    return secured_stack


def _password(state: StackState) -> str:
    assert state.kafka is not None and state.kafka.password
    return state.kafka.password


def test_plaintext_clients_cannot_read_the_secured_listener(secured: StackState) -> None:
    config = secured.kafka_client_config
    assert config is not None and stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(secured.state_dir, "stack.json").stat().st_mode) == 0o600
    env = secured.env()
    assert env[kafka.CONFIG_VAR] == str(config)
    assert _password(secured) not in "".join(env.values())
    with pytest.raises(kafka.KafkaUnreachable):  # no credentials: no metadata at all
        kafka.partitions_of(secured.kafka_bootstrap, "anything", timeout=3)


def test_wordcount_runs_end_to_end_through_sasl_ssl(
    secured: StackState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = secured.env()
    monkeypatch.setenv(kafka.CONFIG_VAR, env[kafka.CONFIG_VAR])  # the harness's own clients
    stack = StackAddresses.from_env(env)
    kafka.create_topic(stack.kafka, TOPIC, 2)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    produce(stack.kafka, produced, wordcount_lines(5_000, seed=31), partitions)
    database = env["HAILSTORM_DATABASE_URL"]
    with TopologyRun(stack, TOPOLOGY, log_dir=tmp_path / "logs", database=database) as run:
        run.start()
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        committed = run.wait_committed(target, 240)
        model = run_model(run.topology, produced.model_messages())
        assert run.committed_bolt_states(committed)["counts"].merged == model.bolt_state("counts")
        assert run.sink_tables()["word_counts"] == model.table("word_counts")
        run.check_recoveries()

        status = subprocess.run(
            [sys.executable, "-m", "hailstorm", "status", run.name, "--sample", "0.2"],
            cwd=REPO, env=run.env, capture_output=True, text=True, timeout=60, check=False)
        assert status.returncode == 0, status.stderr
        json_status = subprocess.run(
            [sys.executable, "-m", "hailstorm", "status", run.name, "--json", "--sample", "0"],
            cwd=REPO, env=run.env, capture_output=True, text=True, timeout=60, check=False)
        assert '"lag": 0' in json_status.stdout  # watermarks read through SASL_SSL too

        password = _password(secured)
        assert not [line for line in command_lines() if password in line]
        run.stop()
        for label, text in run.logs().items():
            assert password not in text, f"the password is in {label}.log"
        assert password not in status.stdout + status.stderr + json_status.stdout


def test_a_wrong_password_is_one_clear_error(secured: StackState, tmp_path: Path) -> None:
    good = secured.kafka_client_config
    assert good is not None
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(good.read_text().replace(_password(secured), "not-the-password"))
    env = {**os.environ, **secured.env(), kafka.CONFIG_VAR: str(wrong),
           "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [sys.executable, "-m", "hailstorm", "run", str(TOPOLOGY), "--name", "wrong_password"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "refused hailstorm" in errors[0] and "SASL authentication" in errors[0]
    assert str(wrong) in errors[0]  # where to fix it
    assert "not-the-password" not in result.stderr + result.stdout


def test_dev_env_of_a_secured_stack_names_the_file_not_the_secret(secured: StackState) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hailstorm", "dev", "env", "--state-dir", secured.state_dir],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert f"export HAILSTORM_KAFKA_CONFIG={secured.kafka_client_config}" in result.stdout
    assert _password(secured) not in result.stdout
