"""A bench whose stack failed keeps the services' logs that its error names
(``bench/common.py``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from common import _keep_stack_logs


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
