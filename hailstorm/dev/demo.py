"""The demo behind ``hailstorm demo``: word count end to end, with a crash in the middle.

It brings an embedded stack up (ZooKeeper, Apache Kafka, PostgreSQL), starts the
``topologies/wordcount.py`` topology (two negotiators, every processor a task of one Spark
barrier stage), produces text into ``words``, SIGKILLs a bolt's process half-way (its Spark
task starts the next incarnation), waits until a committed round covers every message, and
checks the ``word_counts`` table in PostgreSQL against the sequential reference model over
exactly the messages produced. With ``output="kafka"`` it runs ``topologies/wordstream.py``
instead and checks the newest record per word on the ``word-totals`` topic, read as a
``read_committed`` consumer would. Then it stops everything it started and brings the stack
down.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce
from hailstorm.dev.services import DevStack
from hailstorm.model import run_model
from hailstorm.sinks import redact
from hailstorm.topology.loading import examples_dir

TOPIC = "words"
PARTITIONS = 4
TOPOLOGIES = examples_dir()
TOPOLOGY = TOPOLOGIES / "wordcount.py"
TO_KAFKA = TOPOLOGIES / "wordstream.py"

_VOCABULARY = tuple(
    """storm hail kafka spark monoid clock offset snapshot bolt spout sink negotiator zookeeper
    partition replay exactly once state merge commutative associative stream tuple window count
    sum mean latest union sketch water mark epoch round""".split()
)


def sample_lines(count: int, seed: int = 7) -> list[str]:
    """Deterministic sample text: Zipf-like word frequencies, 3 to 12 words a line."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(_VOCABULARY))]
    lines = []
    for _ in range(count):
        words = rng.choices(_VOCABULARY, weights, k=rng.randint(3, 12))
        lines.append(" ".join(w.capitalize() if rng.random() < 0.2 else w for w in words) + ".")
    return lines


def run_demo(state_dir: Path, *, lines: int, keep_running: bool, console: Console,
             output: str = "postgresql") -> bool:
    """Run the demo; True when the table (``output="kafka"``: the topic) equals the
    reference model."""
    stack = DevStack(state_dir, progress=lambda m: console.print(f"[dim]·[/] {m}"))
    started = time.monotonic()
    try:
        env = stack.up().env()
        console.print(f"[bold]stack up[/] in {time.monotonic() - started:.1f}s: ZooKeeper "
                      f"{env['HAILSTORM_ZK']}, Kafka {env['HAILSTORM_KAFKA']}, PostgreSQL "
                      f"{redact(env['HAILSTORM_DATABASE_URL'])}")
        return _word_count(env, state_dir, lines, console, output)
    finally:
        if keep_running:
            again = f"hailstorm dev env --state-dir {state_dir}"
            console.print(f'stack left running: eval "$({again})"')
        else:
            stack.down(wipe=stack.created)  # a stack that was there before keeps its data
            console.print("[bold]stack down[/]: every process the demo started is stopped")


def _word_count(env: dict[str, str], state_dir: Path, count: int, console: Console,
                output: str) -> bool:
    bootstrap = env["HAILSTORM_KAFKA"]
    database = env["HAILSTORM_DATABASE_URL"]
    kafka.create_topic(bootstrap, TOPIC, PARTITIONS)
    text = [line.encode() for line in sample_lines(count)]
    half = len(text) // 2
    produced = Produced(TOPIC)
    partitions = list(range(PARTITIONS))
    stack = StackAddresses.from_env(env)
    to_kafka = output == "kafka"
    with TopologyRun(stack, TO_KAFKA if to_kafka else TOPOLOGY,
                     name="wordstream" if to_kafka else "wordcount",
                     log_dir=state_dir / "logs" / "demo",
                     negotiators=2, snapshot_interval=1.0, database=database) as run:
        t0 = time.monotonic()
        with console.status("starting the topology: 2 negotiators, 7 processors on Spark"):
            run.start()
            run.wait_flowing(timeout=300)
        console.print(f"topology [bold]{run.name}[/] flowing after {time.monotonic() - t0:.1f}s "
                      f"(logs in {run.log_dir})")

        produce(bootstrap, produced, text[:half], partitions)
        console.print(f"produced {half:,} lines")
        fault = run.kill_processor(role="bolt", rng=random.Random(3))
        console.print(f"[bold red]kill -9[/] {fault.target} (pid {fault.pid}) while it works")
        produce(bootstrap, produced, text[half:], partitions)
        console.print(f"produced {len(text) - half:,} more lines while it recovers")

        with console.status("waiting for the topology to recover and commit every message"):
            recovery = run.measure_recovery(fault, timeout=300)
            committed = run.wait_committed(
                {(TOPIC, p): o for p, o in produced.last_offsets().items()}, timeout=300
            )
        if recovery.flowing_after is not None:
            console.print(f"recovered: flowing again {recovery.flowing_after:.1f}s after the "
                          f"kill; round {committed.epoch} committed every message")
        if to_kafka:
            return _check_topic(run, produced, console)
        return _check(run, produced, database, console)


def _check(run: TopologyRun, produced: Produced, database: str, console: Console) -> bool:
    expected = {key[0]: row["count"] for key, row in
                run_model(run.topology, produced.model_messages()).table("word_counts").items()}
    with psycopg.connect(database) as conn:
        got: dict[str, Any] = dict(conn.execute("SELECT word, count FROM word_counts").fetchall())
    return _compare(got, expected, "PostgreSQL", "the table", "word_counts", produced, console)


def _check_topic(run: TopologyRun, produced: Produced, console: Console) -> bool:
    model = run_model(run.topology, produced.model_messages())
    expected = {json.loads(row["value"])["word"]: json.loads(row["value"])["count"]
                for row in model.table("totals").values()}
    records = run.sink_tables()["totals"]
    got = {json.loads(row["value"])["word"]: json.loads(row["value"])["count"]
           for row in records.values()}
    sizes = len(run.sink_tables()["line_sizes"])
    console.print(f"line-sizes holds {sizes:,} records for {produced.count:,} lines (append, "
                  "Avro, one per line)")
    same = _compare(got, expected, "Kafka", "the topic", "word-totals", produced, console)
    return same and sizes == produced.count


def _compare(got: dict[str, Any], expected: dict[str, Any], where: str, what: str,
             name: str, produced: Produced, console: Console) -> bool:
    top = Table("word", where, "reference model", title=f"top words in {name}")
    for word, n in sorted(got.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
        top.add_row(word, f"{n:,}", f"{expected.get(word, 0):,}")
    console.print(top)
    same = got == expected
    wrong = sorted(w for w in set(got) | set(expected) if got.get(w) != expected.get(w))
    console.print(
        f"{len(got)} words, {sum(got.values()):,} occurrences from {produced.count:,} lines: "
        + (f"[bold green]{what} equals the reference model exactly[/]" if same else
           f"[bold red]MISMATCH[/] on {len(wrong)} words, first: {wrong[:5]}")
    )
    return same
