"""A budget for bad records on the real runtime: a deployment quarantining 40% of its
records (under a 50% budget) logs a few lines a minute, not one per record, and
``hailstorm status`` names the bolt past half its budget; once every record fails, the
topology halts at the budget with the reason :func:`run_model` predicts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from deployments import REPO

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce, wait_for
from hailstorm.dev.harness.producing import BackgroundProducer
from hailstorm.model import RecordHalt, run_model

pytestmark = pytest.mark.integration

BUDGET = '''
"""Per-user totals whose lift raises on an event without an amount."""
from hailstorm import Quarantine, Sum, Table, Topology, per_key

topology = Topology("budget", dead_letter="{topic}.dead-letter",
                    on_error=Quarantine(max_bad=0.5, window=1000))
events = topology.spout("events", topic="{topic}", decoder="json")
totals = topology.bolt("totals", inputs=[events], key=lambda e: e["user"],
                       state=per_key(Sum()), lift=lambda e: e["amount"],
                       emit=lambda e, total: [(e["user"], total)])
topology.sink("user_totals", inputs=[totals], target=Table(
    "budget_totals", columns={{"user_id": "text", "total": "bigint"}}, key=["user_id"]))
'''

QUARANTINING_SECONDS = 20.0
RATE = 400.0


def _event(i: int, bad: bool) -> bytes:
    event: dict[str, object] = {"user": f"u{i % 50}"}
    if not bad:
        event["amount"] = 1 + i % 7
    return json.dumps(event).encode()


def _log_lines(log_dir: Path, since: dict[Path, int] | None = None) -> dict[Path, list[bytes]]:
    """The lines of each log of the run (after the first ``since[path]``)."""
    return {path: path.read_bytes().splitlines()[(since or {}).get(path, 0):]
            for path in sorted(log_dir.glob("*.log"))}


def _log_bytes(lines: list[bytes]) -> tuple[int, int]:
    """Bytes of the run's log lines, and of those about quarantined records."""
    return (sum(len(line) + 1 for line in lines),
            sum(len(line) + 1 for line in lines if b"quarantined" in line))


def _heaviest(lines: list[bytes], n: int = 4) -> str:
    """The kinds of line (their text without digits, cut) that take the most bytes."""
    kinds: Counter[str] = Counter()
    for line in lines:
        text = line.decode(errors="replace")
        text = text.split("] ", 1)[-1] if "] " in text else text.split(": ", 1)[-1]
        kinds[re.sub(r"[0-9]+", "N", text)[:70]] += len(line) + 1
    return "; ".join(f"{size:,} B: {kind}" for kind, size in kinds.most_common(n))


def test_a_deployment_failing_on_every_record_halts_at_its_budget_and_logs_little(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"budget-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, 1)
    module = tmp_path / f"budget_{uuid.uuid4().hex[:8]}.py"
    module.write_text(BUDGET.format(topic=topic))
    produced = Produced(topic)
    log_dir = tmp_path / "logs"
    with TopologyRun(stack, module, log_dir=log_dir,
                     database=f"sqlite:///{tmp_path}/budget.db") as run:
        kafka.create_topic(stack.kafka, run.topology.dead_letter_topic, 1)
        run.start()
        run.wait_flowing(240)

        # 2 of every 5 records fail: 400 of any 1,000, under the budget of 500.
        count = int(QUARANTINING_SECONDS * RATE)
        values = [_event(i, bad=i % 5 in (1, 3)) for i in range(count)]
        seen = {path: len(lines) for path, lines in _log_lines(log_dir).items()}
        started = time.monotonic()
        with BackgroundProducer(stack.kafka, produced, values, [0], RATE) as producer:
            producer.join(QUARANTINING_SECONDS + 60)
        target = {(topic, 0): produced.last_offsets()[0]}
        run.wait_committed(target, 120)
        minutes = (time.monotonic() - started) / 60
        lines = [line for new in _log_lines(log_dir, seen).values() for line in new]
        grown, quarantine = _log_bytes(lines)
        per_minute, quarantine_per_minute = grown / minutes, quarantine / minutes
        print(f"\nwhile quarantining {2 * count // 5:,} of {count:,} records in "
              f"{minutes * 60:.0f} s: the run's logs grew {per_minute:,.0f} bytes a minute, "
              f"{quarantine_per_minute:,.0f} of them about quarantined records; the heaviest "
              f"lines: {_heaviest(lines)}")
        assert quarantine_per_minute < 3_000, quarantine_per_minute

        # Status names the bolt: 400 of its last 1,000 records, 80% of its budget.
        status = subprocess.run(
            [sys.executable, "-m", "hailstorm", "status", run.name, "--json", "--sample", "0"],
            cwd=REPO, env=run.env, capture_output=True, text=True, timeout=60, check=True)
        problems = json.loads(status.stdout)["problems"]
        assert [p for p in problems if p.startswith("bolt:totals:0: 400 of its last 1,000 "
                                                    "records were bad (40.00%), 80% of its "
                                                    "budget for bad records")], problems

        # Now every record fails: the 101st past the 400 goes over the budget.
        produce(stack.kafka, produced, [_event(i, bad=True) for i in range(300)], [0])
        driver = run.procs["driver"]
        wait_for("the driver to stop", lambda: driver.poll() is not None, 240, poll=0.5)
        assert driver.returncode == 1
        with pytest.raises(RecordHalt) as predicted:
            run_model(run.topology, produced.model_messages())
        errors = [line for line in run.log("driver").splitlines() if line.startswith("error:")]
        assert errors == [f"error: {predicted.value}"]
        assert str(predicted.value).startswith(
            "totals: 501 of the last 1,000 records at bolt:totals:0 failed (50.10%), more than "
            "on_error=Quarantine(max_bad=0.5, window=1000) allows (500 of any 1,000); errors: "
            "lift KeyError: 'amount' (")
        assert f" times, first at {topic}:0:1). Fix the function" in str(predicted.value)
