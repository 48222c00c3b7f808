"""Writing a processor's quarantined records to the dead-letter topic, exactly once.

A spout quarantines the messages it cannot decode or explode; spouts and bolts quarantine
the tuples a bolt's function failed on (see :class:`~hailstorm.topology.RecordFailed`).
What is quarantined is decided by pure code shared with :func:`~hailstorm.model.run_model`;
this module only writes it, or halts the topology when its ``on_error`` is ``"fail"``.

A dead letter's value is the source message's value (a spout's) or the ``repr`` of the
tuple (a bolt's), cut at :data:`VALUE_LIMIT` bytes so that an oversized poison record can
always be quarantined (``hailstorm.size`` then gives the original size); its key is
``<topic>:<partition>:<offset>`` of the source message; headers say where it came from and
why it failed.

Dead letters are written the way a topic sink writes records
(:class:`~hailstorm.sinks.topic.TopicWriter`): each processor buffers them with their
origins and commits those at or below a clock in one Kafka transaction with its progress
(topic ``<topology>.dead-letters.progress``, keyed by the processor). A replay after a
failure drops the dead letters at or below that progress, so a ``read_committed`` consumer
of the dead-letter topic sees each once. A processor commits through a clock once every
dead letter at or below it was written to it (:meth:`DeadLetterWriter.commit_through`):
a spout through its position, a bolt through the watermark it forwards and the clock of
every snapshot, before the watermark or the snapshot report leaves it.

The writer also keeps the processor's budget for bad records (:meth:`DeadLetterWriter.count`,
see :mod:`hailstorm.bad_records`) and logs quarantined records through a
:class:`~hailstorm.bad_records.QuarantineDigest`: one line per node, stage and error kind
every :data:`LOG_INTERVAL` seconds, not one per record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from hailstorm.bad_records import BadRecordBudget, Fill, QuarantineDigest
from hailstorm.dead_letters import (
    VALUE_LIMIT,
    DeadLetterTopic,
    dead_letter_headers,
    dead_letter_key,
    dead_letter_progress_topic,
)
from hailstorm.failpoints import failpoint
from hailstorm.halt import TopologyHalt
from hailstorm.lateness import LATE_STAGE
from hailstorm.metrics import Counter
from hailstorm.outages import WAIT_OUT, Outage
from hailstorm.protocol.clock import Clock, Partition
from hailstorm.topology import OnError, Quarantine
from hailstorm.vocabulary import DeadLetter, Origin, halt_reason_of

if TYPE_CHECKING:
    from hailstorm.sinks.topic import TopicWriter

__all__ = ["LOG_INTERVAL", "VALUE_LIMIT", "DeadLetterTopic", "DeadLetterWriter",
           "dead_letter_headers", "dead_letter_key", "dead_letter_progress_topic"]

log = logging.getLogger("hailstorm.quarantine")

LOG_INTERVAL = 30.0
"""Seconds over which a processor sums up the records it quarantined in one log line per
node, stage and error kind (the first of a kind is logged at once)."""


class DeadLetterWriter:
    """One processor's dead letters, written exactly once (see the module docstring).

    ``owner`` is ``<topology>/<processor id>``; :meth:`start` begins an incarnation
    (epoch). Writers to Kafka are opened on the first dead letter (most processors never
    have one). With ``on_error="fail"`` :meth:`write` raises
    :class:`~hailstorm.halt.TopologyHalt` naming the first record instead; with a
    ``budget`` (:class:`~hailstorm.topology.Quarantine`) :meth:`count` raises it once a
    node fails on more records than the budget allows (``on_fill`` is told how full the
    fullest window is after each count).
    """

    def __init__(self, kafka: str, io_timeout: float, on_error: OnError,
                 counter: Counter | None = None, *, owner: str, topology: str,
                 late_counter: Counter | None = None, budget: Quarantine | None = None,
                 on_fill: Callable[[Fill], None] | None = None,
                 on_outage: Callable[[Outage | None], None] | None = None) -> None:
        self.kafka = kafka
        self.io_timeout = io_timeout
        self.on_error = on_error
        self.counter = counter
        self.late_counter = late_counter
        """Counts what lands in late topics (:data:`~hailstorm.lateness.LATE_STAGE`)."""
        self._late_topics: set[str] = set()
        self.owner = owner
        self.topology = topology
        self.epoch = 0
        self._writers: dict[str, TopicWriter] = {}
        self.budget = BadRecordBudget(budget, owner.partition("/")[2] or owner)
        self.on_fill = on_fill
        self.digest = QuarantineDigest(LOG_INTERVAL)
        self.on_outage = on_outage
        """Told while Kafka is out (its writers wait it out) and when it is back (None)."""

    def start(self, epoch: int) -> None:
        """A new incarnation: what the old one buffered is dropped (a replay brings back
        what was not committed)."""
        self.close()
        self.epoch = epoch
        self.budget.restart()

    def write(self, letters: Iterable[DeadLetter]) -> None:
        """Buffer ``letters`` for the commit that covers their origins (those an earlier
        incarnation committed are dropped)."""
        for letter in letters:
            m = letter.message
            if letter.stage == LATE_STAGE:  # routed, not a bad record: never halts
                self._late_topics.add(letter.topic)
                self._writer(letter.topic).add([(m.origin, letter)])
                continue
            if self.on_error == "fail":
                raise TopologyHalt(halt_reason_of(letter.node, letter.stage,
                                                  letter.message.origin, letter.error))
            self.log_quarantined(letter.node, letter.stage, letter.error, m.origin)
            self._writer(letter.topic).add([(m.origin, letter)])

    def log_quarantined(self, node: str, stage: str, error: str, origin: Origin,
                        what: str = "the record") -> None:
        """Log a quarantined record, through the digest."""
        for line in self.digest.add(node, stage, error, origin, time.monotonic(), what):
            log.warning("%s", line)

    def tick(self) -> None:
        """Log the digest's summaries that are due."""
        for line in self.digest.due(time.monotonic()):
            log.warning("%s", line)

    def count(self, through: int, bad: Iterable[tuple[DeadLetter, int]] = ()) -> None:
        """Count the records up to position ``through`` against the budget (see
        :mod:`hailstorm.bad_records`); ``bad`` are the dead letters written for them with
        their positions. Raises :class:`~hailstorm.halt.TopologyHalt` past the budget."""
        budget = self.budget
        if budget.policy is None:
            return
        failures = sorted(((d.node, position, d.stage, d.error, d.message.origin)
                           for d, position in bad if d.stage != LATE_STAGE),
                          key=lambda f: f[1])
        reason = budget.observe(through, failures)
        if self.on_fill is not None and budget.windows:
            fill = budget.fullest()
            if fill is not None:
                self.on_fill(fill)
        if reason is not None:
            self.tick()
            raise TopologyHalt(reason)

    def _writer(self, topic: str) -> TopicWriter:
        writer = self._writers.get(topic)
        if writer is None:
            from hailstorm.sinks.topic import TopicWriter

            writer = TopicWriter.open(
                self.kafka, DeadLetterTopic(topic), f"{self.owner}/{topic}", self.epoch,
                progress=dead_letter_progress_topic(self.topology), dead_letter_topic=topic,
                node=self.owner, io_timeout=self.io_timeout, logger=log, retry=WAIT_OUT,
                on_outage=self.on_outage)
            self._writers[topic] = writer
        return writer

    @property
    def pending(self) -> int:
        """Dead letters buffered and not committed yet."""
        return sum(w.pending for w in self._writers.values())

    def commit_through(self, clock: Mapping[Partition, int]) -> None:
        """Commit every buffered dead letter with an origin at or below ``clock``, with the
        progress, in one transaction per dead-letter topic. Call once every dead letter at
        or below ``clock`` was given to :meth:`write`, before anything that lets a round
        commit past ``clock`` leaves the processor."""
        target: Clock = dict(clock)
        for topic, writer in self._writers.items():
            if writer.holds_through(target):  # (else nothing to write: no transaction)
                written = writer.rows_written
                writer.commit_through(target)
                counter = self.late_counter if topic in self._late_topics else self.counter
                if counter is not None:
                    counter.inc(writer.rows_written - written)
                failpoint("dead_letters.after_commit")  # tests: die before the round
        self.tick()

    def close(self) -> None:
        """Drop the writers; uncommitted dead letters come back with a replay."""
        for line in self.digest.drain(time.monotonic()):
            log.warning("%s", line)
        writers, self._writers = self._writers, {}
        for writer in writers.values():
            try:
                writer.close()
            except Exception as exc:  # closing anyway
                log.debug("closing the dead-letter writer: %s", exc)
