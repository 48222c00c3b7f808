"""Topology deployments for the runtime tests: stopped afterwards even on failure, with the
tail of every process's log printed for the test report."""

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
