"""Topology deployments for the runtime tests: stopped afterwards even on failure, with the
tail of every process's log printed for the test report; and where a secret must not be."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hailstorm import kafka
from hailstorm.dev.harness import (
    BackgroundProducer,
    BoltStates,
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "topologies" / "wordcount.py"
CHROMIUM = "/usr/bin/chromium"
# As root in a sandbox without a network: no sandbox, and none of Chromium's own traffic.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]


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


@dataclass
class KilledRun:
    """What :func:`run_killing_a_spout_then_a_bolt` left: the run (stopped), what it was
    given, and what it committed at the end."""

    run: TopologyRun
    produced: Produced
    states: dict[str, BoltStates]
    tables: dict[str, Any]


def run_killing_a_spout_then_a_bolt(
    stack: StackAddresses, module: Path, topic: str, first: list[bytes], second: list[bytes],
    log_dir: Path,
    check: Callable[[TopologyRun, dict[Any, int], Produced], None] | None = None,
    settle: bool = False,
) -> KilledRun:
    """Run ``module`` on ``topic``: produce ``first``; once a round committed it, kill a
    spout (its rewind must rebuild what depends on those records, e.g. stream times); then
    produce ``second`` at 800/s and kill a bolt half way. Every kill must be followed by a
    recovery and a commit; the end is a committed round covering every offset, checked by
    ``check(run, clock, produced)`` before the run stops. ``settle``: read the states of
    the round the negotiator takes after the covering one (no new data: the same clock
    and model) once it stood idle (a round skipped since confirmed it), so that work a
    bolt does after the last tuple (a sweep of closed windows) is in them."""
    partitions = kafka.partitions_of(stack.kafka, topic)
    produced = Produced(topic)
    with TopologyRun(stack, module, log_dir=log_dir) as run:
        run.start()
        run.wait_flowing(240)
        produce(stack.kafka, produced, first, partitions)
        run.wait_committed({(topic, p): o for p, o in produced.last_offsets().items()}, 240)
        killed = run.kill_processor(role="spout", rng=random.Random(3))
        run.require_recovery(killed, 180)
        with BackgroundProducer(stack.kafka, produced, second, partitions,
                                rate=800) as producer:
            wait_for("half of the views", lambda: producer.sent >= len(second) // 2, 60)
            killed = run.kill_processor(role="bolt", rng=random.Random(4),
                                         epoch=killed.epoch + 1)
            run.require_recovery(killed, 180, producer)
            producer.join(120)
        target = {(topic, p): o for p, o in produced.last_offsets().items()}
        committed = run.wait_committed(target, 240)
        assert dict(committed.clock) == target
        if settle:  # a round is skipped only after one at its previous round's clock
            committed = wait_for(
                "the round after the last records, then a skipped one",
                lambda: (c if (c := run.committed()) is not None
                         and c.confirmed_at is not None else None), 120, run.alive)
            assert dict(committed.clock) == target
            assert committed.previous is not None and committed.previous.clock == target
        states = run.committed_bolt_states(committed)
        tables = run.sink_tables()
        run.check_recoveries()
        restarts = [r for r in run.recoveries() if not r.is_start]
        assert len(restarts) >= 2, f"the kills caused {len(restarts)} recoveries"
        if check is not None:
            check(run, target, produced)
    return KilledRun(run, produced, states, tables)


def hailstorm_command(stack: StackAddresses, *args: str, timeout: float = 120.0,
                      extra_env: Mapping[str, str] | None = None,
                      ) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m hailstorm ARGS`` against ``stack`` (its services in the environment,
    and ``extra_env``): the finished process and how many seconds it took.

    Past ``timeout``, or when the test itself is interrupted (pytest-timeout, Ctrl-C), the
    command gets a SIGTERM first, so that what it started (``hailstorm chaos``: negotiators,
    a driver, Spark workers) is stopped by it, and a SIGKILL only 30 s later."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable,
               HAILSTORM_ZK=stack.zk, HAILSTORM_KAFKA=stack.kafka,
               HAILSTORM_SNAPSHOTS=str(stack.snapshots), **(extra_env or {}))
    command = [sys.executable, "-m", "hailstorm", *args]
    started = time.monotonic()
    with subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:
            proc.terminate()
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            raise
    done = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    return done, time.monotonic() - started


@contextlib.contextmanager
def console_ui(run: TopologyRun) -> Iterator[str]:
    """``hailstorm ui`` serving ``run``'s topology (sampling every 0.5 s) until the block
    ends; yields the URL it announced."""
    ui = subprocess.Popen(
        [sys.executable, "-m", "hailstorm", "ui", run.name, "--port", "0", "--interval", "0.5"],
        cwd=REPO, env=run.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        announced: list[str] = []
        reader = threading.Thread(
            target=lambda: announced.extend(iter(ui.stderr.readline, "")),  # type: ignore[union-attr]
            daemon=True)
        reader.start()
        line = wait_for("the console's URL", lambda: next(
            (x for x in announced if "http://" in x), None) or ui.poll() is not None, 60)
        assert ui.poll() is None, f"hailstorm ui exited: {''.join(announced)}"
        match = re.search(r"http://\S+/", str(line))
        assert match, line
        yield match.group(0)
    finally:
        ui.terminate()
        try:
            ui.wait(10)
        except subprocess.TimeoutExpired:
            ui.kill()
            ui.wait(10)


def page_instances(page: Any) -> dict[str, str]:
    """The console page's instances in its graph: processor id -> phase shown."""
    return dict(page.eval_on_selector_all(
        "#dag [data-instance]", "nodes => nodes.map(n => [n.dataset.instance, n.dataset.phase])"))


def keep_screenshots(shots: Path) -> None:
    """Copy the screenshots in ``shots`` to ``$HAILSTORM_CONSOLE_SCREENSHOTS`` when it is set
    (``docs/images`` holds the ones the docs show)."""
    keep = os.environ.get("HAILSTORM_CONSOLE_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy(shot, Path(keep) / shot.name)


def hailstorm_plan(stack: StackAddresses, module: str | Path, name: str, *args: str
                   ) -> tuple[int, str]:
    """``hailstorm plan MODULE --name NAME ARGS`` in this process: its exit code and output."""
    from click.testing import CliRunner

    from hailstorm.cli import main

    env = {"HAILSTORM_ZK": stack.zk, "HAILSTORM_SNAPSHOTS": str(stack.snapshots)}
    result = CliRunner().invoke(main, ["plan", str(module), "--name", name, *args], env=env)
    return result.exit_code, result.output
