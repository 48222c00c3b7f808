"""Failpoints: named places where a test can make a processor die on purpose.

Some crash windows are too narrow to hit with a random ``kill -9`` (a sink that committed its
table but has not told ZooKeeper yet). ``HAILSTORM_FAILPOINTS="sink.after_commit@3"`` makes
the process SIGKILL itself the third time it passes :func:`failpoint("sink.after_commit")`.
Each failpoint fires once per ``HAILSTORM_FAILPOINTS_DIR`` (a marker file records that it
fired, so the restarted processor runs on); without that directory it fires once per process.
Unset, a failpoint costs one dictionary lookup.

Pause points stop a process instead (SIGSTOP), when a test asks that very process to by
creating a file (:func:`pause_point`): the chaos harness makes zombie sinks this way.
"""

from __future__ import annotations

import os
import signal
import threading
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


PAUSE_DIR_VAR = "HAILSTORM_PAUSE_DIR"
_PAUSE_DIR = os.environ.get(PAUSE_DIR_VAR)


def pause_request(directory: str | Path, name: str, pid: int) -> Path:
    """The file that asks process ``pid`` to stop at :func:`pause_point` ``name``."""
    return Path(directory) / f"{name}.{pid}"


def pause_point(name: str) -> None:
    """Stop here (SIGSTOP to itself) if a test asked this process to, with the file
    :func:`pause_request` names in ``$HAILSTORM_PAUSE_DIR`` (removed first); the test
    resumes it with SIGCONT. A zombie made this way is stopped exactly where its pause
    hurts most. Unset, a pause point costs one comparison.

    The signal goes to the calling thread (``pthread_kill``), which stops before it
    returns; the whole process stops with it. Sent to the process (``kill``), Linux hands
    it to the main thread, and a pause point on another thread (a sink's commit) would
    run on until the main thread was scheduled, into the transaction it was to stop
    before."""
    if _PAUSE_DIR is None:
        return
    try:
        pause_request(_PAUSE_DIR, name, os.getpid()).unlink()
    except FileNotFoundError:
        return
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
