"""Producing workloads: exactly what was written is recorded (:class:`Produced` for one
topic, :class:`ProducedTopics` for several), so :func:`hailstorm.model.run_model` can be fed
the very same messages; :func:`produce` writes and waits, a :class:`BackgroundProducer`
writes at a bounded rate on a thread, and :data:`WORKLOADS` generates seeded message values
per topology (plain values for a topology with one source topic, ``(topic, value)`` pairs
for one with several)."""

from __future__ import annotations

import io
import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from fastavro import parse_schema, schemaless_writer

from hailstorm import kafka
from hailstorm.dev.harness.wait import HarnessError
from hailstorm.dev.workloads import PAGE_VIEW_SCHEMA, KeyedEvents, PageViews, UserActivity, ZipfText
from hailstorm.protocol.clock import Partition
from hailstorm.vocabulary import Message


@dataclass
class Produced:
    """Exactly what was written to one topic: partition -> ``[(offset, value)]``."""

    topic: str
    messages: dict[int, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    """``None`` values are tombstones (the model dead-letters them, as spouts do)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _last: dict[int, int] = field(default_factory=dict, repr=False, compare=False)

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        with self._lock:
            self.messages.setdefault(partition, []).append((offset, value))
            if offset > self._last.get(partition, -1):
                self._last[partition] = offset

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.topic,)

    @property
    def default_topic(self) -> str:
        """Where a plain value (not a ``(topic, value)`` pair) goes."""
        return self.topic

    def record(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        """:meth:`add`, for a message of ``topic`` (which must be this one's)."""
        if topic != self.topic:
            raise HarnessError(f"a message of {topic!r} recorded as one of {self.topic!r}")
        self.add(partition, offset, value)

    @property
    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.messages.values())

    def last_offsets(self) -> dict[int, int]:
        """The highest offset written to each partition."""
        with self._lock:
            return dict(self._last)

    def clock(self) -> dict[Partition, int]:
        """The clock of a round that includes everything written so far."""
        return {(self.topic, p): o for p, o in self.last_offsets().items()}

    def fill_before(self, bootstrap: str, clock: Mapping[Partition, int] | None = None) -> int:
        """Add what the topic held before this run's first message, so the model sees it.

        Reads each partition from offset 0 up to just before the first offset recorded; a
        partition of ``clock`` with nothing recorded is read up to its clock. Returns how many
        messages were added.
        """
        with self._lock:
            bounds = {p: min(o for o, _ in v) - 1 for p, v in self.messages.items() if v}
        for (topic, p), last in (clock or {}).items():
            if topic == self.topic and p not in bounds:
                bounds[p] = last
        added = 0
        for p, end in sorted(bounds.items()):
            for record in kafka.read_range(bootstrap, self.topic, p, 0, end, timeout=60):
                self.add(p, record.offset, record.value)
                added += 1
        return added

    def model_messages(self) -> list[Message]:
        """The messages in partition, offset order, for :func:`run_model`."""
        with self._lock:
            return [Message(self.topic, p, o, value)
                    for p in sorted(self.messages)
                    for o, value in sorted(self.messages[p], key=lambda e: e[0])]


class ProducedTopics:
    """Exactly what was written to several topics: one :class:`Produced` per topic, with
    the same reading methods (their clocks merged, their messages in topic, partition and
    offset order)."""

    def __init__(self, topics: Iterable[str]) -> None:
        self.by_topic = {topic: Produced(topic) for topic in sorted(set(topics))}
        if not self.by_topic:
            raise HarnessError("nothing to record: no topic")

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(self.by_topic)

    @property
    def default_topic(self) -> str | None:
        """Where a plain value goes: the only topic (None: there are several)."""
        return next(iter(self.by_topic)) if len(self.by_topic) == 1 else None

    def record(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        produced = self.by_topic.get(topic)
        if produced is None:
            raise HarnessError(f"a message of {topic!r} recorded, which is none of "
                               f"{', '.join(self.by_topic)}")
        produced.add(partition, offset, value)

    @property
    def count(self) -> int:
        return sum(p.count for p in self.by_topic.values())

    def clock(self) -> dict[Partition, int]:
        """The clock of a round that includes everything written so far, to every topic."""
        return {part: o for p in self.by_topic.values() for part, o in p.clock().items()}

    def fill_before(self, bootstrap: str, clock: Mapping[Partition, int] | None = None) -> int:
        """:meth:`Produced.fill_before` for every topic."""
        return sum(p.fill_before(bootstrap, clock) for p in self.by_topic.values())

    def model_messages(self) -> list[Message]:
        """Every topic's messages, in topic, partition and offset order."""
        return [m for p in self.by_topic.values() for m in p.model_messages()]


Recorded = Produced | ProducedTopics
"""Where a producer records what it wrote."""

Outgoing = bytes | tuple[str, bytes]
"""A value for the only topic a :data:`Recorded` holds, or ``(topic, value)``."""


def routed(values: Iterable[Outgoing], default_topic: str | None, partitions: Sequence[int],
           sent: MutableMapping[str, int]) -> list[tuple[str, int, bytes]]:
    """``(topic, partition, value)`` for each of ``values``: round-robin over ``partitions``
    per topic, continuing from ``sent`` (values sent to each topic so far, updated), so that
    each topic is spread evenly however the topics alternate. A plain value goes to
    ``default_topic`` (None: a plain value is refused)."""
    out = []
    for item in values:
        if isinstance(item, bytes):
            if default_topic is None:
                raise HarnessError("a plain value where a (topic, value) pair is needed: "
                                   "the workload writes to several topics")
            topic, value = default_topic, item
        else:
            topic, value = item
        index = sent.get(topic, 0)
        sent[topic] = index + 1
        out.append((topic, partitions[index % len(partitions)], value))
    return out


PRODUCER_SETTINGS: dict[str, object] = {
    "acks": "all",
    "enable.idempotence": True,
    "message.timeout.ms": 120_000,
}
"""The harness's producer: a message is acknowledged only once every in-sync replica has it
(with ``min.insync.replicas=2`` an acknowledged message survives the loss of a broker), a
retry after a broker failure or a leader move never writes a message twice (idempotence),
and a message that cannot be delivered fails after 120 s, within :data:`FLUSH_TIMEOUT`, so
every message ends either acknowledged (and recorded) or failed (and the workload fails)."""
FLUSH_TIMEOUT = 150.0


def producer_client(bootstrap: str) -> Producer:
    """A producer with :data:`PRODUCER_SETTINGS`."""
    return kafka.producer(bootstrap, **PRODUCER_SETTINGS)


def produce(bootstrap: str, produced: Recorded, values: Iterable[Outgoing],
            partitions: Sequence[int], *, client: Producer | None = None,
            sent: MutableMapping[str, int] | None = None) -> dict[int, int]:
    """Produce ``values`` round-robin over ``partitions`` (per topic, see :func:`routed`;
    ``sent``: where earlier calls left off), recording each acknowledged one.

    Waits until every message was acknowledged or failed; any failure raises
    :class:`HarnessError` (a failed message may or may not be in the log, so the model could
    no longer be fed exactly). ``client``: a producer to reuse (default: a new one).
    Returns the last offsets written per partition by this call (of any topic).
    """
    last: dict[int, int] = {}
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
            return
        produced.record(msg.topic(), msg.partition(), msg.offset(), msg.value())
        last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

    out = client if client is not None else producer_client(bootstrap)
    addressed = routed(values, produced.default_topic, partitions, {} if sent is None else sent)
    for i, (topic, partition, value) in enumerate(addressed):
        while True:
            try:
                out.produce(topic, value=value, partition=partition, on_delivery=delivered)
                break
            except BufferError:
                out.poll(0.1)
        if i % 5000 == 0:
            out.poll(0)
    remaining = out.flush(FLUSH_TIMEOUT)
    if remaining or errors:
        raise HarnessError(f"{len(errors)} messages failed and {remaining} are undelivered after "
                           f"{FLUSH_TIMEOUT:.0f} s (whether the log has them is unknown); "
                           f"errors: {errors[:3]}")
    return last


class BackgroundProducer:
    """Produce a bounded list of values at a bounded rate on a thread (context manager).

    One idempotent producer writes every chunk and waits for its acknowledgements, so a
    broker failure only delays it: librdkafka retries on the partition's new leader.
    """

    def __init__(self, bootstrap: str, produced: Recorded, values: Sequence[Outgoing],
                 partitions: Sequence[int], rate: float, chunk: int = 500) -> None:
        self.bootstrap = bootstrap
        self.produced = produced
        self.values = values
        self.partitions = list(partitions)
        self.rate = rate
        self.chunk = chunk
        self.sent = 0
        self.error: BaseException | None = None
        self.started_at: float | None = None
        self._stop = threading.Event()
        self._go = threading.Event()
        self._go.set()
        self._held = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _run(self) -> None:
        try:
            self.started_at = time.monotonic()
            client = producer_client(self.bootstrap)
            sent: dict[str, int] = {}  # round-robin continuity across chunks
            for start in range(0, len(self.values), self.chunk):
                if self._stop.is_set() or not self._hold():
                    return
                chunk = self.values[start:start + self.chunk]
                produce(self.bootstrap, self.produced, chunk, self.partitions, client=client,
                        sent=sent)
                self.sent = start + len(chunk)
                ahead = self.started_at + self.sent / self.rate - time.monotonic()
                if ahead > 0:
                    self._stop.wait(ahead)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def _hold(self) -> bool:
        """Wait while paused (the rate's clock stops meanwhile); False when stopped."""
        if self._go.is_set():
            return True
        held = time.monotonic()
        self._held.set()
        while not self._go.wait(0.2):
            if self._stop.is_set():
                return False
        self._held.clear()
        assert self.started_at is not None
        self.started_at += time.monotonic() - held
        return True

    def pause(self, timeout: float = FLUSH_TIMEOUT + 10) -> None:
        """Produce nothing more until :meth:`resume`; returns once every message sent so
        far is acknowledged (or the producer ended)."""
        self._go.clear()
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and not self._held.wait(0.2):
            if time.monotonic() > deadline:
                raise HarnessError(f"the producer did not pause within {timeout:.0f} s")

    def resume(self) -> None:
        self._go.set()

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        """Wait until everything was produced; raise the producer's error if it had one."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise HarnessError(f"producer still running after {timeout:.0f} s "
                               f"({self.sent}/{len(self.values)} sent)")
        if self.error is not None:
            raise HarnessError(f"producer failed: {self.error!r}")

    def __enter__(self) -> BackgroundProducer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(FLUSH_TIMEOUT + 10)


WORDCOUNT_VOCABULARY = [f"{a}{b}" for a in ("al", "be", "ce", "do", "ek", "fu", "ga", "hi")
                        for b in ("ta", "ro", "mi", "nu", "xo", "sa", "le", "pi", "qu", "zy")]


def wordcount_lines(count: int, seed: int) -> list[bytes]:
    """``count`` seeded text lines of 0..9 words (with punctuation and digits)."""
    rng = random.Random(seed)
    return [(" ".join(rng.choice(WORDCOUNT_VOCABULARY) for _ in range(rng.randint(0, 9)))
             + rng.choice(["", ".", "!", " 42"])).encode() for _ in range(count)]


def zipf_text_lines(count: int, seed: int) -> list[bytes]:
    """``count`` seeded lines of realistic text (:class:`hailstorm.dev.workloads.ZipfText`:
    50,000 words by Zipf's law, a few hot, most rare)."""
    return [line.encode() for line in ZipfText().lines(count, seed)]


def keyed_events(count: int, seed: int) -> list[bytes]:
    """``count`` seeded JSON events of users drawn by Zipf's law from 2,000,000
    (:class:`hailstorm.dev.workloads.KeyedEvents`)."""
    return list(KeyedEvents().events(count, seed))


def page_views_avro(count: int, seed: int) -> list[bytes]:
    """``count`` seeded page views (:class:`hailstorm.dev.workloads.PageViews`: pages and
    users by Zipf's law, 5% delayed, 0.5% stragglers up to 30 min, so some are late),
    schemaless Avro of :data:`~hailstorm.dev.workloads.PAGE_VIEW_SCHEMA`; 50 views a
    second of event time, so 50,000 views span about four 5-minute windows."""
    schema = parse_schema(PAGE_VIEW_SCHEMA)
    values = []
    for view in PageViews(per_second=50).views(count, seed):
        out = io.BytesIO()
        schemaless_writer(out, schema, view)
        values.append(out.getvalue())
    return values


def user_activity(count: int, seed: int) -> list[tuple[str, bytes]]:
    """``count`` seeded JSON views, clicks and profiles (``(topic, value)``, see
    :class:`hailstorm.dev.workloads.UserActivity`) for ``topologies/enriched_views.py``."""
    return [(topic, json.dumps(record, separators=(",", ":")).encode())
            for topic, record in UserActivity().records(count, seed)]


Workload = Callable[[int, int], Sequence[Outgoing]]
"""``generate(count, seed) -> message values`` (``(topic, value)`` pairs for several
source topics)."""

WORKLOADS: dict[str, dict[str, Workload]] = {
    "wordcount": {"zipf": zipf_text_lines, "uniform": wordcount_lines},
    "wordstream": {"zipf": zipf_text_lines, "uniform": wordcount_lines},
    "user_totals": {"zipf": keyed_events},
    "top_spenders": {"zipf": keyed_events},
    "pageviews": {"zipf": page_views_avro},
    "enriched_views": {"zipf": user_activity},
}
"""Workload generators by topology name, then by workload name (the first is the
default): ``zipf`` draws keys by Zipf's law from a large key space, as production data
does; ``uniform`` is 80 equally likely words, where every batch rewrites every key."""
