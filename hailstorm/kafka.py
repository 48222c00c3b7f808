"""Thin adapter over confluent-kafka: client settings, topics, producing, bounded reads.

Spouts read assigned partitions directly (no consumer groups, nothing committed to Kafka):
hailstorm's own clocks say where to resume. Reads are bounded by offsets and clocks, never by
the broker's watermarks.

Every client hailstorm makes (spouts, dead letters, status, export, the harness, benchmarks)
gets its settings from :func:`client_settings`: hailstorm's defaults, then the operator's
librdkafka properties file (``--kafka-config FILE`` / ``$HAILSTORM_KAFKA_CONFIG``: security,
SASL, TLS, anything librdkafka takes), then what the call site needs. Properties that
exactly-once depends on (``isolation.level=read_committed`` and ``auto.offset.reset=error``
for spouts) are set last and cannot be overridden. Secrets from the file never reach a log
line or an error message: :func:`redacted` masks them.

librdkafka's own log lines go to the ``hailstorm.kafka.client`` logger (served when a client
polls), not straight to the terminal; the transient ones it retries by itself
(:data:`TRANSIENT_CLIENT_LOGS`, e.g. a transaction coordinator still loading) are logged at
DEBUG.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from hailstorm.config import KAFKA_CONFIG_VAR, read_properties
from hailstorm.config import KafkaConfigError as KafkaConfigError  # owned by config
from hailstorm.errors import ServiceError
from hailstorm.outages import Outage, OutageWatch, through_outages
from hailstorm.repeats import RepeatDigest

T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    """One message read from Kafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: dict[str, bytes] | None = None


def _headers(raw: Any) -> dict[str, bytes] | None:
    """A message's headers (a list of ``(name, value)``) as a dict of bytes."""
    if raw is None:
        return None
    return {str(k): v.encode() if isinstance(v, str) else (v or b"") for k, v in raw}


CONFIG_VAR = KAFKA_CONFIG_VAR
"""Environment variable naming a librdkafka properties file for every client."""

#: Property names whose values are secrets (matched as substrings of the name).
_SECRET_PARTS = ("password", "secret", "jaas", ".pem", "token", "key")
#: What spouts need for exactly-once: only committed records, and never a silent jump.
SPOUT_REQUIRED = {
    "isolation.level": "read_committed",
    "auto.offset.reset": "error",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
}


class KafkaAuthError(ServiceError, RuntimeError):
    """The cluster refused hailstorm's credentials (or TLS could not be established)."""


class KafkaUnreachable(ServiceError, RuntimeError):
    """No broker of the cluster answered."""


def configured_properties() -> dict[str, str]:
    """The properties file named by ``$HAILSTORM_KAFKA_CONFIG`` (empty when unset)."""
    path = os.environ.get(CONFIG_VAR)
    return read_properties(path) if path else {}


def is_secret(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in _SECRET_PARTS) and not lowered.endswith(
        (".location", ".type", ".mechanism", ".mechanisms", ".algorithm")
    )


def redacted(settings: Mapping[str, object]) -> dict[str, object]:
    """``settings`` with every secret value replaced by ``***`` (for logs and errors)."""
    return {k: "***" if is_secret(k) else v for k, v in settings.items()}


def client_settings(
    bootstrap: str,
    defaults: Mapping[str, object] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """librdkafka settings: ``defaults`` < the properties file < ``overrides``."""
    settings: dict[str, Any] = dict(defaults or {})
    settings.update(configured_properties())
    settings.update(overrides or {})
    settings["bootstrap.servers"] = bootstrap
    settings.setdefault("error_cb", log_client_error)
    settings.setdefault("logger", CLIENT_LOG)
    return settings


_client_log = logging.getLogger("hailstorm.kafka")

TRANSIENT_CLIENT_LOGS = (
    "Coordinator load in progress",
    "Coordinator not available",
)
"""Parts of librdkafka log lines about what it retries by itself (logged at DEBUG)."""


def is_transient_client_log(message: str) -> bool:
    """True when a librdkafka log line is about something it retries by itself."""
    return any(part in message for part in TRANSIENT_CLIENT_LOGS)


class _TransientAsDebug(logging.Filter):
    """Passes librdkafka's transient lines only when the logger logs DEBUG, as DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and is_transient_client_log(record.getMessage()):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return CLIENT_LOG.isEnabledFor(logging.DEBUG)
        return True


CLIENT_REPEAT_INTERVAL = 60.0
"""Seconds over which a librdkafka line that repeats is logged once, then summed up."""


def client_line_kind(message: str) -> str:
    """What makes librdkafka lines "the same": the text without its numbers (the client's
    serial, ports, milliseconds)."""
    return re.sub(r"\d+", "#", message)


class RepeatsSummed(logging.Filter):
    """Passes the first of each kind of librdkafka line per :data:`CLIENT_REPEAT_INTERVAL`
    and sums up the rest (to ``hailstorm.kafka``): every client reconnects to a broker
    that is out a few times a second, and logs each attempt (23,000 lines of 5.6 MB in a
    two-minute outage of word stream's broker, before)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        self._digest: RepeatDigest[tuple[int, str]] = RepeatDigest(CLIENT_REPEAT_INTERVAL)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        with self._lock:
            lines = self._digest.add((record.levelno, client_line_kind(message)), message,
                                     self._clock())
        passed = bool(lines) and lines[-1] is message
        for summary in lines[:-1] if passed else lines:
            _client_log.log(record.levelno, "kafka client: %s", summary)
        return passed


CLIENT_LOG = logging.getLogger("hailstorm.kafka.client")
"""Where every client's librdkafka log lines go (``logger`` in :func:`client_settings`)."""
CLIENT_LOG.addFilter(_TransientAsDebug())
CLIENT_LOG.addFilter(RepeatsSummed())


def log_client_error(error: KafkaError, now: float | None = None) -> None:
    """librdkafka's asynchronous errors (no secrets in them): the first of each code a
    minute, the rest summed up in one line with their count and the latest
    (:data:`CLIENT_ERRORS`), so a later outage is said too (it was once per process)."""
    with _client_errors_lock:
        lines = CLIENT_ERRORS.add(error.code(), f"kafka client: {error.str()}",
                                  time.monotonic() if now is None else now)
    for line in lines:
        _client_log.warning("%s", line)


CLIENT_ERRORS: RepeatDigest[int] = RepeatDigest(interval=60.0)
"""The asynchronous client errors of this process by code (see :func:`log_client_error`)."""
_client_errors_lock = threading.Lock()  # error callbacks come from every client's thread
_AUTH_CODES = {
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


_LOST_CODES = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}


def consumer_error_kind(error: KafkaError) -> str:
    """What a spout does with an error from ``consume``:

    ``"eof"`` (end of partition: nothing), ``"lost"`` (the offset to read is outside the log:
    halt, never skip), ``"auth"`` (credentials refused: halt), ``"fatal"`` (the client is
    unusable: fail and restart), ``"transient"`` (librdkafka recovers by itself: log it).
    """
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        return "eof"
    if code in _LOST_CODES:
        return "lost"
    if code in _AUTH_CODES:
        return "auth"
    if error.fatal():
        return "fatal"
    return "transient"


_OUTAGE_CODES = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE,
    KafkaError._MSG_TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.KAFKA_STORAGE_ERROR,
}
"""The cluster (or the part a request needs) does not answer for now: brokers down or
unreachable, a leader or coordinator moving, too few replicas in sync."""


def is_kafka_outage(problem: BaseException | KafkaError | None) -> bool:
    """True when ``problem`` says Kafka is unavailable for now, so that waiting (with
    backoff) is the cure: no broker answers, a request timed out, a leader or coordinator
    is not available. False for what waiting cannot change: refused credentials, a fatal
    (e.g. fenced) client, anything else. :class:`KafkaUnreachable` is an outage; a
    :class:`KafkaException` is judged by its :class:`KafkaError`."""
    if isinstance(problem, KafkaUnreachable):
        return True
    if isinstance(problem, KafkaException):
        problem = problem.args[0] if problem.args else None
    if not isinstance(problem, KafkaError):
        return False
    code = problem.code()
    if problem.fatal() or code in _AUTH_CODES:
        return False
    return code in _OUTAGE_CODES


def waiting_out(op: Callable[[], T], bootstrap: str,
                report: Callable[[Outage | None], None]) -> T:
    """``op()`` (a request to Kafka at ``bootstrap``), tried again with backoff for as long
    as it fails with an outage (:func:`is_kafka_outage`); ``report`` is told of the outage at
    every failed attempt and of its end (None). Other errors propagate."""
    return through_outages(op, OutageWatch(f"Kafka at {bootstrap}"), is_outage=is_kafka_outage,
                           on_failed=lambda outage, _delay: report(outage),
                           on_answered=lambda _outage: report(None))


def lost_offsets_message(topic: str, partition: int, needed: int,
                         log_start: int | None, log_end: int | None,
                         committed: int | None = None) -> str:
    """One line naming what is gone: the topology's need and the log's extent.
    ``committed``: the offset the committed round includes in this partition; a need at or
    below it is a bolt without committed state (new, or a raised ``version=``), not the
    committed state."""
    if log_start is None or log_end is None:
        extent = "its log start and end are unknown"
    elif log_start >= log_end:
        extent = f"its log is empty (start {log_start}, end {log_end})"
    else:
        extent = f"the log holds offsets {log_start}..{log_end - 1} (start {log_start}, " \
                 f"end {log_end})"
    where = f"Kafka topic {topic!r} partition {partition}"
    if committed is not None and needed <= committed:
        return (
            f"{where}: a bolt without committed state (new, or a raised version=) must read "
            f"from offset {needed}, but {extent}; the committed state (through offset "
            f"{committed}) does not need them. Fix: declare start='earliest' (from the log "
            "start) or start='latest' (from the committed round on) on that bolt; "
            "'hailstorm plan' names it"
        )
    return (
        f"{where}: the topology must read from offset "
        f"{needed}, but {extent}; records the committed state depends on are gone "
        "(retention, delete_records, or the topic was re-created). hailstorm never skips "
        "them silently: see 'Lost offsets' in docs/operations.md"
    )


def admin(bootstrap: str, **config: object) -> AdminClient:
    return AdminClient(client_settings(bootstrap, overrides=config))


def broker_answers(
    bootstrap: str,
    timeout: float = 2.0,
    *,
    expect_node: int | None = None,
    expect_nodes: int | None = None,
    config: Mapping[str, object] | None = None,
) -> bool:
    """True when the cluster answers a metadata request listing the expected brokers.

    ``config`` replaces the configured properties file (the dev stack probes its own
    listeners before anything is exported).
    """
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    # Probe the socket first so librdkafka does not log refused connections while we wait.
    socket.create_connection((host, int(port)), timeout=timeout).close()
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
        "error_cb": lambda _error: None, "log_level": 0}
    settings.update(config or {})
    metadata = AdminClient(settings).list_topics(timeout=timeout)
    if expect_node is not None and expect_node not in metadata.brokers:
        return False
    return expect_nodes is None or len(metadata.brokers) >= expect_nodes


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 15.0,
    config: Mapping[str, str] | None = None,
) -> bool:
    """Create ``topic`` with ``partitions`` and the broker's default replication (and
    ``config``, e.g. ``cleanup.policy``); False when it already existed."""
    client = admin(bootstrap)  # keep a reference: the futures die with their client
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=-1,
                  config=dict(config or {}))],
        operation_timeout=timeout,
    )
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True


def delete_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> bool:
    """Delete ``topic`` with all its records; False when it did not exist. Destructive:
    for tests and benchmarks. The brokers finish asynchronously (creating it again may
    fail for a moment)."""
    client = admin(bootstrap)
    try:
        client.delete_topics([topic], operation_timeout=timeout)[topic].result(timeout)
    except KafkaException as exc:
        if not (exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise
        return False
    return True


def recreate_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> None:
    """Delete ``topic`` with all its records (if it exists), then create it empty with
    ``partitions``. Destructive: for tests and benchmarks that need a topic of their own."""
    delete_topic(bootstrap, topic, timeout)
    deadline = time.monotonic() + timeout
    while True:  # the brokers finish deleting asynchronously: creating fails until then
        try:
            if create_topic(bootstrap, topic, partitions, timeout=timeout):
                return
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise
            _client_log.debug("re-creating %s: %s", topic, exc)
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} was not re-created within {timeout} s")
        time.sleep(0.2)


def add_partitions(bootstrap: str, topic: str, total: int, timeout: float = 15.0) -> None:
    """Grow ``topic`` to ``total`` partitions (Kafka never shrinks a topic)."""
    client = admin(bootstrap)
    futures = client.create_partitions([NewPartitions(topic, total)],
                                       operation_timeout=timeout)
    futures[topic].result(timeout)


def _log_bounds(bootstrap: str, partitions: Iterable[tuple[str, int]],
                timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's ``(log start, last stable offset)``, asked of the broker."""
    reader = consumer(bootstrap)
    try:
        bounds = {}
        for topic, number in partitions:
            low, high = reader.get_watermark_offsets(TopicPartition(topic, number),
                                                     timeout=timeout, cached=False)
            bounds[(topic, number)] = (int(low), int(high))
        return bounds
    finally:
        reader.close()


def log_ends(bootstrap: str, partitions: Iterable[tuple[str, int]],
             timeout: float = 5.0) -> dict[tuple[str, int], int]:
    """Each partition's log end for a ``read_committed`` reader (its last stable offset)."""
    return {p: high for p, (_low, high) in _log_bounds(bootstrap, partitions, timeout).items()}


def log_starts(bootstrap: str, partitions: Iterable[tuple[str, int]],
               timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """Each partition's log start (its first retained offset), asked of the broker."""
    return {p: low for p, (low, _high) in _log_bounds(bootstrap, partitions, timeout).items()}


def partitions_of(bootstrap: str, topic: str, timeout: float = 10.0) -> list[int]:
    """Partition numbers of ``topic`` from broker metadata (error if it does not exist)."""
    errors: list[KafkaError] = []
    client = admin(bootstrap, error_cb=errors.append)
    try:
        metadata = client.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        client.poll(0)  # serve error_cb: the cause (e.g. SASL) arrives only there
        for error in [*errors, exc.args[0] if exc.args else None]:
            raise_auth_error(error, bootstrap)
        raise KafkaUnreachable(
            f"Kafka at {bootstrap} did not answer in {timeout:.0f}s "
            f"({exc.args[0].str() if exc.args else exc})") from None
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        raise LookupError(f"Kafka topic {topic!r} does not exist on {bootstrap}")
    return sorted(info.partitions)


def raise_auth_error(error: KafkaError | None, bootstrap: str) -> None:
    """Raise :class:`KafkaAuthError` when ``error`` is an authentication failure."""
    if isinstance(error, KafkaError) and error.code() in _AUTH_CODES:
        source = os.environ.get(CONFIG_VAR)
        where = f" (check the credentials in {source})" if source else (
            f" (set ${CONFIG_VAR} to a properties file with the cluster's credentials)")
        raise KafkaAuthError(f"Kafka at {bootstrap} refused hailstorm: {error.str()}{where}")


def producer(bootstrap: str, **config: object) -> Producer:
    """A producer tuned for throughput (batching; idempotent, so a retry never duplicates)."""
    defaults: dict[str, object] = {
        "linger.ms": 20,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 500000,
        "enable.idempotence": True,
    }
    return Producer(client_settings(bootstrap, defaults, config))


def produce(bootstrap: str, topic: str, messages: Iterable[tuple[int, bytes | None, bytes]]) -> int:
    """Produce ``(partition, key, value)`` messages and wait until all are acknowledged."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    out = producer(bootstrap)
    count = 0
    for partition, key, value in messages:
        while True:
            try:
                out.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=on_delivery
                )
                break
            except BufferError:
                out.poll(0.1)
        count += 1
        if count % 10000 == 0:
            out.poll(0)
    remaining = out.flush(60)
    if remaining or errors:
        raise KafkaException(errors[0] if errors else f"{remaining} messages not delivered")
    return count


FETCH_BATCHING: dict[str, object] = {"fetch.wait.max.ms": 20, "fetch.min.bytes": 256 * 1024}
"""How long the broker holds a consumer's fetch for data to arrive, and how much data ends
the wait sooner (a backlog). Each request costs the broker about as much CPU however little
it carries, and with ``fetch.min.bytes`` at 1 a stream of small batches meets a fetch per
producer batch: four bare consumer loops and a producer (linger 5 ms) at 5,000 messages/s
on a 2-core VM took the broker 80% of a core that way and 55% this way. Spouts, which work
between consume calls, batch more by themselves: in ``bench/latency.py`` at 10,000
messages/s the broker went from 48% to 46%, and the median latency from 640-710 ms to
485-505 ms (a message waits at most 20 ms more at the broker, in fewer, larger batches)."""


PREFETCH: dict[str, object] = {"fetch.queue.backoff.ms": 20}
"""How long librdkafka waits before it looks again at a partition whose local queue held
``queued.min.messages`` (100,000) or more when it last looked (its default: 1,000 ms).
With that default a consumer that reads faster than 100,000 messages a second gets them
once a second: one bare consumer loop over four partitions of short text lines on a
2-core VM read 171,195 messages/s; with 20 ms it read 1.49-1.62M/s, spending less CPU
(librdkafka issue #2879). A queue that stays full costs the same memory either way."""


def consumer_settings(bootstrap: str, **config: object) -> dict[str, Any]:
    """The settings of :func:`consumer`: hailstorm's defaults (fetch batching and
    prefetch) < the properties file < ``config`` < the rules a spout's reads need."""
    defaults: dict[str, object] = {"group.id": "hailstorm-unused", **FETCH_BATCHING,
                                   **PREFETCH}
    return client_settings(bootstrap, defaults, {**config, **SPOUT_REQUIRED})


def consumer(bootstrap: str, **config: object) -> Consumer:
    """A consumer for manual assignment: no group coordination, nothing committed; reads
    only committed records and errs (never jumps) when an offset is out of range."""
    return Consumer(consumer_settings(bootstrap, **config))


def read_range(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    timeout: float = 30.0,
) -> Iterator[Record]:
    """Yield the messages of one partition with ``start <= offset <= end``, in order.

    Offsets may have gaps (compaction, transaction markers, aborted records): the read ends
    at ``end`` or where the partition's readable log ends past it. Raises TimeoutError when
    the range is not fully available within ``timeout`` seconds.
    """
    if end < start:
        return
    source = consumer(bootstrap, **{"enable.partition.eof": True})
    try:
        source.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        expected = start
        while expected <= end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}[{partition}]: offsets {expected}..{end} not readable in {timeout}s"
                )
            for message in source.consume(1000, timeout=0.2):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The readable end: nothing below it is missing, only skipped.
                        expected = max(expected, message.offset() or 0)
                        continue
                    raise KafkaException(error)
                offset = message.offset()
                if offset is None or offset < expected or offset > end:
                    continue
                expected = offset + 1
                _ts_type, ts = message.timestamp()
                yield Record(topic, partition, offset, message.key(), message.value(), ts,
                             _headers(message.headers()))
    finally:
        source.close()
