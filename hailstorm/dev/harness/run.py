"""Hurting a running topology: :class:`TopologyRun` is a
:class:`~hailstorm.dev.harness.measured.MeasuredRun` that injects faults (a processor's SIGKILL,
the leading negotiator's, an expired ZooKeeper session, a zombie sink, a stalled bolt, a
killed Kafka node, changed code deployed), each timed for a master state and recorded with
what the topology held when it hit, and measures the recovery from each."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka import KafkaException

from hailstorm.dev.harness.evidence import (
    DRAINED,
    FENCED,
    JOINED_RECOVERY,
    NEW_LEADER,
    SESSION_EXPIRED,
    STOPPED_BEFORE_COMMIT,
    VICTIM_GONE,
    VICTIM_RESUMED,
    VICTIM_STOPPED,
    names,
)
from hailstorm.dev.harness.faults import (
    RECOVERY_PHASES,
    ROUND_PHASES,
    ZOMBIE_FENCED,
    Fault,
    FaultKind,
    MasterPhase,
    _clock_key,
    phase_name,
    process_stopped,
    zombie_outcome,
)
from hailstorm.dev.harness.measured import MeasuredRun
from hailstorm.dev.harness.producing import BackgroundProducer
from hailstorm.dev.harness.stack import (
    TopicLayout,
    _NodeRestart,
    broker_fault_problem,
    busiest_leader,
    topic_layout,
)
from hailstorm.dev.harness.wait import HarnessError, wait_for
from hailstorm.dev.services import pid_alive
from hailstorm.failpoints import PAUSE_DIR_VAR, pause_request

PICK_POLL = 0.02
"""Seconds between two looks for a victim to hurt (see :meth:`TopologyRun._pick_processor`)."""

ZOMBIE_PICKS = 3
"""Sinks :meth:`TopologyRun.zombie_sink` picks in turn while each ends (a failpoint the
test planned, or the recovery it starts, restarts it) before it could be stopped."""


class TopologyRun(MeasuredRun):
    """A :class:`~hailstorm.dev.harness.measured.MeasuredRun` the harness hurts: faults timed
    for a master state, and the recovery from each measured (context manager)."""

    # -- timing a fault -------------------------------------------------------------------

    def _fault(self, kind: FaultKind, target: str, pid: int,
               phase: MasterPhase | None = None) -> Fault:
        """Record a fault about to hit ``target``: what the topology held, then (with
        ``phase``) wait until the master is in that state; the caller strikes right after.
        The master's state, epoch and the time are read last, just before the strike.

        While the producer writes, the strike waits (up to 15 s) for some data in flight,
        awaiting the phase again when it passed meanwhile. A recovery state is struck as
        soon as it is seen: it passes once (in half a second, after a trigger), and a
        second wait for it would only time out and strike wherever the master is then."""
        producer = self.producer
        fault = Fault(kind, target, pid, time.time(), 0, self.position())
        deadline = time.monotonic() + 15
        while True:  # some data in flight when it hits, while the producer writes
            if phase is not None:
                self.wait_phase(phase)
            fault.uncommitted = self.uncommitted()
            if fault.uncommitted or producer is None or not producer.running \
                    or phase in RECOVERY_PHASES or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        fault.producing = None if producer is None else producer.running
        master = self.master()
        fault.phase = phase_name(master.state if master else None)
        fault.epoch = master.state.epoch if master else 0
        fault.incarnations = self.incarnations()
        fault.at = time.time()
        self.faults.append(fault)
        return fault

    def wait_phase(self, phase: MasterPhase, timeout: float | None = None) -> str:
        """Poll the master (every 2 ms) until it is in ``phase``; give up after ``timeout``
        seconds (default: 3 snapshot intervals for a round's phase, else 60) and return the
        state it is in then: a short phase can be missed, and the fault reports where it
        really hit."""
        if timeout is None:
            timeout = 3 * self.snapshot_interval + 2 if phase in ROUND_PHASES else 60.0
        deadline = time.monotonic() + timeout
        checked = time.monotonic()
        while True:
            master = self.master()
            name = phase_name(master.state if master else None)
            if name == phase or time.monotonic() >= deadline:
                return name
            if time.monotonic() - checked > 0.5:
                self.alive()
                checked = time.monotonic()
            time.sleep(0.002)

    # -- the faults -----------------------------------------------------------------------

    def _pick_processor(self, role: str | None, rng: random.Random | None,
                        pid: int | None, timeout: float = 120.0,
                        epoch: int = 0, exclude: str = "") -> tuple[str, int]:
        """``pid``'s processor, or a living one of ``role`` drawn with ``rng`` (that
        answered a master state of ``epoch`` or later: the current incarnation during a
        recovery). When the topology is restarting (a fault the test planned, such as a
        failpoint, may just have fired) it waits, up to ``timeout`` s, until one of
        ``role`` runs again."""
        if pid is not None:
            for ident, report in self.processors().items():
                if int(report.info.get("pid", -1)) == pid:
                    return ident, pid
            return f"pid {pid}", pid
        roles = (role,) if role else self.victim_roles

        def living() -> list[tuple[str, int]]:
            return sorted(
                (ident, int(r.info["pid"])) for ident, r in self.processors().items()
                if ident.split(":", 1)[0] in roles and "pid" in r.info and ident != exclude
                and r.epoch >= epoch and pid_alive(int(r.info["pid"])))

        # Polled often: a fault timed for SpoutsRewind picks its victim among the new
        # incarnation, and with restarts in place that state can last 0.15 s.
        candidates = wait_for(f"a living {'/'.join(roles)} processor to hurt", living,
                              timeout, self.alive, poll=PICK_POLL)
        return (rng or random.Random()).choice(candidates)

    def kill_processor(self, pid: int | None = None, role: str | None = None,
                       rng: random.Random | None = None, phase: MasterPhase | None = None,
                       epoch: int = 0, task: bool = False) -> Fault:
        """SIGKILL a processor's process: ``pid``, or one of ``role`` at random (of
        ``epoch`` or later, see :meth:`_pick_processor`), once the master is in ``phase``
        (None: now). Its Spark task starts the next incarnation. With ``task``, SIGKILL
        the task's Python worker instead (the processor dies with it): Spark's task and
        stage fail, as when an executor is lost."""
        ident, victim = self._pick_processor(role, rng, pid, epoch=epoch)
        fault = self._fault("task" if task else "processor", ident, victim, phase)
        if task:
            victim = self.worker_of(ident)
            fault.add_detail(f"its Spark task's worker, pid {victim}")
        self._sigkill(fault, victim)
        self.note_absorbed(fault, ident, fault.pid)
        return fault

    def kill_pair(self, rng: random.Random | None = None, phase: MasterPhase | None = None,
                  epoch: int = 0) -> Fault:
        """SIGKILL two processors' processes at the same moment (drawn as
        :meth:`kill_processor` draws one, the second among the others), once the master is
        in ``phase``: one fault, whose recovery restarts both."""
        first, first_pid = self._pick_processor(None, rng, None, epoch=epoch)
        second, second_pid = self._pick_processor(None, rng, None, epoch=epoch,
                                                  exclude=first)
        fault = self._fault("pair", first, first_pid, phase)
        fault.others = (second,)
        fault.add_detail(f"and {second}, pid {second_pid}, at once")
        self._sigkill(fault, first_pid, second_pid)
        if fault.phase == "Initialize":  # absorbed only when both joined the recovery
            fault.evidence[JOINED_RECOVERY] = all(
                self.joined_recovery(fault.epoch, victim, pid)
                for victim, pid in ((first, first_pid), (second, second_pid)))
        return fault

    @staticmethod
    def _sigkill(fault: Fault, *victims: int) -> None:
        """SIGKILL ``victims`` (all at once) and record whether they are gone
        (:data:`VICTIM_GONE`): a victim that had already ended (on its own, or a zombie
        process) was not hit by this fault, and one that still runs 10 s later was not
        killed. When one had ended, none is killed: its pid may be another process's by
        now, and the fault fails for its missing evidence anyway."""
        hit = all(pid_alive(victim) for victim in victims)
        for victim in victims if hit else ():
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                hit = False
        if not hit:
            fault.evidence[VICTIM_GONE] = False
            fault.add_detail("a victim had ended before the SIGKILL")
            return
        deadline = time.monotonic() + 10
        while any(map(pid_alive, victims)) and time.monotonic() < deadline:
            time.sleep(0.01)
        fault.evidence[VICTIM_GONE] = not any(map(pid_alive, victims))

    def leader(self) -> str | None:
        """The label of the leading negotiator, from the master record."""
        master = self.master()
        return master.leader if master is not None and master.leader in self.procs else None

    def kill_negotiator_leader(self, phase: MasterPhase | None = None) -> Fault:
        """SIGKILL the leading negotiator (once the master is in ``phase``) and start a new
        one (the next standby)."""
        label = wait_for("a negotiator of ours to lead", self.leader, 60, self.alive)
        proc = self.procs[label]
        fault = self._fault("negotiator", label, proc.pid, phase)
        if self.leader() != label:  # leadership moved while waiting for the phase
            label = wait_for("a negotiator of ours to lead", self.leader, 60, self.alive)
            proc = self.procs[label]
            fault.target, fault.pid = label, proc.pid
        self.killed.add(label)
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        fault.evidence[VICTIM_GONE] = proc.poll() is not None
        self._spawn_negotiator()

        def another_leads() -> bool:  # the next state the master records, by its new leader
            master = self.master()
            return master is not None and master.leader != label
        try:
            wait_for(f"a negotiator other than {label} to lead", another_leads, 60, self.alive,
                     poll=0.05)
            fault.evidence[NEW_LEADER] = True
        except HarnessError:
            fault.evidence[NEW_LEADER] = False
        return fault

    def expire_zk_session(self, processor: str | None = None,
                          rng: random.Random | None = None, timeout: float = 60,
                          phase: MasterPhase | None = None, epoch: int = 0) -> Fault:
        """Make a processor's ZooKeeper session expire for real.

        SIGSTOP its worker so it cannot heartbeat, wait until the server expired the session
        (the ephemeral ``living`` node is gone, or owned by another session), then SIGCONT:
        the processor finds its session lost and ends, and the topology recovers.
        """
        if processor is None:
            ident, victim = self._pick_processor(None, rng, None, epoch=epoch)
        else:  # a living incarnation of it (the last one may just have been killed)
            def living() -> int | None:
                report = self.processors().get(processor)
                pid = int(report.info.get("pid", -1)) if report is not None else -1
                return pid if pid > 0 and pid_alive(pid) else None

            ident, victim = processor, wait_for(f"{processor} to run", living, timeout,
                                                self.alive)
        node = self.paths.living_node(ident)
        fault = self._fault("zk-session", ident, victim, phase)
        owner = self.zk.exists(node)  # the session that must expire: read just before
        report = self.processors().get(ident)
        fault.evidence[SESSION_EXPIRED] = False
        if owner is None or report is None or int(report.info.get("pid", -1)) != victim \
                or not pid_alive(victim):  # no session of the victim's to expire
            fault.add_detail("the victim had no living node when stopped")
            return fault
        with self._kept_stopped(victim):
            os.kill(victim, signal.SIGSTOP)

            def expired() -> bool:
                stat = self.zk.exists(node)
                return stat is None or stat.ephemeralOwner != owner.ephemeralOwner
            fault.evidence[SESSION_EXPIRED] = bool(
                wait_for(f"the session of {ident} to expire", expired, timeout, poll=0.25))
        self.note_absorbed(fault, ident, victim)
        return fault

    def zombie_sink(self, rng: random.Random | None = None, timeout: float = 120,
                    phase: MasterPhase | None = None, epoch: int = 0) -> Fault:
        """Make a sink a zombie: stop it with rows it has not committed, keep it stopped
        until its session expired and a round of a newer run (its replacement's) stood
        (committed; or, nothing read since, confirmed: the replacement claimed the sink,
        which fences the zombie, when it joined that run), then SIGCONT it. It stops itself
        as it is about to commit (a pause point the harness arms for its pid), so it
        resumes straight into the commit its replacement superseded; a sink with nothing
        to commit within 10 s gets a SIGSTOP where it is.
        The fault records the state it really stopped in (a schedule never times a zombie
        for a recovery state: sinks do not commit then).
        The zombie must write nothing: the fault's ``detail`` says where it stopped and how
        it ended (fenced by its table, or first noticing its lost session), read from its
        log. Needs ``TopologyRun(zombies=True)``."""
        if not self.zombies:
            raise HarnessError("zombie faults need a driver that leaves stopped workers alive: "
                               "TopologyRun(zombies=True)")
        for _ in range(ZOMBIE_PICKS):
            ident, victim = self._pick_processor("sink", rng, None, epoch=epoch)
            fault = self._fault("zombie", ident, victim, phase)
            with self._kept_stopped(victim):
                stopped = self._stop_before_commit(ident, victim)
                if stopped is None:  # it ended first (a failpoint the test planned restarted
                    self.faults.remove(fault)  # the run): its next incarnation is picked
                    continue
                fault.detail = stopped
                master = self.master()  # the state and time it really stopped in
                fault.phase = phase_name(master.state if master else None)
                fault.epoch = master.state.epoch if master else 0
                fault.at = time.time()

                wait_for(f"a replacement of {ident} to commit",
                         self._replacement_stood(ident, victim), timeout, self.alive,
                         poll=0.25)
            # Its session may expire within a recovery under way (a failpoint the test
            # planned restarted the run as it stopped), which its replacement joins: then
            # no recovery names it, and the next one that does belongs to a later fault.
            if not any(r.epoch >= fault.epoch and r.at >= fault.at - 1.0
                       and names(r.reason, ident) for r in self.recoveries()):
                fault.evidence[JOINED_RECOVERY] = True
            break
        else:
            raise HarnessError(f"no sink stayed alive until it could be stopped "
                               f"({ZOMBIE_PICKS} picked)")
        wait_for(f"the zombie {ident} (pid {victim}) to end", lambda: not pid_alive(victim),
                 60, self.alive, poll=0.2)
        outcome = zombie_outcome(self.log("driver"), victim)
        fault.evidence[STOPPED_BEFORE_COMMIT] = fault.detail == "stopped before a commit"
        fault.evidence[FENCED] = outcome == ZOMBIE_FENCED
        fault.detail += "; " + outcome
        return fault

    def _replacement_stood(self, ident: str, victim: int) -> Callable[[], bool]:
        """A check for :meth:`zombie_sink`: whether another incarnation of ``ident`` than
        ``victim`` joined a run and a round after it joined stood (committed at a later
        epoch, or confirmed after it was seen joined: it claimed the sink on joining).
        Judged by the replacement itself, not by when recoveries began: a recovery a test's
        failpoint started just before the victim stopped replaces it too."""
        joined: list[tuple[int, float]] = []  # (epoch it answered, when seen) once joined

        def stood() -> bool:
            if not joined:
                report = self.processors().get(ident)
                if report is None or report.run is None \
                        or int(report.info.get("pid", -1)) in (-1, victim):
                    return False
                joined.append((report.epoch, time.time()))
            epoch, seen = joined[0]
            committed = self.committed()
            return committed is not None and (committed.epoch > epoch
                                              or committed.standing_at > seen)
        return stood

    @contextlib.contextmanager
    def _kept_stopped(self, victim: int) -> Iterator[None]:
        """While the block stops ``victim`` and waits: SIGCONT it afterwards, whatever
        happened (and :meth:`stop` knows it may be stopped meanwhile)."""
        self._stopped_pids.add(victim)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
            self._stopped_pids.discard(victim)

    def ask_to_pause(self, point: str, pid: int) -> Path:
        """Ask process ``pid`` to stop itself (SIGSTOP) when it next passes the pause point
        ``point`` (:func:`~hailstorm.failpoints.pause_point`); the request's file, removed
        as it stops. The caller waits for that (:func:`process_stopped`) and resumes it."""
        request = pause_request(self.env[PAUSE_DIR_VAR], point, pid)
        request.touch()
        return request

    def _stop_before_commit(self, ident: str, victim: int) -> str | None:
        """Make ``victim`` stop itself as it is about to commit (within 10 s, else SIGSTOP
        it where it is); says which (None: it ended before it could be stopped)."""
        request = self.ask_to_pause("sink.before_commit", victim)
        try:
            wait_for(f"{ident} to stop before its next commit",
                     lambda: process_stopped(victim), 10, self.alive, poll=0.01)
            return "stopped before a commit"
        except HarnessError:
            try:
                request.unlink()  # never got there (nothing to commit): stop it anywhere
            except FileNotFoundError:  # it just did
                wait_for(f"{ident} to stop", lambda: process_stopped(victim), 10, poll=0.01)
                return "stopped before a commit"
            try:
                os.kill(victim, signal.SIGSTOP)
            except ProcessLookupError:
                return None
            return "stopped between commits"

    def stall_bolt(self, rng: random.Random | None = None, phase: MasterPhase | None = None,
                   epoch: int = 0, seconds: float | None = None,
                   crash: bool | None = None) -> Fault:
        """SIGSTOP a random bolt for ``seconds`` (default: drawn from 1 s to half its session
        timeout), then SIGCONT: a GC pause or a slow disk. Nothing restarts, but the
        topology goes on without it: spouts fill its sockets, a snapshot round pauses them
        and its clock is published, so the bolt resumes knowing the clock with the tuples
        up to it (the one *at* it included) still queued. That backlog is what sends
        tuples through the A/B split at the clock; an idle bolt never sees it.

        With ``crash`` (default: a coin toss) the bolt is SIGKILLed as soon as a round
        committed (or, idle, was confirmed) after it resumed, so that the recovery loads a
        round whose split ran on the backlog: a tuple at the clock put into B instead of A
        is lost only then."""
        rng = rng or random.Random()
        crash = rng.random() < 0.5 if crash is None else crash
        ident, victim = self._pick_processor("bolt", rng, None, epoch=epoch)
        down = seconds if seconds is not None else \
            rng.uniform(1.0, max(1.0, self.processor_session_timeout / 2))
        fault = self._fault("stall", ident, victim, phase)
        fault.detail = f"stopped {down:.1f} s"
        with self._kept_stopped(victim):
            stopped_at = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGSTOP)
            while not process_stopped(victim) and time.monotonic() - stopped_at < 5:
                time.sleep(0.005)
            fault.evidence[VICTIM_STOPPED] = process_stopped(victim)
            time.sleep(max(0.0, down - (time.monotonic() - stopped_at)))
        time.sleep(0.05)  # SIGCONT delivered
        fault.evidence[VICTIM_RESUMED] = pid_alive(victim) and not process_stopped(victim)
        if crash:
            resumed = time.time()
            wait_for(f"a round committed after {ident} resumed",
                     lambda: (c := self.committed()) is not None and c.standing_at > resumed,
                     60, self.alive, poll=0.01)
            fault.lethal_at = time.time()
            self._sigkill(fault, victim)
            fault.detail += ", SIGKILLed after the next commit"
        return fault

    def kill_broker(self, node: int | None = None, rng: random.Random | None = None,
                    downtime: float | None = None,
                    producer: BackgroundProducer | None = None) -> Fault:
        """SIGKILL a Kafka node and start it again ``downtime`` seconds later (on a thread).

        The victim is ``node``, else the node leading the most source partitions (ties
        drawn with ``rng``); ``downtime`` defaults to a draw from :attr:`broker_downtime`.
        First waits until the node a previous broker fault killed is back and every replica
        of the source partitions is in sync again, so each fault starts from a whole
        cluster. With a running ``producer`` the fault records its acknowledged offsets:
        :meth:`measure_recovery` then waits for a commit past them on every partition.
        """
        if self.brokers is None:
            raise HarnessError("broker faults need control of the Kafka nodes: pass brokers= "
                               "(e.g. the DevStack) to TopologyRun or run_chaos")
        for _fault, restart in self._restarts:
            restart.finish(180)
        topics = self.source_topics()
        problem = broker_fault_problem(len(topic_layout(self.stack.kafka, topics).brokers))
        if problem:
            raise HarnessError(problem)

        def whole() -> TopicLayout | None:
            try:
                layout = topic_layout(self.stack.kafka, topics)
            except KafkaException:  # no metadata this time: ask again
                return None
            return layout if layout.fully_in_sync() else None

        layout: TopicLayout = wait_for(f"every replica of {', '.join(topics)} to be in sync",
                                       whole, 120, self.alive, poll=0.5)
        problem = broker_fault_problem(len(layout.brokers), layout.min_replicas())
        if problem:
            raise HarnessError(problem)
        rng = rng or random.Random()
        victim = node if node is not None else busiest_leader(layout.leaders, rng)
        down = downtime if downtime is not None else rng.uniform(*self.broker_downtime)
        fault = self._fault("broker", f"kafka-{victim}", 0)
        fault.detail = (f"leader of {layout.led_by(victim)}/{len(layout.leaders)} source "
                        f"partitions, down {down:.1f} s")
        if producer is not None and producer.running:
            fault.acked = {_clock_key(part): o
                           for part, o in producer.produced.clock().items()}
        fault.pid = self.brokers.kill_kafka_node(victim)
        fault.evidence[VICTIM_GONE] = not pid_alive(fault.pid)
        restart = _NodeRestart(self.brokers, victim, down, layout.addresses.get(victim))
        self._restarts.append((fault, restart.start()))
        return fault

    def inject(self, kind: FaultKind, rng: random.Random,
               producer: BackgroundProducer | None = None,
               phase: MasterPhase = "Flowing") -> list[Fault]:
        """One fault of ``kind`` (processor, task, zk-session: a random spout, bolt or sink;
        zombie: a sink, see :meth:`zombie_sink`; stall: a bolt, see :meth:`stall_bolt`;
        broker: the busiest leader of the source partitions, see :meth:`kill_broker`) timed
        for the master state ``phase``; returns the faults injected, the last one the
        planned one.

        ``Flowing`` hits at once; ``SpoutsPaused`` waits for the next snapshot round; the
        recovery phases (``Initialize``, ``SpoutsRewind``) first SIGKILL a random processor
        (the trigger) and hit the recovery it starts, a processor then being drawn among
        the new incarnation. Broker faults always hit at once (they wait for a whole
        cluster first).
        """
        if kind == "broker":
            return [self.kill_broker(rng=rng, producer=producer)]
        faults: list[Fault] = []
        epoch = 0
        if phase in RECOVERY_PHASES:
            self.await_unfixed(producer)
            # A spout's failure restarts every processor, also with local recovery.
            trigger = self.kill_processor(rng=rng, role="spout" if self.local_recovery
                                          else None)
            trigger.trigger = True
            faults.append(trigger)
            self.wait_phase("Initialize")
            master = self.master()
            epoch = master.state.epoch if master else 0
        if kind in ("processor", "task"):
            faults.append(self.kill_processor(rng=rng, phase=phase, epoch=epoch,
                                              task=kind == "task"))
        elif kind == "pair":
            faults.append(self.kill_pair(rng=rng, phase=phase, epoch=epoch))
        elif kind == "zombie":
            faults.append(self.zombie_sink(rng=rng, phase=phase, epoch=epoch))
        elif kind == "stall":
            faults.append(self.stall_bolt(rng=rng, phase=phase, epoch=epoch))
        elif kind == "negotiator":
            faults.append(self.kill_negotiator_leader(phase=phase))
        else:
            faults.append(self.expire_zk_session(rng=rng, phase=phase, epoch=epoch))
        return faults

    def deploy(self, topology_ref: str | Path) -> Fault:
        """Changed code deployed while the topology flows (:meth:`redeploy`), as a fault of
        kind ``deploy``: its evidence is the old driver gone and the master ``Stopped``
        (drained) before the new driver started."""
        fault = self._fault("deploy", Path(topology_ref).name, self.procs["driver"].pid,
                            "Flowing")
        fault.pid = self.redeploy(topology_ref)
        fault.evidence[VICTIM_GONE] = not pid_alive(fault.pid)
        master = self.master()
        fault.evidence[DRAINED] = master is not None and type(master.state).__name__ == "Stopped"
        fault.detail = f"from the committed clock {self.deploys[-1][1]}"
        return fault
