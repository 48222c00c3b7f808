"""Stopping is a state: ``hailstorm stop`` drains a running word count to ``Stopped`` (a last
round commits what was read, the driver ends by itself), the console shows it stopped (not
recovering: a screenshot in headless Chromium), the next ``hailstorm run`` starts from there
as a start (zero recoveries), and SIGTERM of ``hailstorm run`` drains the same way. The
table is exactly the model's after each stop. Real ZooKeeper, Kafka, Spark."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deployments import (
    CHROMIUM,
    CHROMIUM_ARGS,
    REPO,
    WORDCOUNT,
    console_ui,
    deployed,
    keep_screenshots,
    page_instances,
)

from hailstorm import kafka
from hailstorm.dev.harness import (
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.model import run_model
from hailstorm.protocol.layout import Stopped

pytestmark = pytest.mark.integration

TOPIC = "words"


def hailstorm(run: TopologyRun, *args: str, timeout: float = 120,
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hailstorm", *args], cwd=REPO, env=run.env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def status_json(run: TopologyRun) -> dict[str, Any]:
    result = hailstorm(run, "status", run.name, "--json", "--sample", "0")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def flowing_status(run: TopologyRun) -> dict[str, Any] | None:
    doc = status_json(run)
    return doc if doc["state"] == "Flowing" else None


def assert_table_is_the_models(run: TopologyRun, produced: Produced) -> None:
    committed = run.committed()
    assert committed is not None
    assert dict(committed.clock) == {(TOPIC, p): o for p, o in produced.last_offsets().items()}
    model = run_model(run.topology, produced.model_messages())
    assert run.sink_tables()["word_counts"] == model.table("word_counts")


def assert_console_shows_stopped(run: TopologyRun, shots: Path) -> None:
    """``hailstorm ui`` shows the stopped topology as stopped: the state, every instance."""
    from playwright.sync_api import sync_playwright

    expected = sorted(json.loads(run.zk.get(run.paths.expected)[0])["processors"])
    shots.mkdir()
    with console_ui(run) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_selector("body[data-loaded=true]", timeout=30_000)
            wait_for("every instance stopped on the page",
                     lambda: sorted(page_instances(page)) == expected
                     and set(page_instances(page).values()) == {"stopped"}, 30)
            page.screenshot(path=shots / "console-stopped.png", full_page=True)
            assert page.inner_text("#state") == "Stopped"
            assert page.get_attribute("#state", "data-phase") == "stopped"
            phases = page.eval_on_selector_all(
                "#instances [data-instance-row]", "rows => rows.map(r => r.dataset.phase)")
            assert phases and set(phases) == {"stopped"}, phases
            assert "recovering" not in page.inner_text("#instances tbody")
            headers = page.eval_on_selector_all("#instances thead th",
                                                "cells => cells.map(c => c.textContent)")
            assert {"keys held", "rows committed", "late"} <= set(headers), headers
        finally:
            browser.close()
    keep_screenshots(shots)


def run_driver(run: TopologyRun) -> None:
    run.spawn("driver", ["-m", "hailstorm", "run", run.topology_ref, "--name", run.name])


def test_stop_then_run_again_is_a_stop_and_a_start(stack_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, TOPIC, 2)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    # Nothing fails here, so no phase is stuck: a long --timeout keeps a slow first start on
    # a loaded machine (processors registering after 30 s) from counting as a recovery.
    with deployed(stack, WORDCOUNT, tmp_path / "logs", negotiators=1, timeout=120.0) as run:
        produce(stack.kafka, produced, wordcount_lines(3000, seed=21), partitions)
        run.start()
        run.wait_flowing(timeout=300)
        # More lines while it flows: the stop must commit what was read of them, and the
        # rest is read by the next run.
        produce(stack.kafka, produced, wordcount_lines(2000, seed=22), partitions)

        stopped = hailstorm(run, "stop", run.name, "--timeout", "90")
        assert stopped.returncode == 0, stopped.stderr
        assert f"{run.name}: Stopped(" in stopped.stdout, stopped.stdout
        assert run.procs["driver"].wait(90) == 0, run.log("driver")[-3000:]
        master = run.master()
        assert master is not None and isinstance(master.state, Stopped)
        assert master.state.by.startswith("hailstorm stop (")
        committed = run.committed()
        assert committed is not None and master.state.clock == committed.clock
        doc = status_json(run)
        assert (doc["state"], doc["stopped"]) == ("Stopped", True)
        assert doc["master"]["stopped_by"] == master.state.by
        assert {p["registered"] for p in doc["processors"]} == {False}, "they all left"
        # Quiet: no third-party noise in the run's output (librdkafka's retries, Spark's
        # hostname lookup), one line per sink round.
        output = run.log("driver")
        assert "Coordinator load in progress" not in output
        assert "resolves to a loopback address" not in output
        assert "[Stage 0:" not in output and "Closing down clientserver" not in output
        rounds = re.findall(r"round (\d+): table committed through", output)
        assert rounds and len(rounds) == len(set(rounds)), rounds
        assert_console_shows_stopped(run, tmp_path / "screenshots")
        assert doc["recovery_count"] == 0, doc["recoveries"]

        produce(stack.kafka, produced, wordcount_lines(1000, seed=23), partitions)
        run_driver(run)
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        run.wait_committed(target, timeout=300)
        # Snapshot rounds come every second: ask until status catches Flowing between two.
        doc = wait_for("status to show Flowing", lambda: flowing_status(run), 60, run.alive)
        assert doc["stopped"] is False
        assert doc["recovery_count"] == 0, doc["recoveries"]
        assert [n["recoveries"] for n in doc["negotiators"]] == [0]
        starts = [r for r in doc["recoveries"] if r["start"]]
        assert [r["previous"].split("(")[0] for r in starts] == [
            "NegotiatorDisconnected", "Stopped"], doc["recoveries"]
        assert_table_is_the_models(run, produced)

        # SIGTERM (Ctrl-C alike) drains too: the driver ends by itself, Stopped.
        run.procs["driver"].send_signal(signal.SIGTERM)
        assert run.procs["driver"].wait(90) == 0, run.log("driver")[-3000:]
        master = run.master()
        assert master is not None and isinstance(master.state, Stopped), master
        assert "signal" in master.state.by
        assert status_json(run)["recovery_count"] == 0
        assert_table_is_the_models(run, produced)
