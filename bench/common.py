"""Shared pieces of the benchmarks: a workload, the single-process baseline, JSON output."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from hailstorm import kafka

VOCABULARY = [
    f"{a}{b}{c}"
    for a in ("al", "be", "ce", "do", "ek", "fu", "ga", "hi", "io", "ju")
    for b in ("ta", "ro", "mi", "nu", "xo", "sa", "le", "pi", "qu", "zy")
    for c in ("", "n", "s")
]


VOCABULARIES = ("zipf", "toy")
"""``zipf``: realistic text (:class:`hailstorm.dev.workloads.ZipfText`: 50,000 words, s = 1.1,
mixed case and punctuation). ``toy``: the old 300 equally likely words, a *best case* for
pre-aggregation (every batch holds every word), shown only labelled as such."""


def sample_lines(count: int, seed: int = 11, vocabulary: str = "zipf",
                 words: tuple[int, int] = (4, 12)) -> list[str]:
    """Deterministic text lines (see :data:`VOCABULARIES`)."""
    if vocabulary == "zipf":
        from hailstorm.dev.workloads import ZipfText

        return list(ZipfText(words_per_line=(4, 16)).lines(count, seed))
    if vocabulary != "toy":
        raise ValueError(f"vocabulary must be one of {VOCABULARIES}, not {vocabulary!r}")
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCABULARY, k=rng.randint(*words))) for _ in range(count)]


def produce_lines(bootstrap: str, topic: str, lines: Sequence[str], partitions: int) -> float:
    """Produce ``lines`` round-robin over ``partitions``; returns the seconds it took."""
    started = time.perf_counter()
    kafka.produce(
        bootstrap, topic, ((i % partitions, None, line.encode()) for i, line in enumerate(lines))
    )
    return time.perf_counter() - started


def baseline_consume(
    bootstrap: str,
    topic: str,
    partitions: int,
    total: int,
    step: Callable[[list[Any]], None],
    batch: int = 10000,
    messages: bool = False,
) -> float:
    """The single-process baseline's loop: confluent-kafka batch consume of every partition
    from offset 0 until ``total`` messages, ``step(values)`` on each batch (``messages``:
    ``step(messages)``, for work that needs their partitions). Returns seconds."""
    consumer = kafka.consumer(bootstrap)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.perf_counter()
    try:
        while seen < total:
            good = [m for m in consumer.consume(batch, timeout=1.0) if m.error() is None]
            seen += len(good)
            step(good if messages else [m.value() for m in good])
    finally:
        consumer.close()
    return time.perf_counter() - started


def warm_broker(bootstrap: str, topic: str, partitions: int, total: int) -> None:
    """Read every message of ``topic`` once, untimed, before any timed run: the broker's
    fetch path is then compiled by its JIT for every contender alike (the baseline and
    Bytewax run after hailstorm and would otherwise meet a warmer broker)."""
    baseline_consume(bootstrap, topic, partitions, total, lambda _values: None)


def baseline_word_count(
    bootstrap: str,
    topic: str,
    partitions: int,
    total: int,
    words_of: Callable[[str], list[str]],
    batch: int = 10000,
) -> tuple[float, Counter[str]]:
    """The same work without the framework: one process, batch consume, split, Counter.

    Returns (seconds, counts). Reads every partition from offset 0 until ``total`` messages.
    """
    counts: Counter[str] = Counter()

    def step(values: list[bytes | None]) -> None:
        for value in values:
            if value is not None:
                counts.update(words_of(value.decode()))

    return baseline_consume(bootstrap, topic, partitions, total, step, batch), counts


def report(name: str, figures: dict[str, Any], summary: str) -> None:
    """One JSON line of figures, then a human summary."""
    print(json.dumps({"bench": name, **figures}, sort_keys=True))
    print(summary)


@contextlib.contextmanager
def embedded_stack(prefix: str = "hailstorm-bench-",
                   startup_timeout: float = 240) -> Iterator[dict[str, str]]:
    """A DevStack of its own in a temporary directory; its ``HAILSTORM_*`` variables.

    Brought down (every process stopped by pid) and removed afterwards.
    """
    with embedded_dev_stack(prefix, startup_timeout) as (_stack, env):
        yield env


@contextlib.contextmanager
def embedded_dev_stack(prefix: str = "hailstorm-bench-", startup_timeout: float = 240
                       ) -> Iterator[tuple[Any, dict[str, str]]]:
    """:func:`embedded_stack`, with the DevStack itself (a bench that stops and restarts
    its services). Services get ``startup_timeout`` (4 minutes) to start: a loaded 2-core
    machine needs them."""
    from hailstorm.dev.services import DevStack

    state_dir = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(state_dir, 0o755)  # the 'postgres' user must reach its data directory
    stack = DevStack(state_dir, startup_timeout=startup_timeout)
    # A bench ended by SIGTERM (``timeout``, a CI limit) must still stop what it started:
    # the default action ends the process without running this ``finally``.
    previous = signal.getsignal(signal.SIGTERM)
    handled = previous == signal.SIG_DFL and threading.current_thread() is threading.main_thread()
    if handled:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield stack, stack.up().env()
    except BaseException:  # broad: whatever ended the bench, its services' logs tell why
        _keep_stack_logs(state_dir)
        raise
    finally:
        stack.down()
        shutil.rmtree(state_dir, ignore_errors=True)
        if handled:
            signal.signal(signal.SIGTERM, previous)


def _keep_stack_logs(state_dir: Path) -> None:
    """Copy the services' logs out of a stack's directory before it is removed (an error
    names a log in it), and say where they are."""
    logs = state_dir / "logs"
    if not logs.is_dir():
        return
    kept = bench_logs("hailstorm-bench-stack-logs-")
    try:
        shutil.copytree(logs, kept, dirs_exist_ok=True)
    except OSError as exc:  # the bench's own error matters more: said, not raised
        print(f"the stack's logs ({logs}) could not be kept: {exc}", file=sys.stderr,
              flush=True)
        return
    print(f"the stack's logs ({logs}) are kept in {kept}", file=sys.stderr, flush=True)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}: bringing the stack down")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


# ------------------------------------------------------------------ helpers of the stack benches


def processor_metrics(run: Any, role: str, node: str | None = None) -> dict[str, dict[str, float]]:
    """The ``/metrics`` samples (names summed over labels) of every living processor of
    ``role`` (``"spout"``, ``"bolt"``, ``"sink"``), optionally only those of ``node``.

    ``run`` is a :class:`hailstorm.dev.harness.TopologyRun`; processors that advertise no
    metrics port, or do not answer, are left out.
    """
    from hailstorm.metrics import scrape

    result: dict[str, dict[str, float]] = {}
    for ident, proc in run.processors().items():
        parts = ident.split(":")
        if parts[0] != role or (node is not None and parts[1] != node):
            continue
        port = proc.info.get("metrics")
        if port is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            result[ident] = scrape(str(proc.info.get("host", "127.0.0.1")), int(port))
    return result


def metric_total(run: Any, role: str, name: str, node: str | None = None,
                 instances: int | None = None) -> float | None:
    """The sum of metric ``name`` over the processors of ``role`` (and ``node``); None while
    fewer than ``instances`` of them answered."""
    samples = processor_metrics(run, role, node)
    if instances is not None and len(samples) < instances:
        return None
    return sum(s.get(name, 0.0) for s in samples.values())


def pause_reading(run: Any) -> tuple[int, float, float]:
    """Rounds, their pauses' total and the longest pause (s) of ``run``'s negotiators so
    far, from their metrics (see :func:`pause_figures`)."""
    rounds, total, longest = 0, 0.0, 0.0
    for samples in run.negotiator_metrics().values():
        rounds += int(samples.get("hailstorm_negotiator_pause_seconds_count", 0))
        total += samples.get("hailstorm_negotiator_pause_seconds_sum", 0.0)
        longest = max(longest, samples.get("hailstorm_negotiator_pause_max_seconds", 0.0))
    return rounds, total, longest


def pause_figures(run: Any, since: tuple[int, float, float] | None = None) -> dict[str, Any]:
    """How long the snapshot rounds of ``run`` (a TopologyRun) held the spouts paused,
    from its negotiators' metrics: rounds, mean and longest pause in ms; with ``since`` (an
    earlier :func:`pause_reading`), the rounds and mean since then (the longest is the
    run's)."""
    rounds, total, longest = pause_reading(run)
    if since is not None:
        rounds, total = rounds - since[0], total - since[1]
    return {"rounds": rounds,
            "pause_mean_ms": round(1000 * total / rounds, 1) if rounds else None,
            "pause_max_ms": round(1000 * longest, 1)}


class TableProgress:
    """Through which offset of each partition of ``topic`` the sinks writing to the
    database at ``url`` committed their tables (their ``hailstorm_progress`` rows, the
    least over the sinks). Once it covers every offset, a reader of the tables sees every
    result, exactly once; that comes before the snapshot round covering the same offsets
    commits (that round is what a recovery restarts from, not what readers wait for)."""

    def __init__(self, url: str, topic: str) -> None:
        from hailstorm.sinks import PROGRESS_TABLE
        from hailstorm.sinks.db import Database

        self._db = Database(url)
        p = self._db.dialect.param
        self._query = (f'SELECT "partition", MIN("offset") FROM {PROGRESS_TABLE} '
                       f'WHERE topic = {p} GROUP BY "partition"')
        self._topic = topic

    def covers(self, target: Mapping[int, int]) -> bool:
        """Whether every partition's progress reached its offset in ``target``."""
        try:
            with self._db.transaction() as db:
                rows = dict(db.execute(self._query, (self._topic,)))
        except Exception:  # the table appears when the sink first opens
            return False
        return all(rows.get(p, -1) >= o for p, o in target.items())

    def close(self) -> None:
        self._db.close()


@dataclass
class BacklogRun:
    """What :func:`run_on_backlog` measured."""

    seconds: float
    """From the master's first ``Flowing`` until a committed clock covered every offset."""
    pauses: dict[str, Any]
    """:func:`pause_figures` of the run."""
    table: Any
    """The sink table asked for, as :meth:`TopologyRun.sink_tables` reads it."""
    bolts: dict[str, dict[str, float]] = field(default_factory=dict)
    """Every bolt instance's ``/metrics`` samples once the run was covered."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds the processors of each role (``spout``, ``bolt``, ``sink``) used over
    the timed run, summed over their instances (:func:`processor_cpu`)."""
    whole_machine: dict[str, float] = field(default_factory=dict)
    """The whole machine's busy and stolen CPU seconds over the same time
    (:func:`machine_used`)."""


ROLES = ("spout", "bolt", "sink")


def process_cpu(pid: int) -> tuple[float, float] | None:
    """``(CPU seconds, start time)`` of process ``pid`` from ``/proc/<pid>/stat``: user and
    system time of all its threads, and its start in clock ticks since boot (a process
    started again has another); None when it is gone."""
    from hailstorm.dev.services import stat_fields

    fields = stat_fields(pid)
    if fields is None:
        return None
    utime, stime, start = int(fields[11]), int(fields[12]), int(fields[19])  # 14, 15, 22
    return (utime + stime) / os.sysconf("SC_CLK_TCK"), float(start)


def processor_cpu(run: Any) -> dict[str, tuple[float, float]]:
    """Processor id -> ``(CPU seconds its process used so far, its start time)``
    (:func:`process_cpu`; every thread counted), for every living spout, bolt and sink of
    ``run`` on this machine. Read from ``/proc``, a few milliseconds for all: scraping
    their ``/metrics`` took about 0.5 s of the timed run on the 2-core VM, 12% of a
    word count of 300k lines."""
    result: dict[str, tuple[float, float]] = {}
    for ident, report in run.processors().items():
        if ident.split(":")[0] not in ROLES or "pid" not in report.info:
            continue
        read = process_cpu(int(report.info["pid"]))
        if read is not None:
            result[ident] = read
    return result


def machine_cpu() -> tuple[float, float]:
    """``(busy, stolen)`` CPU seconds of the whole machine since boot, from the first line
    of ``/proc/stat``: busy is the user, nice, system, irq and softirq time of every
    process (the services', the bench's own and the processors' alike); stolen is time
    the hypervisor ran another guest while this one had work (what makes a VM noisy)."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


def machine_used(before: tuple[float, float], after: tuple[float, float]) -> dict[str, float]:
    """``machine`` (busy) and ``stolen`` CPU seconds between two :func:`machine_cpu`
    readings."""
    return {"machine": round(after[0] - before[0], 2), "stolen": round(after[1] - before[1], 2)}


def cpu_by_role(before: Mapping[str, tuple[float, float | None]],
                after: Mapping[str, tuple[float, float | None]]) -> dict[str, float]:
    """CPU seconds per role between two :func:`processor_cpu` readings. A processor whose
    process started again in between counts from its start; one missing from the second
    reading is left out, and one missing from the first counts from its start (both are
    said on stderr: the figures then miss some CPU)."""
    used = dict.fromkeys(ROLES, 0.0)
    restarts: list[str] = []
    for ident, (seconds, started) in sorted(after.items()):
        earlier = before.get(ident)
        if earlier is None or earlier[1] != started or seconds < earlier[0]:
            restarts.append(ident)
        else:
            seconds -= earlier[0]
        role = ident.split(":")[0]
        used[role] = used.get(role, 0.0) + seconds
    gone = sorted(set(before) - set(after))
    if gone or restarts:
        print(f"CPU: not read at the end: {gone or 'none'}; started again during the run: "
              f"{restarts or 'none'} (counted from their start)", file=sys.stderr)
    return {role: round(seconds, 2) for role, seconds in used.items()}


def cpu_figures(cpu: Mapping[str, float], count: int, unit: str,
                whole_machine: Mapping[str, float] | None = None
                ) -> tuple[dict[str, Any], str]:
    """The JSON figures and the report line of a run's processor CPU (:attr:`BacklogRun.cpu`)
    over ``count`` of ``unit`` (event, line, view); with ``whole_machine`` (:func:`machine_used`
    over the same time), also the whole machine's, what the rest of it took (the broker,
    PostgreSQL, ZooKeeper, Spark, the negotiator, the bench) and the time stolen."""
    per = {role: 1e6 * cpu.get(role, 0.0) / count for role in ROLES}
    figures: dict[str, Any] = {f"cpu_s_{role}s": cpu.get(role, 0.0) for role in ROLES}
    figures |= {f"cpu_us_per_{unit}_{role}s": round(per[role], 1) for role in ROLES}
    line = (f"  CPU:       {', '.join(f'{role}s {per[role]:.1f} us' for role in ROLES)} per "
            f"{unit} ({sum(per.values()):.1f} in all: the processors' own")
    if whole_machine is None:
        return figures, line + "; Kafka, PostgreSQL, ZooKeeper and the negotiator not counted)"
    whole = 1e6 * whole_machine["machine"] / count
    rest = max(0.0, whole - sum(per.values()))
    figures |= {"cpu_s_machine": whole_machine["machine"],
                "cpu_s_stolen": whole_machine["stolen"],
                f"cpu_us_per_{unit}_machine": round(whole, 1),
                f"cpu_us_per_{unit}_others": round(rest, 1)}
    return figures, line + (
        f");\n             the whole machine {whole:.1f} us per {unit}: {rest:.1f} for the rest "
        f"(the broker, PostgreSQL, ZooKeeper, Spark, the negotiator, the bench); "
        f"{whole_machine['stolen']:.2f} s stolen by the hypervisor")


def phase_figures(runs: Sequence[Mapping[str, float]], count: int, unit: str
                  ) -> tuple[dict[str, float], str]:
    """The figures of ``runs`` (CPU seconds per phase of each run) over ``count`` of
    ``unit`` (message, contribution): each phase's microseconds a ``unit`` in the run of
    least CPU, and the least, median and most of the runs' totals; with their summary."""
    best = min(runs, key=lambda spent: sum(spent.values()))
    per = {phase: seconds / count * 1e6 for phase, seconds in best.items()}
    totals = sorted(sum(spent.values()) / count * 1e6 for spent in runs)
    least, median, most = totals[0], totals[len(totals) // 2], totals[-1]
    figures = {f"us_per_{unit}_{phase}": round(value, 3) for phase, value in per.items()}
    figures |= {f"us_per_{unit}": round(least, 3), f"us_per_{unit}_median": round(median, 3),
                f"us_per_{unit}_max": round(most, 3)}
    phases = ", ".join(f"{phase} {value:.2f}" for phase, value in per.items())
    return figures, (f"{least:.2f} us a {unit} at least (median {median:.2f}, most "
                     f"{most:.2f} over {len(runs)} runs; {phases} in the least)")


COVER_POLL_S = 0.5
"""How often :func:`run_on_backlog` asks ZooKeeper whether a commit covers the backlog."""


def run_on_backlog(stack: Any, module: Path, topic: str, partitions: int,
                   values: Sequence[bytes], table: str, timeout: float) -> BacklogRun:
    """Produce ``values`` to a new ``topic`` of ``partitions``, then run the topology
    ``module`` (one negotiator, its sinks in ``stack``'s PostgreSQL) on that backlog, read
    once first (:func:`warm_broker`), until a committed round covers every offset;
    ``stack`` is a
    :class:`hailstorm.dev.harness.StackAddresses`."""
    from hailstorm.dev.harness import Produced, TopologyRun, produce, wait_for

    kafka.create_topic(stack.kafka, topic, partitions)
    produced = Produced(topic)
    produce(stack.kafka, produced, values, kafka.partitions_of(stack.kafka, topic))
    warm_broker(stack.kafka, topic, partitions, len(values))
    with run_logs("hailstorm-bench-logs-") as logs, TopologyRun(
            stack, module, log_dir=logs, negotiators=1, timeout=60,
            database=stack.database) as run:
        run.start()
        wait_for("the master to be Flowing", run.flowing, 300, run.alive, poll=0.02)
        started = time.time()
        target = {(topic, p): o for p, o in produced.last_offsets().items()}
        print("hailstorm: flowing", flush=True)
        cpu_before, machine_before = processor_cpu(run), machine_cpu()
        # Timed by the negotiator's own commit time: the harness polls ZooKeeper rarely,
        # so as not to take the cores it measures (at 20 Hz it took a tenth of one).
        covering = wait_for("a commit covering every offset", lambda: run.covers(target),
                            timeout, run.alive, poll=COVER_POLL_S)
        seconds = covering.committed_at - started
        cpu = cpu_by_role(cpu_before, processor_cpu(run))
        whole_machine = machine_used(machine_before, machine_cpu())
        pauses = pause_figures(run)
        bolts = processor_metrics(run, "bolt")
        rows = run.sink_tables()[table]
        run.stop()
    return BacklogRun(seconds, pauses, rows, bolts, cpu, whole_machine)


def committed_snapshot_sizes(snapshots: Path | str, committed: Any) -> dict[str, int]:
    """Processor id -> size in bytes of its snapshot file in the committed round
    ``committed`` (a :class:`hailstorm.protocol.layout.CommittedRecord`)."""
    from hailstorm.snapshots import open_store

    store = open_store(snapshots)
    return {ident: store.resolve(location).size_bytes
            for ident, location in sorted(committed.snapshots.items())}


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by linear interpolation between ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def bench_logs(prefix: str) -> Path:
    """A fresh directory for the logs of a bench's topology runs (kept for inspection)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


KEEP_LOGS = "HAILSTORM_BENCH_KEEP_LOGS"
"""Set (to anything but empty), a measuring bench keeps its topology runs' logs."""


@contextlib.contextmanager
def run_logs(prefix: str) -> Iterator[Path]:
    """A fresh directory for the logs of one measured topology run: removed when the run
    ends well; kept, and named on stderr, when it fails or :data:`KEEP_LOGS` is set."""
    logs = bench_logs(prefix)
    try:
        yield logs
    except BaseException:  # broad: whatever ended the run, its logs tell why
        print(f"the topology's logs are kept in {logs}", file=sys.stderr, flush=True)
        raise
    if os.environ.get(KEEP_LOGS):
        print(f"the topology's logs are kept in {logs} ({KEEP_LOGS} is set)",
              file=sys.stderr, flush=True)
    else:
        shutil.rmtree(logs, ignore_errors=True)
