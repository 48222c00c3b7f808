"""Sinks refuse to go backwards, on the real stack: a sink whose stored progress falls
below what it had written stops the topology with one line, and after each documented way
forward (docs/sinks.md, "A sink behind the committed clock") the table is the model's.

A word count into PostgreSQL, four runs under one ZooKeeper name and database:

1. ``hailstorm_progress`` truncated under the running topology: the sink's next commit
   finds its progress gone (a failed compare-and-set), re-reads it, and halts;
   ``hailstorm sink accept`` accepts the gap (the upsert table still holds every row);
2. the accepted run goes on from the committed clock and its table is the model's; then the
   table and ``hailstorm_progress`` are dropped under it (a database re-created by ``dev
   up``): the sink fails, re-opens on an empty progress below the committed round (the
   earlier acceptance does not cover this newer clock) and halts; ``hailstorm sink
   rebuild`` rebuilds the table and the progress from the committed round: the model's
   table at that round's clock;
3. the rebuilt run goes on, its table the model's; a ``pg_dump`` of it taken then is
   restored (``pg_restore --clean``) after the topology went further and stopped: the next
   run halts on opening, with the backup's progress below the committed clock; rebuild.

And a word count into an upsert Kafka topic whose progress topic is deleted while it is
stopped: the next run halts; accepted, the run after goes on to the model's totals.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from databases import backup, query, restore
from deployments import REPO

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce, wait_for
from hailstorm.dev.harness.producing import wordcount_lines
from hailstorm.dev.harness.results import topic_rows
from hailstorm.model import run_model
from hailstorm.protocol.clock import Clock
from hailstorm.sinks import redact
from hailstorm.sinks.topic import progress_topic

pytestmark = pytest.mark.integration

GUARDED = '''
"""Word count into an upsert table (the sink-behind test's)."""
from hailstorm import Count, Table, Topology, itself, per_key

topology = Topology("guarded")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
counts = topology.bolt("counts", inputs=[lines], key=itself, state=per_key(Count()),
                       lift=Count.lift, emit=lambda w, n: [(w, n)], parallelism=2)
topology.sink("word_counts", inputs=[counts], target=Table(
    "guarded_counts", columns={{"word": "text", "count": "bigint"}}, key=["word"]))
'''

GUARDED_TOPIC = '''
"""Word count into an upsert topic (the sink-behind test's)."""
from hailstorm import Count, Topic, Topology, itself, per_key

topology = Topology("guarded_{suffix}")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
counts = topology.bolt("counts", inputs=[lines], key=itself, state=per_key(Count()),
                       lift=Count.lift, emit=lambda w, n: [(w, n)], parallelism=2)
topology.sink("totals", inputs=[counts], target=Topic("{output}", key=lambda t: t[0],
                                                      value=lambda t: t[1], partitions=2))
'''


def _table(url: str) -> dict[str, int]:
    return dict(query(url, "SELECT word, count FROM guarded_counts"))  # type: ignore[arg-type]


def _model(run: TopologyRun, produced: Produced, through: Clock | None = None
           ) -> dict[str, int]:
    """The model's table over what was produced (at or below ``through`` when given)."""
    messages = [m for m in produced.model_messages()
                if through is None or m.offset <= through[(m.topic, m.partition)]]
    model = run_model(run.topology, messages).table("word_counts")
    return {key[0]: row["count"] for key, row in model.items()}


def _goes_on(run: TopologyRun, produced: Produced, lines: list[str]) -> Clock:
    """Start ``run``, produce ``lines``, wait for their round, without a recovery. The
    produced clock."""
    started = time.time()
    run.start()
    partitions = kafka.partitions_of(run.stack.kafka, produced.topic)
    produce(run.stack.kafka, produced, lines, partitions)
    clock = produced.clock()
    run.wait_committed(clock, 240)
    assert [r.reason for r in run.recoveries() if r.at >= started] == []
    return clock


def _goes_on_exactly(run: TopologyRun, produced: Produced, lines: list[str]) -> Clock:
    """:func:`_goes_on`, and the table is the model's. The produced clock."""
    clock = _goes_on(run, produced, lines)
    assert _table(run.database) == _model(run, produced)
    return clock


def _shown(clock: Clock) -> str:
    """A clock as halt lines show it: ``{"topic:0": 12, ...}``."""
    return "{" + ", ".join(f'"{t}:{p}": {o}' for (t, p), o in sorted(clock.items())) + "}"


def _halt_line(run: TopologyRun) -> str:
    """The driver's one error line once it stopped (exit 1)."""
    driver = run.procs["driver"]
    wait_for("the driver to stop", lambda: driver.poll() is not None, 180, poll=0.5)
    assert driver.returncode == 1
    errors = [line for line in run.log("driver").splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    return errors[0]


def _sink_command(run: TopologyRun, module: Path, command: str, sink: str = "word_counts"
                  ) -> str:
    done = subprocess.run([sys.executable, "-m", "hailstorm", "sink", command, str(module),
                           sink, "--name", run.name], cwd=REPO, env=run.env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_sink_behind_what_it_wrote_halts_and_each_way_forward_restores_it(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"guarded-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, 2)
    partitions = kafka.partitions_of(stack.kafka, topic)
    module = tmp_path / "guarded.py"
    module.write_text(GUARDED.format(topic=topic))
    produced = Produced(topic)
    batches = [wordcount_lines(2000, seed=seed) for seed in range(40, 46)]
    commands = f"{module} word_counts --name "

    # 1. hailstorm_progress truncated under the running topology: halt, then accept.
    with TopologyRun(stack, module, log_dir=tmp_path / "run1") as run:
        name, database = run.name, run.database
        where = f"table guarded_counts at {redact(database)}"
        produce(stack.kafka, produced, batches[0], partitions)
        run.start()
        first = produced.clock()
        run.wait_committed(first, 240)
        query(database, "TRUNCATE hailstorm_progress")
        produce(stack.kafka, produced, batches[1], partitions)
        line = _halt_line(run)
        assert line.startswith(
            f'error: sink word_counts ({where}) is behind: its stored progress {{"{topic}:0": '
            f'-1, "{topic}:1": -1}} is below what this sink had committed {_shown(first)}, ')
        assert line.endswith(
            f"Rebuild it from the committed round with 'hailstorm sink rebuild {commands}"
            f"{name}', or accept the gap with 'hailstorm sink accept {commands}{name}' "
            '(docs/sinks.md, "A sink behind the committed clock")')
        committed = run.committed()
        assert committed is not None and committed.clock == first  # nothing after it
        accepted = _sink_command(run, module, "accept")
        assert accepted.startswith(f"accepted: sink word_counts of {name} goes on from the "
                                   f"committed clock of round {committed.epoch} ")

    # 2. Accepted: on from the committed clock, the model's table. Then the database
    # re-created under it: halt (the acceptance was for an older clock), then rebuild.
    # (A longer timeout: the halted run's Initialize, left in ZooKeeper, does not time out
    # while this run's processors join it, which would restart them once.)
    with TopologyRun(stack, module, log_dir=tmp_path / "run2", name=name,
                     database=database, timeout=120) as run:
        second = _goes_on_exactly(run, produced, batches[2])
        query(database, "DROP TABLE guarded_counts; DROP TABLE hailstorm_progress")
        produce(stack.kafka, produced, batches[3], partitions)
        line = _halt_line(run)
        committed = run.committed()
        assert committed is not None and committed.clock == second
        assert line.startswith(
            f'error: sink word_counts ({where}) is behind: its stored progress {{"{topic}:0": '
            f'-1, "{topic}:1": -1}} is below the committed clock of round {committed.epoch} '
            f"{_shown(second)}, which it had already written (a re-created or restored database, "
            "a truncated progress table, or a lost progress topic); the rows in between "
            "would never be delivered again. Rebuild it")
        rebuilt = _sink_command(run, module, "rebuild")
        assert rebuilt.startswith(f"rebuilt table guarded_counts at {redact(database)} from "
                                  f"committed round {committed.epoch}: ")
        assert _table(database) == _model(run, produced, through=second)
        assert _progress(database) == second

    # 3. Rebuilt: on from there, the model's table. A backup taken then is restored after
    # the topology went further and stopped: the next run halts on opening; rebuild.
    with TopologyRun(stack, module, log_dir=tmp_path / "run3", name=name,
                     database=database, timeout=120) as run:
        third = _goes_on_exactly(run, produced, batches[4])
        nightly = backup(database, ["guarded_counts", "hailstorm_progress"])
        produce(stack.kafka, produced, batches[5], partitions)
        fourth = produced.clock()
        run.wait_committed(fourth, 240)
    restore(database, nightly)
    assert _progress(database) == third
    assert _table(database) == _model(run, produced, through=third) != _model(run, produced)
    with TopologyRun(stack, module, log_dir=tmp_path / "run4", name=name,
                     database=database, timeout=120) as run:
        run.start()
        line = _halt_line(run)
        committed = run.committed()
        assert committed is not None and committed.clock == fourth
        assert line.startswith(
            f"error: sink word_counts ({where}) is behind: its stored progress {_shown(third)} "
            f"is below the committed clock of round {committed.epoch} {_shown(fourth)}, ")
        _sink_command(run, module, "rebuild")
        assert _table(database) == _model(run, produced)
        assert _progress(database) == fourth


def _progress(url: str) -> dict[tuple[str, int], int]:
    """The sink's stored progress: source partition -> offset."""
    rows = query(url, "SELECT topic, partition, \"offset\" FROM hailstorm_progress "
                      "WHERE topic <> ''")
    return {(t, p): o for t, p, o in rows}


def test_a_topic_sink_whose_progress_topic_was_deleted_halts_and_accepting_goes_on(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """A word count into an upsert topic, stopped; its progress topic deleted: the next run
    halts on opening (the topic sink offers acceptance only); accepted, the run after goes
    on, and the topic's newest record per word is the model's count."""
    stack = StackAddresses.from_env(stack_env)
    suffix = uuid.uuid4().hex[:8]
    topic, output = f"guarded-in-{suffix}", f"guarded-out-{suffix}"
    kafka.create_topic(stack.kafka, topic, 2)
    partitions = kafka.partitions_of(stack.kafka, topic)
    module = tmp_path / "guarded_topic.py"
    module.write_text(GUARDED_TOPIC.format(suffix=suffix, topic=topic, output=output))
    produced = Produced(topic)
    batches = [wordcount_lines(2000, seed=seed) for seed in range(50, 53)]
    progress = progress_topic(f"guarded_{suffix}", "totals")

    with TopologyRun(stack, module, log_dir=tmp_path / "run1") as run:
        name, database = run.name, run.database
        run.start()
        produce(stack.kafka, produced, batches[0], partitions)
        first = produced.clock()
        run.wait_committed(first, 240)
    assert kafka.delete_topic(stack.kafka, progress)
    produce(stack.kafka, produced, batches[1], partitions)
    with TopologyRun(stack, module, log_dir=tmp_path / "run2", name=name, database=database,
                     timeout=120) as run:
        run.start()
        line = _halt_line(run)
        committed = run.committed()
        assert committed is not None and committed.clock == first
        assert line == (
            f"error: sink totals (topic {output}, progress on {progress}) is behind: its "
            f'stored progress {{"{topic}:0": -1, "{topic}:1": -1}} is below the committed '
            f"clock of round {committed.epoch} {_shown(first)}, which it had already written (a "
            "re-created or restored database, a truncated progress table, or a lost progress "
            "topic); the rows in between would never be delivered again. Accept the gap with "
            f"'hailstorm sink accept {module} totals --name {name}' (docs/sinks.md, \"A sink "
            'behind the committed clock")')
        _sink_command(run, module, "accept", "totals")
    with TopologyRun(stack, module, log_dir=tmp_path / "run3", name=name, database=database,
                     timeout=120) as run:
        _goes_on(run, produced, batches[2])
        model = run_model(run.topology, produced.model_messages()).table("totals")
        assert model and topic_rows(stack.kafka, run.topology.sinks[0].target) == model
