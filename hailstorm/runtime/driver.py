"""The driver (``hailstorm run``): start every processor of a topology on Spark.

1. load the topology; find each spout topic's partitions from Kafka's metadata;
2. plan the upgrade from what is deployed under the name (:mod:`hailstorm.upgrade`:
   refuse a change the plan refuses, before anything starts; carry out its record edits
   and rebuild the tables it rebuilds);
   compute the expected processor ids (one spout instance per source partition, every bolt
   instance, one instance per sink) and write them, with the node descriptions the next
   plan compares with, to ``/hailstorm/<name>/expected``;
3. build the Spark context (its JVM maps the install's class archive, or writes it at the
   end of this first run: :mod:`hailstorm.runtime.class_archive`) and run one barrier stage
   with a task per processor (:func:`hailstorm.runtime.task.run_processor`), resubmitted
   after every failure (:class:`hailstorm.runtime.spark_stage.StageRunner`) until stopped;
4. while it runs, look at the source topics' partitions every
   :attr:`RunOptions.partition_check_interval` seconds. Partitions added to a topic are
   picked up: the driver stops the stage, writes the new expected ids, and starts a Spark
   context with a slot more per new partition; a new spout instance reads its partition
   from offset 0 (nothing of it is in any snapshot), the others resume from the committed
   round as after any restart.

The negotiator (``hailstorm negotiator``) runs separately and drives the processors through
ZooKeeper.

Stopping drains: a run starts by deleting the topology's ``stop`` request, and
:meth:`Driver.stop` (SIGTERM, Ctrl-C) writes one; the negotiator commits a last round and
records ``Stopped``, the processors leave, and the stage ends without being resubmitted (as
it does after ``hailstorm stop``). Only when that takes longer than
:attr:`RunOptions.drain_timeout` is the stage cancelled (the next run recovers as after a
crash).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hailstorm.auth import SECRET_FILE_VAR, RunSecret
from hailstorm.kafka import is_kafka_outage, partitions_of
from hailstorm.outages import Outage, OutageWatch, through_outages
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import (
    ExpectedRecord,
    Stopped,
    StopRequest,
    TopologyPaths,
    expected_processor_ids,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.causes import root_cause
from hailstorm.runtime.class_archive import ClassArchive, plan_archive
from hailstorm.runtime.spark_stage import (
    DRIVER_JAVA_OPTIONS,
    SparkOptions,
    StageRunner,
    build_context,
    check_slots,
    end_jvm,
    jvm_pid,
    stop_context,
)
from hailstorm.runtime.task import run_processor
from hailstorm.snapshots import open_store
from hailstorm.topology import Topology, graph_of, load_topology
from hailstorm.upgrade.deployed import apply_plan, plan_for
from hailstorm.upgrade.describe import describe_topology
from hailstorm.upgrade.plan import Plan
from hailstorm.zookeeper import check_not_open, ensure_paths, is_zookeeper_outage, zk_client

__all__ = ["Driver", "RunOptions", "Upgrade", "expected_ids", "rebuild_tables",
           "source_partitions", "write_expected"]

log = logging.getLogger("hailstorm.run")


@dataclass(frozen=True)
class RunOptions:
    """Where everything is, and how to run it."""

    topology_ref: str
    zk: str
    kafka: str
    snapshots: str
    kafka_config: str | None = None
    """librdkafka properties file (a path every executor can read; never its content)."""
    name: str | None = None
    """ZooKeeper/snapshot name of the topology (default: the topology's own name)."""
    host: str = "127.0.0.1"
    """Address processors bind their data-plane listeners to."""
    metrics_host: str = "127.0.0.1"
    """Address processors serve /metrics on (``none``: no endpoint)."""
    session_timeout: float = 6.0
    log_level: str = "INFO"
    database_url: str = ""
    """Database of sink tables that name none (``HAILSTORM_DATABASE_URL``)."""
    spark: SparkOptions = field(default_factory=SparkOptions)
    partition_check_interval: float = 10.0
    """Seconds between two looks for partitions added to a source topic (0: never)."""
    class_archive: bool = True
    """Map the driver JVM's classes from the install's archive (write it when missing)."""
    allow_drop: tuple[str, ...] = ()
    """Nodes of the deployed topology this one may drop (their state is deleted)."""
    rebuild: tuple[str, ...] = ()
    """Sinks whose table this run may rebuild from the committed state (``--rebuild``), when
    it starts (not again when new partitions restart the stage)."""
    local_recovery: bool = False
    """Restart a failed instance alone where it can (``--local-recovery``; recorded in the
    expected record, which the negotiator and the processors follow)."""
    standby: bool = False
    """Keep a warm standby beside each bolt instance that restarts alone (``--standby``,
    :mod:`hailstorm.runtime.standby`)."""
    drain_timeout: float = 60.0
    """On :meth:`Driver.stop`, how long to wait for the negotiator to commit a last round
    and the processors to leave before cancelling the stage."""


def grown_partitions(
    running: dict[str, list[Partition]], current: dict[str, list[Partition]]
) -> list[Partition]:
    """Source partitions in ``current`` that the running deployment does not read."""
    have = {p for parts in running.values() for p in parts}
    return sorted({p for parts in current.values() for p in parts} - have)


def source_partitions(topology: Topology, bootstrap: str) -> dict[str, list[Partition]]:
    """Each spout's source partitions, from the broker's metadata."""
    return {
        spout.name: [(spout.topic, p) for p in partitions_of(bootstrap, spout.topic)]
        for spout in topology.spouts
    }


def expected_ids(topology: Topology, partitions: dict[str, list[Partition]]) -> list[str]:
    """Every processor id of the deployment, sorted."""
    return expected_processor_ids(
        spouts=partitions,
        bolts={b.name: b.parallelism for b in topology.bolts},
        sinks={s.name: 1 for s in topology.sinks},
    )


@dataclass(frozen=True)
class Upgrade:
    """What a run needs to plan and carry out the upgrade of the deployed topology."""

    topology: Topology
    snapshots: str
    kafka: str
    database_url: str
    """The database of sink tables that name none (a rebuilt table is written there)."""
    allow_drop: tuple[str, ...] = ()
    rebuild: tuple[str, ...] = ()


def rebuild_tables(upgrade: Upgrade, plan: Plan, zk: str, name: str) -> None:
    """Rebuild the table of every sink ``plan`` rebuilds, from the committed round (one
    transaction each: :func:`hailstorm.export.rebuild_sink`)."""
    from hailstorm.export import rebuild_sink
    from hailstorm.topology import Table

    for sink in plan.rebuilds:
        target = upgrade.topology.node(sink).target  # type: ignore[union-attr]
        url = (target.url if isinstance(target, Table) else None) or upgrade.database_url
        result = rebuild_sink(topology=upgrade.topology, sink=sink, url=url, zk=zk,
                              store=open_store(upgrade.snapshots), name=name, replace=True)
        log.info("%s: %s", name, result.describe(url))


def write_expected(zk: str, name: str, processors: list[str],
                   graph: Mapping[str, Any] | None = None, *,
                   upgrade: Upgrade | None = None, start: bool = False,
                   attempt: str | None = None, local_recovery: bool = False) -> None:
    """Create or replace ``/hailstorm/<name>/expected`` (with the topology's ``graph``);
    ``start``: a new run, so delete the ``stop`` request an earlier one left; ``attempt``:
    the stage attempt whose reports count (one no processor runs yet: none counts before
    the driver starts its first attempt); ``local_recovery``: the run restarts a failed
    instance alone where it can.

    With ``upgrade``, first plan the upgrade from what is deployed (:mod:`hailstorm.upgrade`):
    raise :class:`~hailstorm.upgrade.plan.UpgradeRefused` for a refused node, else carry out
    the plan's record edits and table rebuilds, and record the node descriptions the next
    plan compares with (only then: a failed rebuild is planned again)."""
    paths = TopologyPaths(name)
    client = zk_client(zk)
    client.start(timeout=20)
    try:
        ensure_paths(client, paths.directories())
        check_not_open(client, [paths.root, *paths.directories()])
        nodes = None
        if upgrade is not None:
            plan = plan_for(client, name, open_store(upgrade.snapshots), upgrade.topology,
                            upgrade.allow_drop, upgrade.kafka, upgrade.rebuild)
            for line in plan.lines():
                log.info("%s: plan: %s", name, line)
            plan.check()
            apply_plan(client, name, plan)
            rebuild_tables(upgrade, plan, zk, name)
            nodes = {k: v.to_json() for k, v in describe_topology(upgrade.topology).items()}
        records = TopologyRecords(client, paths)
        if start:
            records.clear_stop()
        records.write_expected(ExpectedRecord(tuple(processors), graph, nodes, attempt,
                                              local_recovery))
    finally:
        client.stop()
        client.close()


def new_attempt() -> str:
    """A fresh stage attempt name (:data:`~hailstorm.protocol.layout.ATTEMPT_INFO`), one no
    processor carries yet."""
    return secrets.token_hex(6)


def _absolute_ref(ref: str) -> str:
    """A module path made absolute (executors may run elsewhere); dotted names as given."""
    path = Path(ref)
    return str(path.resolve()) if path.suffix == ".py" and path.exists() else ref


class Driver:
    """Runs one topology on Spark: expected ids, the barrier stage, new partitions."""

    def __init__(self, options: RunOptions) -> None:
        self.options = replace(options, topology_ref=_absolute_ref(options.topology_ref))
        self.topology = load_topology(self.options.topology_ref)
        self.name = self.options.name or self.topology.name
        self.runner: StageRunner | None = None
        self.context: object | None = None
        #: Planned with the first context: later ones (new partitions) reuse its JVM.
        self.archive: ClassArchive | None = None
        self.context_built = False
        self.partitions: dict[str, list[Partition]] = {}
        #: Set by stop() (signals): the driver ends instead of picking up new partitions.
        self.stopping = threading.Event()
        self._grown = threading.Event()
        #: Set whenever no stage runs (a drain waits for it).
        self._idle = threading.Event()
        self._idle.set()
        self._started = False
        #: The ``Stopped`` master an earlier run left, as (epoch, entered_at): not a stop of
        #: this run (the negotiator leaves it once this run's processors register).
        self._earlier_stop: tuple[int, float] | None = None
        #: The data plane's secret is handed to the tasks with their assignments, a new one
        #: for every stage attempt (:meth:`with_fresh_secret`), unless
        #: $HAILSTORM_SECRET_FILE names one: then only that variable travels, and every
        #: executor reads the file (checked here, so a bad file fails before Spark starts).
        self.fixed_secret = RunSecret.from_env() is not None

    def assignments(self) -> list[Assignment]:
        """Discover partitions, write ``expected``; one assignment per processor."""
        o = self.options
        self.partitions = self._through_kafka_outages(
            lambda: source_partitions(self.topology, o.kafka))
        processors = expected_ids(self.topology, self.partitions)
        if not self._started:
            self._earlier_stop = self._stop_record()
        write_expected(o.zk, self.name, processors, graph_of(self.topology),
                       upgrade=Upgrade(self.topology, o.snapshots, o.kafka, o.database_url,
                                       o.allow_drop, () if self._started else o.rebuild),
                       start=not self._started, attempt=new_attempt(),
                       local_recovery=o.local_recovery)
        self._started = True
        log.info("%s: %d processors expected: %s", self.name, len(processors),
                 ", ".join(processors))
        return [
            Assignment(
                topology_ref=o.topology_ref, name=self.name, processor=pid, zk=o.zk,
                kafka=o.kafka, kafka_config=o.kafka_config,
                snapshots=o.snapshots if "://" in o.snapshots else
                str(Path(o.snapshots).resolve()), host=o.host,
                metrics_host=o.metrics_host,
                session_timeout=o.session_timeout, log_level=o.log_level,
                database_url=o.database_url, standby=o.standby,
            )
            for pid in processors
        ]

    def _through_kafka_outages(self, op: Any) -> Any:
        """``op()`` (a metadata request), tried again with backoff while Kafka is out: the
        driver waits for it, and says so, instead of exiting."""
        return self._through_outages(op, f"Kafka at {self.options.kafka}", is_kafka_outage)

    def _through_outages(self, op: Any, service: str,
                         is_outage: Callable[[BaseException], bool]) -> Any:
        """``op()``, tried again with backoff while ``service`` is out (``is_outage``)."""

        def failed(outage: Outage, delay: float) -> None:
            if outage.attempts == 1 or outage.attempts % 12 == 0:
                log.warning("%s: waiting for %s (%s); asking again in %.0f s", self.name,
                            outage.describe(), outage.error, delay)

        return through_outages(
            op, OutageWatch(service), is_outage=is_outage,
            on_failed=failed, on_answered=lambda outage: log.warning(
                "%s: the wait for %s is over (%s)", self.name, service, outage.describe()))

    def prepare(self) -> StageRunner:
        """Everything but running: expected ids, the Spark context, the stage runner."""
        assignments = self.assignments()
        spark = replace(self.options.spark, app_name=f"hailstorm-{self.name}")
        if self.fixed_secret:  # executors run elsewhere: an absolute path
            spark = replace(spark, extra_conf=(
                (f"spark.executorEnv.{SECRET_FILE_VAR}",
                 os.path.abspath(os.environ[SECRET_FILE_VAR])),
                *spark.extra_conf))
        conf = dict(spark.extra_conf)
        first = not self.context_built
        if first and self.options.class_archive and DRIVER_JAVA_OPTIONS not in conf:
            self.archive = plan_archive(conf.get("spark.driver.extraClassPath", ""))
        context = build_context(spark, slots=len(assignments), driver_java_options=(
            self.archive.java_options() if self.archive else ""))
        if first and self.archive is not None and not self.archive.check_mapped(jvm_pid()):
            self.archive = None
        self.context_built = True
        self.context = context
        if not context.master.startswith("local"):
            check_slots(context, len(assignments), wait=spark.slot_wait)
        self.runner = StageRunner(
            context, assignments, run_processor, spark, made_progress=self.committed_since,
            prepare_attempt=self.prepare_attempt, explain=self.explain,
            stopped_by=self.stopped_by)
        return self.runner

    def prepare_attempt(self, assignments: list[Any]) -> list[Any]:
        """The assignments of one stage attempt: a new attempt name, written to
        ``expected`` first (the negotiator then counts no report of the attempt before:
        processors Spark killed keep their ZooKeeper sessions for up to the session
        timeout), and a fresh secret unless the run has a fixed one."""
        attempt = new_attempt()
        self._through_outages(
            lambda: self._records(lambda records: records.start_attempt(attempt)),
            f"ZooKeeper at {self.options.zk}", is_zookeeper_outage)
        fresh = assignments if self.fixed_secret else self.with_fresh_secret(assignments)
        return [replace(a, attempt=attempt) for a in fresh]

    @staticmethod
    def with_fresh_secret(assignments: list[Any]) -> list[Any]:
        """``assignments`` sharing a new secret, for one stage attempt: a processor left
        over from an earlier attempt (a zombie) cannot authenticate to the new ones."""
        secret = RunSecret.generate()
        return [replace(a, secret=secret) for a in assignments]

    def committed_since(self, since: float) -> bool:
        """True when the topology committed a round after ``since`` (``time.time()``)."""
        client = zk_client(self.options.zk)
        client.start(timeout=10)
        try:
            committed = TopologyRecords(client, self.name).committed()
        finally:
            client.stop()
            client.close()
        return committed is not None and committed.committed_at >= since

    def explain(self, exc: BaseException) -> str:
        """Why a stage attempt failed: the processor and its error, from what Spark carries
        and the negotiator's restart reason in ZooKeeper."""
        reason = None
        try:
            master = self._records(lambda records: records.master())
            reason = master.reason if master is not None else None
        except Exception as problem:  # ZooKeeper may be what is down: Spark's text alone
            log.debug("could not read the negotiator's reason: %s", problem)
        return root_cause(str(exc), reason)

    def _records(self, use: Any) -> Any:
        """``use(TopologyRecords)`` on a short-lived ZooKeeper connection."""
        client = zk_client(self.options.zk)
        client.start(timeout=10)
        try:
            return use(TopologyRecords(client, self.name))
        finally:
            client.stop()
            client.close()

    def _stop_record(self) -> tuple[int, float] | None:
        master = self._records(lambda records: records.master())
        if master is not None and isinstance(master.state, Stopped):
            return master.state.epoch, master.entered_at
        return None

    def stopped_by(self) -> str | None:
        """Who stopped this run, when the master records a ``Stopped`` (not the one an
        earlier run left) (else None)."""
        master = self._records(lambda records: records.master())
        if master is None or not isinstance(master.state, Stopped):
            return None
        if (master.state.epoch, master.entered_at) == self._earlier_stop:
            return None
        return master.state.by or "a stop request"

    def _ask_to_stop(self) -> bool:
        """Write the stop request when a negotiator runs to act on it; False (cancel at
        once, the next run recovers from the committed round) when none does or ZooKeeper
        cannot be reached."""
        by = f"hailstorm run (pid {os.getpid()}, stopped by a signal)"

        def ask(records: TopologyRecords) -> bool:
            if not records.negotiators():
                return False
            records.request_stop(StopRequest(by, time.time()))
            return True

        try:
            if self._records(ask):
                return True
            why = "no negotiator runs to commit a last round"
        except Exception as exc:  # broad: kazoo raises untyped errors; cancel the stage at once
            why = f"could not ask the negotiator to stop the topology ({exc})"
        log.warning("%s: %s: cancelling the stage", self.name, why)
        return False

    def run(self) -> int:
        """Run until stopped; returns the number of failed stage attempts."""
        failures = 0
        while True:
            runner = self.runner or self.prepare()
            self._idle.clear()
            done = threading.Event()
            watcher = threading.Thread(target=self._watch_partitions, args=(runner, done),
                                       name="partition-watch", daemon=True)
            watcher.start()
            try:
                failures += runner.run()
            finally:
                done.set()  # also when the stage halted: the watcher never outlives it
                watcher.join(5)
                self.close()
                self.runner = None
                self._idle.set()
            if self.stopping.is_set() or not self._grown.is_set():
                return failures
            self._grown.clear()
            log.warning("%s: starting again to read the new partitions", self.name)

    def _watch_partitions(self, runner: StageRunner, done: threading.Event) -> None:
        """Stop ``runner`` when a source topic has partitions the deployment lacks (until
        ``done`` is set)."""
        interval = self.options.partition_check_interval
        if interval <= 0:
            return
        while not done.wait(interval) and not runner.stopping.is_set():
            try:
                current = source_partitions(self.topology, self.options.kafka)
            except Exception as exc:  # the broker may be restarting: look again later
                log.debug("partition check failed: %s", exc)
                continue
            grown = grown_partitions(self.partitions, current)
            if grown:
                names = ", ".join(f"{t}:{p}" for t, p in grown)
                log.warning("%s: new source partitions %s: stopping the stage to add their "
                            "spouts (they read from offset 0)", self.name, names)
                self._grown.set()
                runner.stop()
                return

    def stop(self) -> None:
        """Drain (see the module docstring), then cancel whatever still runs."""
        self.stopping.set()
        if self.runner is not None and self.options.drain_timeout > 0 and self._ask_to_stop():
            log.info("%s: stopping: a last round commits what was read (up to %.0fs)",
                     self.name, self.options.drain_timeout)
            if not self._idle.wait(self.options.drain_timeout):
                log.warning("%s: not stopped after %.0fs; cancelling the stage", self.name,
                            self.options.drain_timeout)
        runner = self.runner
        if runner is not None:
            runner.stop()

    def close(self) -> None:
        context = self.context
        self.context = None
        if context is not None:
            stop_context(context)

    def finish(self) -> None:
        """End the driver's JVM (after :meth:`run`); keep the class archive it wrote."""
        self.close()
        writing = self.archive is not None and self.archive.writing is not None
        if writing:
            log.info("the driver's JVM is writing its class archive (once, some seconds)")
        code = end_jvm()
        if self.archive is not None:
            try:
                self.archive.keep(code)
            except OSError as exc:  # the run itself ended as it did: say so, go on
                log.warning("could not keep the class archive: %s", exc)
