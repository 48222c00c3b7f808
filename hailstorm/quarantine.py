"""Writing a processor's quarantined records to the dead-letter topic (a thin Kafka shell).

A spout quarantines the messages it cannot decode or explode; spouts and bolts quarantine
the tuples a bolt's function failed on (see :class:`~hailstorm.topology.RecordFailed`).
What is quarantined is decided by pure code shared with :func:`~hailstorm.model.run_model`;
this module only writes it, or halts the topology when its ``on_error`` is ``"fail"``.

A dead letter's value is the source message's value (a spout's) or the ``repr`` of the
tuple (a bolt's), cut at :data:`VALUE_LIMIT` bytes so that an oversized poison record can
always be quarantined (``hailstorm.size`` then gives the original size); its key is
``<topic>:<partition>:<offset>`` of the source message; headers say where it came from and
why it failed. A processor flushes its dead letters and checks every delivery before it
reports a round that covers them (:meth:`DeadLetterWriter.flush`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from hailstorm.halt import TopologyHalt
from hailstorm.metrics import Counter
from hailstorm.model import DeadLetter, Message, halt_reason_of
from hailstorm.topology import OnError

__all__ = ["VALUE_LIMIT", "DeadLetterWriter", "dead_letter_headers", "dead_letter_key"]

log = logging.getLogger("hailstorm.quarantine")

VALUE_LIMIT = 512 * 1024
"""Bytes of a dead letter's value that are written (Kafka's default message limit is
1 MB; the rest is cut and ``hailstorm.truncated`` is set)."""

SMALL_VALUE_LIMIT = 16 * 1024
"""The cut used once more when the dead-letter topic refuses even :data:`VALUE_LIMIT`."""


def dead_letter_key(message: Message) -> bytes:
    """``<topic>:<partition>:<offset>`` of the source message: a replay after a failure may
    write a dead letter again, and this key tells the repeats apart (or lets a compacted
    topic drop them)."""
    return f"{message.topic}:{message.partition}:{message.offset}".encode()


def dead_letter_headers(letter: DeadLetter, *, truncated: bool = False) -> list[tuple[str, bytes]]:
    """Where a dead letter came from and why it failed, as Kafka headers."""
    m = letter.message
    headers = [
        ("hailstorm.node", letter.node.encode()),
        ("hailstorm.topic", m.topic.encode()),
        ("hailstorm.partition", str(m.partition).encode()),
        ("hailstorm.offset", str(m.offset).encode()),
        ("hailstorm.stage", letter.stage.encode()),
        ("hailstorm.error", letter.error[:1000].encode("utf-8", "replace")),
    ]
    if truncated:
        headers += [("hailstorm.truncated", b"true"),
                    ("hailstorm.size", str(len(m.value or b"")).encode())]
    return headers


class DeadLetterWriter:
    """One processor's dead letters: produced as they come, flushed before a round reports.

    ``kafka`` is the bootstrap address (:func:`hailstorm.kafka.producer`); the producer is
    made on first use. With ``on_error="fail"`` :meth:`write` raises
    :class:`~hailstorm.halt.TopologyHalt` naming the first record instead.
    """

    def __init__(self, kafka: str, io_timeout: float, on_error: OnError,
                 counter: Counter | None = None) -> None:
        self.kafka = kafka
        self.io_timeout = io_timeout
        self.on_error = on_error
        self.counter = counter
        self._producer: Any = None
        self._errors: list[str] = []

    def write(self, letters: Iterable[DeadLetter]) -> None:
        """Produce ``letters`` (asynchronously; :meth:`flush` waits for them)."""
        for letter in letters:
            if self.on_error == "fail":
                raise TopologyHalt(halt_reason_of(letter.node, letter.stage,
                                                  letter.message.origin, letter.error))
            m = letter.message
            log.warning("quarantined the record at %s:%d:%d (%s %s): %s", m.topic,
                        m.partition, m.offset, letter.node, letter.stage, letter.error)
            self._produce(letter)
            if self.counter is not None:
                self.counter.inc()
        if self._producer is not None:
            self._producer.poll(0)

    def _produce(self, letter: DeadLetter) -> None:
        from confluent_kafka import KafkaError, KafkaException

        from hailstorm.kafka import producer

        if self._producer is None:
            self._producer = producer(self.kafka)
        value = letter.message.value
        for limit in (VALUE_LIMIT, SMALL_VALUE_LIMIT):
            truncated = value is not None and len(value) > limit
            record = {
                "value": value[:limit] if value is not None and truncated else value,
                "key": dead_letter_key(letter.message),
                "headers": dead_letter_headers(letter, truncated=truncated),
                "on_delivery": self._delivered,
            }
            try:
                try:
                    self._producer.produce(letter.topic, **record)
                except BufferError:  # the local queue is full: make room, then once more
                    self._producer.flush(self.io_timeout)
                    self._producer.produce(letter.topic, **record)
                return
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                    raise
        raise RuntimeError(f"dead letter for {letter.message.origin} refused as too large "
                           f"even cut to {SMALL_VALUE_LIMIT} bytes")

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            return
        from confluent_kafka import KafkaError

        value = message.value()
        if (error.code() == KafkaError.MSG_SIZE_TOO_LARGE and value is not None
                and len(value) > SMALL_VALUE_LIMIT):  # the topic takes less than we cut to
            headers = [(k, v) for k, v in message.headers() or []
                       if k not in ("hailstorm.truncated", "hailstorm.size")]
            size = next((v for k, v in message.headers() or [] if k == "hailstorm.size"),
                        str(len(value)).encode())
            self._producer.produce(
                message.topic(), value=value[:SMALL_VALUE_LIMIT], key=message.key(),
                headers=[*headers, ("hailstorm.truncated", b"true"), ("hailstorm.size", size)],
                on_delivery=self._delivered)
            return
        self._errors.append(f"{message.topic()}: {error.str()}")

    def flush(self) -> None:
        """Wait until Kafka acknowledged every dead letter written so far, or raise.

        Call before reporting a round: once a round's clock covers a quarantined record,
        a replay starts above it and never writes its dead letter again, so the round must
        not commit while the letter could still be lost with this process.
        """
        if self._producer is None:
            return
        remaining = self._producer.flush(self.io_timeout)
        if remaining or self._errors:
            problems = self._errors[:3] or [
                f"{remaining} not acknowledged within {self.io_timeout:.0f} s"]
            raise RuntimeError(f"dead letters not written: {'; '.join(problems)}")

    def close(self) -> None:
        """Give pending dead letters a few seconds (a replay writes lost ones again)."""
        if self._producer is not None:
            try:
                self._producer.flush(5)
            except Exception as exc:  # closing anyway
                log.debug("dead letters not flushed on close: %s", exc)
