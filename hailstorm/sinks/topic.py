"""The exactly-once topic writer of one sink instance (a thin Kafka shell).

:class:`TopicWriter` is driven like :class:`~hailstorm.sinks.writer.SinkWriter`::

    writer = TopicWriter.open(kafka, topic, "wordcount/sink:totals:0", epoch, ...)
    writer.add_columns(partitions, offsets, tuples)
    progress = writer.commit_through(lwm)   # one Kafka transaction: records + progress

Each commit is **one Kafka transaction** holding the records at or below the low water
mark, the dead letters of the tuples that did not become records, and the sink's progress
(a record keyed by the sink id on the compacted topic ``<topology>.<sink>.progress``,
partition 0). A ``read_committed`` consumer sees all of a commit or none of it. After a
restart the writer reads its progress and drops append records at or below it; upsert
records follow :mod:`~hailstorm.sinks.buffer`'s rule (the last arrival per key wins).

Fencing: the transactional id ``hailstorm:<sink id>`` is stable, so a new writer's
``init_transactions`` aborts whatever transaction an older one left open and fences it:
a zombie's next send or commit fails (:class:`~hailstorm.sinks.errors.FencedError`,
``superseded`` when the stored progress belongs to a newer epoch). The progress record
carries the hailstorm epoch, so a writer that finds a newer epoch's progress stops
without writing. See ``docs/sinks.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from hailstorm import kafka
from hailstorm.dead_letters import VALUE_LIMIT, dead_letter_headers, dead_letter_key
from hailstorm.failpoints import failpoint, pause_point
from hailstorm.halt import TopologyHalt
from hailstorm.kafka import is_kafka_outage
from hailstorm.outages import Outage, OutageWatch, RetryPolicy, through_outages
from hailstorm.protocol.clock import NOTHING, Clock, Partition, clock_from_json, clock_to_json
from hailstorm.sinks.buffer import BufferedWriter, PreparedCommit, RowBuffer
from hailstorm.sinks.errors import FencedError, SinkConfigError, SinkError
from hailstorm.topic import Topic
from hailstorm.vocabulary import DeadLetter, Message, Origin, RejectedRow, halt_reason_of

__all__ = ["TopicUnavailableError", "TopicWriter", "progress_topic", "transactional_id"]

log = logging.getLogger("hailstorm.sinks")

T = TypeVar("T")

PROGRESS_PARTITION = 0
PARTITIONER_CHOOSES = -1
"""The partition of a record the producer's partitioner places (librdkafka's
``RD_KAFKA_PARTITION_UA``)."""
ORIGIN_HEADER = "hailstorm.origin"
"""``<topic>:<partition>:<offset>`` of the message a record came from."""
SEQ_HEADER = "hailstorm.seq"
"""Append records: the record's number among those of its origin (with the origin, a key
that tells repeats apart)."""


WAIT_SLICE = 5.0
"""Longest one call of a transaction (init, commit, abort) blocks: one that timed out is
called again (librdkafka resumes it), so a writer says within seconds that it waits for
Kafka, not after its whole ``io_timeout``."""
OTHER_ATTEMPTS = 8
"""Transactions tried in a row on errors that are no outage (then the writer gives up),
also for a writer that waits outages out."""


class TopicUnavailableError(SinkError):
    """Kafka kept failing the sink's transactions through every retry (``outage``: because
    it did not answer)."""

    def __init__(self, message: str, *, outage: bool = False) -> None:
        super().__init__(message)
        self.outage = outage


def progress_topic(topology: str, sink: str) -> str:
    """The compacted topic holding the progress of ``sink``'s instances."""
    return f"{topology}.{sink}.progress"


def transactional_id(sink_id: str) -> str:
    """The stable transactional id of a sink instance: a restarted instance fences its
    predecessor by initializing it again."""
    return f"hailstorm:{sink_id}"


def progress_value(epoch: int, clock: Mapping[Partition, int]) -> bytes:
    return json.dumps({"epoch": epoch, "clock": clock_to_json(clock)},
                      sort_keys=True).encode()


def parse_progress(raw: bytes) -> tuple[int, Clock]:
    """``(epoch, clock)`` of a progress record (raises ValueError for anything else)."""
    data = json.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("epoch"), int):
        raise ValueError(f"not a progress record: {raw[:80]!r}")
    return data["epoch"], clock_from_json(data.get("clock") or {})


class TopicWriter(BufferedWriter):
    """Writes one sink instance's records to its topic exactly once (for ``read_committed``
    consumers). One thread drives a writer; a commit's :meth:`write` may run on another
    while it adds rows (:attr:`background`)."""

    def __init__(
        self,
        bootstrap: str,
        topic: Topic,
        sink_id: str,
        epoch: int,
        *,
        progress: str,
        dead_letter_topic: str,
        node: str = "sink",
        io_timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transaction_timeout: float = 60.0,
        logger: logging.Logger | None = None,
        on_reject: Callable[[RejectedRow], None] | None = None,
        halt_as: str | None = None,
        on_outage: Callable[[Outage | None], None] | None = None,
    ) -> None:
        if not isinstance(topic, Topic):
            raise SinkConfigError(f"a TopicWriter writes a Topic, not {topic!r}")
        if epoch < 0:
            raise SinkConfigError(f"epoch must be >= 0, not {epoch}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.sink_id = sink_id
        self.epoch = epoch
        self.progress_topic = progress
        self.dead_letter_topic = dead_letter_topic
        self.node = node
        self.io_timeout = io_timeout
        self.retry = retry or RetryPolicy()
        """Retries of a transaction; with ``attempts=None`` a Kafka outage of any length is
        waited out (:func:`~hailstorm.kafka.is_kafka_outage`), other errors are tried
        :data:`OTHER_ATTEMPTS` times."""
        self.on_outage = on_outage or (lambda _outage: None)
        """Told when Kafka stops answering the writer (an :class:`~hailstorm.outages.Outage`,
        again at every failed attempt) and when it answers again (None)."""
        self.kafka_watch = OutageWatch(f"Kafka at {bootstrap}")
        self.transaction_timeout = transaction_timeout
        self.log = logger or log
        self.on_reject = on_reject
        self.halt_as = halt_as
        self._buffer = RowBuffer(topic)
        self._view: Clock = {}
        self._producer: Producer | None = None
        self.partition_count = topic.partitions
        """Partitions of the output topic (as found by :meth:`setup`)."""
        self.commits = 0
        """Transactions committed by this writer."""
        self.rows_written = 0
        """Records written in committed transactions (upsert: after superseding)."""
        self.rows_rejected = 0
        """Tuples written as dead letters instead of records."""
        self.last_commit_seconds = 0.0
        """How long the last transaction took, from its first record to its commit."""

    def __repr__(self) -> str:
        return f"TopicWriter({self.sink_id!r} -> topic {self.topic.name}, epoch {self.epoch})"

    @property
    def what(self) -> str:
        return f"sink {self.sink_id} (topic {self.topic.name})"

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def open(cls, bootstrap: str, topic: Topic, sink_id: str, epoch: int,
             **options: Any) -> TopicWriter:
        """Create the topics if missing, fence every older writer of this sink and read
        the progress. Raises :class:`FencedError` (``superseded``) when a newer epoch
        already wrote this sink's progress."""
        writer = cls(bootstrap, topic, sink_id, epoch, **options)
        writer._through_outages(writer.setup, "creating its topics")
        writer.progress()
        return writer

    # -- outages ------------------------------------------------------------------------

    def _through_outages(self, op: Callable[[], T], doing: str) -> T:
        """``op()``, tried again with backoff while Kafka is out (when the writer waits
        outages out; otherwise its errors propagate)."""
        return through_outages(
            op, self.kafka_watch, is_outage=self._waits_out, policy=self.retry,
            on_failed=lambda outage, delay: self._told(outage, doing, delay),
            on_answered=self._ended)

    def _waits_out(self, exc: BaseException) -> bool:
        """Is ``exc`` an outage this writer waits out (its policy never gives up)?"""
        unread = isinstance(exc, TopicUnavailableError) and exc.outage
        return self.retry.attempts is None and (unread or is_kafka_outage(exc))

    def _failed(self, exc: BaseException, doing: str, retry_in: float) -> None:
        """Kafka did not answer ``doing``: the outage goes on."""
        self._told(self.kafka_watch.failed(time.time(), _text(exc)), doing, retry_in)

    def _told(self, outage: Outage, doing: str, retry_in: float) -> None:
        """Log the outage's start (and every 12th attempt); tell :attr:`on_outage`."""
        if outage.attempts == 1 or outage.attempts % 12 == 0:
            self.log.warning("%s: %s: Kafka at %s does not answer (attempt %d, %s); trying "
                             "again in %.1f s", self.what, doing, self.bootstrap,
                             outage.attempts, outage.error, retry_in)
        self.on_outage(outage)

    def _answered(self) -> None:
        ended = self.kafka_watch.answered()
        if ended is not None:
            self._ended(ended)

    def _ended(self, ended: Outage) -> None:
        self.log.warning("%s: Kafka at %s answers again after %.0f s", self.what,
                         self.bootstrap, time.time() - ended.since)
        self.on_outage(None)

    def _patiently(self, call: Callable[[float], None], doing: str) -> None:
        """``call(timeout)`` (``init_transactions``, ``commit_transaction``,
        ``abort_transaction``), called again after a timeout or another error that says a
        repeat may succeed: for ``io_timeout`` s, or as long as Kafka is out when the writer
        waits outages out."""
        deadline = time.monotonic() + self.io_timeout
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                call(max(0.1, min(WAIT_SLICE, self.io_timeout)))
                self._answered()
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not (isinstance(error, KafkaError) and error.retriable()
                        and not error.txn_requires_abort() and not error.fatal()):
                    raise
                if time.monotonic() >= deadline and not self._waits_out(exc):
                    raise
                attempt += 1
                # A call that failed at once (no broker to ask) waits before the next one.
                pause = max(0.0, self.retry.delay(attempt) - (time.monotonic() - started))
                if is_kafka_outage(exc):
                    self._failed(exc, doing, pause)
                time.sleep(pause)

    def setup(self) -> None:
        """Create the output and progress topics if missing, then start transactions
        (which aborts and fences any older writer with this sink id)."""
        created = kafka.create_topic(self.bootstrap, self.topic.name, self.topic.partitions)
        kafka.create_topic(self.bootstrap, self.progress_topic, 1,
                           config={"cleanup.policy": "compact"})
        if self.dead_letter_topic != self.topic.name:  # where tuples that are no record go
            kafka.create_topic(self.bootstrap, self.dead_letter_topic, 1)
        # A topic just created has what was asked (its metadata may not be out yet).
        self.partition_count = self.topic.partitions if created else len(
            kafka.partitions_of(self.bootstrap, self.topic.name))
        self._start_producer()

    def _start_producer(self) -> None:
        if self._producer is not None:
            self._drop_producer()
        overrides: dict[str, object] = {
            "transactional.id": transactional_id(self.sink_id),
            "transaction.timeout.ms": int(self.transaction_timeout * 1000),
            "enable.idempotence": True,
        }
        if isinstance(self.topic.partitioner, str):
            overrides["partitioner"] = ("murmur2_random" if self.topic.partitioner == "murmur2"
                                        else "consistent_random")
        defaults = {"linger.ms": 5, "batch.num.messages": 10000,
                    "queue.buffering.max.messages": 500000}
        producer = Producer(kafka.client_settings(self.bootstrap, defaults, overrides))
        try:
            self._patiently(producer.init_transactions, "starting transactions")
        except KafkaException as exc:
            kafka.raise_auth_error(exc.args[0] if exc.args else None, self.bootstrap)
            raise TopicUnavailableError(
                f"{self.what}: Kafka at {self.bootstrap} did not start the sink's "
                f"transactions: {_text(exc)}", outage=is_kafka_outage(exc)) from None
        self._producer = producer

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.flush(0)
            except Exception as exc:  # a fenced producer may refuse even this
                self.log.debug("dropping the producer: %s", exc)

    def close(self) -> None:
        """Drop the producer; an open transaction is aborted by the broker (or by the next
        writer's ``init_transactions``); buffered records come back with a replay."""
        if self._producer is not None:
            with contextlib.suppress(KafkaException):  # no transaction was open
                self._producer.abort_transaction(1)
            self._drop_producer()

    def __enter__(self) -> TopicWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- progress -----------------------------------------------------------------------

    def _read_progress(self) -> tuple[int, Clock]:
        """``(epoch, clock)`` last committed for this sink id (``(-1, {})``: none).

        Reads partition 0 of the progress topic with ``read_committed`` up to the log end
        as it was when called: writers of this sink id finished their transactions
        (``init_transactions`` saw to it), others' open ones are waited for."""
        # A stopped writer's open transaction holds the read up until the broker aborts
        # it (transaction.timeout.ms): wait longer than that.
        patience = max(self.io_timeout, self.transaction_timeout + 15)
        key = self.sink_id.encode()
        found: tuple[int, Clock] = (NOTHING, {})
        try:
            for record in kafka.read_range(self.bootstrap, self.progress_topic,
                                           PROGRESS_PARTITION, 0, self._log_end() - 1,
                                           timeout=patience):
                if record.key == key and record.value is not None:
                    found = parse_progress(record.value)
        except TimeoutError as exc:
            raise TopicUnavailableError(
                f"{self.what}: the progress topic {self.progress_topic} could not be read: "
                f"{exc} (Kafka is out, or a transaction of another writer stays open)",
                outage=True) from None
        return found

    def _log_end(self) -> int:
        """The progress partition's end including open transactions (read_uncommitted)."""
        settings = kafka.client_settings(self.bootstrap, {"group.id": "hailstorm-unused"},
                                         {"isolation.level": "read_uncommitted"})
        probe = Consumer(settings)
        try:
            _low, high = probe.get_watermark_offsets(
                TopicPartition(self.progress_topic, PROGRESS_PARTITION),
                timeout=self.io_timeout, cached=False)
            return int(high)
        finally:
            probe.close()

    def _superseded(self, newest: int) -> FencedError:
        return FencedError(
            f"{self.what}: fenced: epoch {newest} owns this sink, this writer has epoch "
            f"{self.epoch} (a zombie of an older run); it must stop. Nothing it wrote is "
            "visible to read_committed consumers.",
            superseded=True, epoch=self.epoch, stored_epoch=newest)

    def progress(self) -> Clock:
        """Read the stored progress (every record at or below it is on the topic) and
        claim the sink for this writer's epoch (a transaction of the progress record
        alone, so that an older writer finds it and stops); raise :class:`FencedError`
        (``superseded``) when a newer epoch stored it."""
        if self._producer is None:
            self._start_producer()
        stored_epoch, stored = self._through_outages(self._read_progress,
                                                     "reading its progress")
        if stored_epoch > self.epoch:
            raise self._superseded(stored_epoch)
        if stored_epoch < self.epoch:
            try:
                self._transaction([], [], [], stored)
            except KafkaException as exc:
                raise self._fenced(exc) from None
        self._view = dict(stored)
        self._buffer.resync(stored)
        return dict(stored)

    # -- commits ------------------------------------------------------------------------

    @property
    def background(self) -> bool:
        """A transaction may run on a thread of its own: it uses the producer alone (which
        nothing else touches meanwhile) and the selection it was given; a commit waits
        mostly for the broker's acknowledgements."""
        return True

    def write(self, prepared: PreparedCommit) -> None:
        """Write the selected records and the new progress ``max(progress, lwm)`` in one
        transaction (see :meth:`BufferedWriter.commit_through`).

        Raises :class:`FencedError` when a newer writer of this sink id took over (see
        :meth:`progress`), :class:`TopicUnavailableError` when Kafka keeps failing and
        :class:`~hailstorm.halt.TopologyHalt` for a tuple to reject under
        ``on_error="fail"``."""
        selection = prepared.selection
        if selection.rejected and self.halt_as is not None:
            first = selection.rejected[0]
            raise TopologyHalt(halt_reason_of(self.halt_as, first.stage, first.origin,
                                              first.error))
        pause_point("sink.before_commit")  # chaos: a zombie that resumes into its commit
        attempt = others = 0
        while True:
            attempt += 1
            try:
                rejected = self._transaction(selection.rows, selection.origins,
                                             selection.rejected, selection.target)
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not isinstance(error, KafkaError) or error.fatal():
                    raise self._fenced(exc) from None
                self._abort()
                delay = self.retry.delay(attempt)
                if self._waits_out(exc):  # tried again as long as Kafka is out
                    self._failed(exc, "committing", delay)
                    time.sleep(delay)
                    continue
                others += 1
                if self.retry.gives_up(attempt) or others >= OTHER_ATTEMPTS:
                    raise TopicUnavailableError(
                        f"{self.what}: the transaction failed {attempt} times: "
                        f"{_text(exc)}") from None
                self.log.warning("%s: the transaction failed (attempt %d of %s): %s; retrying "
                                 "in %.2f s", self.what, attempt, self.retry.attempts or "no limit",
                                 _text(exc), delay)
                time.sleep(delay)
        prepared.rejected = rejected
        prepared.written = len(selection.rows) + len(selection.rejected) - len(rejected)

    def _transaction(self, rows: Sequence[Any], origins: Sequence[Origin],
                     rejected: Sequence[RejectedRow], target: Clock) -> list[RejectedRow]:
        """Begin, produce, commit; returns the rejected tuples written as dead letters
        (``rejected`` and the records the client refused as too large)."""
        assert self._producer is not None
        producer = self._producer
        started = time.monotonic()
        producer.begin_transaction()
        refused = [*rejected, *self._produce_rows(rows, origins)]
        if self.halt_as is not None and len(refused) > len(rejected):
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(self.io_timeout)
            first = refused[len(rejected)]
            raise TopologyHalt(halt_reason_of(self.halt_as, first.stage, first.origin,
                                              first.error))
        for row in refused:
            self._produce(self.dead_letter_topic, **self._dead_letter(row))
        self._produce(self.progress_topic, progress_value(self.epoch, target),
                      self.sink_id.encode(), PROGRESS_PARTITION)
        failpoint("sink.before_kafka_commit")  # tests: die with the records sent, uncommitted
        self._commit()
        self.last_commit_seconds = time.monotonic() - started
        return refused

    def _produce_rows(self, rows: Sequence[Any], origins: Sequence[Origin]) -> list[RejectedRow]:
        """Produce the records of ``rows`` into the open transaction, each with its origin
        in a header; returns those the topic cannot take (a partition past its count, a
        record too large) as rejected rows. The hot loop of a commit: no call of ours per
        record while the producer's queue has room."""
        assert self._producer is not None
        produce = self._producer.produce
        name, partitions = self.topic.name, self.partition_count
        refused: list[RejectedRow] = []
        for values, ((source, number), offset) in zip(rows, origins, strict=True):
            key, value, partition, extra = values[:4]
            origin = (ORIGIN_HEADER, f"{source}:{number}:{offset}".encode())
            headers = [*extra, origin] if extra else [origin]
            if len(values) > 4:  # append: (..., topic, partition, offset, seq)
                headers.append((SEQ_HEADER, str(values[-1]).encode()))
            problem = None
            if partition is None:
                partition = PARTITIONER_CHOOSES
            elif partition >= partitions:
                problem = (f"the partitioner chose partition {partition}, but topic {name!r} "
                           f"has {partitions}")
            if problem is None:
                try:
                    try:
                        produce(name, value, key, partition, headers=headers)
                    except BufferError:  # the local queue is full: _produce waits for room
                        self._produce(name, value, key, partition, headers)
                except KafkaException as exc:
                    if not exc.args or exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                        raise
                    problem = f"topic {name!r} refused the record: {_text(exc)}"
            if problem is not None:
                refused.append(RejectedRow(((source, number), offset), "row", problem,
                                           repr((value or b"")[:200])))
        return refused

    def _produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                 partition: int = PARTITIONER_CHOOSES,
                 headers: list[Any] | None = None) -> None:
        """Produce one record, waiting while the producer's local queue is full."""
        assert self._producer is not None
        while True:
            try:
                self._producer.produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:  # the local queue is full: let it drain
                self._producer.poll(0.05)

    def _commit(self) -> None:
        """``commit_transaction``, repeated while the error says a repeat may succeed (as
        long as Kafka is out, for a writer that waits outages out): a commit whose outcome
        is unknown is never given up and tried anew."""
        assert self._producer is not None
        self._patiently(self._producer.commit_transaction, "committing")

    def _abort(self) -> None:
        assert self._producer is not None
        try:
            self._patiently(self._producer.abort_transaction, "aborting")
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.fatal():
                raise self._fenced(exc) from None
            self.log.warning("%s: aborting the transaction failed (%s); starting over",
                             self.what, _text(exc))
            self._start_producer()

    def _fenced(self, exc: KafkaException) -> FencedError:
        """The producer is unusable (fenced by a newer writer of this sink id, or another
        fatal error): nothing of the open transaction becomes visible. A newer epoch's
        progress means this writer is a zombie (``superseded``); otherwise the caller
        re-reads the progress (:meth:`progress` starts a new producer) and goes on."""
        self._drop_producer()
        try:
            newest, _clock = self._read_progress()
        except Exception as read_error:  # the cause is the fencing, not this
            self.log.warning("%s: reading the progress after %s failed: %s", self.what,
                             _text(exc), read_error)
            newest = self.epoch
        if newest > self.epoch:
            return self._superseded(newest)
        return FencedError(
            f"{self.what}: the transaction failed for good ({_text(exc)}); nothing of it is "
            "visible. Re-read the progress and go on.",
            superseded=False, epoch=self.epoch, stored_epoch=max(newest, self.epoch))

    def _dead_letter(self, row: RejectedRow) -> dict[str, Any]:
        (source, number), offset = row.origin
        text = row.record.encode("utf-8", "backslashreplace")
        letter = DeadLetter(self.node, self.dead_letter_topic,
                            Message(source, number, offset, text), row.error, row.stage)
        truncated = len(text) > VALUE_LIMIT
        return {"key": dead_letter_key(letter.message), "value": text[:VALUE_LIMIT],
                "headers": dead_letter_headers(letter, truncated=truncated)}


def _text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return str(exc.args[0].str())
    return f"{type(exc).__name__}: {exc}"
