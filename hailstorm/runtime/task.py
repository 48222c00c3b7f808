"""The Spark task body: :func:`run_processor` runs one processor instance (see
:mod:`hailstorm.runtime.driver`): incarnation after incarnation, each in a process of its own
(:mod:`hailstorm.runtime.supervisor`), until the topology stops or halts, or the task
leaves a restart to Spark."""

from __future__ import annotations

import gc
import logging
import os
import sys

from hailstorm.config import KAFKA_CONFIG_VAR
from hailstorm.halt import TopologyHalt
from hailstorm.protocol.layout import Role, parse_processor_id, processor_label
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.bolt import BoltShell
from hailstorm.runtime.causes import ProcessorFailed, describe
from hailstorm.runtime.processor import RestartRequired, Shell
from hailstorm.runtime.sink import SinkShell
from hailstorm.runtime.spout import SpoutShell
from hailstorm.runtime.standby import Promoted, WarmState, stand_by
from hailstorm.runtime.supervision import Ended, Outcome
from hailstorm.runtime.supervisor import Channel, supervise
from hailstorm.topology import Topology, load_topology

__all__ = ["run_processor"]

GC_THRESHOLDS = (500_000, 20, 100)
"""The cyclic garbage collector's thresholds in processors (Python's default: 700, 10, 10).
A processor allocates many short-lived containers per batch (tuples, decoded values) and
keeps a large, long-lived, acyclic state; with the default, collections run every 700
allocations and keep promoting batch data into the generations that hold the state, so
full collections walk the whole state again and again. Refcounting frees almost all of a
processor's garbage anyway. The first generation's threshold lies above what a bolt or sink
holds between two flushes or commits (rows buffered for a transaction, a batch's tuples): at
50,000 every collection walked tens of thousands of such buffered objects, out of cache, at
40-160 ms each, about 10% of the processors' CPU on per-user totals."""

SWITCH_INTERVAL = 0.001
"""How long (s) a processor's thread may hold the interpreter lock while another waits for
it (Python's default: 0.005). A bolt's snapshot writer and its socket readers run Python
beside the main thread; each time the main thread comes back from a socket it waited up to
the whole interval for the lock, for every frame of a round's write."""


HALT_CHARS = 16_000
"""Longest halt an incarnation tells its task: the reasons are short (a processor reports at
most 2,000 characters), and the pipe's buffer (64 KiB) must hold the whole outcome, which the
task reads only once the incarnation ended."""


def run_processor(assignment: Assignment) -> None:
    """Run one processor instance, restarting it in this task as
    :mod:`hailstorm.runtime.supervision` decides; raise
    :class:`~hailstorm.runtime.causes.ProcessorFailed` (naming it and the error) when the
    restart is Spark's to make, or the topology halted."""
    _configure_logging(assignment)
    if assignment.kafka_config:
        os.environ[KAFKA_CONFIG_VAR] = assignment.kafka_config
    try:
        topology = load_topology(assignment.topology_ref)  # once: incarnations inherit it
    except BaseException as exc:  # named, so the driver can say which processor and why
        raise ProcessorFailed(assignment.processor, exc) from exc
    def body(a: Assignment, channel: Channel, warm: WarmState | None) -> Outcome:
        return run_incarnation(a, topology, channel, warm)

    def stand(a: Assignment, promote: int) -> Promoted:
        return stand_by(a, topology, promote)

    standby = assignment.standby and parse_processor_id(assignment.processor).role is Role.BOLT
    supervise(assignment, body, stand if standby else None)


def run_incarnation(assignment: Assignment, topology: Topology, channel: Channel,
                    warm: WarmState | None = None) -> Outcome:
    """Run one incarnation of the instance (in its own process) and say how it ended;
    a bolt's with the state its standby held (``warm``)."""
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL)
    pid = parse_processor_id(assignment.processor)
    shell: Shell
    if pid.role is Role.SPOUT:
        shell = SpoutShell(assignment, topology)
    elif pid.role is Role.BOLT:
        shell = BoltShell(assignment, topology)
        shell.warm = warm
    else:
        shell = SinkShell(assignment, topology)
    shell.on_progress = channel.progress
    try:
        shell.run()
    except TopologyHalt as exc:  # whole (up to a pipe's buffer): the driver prints it
        return Outcome(Ended.HALTED, describe(exc, HALT_CHARS))
    except BaseException as exc:  # broad: named, so the task can say which processor and why
        if shell.coord is not None and shell.coord.superseded is not None:
            return Outcome(Ended.SUPERSEDED, describe(exc))  # its stage attempt is over
        ended = Ended.RESTARTED if isinstance(exc, RestartRequired) else Ended.FAILED
        return Outcome(ended, describe(exc))
    return Outcome(Ended.STOPPED)


def _configure_logging(assignment: Assignment) -> None:
    root = logging.getLogger("hailstorm")
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter(
                f"%(asctime)s %(levelname)s [{processor_label(assignment.processor)} "
                "pid=%(process)d] "
                "%(message)s"
            )
        )
        root.addHandler(handler)
        root.propagate = False
    root.setLevel(assignment.log_level.upper())
