"""Thin adapter over confluent-kafka: topics, producing, and bounded partition reads.

Spouts read assigned partitions directly (no consumer groups, nothing committed to Kafka):
hailstorm's own clocks say where to resume. Reads here are bounded by offsets, never by the
broker's high watermark (the dev broker reports it loosely; see the brief).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


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


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 15.0) -> bool:
    """Create ``topic`` with ``partitions``; False when it already existed."""
    client = admin(bootstrap)  # keep a reference: the futures die with their client
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout,
    )
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True


def partitions_of(bootstrap: str, topic: str, timeout: float = 10.0) -> list[int]:
    """Partition numbers of ``topic`` from broker metadata (error if it does not exist)."""
    client = admin(bootstrap)
    metadata = client.list_topics(topic, timeout=timeout)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        raise LookupError(f"Kafka topic {topic!r} does not exist on {bootstrap}")
    return sorted(info.partitions)


def producer(bootstrap: str, **config: object) -> Producer:
    """A producer tuned for throughput (batching, idempotence off for the dev broker)."""
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 500000,
    }
    settings.update(config)
    return Producer(settings)


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


def consumer(bootstrap: str, **config: object) -> Consumer:
    """A consumer for manual assignment: no group coordination, nothing committed."""
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": "hailstorm-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 50,
    }
    settings.update(config)
    return Consumer(settings)


def read_range(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    timeout: float = 30.0,
) -> Iterator[Record]:
    """Yield the messages of one partition with ``start <= offset <= end``, in order.

    Raises TimeoutError when the range is not fully available within ``timeout`` seconds.
    """
    if end < start:
        return
    source = consumer(bootstrap)
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
