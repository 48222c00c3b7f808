"""Failpoints fire on the Nth hit, once per marker directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hailstorm.failpoints import parse, pause_request

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


PAUSE_SCRIPT = """
import os, sys, threading, time
from pathlib import Path
from hailstorm.failpoints import pause_point, pause_request

def commit():
    while not pause_request(sys.argv[1], "demo.pause", os.getpid()).exists():
        time.sleep(0.001)
    pause_point("demo.pause")
    Path(sys.argv[2]).touch()  # what the pause must come before (a transaction)

threading.Thread(target=commit).start()
threading.Event().wait(20)  # the main thread waits, as a sink's waits for frames
"""


@pytest.mark.parametrize("attempt", range(5))
def test_a_pause_point_on_another_thread_stops_it_before_it_runs_on(
    tmp_path: Path, attempt: int
) -> None:
    """A process-directed SIGSTOP is taken by the main thread, and another thread that sent
    it could run on until the main thread was scheduled; the pause stops the caller."""
    after = tmp_path / "after"
    child = subprocess.Popen([sys.executable, "-c", PAUSE_SCRIPT, str(tmp_path), str(after)],
                             env={"HAILSTORM_PAUSE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin",
                                  "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    request = pause_request(tmp_path, "demo.pause", child.pid)
    try:
        request.touch()
        _pid, status = os.waitpid(child.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status) and not request.exists()
        time.sleep(0.2)
        assert not after.exists(), "the thread ran on past its pause point"
        os.kill(child.pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        while not after.exists():
            assert time.monotonic() < deadline, "the thread did not go on after SIGCONT"
            time.sleep(0.005)
    finally:
        child.kill()
        child.wait()
