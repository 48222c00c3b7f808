"""``hailstorm ui`` in headless Chromium against a running word count.

The page must load, show every processor instance and edge, show rates that move, list a
dead letter with its reason, and show a SIGKILLed bolt recovering (or, when its recovery
was shorter than a sample, the recovery listed, naming it) and then flowing again. Set
``HAILSTORM_CONSOLE_SCREENSHOTS=DIR`` to keep the screenshots (``docs/images`` holds the
ones ``docs/operations.md`` shows).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployments import (
    CHROMIUM,
    CHROMIUM_ARGS,
    WORDCOUNT,
    console_ui,
    keep_screenshots,
    page_instances,
)

from hailstorm import kafka
from hailstorm.dev.harness import (
    BackgroundProducer,
    Produced,
    StackAddresses,
    TopologyRun,
    produce,
    wait_for,
    wordcount_lines,
)

pytestmark = pytest.mark.integration

TOPIC = "words"


@pytest.fixture
def console(stack_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[TopologyRun, str]]:
    """A flowing word count and ``hailstorm ui`` serving it; yields the run and the URL."""
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    # The word count under a name of its own: its dead letters (the test quarantines a
    # line) go to a topic no other test reads.
    source = WORDCOUNT.read_text()
    assert source.count('Topology("wordcount")') == 1
    module = tmp_path / "console_wordcount.py"
    module.write_text(source.replace('Topology("wordcount")', 'Topology("console_wordcount")'))
    with TopologyRun(stack, module, log_dir=tmp_path / "logs") as run:
        run.start()
        run.wait_flowing(timeout=300)
        with console_ui(run) as url:
            yield run, url


def test_console_shows_a_running_word_count_through_a_killed_bolt(
    console: tuple[TopologyRun, str], tmp_path: Path,
) -> None:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: run scripts/bootstrap.sh"
    run, url = console
    expected = sorted(json.loads(run.zk.get(run.paths.expected)[0])["processors"])
    partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    produced = Produced(TOPIC)
    with BackgroundProducer(run.stack.kafka, produced, wordcount_lines(400_000, seed=5),
                            partitions, rate=2_500), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            page.goto(url)
            page.wait_for_selector("body[data-loaded=true]", timeout=30_000)

            def instances() -> dict[str, str]:
                return page_instances(page)

            # Every instance of the deployment, every edge of the topology.
            wait_for("every instance flowing on the page",
                     lambda: sorted(instances()) == expected
                     and set(instances().values()) == {"flowing"}, 60, run.alive)
            edges = page.eval_on_selector_all("#dag path[data-edge]",
                                              "nodes => nodes.map(n => n.dataset.edge)")
            assert sorted(edges) == ["counts->word_counts", "lines->counts"]

            def rates() -> list[str]:
                return [str(x) for x in page.eval_on_selector_all(
                    "[data-edge-rate], [data-rate-in]", "nodes => nodes.map(n => n.textContent)")]

            def moving() -> list[str] | None:
                values = rates()
                return values if any(re.search(r"[1-9]", v) for v in values) else None

            first = wait_for("non-zero rates", moving, 60, run.alive)
            # Each instance's process: its CPU between two samples, its resident memory.
            cells = page.eval_on_selector_all("[data-cpu], [data-memory]",
                                              "nodes => nodes.map(n => n.textContent)")
            assert len(cells) == 2 * len(expected), cells
            assert all(c.endswith((" %", " MiB")) for c in cells), cells
            page.screenshot(path=shots / "console-flowing-1.png", full_page=True)
            second = wait_for("the rates to change", lambda: (
                time.sleep(1.0), rates())[1] != first and rates(), 30, run.alive)
            page.screenshot(path=shots / "console-flowing-2.png", full_page=True)
            assert second != first
            rounds = page.eval_on_selector_all("#rounds [data-round-row]",
                                               "nodes => nodes.length")
            assert rounds > 0, "committed rounds are listed"

            # A record that is not UTF-8 is quarantined: the page lists it with its reason.
            poison = Produced(TOPIC)
            produce(run.stack.kafka, poison, [b"\xff\xfe not text"], partitions[:1])
            ((number, offset),) = poison.last_offsets().items()
            source = f"{TOPIC}:{number}:{offset}"
            letter = wait_for(f"the dead letter of {source} on the page", lambda: next(
                (line for line in page.inner_text("#dead-letters tbody").splitlines()
                 if source in line), None), 90, run.alive)
            assert "utf-8" in letter.lower() and "decode" in letter, letter
            page.screenshot(path=shots / "console-dead-letter.png", full_page=True)
            assert page.inner_text("#dead-letter-topics") == "console_wordcount.dead-letter"
            # The total is the processors' counters, sampled at the console's interval: a
            # sample after the dead letter's commit counts it.
            wait_for("the dead-letter total to count it", lambda: int(
                page.inner_text("#dead-letter-total").replace(",", "")) >= 1, 30, run.alive)

            # A SIGKILLed bolt: recovering, then flowing again. Its recovery may now be
            # shorter than the console's sampling interval (the bolt restarts in its own
            # task), so the page must show either the bolt recovering or, at the latest, a
            # new row of the recovery table naming it.
            def recovery_rows() -> dict[int, str]:
                return {int(epoch): text for epoch, text in page.eval_on_selector_all(
                    "#recoveries [data-recovery]",
                    "nodes => nodes.map(n => [n.dataset.recovery, n.innerText])")}

            before = max(recovery_rows(), default=0)
            fault = run.kill_processor(role="bolt")
            victim = fault.target

            def shown() -> str | None:
                if instances().get(victim) in ("recovering", "dead"):
                    return "phase"
                rows = [text for epoch, text in recovery_rows().items() if epoch > before]
                return "row" if any(victim in text for text in rows) else None

            seen = wait_for(f"{victim} recovering, or its recovery listed, on the page",
                            shown, 120, poll=0.1)
            if seen == "phase":
                page.screenshot(path=shots / "console-recovering.png", full_page=True)
            wait_for("every instance flowing again",
                     lambda: sorted(instances()) == expected
                     and set(instances().values()) == {"flowing"}, 240)
            wait_for(f"the recovery of {victim} listed on the page", lambda: any(
                victim in text for epoch, text in recovery_rows().items() if epoch > before),
                60)
            recoveries = page.inner_text("#recoveries tbody")
            assert "start" in recoveries and len(recoveries.splitlines()) >= 2, recoveries
            page.screenshot(path=shots / "console-recovered.png", full_page=True)
        finally:
            browser.close()
    keep_screenshots(shots)
