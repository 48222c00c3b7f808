"""The kill-test harness: run a topology for real, hurt it, and check it against the model.

A :class:`TopologyRun` deploys one topology on a running stack (ZooKeeper, Kafka, a snapshot
directory): ``negotiators`` negotiator subprocesses (one leads, the others stand by) and the
driver subprocess (``python -m hailstorm run``), logs in ``log_dir``. Every process it
started is stopped by pid on exit, also when the body raised; the Spark Python workers the
driver forked are found through the pids processors report in ZooKeeper.

Workloads are produced with :func:`produce` or a :class:`BackgroundProducer`; both record
exactly what was written (:class:`Produced`: partition -> ``[(offset, value)]``;
:class:`ProducedTopics` for several topics), so
:func:`hailstorm.model.run_model` can be fed the very same messages.

Faults:

* :meth:`TopologyRun.kill_processor` - SIGKILL a processor's process (its Spark task starts
  the next incarnation), or with ``task=True`` its Spark task's Python worker (the stage
  fails and the driver resubmits it);
* :meth:`TopologyRun.kill_negotiator_leader` - SIGKILL the leading negotiator (read from the
  master record); a fresh negotiator is started so a standby is there for the next one;
* :meth:`TopologyRun.expire_zk_session` - SIGSTOP a processor until ZooKeeper expired its
  session (its ephemeral ``living`` node is gone, which the server only does after the
  session timeout), then SIGCONT: the processor wakes up with a dead session, as after a
  long GC pause or a network partition;
* :meth:`TopologyRun.kill_broker` - SIGKILL the Kafka node that leads the most partitions of
  the source topic (from the cluster metadata), keep it down a few seconds, then start it
  again on its own data. It needs a :class:`BrokerControl` (a
  :class:`hailstorm.dev.services.DevStack` is one) and a cluster of at least
  :data:`MIN_KAFKA_NODES` nodes: killing the only broker is not a recoverable fault.

:class:`ChaosSchedule` plans seeded faults, :meth:`TopologyRun.inject` runs one (recording
the evidence that it happened: :attr:`Fault.evidence`) and
:meth:`TopologyRun.measure_recovery` measures the recovery (time until the topology is
``Flowing`` again in the epoch of the recovery recorded for the fault, and until a commit
passes the position the topology had reached before it; for a broker fault, until a commit
holds, on every partition, a message acknowledged only after the kill, and until the node is
back); :func:`account` matches each recovery to the one fault it is due to, and
:func:`compare_with_model` names lost, duplicated and wrong values. :func:`run_chaos` ties it
all together into a :class:`ChaosReport` (text or JSON), as ``hailstorm chaos`` prints it.

Modules, by concern (this package re-exports the names the rest of the repository uses):

* :mod:`~hailstorm.dev.harness.wait` - :class:`HarnessError` and :func:`wait_for`, the bounded
  waits;
* :mod:`~hailstorm.dev.harness.stack` - the stack's addresses, a run's private database, the
  Kafka nodes (partition layout, whether a broker fault is recoverable, restarting a node);
* :mod:`~hailstorm.dev.harness.producing` - :class:`Produced`, :func:`produce`,
  :class:`BackgroundProducer` and the seeded :data:`WORKLOADS`;
* :mod:`~hailstorm.dev.harness.faults` - the fault kinds and phases, :class:`Fault`,
  :class:`Recovery`, how a zombie ended (from its log);
* :mod:`~hailstorm.dev.harness.evidence` - whether a fault bit (its evidence), which fault
  each recovery is due to (:func:`account`), the restarts a plan causes;
* :mod:`~hailstorm.dev.harness.results` - reading committed bolt states, sink tables and
  topics, dead letters, late records and rejected rows;
* :mod:`~hailstorm.dev.harness.side_outputs` - dead letters, late records and rejected rows as
  a model predicts them and as they read back (:class:`SideRecord`);
* :mod:`~hailstorm.dev.harness.compare` - :func:`compare_with_model` (states, tables and side
  outputs against both models), :func:`compare_tables` and the by-hand counts
  (:data:`BY_HAND`);
* :mod:`~hailstorm.dev.harness.deployment` - the processes of one deployment, its ZooKeeper
  records, its committed results and its recoveries;
* :mod:`~hailstorm.dev.harness.run` - :class:`TopologyRun`: that deployment, hurt on purpose,
  with its recoveries measured;
* :mod:`~hailstorm.dev.harness.chaos` - :class:`ChaosSchedule`, :func:`run_chaos` and
  :class:`ChaosReport`, behind ``hailstorm chaos``.
"""

from hailstorm.dev.harness.chaos import ChaosReport, ChaosSchedule, PlannedFault, run_chaos
from hailstorm.dev.harness.compare import (
    BY_HAND,
    Comparison,
    Difference,
    compare_tables,
    compare_with_model,
)
from hailstorm.dev.harness.evidence import (
    Accounting,
    account,
    missing_evidence,
    planned_restarts,
    recovery_window,
)
from hailstorm.dev.harness.faults import (
    DEFAULT_FAULT_KINDS,
    FAULT_KINDS,
    MASTER_PHASES,
    VICTIM_ROLES,
    ZOMBIE_ENDED,
    ZOMBIE_FENCED,
    Explanation,
    Fault,
    FaultKind,
    MasterPhase,
    Recovery,
    zombie_outcome,
)
from hailstorm.dev.harness.producing import (
    PRODUCER_SETTINGS,
    WORKLOADS,
    BackgroundProducer,
    Outgoing,
    Produced,
    ProducedTopics,
    Workload,
    produce,
    wordcount_lines,
)
from hailstorm.dev.harness.results import BoltStates, keyed_append_rows, topic_records
from hailstorm.dev.harness.run import TopologyRun
from hailstorm.dev.harness.stack import (
    MIN_KAFKA_NODES,
    SQLITE,
    BrokerControl,
    StackAddresses,
    TopicLayout,
    broker_fault_problem,
    busiest_leader,
    kafka_nodes,
    private_database,
    topic_layout,
)
from hailstorm.dev.harness.wait import HarnessError, wait_for

__all__ = [
    "BY_HAND",
    "DEFAULT_FAULT_KINDS",
    "FAULT_KINDS",
    "MASTER_PHASES",
    "MIN_KAFKA_NODES",
    "PRODUCER_SETTINGS",
    "SQLITE",
    "VICTIM_ROLES",
    "WORKLOADS",
    "ZOMBIE_ENDED",
    "ZOMBIE_FENCED",
    "Accounting",
    "BackgroundProducer",
    "BoltStates",
    "BrokerControl",
    "ChaosReport",
    "ChaosSchedule",
    "Comparison",
    "Difference",
    "Explanation",
    "Fault",
    "FaultKind",
    "HarnessError",
    "MasterPhase",
    "Outgoing",
    "PlannedFault",
    "Produced",
    "ProducedTopics",
    "Recovery",
    "StackAddresses",
    "TopicLayout",
    "TopologyRun",
    "Workload",
    "account",
    "broker_fault_problem",
    "busiest_leader",
    "compare_tables",
    "compare_with_model",
    "kafka_nodes",
    "keyed_append_rows",
    "missing_evidence",
    "planned_restarts",
    "private_database",
    "produce",
    "recovery_window",
    "run_chaos",
    "topic_layout",
    "topic_records",
    "wait_for",
    "wordcount_lines",
    "zombie_outcome",
]
