"""A bench whose stack failed keeps the services' logs that its error names; a measured
topology run's logs are kept only when it fails or when asked (``bench/common.py``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from common import KEEP_LOGS, _keep_stack_logs, run_logs


def test_the_logs_of_a_failed_stack_are_kept_and_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "kafka-1.log").write_text("Caused by: no space left\n")
    _keep_stack_logs(tmp_path)
    said = capsys.readouterr().err
    kept = Path(said.split(" are kept in ")[1].strip())
    try:
        assert str(logs) in said
        assert (kept / "kafka-1.log").read_text() == "Caused by: no space left\n"
    finally:
        shutil.rmtree(kept)


def test_a_stack_without_logs_keeps_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _keep_stack_logs(tmp_path)
    assert capsys.readouterr().err == ""


def test_a_run_that_ends_well_leaves_no_logs_behind(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(KEEP_LOGS, raising=False)
    with run_logs("hailstorm-test-run-logs-") as logs:
        (logs / "driver.log").write_text("flowing\n")
    assert not logs.exists()
    assert capsys.readouterr().err == ""


def test_a_failed_run_keeps_its_logs_and_names_them(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(KEEP_LOGS, raising=False)
    with pytest.raises(TimeoutError), run_logs("hailstorm-test-run-logs-") as logs:
        (logs / "driver.log").write_text("stuck\n")
        raise TimeoutError("no commit")
    try:
        assert (logs / "driver.log").read_text() == "stuck\n"
        assert str(logs) in capsys.readouterr().err
    finally:
        shutil.rmtree(logs)


def test_asked_to_keep_them_a_run_keeps_its_logs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(KEEP_LOGS, "1")
    with run_logs("hailstorm-test-run-logs-") as logs:
        pass
    try:
        assert logs.is_dir() and KEEP_LOGS in capsys.readouterr().err
    finally:
        shutil.rmtree(logs)
