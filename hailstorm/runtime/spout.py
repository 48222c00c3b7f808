"""The spout shell: one Kafka partition around a :class:`~hailstorm.processors.SpoutCore`,
rewound, paused and resumed by the master state; CLOCK, DATA and WATERMARK frames to every
downstream instance, dead letters committed before a round's pause is reported."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from hailstorm.halt import TopologyHalt
from hailstorm.processors import Contributions, Router, SpoutCore, SpoutOutput
from hailstorm.processors.backfill import (
    BackfillPace,
    joinable,
    new_dead_letters,
    within_live,
)
from hailstorm.processors.spout_core import Backlog
from hailstorm.protocol.catchup import loaded_by_node
from hailstorm.protocol.clock import NOTHING, Clock, Partition, partition_key
from hailstorm.protocol.layout import (
    Flowing,
    ProcessorState,
    Replaying,
    Restarting,
    SpoutsPaused,
    SpoutsRewind,
)
from hailstorm.protocol.wire import ClockMarker, DataBatch, Frame, Watermark
from hailstorm.runtime.data_plane import DataPlaneError
from hailstorm.runtime.processor import POLL, RunState, Shell
from hailstorm.runtime.spout_replay import go_on_without, replay, replayed
from hailstorm.topology import SpoutSpec

__all__ = ["SpoutShell"]

log = logging.getLogger("hailstorm.processor")

WATERMARK_INTERVAL = 0.2
"""Longest time between two watermarks a spout sends (also when idle or paused)."""
CONSUME_BATCH = 10_000
"""Kafka messages per consume call (a fetch this full means the spout reads a backlog)."""
CONSUME_WAIT = 0.01
"""The longest a consume call waits (seconds): for :data:`CONSUME_BATCH` messages while the
spout reads a backlog, for the next fetch's while it keeps up with a stream (those it takes
as soon as they arrive: :meth:`SpoutShell.fetch`). An idle spout looks at the master state
this often."""
LOG_START_RETRIES = 3
"""How often a spout starts again from a log start that retention moved before its first
fetch (then the lost offsets stop the topology as any others)."""
SPOUT_CHUNK = 500
"""Messages a spout decodes at a time: between two chunks it looks at the master state, so
that a snapshot round's pause waits for one chunk (or one flush under way), not a whole
consume batch (what it staged before the pause is sent after the round's clock)."""
DEAD_LETTER_INTERVAL = 0.5
"""A spout with dead letters commits them at least this often (seconds), besides before
it reports a round's pause."""
PROBE_INTERVAL = 5.0
"""Seconds between two questions to Kafka while the spout's client says it is out (it
waits for Kafka, reported, until one is answered or a message arrives)."""
PROBE_TIMEOUT = 1.0
"""Longest a spout waits for that answer (its main loop waits meanwhile)."""


class SpoutShell(Shell):
    """One Kafka partition: rewound, paused and resumed by the master state."""

    def setup(self) -> None:
        from hailstorm.kafka import consumer
        from hailstorm.outages import OutageWatch

        spec = self.topology.node(self.id.name)
        assert isinstance(spec, SpoutSpec) and self.id.partition is not None
        self.spec = spec
        self.partition: Partition = self.id.partition
        self.index = self.table.index(self.partition)
        self.router = Router(self.topology.downstream_of(spec.name))
        self.core: SpoutCore | None = None
        self.marks_rounds = not any(other.topic == spec.topic and other.name != spec.name
                                    for other in self.topology.spouts)
        """Barrier rounds are marked in the stream, not paused for, unless another spout
        reads this topic too: a round's clock then holds the furthest of their positions,
        which only a pause makes the other spout's part too."""
        self.started = False
        # The end-of-partition events tell a spout it caught up with a backlog.
        self.consumer = consumer(self.assignment.kafka, **{"enable.partition.eof": True},
                                 error_cb=self._on_client_error)
        self.kafka_watch = OutageWatch(f"Kafka at {self.assignment.kafka}")
        self._kafka_suspect: str | None = None
        """The last outage error the client reported, until a probe says whether Kafka
        answers (librdkafka reconnects by itself; a wait is reported only once it fails)."""
        self._probed = 0.0
        self.backlog = Backlog()
        self.read_full = True
        """The last consume call came back full: the spout reads a backlog (see
        :meth:`fetch`). It starts as if it did."""
        self.flowing_reported: tuple[int, ProcessorState] | None = None
        """The epoch of the Flowing state followed and the state last reported in it."""
        self._last_watermark = 0.0
        self._last_transient = 0.0
        self._dead_letters_committed = 0.0
        self.from_log_start = False
        """Reading a partition no committed round has seen from its log start."""
        self.committed_offset: int | None = None
        """The offset the committed round includes in this partition (None: unseen)."""
        self.log_start_retries = 0
        self.back: SpoutCore | None = None
        """The backfill cursor's core while nodes catch up and it is behind the live one."""
        self.back_consumer: Any = None
        self.back_receivers: frozenset[str] = frozenset()
        """Downstream instances of nodes catching up (fed by the backfill cursor until it
        joins the live one)."""
        self.back_clock: Clock | None = None
        """The clock of the round being resumed as the nodes catching up see it."""
        self.pace = BackfillPace()
        self.replay: tuple[int, tuple[str, ...]] | None = None
        """A local recovery's replay under way: its epoch and the instances replayed to
        (the backfill cursor's receivers until it joins the live one)."""

    def shutdown(self) -> None:
        for consumer in (getattr(self, "consumer", None), getattr(self, "back_consumer", None)):
            if consumer is not None:
                with contextlib.suppress(Exception):
                    consumer.close()
        super().shutdown()

    def on_initialize(self, epoch: int) -> None:
        self.core = SpoutCore(self.spec, self.partition[1],
                              self.topology.downstream_of(self.spec.name),
                              quarantine_topic=self.topology.dead_letter_topic)
        self.report(ProcessorState.READY, epoch)

    def on_state(self, state: RunState) -> None:
        from confluent_kafka import TopicPartition

        core = self.core
        assert core is not None
        p = self.partition
        if isinstance(state, SpoutsRewind):
            assert self.coord is not None
            committed = self.coord.committed()  # what bolts with a snapshot loaded
            kept = self.kept_stream_times(state.clock.get(p, NOTHING))
            seek = core.start(state.clock, committed.clock if committed is not None else None,
                              kept)
            # A partition no committed round has seen (a first start, or a partition added
            # since) is read from where its log starts: retention may have deleted offset 0
            # long ago, and that is no gap for this topology. Otherwise the exact offset,
            # also for a partition committed as empty (-1): a record it missed is an error.
            # (Re-reading for lost stream times from the log start is no gap either.)
            unseen = committed is None or p not in committed.clock
            self.committed_offset = None if committed is None else committed.clock.get(p)
            rebuilding = kept is not None and kept[0] < core.position
            self.from_log_start = (unseen or rebuilding) and seek == NOTHING + 1
            start = self.log_start() if self.from_log_start else seek
            self.consumer.assign([TopicPartition(p[0], p[1], start)])
            self.read_full = True  # what it reads from there may well be a backlog
            if committed is not None:  # a recovery's replay: its round is due once read
                self.backlog.rewound()
            self._rewind_backfill(state, committed)
            self.started = True
            self._send_watermarks()
            self.report(ProcessorState.REWOUND, state.epoch, position={p: core.position})
            log.info("rewound to %d (reading from %d)", core.position, seek)
        elif not self.started:
            raise DataPlaneError(f"{type(state).__name__} before SpoutsRewind in this run")
        elif isinstance(state, SpoutsPaused):
            back = None
            if state.barrier and self.marks_rounds and not state.catching_up \
                    and self.back is None and not core.paused:  # mark it and read on
                position, part = core.cut(state.epoch)
                self.send_output(SpoutOutput(part, watermark=core.watermark()))
                self.metrics.rounds("marked").inc()
            else:
                position = core.pause()
                back = None if self.back is None else {p: self.back.pause()}
                self.metrics.rounds("paused").inc()
            self.backlog.paused()
            self.flowing_reported = None
            self._commit_dead_letters()  # the round's clock may include their records
            self._keep_stream_times()  # before the round can commit at this position
            self.report(ProcessorState.PAUSED, state.epoch, position={p: position},
                        backfill=back)
        elif isinstance(state, Flowing):
            self.back_clock = state.backfill if state.clock is not None else None
            out = core.resume(state.epoch, state.clock) if state.clock is not None \
                else core.resume()
            self.send_output(out)  # what was held or staged over the pause
            self.metrics.messages_out.inc(out.sent)
            if self.back is not None:
                self._pace_backfill(state)
                self.send_backfill(self.back.resume(state.epoch, self.back_clock)
                                    if self.back_clock is not None else self.back.resume())
            # Reported once per epoch and backlog state: the round's commit (Flowing(e, None)
            # after Flowing(e, C)) changes neither, and a report per spout and round more
            # cost ZooKeeper a write and the negotiator a wake-up and its reads.
            self.report_flowing(state.epoch)
        elif isinstance(state, Restarting):
            go_on_without(self, state)
        elif isinstance(state, Replaying):
            replay(self, state)

    def _rewind_backfill(self, state: SpoutsRewind, committed: Any) -> None:
        """Open the backfill cursor when nodes downstream catch up and it is behind the
        live one here (else the live cursor serves them from the start)."""
        from confluent_kafka import TopicPartition

        from hailstorm.kafka import consumer

        assert self.core is not None
        p = self.partition
        downstream = self.topology.downstream_of(self.spec.name)
        catching = [n for n in downstream if n.name in state.catching_up]
        self.back_receivers = frozenset(
            r for (name, _i), r in self.downstream_ids.items() if name in state.catching_up)
        self.close_backfill()
        if not catching or state.backfill is None:
            return
        start = state.backfill.get(p, NOTHING)
        if start >= self.core.position:
            return
        self.back = SpoutCore(self.spec, p[1], catching,
                              quarantine_topic=self.topology.dead_letter_topic)
        seek = self.back.start(
            state.backfill, None, (NOTHING, {}) if self.back.stream_times else None,
            loaded_by_bolt=None if committed is None else loaded_by_node(
                [n.name for n in catching], committed.clock, committed.clocks,
                committed.bolts_held()))
        self.back_consumer = consumer(self.assignment.kafka)
        self.back_consumer.assign([TopicPartition(p[0], p[1], seek)])
        log.info("backfill for %s: reading from %d up to the live cursor at %d",
                 ", ".join(sorted(n.name for n in catching)), seek, self.core.position)

    def close_backfill(self) -> None:
        """Stop the backfill cursor (it joined the live one, or its work is dropped)."""
        self.back = None
        if self.back_consumer is not None:
            with contextlib.suppress(Exception):
                self.back_consumer.close()
            self.back_consumer = None

    def _pace_backfill(self, state: Flowing) -> None:
        """A round's clock: a new budget for the backfill; a commit: judge how long the
        round took."""
        assert self.coord is not None
        if state.clock is not None:
            self.pace.round_started()
            return
        committed = self.coord.committed()
        if committed is not None and committed.epoch == state.epoch:
            self.pace.round_committed(committed.epoch, committed.snapshot_s)
            log.debug("backfill budget %d records a round", self.pace.budget)

    def _read_backfill(self) -> None:
        """One bounded read of the backfill cursor, never beyond the live one; the cursors
        join once it read everything up to the live position."""
        from hailstorm.kafka import consumer_error_kind

        back, core = self.back, self.core
        assert back is not None and core is not None and self.back_consumer is not None
        allowed = self.pace.allowed()
        if back.paused or not allowed:
            return
        offsets: list[int] = []
        values: list[bytes | None] = []
        for message in self.back_consumer.consume(allowed, timeout=POLL / 10):
            error = message.error()
            if error is not None:
                if consumer_error_kind(error) == "lost":
                    raise TopologyHalt(
                        f"the backfill of {', '.join(sorted(self.back_receivers))} needs "
                        f"{partition_key(self.partition)} from offset {back.next_offset}, "
                        f"which retention deleted: declare start='earliest' on the bolt")
                continue
            if message.offset() is not None:
                offsets.append(message.offset())
                values.append(message.value())
        kept, kept_values, reached = within_live(offsets, values, core.position)
        self.pace.read(len(offsets))
        if kept:
            for start in range(0, len(kept), SPOUT_CHUNK):
                if not self._backfill_goes_on(back):
                    return
                back.stage(kept[start:start + SPOUT_CHUNK], kept_values[start:start + SPOUT_CHUNK])
                if not self._backfill_goes_on(back):
                    return
                self.send_backfill(back.flush(preempt=self._pausing))
        if not self._backfill_goes_on(back):
            return
        if joinable(back, core, reached):
            log.info("backfill joined the live cursor at offset %d", core.position)
            self.close_backfill()
            if self.replay is not None:
                replayed(self)
        elif reached:  # read beyond the live position: read it again later
            from confluent_kafka import TopicPartition

            self.back_consumer.assign([TopicPartition(*self.partition, back.next_offset)])

    def _backfill_goes_on(self, back: SpoutCore) -> bool:
        """Act on the master state, and say whether the backfill cursor ``back`` still
        reads (a rewind or a local recovery may have dropped its work: what it staged then
        goes nowhere, its dead letters included)."""
        self.follow_master()
        return self.back is back

    def send_backfill(self, out: SpoutOutput) -> None:
        """The backfill cursor's output to the nodes catching up (its dead letters but
        those the live cursor quarantined before), or to the instances a local recovery
        replays to (none of its dead letters: the live cursor, which kept routing for
        their whole node, wrote every one of them)."""
        out.dead_letters = [] if self.replay is not None else \
            new_dead_letters(out.dead_letters, self.spec.name)
        self.send_output(out, backfill=True)
        self.metrics.messages_out.inc(out.sent)

    def _send_watermarks(self) -> None:
        """Each cursor's watermark to the instances it feeds."""
        assert self.core is not None
        self.send_output(SpoutOutput(None, watermark=self.core.watermark()))
        if self.back is not None:
            self.send_output(SpoutOutput(None, watermark=self.back.watermark()), backfill=True)

    def report_flowing(self, epoch: int) -> None:
        """Report the backlog's state in the Flowing state of ``epoch``, when it changed."""
        assert self.core is not None
        if self.flowing_reported != (epoch, self.backlog.state):
            self.flowing_reported = (epoch, self.backlog.state)
            self.report(self.backlog.state, epoch, position={self.partition: self.core.position})

    def kept_stream_times(self, position: int) -> tuple[int, dict[str, Any]] | None:
        """For bolts declaring ``late=``: the stream times kept at the greatest position
        at or below ``position`` (``(-1, {})`` when none is: the spout re-reads the
        partition from its log start to rebuild them); None without such bolts."""
        assert self.core is not None and self.coord is not None
        if not self.core.stream_times:
            return None
        if position == NOTHING:
            return NOTHING, {}
        kept = self.coord.records.stream_times_at_or_below(str(self.id), position)
        if kept is None or not self.core.stream_times.covers(kept[1]):
            log.warning("no stream times kept at or below offset %d for every bolt routing "
                        "late data: re-reading %s from its log start to rebuild them "
                        "(late-data decisions for records retention deleted may differ)",
                        position, partition_key(self.partition))
            return NOTHING, {}
        if kept[0] < position:
            log.info("re-reading offsets %d..%d to rebuild the stream times", kept[0] + 1,
                     position)
        return kept

    def _keep_stream_times(self) -> None:
        """Keep the stream times at the paused position (a rewind there needs them), and
        drop those older than the previous committed round's."""
        assert self.core is not None and self.coord is not None
        if not self.core.stream_times:
            return
        position, times = self.core.observed
        if position == NOTHING:
            return
        records, spout = self.coord.records, str(self.id)
        records.write_stream_times(spout, position, times)
        committed = self.coord.committed()
        if committed is not None:
            oldest = committed.previous if committed.previous is not None else committed
            records.trim_stream_times(spout, oldest.clock.get(self.partition, NOTHING))

    def log_start(self) -> int:
        """The partition's first offset, asked of the broker. An explicit offset, not
        ``OFFSET_BEGINNING``: librdkafka resolves a logical offset on its offset-query
        timer, which held back a spout's first fetch by 0.5 to 1.5 s. While Kafka is out the
        spout waits for it (reported); other errors read from the beginning."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        from hailstorm.kafka import waiting_out

        try:
            low, _high = waiting_out(lambda: self.consumer.get_watermark_offsets(
                TopicPartition(*self.partition),
                timeout=min(self.assignment.io_timeout, 5 * PROBE_TIMEOUT)),
                self.assignment.kafka, self.report_outage)
            return int(low)
        except KafkaException as exc:
            log.warning("log start of %s unknown (%s): reading from the beginning",
                        partition_key(self.partition), exc)
            return OFFSET_BEGINNING

    def _watermark(self, marks: Mapping[Partition, int]) -> Watermark:
        assert self.joined is not None
        self._last_watermark = time.monotonic()
        return Watermark(self.joined, self.table.to_wire(marks))

    def send_output(self, out: SpoutOutput, backfill: bool = False) -> None:
        """CLOCK (if any), this batch's part, then the watermark, to every destination the
        cursor feeds: the backfill cursor's to the nodes catching up, the live one's to the
        others (and to those too once the backfill joined it, with their round's clock)."""
        connections = self.connections()
        ids = self.downstream_ids
        joined = self.back is None
        per_receiver: dict[str, list[Frame]] = {
            r: [] for r in connections
            if r not in self.detached
            and ((r in self.back_receivers) == backfill or (joined and not backfill))}
        if out.clock is not None:
            marker = ClockMarker(out.clock.epoch, self.table.to_wire(out.clock.clock),
                                 out.clock.partial)
            back = marker if self.back_clock is None else \
                ClockMarker(out.clock.epoch, self.table.to_wire(self.back_clock))
            for receiver, frames in per_receiver.items():
                frames.append(back if receiver in self.back_receivers else marker)
        for dest, part in out.batches.items():  # the core routed; re-key by wire index
            if ids[dest] not in per_receiver:
                continue  # a node catching up: the backfill cursor feeds it
            partitions = [self.index] * len(part)
            per_receiver[ids[dest]].append(
                DataBatch.of(partitions, part.offsets, part.tuples, part.keys, part.values)
                if isinstance(part, Contributions)
                else DataBatch.of(partitions, part.offsets, part.tuples))
        watermark = self._watermark(out.watermark)
        for receiver, frames in per_receiver.items():
            frames.append(watermark)
            try:
                connections[receiver].send(frames)
            except DataPlaneError as exc:
                if not self.went_on_without(exc):  # its next incarnation gets a replay
                    raise
        if out.dead_letters:
            self.dead_letters.write(out.dead_letters)
        through = out.watermark.get(self.partition)
        if through is not None and not backfill:  # the budget counts offsets (one a record)
            self.dead_letters.count(through, ((d, d.message.offset) for d in out.dead_letters))

    def _on_consumer_error(self, error: Any, needed: int) -> bool:
        """Halt on lost offsets or refused credentials, fail on a fatal client error, and
        let librdkafka recover from the rest (a broker restarting, a leader moving).
        True for the partition's end (no error)."""
        from confluent_kafka import KafkaException, TopicPartition

        from hailstorm.kafka import consumer_error_kind, lost_offsets_message

        kind = consumer_error_kind(error)
        if kind == "eof":
            return True
        topic, partition = self.partition
        if kind == "lost" and self.from_log_start and needed == NOTHING + 1 \
                and self.log_start_retries < LOG_START_RETRIES:
            # Nothing read yet from where the log started: retention moved its start
            # between the query and the fetch. Start again from the new one.
            self.log_start_retries += 1
            self.consumer.assign([TopicPartition(topic, partition, self.log_start())])
            return False
        if kind == "lost":
            low: int | None
            high: int | None
            try:
                low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10)
            except KafkaException:
                low = high = None
            raise TopologyHalt(lost_offsets_message(topic, partition, needed, low, high,
                                                    self.committed_offset))
        if kind == "auth":
            raise TopologyHalt(f"Kafka refused the spout's credentials: {error.str()}")
        if kind == "fatal":
            raise KafkaException(error)
        from hailstorm.kafka import is_kafka_outage

        if is_kafka_outage(error):  # probed: a wait is reported while Kafka is out
            self._kafka_suspect = str(error.str())
        now = time.monotonic()
        if now - self._last_transient >= 10:
            self._last_transient = now
            log.warning("kafka (recovering by itself): %s", error.str())
        return False

    def _on_client_error(self, error: Any) -> None:
        """librdkafka's client-level errors (served on the main thread, in ``consume``): an
        outage makes the spout ask Kafka itself (:meth:`_probe_kafka`)."""
        from hailstorm.kafka import is_kafka_outage, log_client_error

        if is_kafka_outage(error):
            self._kafka_suspect = str(error.str())
        else:
            log_client_error(error)

    def _probe_kafka(self) -> None:
        """While the client reports Kafka out: ask for the partition's end every
        :data:`PROBE_INTERVAL` s. No answer: the spout waits for Kafka (reported, so that
        nothing times out on it); an answer ends the wait."""
        from confluent_kafka import KafkaException, TopicPartition

        if self._kafka_suspect is None or time.monotonic() - self._probed < PROBE_INTERVAL:
            return
        self._probed = time.monotonic()
        try:
            self.consumer.get_watermark_offsets(TopicPartition(*self.partition),
                                                timeout=PROBE_TIMEOUT, cached=False)
        except KafkaException as exc:
            error = exc.args[0].str() if exc.args else str(exc)
            self.report_outage(self.kafka_watch.failed(time.time(),
                                                       f"{self._kafka_suspect}; {error}"))
            return
        self._kafka_answered()

    def _kafka_answered(self) -> None:
        """A message, the partition's end or a probe came back: Kafka is not out."""
        self._kafka_suspect = None
        if self.kafka_watch.answered() is not None:
            self.report_outage(None)

    def step(self) -> None:
        assert self.coord is not None
        self._probe_kafka()
        core = self.core
        if core is None or not self.started or core.paused:
            if core is not None and self.started and \
                    time.monotonic() - self._last_watermark >= WATERMARK_INTERVAL:
                self._send_watermarks()
            self.coord.changed.wait(POLL / 2)
            return
        messages = self.fetch()
        offsets: list[int] = []
        values: list[bytes | None] = []
        at_end = False
        for message in messages:
            error = message.error()
            if error is not None:
                at_end = self._on_consumer_error(error, core.next_offset) or at_end
                continue
            offset = message.offset()
            if offset is not None:
                offsets.append(offset)
                values.append(message.value())
        if offsets:
            self.dead_letters.budget.begin(offsets[0])  # the first record it counts
            started = time.perf_counter()
            sent = 0
            # Full and not at the partition's end: a backlog waits (the Backlog reads at_end
            # first too, and a spout that caught up sends what it staged).
            full = len(messages) >= CONSUME_BATCH and not at_end
            for start in range(0, len(offsets), SPOUT_CHUNK):
                self.follow_master()  # a round may be pausing: what follows is held back
                core.stage(offsets[start:start + SPOUT_CHUNK], values[start:start + SPOUT_CHUNK])
                if core.flush_due(fetch_ended=start + SPOUT_CHUNK >= len(offsets),
                                  fetch_full=full):
                    sent += self._flush()
            self.follow_master()  # a pause that preempted the last flush
            self.metrics.batch(started, len(offsets), sent)
        elif core.has_staged:  # a backlog staged for combining ended with an empty fetch
            started = time.perf_counter()
            self.metrics.batch(started, 0, self._flush())
        if time.monotonic() - self._last_watermark >= WATERMARK_INTERVAL:
            self._send_watermarks()  # idle, or staging a backlog: the position stands
        if self.back is not None and not core.paused:
            self._read_backfill()
        self.read_full = len(messages) >= CONSUME_BATCH
        self.backlog.fetched(full=self.read_full, at_end=at_end)
        if (offsets or at_end) and (self._kafka_suspect or self.kafka_watch.waiting):
            self._kafka_answered()
        if self.flowing_reported is not None and not core.paused:
            self.report_flowing(self.flowing_reported[0])
        if self.dead_letters.pending and \
                time.monotonic() - self._dead_letters_committed >= DEAD_LETTER_INTERVAL:
            self._commit_dead_letters()

    def fetch(self) -> list[Any]:
        """The live cursor's next messages (and events). Reading a backlog (the last call
        came back full): up to :data:`CONSUME_BATCH`, waiting at most :data:`CONSUME_WAIT`
        for them. Keeping up with a stream: a fetch's messages as soon as they arrive (the
        client queues a broker's answer whole), so that they do not wait for the end of a
        call that waits for more; nothing after :data:`CONSUME_WAIT`. While a backfill
        reads, whatever is there, without waiting."""
        if self.back is not None:
            return self.consumer.consume(CONSUME_BATCH, timeout=0)
        if self.read_full:
            return self.consumer.consume(CONSUME_BATCH, timeout=CONSUME_WAIT)
        first = self.consumer.consume(1, timeout=CONSUME_WAIT)
        if not first:
            return first
        return first + self.consumer.consume(CONSUME_BATCH - 1, timeout=0)

    def _flush(self) -> int:
        """Route and send what the core staged (a round's pause may preempt it: then it
        stays staged); returns how many tuples or contributions went out."""
        assert self.core is not None
        self.follow_master()  # paused, the core keeps what it staged till after
        out = self.core.flush(preempt=self._pausing)
        self.send_output(out)
        return out.sent

    def _pausing(self) -> bool:
        """Is a round pausing the spouts (a ``SpoutsPaused`` this spout has not answered)?
        Asked while a flush routes; :meth:`follow_master` then answers it."""
        assert self.coord is not None
        if not self.coord.changed.is_set():
            return False
        try:
            record = self.coord.master()
        finally:
            self.coord.changed.set()  # for follow_master, which acts on it (or fails)
        state = record.state if record is not None else None
        return (isinstance(state, SpoutsPaused) and self.joined is not None
                and state.epoch >= self.joined and not self.answered(state))

    def _commit_dead_letters(self) -> None:
        """Commit the dead letters of every message read so far (through the position)."""
        assert self.core is not None
        self._dead_letters_committed = time.monotonic()
        self.dead_letters.commit_through({self.partition: self.core.position})
