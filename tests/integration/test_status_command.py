"""``hailstorm status NAME --json`` on a live word count, and one processor's /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce, wordcount_lines
from hailstorm.metrics import parse_samples

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordcount.py"
TOPIC = "words"


def status_json(run: TopologyRun) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "hailstorm", "status", run.name, "--json", "--sample", "0.5"],
        cwd=REPO, env=run.env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def check(doc: dict, name: str, expected: set[str], target: dict, partitions: list[int],
          ) -> list[str]:
    """What is wrong with a status document of the running word count (empty: nothing)."""
    failures: list[str] = []

    def need(ok: object, what: str) -> None:
        if not ok:
            failures.append(what)

    need(doc["topology"] == name, "topology name")
    need(doc["state"] in ("Flowing", "Flowing(C)", "SpoutsPaused"), f"state {doc['state']}")
    need(doc["leader"], "a leader")
    by_id = {p["id"]: p for p in doc["processors"]}
    for pid in sorted(expected):
        p = by_id.get(pid) or {}
        need(p.get("registered") and p.get("address") and p.get("metrics_ok"),
             f"{pid} registered with an address and metrics: {p}")
        # Its own process's figures, from the two scrapes --sample apart.
        need((p.get("memory_bytes") or 0) > 0 and (p.get("cpu_percent") or 0) >= 0
             and p.get("cpu_percent") is not None, f"{pid} CPU and memory: {p}")
    committed = doc["committed"] or {"clock": {}}
    for (topic, part), offset in target.items():
        need(committed["clock"].get(f"{topic}:{part}", -1) >= offset,
             f"committed clock {committed} covers {topic}:{part}@{offset}")
    rows = {r["partition"] for r in doc["partitions"]}
    need({f"{TOPIC}:{p}" for p in partitions} <= rows, f"partitions {rows}")
    need("last stable offset" in doc["lag_note"], "the lag note")
    for role in ("spout", "bolt"):
        need(sum(p["messages_in"] or 0 for p in doc["processors"] if p["role"] == role) > 0,
             f"{role}s counted messages")
    need(any((p["state_keys"] or 0) > 0 for p in doc["processors"] if p["role"] == "bolt"),
         "bolt state keys")
    need(any(s["size_bytes"] for s in doc["snapshots"]), f"snapshot sizes {doc['snapshots']}")
    need(any(n["leader"] and n["metrics"] for n in doc["negotiators"]), "leader's metrics")
    need(any((n["rounds_committed"] or 0) > 0 for n in doc["negotiators"]),
         f"rounds committed {doc['negotiators']}")
    return failures


def test_status_shows_a_flowing_topology_and_its_metrics(
    stack_env: dict[str, str], tmp_path: Path,
) -> None:
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)

    with TopologyRun(stack, TOPOLOGY, log_dir=tmp_path / "logs") as run:
        run.start()
        run.wait_flowing(timeout=300)
        produce(stack.kafka, produced, wordcount_lines(3000, seed=11), partitions)
        target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
        run.wait_committed(target, timeout=300)
        run.wait_flowing(timeout=120)

        # Apache Kafka's log end is exact: once everything produced is committed, no
        # partition lags, by exactly zero offsets.
        rows = {r["partition"]: r for r in status_json(run)["partitions"]}
        for (topic, part), offset in target.items():
            row = rows[f"{topic}:{part}"]
            assert (row["log_end"], row["lag"], row["committed_lag"]) == (offset + 1, 0, 0), row

        expected = set(json.loads(run.zk.get(run.paths.expected)[0])["processors"])
        # Under load a processor may restart (its counts start again from 0): produce more
        # and ask again until every check holds.
        deadline = time.monotonic() + 240
        while True:
            doc = status_json(run)
            failures = check(doc, run.name, expected, target, partitions)
            if not failures or time.monotonic() > deadline:
                break
            produce(stack.kafka, produced, wordcount_lines(200, seed=12), partitions)
            time.sleep(2)
        assert not failures, failures

        bolt = max((p for p in doc["processors"] if p["role"] == "bolt"),
                   key=lambda p: p["messages_in"] or 0)
        url = f"http://{bolt['host']}:{bolt['metrics_port']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = response.read().decode()
        assert "# TYPE hailstorm_messages_in_total counter" in text
        assert "# TYPE hailstorm_batch_seconds summary" in text
        samples = {name: (labels, value) for name, labels, value in parse_samples(text)}
        labels, value = samples["hailstorm_messages_in_total"]
        assert labels == {"processor": bolt["id"], "topology": run.name}
        assert value > 0
        labels, value = samples["process_cpu_seconds_total"]
        assert labels == {"processor": bolt["id"], "topology": run.name}
        assert value > 0
        assert samples["hailstorm_batch_seconds_count"][1] > 0

        # Rounds are barriers: each spout marked them in its streams and never stopped.
        spout = next(p for p in doc["processors"] if p["role"] == "spout")
        url = f"http://{spout['host']}:{spout['metrics_port']}/metrics"

        def rounds() -> dict[str, float]:
            with urllib.request.urlopen(url, timeout=5) as response:
                return {labels["how"]: value for name, labels, value
                        in parse_samples(response.read().decode())
                        if name == "hailstorm_spout_rounds_total"}

        deadline = time.monotonic() + 60
        while not rounds().get("marked") and time.monotonic() < deadline:
            time.sleep(0.5)  # a spout that restarted counts from 0
        answered = rounds()
        assert answered.get("marked", 0) > 0 and "paused" not in answered, answered

        # The human form renders too.
        result = subprocess.run(
            [sys.executable, "-m", "hailstorm", "status", run.name, "--sample", "0"],
            cwd=REPO, env=run.env, capture_output=True, text=True, timeout=60, check=False,
        )
        assert result.returncode == 0, result.stderr
        assert run.name in result.stdout and "processors" in result.stdout
