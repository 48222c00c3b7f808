"""What word count counts when the log is not a plain append-only list of records, on the real
broker (Apache Kafka, KRaft) of the session stack:

* transactions: only committed records count, exactly once, also when a killed processor
  makes the topology rewind to a clock followed by a commit marker or aborted records;
* a compacted topic: exactly the records the log cleaner left (offsets with gaps);
* lost offsets (``delete_records`` past the committed clock, a topic re-created shorter):
  the driver stops with one clear line and nothing is skipped;
* clients no one here wrote: kcat with gzip/lz4/zstd/snappy batches, and kafka-python with
  keys, headers, tombstones and undecodable values (those two go to the dead-letter topic).

Every test compares exactly (equality) with :func:`hailstorm.model.run_model` over the
records the log really holds, or with a hand-computed expectation.
"""

from __future__ import annotations

import contextlib
import shutil
import struct
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from hailstorm import kafka
from hailstorm.dev.harness import (
    StackAddresses,
    TopologyRun,
    compare_with_model,
    wait_for,
    wordcount_lines,
)
from hailstorm.dev.services import StackState
from hailstorm.kafka import Record
from hailstorm.model import Message, ModelResult, run_model
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import CommittedRecord

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "topologies" / "wordcount.py"
PARTITIONS = 2


# --------------------------------------------------------------------------- helpers


def unique_topic(kind: str) -> str:
    return f"ks-{kind}-{uuid.uuid4().hex[:8]}"


def dead_letter_topic(topic: str) -> str:
    return f"{topic}.dead-letter"


def wordcount_module(tmp_path: Path, topic: str) -> Path:
    """topologies/wordcount.py itself, reading ``topic`` and dead-lettering to
    ``<topic>.dead-letter``, so that every test has topics of its own."""
    text = WORDCOUNT.read_text()
    for old in ('topic="words"', 'Topology("wordcount")'):
        assert text.count(old) == 1, f"topologies/wordcount.py changed: expected one {old}"
    text = text.replace('topic="words"', f'topic="{topic}"').replace(
        'Topology("wordcount")',
        f'Topology("wordcount", dead_letter="{dead_letter_topic(topic)}")')
    module = tmp_path / f"wordcount_{uuid.uuid4().hex[:8]}.py"
    module.write_text(text)
    return module


def create_topics(bootstrap: str, topic: str, **config: str) -> None:
    kafka.create_topic(bootstrap, topic, PARTITIONS, config=config)
    kafka.create_topic(bootstrap, dead_letter_topic(topic), 1)


@contextlib.contextmanager
def deployed(stack: StackAddresses, module: Path, log_dir: Path,
             **options: Any) -> Iterator[TopologyRun]:
    """A TopologyRun (one negotiator) whose logs are printed when the test fails."""
    options.setdefault("negotiators", 1)
    with TopologyRun(stack, module, log_dir=log_dir, **options) as run:
        try:
            yield run
        finally:
            run.stop()
            for label, text in run.logs().items():
                print(f"--- {label}.log (tail)\n{text[-5000:]}")


def in_log_order(messages: Iterable[Message]) -> list[Message]:
    return sorted(messages, key=lambda m: (m.topic, m.partition, m.offset))


def last_offsets(messages: Iterable[Message]) -> dict[Partition, int]:
    """The highest offset of every partition ``messages`` has."""
    last: dict[Partition, int] = {}
    for m in messages:
        last[m.source] = max(last.get(m.source, -1), m.offset)
    return last


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(log start, log end) of a partition, as a read_committed consumer sees them (the
    end is the last stable offset: the log end once no transaction is open)."""
    consumer = kafka.consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()
    return int(low), int(high)


def read_all(bootstrap: str, topic: str, partition: int) -> list[Record]:
    """Every record a read_committed consumer gets from the partition (gaps skipped)."""
    low, high = watermarks(bootstrap, topic, partition)
    return list(kafka.read_range(bootstrap, topic, partition, low, high - 1, timeout=30))


def as_message(record: Record) -> Message:
    return Message(record.topic, record.partition, record.offset, record.value, record.key,
                   record.timestamp)


def assert_state_is_model(run: TopologyRun, committed: CommittedRecord,
                          messages: Iterable[Message]) -> ModelResult:
    """Every ``counts`` instance's committed snapshot and the ``word_counts`` table equal
    :func:`run_model` over ``messages`` exactly."""
    states = run.committed_bolt_states(committed)
    model = run_model(run.topology, in_log_order(messages))
    counts = states["counts"]
    assert all(clock == committed.clock for clock in counts.instance_clocks)
    assert counts.instances == model.instance_states("counts")
    assert counts.merged == model.bolt_state("counts")
    tables = run.sink_tables()
    assert tables["word_counts"] == model.table("word_counts")
    comparison = compare_with_model(model, states, tables)
    assert comparison.ok, comparison.first()
    return model


def assert_dead_letters_acknowledged(bootstrap: str, topic: str, model: ModelResult) -> None:
    """Right after a commit covering every rejected record, without waiting: a spout has
    its dead letters acknowledged before it reports a position for a round."""
    assert watermarks(bootstrap, dead_letter_topic(topic), 0)[1] >= len(model.dead_letters)


def read_dead_letters(bootstrap: str, topic: str, expected: int) -> dict[bytes, Record]:
    """The dead letters of ``topic`` by key (``<topic>:<partition>:<offset>`` of the source
    record; a replay after a restart may write one again, identical), once at least
    ``expected`` are there."""
    dead = dead_letter_topic(topic)
    wait_for(f"{expected} dead letters in {dead}",
             lambda: watermarks(bootstrap, dead, 0)[1] >= expected, 60)
    letters: dict[bytes, Record] = {}
    for record in read_all(bootstrap, dead, 0):
        assert record.key is not None
        if record.key in letters:  # a repeat must be the same letter
            first = letters[record.key]
            assert (first.value, first.headers) == (record.value, record.headers)
        letters[record.key] = record
    return letters


def assert_dead_letters_are_model(bootstrap: str, topic: str, model: ModelResult) -> None:
    """The dead-letter topic holds exactly the model's dead letters, with their origin,
    stage and error in the headers and the source record's value (None for a tombstone)."""
    want = {f"{d.message.topic}:{d.message.partition}:{d.message.offset}".encode(): d
            for d in model.dead_letters}
    got = read_dead_letters(bootstrap, topic, len(want))
    assert sorted(got) == sorted(want)
    for key, letter in got.items():
        expected = want[key]
        headers = letter.headers or {}
        assert letter.value == expected.message.value
        assert headers["hailstorm.topic"] == topic.encode()
        assert headers["hailstorm.partition"] == str(expected.message.partition).encode()
        assert headers["hailstorm.offset"] == str(expected.message.offset).encode()
        assert headers["hailstorm.node"] == b"lines"
        assert headers["hailstorm.stage"] == expected.stage.encode()
        assert headers["hailstorm.error"] == expected.error.encode()


# --------------------------------------------------------------------------- transactions


class Transactional:
    """A confluent-kafka transactional producer that records where every record landed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(kafka.client_settings(bootstrap, overrides={
            "transactional.id": f"hailstorm-test-{uuid.uuid4().hex}",
            "transaction.timeout.ms": 300_000,  # one stays open while the topology recovers
            "linger.ms": 5,
        }))
        self.producer.init_transactions(60)

    def begin(self, rows: Sequence[tuple[int, bytes]]) -> list[Message]:
        """Begin a transaction and write ``(partition, value)`` rows; returns them once every
        one is acknowledged (in the log, with an offset), the transaction still open."""
        delivered: list[Message] = []
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append(Message(self.topic, msg.partition(), msg.offset(), msg.value()))

        self.producer.begin_transaction()
        for partition, value in rows:
            self.producer.produce(self.topic, value=value, partition=partition,
                                  on_delivery=on_delivery)
        assert self.producer.flush(60) == 0
        assert not errors and len(delivered) == len(rows), errors[:3]
        return in_log_order(delivered)

    def end(self, *, commit: bool) -> None:
        """Write the commit (or abort) marker of the open transaction."""
        if commit:
            self.producer.commit_transaction(60)
        else:
            self.producer.abort_transaction(60)

    def transaction(self, rows: Sequence[tuple[int, bytes]], *, commit: bool) -> list[Message]:
        written = self.begin(rows)
        self.end(commit=commit)
        return written


def test_read_committed_counts_committed_transactions_once_across_a_rewind_at_a_marker(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """Committed, aborted and plain writes interleave; a spout is SIGKILLed while the
    committed clock is followed, on partition 0, by a commit marker (the rewind seeks
    exactly onto it) and, on partition 1, by the records of an aborted transaction; a
    transaction stays open while the topology recovers. Only committed records count,
    exactly once, and the committed clock never points at a marker or an aborted record."""
    stack = StackAddresses.from_env(stack_env)
    topic = unique_topic("txn")
    create_topics(stack.kafka, topic)
    source = iter(wordcount_lines(20_000, seed=11))

    def rows(*partitions: int, n: int = 300) -> list[tuple[int, bytes]]:
        return [(p, next(source)) for _ in range(n) for p in partitions]

    def on(partition: int, messages: Iterable[Message]) -> list[int]:
        return [m.offset for m in messages if m.partition == partition]

    committed: list[Message] = []
    aborted: list[Message] = []
    with deployed(stack, wordcount_module(tmp_path, topic), tmp_path / "logs") as run:
        run.start()
        run.wait_flowing(240)
        tx = Transactional(stack.kafka, topic)
        committed += tx.transaction(rows(0, 1), commit=True)              # A
        aborted += tx.transaction(rows(0, 1), commit=False)               # B
        c = tx.transaction(rows(0, 1), commit=True)                       # C
        committed += c
        d = tx.transaction(rows(0), commit=False)                         # D: partition 0
        aborted += d
        # Partition 1 ends with plain (non-transactional, idempotent) records.
        plain = [(1, next(source)) for _ in range(50)]
        start1 = watermarks(stack.kafka, topic, 1)[1]
        kafka.produce(stack.kafka, topic, [(p, None, v) for p, v in plain])
        committed += [Message(topic, 1, start1 + i, v) for i, (_p, v) in enumerate(plain)]
        target = last_offsets(committed)
        marker = max(on(0, c)) + 1
        assert min(on(0, d)) == marker + 1  # C's commit marker sits between C and D
        assert target[(topic, 0)] == marker - 1

        first = run.wait_committed(target, 180)
        # Markers and aborted records are never read: the clock is the last committed data.
        assert dict(first.clock) == target
        assert_state_is_model(run, first, committed)

        victim = f"spout:lines:{topic}:0"
        pid = int(run.processors()[victim].info["pid"])
        fault = run.kill_processor(pid=pid)
        # While the topology restarts at `target` (partition 0 reads from C's commit marker):
        e = tx.transaction(rows(0, 1), commit=False)                      # E: aborted
        aborted += e
        assert min(on(1, e)) == target[(topic, 1)] + 1  # partition 1 reads E's records first
        f = tx.begin(rows(0, 1))                                           # F: open for now
        wait_for("a new incarnation of the victim",
                 lambda: (r := run.processors().get(victim)) and int(r.info["pid"]) != pid,
                 180, run.alive)
        # The restarted run's Initialize, or a later state of it (it precedes the new
        # incarnation's registration).
        master = wait_for("the master of the restarted run",
                          lambda: (m := run.master()) and m.state.epoch > fault.epoch and m,
                          60, run.alive)
        recovered = wait_for(  # or a round of it skipped: it read nothing to commit
            "a commit of the restarted run",
            lambda: (m := run.committed()) and (m.epoch >= master.state.epoch
                                                or (m.confirmed_at or 0) >= master.entered_at)
            and m, 120, run.alive)
        # F is open: the last stable offset holds the spouts before it, E is skipped.
        assert dict(recovered.clock) == target
        tx.end(commit=True)
        committed += f
        committed += tx.transaction(rows(0), commit=True)                 # G: partition 0

        final = last_offsets(committed)
        done = run.wait_committed(final, 180)
        assert dict(done.clock) == final
        driver = run.log("driver")
        # The restarted spout sought exactly onto the commit marker.
        assert f"rewound to {marker - 1} (reading from {marker})" in driver
        last1 = target[(topic, 1)]
        assert f"rewound to {last1} (reading from {last1 + 1})" in driver
        assert_state_is_model(run, done, committed)

    assert len(aborted) == 600 + 300 + 600  # B, D, E
    # The expectation is what a read_committed consumer of the broker reads, nothing else.
    for p in range(PARTITIONS):
        assert [(r.offset, r.value) for r in read_all(stack.kafka, topic, p)] == [
            (m.offset, m.value) for m in in_log_order(committed) if m.partition == p]
    assert watermarks(stack.kafka, dead_letter_topic(topic), 0) == (0, 0)


# --------------------------------------------------------------------------- compaction


def test_compacted_topic_counts_exactly_the_records_the_cleaner_left(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """Keyed records overwritten in rounds (each round in a segment of its own) are
    compacted by the broker's log cleaner before the topology starts: it counts exactly the
    records still in the log (gaps in the offsets), and their tombstones are dead letters."""
    stack = StackAddresses.from_env(stack_env)
    topic = unique_topic("compact")
    create_topics(stack.kafka, topic, **{
        "cleanup.policy": "compact",
        "segment.ms": "100",            # a segment rolls on the first append after 100 ms
        "segment.bytes": "1048576",     # the broker's minimum
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    })
    source = iter(wordcount_lines(5_000, seed=21))
    keys = [f"user-{i}".encode() for i in range(40)]
    written: list[Message] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            written.append(Message(topic, msg.partition(), msg.offset(), msg.value(), msg.key()))

    out = kafka.producer(stack.kafka)
    rounds = 8
    for n in range(rounds):
        for i, key in enumerate(keys):
            # The last round deletes every tenth key: a tombstone survives compaction.
            value = None if n == rounds - 1 and i % 10 == 0 else next(source)
            out.produce(topic, key=key, value=value, partition=i % PARTITIONS,
                        on_delivery=on_delivery)
        assert out.flush(30) == 0
        time.sleep(0.4)  # the next round opens a new segment
    # Keys never written before open the active segment, which the cleaner leaves alone.
    for i in range(6):
        out.produce(topic, key=f"fresh-{i}".encode(), value=next(source),
                    partition=i % PARTITIONS, on_delivery=on_delivery)
    assert out.flush(30) == 0
    assert not errors and len(written) == rounds * len(keys) + 6
    # Fully compacted: the last record of every key (tombstones kept: delete.retention.ms).
    latest: dict[tuple[int, bytes | None], Message] = {}
    for m in in_log_order(written):
        latest[(m.partition, m.key)] = m
    survivors = in_log_order(latest.values())
    assert len(survivors) == len(keys) + 6

    def present() -> list[Message]:
        return [as_message(r) for p in range(PARTITIONS)
                for r in read_all(stack.kafka, topic, p)]

    wait_for("the log cleaner to compact every rolled segment",
             lambda: [(m.partition, m.offset) for m in present()]
             == [(m.partition, m.offset) for m in survivors], 120, poll=1.0)
    records = present()
    assert [(m.partition, m.offset, m.key, m.value) for m in records] == [
        (m.partition, m.offset, m.key, m.value) for m in survivors]
    for p in range(PARTITIONS):  # the log really has gaps, from offset 0 on
        offsets = [m.offset for m in records if m.partition == p]
        assert offsets[-1] + 1 == watermarks(stack.kafka, topic, p)[1]
        assert len(offsets) < offsets[-1] + 1 and 0 not in offsets

    with deployed(stack, wordcount_module(tmp_path, topic), tmp_path / "logs") as run:
        run.start()
        target = last_offsets(records)
        committed = run.wait_committed(target, 240)
        assert dict(committed.clock) == target
        model = assert_state_is_model(run, committed, records)
        assert_dead_letters_acknowledged(stack.kafka, topic, model)
    assert len(model.dead_letters) == 4
    assert all(d.message.value is None and d.stage == "decode" for d in model.dead_letters)
    assert_dead_letters_are_model(stack.kafka, topic, model)
    assert present() == records  # nothing moved underneath the run


# --------------------------------------------------------------------------- lost offsets


@pytest.mark.parametrize("loss", ["delete_records", "recreated"])
def test_lost_offsets_stop_the_driver_with_one_clear_line_and_skip_nothing(
    stack_env: dict[str, str], tmp_path: Path, loss: str
) -> None:
    """A topology committed a round and was stopped; then the offsets its rewind needs on
    partition 1 disappear (``delete_records`` past the committed clock, or the topic deleted
    and re-created with fewer records). Started again, it never skips to what is there: the
    driver exits 1 with one ``error:`` line naming the topic, the partition, the offset
    needed and the log's start and end, and the committed state and table are unchanged."""
    stack = StackAddresses.from_env(stack_env)
    topic = unique_topic("lost")
    create_topics(stack.kafka, topic)
    module = wordcount_module(tmp_path, topic)
    lines = wordcount_lines(4_000, seed=31)
    kafka.produce(stack.kafka, topic, [(i % PARTITIONS, None, v) for i, v in enumerate(lines)])
    messages = [as_message(r) for p in range(PARTITIONS) for r in read_all(stack.kafka, topic, p)]
    assert [m.value for m in messages] == lines[0::2] + lines[1::2]

    with deployed(stack, module, tmp_path / "first") as first:
        first.start()
        target = last_offsets(messages)
        committed = first.wait_committed(target, 240)
        assert dict(committed.clock) == target
        assert_state_is_model(first, committed, messages)
        states = first.committed_bolt_states(committed)
        table = first.sink_tables()
    name, database = first.name, first.database

    clock = {p: committed.clock[(topic, p)] for p in range(PARTITIONS)}
    needed = clock[1] + 1
    if loss == "delete_records":
        kafka.produce(stack.kafka, topic, [(1, None, v) for v in wordcount_lines(20, seed=32)])
        admin = kafka.admin(stack.kafka)
        futures = admin.delete_records([TopicPartition(topic, 1, needed + 5)],
                                       request_timeout=30)
        for future in futures.values():
            future.result(30)
        start, end = needed + 5, needed + 20
    else:
        admin = kafka.admin(stack.kafka)
        admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
        wait_for(f"{topic} to be re-created",
                 lambda: _create_quietly(stack.kafka, topic), 60, poll=0.5)
        # Partition 0 exactly as long as before (nothing new to read there), partition 1
        # shorter than its committed clock.
        refill = wordcount_lines(clock[0] + 1 + clock[1] // 2, seed=33)
        kafka.produce(stack.kafka, topic,
                      [(0, None, v) for v in refill[:clock[0] + 1]]
                      + [(1, None, v) for v in refill[clock[0] + 1:]])
        start, end = 0, clock[1] // 2
        assert watermarks(stack.kafka, topic, 0) == (0, clock[0] + 1)
    assert watermarks(stack.kafka, topic, 1) == (start, end)

    with deployed(stack, module, tmp_path / "second", name=name, database=database) as second:
        second.start()
        driver = second.procs["driver"]
        wait_for("the driver to stop", lambda: driver.poll() is not None, 240, poll=0.5)
        assert driver.returncode == 1
        errors = [line for line in second.log("driver").splitlines()
                  if line.startswith("error:")]
        assert errors == [f"error: {kafka.lost_offsets_message(topic, 1, needed, start, end)}"]
        line = errors[0]
        assert f"topic {topic!r} partition 1" in line and f"from offset {needed}" in line
        assert f"(start {start}, end {end})" in line
        # The first halt stopped it: no stage was resubmitted to halt once more.
        assert second.log("negotiator-0").count("failed: TopologyHalt") == 1
        # Nothing was skipped: the committed round, its snapshots and the table are as
        # they were (a round committed meanwhile could only repeat the same clock).
        after = second.committed()
        assert after is not None and after.clock == committed.clock
        now = second.committed_bolt_states(after)
        assert now["counts"].instances == states["counts"].instances
        assert second.sink_tables() == table


def _create_quietly(bootstrap: str, topic: str) -> bool:
    """Create ``topic`` again; False while the broker still deletes the old one."""
    try:
        return kafka.create_topic(bootstrap, topic, PARTITIONS)
    except KafkaException:
        return False


# --------------------------------------------------------------------------- other clients

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
"""Compression codec ids of a record batch's attributes (the low three bits)."""


def batch_codecs(segment_dir: Path) -> dict[int, str]:
    """Base offset -> compression codec of every record batch in a partition's log segments
    (Kafka's on-disk batch format v2: baseOffset int64, batchLength int32, leaderEpoch
    int32, magic int8, crc int32, attributes int16)."""
    codecs: dict[int, str] = {}
    for segment in sorted(segment_dir.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 23 <= len(data):
            base, length = struct.unpack_from(">qi", data, position)
            if length <= 0 or position + 12 + length > len(data):
                break  # the tail of the active segment, still being written
            assert data[position + 16] == 2, f"{segment}: record batch magic {data[position + 16]}"
            (attributes,) = struct.unpack_from(">h", data, position + 21)
            codecs[base] = CODECS[attributes & 7]
            position += 12 + length
    return codecs


def kcat_produce(bootstrap: str, topic: str, partition: int, codec: str,
                 values: Sequence[bytes]) -> list[Message]:
    """Produce ``values`` (one per line) with kcat, compressed with ``codec``; returns them
    as the broker stored them (read back: kcat reports no offsets)."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: run scripts/bootstrap.sh (Debian package kcat)")
    start = watermarks(bootstrap, topic, partition)[1]
    subprocess.run(
        [kcat, "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-z", codec,
         "-X", "linger.ms=200", "-X", "batch.num.messages=100000"],
        input=b"".join(v + b"\n" for v in values), check=True, timeout=60,
        stdout=subprocess.DEVNULL)
    records = list(kafka.read_range(bootstrap, topic, partition, start,
                                    start + len(values) - 1, timeout=30))
    assert [(r.offset, r.value) for r in records] == [
        (start + i, v) for i, v in enumerate(values)]
    return [as_message(r) for r in records]


def test_kcat_batches_compressed_with_every_codec_count_exactly_once(
    stack_env: dict[str, str], dev_stack: StackState, tmp_path: Path
) -> None:
    """Debian's kcat (its own librdkafka) feeds a running word count with batches
    compressed with gzip, lz4, zstd and snappy, each with an undecodable line: every line is
    counted exactly once, the undecodable ones are dead letters."""
    stack = StackAddresses.from_env(stack_env)
    topic = unique_topic("kcat")
    create_topics(stack.kafka, topic)
    written: list[Message] = []
    with deployed(stack, wordcount_module(tmp_path, topic), tmp_path / "logs") as run:
        run.start()
        run.wait_flowing(240)
        for n, codec in enumerate(["gzip", "lz4", "zstd", "snappy"]):
            # kcat skips empty lines; each line is one record.
            lines = [v for v in wordcount_lines(1_500, seed=40 + n) if v]
            lines.insert(700, b"\xff\xfe " + codec.encode() + b" is not utf-8")
            written += kcat_produce(stack.kafka, topic, n % PARTITIONS, codec, lines)
        target = last_offsets(written)
        committed = run.wait_committed(target, 180)
        assert dict(committed.clock) == target
        model = assert_state_is_model(run, committed, written)
        assert_dead_letters_acknowledged(stack.kafka, topic, model)
    assert len(model.dead_letters) == 4
    assert_dead_letters_are_model(stack.kafka, topic, model)
    # The broker really stored batches of each codec (kcat may fall back to none for a
    # batch that does not shrink).
    data = Path(dev_stack.state_dir) / "kafka" / "node-1" / "data"
    stored = {p: set(batch_codecs(data / f"{topic}-{p}").values()) for p in range(PARTITIONS)}
    assert {"gzip", "zstd"} <= stored[0] and {"lz4", "snappy"} <= stored[1], stored


@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
def test_kafka_python_keys_headers_tombstones_and_undecodable_values(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """kafka-python (a pure-Python client) feeds a running word count with keyed records
    carrying headers, tombstones (value None), empty values and undecodable values:
    tombstones and undecodable values are dead letters (stage ``decode``), every other
    record is counted exactly once."""
    try:
        from kafka import KafkaProducer  # kafka-python; not hailstorm.kafka
    except ImportError:
        pytest.fail("kafka-python is not installed: pip install -e '.[test]'")
    stack = StackAddresses.from_env(stack_env)
    topic = unique_topic("pyclient")
    create_topics(stack.kafka, topic)
    lines = wordcount_lines(2_000, seed=50)
    values: list[bytes | None] = []
    for i, line in enumerate(lines):
        if i % 100 == 7:
            values.append(None)                              # tombstone
        elif i % 100 == 42:
            values.append(b"\xc3\x28 half a character")      # invalid UTF-8
        elif i % 500 == 3:
            values.append(b"")                               # empty, not a tombstone
        else:
            values.append(line)
    with deployed(stack, wordcount_module(tmp_path, topic), tmp_path / "logs") as run:
        run.start()
        run.wait_flowing(240)
        producer = KafkaProducer(bootstrap_servers=stack.kafka, acks="all",
                                 compression_type="gzip", linger_ms=20)
        try:
            futures = [
                producer.send(topic, key=f"user-{i % 13}".encode(), value=value,
                              partition=i % PARTITIONS,
                              headers=[("origin", b"kafka-python"), ("seq", str(i).encode())])
                for i, value in enumerate(values)]
            producer.flush(60)
            placed = [future.get(timeout=60) for future in futures]
        finally:
            producer.close(30)
        written = [Message(topic, md.partition, md.offset, value, f"user-{i % 13}".encode())
                   for i, (md, value) in enumerate(zip(placed, values, strict=True))]
        # The broker holds what was sent: keys, headers, values (None for tombstones).
        back = {(r.partition, r.offset): r for p in range(PARTITIONS)
                for r in read_all(stack.kafka, topic, p)}
        assert sorted(back) == sorted((m.partition, m.offset) for m in written)
        for i, m in enumerate(written):
            record = back[(m.partition, m.offset)]
            assert (record.key, record.value) == (m.key, m.value)
            assert record.headers == {"origin": b"kafka-python", "seq": str(i).encode()}
        target = last_offsets(written)
        committed = run.wait_committed(target, 180)
        assert dict(committed.clock) == target
        model = assert_state_is_model(run, committed, written)
        assert_dead_letters_acknowledged(stack.kafka, topic, model)
    tombstones = sum(v is None for v in values)
    undecodable = sum(v is not None and v.startswith(b"\xc3\x28") for v in values)
    assert tombstones == undecodable == 20
    assert len(model.dead_letters) == tombstones + undecodable
    assert {d.stage for d in model.dead_letters} == {"decode"}
    assert all("tombstone" in d.error for d in model.dead_letters if d.message.value is None)
    assert_dead_letters_are_model(stack.kafka, topic, model)
