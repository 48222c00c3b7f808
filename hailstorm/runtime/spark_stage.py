"""Run every processor instance of a topology as a long-lived task of one Spark barrier stage.

The driver (``hailstorm run``) starts a SparkContext (``local[N]`` with a slot per processor
instance by default, or any Spark master URL), makes the topology module importable on the
executors, and submits one barrier stage with one task per processor instance. A barrier
stage is all-or-nothing: when any task dies, Spark kills its siblings and the stage fails; the
driver then resubmits it with backoff until it is stopped (SIGINT/SIGTERM stop it cleanly).
Processors themselves re-register in ZooKeeper, and the negotiator recovers the topology.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hailstorm.errors import ConfigurationError, HaltError
from hailstorm.halt import TopologyHalted, halt_reason
from hailstorm.runtime.causes import root_cause

log = logging.getLogger("hailstorm.run")

ProcessorEntry = Callable[[Any], None]
"""Runs one processor instance until it ends; raises to fail the stage."""


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
"""The driver JVM's options: hailstorm's (:data:`C1_ONLY`, the class archive's), unless the
user's ``--conf`` gives this key, which replaces them all."""

C1_ONLY = "-XX:TieredStopAtLevel=1"
"""The JVM option for Spark processes that only host Python tasks or place executors: the
C1 compiler alone starts them seconds sooner, and C2 would speed up nothing that matters."""

EXECUTOR_HEARTBEATS = (
    ("spark.executor.heartbeatInterval", "2s"),
    ("spark.storage.blockManagerHeartbeatTimeoutMs", "20s"),
    ("spark.network.timeoutInterval", "2s"),
)
"""On a cluster, when the driver gives up an executor it hears nothing from: a heartbeat
every 2 s, given up after 20 s without one, checked every 2 s. Giving an executor up fails
its tasks, so the barrier stage fails and its next attempt runs on the slots that are left.
With Spark's defaults (every 10 s; after ``spark.network.timeout``, 120 s; checked every
60 s) the tasks of a host cut off from the network held the stage for minutes, while the
negotiator's recovery waited for processors that could not come.

The last two keys serve only that check (Spark's ``HeartbeatReceiver``). The interval also
bounds how long an executor waits for the driver's answer to a heartbeat (a slower answer
is a warning in its log; an executor that failed 60 heartbeats in a row, 2 minutes now,
exits) and how often executors poll their metrics. Set on the command line, so they
replace a ``spark-defaults.conf``'s; a run whose ``--conf`` gives any of
:data:`HEARTBEAT_KEYS` gets none of them (Spark's rules then apply to the user's values).
Not set in ``local`` mode, whose executor is the driver's own JVM."""

HEARTBEAT_KEYS = frozenset({*(key for key, _ in EXECUTOR_HEARTBEATS), "spark.network.timeout"})
"""The keys that decide when the driver gives an executor up: a user's ``--conf`` with any
of them takes that decision over whole (Spark checks that the interval is at most the
timeout and that the check is too)."""


@dataclass(frozen=True)
class SparkOptions:
    """How to reach Spark and how to treat failures."""

    master: str | None = None
    app_name: str = "hailstorm"
    #: First pause (seconds) before resubmitting a failed stage, doubled after each
    #: failure without progress up to ``backoff_max``. Short: a stage that made progress
    #: failed for a fresh reason, and every tenth of a second here is recovery time.
    backoff_initial: float = 0.1
    backoff_max: float = 30.0
    #: A stage that ran at least this long resets the backoff.
    healthy_after: float = 60.0
    #: Stop (:class:`RestartsExhausted`) after this many consecutive failed attempts
    #: without progress in between (None: never give up).
    max_attempts: int | None = None
    #: Options for the driver's and executors' JVMs (``spark.driver.extraJavaOptions`` and
    #: ``spark.executor.extraJavaOptions``; ``extra_conf`` overrides either). By default
    #: :data:`C1_ONLY`: a topology's JVMs run one long barrier stage whose tasks are Python.
    #: A job that moves its data through the JVM (an export) passes ``""``.
    jvm_options: str = C1_ONLY
    #: Give up a cluster's executor silent for 20 s (:data:`EXECUTOR_HEARTBEATS`): a
    #: topology's barrier stage, whose tasks cannot go on without each other. A job whose
    #: executors do the work in their JVMs (an export) keeps Spark's defaults (False).
    executor_heartbeats: bool = True
    extra_conf: tuple[tuple[str, str], ...] = ()
    #: How long a cluster may take to offer a slot per processor (executors registering,
    #: a lost worker coming back) before the driver stops with :class:`NotEnoughSlots`.
    slot_wait: float = 60.0


def default_master(slots: int) -> str:
    """``local[N]``: a barrier stage needs a slot for every task at once."""
    return f"local[{max(1, slots)}]"


def context_settings(options: SparkOptions, master: str, python: str,
                     python_path: Sequence[str], driver_java_options: str = ""
                     ) -> list[tuple[str, str]]:
    """The Spark properties of a topology's context on ``master``, in the order they are
    set (a later key wins): Python workers running ``python`` with ``python_path``, no
    progress bar, one worker per task, the JVMs' options, loopback in ``local`` mode and
    :data:`EXECUTOR_HEARTBEATS` elsewhere (unless ``options`` say otherwise), then the
    user's ``options.extra_conf``. Pure."""
    settings = [
        ("spark.master", master),
        ("spark.app.name", options.app_name),
        ("spark.ui.enabled", "false"),
        # No "[Stage 0:==>  (1 + 4) / 5]" bar: a topology's stage runs until it stops.
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.pyspark.python", python),
        # One Python worker per task: killing one processor never takes a sibling with it.
        ("spark.python.worker.reuse", "false"),
        ("spark.executorEnv.PYSPARK_PYTHON", python),
        ("spark.executorEnv.PYTHONPATH", os.pathsep.join(p for p in python_path if p)),
        ("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "3"),
        ("spark.task.maxFailures", "1"),
        ("spark.python.daemon.module", "hailstorm.runtime.spark_daemon"),
    ]
    if options.jvm_options:
        settings.append(("spark.executor.extraJavaOptions", options.jvm_options))
    driver_options = " ".join(filter(None, (options.jvm_options, driver_java_options)))
    if driver_options:
        settings.append((DRIVER_JAVA_OPTIONS, driver_options))
    if master.startswith("local"):
        settings += [("spark.driver.host", "127.0.0.1"), ("spark.driver.bindAddress", "127.0.0.1")]
    elif options.executor_heartbeats and not HEARTBEAT_KEYS & {k for k, _ in options.extra_conf}:
        settings += EXECUTOR_HEARTBEATS
    return settings + list(options.extra_conf)


def build_context(options: SparkOptions, slots: int, py_files: Sequence[Path] = (),
                  driver_java_options: str = "") -> Any:
    """A SparkContext whose Python workers run this interpreter and see this code
    (``driver_java_options``: for the driver's JVM only, after ``options.jvm_options``), set
    up by :func:`context_settings`.

    A context, not a SparkSession: hailstorm runs RDD stages only, and a session's SQL
    machinery took the driver about 4 s more to start (every start and restart of a
    topology)."""
    from pyspark import SparkConf, SparkContext

    python = sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)
    master = options.master or default_master(slots)
    if master.startswith("local"):
        # The JVM's own address lookup: loopback too, instead of warning that the hostname
        # resolves to loopback and picking another interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkConf().setAll(context_settings(options, master, python, sys.path,
                                               driver_java_options))
    in_main = threading.current_thread() is threading.main_thread()
    interrupt = signal.getsignal(signal.SIGINT) if in_main else None
    context = SparkContext.getOrCreate(conf)
    if callable(interrupt) and interrupt is not signal.default_int_handler:
        # A new context replaces the process's SIGINT handler with pyspark's (which cancels
        # jobs, then raises): keep the one the caller installed (install_signal_handlers).
        signal.signal(signal.SIGINT, interrupt)
    context.setLogLevel("WARN")
    for path in py_files:
        context.addPyFile(str(path))
    return context


def jvm_pid() -> int | None:
    """The pid of the driver's JVM (pyspark's gateway), None when there is none."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    return int(process.pid) if process is not None else None


def stop_context(context: Any) -> None:
    """Stop ``context`` (a SparkContext) without waiting for pyspark's accumulator server.

    ``SparkContext.stop`` shuts that server down and waits for it, and the server's one
    request handler (the JVM's connection) polls with a timeout of 1 s before it sees the
    shutdown: every stop of a topology waited 0.5-1 s for it. Hailstorm uses no
    accumulators, and no task runs once the context's JVM side has stopped, so the server
    is shut down after the context stopped without waiting (:func:`shut_down_quietly`); it
    ends within that second, or with the process."""
    server = getattr(context, "_accumulatorServer", None)
    context._accumulatorServer = None  # stop() waits only for a server it still holds
    try:
        context.stop()
    finally:
        if server is not None:
            shut_down_quietly(server)


def shut_down_quietly(server: Any) -> None:
    """Shut pyspark's accumulator ``server`` down on a daemon thread of its own, and keep
    its request handler quiet meanwhile: the JVM's connection it still polls ends when the
    JVM does, and the handler then fails reading it (``EOFError``), which ``socketserver``
    would print as a traceback at the end of every clean stop."""
    server.server_shutdown = True  # the handler's poll loop ends at its next wake-up
    server.handle_error = lambda _request, _address: None
    threading.Thread(target=server.shutdown, name="accumulator-server-shutdown",
                     daemon=True).start()


def end_jvm(timeout: float = 60.0) -> int | None:
    """Stop the active SparkContext and end the driver's JVM (pyspark's gateway), waiting
    up to ``timeout`` s for it to exit; returns its exit code (None: there was none, or it
    had to be killed). Without this the JVM exits on its own after this process."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        stop_context(context)
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    SparkContext._gateway = None
    SparkContext._jvm = None
    if gateway is None or process is None:
        return None
    with contextlib.suppress(Exception):  # its connections: the JVM is leaving anyway
        gateway.close()
    if process.stdin is not None:
        process.stdin.close()  # PythonGatewayServer exits when its stdin ends
    try:
        return int(process.wait(timeout))
    except subprocess.TimeoutExpired:
        log.warning("the driver's JVM (pid %d) did not exit within %.0f s: killed it",
                    process.pid, timeout)
        process.kill()
        process.wait()
        return None


class NotEnoughSlots(ConfigurationError, RuntimeError):
    """The Spark cluster offers fewer task slots than the barrier stage has tasks."""


def cluster_slots(context: Any) -> int:
    """How many tasks the cluster can run at once now (what Spark's barrier check counts)."""
    jsc = context._jsc.sc()
    profile = jsc.resourceProfileManager().defaultResourceProfile()
    return int(jsc.maxNumConcurrentTasks(profile))


def check_slots(context: Any, needed: int, wait: float = 30.0, poll: float = 0.5) -> int:
    """Wait (up to ``wait`` s, while executors register) until the cluster offers ``needed``
    task slots; raise :class:`NotEnoughSlots` naming both numbers otherwise. A barrier stage
    cannot start with fewer, and Spark would refuse and resubmit it for minutes."""
    deadline = time.monotonic() + wait
    while True:
        slots = cluster_slots(context)
        if slots >= needed:
            return slots
        if time.monotonic() >= deadline:
            master = context.master
            raise NotEnoughSlots(
                f"the Spark cluster at {master} offers {slots} task slots, but the topology "
                f"has {needed} processor instances and each needs one (give its workers more "
                "cores, add workers, or lower parallelism)")
        time.sleep(poll)


def _run_task(entry: ProcessorEntry) -> Callable[[Iterator[Any]], Iterator[int]]:
    def run(assignments: Iterator[Any]) -> Iterator[int]:
        for assignment in assignments:
            entry(assignment)
        yield 0

    return run


class StageRunner:
    """Submits the barrier stage again and again until stopped (or a processor halts it,
    :mod:`hailstorm.halt`)."""

    def __init__(
        self,
        context: Any,
        assignments: Sequence[Any],
        entry: ProcessorEntry,
        options: SparkOptions,
        on_attempt: Callable[[int], None] | None = None,
        made_progress: Callable[[float], bool] | None = None,
        prepare_attempt: Callable[[list[Any]], list[Any]] | None = None,
        explain: Callable[[BaseException], str] | None = None,
        stopped_by: Callable[[], str | None] | None = None,
    ) -> None:
        self.context = context
        self.assignments = list(assignments)
        self.entry = entry
        self.options = options
        self.on_attempt = on_attempt or (lambda _attempt: None)
        #: Asked after a failed attempt with its start time (``time.time()``): did the
        #: topology make progress meanwhile? Then the failure is a fresh one, not a loop,
        #: and the backoff starts over.
        self.made_progress = made_progress or (lambda _since: False)
        #: Turns the assignments into those of one attempt (e.g. a fresh secret each).
        self.prepare_attempt = prepare_attempt or (lambda assignments: assignments)
        #: The one line that says why an attempt failed (a processor and its error, not
        #: Spark's generic line): :func:`~hailstorm.runtime.causes.root_cause`.
        self.explain = explain or (lambda exc: root_cause(str(exc)))
        #: Asked when an attempt ended: who stopped the topology (None: nobody). A stopped
        #: topology's processors leave; the loop ends instead of resubmitting them.
        self.stopped_by = stopped_by or (lambda: None)
        self.stopping = threading.Event()
        self.attempts = 0
        self.failures = 0

    def stop(self) -> None:
        """Ask the loop to end and cancel the running stage."""
        self.stopping.set()
        self.context.cancelAllJobs()

    def run_once(self) -> None:
        """One barrier stage with a task per assignment; returns when every task ended."""
        sc = self.context
        assignments = self.prepare_attempt(self.assignments)
        rdd = sc.parallelize(assignments, len(assignments))
        sc.setJobDescription(f"{self.options.app_name}: {len(self.assignments)} processors")
        rdd.barrier().mapPartitions(_run_task(self.entry)).collect()

    def run(self) -> int:
        """Loop until stopped; returns the number of failed attempts."""
        backoff = self.options.backoff_initial
        consecutive = 0
        while not self.stopping.is_set():
            self.attempts += 1
            self.on_attempt(self.attempts)
            started = time.monotonic()
            started_at = time.time()
            try:
                self.run_once()
                if self.stopping.is_set() or self._stopped():
                    break
                log.info("stage attempt %d: every processor ended; resubmitting", self.attempts)
                consecutive = 0
                backoff = self.options.backoff_initial
                continue
            except Exception as exc:  # Spark wraps task failures in Py4J errors
                if self.stopping.is_set() or self._stopped():
                    break
                self.failures += 1
                if _SLOTS_REFUSED in str(exc):  # a worker left: wait for one, not forever
                    check_slots(self.context, len(self.assignments),
                                wait=self.options.slot_wait)
                halted = halt_reason(str(exc))
                if halted is not None:
                    log.error("stage attempt %d: the topology halted: %s", self.attempts, halted)
                    raise TopologyHalted(halted) from None
                consecutive += 1
                healthy = time.monotonic() - started >= self.options.healthy_after
                if healthy or bool(_safely(self.made_progress, started_at)):
                    backoff = self.options.backoff_initial
                    consecutive = 1
                reason = _explained(self.explain, exc)
                limit = self.options.max_attempts
                if limit is not None and consecutive >= limit:
                    log.error("stage attempt %d failed (%s); giving up", self.attempts, reason)
                    raise RestartsExhausted(
                        f"gave up after {consecutive} consecutive failed stage attempts "
                        f"without a committed round in between; the last: {reason}"
                    ) from exc
                log.warning(
                    "stage attempt %d failed (%s); resubmitting in %.1fs",
                    self.attempts,
                    reason,
                    backoff,
                )
                if self.stopping.wait(backoff):
                    break
                backoff = min(self.options.backoff_max, backoff * 2)
        return self.failures


    def _stopped(self) -> bool:
        by = _safely(lambda _since: self.stopped_by() or "", 0.0, default="")
        if by:
            log.info("stage attempt %d ended: the topology was stopped by %s", self.attempts, by)
        return bool(by)


_SLOTS_REFUSED = "SPARK-24819"
"""In the error of a barrier stage Spark refused for lack of task slots."""


class RestartsExhausted(HaltError, RuntimeError):
    """The stage kept failing and the topology made no progress between the attempts."""


def _safely(check: Callable[[float], Any], since: float, default: Any = False) -> Any:
    try:
        return check(since)
    except Exception as exc:  # a probe of ZooKeeper must never stop the driver
        log.debug("progress check failed: %s", exc)
        return default


def _explained(explain: Callable[[BaseException], str], exc: BaseException) -> str:
    try:
        return explain(exc)
    except Exception as problem:  # explaining must never stop the driver
        log.debug("explaining a failure failed: %s", problem)
        return root_cause(str(exc))


class Stoppable(Protocol):
    """What signal handlers stop: a runner, or the driver around it."""

    stopping: threading.Event

    def stop(self) -> None: ...


def install_signal_handlers(runner: Stoppable) -> None:
    """SIGINT/SIGTERM: stop the loop and cancel the stage (a second signal exits at once)."""

    def handle(signum: int, _frame: object) -> None:
        if runner.stopping.is_set():
            os._exit(128 + signum)
        log.info("signal %d: stopping the topology", signum)
        threading.Thread(target=runner.stop, daemon=True).start()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
