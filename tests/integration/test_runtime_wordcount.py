"""Word count really runs: negotiators + driver (Spark local) + processors, real ZooKeeper and
Kafka; the committed snapshots must equal the reference model exactly, also after a
processor is SIGKILLed mid-run. Built on :mod:`hailstorm.dev.harness`."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployments import deployed

from hailstorm import kafka
from hailstorm.dev.harness import (
    BackgroundProducer,
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.dev.harness.evidence import VICTIM_GONE
from hailstorm.dev.harness.faults import process_stopped
from hailstorm.dev.services import pid_alive
from hailstorm.model import run_model
from hailstorm.protocol.layout import CommittedRecord
from hailstorm.snapshots import DirectorySnapshotStore

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "wordcount.py"
TOPIC = "words"
PARTITIONS = 4


@pytest.fixture()
def stack(stack_env: dict[str, str]) -> StackAddresses:
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], TOPIC, PARTITIONS)
    return StackAddresses.from_env(stack_env)


@pytest.fixture()
def deployment(stack: StackAddresses, tmp_path: Path) -> Iterator[TopologyRun]:
    # Garbage snapshots are deleted soon: recoveries must still find what they load.
    with deployed(stack, TOPOLOGY, tmp_path / "logs", snapshot_retention=RETENTION) as run:
        yield run


def assert_matches_model(run: TopologyRun, produced: Produced, committed: CommittedRecord,
                         least: int) -> None:
    """Every counts instance's committed snapshot equals the model's state exactly."""
    states = run.committed_bolt_states(committed)  # first: garbage collection goes on
    produced.fill_before(run.stack.kafka, committed.clock)
    assert {(TOPIC, p): o for p, o in produced.last_offsets().items()} == dict(committed.clock)
    model = run_model(run.topology, produced.model_messages())
    counts = states["counts"]
    assert all(clock == committed.clock for clock in counts.instance_clocks)
    for i, state in enumerate(counts.instances):
        assert state == model.instance_states("counts")[i], f"instance {i} differs"
    assert counts.merged == model.bolt_state("counts")
    tables = run.sink_tables()
    assert tables["word_counts"] == model.table("word_counts")
    comparison = compare_with_model(model, states, tables)
    assert comparison.ok and comparison.lost == comparison.duplicated == comparison.wrong == 0
    assert sum(counts.merged.values()) > least


def test_wordcount_commits_exactly_the_model_state(deployment: TopologyRun) -> None:
    """100k lines over 4 partitions, 2 bolt instances: the committed state is the model's."""
    run = deployment
    dead_topic = "wordcount.dead-letter"
    kafka.create_topic(run.stack.kafka, dead_topic, 1)
    partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
    assert len(partitions) == PARTITIONS
    produced = Produced(TOPIC)
    produce(run.stack.kafka, produced, wordcount_lines(20_000, seed=1), partitions)
    run.start()
    wait_for("a first commit", run.committed, 240, run.alive)
    bad = [b"\xff\xfe not utf-8", b"ok \xc3", b"\x80"]
    produce(run.stack.kafka, produced, bad, partitions)
    produce(run.stack.kafka, produced, wordcount_lines(80_000, seed=2), partitions)
    target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
    committed = run.wait_committed(target, 240)
    assert_matches_model(run, produced, committed, least=400_000)
    # Written in transactions: their commit markers take offsets too, so read to the end.
    end = kafka.log_ends(run.stack.kafka, [(dead_topic, 0)])[(dead_topic, 0)]
    letters = list(kafka.read_range(run.stack.kafka, dead_topic, 0, 0, end - 1, timeout=30))
    assert sorted(r.value for r in letters) == sorted(bad)  # type: ignore[type-var]
    sources = {(TOPIC, p, o): v for p, records in produced.messages.items()
               for o, v in records if v in bad}
    for letter in letters:  # where each came from, and why
        headers = letter.headers or {}
        origin = (TOPIC, int(headers["hailstorm.partition"]), int(headers["hailstorm.offset"]))
        assert sources[origin] == letter.value
        assert letter.key == "{}:{}:{}".format(*origin).encode()
        assert headers["hailstorm.topic"] == TOPIC.encode()
        assert headers["hailstorm.node"] == b"lines"
        assert headers["hailstorm.stage"] == b"decode"
        assert b"utf-8" in headers["hailstorm.error"].lower()
    reports = run.processors()
    assert len(reports) == PARTITIONS + 2 + 1
    assert all(r.error is None for r in reports.values())
    wait_for("the leader to delete superseded rounds' snapshots",
             lambda: no_old_garbage(run), 60, run.alive)
    run.check_recoveries()  # nothing was hurt: no restart at all


def test_a_backlog_read_to_its_end_commits_without_waiting_for_the_interval(
        stack: StackAddresses, tmp_path: Path) -> None:
    """Rounds every minute; a backlog of 80k lines is read in seconds: the spouts report
    that they caught up, and the negotiator starts the first round a tenth of an interval
    after they began, not a whole one. The round holds exactly the model's state."""
    with deployed(stack, TOPOLOGY, tmp_path / "logs", snapshot_interval=60.0) as run:
        partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
        produced = Produced(TOPIC)
        produce(run.stack.kafka, produced, wordcount_lines(80_000, seed=3), partitions)
        run.start()
        committed = run.wait_committed(produced.clock(), 240)
        assert committed.epoch == 2  # the first round: the interval had not elapsed
        assert_matches_model(run, produced, committed, least=200_000)
        reasons = [line for label, text in run.logs().items() if label.startswith("negotiator")
                   for line in text.splitlines() if "-> epoch=2 SpoutsPaused" in line]
        assert reasons and all("the spouts caught up with a backlog" in r for r in reasons)


RETENTION = 10.0
"""The negotiators' --snapshot-retention in these runs (s)."""


def no_old_garbage(run: TopologyRun) -> bool:
    """Every snapshot file of the topology is one the committed record needs (its round's
    or the previous round's, or a base their deltas build on: an idle topology commits no
    full snapshot that would end a chain), or younger than the retention (plus slack). A
    racing commit or collection makes this False until a later poll."""
    committed = run.committed()
    if committed is None:
        return False
    store = DirectorySnapshotStore(run.stack.snapshots)
    needed = {ref.key for live in committed.live_refs() if "/" in live  # not a sink's
              for ref in store.chain(live)}
    old = time.time() - RETENTION - 5
    return all(ref.key in needed or ref.path.stat().st_mtime > old
               for ref in store.list(run.name) if ref.path.exists())


# A killed bolt: test_a_corrupt_committed_snapshot_falls_back_to_the_previous_round.
@pytest.mark.parametrize(("victim", "task"), [("spout:lines:words:2", False),
                                              ("bolt:counts:1", True)])
def test_wordcount_survives_a_sigkilled_processor(deployment: TopologyRun, victim: str,
                                                  task: bool) -> None:
    """A killed processor process is restarted by its own Spark task: no task, stage or
    worker of Spark fails. A killed Spark task (its Python worker, with the processor in
    it: an executor lost) fails the stage, and the driver resubmits it."""
    run = deployment
    partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    produce(run.stack.kafka, produced, wordcount_lines(5_000, seed=3), partitions)
    run.start()
    first = wait_for("a first commit", run.committed, 240, run.alive)
    reports = wait_for("every processor's report",
                       lambda: len(r := run.processors()) == 7 and r, 30, run.alive)
    pid = int(reports[victim].info["pid"])
    expected = run.records.expected()
    assert expected is not None and expected.attempt is not None
    assert {r.attempt for r in reports.values()} == {expected.attempt}, \
        "every processor reports the stage attempt the driver named"
    # Keep producing in the background and kill the victim while data flows.
    with BackgroundProducer(run.stack.kafka, produced, wordcount_lines(10_000, seed=100),
                            partitions, rate=5_000) as producer:
        wait_for("the producer to be half-way", lambda: producer.sent >= 5_000, 60)
        fault = run.kill_processor(pid=pid, task=task)
        assert fault.target == victim
        assert fault.evidence[VICTIM_GONE]
        producer.join(120)
    assert produced.count == 15_000  # every line acknowledged, none twice
    wait_for(
        "the topology to restart with a new incarnation of the victim",
        lambda: (m := run.master()) and m.state.epoch > first.epoch
        and (r := run.processors().get(victim)) and int(r.info["pid"]) != pid, 180, run.alive)
    target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
    committed = run.wait_committed(target, 240)
    assert not pid_alive(pid)
    again = run.records.expected()
    workers = {ident: r.info["worker"] for ident, r in reports.items()}
    if task:
        assert again is not None and again.attempt not in (None, expected.attempt), \
            "the driver named its new stage attempt"
        assert "failed" in run.log("driver")
    else:
        assert again == expected, "no stage attempt failed: the driver resubmitted nothing"
        assert {ident: r.info["worker"] for ident, r in run.processors().items()} == \
            workers, "every processor runs in the Spark task (and worker) it ran in before"
        assert f"incarnation pid {pid} killed (killed by SIGKILL); starting the next one " \
            "in this task" in run.log("driver")
    assert again is not None
    assert {r.attempt for r in run.processors().values()} == {again.attempt}
    assert_matches_model(run, produced, committed, least=50_000)
    run.check_recoveries()  # the kill explains every restart


def started_with_local_recovery(run: TopologyRun, seed: int, *options: str
                                ) -> tuple[list[int], Produced, dict[str, int]]:
    """Start ``run`` with ``--local-recovery`` (and ``options``) on 5,000 lines; once a
    round committed, the topic's partitions, what was produced, and every processor's
    pid."""
    run.driver_options = ["--local-recovery", *options]
    partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    produce(run.stack.kafka, produced, wordcount_lines(5_000, seed=seed), partitions)
    run.start()
    wait_for("a first commit", run.committed, 240, run.alive)
    reports = wait_for("every processor's report",
                       lambda: len(r := run.processors()) == 7 and r, 30, run.alive)
    return partitions, produced, {ident: int(r.info["pid"]) for ident, r in reports.items()}


def test_with_local_recovery_a_killed_bolt_restarts_alone(stack: StackAddresses,
                                                          tmp_path: Path) -> None:
    """``--local-recovery --standby``: a SIGKILLed counts instance restarts alone, its
    warm standby holding the committed state becoming the next incarnation (nothing to
    read). Every other processor keeps its process (and its state: nothing else reloads),
    the spouts replay to the new incarnation from the committed clock, the recovery record
    says ``local``, and the next committed round is still exactly the model's state, the
    table too."""
    with deployed(stack, TOPOLOGY, tmp_path / "logs") as run:
        partitions, produced, pids = started_with_local_recovery(run, 7, "--standby")
        victim = "bolt:counts:1"
        with BackgroundProducer(run.stack.kafka, produced, wordcount_lines(10_000, seed=8),
                                partitions, rate=5_000) as producer:
            wait_for("the producer to be half-way", lambda: producer.sent >= 5_000, 60)
            fault = run.kill_processor(pid=pids[victim])
            assert fault.target == victim and fault.evidence[VICTIM_GONE]
            producer.join(120)
        recovery = wait_for("the local recovery's record", lambda: next(
            (r for r in run.recoveries() if r.scope.startswith("local:")), None), 60, run.alive)
        assert victim in recovery.scope and recovery.previous.startswith("Flowing")
        committed = run.wait_committed(produced.clock(), 240)
        now = {ident: int(r.info["pid"]) for ident, r in run.processors().items()}
        assert now[victim] != pids[victim] and not pid_alive(pids[victim])
        assert {i: p for i, p in now.items() if i != victim} == \
            {i: p for i, p in pids.items() if i != victim}, "nobody else restarted"
        assert [r.scope.split(":")[0] for r in run.recoveries() if r.scope] == ["local"]
        log = run.log("driver")
        assert "restarting alone in the run of Initialize" in log
        assert "promoted the standby" in log
        assert "the standby held the committed state: nothing to read" in log
        assert_matches_model(run, produced, committed, least=50_000)
        run.check_recoveries()


@pytest.mark.parametrize("held", ["before", "inside"], ids=["before-replay", "inside-replay"])
def test_with_local_recovery_a_bolt_failing_while_another_is_replayed_to_joins_it(
        stack: StackAddresses, tmp_path: Path, held: str) -> None:
    """``--local-recovery``: counts:1 is killed; while a spout holds the replay to its new
    incarnation, counts:0 is killed too. It joins the recovery, in a new epoch where both
    restart from the committed clock: two local recoveries, only the two bolts have new
    processes, and the next committed round is exactly the model's. The spout is held
    (stopped) ``before`` it sees ``Replaying``, or ``inside`` its replay, about to connect
    to counts:1's new incarnation, which ends (the wider recovery restarts it again)
    before the spout goes on: its connection is refused, and the spout goes on without
    it instead of failing (which restarted everything)."""
    with deployed(stack, TOPOLOGY, tmp_path / "logs") as run:
        partitions, produced, pids = started_with_local_recovery(run, 9)
        first, second, spout = "bolt:counts:1", "bolt:counts:0", "spout:lines:words:0"

        def master_is(phase: str, instances: tuple[str, ...]) -> bool:
            m = run.master()
            return m is not None and type(m.state).__name__ == phase \
                and tuple(getattr(m.state, "instances", ())) == instances

        with BackgroundProducer(run.stack.kafka, produced, wordcount_lines(10_000, seed=10),
                                partitions, rate=5_000) as producer:
            wait_for("the producer to be half-way", lambda: producer.sent >= 5_000, 60)
            if held == "inside":
                run.ask_to_pause("spout.before_replay", pids[spout])
            run.kill_processor(pid=pids[first])
            if held == "before":
                wait_for("Restarting", lambda: master_is("Restarting", (first,)), 30,
                         run.alive, poll=0.01)
                os.kill(pids[spout], signal.SIGSTOP)  # it cannot replay: Replaying lasts
            try:
                wait_for("Replaying", lambda: master_is("Replaying", (first,)), 30, run.alive)
                if held == "inside":
                    wait_for(f"{spout} to stop in its replay",
                             lambda: process_stopped(pids[spout]), 30, run.alive)
                replayed_to = int(run.processors()[first].info["pid"])
                run.kill_processor(pid=pids[second])
                wait_for("both restarting", lambda: master_is("Restarting", (second, first)),
                         30, run.alive)
                if held == "inside":
                    wait_for(f"{first}'s incarnation being replayed to to end",
                             lambda: not pid_alive(replayed_to), 30, run.alive)
            finally:
                os.kill(pids[spout], signal.SIGCONT)
            producer.join(120)
        committed = run.wait_committed(produced.clock(), 240)
        recoveries = [r for r in run.recoveries() if r.scope]
        assert [r.scope.split(":")[0] for r in recoveries] == ["local", "local"], recoveries
        assert recoveries[1].previous == f"Replaying({first})"
        now = {ident: int(r.info["pid"]) for ident, r in run.processors().items()}
        assert {i for i in now if now[i] != pids[i]} == {first, second}, "nobody else"
        if held == "inside":  # the fault happened: the spout met the ended incarnation
            assert f"to {first}: its incarnation is gone" in run.log("driver")
        assert_matches_model(run, produced, committed, least=50_000)
        run.check_recoveries()


def test_a_corrupt_committed_snapshot_falls_back_to_the_previous_round(
        deployment: TopologyRun) -> None:
    """A flipped byte in the committed round's snapshot of bolt:counts:0: the recovery names
    the file, falls back to the previous committed round, replays from its clock, and the
    state is still exactly the model's."""
    run = deployment
    partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    produce(run.stack.kafka, produced, wordcount_lines(5_000, seed=5), partitions)
    run.start()
    wait_for("two committed rounds", lambda: (c := run.committed()) and c.previous, 240,
             run.alive)
    produce(run.stack.kafka, produced, wordcount_lines(5_000, seed=6), partitions)
    # Kill the bolt, and once the topology is recovering (no round commits until it flows
    # again, so the record to reload is fixed) corrupt that record's file before the new
    # incarnation (a Spark stage resubmitted after at least a second) loads it.
    fault = run.kill_processor(pid=int(run.processors()["bolt:counts:0"].info["pid"]))
    wait_for("the recovery to start",
             lambda: (m := run.master()) and m.state.epoch > fault.epoch
             and type(m.state).__name__ == "Initialize", 30, run.alive, poll=0.01)
    committed = run.committed()
    assert committed is not None and committed.previous is not None
    uri = committed.snapshot_for("bolt:counts:0")
    assert uri is not None
    path = Path(uri.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    wait_for("a recovery that falls back to the previous round",
             lambda: any("falling back" in r.reason and uri in r.reason
                         for r in run.recoveries()), 120, run.alive)
    produce(run.stack.kafka, produced, wordcount_lines(5_000, seed=7), partitions)
    target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
    final = run.wait_committed(target, 240)
    assert_matches_model(run, produced, final, least=20_000)
    assert "is corrupt" in run.log("driver")
    assert any("fell back from committed round" in run.log(label)
               for label in run.procs if label.startswith("negotiator"))
    assert fault.target == "bolt:counts:0"
    run.check_recoveries()  # the kill explains both recoveries


FRAGILE_TOPOLOGY = '''
from hailstorm import Sum, Topology


class Fragile(Sum):
    """A sum that cannot grow past 3: merging fails on states it accepted."""

    def absorb(self, acc, value):
        if acc + value > 3:
            raise OverflowError("fragile sum is full")
        return acc + value


topology = Topology("fragile")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
topology.bolt("counts", inputs=[lines], state=Fragile(), lift=lambda w: 1)
'''


def test_a_monoid_failing_on_its_own_states_fails_the_stage_visibly(
    stack: StackAddresses, tmp_path: Path
) -> None:
    """Not a bad record (those are quarantined, see test_poison_records.py): a monoid that
    cannot merge states it accepted ends the processor visibly: error report, negotiator
    restart naming it, Spark stage failed and resubmitted."""
    topic = f"fragile-{uuid.uuid4().hex[:8]}"
    module = tmp_path / "fragile.py"
    module.write_text(FRAGILE_TOPOLOGY.replace("{topic}", topic))
    kafka.create_topic(stack.kafka, topic, 1)
    produced = Produced(topic)
    produce(stack.kafka, produced,
            [t.encode() for t in ["fine words", "more fine words", "never reached"]], [0])
    with TopologyRun(stack, module, log_dir=tmp_path / "logs", negotiators=1) as run:
        run.start()
        wait_for("the negotiator to restart because of the error",
                 lambda: "bolt:counts:0 failed: OverflowError: fragile sum is full"
                 in run.log("negotiator-0"), 180, run.alive)
        wait_for("the stage to fail and be resubmitted",
                 lambda: "resubmitting" in run.log("driver"), 60, run.alive)
        assert "in bolt 'counts', absorbing a batch of" in run.log("driver")
        committed = run.committed()
        assert committed is None or all(o < 1 for o in committed.clock.values())
        # Stopped while it restarts: incarnations that joined no run leave at once too (no
        # Initialize comes for them), so the drain ends without cancelling the stage.
        run.stop()
        assert run.procs["driver"].returncode == 0, run.log("driver")[-3000:]
        assert "cancelling the stage" not in run.log("driver")
