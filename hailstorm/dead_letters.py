"""What a dead letter looks like in Kafka: its key, value (cut at :data:`VALUE_LIMIT`),
headers, and the progress topic of the processors writing them.

Pure. :class:`~hailstorm.sinks.topic.TopicWriter` writes dead letters in this shape (its
own rejected rows, and :mod:`hailstorm.quarantine`'s :class:`DeadLetterTopic` records);
:mod:`hailstorm.quarantine` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hailstorm.topic import Topic, TopicRecord
from hailstorm.vocabulary import DeadLetter, Message

__all__ = ["VALUE_LIMIT", "DeadLetterTopic", "dead_letter_headers", "dead_letter_key",
           "dead_letter_progress_topic"]

VALUE_LIMIT = 512 * 1024
"""Bytes of a dead letter's value that are written (Kafka's default message limit is
1 MB; the rest is cut and ``hailstorm.truncated`` is set)."""



def dead_letter_key(message: Message) -> bytes:
    """``<topic>:<partition>:<offset>`` of the source message (a key that names the record
    it quarantines)."""
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
    headers += [(f"hailstorm.{name}", value.encode()) for name, value in letter.details]
    if truncated:
        headers += [("hailstorm.truncated", b"true"),
                    ("hailstorm.size", str(len(m.value or b"")).encode())]
    return headers


def dead_letter_progress_topic(topology: str) -> str:
    """The compacted topic holding how far each processor wrote its dead letters."""
    return f"{topology}.dead-letters.progress"


@dataclass(frozen=True, eq=False)
class DeadLetterTopic(Topic):
    """A dead-letter topic as the target of a transactional writer: its "tuples" are
    :class:`~hailstorm.model.DeadLetter` s, appended with their key and headers."""

    mode: Any = "append"
    encoder: Any = "bytes"

    def record_of(self, t: Any) -> TopicRecord:
        letter: DeadLetter = t
        value = letter.message.value
        truncated = value is not None and len(value) > VALUE_LIMIT
        return (dead_letter_key(letter.message),  # a tombstone's dead letter is one too
                value[:VALUE_LIMIT] if value is not None and truncated else value,
                None, tuple(dead_letter_headers(letter, truncated=truncated)))
