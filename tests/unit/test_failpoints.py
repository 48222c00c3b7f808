"""Failpoints fire on the Nth hit, once per marker directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hailstorm.failpoints import parse

SCRIPT = """
from hailstorm.failpoints import failpoint
for i in range(5):
    print(i, flush=True)
    failpoint("demo.point")
"""


def test_parse() -> None:
    assert parse("") == {}
    assert parse("a@3, b") == {"a": 3, "b": 1}
    with pytest.raises(ValueError):
        parse("a@0")


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=30, check=False)


def test_fires_on_the_nth_hit_once_per_directory(tmp_path: Path) -> None:
    env = {"HAILSTORM_FAILPOINTS": "demo.point@3", "HAILSTORM_FAILPOINTS_DIR": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    first = run(env)
    assert first.returncode == -9 and first.stdout.split() == ["0", "1", "2"]
    assert (tmp_path / "demo.point").exists()
    second = run(env)  # the restarted process runs on
    assert second.returncode == 0 and second.stdout.split() == ["0", "1", "2", "3", "4"]
    assert run({"PATH": "/usr/bin:/bin"}).returncode == 0  # unarmed
