"""Topology deployments for the runtime tests: stopped afterwards even on failure, with the
tail of every process's log printed for the test report; and where a secret must not be."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hailstorm.harness import StackAddresses, TopologyRun

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "topologies" / "wordcount.py"


@contextlib.contextmanager
def deployed(stack: StackAddresses, topology: Path, log_dir: Path,
             **options: Any) -> Iterator[TopologyRun]:
    """A :class:`TopologyRun` of ``topology`` (not started: the test starts it)."""
    with TopologyRun(stack, topology, log_dir=log_dir, **options) as run:
        try:
            yield run
        finally:
            run.stop()
            for label, text in run.logs().items():
                print(f"--- {label}.log (tail)\n{text[-3000:]}")


def command_lines() -> list[str]:
    """The command line of every process of this host (what ``ps`` shows anyone)."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue
    return lines


def assert_secret_hidden(secret: str, run: TopologyRun, *outputs: str) -> None:
    """``secret`` is on no command line, in no file under the run's log directory, and in
    none of ``outputs`` (e.g. ``hailstorm status``)."""
    assert secret
    assert not [line for line in command_lines() if secret in line]
    for path in run.log_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the secret is in {path}"
    for output in outputs:
        assert secret not in output
