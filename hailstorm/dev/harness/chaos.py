"""``hailstorm chaos``: a seeded plan of faults (:class:`ChaosSchedule`), the run that
deploys a topology, produces in the background, applies the plan and compares the result
(states, tables, dead letters, late records and rejected rows) with both models and the
by-hand counts (:func:`run_chaos`), and its report
(:class:`ChaosReport`, text or JSON)."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hailstorm import kafka
from hailstorm.dev.harness.compare import BY_HAND, Comparison, compare_tables, compare_with_model
from hailstorm.dev.harness.deploys import compare_deployed, in_deploy_order, withheld_at_deploys
from hailstorm.dev.harness.evidence import (
    DEPLOYED,
    expects_recovery,
    missing_evidence,
    planned_restarts,
)
from hailstorm.dev.harness.faults import (
    DEFAULT_FAULT_KINDS,
    MASTER_PHASES,
    RECOVERY_PHASES,
    VICTIM_ROLES,
    ZOMBIE_FENCED,
    FaultKind,
    MasterPhase,
    Recovery,
    describe_restarts,
)
from hailstorm.dev.harness.producing import BackgroundProducer, Outgoing, ProducedTopics
from hailstorm.dev.harness.run import TopologyRun
from hailstorm.dev.harness.side_outputs import side_output_topics
from hailstorm.dev.harness.stack import (
    BrokerControl,
    StackAddresses,
    broker_fault_problem,
    kafka_nodes,
)
from hailstorm.dev.harness.wait import HarnessError
from hailstorm.model import run_model
from hailstorm.protocol.layout import RecoveryRecord
from hailstorm.sinks.urls import redact

T = TypeVar("T")


NOT_FOR_ZOMBIES = RECOVERY_PHASES | {"RoundPending"}
"""The phases a zombie is not planned for: it stops before its sink's next commit, which
comes only outside recoveries, and mostly after a round pending has committed."""


@dataclass(frozen=True)
class PlannedFault:
    kind: FaultKind
    delay: float
    """Seconds to wait (after the previous recovery) before injecting it."""
    phase: MasterPhase = "Flowing"
    """The master state to hit (see :meth:`TopologyRun.inject`)."""
    module: str = ""
    """A deploy: the changed topology module it deploys."""


def _cover(choices: Sequence[T], count: int, rng: random.Random) -> list[T]:
    """``count`` draws from ``choices``, each choice at least once when ``count`` allows,
    in random order."""
    drawn = list(choices[:count])
    drawn += [rng.choice(choices) for _ in range(count - len(drawn))]
    rng.shuffle(drawn)
    return drawn


@dataclass(frozen=True)
class ChaosSchedule:
    """A seeded plan of ``count`` faults of ``kinds``, spaced ``spacing`` s apart (+ jitter),
    timed for the master states ``phases``, and a ``deploy`` of each of ``deploys``.

    Every kind is used at least once when ``count >= len(kinds)``, and every phase once
    among the faults that are not broker faults (those hit a flowing topology) when there
    are enough; the rest are drawn at random. Faults are applied one after another, each
    after the previous recovery.
    """

    kinds: tuple[FaultKind, ...] = DEFAULT_FAULT_KINDS
    count: int = 3
    spacing: float = 2.0
    seed: int = 0
    phases: tuple[MasterPhase, ...] = MASTER_PHASES
    deploys: tuple[str, ...] = ()
    """Changed modules of the topology to deploy mid-run, in this order, each a ``deploy``
    fault placed at a seeded position among the others (after ``count`` of them)."""

    def plan(self) -> list[PlannedFault]:
        rng = random.Random(self.seed)
        kinds = _cover(self.kinds, self.count, rng)
        delays = [self.spacing * (0.5 + rng.random()) for _ in kinds]
        timed = [i for i, k in enumerate(kinds) if k != "broker"]
        phases: list[MasterPhase] = ["Flowing"] * len(kinds)
        for i, phase in zip(timed, _cover(self.phases, len(timed),
                                          random.Random(self.seed * 31 + 7)), strict=True):
            phases[i] = phase
        # A sink commits only outside recoveries, and a zombie is stopped before a commit,
        # mostly after the round pending has committed: it swaps those states for another
        # fault's.
        for i, kind in enumerate(kinds):
            if kind == "zombie" and phases[i] in NOT_FOR_ZOMBIES:
                other = next((j for j in timed if kinds[j] != "zombie"
                              and phases[j] not in NOT_FOR_ZOMBIES), None)
                if other is None:
                    phases[i] = "Flowing"
                else:
                    phases[i], phases[other] = phases[other], phases[i]
        planned = [PlannedFault(k, d, ph) for k, d, ph in zip(kinds, delays, phases,
                                                               strict=True)]
        placing = random.Random(self.seed * 13 + 5)
        at = 0
        for module in self.deploys:  # in order, each somewhere after the one before
            at = placing.randint(at, len(planned))
            planned.insert(at, PlannedFault("deploy", self.spacing * (0.5 + placing.random()),
                                            "Flowing", module))
            at += 1
        return planned

    def rng(self) -> random.Random:
        """The generator victims are drawn from (independent of the plan)."""
        return random.Random(self.seed * 7919 + 1)

    def restarts(self, local_recovery: bool = False) -> tuple[int, int]:
        """The least and most recoveries the plan causes in a run with or without
        ``local_recovery`` (see :func:`planned_restarts`)."""
        return planned_restarts(((p.kind, p.phase) for p in self.plan()), local_recovery)



@dataclass
class ChaosReport:
    """What a chaos run did and found."""

    topology: str
    messages: int
    partitions: int
    seed: int
    faults: list[Recovery]
    comparison: Comparison
    committed_epoch: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    restarts: int = 0
    """Moves to Initialize after the first start (recoveries, including retried ones)."""
    unexplained: list[RecoveryRecord] = field(default_factory=list)
    """Recoveries no injected fault explains: each one fails the run."""
    database: str = ""
    """The sinks' database, its password masked."""
    independent: Comparison | None = None
    """The sink tables against expectations computed without the topology's code
    (:data:`BY_HAND`; None: none for this topology)."""
    retries: list[RecoveryRecord] = field(default_factory=list)
    """Recoveries that started the recovery before them over (counted in ``restarts``, not
    against ``planned_restarts``)."""
    planned_restarts: tuple[int, int] | None = None
    """The least and most recoveries the faults must have caused (None: not checked)."""
    may_miss: tuple[str, ...] = ()
    """Fault kinds allowed to be ineffective (see :meth:`ineffective`) without failing the
    run."""
    started_late: Comparison | None = None
    """The nodes a mid-run deploy added with ``start="latest"`` (and the new sinks they
    alone feed), against the model over the messages after the committed clock the deploy
    started from (None: there were none); the other nodes are in :attr:`comparison`."""

    @property
    def ok(self) -> bool:
        """Exactly the model's state, every fault recovered from and effective (or of a
        kind in :attr:`may_miss`), the restarts as planned and none unexplained."""
        return (self.comparison.ok and (self.independent is None or self.independent.ok)
                and (self.started_late is None or self.started_late.ok)
                and all(r.committed_after is not None for r in self.faults)
                and all(r.restored_after is not None for r in self.faults
                        if r.fault.kind == "broker")
                and not self.unexplained and self.restarts_as_planned
                and not [r for r in self.ineffective() if r.fault.kind not in self.may_miss])

    def ineffective(self) -> list[Recovery]:
        """The faults that hit an idle topology or left some evidence out (see
        :attr:`Recovery.bit`)."""
        return [r for r in self.faults if not r.bit]

    @property
    def caused_restarts(self) -> int:
        """Recoveries that are not retries of the one before them."""
        return self.restarts - len(self.retries)

    @property
    def restarts_as_planned(self) -> bool:
        if self.planned_restarts is None:
            return True
        low, high = self.planned_restarts
        return low <= self.caused_restarts <= high

    def faults_by_kind(self) -> dict[str, int]:
        """Planned faults per kind (triggers not counted)."""
        return dict(Counter(r.fault.kind for r in self.faults if not r.fault.trigger))

    def faults_by_phase(self) -> dict[str, int]:
        """Every fault (triggers too) per master state it hit."""
        return dict(Counter(r.fault.phase for r in self.faults))

    @property
    def triggers(self) -> int:
        return sum(1 for r in self.faults if r.fault.trigger)

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "topology": self.topology, "messages": self.messages,
            "partitions": self.partitions, "seed": self.seed, "ok": self.ok,
            "database": self.database,
            "seconds": round(self.seconds, 2), "committed_epoch": self.committed_epoch,
            "faults_by_kind": self.faults_by_kind(),
            "faults_by_phase": self.faults_by_phase(), "triggers": self.triggers,
            "recoveries": [
                {"kind": r.fault.kind, "target": r.fault.target, "pid": r.fault.pid,
                 "epoch": r.fault.epoch, "detail": r.fault.detail,
                 "uncommitted": r.fault.uncommitted, "producing": r.fault.producing,
                 "phase": r.fault.phase, "trigger": r.fault.trigger,
                 "effective": r.fault.effective, "bit": r.bit, "missing": r.missing,
                 "expects_recovery": expects_recovery(r.fault),
                 "evidence": r.fault.evidence,
                 "recovery": None if r.record is None else asdict(r.record),
                 "apart_recovery": None if r.apart is None else asdict(r.apart),
                 "flowing_after": None if r.flowing_after is None else round(r.flowing_after, 2),
                 "committed_after": None if r.committed_after is None
                 else round(r.committed_after, 2),
                 "restored_after": None if r.restored_after is None
                 else round(r.restored_after, 2),
                 "restarted": r.restarted, "living": len(r.fault.incarnations)}
                for r in self.faults],
            "lost": c.lost, "duplicated": c.duplicated, "wrong": c.wrong,
            "instance_mismatches": c.instance_mismatches, "keys_compared": c.keys_compared,
            "differences": [{**asdict(d), "key": repr(d.key), "expected": repr(d.expected),
                             "actual": repr(d.actual)} for d in c.first(10)],
            "notes": self.notes, "oracle": c.oracle_lines(),
            "against_oracle": None if c.oracle is None else {
                "lost": c.oracle.lost, "duplicated": c.oracle.duplicated,
                "wrong": c.oracle.wrong, "keys_compared": c.oracle.keys_compared},
            "model_disagreements": c.model_disagreements,
            "side_outputs": None if c.side is None else {
                "places": list(c.side.places), "read": c.side.read,
                "model": asdict(c.side),
                "oracle": None if c.oracle is None or c.oracle.side is None
                else asdict(c.oracle.side)},
            "restarts": self.restarts, "caused_restarts": self.caused_restarts,
            "retries": [asdict(r) for r in self.retries],
            "planned_restarts": None if self.planned_restarts is None
            else list(self.planned_restarts),
            "may_miss": list(self.may_miss),
            "ineffective": [f"{r.fault.kind} {r.fault.target}" for r in self.ineffective()],
            "unexplained_recoveries": [asdict(r) for r in self.unexplained],
            "started_late": None if self.started_late is None else {
                "lost": self.started_late.lost, "duplicated": self.started_late.duplicated,
                "wrong": self.started_late.wrong, "rows": self.started_late.keys_compared},
            "independent": None if self.independent is None else {
                "lost": self.independent.lost, "duplicated": self.independent.duplicated,
                "wrong": self.independent.wrong, "rows": self.independent.keys_compared},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_text(self) -> str:
        c = self.comparison
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.faults_by_kind().items())) or "none"
        phases = ", ".join(f"{n} in {k}" for k, n in sorted(self.faults_by_phase().items()))
        lines = [
            f"topology {self.topology}: {self.messages} messages over {self.partitions} "
            f"partitions, seed {self.seed}, {self.seconds:.1f} s",
            f"sinks in {self.database}",
            f"faults: {len(self.faults) - self.triggers} planned ({kinds}) and "
            f"{self.triggers} triggers; hit {phases or 'nothing'}",
        ]
        for r in self.faults:
            flowing = "never" if r.flowing_after is None else f"{r.flowing_after:.1f} s"
            committed = "never" if r.committed_after is None else f"{r.committed_after:.1f} s"
            line = (f"  {r.fault.kind:<10} {r.fault.target} (pid {r.fault.pid}, "
                    f"{r.fault.phase or '?'} {r.fault.epoch}"
                    + (", trigger" if r.fault.trigger else "")
                    + f", {r.fault.uncommitted} uncommitted): Flowing after "
                    f"{flowing}, committed past it after {committed}")
            if r.fault.kind == "broker":
                back = "never" if r.restored_after is None else f"{r.restored_after:.1f} s"
                line += f"; {r.fault.detail}, back in the cluster after {back}"
            elif r.fault.detail:
                line += f"; {r.fault.detail}"
            if r.record is not None:
                line += f"; recovery epoch {r.record.epoch}: {r.record.reason[:120]}"
            if r.apart is not None:
                line += (f"; the other registered after it was done, recovery epoch "
                         f"{r.apart.epoch}: {r.apart.reason[:120]}")
            line += f"; {describe_restarts(r.restarted, len(r.fault.incarnations))}"
            if r.missing:
                line += f"; NO EVIDENCE: {', '.join(r.missing)}"
            lines.append(line)
        idle = [r.fault for r in self.faults if not r.fault.effective]
        lines.append(f"effective: {len(self.faults) - len(idle)} of {len(self.faults)} faults "
                     "hit uncommitted data while the producer wrote"
                     + (f"; on an idle topology: {', '.join(f.target for f in idle)}"
                        if idle else ""))
        unproven = [r for r in self.faults if r.missing]
        lines.append(f"evidence: {len(self.faults) - len(unproven)} of {len(self.faults)} "
                     "faults left every piece of theirs"
                     + "".join(f"; {r.fault.kind} {r.fault.target} has no "
                               f"{', no '.join(r.missing)}" for r in unproven))
        if self.may_miss:
            excused = [r for r in self.ineffective() if r.fault.kind in self.may_miss]
            lines.append(f"may be ineffective: {', '.join(self.may_miss)} "
                         f"({len(excused)} of them were)")
        zombies = [r.fault for r in self.faults if r.fault.kind == "zombie"]
        if zombies:
            fenced = sum(ZOMBIE_FENCED in f.detail for f in zombies)
            lines.append(f"zombies: {len(zombies)} sinks resumed after their replacement "
                         f"committed: {fenced} fenced by their table or topic, "
                         f"{len(zombies) - fenced} ended on their own")
        planned = "" if self.planned_restarts is None else \
            " (planned {}..{}{})".format(*self.planned_restarts,
                                         "" if self.restarts_as_planned else ": NOT AS PLANNED")
        lines.append(f"restarts: {self.restarts} for {len(self.faults)} faults{planned}, "
                     f"{len(self.retries)} retried, {len(self.unexplained)} unexplained")
        for u in self.unexplained[:5]:
            lines.append(f"  unexplained: epoch {u.epoch} from {u.previous}: {u.reason}")
        lines.append(f"final committed round: epoch {self.committed_epoch}; "
                     f"{c.keys_compared} keys and rows compared (bolt states, sink tables "
                     "and topics, dead letters, late records and rejected rows)")
        lines.append(f"result: {c.lost} lost, {c.duplicated} duplicated, {c.wrong} wrong"
                     + (f", instances differing: {', '.join(c.instance_mismatches)}"
                        if c.instance_mismatches else ""))
        for d in c.first(5):
            lines.append(f"  {d.kind}: {d.node}[{d.key!r}] expected {d.expected!r}, "
                         f"committed {d.actual!r}")
        if self.started_late is not None:
            late = self.started_late
            lines += _against(f"started at a deploy's clock: {late.keys_compared} keys and "
                              "rows against the model after it", late)
        lines.append(side_output_line(c))
        if self.independent is not None:
            lines += _against(f"by hand: {self.independent.keys_compared} sink rows against "
                              "a count written without the topology's code", self.independent)
        lines.extend(c.oracle_lines())
        lines.extend(self.notes)
        lines.append("OK: exactly the model's state" if self.ok else "FAILED")
        return "\n".join(lines)


def _against(what: str, comparison: Comparison) -> list[str]:
    """A report's line of ``comparison`` (``what`` it compared) and its first differences."""
    c = comparison
    return [f"{what}: {c.lost} lost, {c.duplicated} duplicated, {c.wrong} wrong"] + [
        f"  {d.kind}: {d.node}[{d.key!r}] expected {d.expected!r}, committed {d.actual!r}"
        for d in c.first(5)]


def side_output_line(c: Comparison) -> str:
    """The report's line on the dead letters, late records and rejected rows read back,
    against the model and the oracle."""
    if c.side is None:
        return "dead letters, late records and rejected rows: not read"
    oracle = "" if c.oracle is None or c.oracle.side is None else \
        f"; {c.oracle.side.summary('the oracle')}"
    return (f"dead letters, late records and rejected rows ({', '.join(c.side.places)}): "
            f"{c.side.read} read back; {c.side.summary('the model')}{oracle}")


TOP_UP_SECONDS = 60.0
"""When the faults outlast the workload, :func:`run_chaos` produces more of it (from where
the last top-up ended) before the next fault, this many seconds for each fault still to
come, so that every fault hits data in flight (a fault timed for a recovery state strikes
only once its trigger's recovery got there, which on a busy machine can take longer than
one fault's share); the last top-up stops once the faults are done."""
TOP_UP_RATE = 0.1
"""A top-up's rate, as a share of the run's: a trickle in small chunks
(:data:`TOP_UP_CHUNK`) keeps data in flight without a backlog that the end of the run must
drain (at the full rate, a CI run on a busy machine produced 70% more than its workload)."""
TOP_UP_CHUNK = 50
"""Messages per acknowledged chunk of a top-up (a chunk every few tenths of a second)."""


def cycled(values: Sequence[T], start: int, count: int) -> list[T]:
    """``count`` of ``values`` from index ``start`` on, starting over at the end."""
    return [values[(start + i) % len(values)] for i in range(count)] if values else []


def run_chaos(
    stack: StackAddresses,
    topology_ref: str | Path,
    values: Sequence[Outgoing],
    schedule: ChaosSchedule,
    *,
    log_dir: Path,
    partitions: int = 4,
    rate: float = 5000.0,
    timeout: float = 240.0,
    progress: Callable[[str], None] = lambda _m: None,
    brokers: BrokerControl | None = None,
    database: str | None = None,
    may_miss: Sequence[str] = (),
    local_recovery: bool = False,
    victims: Sequence[str] = VICTIM_ROLES,
    standby: bool = False,
) -> ChaosReport:
    """Deploy, produce ``values`` in the background, apply ``schedule``, drain, compare
    every bolt's committed state, every sink table and topic, and every dead letter, late
    record and rejected row the run wrote (read back, see
    :mod:`~hailstorm.dev.harness.side_outputs`) with the model and the oracle.

    The sinks write to ``database`` (see :func:`private_database`: by default a new
    database on the stack's PostgreSQL).

    ``brokers`` stops and starts the stack's Kafka nodes; a schedule with ``broker`` faults
    needs it and a cluster of :data:`MIN_KAFKA_NODES` nodes (refused before anything runs).

    Every fault must bite (its evidence, and data in flight when it hit) unless its kind is
    in ``may_miss``: when the faults outlast ``values``, more of them are produced again
    (:data:`TOP_UP_SECONDS` per fault to come, noted in the report); the restarts must be within
    the schedule's :meth:`ChaosSchedule.restarts`. ``local_recovery``: the run restarts a
    failed instance alone where it can (``hailstorm run --local-recovery``, and with
    ``standby`` its warm standby takes over: ``--standby``); ``victims``:
    the roles the processor, task, zk-session and pair faults draw from (the trigger of a
    fault in a recovery is a spout when ``local_recovery``: its failure restarts everything).
    """
    started = time.monotonic()
    plan = schedule.plan()
    if any(p.kind == "broker" for p in plan):
        if brokers is None:
            raise HarnessError("broker faults need control of the Kafka nodes: pass brokers= "
                               "(e.g. the DevStack) to run_chaos")
        problem = broker_fault_problem(kafka_nodes(stack.kafka))
        if problem:
            raise HarnessError(problem)
    with TopologyRun(stack, topology_ref, log_dir=log_dir, brokers=brokers,
                     database=database, zombies=any(p.kind == "zombie" for p in plan)) as run:
        if local_recovery:
            run.driver_options = ["--local-recovery", *(["--standby"] if standby else [])]
        run.victim_roles = tuple(victims)
        topics = run.topology.source_topics
        for topic in topics:
            kafka.create_topic(stack.kafka, topic, partitions)
        for other in side_output_topics(run.topology):  # dead letters, late records
            kafka.create_topic(stack.kafka, other, 1)
        parts = kafka.partitions_of(stack.kafka, topics[0])
        for topic in topics[1:]:
            if kafka.partitions_of(stack.kafka, topic) != parts:
                raise HarnessError(f"the source topics {', '.join(topics)} must have the same "
                                   f"partitions; {topic} has others than {topics[0]}")
        produced = ProducedTopics(topics)
        progress(f"starting {run.name} ({run.expected_count()} processors)")
        run.start()
        run.wait_flowing(timeout)
        progress("flowing; producing")
        recoveries: list[Recovery] = []
        rng = schedule.rng()
        topped_up = 0
        with contextlib.ExitStack() as producers:
            producer = producers.enter_context(
                BackgroundProducer(stack.kafka, produced, values, parts, rate))
            initial = run.topology
            for i, planned in enumerate(plan):
                time.sleep(planned.delay)
                run.wait_flowing(timeout)
                if not producer.running:  # the faults outlast the workload: more of it
                    producer.join(0)  # its error, if it had one
                    trickle = max(1.0, rate * TOP_UP_RATE)
                    remaining = TOP_UP_SECONDS * (len(plan) - i)
                    more = cycled(values, topped_up, max(1, int(trickle * remaining)))
                    topped_up += len(more)
                    producer = producers.enter_context(BackgroundProducer(
                        stack.kafka, produced, more, parts, trickle, chunk=TOP_UP_CHUNK))
                run.producer = producer
                run.await_uncommitted(producer)
                faults = [run.deploy(planned.module)] if planned.kind == "deploy" else \
                    run.inject(planned.kind, rng, producer, planned.phase)
                for fault in faults:
                    progress(f"fault {i + 1}/{len(plan)}"
                             + (" (trigger)" if fault.trigger else "")
                             + f": {fault.kind} {fault.target} in {fault.phase}"
                             + (f" ({fault.detail})" if fault.detail else "")
                             + f"; {fault.uncommitted} uncommitted messages, producer "
                             + ("running" if fault.producing else "done"))
                measured: list[Recovery] = []
                for fault in reversed(faults):  # the last one recovers last
                    recovery = run.measure_recovery(fault, timeout, producer)
                    measured.insert(0, recovery)
                    progress(f"recovered from {fault.kind} {fault.target}: committed after "
                             f"{recovery.committed_after}")
                recoveries.extend(measured)
            if topped_up:  # a top-up only keeps data in flight while faults remain
                producers.close()
                producer.join(0)  # its error, if it had one
            else:
                producer.join(timeout + len(values) / rate)
        again = produced.count - len(values)
        target = produced.clock()
        progress(f"produced {produced.count}; draining")
        committed = run.wait_committed(target, timeout)
        produced.fill_before(stack.kafka, committed.clock)
        states = run.committed_bolt_states(committed)
        tables = run.sink_tables()
        side_outputs = run.side_outputs()
        notes = []
        if topped_up:
            notes.append(f"note: the faults outlasted the workload; {again} of its messages "
                         "were produced again to keep data in flight")
        if dict(committed.clock) != target:
            notes.append(f"note: committed clock {dict(committed.clock)} != produced {target}")
        messages = produced.model_messages()
        late, started_late = compare_deployed(run.topology, run.deploys, initial, messages,
                                              states, tables)
        model = run_model(run.topology, in_deploy_order(messages, [c for _t, c in run.deploys]),
                          withheld_at_deploys(initial, run.deploys))
        comparison = compare_with_model(
            model, states, {n: v for n, v in tables.items() if n not in late},
            bolts=[b.name for b in run.topology.bolts if b.name not in late],
            side_outputs=side_outputs)
        by_hand = BY_HAND.get(run.topology.name)
        independent = None if by_hand is None else compare_tables(by_hand(messages), tables)
        accounting = run.accounting()
        for index, fault in enumerate(run.faults):
            if fault.kind == "deploy":  # the new driver's processors started after it
                fault.evidence[DEPLOYED] = any(r.at >= fault.at for r in accounting.starts)
            for recovery in recoveries:
                if recovery.fault is fault:
                    recovery.record = accounting.matched.get(index)
                    recovery.apart = accounting.apart.get(index)
                    recovery.missing = missing_evidence(fault, index in accounting.matched)
        return ChaosReport(run.topology.name, produced.count, len(parts), schedule.seed,
                           recoveries, comparison, committed.epoch,
                           time.monotonic() - started, notes, accounting.restarts,
                           accounting.unexplained, redact(run.database), independent,
                           retries=accounting.retries,
                           planned_restarts=schedule.restarts(local_recovery),
                           may_miss=tuple(may_miss), started_late=started_late)
