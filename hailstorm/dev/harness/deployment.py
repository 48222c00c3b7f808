"""One deployment of a topology on a running stack: :class:`Deployment` starts its
negotiators and driver as subprocesses (logs in ``log_dir``), stops every process it started
by pid (the Spark Python workers through the pids processors report), reads its records in
ZooKeeper and what it committed (:mod:`~hailstorm.dev.harness.results`), compares that with the
model (:mod:`~hailstorm.dev.harness.compare`) and accounts for its recoveries
(:mod:`~hailstorm.dev.harness.evidence`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kazoo.retry import KazooRetry

from hailstorm import kafka
from hailstorm.dev.harness.compare import Comparison, compare_with_model
from hailstorm.dev.harness.evidence import (
    JOINED_RECOVERY,
    Accounting,
    account,
    recovery_window,
)
from hailstorm.dev.harness.faults import VICTIM_ROLES, ZOMBIE_SPARK_CONF, Explanation, Fault
from hailstorm.dev.harness.producing import BackgroundProducer, Produced
from hailstorm.dev.harness.results import (
    BoltStates,
    read_bolt_states,
    read_side_outputs,
    read_sink_tables,
    topic_ends,
)
from hailstorm.dev.harness.side_outputs import SideRecord, side_output_topics
from hailstorm.dev.harness.stack import (
    BrokerControl,
    StackAddresses,
    _NodeRestart,
    private_database,
)
from hailstorm.dev.harness.wait import HarnessError, wait_for
from hailstorm.dev.services import SPARK_MASTER_VAR, pid_alive, stop_pid
from hailstorm.failpoints import FAILPOINTS_DIR_VAR, PAUSE_DIR_VAR
from hailstorm.model import run_model
from hailstorm.protocol.clock import Clock, Partition
from hailstorm.protocol.layout import (
    CommittedRecord,
    MasterRecord,
    ProcessorReport,
    RecoveryRecord,
    TopologyPaths,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.protocol.states import Initialize
from hailstorm.topic import Topic
from hailstorm.topology import Topology, load_topology
from hailstorm.zookeeper import zk_client

REPO = Path(__file__).resolve().parents[3]

READ_PATIENCE = 60.0
"""Seconds a read of the topology's records waits out a lost ZooKeeper connection or
session (kazoo reconnects meanwhile) before the harness gives up with kazoo's error."""


def _patient_read(operation: Any, *args: Any, **kwargs: Any) -> Any:
    """``operation(*args, **kwargs)`` (a ZooKeeper read), retried across connection
    losses and an expired session for up to :data:`READ_PATIENCE` seconds: a loaded
    machine can starve the harness's client of its heartbeats, which is no failure of the
    topology under test."""
    retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0, deadline=READ_PATIENCE)
    return retry(operation, *args, **kwargs)


class Deployment:
    """Negotiators and driver of one topology deployment (context manager): starting and
    stopping them, the topology's records in ZooKeeper, what it committed, and which of its
    recoveries something explains. :class:`~hailstorm.dev.harness.run.TopologyRun` adds the
    faults."""

    def __init__(
        self,
        stack: StackAddresses,
        topology_ref: str | Path,
        *,
        name: str | None = None,
        log_dir: Path,
        negotiators: int = 2,
        snapshot_interval: float = 1.0,
        timeout: float = 30.0,
        negotiator_session_timeout: float = 4.0,
        processor_session_timeout: float = 6.0,
        database: str | None = None,
        snapshot_retention: float | None = None,
        brokers: BrokerControl | None = None,
        broker_downtime: tuple[float, float] = (3.0, 8.0),
        zombies: bool = False,
        master: str | None = None,
        processor_host: str | None = None,
        driver_address: str | None = None,
        spark_conf: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.stack = stack
        self.topology_ref = str(topology_ref)
        self.topology: Topology = load_topology(self.topology_ref)
        self.name = name or f"{self.topology.name}_{uuid.uuid4().hex[:8]}"
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.negotiator_count = negotiators
        self.snapshot_interval = snapshot_interval
        self.snapshot_retention = snapshot_retention
        """The negotiators' ``--snapshot-retention`` (None: their default)."""
        self.timeout = timeout
        self.negotiator_session_timeout = negotiator_session_timeout
        self.processor_session_timeout = processor_session_timeout
        self.brokers = brokers
        """Stops and starts Kafka nodes, for broker faults (None: no broker faults)."""
        self.broker_downtime = broker_downtime
        """How long a killed Kafka node stays down: seconds drawn uniformly from this range."""
        self.zombies = zombies
        """Run the driver so that a stopped sink survives its stage (:data:`ZOMBIE_SPARK_CONF`,
        a spare slot): needed for :meth:`zombie_sink`."""
        self._restarts: list[tuple[Fault, _NodeRestart]] = []
        self.paths = TopologyPaths(self.name)
        self.database = private_database(stack, database, log_dir, self.name)
        """Database of sink tables that name none (see :func:`private_database`): by
        default one of this run only, so runs of one topology never share (and collide
        in) a table."""
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()
        self.faults: list[Fault] = []
        """Every fault injected in this run, in order."""
        self.producer: BackgroundProducer | None = None
        """The workload's producer while it runs (faults record whether it still wrote)."""
        self.deploys: list[tuple[Topology, Clock]] = []
        """Each :meth:`redeploy`: the topology deployed and the committed clock it started
        from (what a bolt declaring ``start="latest"`` starts at)."""
        self.planned: list[Explanation] = []
        """Restarts the test declared (:meth:`expect_restart`)."""
        self.processor_pids: set[int] = set()
        self.topic_starts: dict[str, dict[int, int]] = {}
        """Per output topic, partition -> offset this run's records start at."""
        self._stopped_pids: set[int] = set()
        self._negotiators_started = 0
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
            PYSPARK_PYTHON=sys.executable, HAILSTORM_ZK=stack.zk,
            HAILSTORM_KAFKA=stack.kafka, HAILSTORM_SNAPSHOTS=str(stack.snapshots),
            HAILSTORM_DATABASE_URL=self.database)
        self.master_url = master
        """The Spark master the driver uses (None: ``local[N]``, whatever the environment
        says)."""
        self.env.pop(SPARK_MASTER_VAR, None)
        if master is not None:
            self.env[SPARK_MASTER_VAR] = master
        self.processor_host = processor_host
        """The driver's ``--host`` (None: its default, loopback)."""
        self.spark_conf = list(spark_conf)
        """The driver's ``--conf`` settings (besides those of ``zombies``)."""
        self.driver_options: list[str] = []
        """More options of the driver's ``hailstorm run`` (``--no-class-archive``)."""
        self.negotiator_options: list[str] = []
        """More options of each ``hailstorm negotiator``."""
        self.victim_roles: tuple[str, ...] = VICTIM_ROLES
        """The roles the harness draws a processor to hurt from, unless told one."""
        if driver_address is not None:  # what the driver binds and tells executors
            self.env["SPARK_LOCAL_IP"] = driver_address
        # Processors stop where the harness asks them to (failpoints.pause_point): zombie
        # sinks, a spout held inside a replay.
        pause_dir = log_dir / "pause"
        pause_dir.mkdir(exist_ok=True)
        self.env[PAUSE_DIR_VAR] = str(pause_dir)
        self.zk = zk_client(stack.zk)
        self.zk.start(timeout=20)
        self.records = TopologyRecords(self.zk, self.paths, call=_patient_read)
        """The topology's records, read patiently (:func:`_patient_read`)."""

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def spawn(self, label: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``python ARGS`` with output in ``log_dir/LABEL.log``."""
        with (self.log_dir / f"{label}.log").open("ab") as out:
            proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT)
        self.procs[label] = proc
        return proc

    def _spawn_negotiator(self) -> None:
        label = f"negotiator-{self._negotiators_started}"
        self._negotiators_started += 1
        retention = [] if self.snapshot_retention is None else \
            ["--snapshot-retention", str(self.snapshot_retention)]
        self.spawn(label, ["-m", "hailstorm.negotiator", self.topology_ref, "--name", self.name,
                           "--id", label, "--snapshot-interval", str(self.snapshot_interval),
                           "--timeout", str(self.timeout),
                           "--session-timeout", str(self.negotiator_session_timeout),
                           *retention, *self.negotiator_options])

    def start(self) -> Self:
        """Start the negotiators, then the driver. Output topics of topic sinks, dead-letter
        and late topics may hold records of earlier runs: where their logs end now is noted,
        and :meth:`sink_tables` and :meth:`side_outputs` read from there."""
        outputs = [s.target.name for s in self.topology.sinks if isinstance(s.target, Topic)]
        for topic in [*outputs, *side_output_topics(self.topology)]:
            self.topic_starts[topic] = topic_ends(self.stack.kafka, topic)
        for _ in range(self.negotiator_count):
            self._spawn_negotiator()
        self._spawn_driver()
        return self

    def _spawn_driver(self) -> None:
        zombie_args = [f"--master=local[{self.expected_count() + 1}]",
                       *(f"--conf={k}={v}" for k, v in ZOMBIE_SPARK_CONF)] if self.zombies else []
        host_args = [] if self.processor_host is None else ["--host", self.processor_host]
        conf_args = [f"--conf={k}={v}" for k, v in self.spark_conf]
        self.spawn("driver", ["-m", "hailstorm", "run", self.topology_ref, "--name", self.name,
                              *zombie_args, *host_args, *conf_args, *self.driver_options])

    def redeploy(self, topology_ref: str | Path, timeout: float = 120.0) -> int:
        """Deploy changed code under the same name, as an operator does: stop the driver
        (SIGTERM drains: a last round commits and the master records ``Stopped``), wait for
        its processors to leave (SIGKILL what is left after 20 s), then start a driver of
        ``topology_ref``, which carries out its upgrade plan first (with
        :attr:`driver_options`, e.g. ``--rebuild``); the negotiators keep running. Returns
        the old driver's pid; :attr:`deploys` records the committed clock the new code
        starts from. Raises :class:`HarnessError` when the old one does not stop
        within ``timeout``."""
        topology = load_topology(str(topology_ref))
        old = self.procs["driver"]
        with contextlib.suppress(Exception):
            self.processors()  # their pids
        old.send_signal(signal.SIGTERM)
        try:
            old.wait(timeout)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"the driver (pid {old.pid}) did not stop within {timeout:.0f} "
                               "s of its SIGTERM") from None
        self._end_processors()
        committed = self.committed()
        self.deploys.append((topology, dict(committed.clock) if committed else {}))
        self.topology_ref, self.topology = str(topology_ref), topology
        self._spawn_driver()
        return old.pid

    @property
    def local_recovery(self) -> bool:
        """The run restarts a failed instance alone where it can (``--local-recovery``)."""
        return "--local-recovery" in self.driver_options

    def alive(self) -> None:
        """Raise when the driver died, or no negotiator the harness did not kill is left."""
        for label, proc in self.procs.items():
            if label not in self.killed and proc.poll() is not None:
                raise HarnessError(f"{label} exited with {proc.returncode}:\n"
                                   f"{self.log(label)[-3000:]}")

    def log(self, label: str) -> str:
        path = self.log_dir / f"{label}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> dict[str, str]:
        return {label: self.log(label) for label in self.procs}

    def stop(self) -> None:
        """Stop the driver and negotiators (SIGTERM, then SIGKILL), then leftover workers;
        start every Kafka node a broker fault killed again."""
        for _fault, restart in self._restarts:
            restart.hurry()
        with contextlib.suppress(Exception):
            self.processors()
        for label in ["driver", *[n for n in self.procs if n != "driver"]]:
            proc = self.procs.get(label)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self._end_processors()
        for _fault, restart in self._restarts:
            with contextlib.suppress(HarnessError):
                restart.finish(180)
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()

    def _end_processors(self) -> None:
        """Wait (20 s at most) for the processors the driver started to leave, then SIGKILL
        what is left of them (Spark workers we started through the driver)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(pid_alive(p) for p in self.processor_pids):
            time.sleep(0.2)
        for pid in self.processor_pids:
            if pid in self._stopped_pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            if pid_alive(pid):
                stop_pid(pid, None, sig=signal.SIGKILL, timeout=5)

    # -- ZooKeeper views ------------------------------------------------------------------

    def master(self) -> MasterRecord | None:
        return self.records.master()

    def committed(self) -> CommittedRecord | None:
        return self.records.committed()

    def processors(self) -> dict[str, ProcessorReport]:
        """The living processors' readable reports (``info["pid"]`` is the processor's pid,
        ``info["worker"]`` its Spark task's Python worker's)."""
        result: dict[str, ProcessorReport] = {}
        for child, report in self.records.reports().items():
            if report is None:
                continue
            result[child] = report
            for key in ("pid", "worker"):
                if key in report.info:
                    self.processor_pids.add(int(report.info[key]))
        return result

    def note_absorbed(self, fault: Fault, processor: str, gone: int) -> None:
        """For a fault that ended ``processor``'s process ``gone`` in ``Initialize``: record
        whether its next incarnation joined that recovery (:data:`JOINED_RECOVERY`)."""
        if fault.phase == "Initialize":
            fault.evidence[JOINED_RECOVERY] = self.joined_recovery(fault.epoch, processor, gone)

    def joined_recovery(self, epoch: int, processor: str, gone: int,
                        timeout: float = 60.0) -> bool:
        """Whether the recovery under way in ``Initialize(epoch)`` went on (to
        ``SpoutsRewind(epoch)`` and beyond, no newer recovery recorded) with an incarnation
        of ``processor`` other than the pid ``gone`` (False: the topology restarted again,
        or nothing moved within ``timeout`` seconds)."""
        def moved() -> MasterRecord | None:
            record = self.master()
            return None if record is None or (record.state.epoch == epoch and isinstance(
                record.state, Initialize)) else record
        try:
            wait_for(f"Initialize({epoch}) to end", moved, timeout, self.alive, poll=0.05)
        except HarnessError:
            return False
        report = self.processors().get(processor)
        return not any(r.epoch > epoch for r in self.recoveries()) \
            and report is not None and report.info.get("pid") != gone

    def worker_of(self, processor: str) -> int:
        """The pid of the Spark Python worker ``processor``'s task runs in."""
        report = self.processors().get(processor)
        worker = report.info.get("worker") if report is not None else None
        if not isinstance(worker, int) or worker <= 0:
            raise HarnessError(f"{processor} reports no Spark task worker: {report}")
        return worker

    def incarnations(self) -> dict[str, str]:
        """Each living processor's incarnation, ``host:pid`` (a restart changes it)."""
        return {ident: f"{report.info.get('host', '?')}:{report.info.get('pid', '?')}"
                for ident, report in self.processors().items()}

    def expected_count(self) -> int:
        """How many processors the deployment has (without asking the driver)."""
        spouts = sum(len(kafka.partitions_of(self.stack.kafka, s.topic))
                     for s in self.topology.spouts)
        return spouts + sum(b.parallelism for b in self.topology.bolts) + len(self.topology.sinks)

    def flowing(self) -> MasterRecord | None:
        master = self.master()
        return master if master is not None and master.state.__class__.__name__ == "Flowing" \
            else None

    def wait_flowing(self, timeout: float = 240) -> MasterRecord:
        """Until the master is ``Flowing`` (the topology started or recovered)."""
        result: MasterRecord = wait_for("the master to be Flowing", self.flowing, timeout,
                                        self.alive)
        return result

    def wait_recovered(self, since: float, timeout: float = 240) -> MasterRecord:
        """Until the recoveries recorded from ``since`` on (``time.time()``, less a second:
        the negotiator reads its clock at another moment) are over: the master is
        ``Flowing`` in the epoch of the latest or a later one. For a restart no fault of
        the harness caused (a failpoint); a fault's own recovery is what
        :meth:`~hailstorm.dev.harness.run.TopologyRun.measure_recovery` waits for."""
        def recovered() -> MasterRecord | None:
            epochs = [r.epoch for r in self.recoveries() if not r.is_start and r.at >= since - 1]
            flowing = self.flowing()
            return flowing if epochs and flowing is not None \
                and flowing.state.epoch >= max(epochs) else None

        result: MasterRecord = wait_for(f"the recovery after {since:.1f} to end", recovered,
                                        timeout, self.alive)
        return result

    def covers(self, target: Mapping[Partition, int]) -> CommittedRecord | None:
        """The committed record if its clock, and that of every node still catching up
        on its own, includes every ``target`` offset."""
        committed = self.committed()
        if committed is None:
            return None
        if all(c.get(p, -1) >= o for c in (committed.clock, *committed.clocks.values())
               for p, o in target.items()):
            return committed
        return None

    def wait_committed(self, covering: Mapping[Partition, int],
                       timeout: float = 240) -> CommittedRecord:
        """Until a committed round includes every offset of ``covering``."""
        result: CommittedRecord = wait_for(
            f"a commit covering {dict(covering)}", lambda: self.covers(covering), timeout,
            self.alive)
        return result

    def final_comparison(self, produced: Produced, timeout: float = 300) -> Comparison:
        """Wait for a committed round that includes everything ``produced``, check that
        every recovery is explained (:meth:`check_recoveries`), and compare the round's
        bolt states and the sink tables with :func:`run_model` over the same input."""
        committed = self.wait_committed(produced.clock(), timeout)
        states = self.committed_bolt_states(committed)
        tables = self.sink_tables()
        self.check_recoveries()
        return compare_with_model(run_model(self.topology, produced.model_messages()),
                                  states, tables)

    def committed_bolt_states(self, committed: CommittedRecord | None = None
                              ) -> dict[str, BoltStates]:
        """Every bolt's committed state, read from the committed round's snapshots."""
        committed = committed or self.committed()
        if committed is None:
            raise HarnessError("nothing committed yet")
        return read_bolt_states(self.topology, self.stack.snapshots, committed)

    def sink_tables(self) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
        """The content of every sink table (and topic, see :func:`topic_rows`): key tuple
        -> row.

        Upsert and merge tables have the shape of :meth:`hailstorm.model.ModelResult.table`;
        append tables are keyed by their rows' origins with :func:`keyed_append_rows`, so
        that :func:`compare_with_model` compares them as multisets per origin.
        """
        return read_sink_tables(self.topology, self.stack.kafka, self.database,
                                self.topic_starts)

    def side_outputs(self) -> list[SideRecord]:
        """Every dead letter and late record this run wrote, and every row of its tables'
        ``<table>_rejected`` (see :func:`read_side_outputs`), for
        :func:`~hailstorm.dev.harness.compare.compare_with_model`."""
        return read_side_outputs(self.topology, self.stack.kafka, self.database,
                                 self.topic_starts)

    # -- restart accounting ---------------------------------------------------------------

    def recoveries(self) -> list[RecoveryRecord]:
        """Every move to Initialize the negotiators recorded, oldest first."""
        return self.records.recoveries()

    def negotiator_metrics(self) -> dict[str, dict[str, float]]:
        """The ``/metrics`` samples of every negotiator that serves them (by identifier)."""
        from hailstorm.metrics import scrape

        result = {}
        for record in self.records.negotiators():
            if record.metrics is not None:
                with contextlib.suppress(OSError, ValueError):
                    result[record.identifier] = scrape(record.host, record.metrics)
        return result

    def processor_metrics(self) -> dict[str, dict[str, float]]:
        """The ``/metrics`` samples of every processor that serves them (by id)."""
        from hailstorm.metrics import scrape

        result = {}
        for ident, report in self.processors().items():
            host, port = report.info.get("host"), report.info.get("metrics")
            if host and port:
                with contextlib.suppress(OSError, ValueError):
                    result[ident] = scrape(str(host), int(port))
        return result

    def expect_restart(self, at: float, why: str) -> None:
        """Declare a restart the test caused on purpose (at ``time.time()`` ``at``)."""
        self.planned.append(Explanation(at, why))

    def explanations(self) -> list[Explanation]:
        """What besides the injected faults may explain a recovery: every restart declared,
        and every failpoint that fired (its marker file's time)."""
        found = list(self.planned)
        directory = self.env.get(FAILPOINTS_DIR_VAR)
        if directory and Path(directory).is_dir():
            found += [Explanation(marker.stat().st_mtime, f"failpoint {marker.name}")
                      for marker in Path(directory).iterdir()]
        return sorted(found)

    def accounting(self) -> Accounting:
        """Which fault, declared restart or failpoint each recovery so far is due to (see
        :func:`~hailstorm.dev.harness.evidence.account`: a fault's recovery names its victim
        within :func:`~hailstorm.dev.harness.evidence.recovery_window` of the processors'
        session timeout)."""
        return account(self.recoveries(), self.faults, self.explanations(),
                       window=recovery_window(self.processor_session_timeout),
                       state_wait=self.timeout)

    def unexplained_recoveries(self) -> list[RecoveryRecord]:
        """Recoveries no injected fault, declared restart or failpoint explains."""
        return self.accounting().unexplained

    def check_recoveries(self) -> None:
        """Raise :class:`HarnessError` naming every recovery nothing explains: a protocol
        violation that recovers would otherwise still end exact."""
        bad = self.unexplained_recoveries()
        if bad:
            raise HarnessError(
                f"{len(bad)} unexplained recover{'y' if len(bad) == 1 else 'ies'}: "
                + "; ".join(f"epoch {r.epoch} at {r.at:.1f} from {r.previous}: {r.reason}"
                            for r in bad[:5]))

    def source_topics(self) -> list[str]:
        return sorted({s.topic for s in self.topology.spouts})
