"""The demo behind ``hailstorm demo``: the word-count workload on an embedded stack.

Today it brings the stack up, produces sample text into the ``words`` topic, reads every
partition back by assign + seek, checks the round trip message for message, runs the
word-count topology's sequential reference model over exactly what was read back, and
brings the stack down again. The distributed runtime extends it into the full topology.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hailstorm import kafka
from hailstorm.devstack import DevStack
from hailstorm.model import Message, run_model
from hailstorm.topology import load_topology

TOPIC = "words"
PARTITIONS = 4

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


def run_demo(state_dir: Path, *, lines: int, keep_running: bool, console: Console) -> bool:
    """Run the demo; True when every check passed."""
    stack = DevStack(state_dir, progress=lambda m: console.print(f"[dim]·[/] {m}"))
    started = time.monotonic()
    try:
        env = stack.up().env()
        bootstrap = env["HAILSTORM_KAFKA"]
        console.print(
            f"[bold]stack up[/] in {time.monotonic() - started:.1f}s: {env['HAILSTORM_ZK']} "
            f"(ZooKeeper), {bootstrap} (Kafka)"
        )
        return _round_trip(bootstrap, lines, console)
    finally:
        if keep_running:
            console.print(
                f'stack left running: eval "$(hailstorm dev env --state-dir {state_dir})"'
            )
        else:
            stack.down()
            console.print("[bold]stack down[/]: every process the demo started is stopped")


def _round_trip(bootstrap: str, count: int, console: Console) -> bool:
    kafka.create_topic(bootstrap, TOPIC, PARTITIONS)
    text = sample_lines(count)
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i, line in enumerate(text):
        sent[i % PARTITIONS].append(line.encode())

    t0 = time.monotonic()
    kafka.produce(bootstrap, TOPIC, ((p, None, v) for p in sent for v in sent[p]))
    produce_s = time.monotonic() - t0
    console.print(
        f"produced {count} lines into '{TOPIC}' ({PARTITIONS} partitions) "
        f"in {produce_s:.2f}s ({count / max(produce_s, 1e-9):,.0f} msg/s)"
    )

    table = Table("partition", "produced", "read back", "offsets", "identical")
    ok = True
    read_back: list[Message] = []
    columns = (TextColumn("reading back"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("read", total=count)
        for partition, values in sent.items():
            got = []
            for record in kafka.read_range(bootstrap, TOPIC, partition, 0, len(values) - 1):
                got.append(record)
                read_back.append(
                    Message(TOPIC, partition, record.offset, record.value or b"", record.key)
                )
                progress.advance(task)
            same = [r.value for r in got] == values and [r.offset for r in got] == list(
                range(len(values))
            )
            ok &= same
            span = f"0..{got[-1].offset}" if got else "-"
            table.add_row(
                str(partition),
                str(len(values)),
                str(len(got)),
                span,
                "[green]yes[/]" if same else "[red]NO[/]",
            )
    console.print(table)
    console.print("[bold green]round trip OK[/]" if ok else "[bold red]round trip FAILED[/]")
    return _word_count_model(read_back, text, console) and ok


def _word_count_model(read_back: list[Message], text: list[str], console: Console) -> bool:
    """Run the word-count reference model over the records read back and check it."""
    topology = load_topology("topologies.wordcount")
    result = run_model(topology, read_back)
    counts = result.table("word_counts")
    expected: dict[str, int] = {}
    for line in text:
        for word in topology.node("lines").tuples_of(line.encode()):  # type: ignore[union-attr]
            expected[word] = expected.get(word, 0) + 1
    got = {key[0]: row["count"] for key, row in counts.items()}
    top = Table("word", "count", title="top words (word-count reference model)")
    for word, count in sorted(got.items(), key=lambda kv: (-kv[1], kv[0]))[:8]:
        top.add_row(word, f"{count:,}")
    console.print(top)
    same = got == expected
    console.print(
        f"reference model over {result.messages_processed:,} messages: {len(got)} words, "
        f"{sum(got.values()):,} occurrences; "
        + ("[green]matches a direct count of the produced text[/]" if same else "[red]MISMATCH[/]")
    )
    return same
