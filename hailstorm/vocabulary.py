"""The record vocabulary the engine and the models share.

What a Kafka message is (:class:`Message`, its :data:`Origin`), what becomes of a record
that fails (:class:`DeadLetter`, :class:`RejectedRow`, :func:`halt_reason_of`) and how a
quarantined tuple is shown (:func:`record_text`). The runtime, the sinks, the sequential
reference model (:mod:`hailstorm.model`) and the independent oracle (:mod:`hailstorm.oracle`)
all speak it; none of them owns it, and nothing here executes a topology.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hailstorm.lateness import LATE_STAGE, Late
from hailstorm.protocol.clock import Partition

if TYPE_CHECKING:
    from hailstorm.topology import BoltSpec, RecordFailed

__all__ = [
    "RECORD_TEXT_LIMIT",
    "DeadLetter",
    "Message",
    "Origin",
    "RejectedRow",
    "halt_reason_of",
    "late_row",
    "messages",
    "record_bytes",
    "record_text",
]


Origin = tuple[Partition, int]
"""Where a tuple came from: ``((topic, partition), offset)``."""


@dataclass(frozen=True)
class Message:
    """One Kafka message (``value`` is the raw bytes; ``None`` is a tombstone)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None

    @property
    def source(self) -> Partition:
        """``(topic, partition)``."""
        return (self.topic, self.partition)

    @property
    def origin(self) -> Origin:
        """``((topic, partition), offset)``."""
        return ((self.topic, self.partition), self.offset)


def messages(
    topic: str, values: Iterable[Any], *, partition: int = 0, first_offset: int = 0
) -> list[Message]:
    """Consecutive messages of one partition, for tests.

    Each value may be ``bytes`` (used as is), ``str`` (UTF-8) or anything else (JSON).
    """
    result = []
    for offset, value in enumerate(values, start=first_offset):
        if isinstance(value, str):
            raw: bytes | None = value.encode("utf-8")
        elif isinstance(value, bytes | None):
            raw = value
        else:
            raw = json.dumps(value).encode("utf-8")
        result.append(Message(topic, partition, offset, raw))
    return result


@dataclass(frozen=True)
class DeadLetter:
    """A quarantined record: a message a spout could not decode or explode, or a tuple a
    bolt's function failed on."""

    node: str
    """The spout or bolt whose function failed."""
    topic: str
    """The dead-letter topic it would be written to."""
    message: Message
    """The source message; for a bolt's tuple, its origin with :func:`record_bytes` of
    the tuple as the value."""
    error: str
    stage: str
    """``"decode"``, ``"explode"``, ``"key"``, ``"lift"``, ``"event_time"``, ``"monoid"``
    or ``"emit"`` (see :class:`~hailstorm.topology.RecordFailed`); ``"late"`` for a tuple
    routed to a bolt's late topic (see :mod:`hailstorm.lateness`)."""
    details: tuple[tuple[str, str], ...] = ()
    """More ``(name, value)`` written as ``hailstorm.<name>`` headers (a late tuple's
    window and event time)."""

    @classmethod
    def of_tuple(cls, topic: str, origin: Origin, t: Any, failure: RecordFailed) -> DeadLetter:
        """The dead letter of tuple ``t`` (from ``origin``) that ``failure`` quarantined."""
        (source, partition), offset = origin
        return cls(failure.node, topic, Message(source, partition, offset, record_bytes(t)),
                   failure.error, failure.stage)

    @classmethod
    def of_late(cls, bolt: BoltSpec[Any, Any], origin: Origin, t: Any, why: Late) -> DeadLetter:
        """The record written to ``bolt.late`` for the late tuple ``t`` from ``origin``."""
        assert bolt.late_topic is not None
        (topic, partition), offset = origin
        return cls(
            bolt.name, bolt.late_topic, Message(topic, partition, offset, record_bytes(t)),
            f"late for window [{why.start}, {why.end}) of bolt {bolt.name!r}: event time "
            f"{why.event_time}, stream time of {topic}[{partition}] {why.stream_time}",
            LATE_STAGE,
            tuple((name, str(value)) for name, value in why.fields().items()),
        )


@dataclass(frozen=True)
class RejectedRow:
    """A sink tuple that did not become a row of its table: its ``row`` failed (stage
    ``"row"``), or the database refused the row (stage ``"database"``, runtime only: the
    model does not know the database's constraints). It lands in ``<table>_rejected``."""

    origin: Origin
    stage: str
    error: str
    record: str
    """:func:`record_text` of the tuple."""


RECORD_TEXT_LIMIT = 64 * 1024
"""Characters of a quarantined tuple's ``repr`` that are kept."""


def record_text(t: Any) -> str:
    """How a quarantined tuple is shown: its ``repr``, cut at :data:`RECORD_TEXT_LIMIT`."""
    try:
        text = repr(t)
    except Exception as exc:  # a user type whose repr raises
        text = f"<{type(t).__name__}: repr failed: {type(exc).__name__}>"
    return text if len(text) <= RECORD_TEXT_LIMIT else text[:RECORD_TEXT_LIMIT] + "..."


def record_bytes(t: Any) -> bytes:
    """:func:`record_text` as UTF-8 (the value of a bolt's dead letter)."""
    return record_text(t).encode("utf-8", "backslashreplace")


def late_row(origin: Origin, t: Any, why: Late) -> dict[str, Any]:
    """What a bolt's late sink (``late=Table(...)``) receives for the late tuple ``t`` from
    ``origin``: where it came from, its window, event time and stream time, and its
    :func:`record_text` (``record``); the keys are :data:`~hailstorm.lateness.LATE_COLUMNS`."""
    (topic, partition), offset = origin
    return {"topic": topic, "partition": partition, "offset": offset, **why.fields(),
            "record": record_text(t)}


def halt_reason_of(node: str, stage: str, origin: Origin, error: str) -> str:
    """Why a topology with ``on_error="fail"`` stopped on a bad record."""
    (topic, partition), offset = origin
    return (f"{node}: {stage} failed on the record at {topic}:{partition}:{offset}: {error} "
            '(the topology has on_error="fail"; fix the function or the record, or use '
            'on_error="quarantine" to send bad records to the dead-letter topic)')
