"""A new bolt catching up on its own clock while the others commit (docs/upgrading.md),
run for real: :func:`catch_up_run`, shared by ``tests/integration/test_runtime_catch_up.py``
(small) and ``bench/catch_up.py`` (2M lines of history)."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hailstorm import kafka
from hailstorm.dev.harness.compare import Comparison, Rows, compare_tables, compare_with_model
from hailstorm.dev.harness.deployment import REPO, Deployment
from hailstorm.dev.harness.producing import (
    BackgroundProducer,
    Produced,
    produce,
    zipf_text_lines,
)
from hailstorm.dev.harness.run import TopologyRun
from hailstorm.dev.harness.stack import StackAddresses
from hailstorm.dev.harness.wait import wait_for
from hailstorm.model import Message, run_model
from hailstorm.protocol.clock import Clock, clock_to_json

__all__ = ["CATCH_UP_BASE", "CATCH_UP_NEW", "MIXED_NEW", "MODEL_LINES", "SHAPES",
           "CatchUpResult", "CommittedRound", "RoundLog", "Shape", "catch_up_run",
           "comparison_line", "counted_by_hand", "mixed_by_hand", "plan_output"]

MODEL_LINES = 300_000
"""Lines in all up to which the run is also compared with the model and the oracle. Both
run every word through Python one at a time: on realistic text (ten words a line) about a
minute per 100,000 lines each on a quiet core, so 2M lines would take over an hour. Every
run is compared with :func:`counted_by_hand`."""

CATCH_UP_BASE = '''
from hailstorm import Count, Max, Record, Table, Topology, per_key

topology = Topology("catch_up")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
counts = topology.bolt("counts", inputs=[lines], key=lambda w: w.lower(),
                       state=per_key(Count()), lift=lambda w: 1, parallelism=2,
                       emit=lambda w, n: [(w.lower(), n)])
'''
"""The deployed topology (``{topic}``): a word count without a sink."""

CATCH_UP_NEW = '''
cased = topology.bolt("cased", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                      lift=lambda w: 1, emit=lambda w, n: [(w, n)], parallelism=2)
topology.sink("cased_counts", [cased],
              Table("{table}", columns={{"word": "text", "n": "bigint"}}, key=["word"],
                    mode="upsert"))
'''
"""What the upgrade adds to :data:`CATCH_UP_BASE`: a new bolt and its table (``{table}``)."""

MIXED_BASE_SINK = '''
topology.sink("word_counts", [counts],
              Table("{table}", columns={{"word": "text", "n": "bigint"}}, key=["word"],
                    mode="upsert"))
'''
"""What the mixed shape's deployed topology adds to :data:`CATCH_UP_BASE`: a table of the
word counts (``{table}``)."""

MIXED_NEW = '''
FIGURES = Record({{"seen": Count(), "top": Max()}})
both = topology.bolt(
    "both", inputs=[lines, counts],
    key=lambda t: t.lower() if isinstance(t, str) else t[0], state=per_key(FIGURES),
    lift=lambda t: FIGURES.lift(seen=1) if isinstance(t, str) else FIGURES.lift(top=t[1]),
    parallelism=2)
'''
"""What the mixed shape's upgrade adds: a bolt reading the spout *and* the carried
``counts``: per lowercased word, how often it was seen (every line's, the history's
included) and the highest running count ``counts`` emitted for it (``counts`` sends only
what it emits from the committed round on, so the word's final count when it occurs after
the deploy's clock, else nothing)."""


@dataclass(frozen=True)
class Shape:
    """What :func:`catch_up_run` deploys and expects: ``base`` (the deployed topology's
    code after :data:`CATCH_UP_BASE`) and ``added`` (the upgrade's), each formatted with
    ``table``; ``behind``, the new bolt whose catching up is followed; ``table``, the sink
    whose rows are waited for; ``by_hand``, every compared state and table from the
    messages and the deploy's committed clock; ``model_bolts``, the bolts the model is
    right about (it runs the new topology over the whole history)."""

    base: str
    added: str
    behind: str
    table: str
    by_hand: Callable[[Iterable[Message], Clock], dict[str, Rows]]
    model_bolts: tuple[str, ...]


@dataclass(frozen=True)
class CommittedRound:
    """One committed round as the log saw it."""

    epoch: int
    seen_at: float
    """``time.monotonic()`` when the log read it."""
    clock: Clock
    clocks: Mapping[str, Clock]


class RoundLog:
    """Every committed round of ``run``, read every 0.1 s on a thread from creation on
    (until the process ends: the thread is a daemon)."""

    def __init__(self, run: Deployment, poll: float = 0.1) -> None:
        self.run = run
        self.poll = poll
        self.rounds: list[CommittedRound] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._follow, name="round-log", daemon=True).start()

    def _follow(self) -> None:
        while True:
            try:
                record = self.run.committed()
            except Exception:  # the stack went away at the end of a test
                return
            with self._lock:
                if record is not None and (not self.rounds
                                           or record.epoch != self.rounds[-1].epoch):
                    self.rounds.append(CommittedRound(record.epoch, time.monotonic(),
                                                      dict(record.clock), dict(record.clocks)))
            time.sleep(self.poll)

    def catching_up(self, node: str) -> list[CommittedRound]:
        """The rounds committed while ``node`` had its own clock."""
        with self._lock:
            return [r for r in self.rounds if node in r.clocks]

    def joined(self) -> bool:
        """Some node caught up on its own clock and, in the last round, none does."""
        with self._lock:
            return any(r.clocks for r in self.rounds) and not self.rounds[-1].clocks

    def table(self, since: float) -> str:
        """One line per round: when (seconds after ``since``), the round's clock and each
        node's own."""
        with self._lock:
            rounds = list(self.rounds)
        lines = []
        for r in rounds:
            own = "; ".join(f"{n} at {clock_to_json(c)}" for n, c in sorted(r.clocks.items()))
            lines.append(f"round {r.epoch} at +{r.seen_at - since:.1f} s: "
                         f"{clock_to_json(r.clock)}" + (f"; {own}" if own else ""))
        return "\n".join(lines)


def plan_output(stack: StackAddresses, module: str, name: str) -> str:
    """``hailstorm plan MODULE --name NAME`` (with Kafka), as an operator runs it: its
    output, raising when it refused or failed."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HAILSTORM_ZK=stack.zk,
               HAILSTORM_KAFKA=stack.kafka, HAILSTORM_SNAPSHOTS=str(stack.snapshots))
    done = subprocess.run([sys.executable, "-m", "hailstorm", "plan", module, "--name", name],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"hailstorm plan exited {done.returncode}: {done.stdout}"
                             f"{done.stderr[-2000:]}")
    return done.stdout


def comparison_line(comparison: Comparison, against: str = "the model") -> str:
    """``N keys and rows against ...: L lost, D duplicated, W wrong`` (and the oracle's,
    for a comparison that ran it or says why not)."""
    ran_oracle = comparison.oracle is not None or bool(comparison.oracle_note)
    return "; ".join([
        f"{comparison.keys_compared} keys and rows against {against}: {comparison.lost} "
        f"lost, {comparison.duplicated} duplicated, {comparison.wrong} wrong",
        *(comparison.oracle_lines() if ran_oracle else [])])


def counted_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """Both bolts' merged states (``counts``: lowercased words, ``cased``: words as written)
    and the new table ``cased_counts``, as rows: :class:`collections.Counter` over
    ``str.split`` of every line, without the topology's code, the model's or the
    oracle's. Every line the run produces is valid UTF-8."""
    lowered: Counter[str] = Counter()
    cased: Counter[str] = Counter()
    for message in messages:
        words = (message.value or b"").decode("utf-8").split()
        cased.update(words)
        lowered.update(word.lower() for word in words)
    return {"counts": {(w,): {"count": n} for w, n in lowered.items()},
            "cased": {(w,): {"count": n} for w, n in cased.items()},
            "cased_counts": {(w,): {"word": w, "n": n} for w, n in cased.items()}}


def mixed_by_hand(messages: Iterable[Message], deployed_at: Clock) -> dict[str, Rows]:
    """The mixed shape's ``counts``, ``word_counts`` and ``both`` (see :data:`MIXED_NEW`)
    counted by hand (:class:`collections.Counter`, no hailstorm code), ``deployed_at``
    being the committed clock the upgrade was deployed at."""
    lowered: Counter[str] = Counter()
    after: set[str] = set()
    for message in messages:
        words = [w.lower() for w in (message.value or b"").decode("utf-8").split()]
        lowered.update(words)
        if message.offset > deployed_at.get(message.source, -1):
            after.update(words)
    return {"counts": {(w,): {"count": n} for w, n in lowered.items()},
            "word_counts": {(w,): {"word": w, "n": n} for w, n in lowered.items()},
            "both": {(w,): {"seen": n, "top": n if w in after else None}
                     for w, n in lowered.items()}}


SHAPES = {
    "new": Shape("", CATCH_UP_NEW, "cased", "cased_counts",
                 lambda messages, _clock: counted_by_hand(messages), ("counts", "cased")),
    "mixed": Shape(MIXED_BASE_SINK, MIXED_NEW, "both", "word_counts", mixed_by_hand,
                   ("counts",)),
}
"""``new``: a new bolt reading the spout alone, and its new sink (the carried bolt keeps
committing on the live clock). ``mixed``: a new bolt reading the spout and the carried bolt,
which is held with its table while the new one catches up."""


def _as_rows(state: Mapping[str, Any]) -> Rows:
    return {(word,): dict(v) if isinstance(v, dict) else {"count": v}
            for word, v in state.items()}


WORDS = ["Apple", "apple", "Bob", "bob", "cat", "Cat", "dog", "Eel", "eel", "fox"]


def _toy_lines(rng: random.Random, n: int) -> list[bytes]:
    return [" ".join(rng.choices(WORDS, k=4)).encode() for _ in range(n)]


@dataclass
class CatchUpResult:
    """What :func:`catch_up_run` saw."""

    history: Clock = field(default_factory=dict)
    """The committed clock when the new bolt was deployed."""
    plan: str = ""
    rounds: str = ""
    """Every committed round of the second deployment (:meth:`RoundLog.table`)."""
    catching_up: int = 0
    """Rounds committed while the new bolt had its own clock."""
    clock_moved: bool = False
    """The round's clock moved during those rounds (the carried bolt kept up with the
    lines produced meanwhile)."""
    joined_s: float | None = None
    """Seconds from the first round with the new bolt catching up to the one it joined."""
    restarts: list[str] = field(default_factory=list)
    """Recoveries once the second deployment flowed (while the new bolt caught up)."""
    failed_attempts: list[str] = field(default_factory=list)
    """The second deployment's failed stage attempts."""
    by_hand: Comparison | None = None
    """Both bolts' committed states and the new table against :func:`counted_by_hand`."""
    comparison: Comparison | None = None
    """The same against the model and the oracle (None above :data:`MODEL_LINES`)."""

    @property
    def ok(self) -> bool:
        return (self.catching_up >= 1 and self.clock_moved and not self.restarts
                and not self.failed_attempts and self.by_hand is not None
                and self.by_hand.ok and (self.comparison is None or self.comparison.ok))


def catch_up_run(stack: StackAddresses, logs: Path, *, history: int, live: int, rate: float,
                 partitions: int = 2, snapshot_interval: float = 1.0, text: str = "toy",
                 shape: str = "new", progress: Callable[[str], None] = print) -> CatchUpResult:
    """Commit ``history`` lines with :data:`CATCH_UP_BASE` (and the ``shape``'s base, see
    :data:`SHAPES`), then deploy it with the shape's additions under the same name while
    ``live`` lines are produced at ``rate`` a second; wait for the new bolt to join the
    rounds and compare every state and table with a count by hand and, up to
    :data:`MODEL_LINES` lines, with the model (the bolts it is right about). ``text``:
    ``toy`` (lines of four of :data:`WORDS`: a state of a few keys) or ``zipf`` (realistic
    text, :func:`zipf_text_lines`: hundreds of thousands of keys, so every round's snapshot and
    table write grow with the backfill)."""
    if text not in ("toy", "zipf"):
        raise ValueError(f"text must be 'toy' or 'zipf', not {text!r}")
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {sorted(SHAPES)}, not {shape!r}")
    chosen = SHAPES[shape]
    code = CATCH_UP_BASE + chosen.base
    table = f"{chosen.table}_{uuid.uuid4().hex[:8]}"
    seeds = itertools.count(1)

    def _lines(rng: random.Random, n: int) -> list[bytes]:
        if text == "zipf":
            return zipf_text_lines(n, next(seeds))
        return _toy_lines(rng, n)

    result = CatchUpResult()
    topic = f"catchup-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, partitions)
    numbers = kafka.partitions_of(stack.kafka, topic)
    name = f"catchup_{uuid.uuid4().hex[:8]}"
    rng = random.Random(4142)
    produced = Produced(topic)
    for start in range(0, history, 100_000):
        produce(stack.kafka, produced, _lines(rng, min(100_000, history - start)), numbers)
    progress(f"produced {history} lines of history on {topic}")
    base = logs / "base.py"
    logs.mkdir(parents=True, exist_ok=True)
    database = f"sqlite:///{(logs / 'sinks.sqlite').resolve()}"  # both deployments'
    base.write_text(code.format(topic=topic, table=table))
    with TopologyRun(stack, base, name=name, log_dir=logs / "base", negotiators=1,
                     database=database, snapshot_interval=snapshot_interval) as run:
        started = time.monotonic()
        run.start()
        committed = run.wait_committed(produced.clock(), 600 + history / 1_000)
        progress(f"history committed in {time.monotonic() - started:.0f} s")
    result.history = dict(committed.clock)
    changed = logs / "changed.py"
    changed.write_text((code + chosen.added).format(topic=topic, table=table))
    result.plan = plan_output(stack, str(changed), name)
    progress(result.plan)
    with TopologyRun(stack, changed, name=name, log_dir=logs / "changed", negotiators=1,
                     database=database, snapshot_interval=snapshot_interval) as run:
        rounds = RoundLog(run)
        started = time.monotonic()
        run.start()
        run.wait_flowing()
        flowing_at = time.time()  # restarts before it are the start's, not the backfill's
        # A chunk a tenth of a second: the live clock moves in every round, however few
        # rounds the backfill takes (chunks of 500 moved it every 2.5 s at 200 lines/s).
        with BackgroundProducer(stack.kafka, produced, _lines(rng, live), numbers,
                                rate, chunk=max(1, round(rate / 10))) as producer:
            wait_for("the new bolt to join the rounds", rounds.joined,
                     240 + history / 1_000, run.alive)
            producer.join(60 + live / rate)
        committed = run.wait_committed(produced.clock(), 120)
        # Read now: by the time the model is computed, later rounds may have superseded
        # this one and the retention deleted its files.
        states = run.committed_bolt_states(committed)
        result.rounds = rounds.table(started)
        progress(result.rounds)
        behind = rounds.catching_up(chosen.behind)
        result.catching_up = len(behind)
        result.clock_moved = bool(behind) and behind[-1].clock != behind[0].clock
        joined = [r for r in rounds.rounds if behind and r.epoch > behind[-1].epoch]
        if behind and joined:
            result.joined_s = round(joined[0].seen_at - behind[0].seen_at, 1)
        result.restarts = [r.reason for r in run.recoveries()
                           if not r.is_start and r.at >= flowing_at]
        result.failed_attempts = [line for line in run.log("driver").splitlines()
                                  if "stage attempt" in line and "failed" in line]
        messages = produced.model_messages()
        by_hand = chosen.by_hand(messages, result.history)
        wait_for(f"the table of {chosen.table} to equal the count by hand",
                 lambda: run.sink_tables()[chosen.table] == by_hand[chosen.table],
                 60, run.alive)
        tables = run.sink_tables()
    # Compared once the run is down: the model takes minutes of one core on long histories.
    result.by_hand = compare_tables(by_hand, {
        **{bolt: _as_rows(states[bolt].merged) for bolt in by_hand if bolt in states},
        chosen.table: tables[chosen.table]})
    progress(comparison_line(result.by_hand, "a count by hand"))
    if len(messages) <= MODEL_LINES:
        result.comparison = compare_with_model(run_model(run.topology, messages), states,
                                               {chosen.table: tables[chosen.table]},
                                               bolts=chosen.model_bolts)
        progress(comparison_line(result.comparison))
    else:
        progress(f"not compared with the model and the oracle: {len(messages)} lines, over "
                 f"{MODEL_LINES} (see MODEL_LINES)")
    return result
