"""The I/O around the pure cores: processor shells, the driver and the Spark stage.

Modules:

* :mod:`~hailstorm.runtime.task` — :func:`~hailstorm.runtime.task.run_processor`, the Spark
  task body (one per processor instance), and what one incarnation of it runs;
* :mod:`~hailstorm.runtime.supervisor` — the task forks a process per incarnation and
  starts the next when one ends, as :mod:`~hailstorm.runtime.supervision` (pure) decides;
* :mod:`~hailstorm.runtime.assignment` — :class:`~hailstorm.runtime.assignment.Assignment`,
  what one task runs (made by the driver, handed to the processor's shell);
* :mod:`~hailstorm.runtime.processor` — what every processor shell does (ZooKeeper
  protocol, failures, going on without a peer that restarts alone);
* :mod:`~hailstorm.runtime.inbound` — bolts' and sinks' listener, readers and queue;
* :mod:`~hailstorm.runtime.data_plane` — outbound connections, addresses, the handshake's
  limits;
* :mod:`~hailstorm.runtime.gate` — a listener's handshake and first frame; what a client
  (not yet a peer) did is refused, counted and answered, as :mod:`~hailstorm.runtime.clients`
  (pure) classifies it;
* :mod:`~hailstorm.runtime.spout`, :mod:`~hailstorm.runtime.bolt`,
  :mod:`~hailstorm.runtime.sink` — the three shells around
  :class:`~hailstorm.processors.SpoutCore`, :class:`~hailstorm.processors.BoltCore` and
  :class:`~hailstorm.processors.sink_core.SinkCore`;
* :mod:`~hailstorm.runtime.driver` — ``hailstorm run``: expected ids, the stage, new
  partitions;
* :mod:`~hailstorm.runtime.spark_stage` — one barrier stage of every processor, resubmitted
  with backoff;
* :mod:`~hailstorm.runtime.spark_daemon` — Spark's Python daemon, with the processor runtime
  imported once before it forks each task's worker.
* :mod:`~hailstorm.runtime.class_archive` — the driver JVM's class-data-sharing archive,
  written once per JDK and Spark install, mapped by every later start.

This ``__init__`` imports nothing, so the command line can import the Spark stage's errors
without loading Kafka, the sinks or the shells.

Each processor:

* opens its data-plane listener (bolts and sinks) on ``assignment.host``, port 0;
* registers ``living/<id>`` (ephemeral) with ``info = {host, port, pid, metrics}``
  (:class:`~hailstorm.coordination.Coordinator`) and follows the master state as in
  docs/negotiator.md, on its main thread;
* joins the first ``Initialize(e)`` it sees. Seeing a newer ``Initialize`` (or a
  ``SpoutsRewind`` of another epoch) later ends the processor with :class:`RestartRequired`:
  its Spark task starts the next incarnation, a fresh process that registers again
  (:mod:`~hailstorm.runtime.supervisor`; a failed or killed incarnation likewise). So one
  incarnation lives in exactly one run, and data connections are tagged with that epoch in
  their HELLO (a receiver refuses any other epoch).

Data plane: upstream instances connect to their downstream instances (addresses from the
``living`` reports) once the run passed ``Initialize`` (every expected processor was ready
in it). A connection is mutual TLS 1.3 under the run's CA, completed before a frame is read
(:mod:`hailstorm.auth`; a listener refuses, logs and counts anything else without failing,
and runs at most :data:`MAX_HANDSHAKES` handshakes at once, each within
:data:`HANDSHAKE_TIMEOUT` s). Frames (:mod:`hailstorm.protocol.wire`) are sent
with blocking ``sendall`` (socket timeout
:attr:`Assignment.io_timeout`); receivers put them into a bounded queue, so a slow bolt
stops reading its sockets and back-pressure reaches the spouts through TCP.

* Spout: one thread owns the :class:`~hailstorm.processors.SpoutCore` and a confluent-kafka
  consumer assigned to its partition (no group); consumes in batches while flowing, sends
  CLOCK/DATA/WATERMARK in order, and a watermark at least every
  :data:`WATERMARK_INTERVAL` s. Dead letters are acknowledged by Kafka before the spout
  reports its position for a round.
* Bolt: the main thread owns the :class:`~hailstorm.processors.BoltCore` (frames from the
  queue, clocks from CLOCK frames or the master); :class:`WriteSnapshot` goes to a writer
  thread that stores it (:func:`~hailstorm.snapshots.open_store`) and then
  writes the :class:`~hailstorm.protocol.layout.SnapshotReport`.
* Sink: buffers the rows it receives in its table's (or topic's) writer; the pure
  :class:`~hailstorm.processors.sink_core.SinkCore` says when to commit them and when a
  round is covered, and the shell reports it. Opening on progress below the committed
  round it saved (:mod:`~hailstorm.processors.sink_guard`) halts the topology.

Failures: an exception in any thread is recorded, the main thread raises it, reports it as
``error`` (keeping the session up to 3 s so the negotiator sees the error rather than a lost
node), closes the session and the sockets, and the incarnation ends: its Spark task starts
the next one (once three restarts in a row came without a round committed in between, the
next end leaves the Spark task instead, for Spark to resubmit the stage). A
ZooKeeper error (even a transient connection loss) is fatal too: the topology restarts from
its committed snapshots. A processor whose Spark task vanished dies with it.
A :class:`~hailstorm.halt.TopologyHalt` (lost Kafka offsets, refused credentials, a sink
behind the committed clock) ends the run for good: every processor that ends because of it
ends with it too, so the driver stops.
Every wait is bounded.
"""
