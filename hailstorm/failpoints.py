"""Failpoints: named places where a test can make a processor die on purpose.

Some crash windows are too narrow to hit with a random ``kill -9`` (a sink that committed its
table but has not told ZooKeeper yet). ``HAILSTORM_FAILPOINTS="sink.after_commit@3"`` makes
the process SIGKILL itself the third time it passes :func:`failpoint("sink.after_commit")`.
Each failpoint fires once per ``HAILSTORM_FAILPOINTS_DIR`` (a marker file records that it
fired, so the restarted processor runs on); without that directory it fires once per process.
Unset, a failpoint costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

FAILPOINTS_VAR = "HAILSTORM_FAILPOINTS"
FAILPOINTS_DIR_VAR = "HAILSTORM_FAILPOINTS_DIR"


def parse(spec: str) -> dict[str, int]:
    """``"a@3,b"`` -> ``{"a": 3, "b": 1}`` (fire on the Nth hit)."""
    armed: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, nth = item.partition("@")
        count = int(nth) if nth else 1
        if count < 1:
            raise ValueError(f"failpoint {name!r}: the hit to fire on must be >= 1")
        armed[name] = count
    return armed


_ARMED = parse(os.environ.get(FAILPOINTS_VAR, ""))
_HITS: dict[str, int] = {}


def failpoint(name: str) -> None:
    """Die here (SIGKILL, no clean-up) if the failpoint ``name`` is armed and due."""
    nth = _ARMED.get(name)
    if nth is None:
        return
    _HITS[name] = hits = _HITS.get(name, 0) + 1
    if hits < nth:
        return
    del _ARMED[name]
    directory = os.environ.get(FAILPOINTS_DIR_VAR)
    if directory:
        marker = Path(directory) / name
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            with open(marker, "x"):
                pass
        except FileExistsError:
            return  # another incarnation already fired it
    os.kill(os.getpid(), signal.SIGKILL)
