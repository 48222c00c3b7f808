"""The driver's class archive, with a real driver: the first run writes it, the next maps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import StackAddresses, TopologyRun

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordcount.py"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def mapping(pids: list[int], path: Path) -> list[int]:
    """Those of ``pids`` that have ``path`` mapped."""
    mapped = []
    for pid in pids:
        try:
            if str(path) in Path(f"/proc/{pid}/maps").read_text():
                mapped.append(pid)
        except OSError:
            continue
    return mapped


def test_the_first_run_writes_the_class_archive_and_the_next_maps_it(
    stack_env: dict[str, str], tmp_path: Path,
) -> None:
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, "words", 2)
    archives = tmp_path / "cache" / "jvm"
    for attempt in ("writes", "maps"):
        with TopologyRun(stack, TOPOLOGY, log_dir=tmp_path / attempt, negotiators=1) as run:
            run.env["HAILSTORM_CACHE"] = str(tmp_path / "cache")
            run.start()
            run.wait_flowing(timeout=300)
            written = sorted(archives.glob("*.jsa"))
            if attempt == "writes":
                assert written == [], "the JVM writes the archive when it exits, not before"
            else:
                (archive,) = written
                jvms = mapping(descendants(run.procs["driver"].pid), archive)
                assert len(jvms) == 1, f"one process (the driver's JVM) maps {archive}"
        log = (tmp_path / attempt / "driver.log").read_text()
        if attempt == "writes":
            assert "wrote the driver's class archive" in log, log[-3000:]
        else:
            assert "class archive" not in log, "the second run only maps the archive"
        left = list(archives.iterdir())
        assert [p.suffix for p in left] == [".jsa"], f"the archive alone, no partial: {left}"
        assert archives.stat().st_mode & 0o777 == 0o700
