"""Processor entry points for the Spark runner tests (imported by the Python workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def record_pid_and_wait(assignment: tuple[str, int]) -> None:
    """Write ``<dir>/<instance>.<pid>`` and wait until ``<dir>/stop`` exists."""
    directory, instance = assignment
    Path(directory, f"{instance}.{os.getpid()}").touch()
    while not Path(directory, "stop").exists():
        time.sleep(0.1)
