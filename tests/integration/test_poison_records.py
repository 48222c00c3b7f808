"""Poison records on the real runtime: every stage's bad record is quarantined (the
dead-letter topic, ``<table>_rejected``), the topology keeps committing with no restart,
and the committed state, tables and quarantine are what :func:`run_model` predicts; with
``on_error="fail"`` the first one stops the topology with its reason."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from deployments import REPO, assert_secret_hidden, command_lines
from kazoo.exceptions import NoNodeError

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce, wait_for
from hailstorm.dev.services import pid_alive
from hailstorm.model import run_model
from hailstorm.quarantine import VALUE_LIMIT
from hailstorm.sinks.db import Database

pytestmark = pytest.mark.integration

PARTITIONS = 3

POISON = '''
"""Per-user totals and counts whose functions each refuse some records."""
from hailstorm import Count, Sum, Table, Topology, per_key

topology = Topology("poison", on_error="{on_error}", dead_letter="{topic}.dead-letter")


def explode(event):  # a generator: it raises while its items are taken
    if event.get("explode") == "boom":
        raise ValueError("explode boom")
    yield event


def emit(event, total):
    if event["user"] == "emit-bad":
        raise RuntimeError("emit refuses")
    return [(event["user"], total)]


def row(t):
    if t[0] == "row-bad":
        raise ValueError("no row for row-bad")
    return {{"user_id": t[0], "total": t[1]}}


events = topology.spout("events", topic="{topic}", decoder="json", explode=explode)
totals = topology.bolt("totals", inputs=[events], key=lambda e: e["user"],
                       state=per_key(Sum()), lift=lambda e: e["amount"], emit=emit,
                       parallelism=2)
topology.sink("user_totals", inputs=[totals], target=Table(
    "poison_totals", columns={{"user_id": "text", "total": "bigint"}}, key=["user_id"],
    row=row))
counts = topology.bolt("counts", inputs=[events], key=lambda e: e["user"],
                       state=per_key(Count()), lift=lambda e: 1,
                       emit=lambda e, n: [(e["user"], n)], preaggregate=True)
topology.sink("user_counts", inputs=[counts], target=Table(
    "poison_counts", columns={{"user_id": "text", "events": "bigint"}}, key=["user_id"]))
'''

OVERSIZED = b'{"user": ' + b"x" * 1_500_000  # malformed JSON over Kafka's default 1 MB


def _module(tmp_path: Path, topic: str, on_error: str) -> Path:
    module = tmp_path / f"poison_{uuid.uuid4().hex[:8]}.py"
    module.write_text(POISON.format(topic=topic, on_error=on_error))
    return module


def _events(n: int, seed: int) -> list[bytes]:
    """Good events with every kind of poison mixed in (about 1 in 50)."""
    rng = random.Random(seed)
    poison = [
        b"{not json",                                    # decode
        json.dumps({"user": "u1", "amount": 1, "explode": "boom"}).encode(),  # explode
        json.dumps({"amount": 3}).encode(),              # key (both bolts)
        json.dumps({"user": "u2"}).encode(),             # lift (totals)
        json.dumps({"user": "u3", "amount": 2.5}).encode(),  # monoid: a long Sum
        json.dumps({"user": "emit-bad", "amount": 4}).encode(),  # emit (totals)
        json.dumps({"user": "row-bad", "amount": 5}).encode(),   # the sink's row
        json.dumps({"user": "db-bad", "amount": 6}).encode(),    # the table's CHECK
    ]
    values = []
    for i in range(n):
        if rng.random() < 0.02:
            values.append(poison[i % len(poison)])
        else:
            values.append(json.dumps({"user": f"u{rng.randrange(500)}",
                                      "amount": rng.randrange(1, 100)}).encode())
    return values


def _dead_letters(bootstrap: str, topic: str) -> Counter[tuple[str, str, int, int]]:
    """The dead letters a read_committed consumer sees: (node, stage, partition, offset)."""
    end = kafka.log_ends(bootstrap, [(topic, 0)])[(topic, 0)]
    seen: Counter[tuple[str, str, int, int]] = Counter()
    for letter in kafka.read_range(bootstrap, topic, 0, 0, end - 1):
        h = letter.headers or {}
        seen[(h["hailstorm.node"].decode(), h["hailstorm.stage"].decode(),
              int(h["hailstorm.partition"]), int(h["hailstorm.offset"]))] += 1
    return seen


def _create_checked_table(url: str) -> None:
    """The totals table as hailstorm would make it, plus a CHECK it does not know of."""
    db = Database(url)
    try:
        with db.transaction() as tx:
            tx.execute("CREATE TABLE poison_totals (user_id text NOT NULL, total bigint, "
                       "PRIMARY KEY (user_id), CONSTRAINT no_db_bad CHECK (user_id <> 'db-bad'))")
    finally:
        db.close()


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    db = Database(url)
    try:
        with db.transaction() as tx:
            return tx.execute(sql)
    finally:
        db.close()


def test_every_poison_record_is_quarantined_and_the_rest_is_exact(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"poison-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, PARTITIONS, config={"max.message.bytes": "3000000"})
    partitions = kafka.partitions_of(stack.kafka, topic)
    produced = Produced(topic)
    big = kafka.producer(stack.kafka, **{"message.max.bytes": 3_000_000})
    with TopologyRun(stack, _module(tmp_path, topic, "quarantine"),
                     log_dir=tmp_path / "logs") as run:
        kafka.create_topic(stack.kafka, run.topology.dead_letter_topic, 1)
        _create_checked_table(run.database)
        produce(stack.kafka, produced, _events(4_000, seed=1), partitions)
        run.start()
        first = wait_for("a first commit", run.committed, 240, run.alive)
        produce(stack.kafka, produced, [OVERSIZED], partitions, client=big)
        produce(stack.kafka, produced, _events(8_000, seed=2), partitions)
        target = {(topic, p): o for p, o in produced.last_offsets().items()}
        committed = run.wait_committed(target, 240)
        assert committed.epoch > first.epoch and dict(committed.clock) == target

        model = run_model(run.topology, produced.model_messages())
        states = run.committed_bolt_states(committed)
        for bolt in ("totals", "counts"):
            assert states[bolt].merged == model.bolt_state(bolt), bolt
        tables = run.sink_tables()
        assert tables["user_counts"] == model.table("user_counts")
        expected_totals = dict(model.table("user_totals"))
        refused = expected_totals.pop(("db-bad",))  # the database's CHECK, unknown to the model
        assert tables["user_totals"] == expected_totals

        # The dead-letter topic holds exactly the model's dead letters.
        seen = _dead_letters(stack.kafka, run.topology.dead_letter_topic)
        end = kafka.log_ends(stack.kafka, [(run.topology.dead_letter_topic, 0)])
        letters = list(kafka.read_range(stack.kafka, run.topology.dead_letter_topic, 0, 0,
                                        end[(run.topology.dead_letter_topic, 0)] - 1))
        truncated = 0
        for letter in letters:
            h = letter.headers or {}
            if h.get("hailstorm.truncated") == b"true":
                truncated += 1
                assert len(letter.value or b"") == VALUE_LIMIT
                assert int(h["hailstorm.size"]) == len(OVERSIZED)
        predicted = Counter((d.node, d.stage, d.message.partition, d.message.offset)
                            for d in model.dead_letters)
        assert seen == predicted
        assert truncated == 1  # the oversized one, cut so that it could be written
        assert {stage for _node, stage, _p, _o in predicted} == {
            "decode", "explode", "key", "lift", "monoid", "emit"}
        assert {node for node, stage, _p, _o in predicted if stage == "key"} == {
            "totals", "counts"}  # counts' on the spouts, which pre-aggregate for it

        # Rows the sink could not make, and rows the database refused, in one table.
        rejected = _rows(run.database, "SELECT stage, topic, partition, \"offset\", record, "
                                       "error FROM poison_totals_rejected")
        by_row = Counter((t, p, o) for stage, t, p, o, _r, _e in rejected if stage == "row")
        assert by_row == Counter((topic, r.origin[0][1], r.origin[1])
                                 for r in model.rejected_rows["user_totals"])
        assert by_row and all("no row for row-bad" in e for s, *_x, e in rejected if s == "row")
        database = [(r, e) for stage, _t, _p, _o, r, e in rejected if stage == "database"]
        assert database and all(r.startswith("('db-bad', ") and "no_db_bad" in e
                                for r, e in database)
        assert refused["user_id"] == "db-bad"
        run.check_recoveries()  # nothing restarted
        negotiators = run.negotiator_metrics().values()  # rounds report their pauses
        assert sum(n["hailstorm_negotiator_pause_seconds_count"] for n in negotiators) >= 2
        assert 0 < max(n["hailstorm_negotiator_pause_max_seconds"] for n in negotiators) < 30

        # The database's password (the dev stack makes one) shows nowhere: not while the
        # run is live (what any user of the host can read of its processes, and its records
        # in ZooKeeper), nor in its logs and status afterwards.
        status = subprocess.run(
            [sys.executable, "-m", "hailstorm", "status", run.name, "--json", "--sample", "0"],
            cwd=REPO, env=run.env, capture_output=True, text=True, timeout=60, check=True)
        password = urlsplit(run.database).password
        assert password, "the test stack's PostgreSQL has a password"
        looked_at = _assert_hidden_from_live_processes(password, run)
        print(f"secret hidden from {len(looked_at)} live processes of the run: "
              f"{sorted(set(looked_at.values()))}")
        assert {"driver", "negotiator-0", "negotiator-1", "java"} <= set(looked_at.values())
        assert set(run.processors()) <= set(looked_at.values()), looked_at
        run.stop()
        assert_secret_hidden(password, run, status.stdout, status.stderr)


def _descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them (from each process's parent in /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = set(roots)
    while True:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        if not more:
            return found
        found |= more


def _visible(pid: int) -> str:
    """What any user of the host can read of process ``pid``: its command line and the
    names of the process and its threads."""
    base = Path(f"/proc/{pid}")
    parts = [(base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"),
             (base / "comm").read_text()]
    for task in (base / "task").iterdir():
        with contextlib.suppress(OSError):
            parts.append((task / "comm").read_text())
    return "\n".join(parts)


def _assert_hidden_from_live_processes(secret: str, run: TopologyRun) -> dict[int, str]:
    """While ``run`` is live: ``secret`` is on no process's command line on this host,
    in nothing any user can read of the run's own processes (the driver, the negotiators,
    the Spark JVM, every processor's Python worker and whatever else they started), and in
    none of the run's ZooKeeper records. Returns the run's processes it looked at (pid ->
    the processor id, the harness's label, or the command's name), each still alive after
    the look."""
    processors = {int(r.info["pid"]): ident for ident, r in run.processors().items()}
    labels = {proc.pid: label for label, proc in run.procs.items() if proc.poll() is None}
    looked_at: dict[int, str] = {}
    for pid in sorted(_descendants(set(labels)) | set(processors)):
        with contextlib.suppress(OSError):  # a helper process that ended meanwhile
            seen = _visible(pid)
            assert secret not in seen, f"the secret is visible in process {pid}: {seen[:200]}"
            looked_at[pid] = processors.get(pid) or labels.get(pid) or \
                Path(f"/proc/{pid}/comm").read_text().strip()
    assert not [line for line in command_lines() if secret in line]
    stack = [run.paths.root]
    while stack:  # every record of the run, as anyone who may read ZooKeeper sees it
        path = stack.pop()
        with contextlib.suppress(NoNodeError):  # an ephemeral or superseded record gone
            data, _stat = run.zk.get(path)
            assert secret.encode() not in (data or b""), f"the secret is in ZooKeeper at {path}"
            stack += [f"{path}/{child}" for child in run.zk.get_children(path)]
    # They were all live when looked at: each of them is still running now.
    for pid, name in looked_at.items():
        if name in labels.values() or name in processors.values():
            assert pid_alive(pid), f"{name} (pid {pid}) ended while its secrets were checked"
    return looked_at


def test_on_error_fail_stops_the_topology_with_the_record(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"poison-fail-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, 1)
    produced = Produced(topic)
    good = [json.dumps({"user": f"u{i}", "amount": i}).encode() for i in range(50)]
    with TopologyRun(stack, _module(tmp_path, topic, "fail"), log_dir=tmp_path / "logs") as run:
        produce(stack.kafka, produced, good, [0])
        run.start()
        wait_for("a first commit", run.committed, 240, run.alive)
        produce(stack.kafka, produced, [json.dumps({"user": "u9"}).encode()], [0])
        driver = run.procs["driver"]
        wait_for("the driver to stop", lambda: driver.poll() is not None, 240, poll=0.5)
        assert driver.returncode == 1
        errors = [line for line in run.log("driver").splitlines() if line.startswith("error:")]
        assert errors == [
            f"error: totals: lift failed on the record at {topic}:0:50: KeyError: 'amount' "
            '(the topology has on_error="fail"; fix the function or the record, or use '
            'on_error="quarantine" to send bad records to the dead-letter topic)']


def test_dead_letters_are_written_once_through_restarts(
    stack_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A processor dies right after committing dead letters, before any round covers
    them, and a bolt is killed: the replays regenerate those dead letters, and their
    progress drops them, so the topic holds each exactly once."""
    monkeypatch.setenv("HAILSTORM_FAILPOINTS", "dead_letters.after_commit@3")
    monkeypatch.setenv("HAILSTORM_FAILPOINTS_DIR", str(tmp_path / "failpoints"))
    stack = StackAddresses.from_env(stack_env)
    topic = f"poison-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, PARTITIONS)
    partitions = kafka.partitions_of(stack.kafka, topic)
    produced = Produced(topic)
    with TopologyRun(stack, _module(tmp_path, topic, "quarantine"),
                     log_dir=tmp_path / "logs", database=f"sqlite:///{tmp_path}/p.db") as run:
        kafka.create_topic(stack.kafka, run.topology.dead_letter_topic, 1)
        run.start()
        run.wait_flowing(240)
        for part in range(6):
            produce(stack.kafka, produced, _events(2_000, seed=10 + part), partitions)
            if part == 3:
                run.kill_processor(role="bolt", rng=random.Random(1))
        target = {(topic, p): o for p, o in produced.last_offsets().items()}
        run.wait_committed(target, 240)
        assert (tmp_path / "failpoints" / "dead_letters.after_commit").exists(), "never died"
        run.check_recoveries()
        model = run_model(run.topology, produced.model_messages())
        predicted = Counter((d.node, d.stage, d.message.partition, d.message.offset)
                            for d in model.dead_letters)
        assert _dead_letters(stack.kafka, run.topology.dead_letter_topic) == predicted
