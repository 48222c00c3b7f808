"""A run's side outputs: what it wrote besides its bolt states and sink tables, in a shape
that compares with what a model predicts.

Three kinds, each a :class:`SideRecord`:

* dead letters: a spout's message it could not decode or explode, a tuple a bolt's function
  failed on (on the spout's or the topology's dead-letter topic), and a topic sink's tuple
  that is no record (on the topology's dead-letter topic);
* late records: a late tuple of a bolt declaring ``late="<topic>"``, on that topic (a bolt
  with ``late=Table(...)`` has a late *sink*, compared as a table);
* rejected rows: a table sink's tuple that is no row, in ``<table>_rejected``.

:func:`predicted` gives what a model (:class:`~hailstorm.model.ModelResult` or
:class:`~hailstorm.oracle.OracleResult`) expects, :func:`letter_read` and
:func:`rejected_read` what the runtime wrote (as :mod:`hailstorm.dev.harness.results` reads
it), written down here from docs/writing-topologies.md ("Bad records", "Late data"), not
with the engine's writers. :func:`~hailstorm.dev.harness.compare.compare_side_outputs` compares them
as multisets.

Compared: where a record landed (the topic, or the rejected table), the node that wrote it,
the source message (topic, partition, offset), the stage, the value (a dead letter's value:
the message's bytes or the tuple's text, cut at :data:`~hailstorm.dead_letters.VALUE_LIMIT`
bytes with ``hailstorm.truncated`` and ``hailstorm.size``; a rejected row's ``record``), a
late record's details (its window and times), every other ``hailstorm.*`` header, and a dead
letter's key (``<topic>:<partition>:<offset>``). Not compared, because they legitimately
differ between the runtime and a model or between two correct runs:

* the error text (the ``hailstorm.error`` header, the ``error`` column): exception texts
  carry what the models do not reproduce (a processor's wording, addresses, a cut at 1000
  characters);
* when it was written: the Kafka timestamp, the ``rejected_at`` column;
* where in the topic or table it landed (partition, offset, row order);
* the writer's bookkeeping: the ``hailstorm.origin`` and ``hailstorm.seq`` headers (how the
  exactly-once writer numbers what it appends; the origin is compared as the source
  message above), and which instance of a sink wrote a rejected row (its ``sink`` column is
  ``<topology>/sink:<name>:<instance>``; the name is compared, the instance depends on the
  routing).

The models do not know a database's constraints, so a row the database refused (stage
``database``) or a record Kafka refused as too large is never predicted: a run that has one
fails (the chaos topologies have none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hailstorm.dead_letters import VALUE_LIMIT
from hailstorm.topic import Topic
from hailstorm.topology import Table, Topology
from hailstorm.vocabulary import DeadLetter, Origin, RejectedRow

HEADER = "hailstorm."
"""The prefix of every header hailstorm writes on a dead letter."""
STRUCTURAL_HEADERS = frozenset(f"{HEADER}{name}" for name in (
    "node", "topic", "partition", "offset", "stage", "truncated", "size"))
"""The headers a :class:`SideRecord` has fields for; the other ``hailstorm.*`` headers but
:data:`IGNORED_HEADERS` are its details."""
IGNORED_HEADERS = frozenset(f"{HEADER}{name}" for name in ("error", "origin", "seq"))
"""Headers that are not compared (see the module docstring)."""


@dataclass(frozen=True)
class SideRecord:
    """One dead letter, late record or rejected row, as far as it is compared."""

    place: str
    """The topic it is on, or the ``<table>_rejected`` table."""
    node: str
    """The spout, bolt or sink that wrote it."""
    origin: Origin
    """The source message it stands for."""
    stage: str
    value: bytes | str | None
    """A dead letter's value (cut at :data:`~hailstorm.dead_letters.VALUE_LIMIT`), or a
    rejected row's ``record``."""
    size: int | None = None
    """A cut value's size before the cut (None: not cut)."""
    details: tuple[tuple[str, str], ...] = ()
    """The other ``hailstorm.<name>`` headers, sorted (a late record's window and times)."""
    key: bytes | None = None
    """A dead letter's key (None for a rejected row)."""

    def brief(self) -> str:
        """The record in one line for a report (its value cut at 120 characters)."""
        value = repr(self.value)
        cut = value if len(value) <= 120 else value[:120] + "..."
        return (f"value {cut}" + ("" if self.size is None else f" (cut from {self.size})")
                + "".join(f", {name} {text}" for name, text in self.details)
                + ("" if self.key is None else f", key {self.key!r}"))

    @property
    def identity(self) -> tuple[str, str, Origin, str]:
        """What names the record whatever its content: two records alike here and different
        otherwise are one wrong record."""
        return (self.place, self.node, self.origin, self.stage)


class Predicting(Protocol):
    """What :func:`predicted` reads of a model's result."""

    topology: Topology
    dead_letters: list[DeadLetter]
    late: list[DeadLetter]
    rejected_rows: dict[str, list[RejectedRow]]


def _key(origin: Origin) -> bytes:
    (topic, partition), offset = origin
    return f"{topic}:{partition}:{offset}".encode()


def _letter(place: str, node: str, origin: Origin, stage: str, value: bytes | None,
            details: Iterable[tuple[str, str]] = ()) -> SideRecord:
    """A dead letter as it is written: its value cut at the limit, keyed by its source."""
    cut = value is not None and len(value) > VALUE_LIMIT
    return SideRecord(place, node, origin, stage,
                      value[:VALUE_LIMIT] if value is not None and cut else value,
                      len(value) if value is not None and cut else None,
                      tuple(sorted(details)), _key(origin))


def predicted(result: Predicting) -> list[SideRecord]:
    """The side outputs ``result`` expects: its dead letters and late records on their
    topics, a topic sink's rejected tuples as dead letters on the topology's dead-letter
    topic (value: the tuple's text), a table sink's in its ``<table>_rejected``."""
    records = [_letter(d.topic, d.node, d.message.origin, d.stage, d.message.value, d.details)
               for d in [*result.dead_letters, *result.late]]
    topology = result.topology
    for sink in topology.sinks:
        target = sink.target
        for row in result.rejected_rows.get(sink.name, ()):
            if isinstance(target, Topic):
                records.append(_letter(topology.dead_letter_topic, sink.name, row.origin,
                                       row.stage, row.record.encode("utf-8", "backslashreplace")))
            elif isinstance(target, Table):
                records.append(SideRecord(target.rejected_table, sink.name, row.origin,
                                          row.stage, row.record))
    return records


def side_output_topics(topology: Topology) -> list[str]:
    """The topics ``topology`` writes side outputs to: its dead-letter topics (the
    topology's too when a topic sink may reject a tuple), its bolts' late topics (sorted,
    each once)."""
    topics = set(topology.dead_letter_topics)
    topics |= {b.late_topic for b in topology.bolts if b.late_topic is not None}
    if any(isinstance(s.target, Topic) for s in topology.sinks):
        topics.add(topology.dead_letter_topic)
    return sorted(topics)


def rejected_tables(topology: Topology) -> dict[str, Table]:
    """Sink name -> its table, for every table sink (each has a ``<table>_rejected``)."""
    return {s.name: s.target for s in topology.sinks if isinstance(s.target, Table)}


def side_output_places(topology: Topology) -> list[str]:
    """Every topic and ``<table>_rejected`` table ``topology`` writes side outputs to."""
    return [*side_output_topics(topology),
            *sorted(t.rejected_table for t in rejected_tables(topology).values())]


def letter_read(topic: str, key: bytes | None, value: bytes | None,
                headers: Mapping[str, bytes] | None) -> SideRecord:
    """A record read from a dead-letter or late topic (a header it lacks reads as empty,
    so a record hailstorm did not write compares as wrong, not as a crash)."""
    h = dict(headers or {})

    def text(name: str) -> str:
        return h.get(f"{HEADER}{name}", b"").decode("utf-8", "replace")

    def number(name: str) -> int:
        try:
            return int(text(name))
        except ValueError:
            return -1

    details = tuple(sorted((name[len(HEADER):], raw.decode("utf-8", "replace"))
                           for name, raw in h.items() if name.startswith(HEADER)
                           and name not in STRUCTURAL_HEADERS | IGNORED_HEADERS))
    size = number("size") if text("truncated") == "true" else None
    return SideRecord(topic, text("node"), ((text("topic"), number("partition")),
                                            number("offset")), text("stage"), value, size,
                      details, key)


def rejected_read(table: str, row: Sequence[Any]) -> SideRecord:
    """A row of ``<table>_rejected`` read as ``(sink, topic, partition, offset, stage,
    record)``; the sink's name out of its ``<topology>/sink:<name>:<instance>``."""
    sink, topic, partition, offset, stage, record = row
    processor = str(sink).rpartition("/")[2]
    parts = processor.split(":")
    name = ":".join(parts[1:-1]) if len(parts) >= 3 and parts[0] == "sink" else processor
    return SideRecord(table, name, ((str(topic), int(partition)), int(offset)), str(stage),
                      record)
