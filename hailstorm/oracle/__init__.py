"""The independent oracle: a second, deliberately naive reading of what a topology means.

:func:`run_oracle` computes what a topology makes of a list of messages from the
definitions in ``docs/writing-topologies.md`` and ``docs/sinks.md``, sharing no code with
the engine or with the fast reference model (:mod:`hailstorm.model`): no ``BoltSpec``
execution method, no router, no lateness or window code, no decoding, no sink code. What
it shares are the declarations (a node's functions and parameters, a table's columns), the
monoids' ``empty``/``combine``/``check`` (and ``per_key``'s ``check_key``) of the states
that are not event-timed, and the record vocabulary (:mod:`hailstorm.vocabulary`). Windows,
time to live, lateness, key checks, column checks and record encodings are written out
here again, from their definitions, as plainly as possible.

Messages are read in the order given; tuples travel depth-first, as the documentation of
``run_model`` says. A bolt's state is one plain dict for all its instances (keyed state: a
key's value is the combination of everything the key received); the oracle does not
route, so only merged states compare with it (re-sharding must not matter). A bolt with
non-keyed state and ``parallelism > 1`` whose ``emit`` runs sees its own instance's part of
the state, which depends on the routing hash: the oracle refuses it
(:class:`OracleUnsupported`).

The two models disagreeing is a bug in one of them (or in the documentation):
:func:`hailstorm.dev.harness.compare.model_disagreements` names the differences.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hailstorm.errors import HaltError
from hailstorm.monoids import KeyedMap
from hailstorm.oracle.definitions import (
    Failed,
    OracleUnsupported,
    Timed,
    Timing,
    as_list,
    decoded,
    open_part,
    routable,
    table_row,
    timing_of,
    topic_record,
)
from hailstorm.topic import Topic
from hailstorm.topology import BoltSpec, EmitByKey, SinkSpec, SpoutSpec, Table, Topology
from hailstorm.vocabulary import (
    DeadLetter,
    Message,
    Origin,
    RejectedRow,
    record_bytes,
    record_text,
)

__all__ = ["DIGEST", "OUTPUTS_KEPT", "OracleHalt", "OracleResult", "OracleUnsupported",
           "run_oracle"]

OUTPUTS_KEPT = 200_000
"""A node's outputs are kept (and compared item by item) up to this many; a run of millions
of tuples keeps only their :attr:`OracleResult.output_digests`, so memory stays flat."""

DIGEST = 1 << 64


class OracleHalt(HaltError, RuntimeError):
    """A topology with ``on_error="fail"`` met a bad record (``node``, ``stage``, ``origin``)."""

    def __init__(self, node: str, stage: str, origin: Origin, error: str) -> None:
        super().__init__(f"{node}: {stage} failed on the record at {origin}: {error}")
        self.node, self.stage, self.origin, self.error = node, stage, origin, error


# ------------------------------------------------------------------ the result


@dataclass
class OracleResult:
    """What :func:`run_oracle` computed: the same questions :class:`~hailstorm.model.ModelResult`
    answers, over merged states."""

    topology: Topology
    messages_processed: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    late: list[DeadLetter] = field(default_factory=list)
    rejected_rows: dict[str, list[RejectedRow]] = field(default_factory=dict)
    outputs: dict[str, list[tuple[Origin, Any]]] = field(default_factory=dict)
    """``(origin, tuple)`` each spout and bolt emitted, while there are at most
    :data:`OUTPUTS_KEPT` (then the list is dropped: see :attr:`output_digests`)."""
    output_digests: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per spout and bolt, how many tuples it emitted and the sum of the hashes of their
    ``repr`` (modulo 2**64): what compares beyond :data:`OUTPUTS_KEPT`."""
    sink_rows: dict[str, list[tuple[Origin, Any]]] = field(default_factory=dict)
    tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)
    _plain: dict[str, Any] = field(default_factory=dict, repr=False)
    _timed: dict[str, Any] = field(default_factory=dict, repr=False)
    _stream_times: dict[tuple[str, str, Any], Any] = field(default_factory=dict, repr=False)

    def _bolt(self, name: str) -> BoltSpec[Any, Any]:
        node = self.topology.node(name)
        if not isinstance(node, BoltSpec):
            raise KeyError(f"{name!r} is a {node.kind}, not a bolt")
        return node

    def bolt_state(self, name: str) -> Any:
        """Bolt ``name``'s whole state (all instances together), in its monoid's shape."""
        bolt = self._bolt(name)
        late = bolt.late is not None
        if name in self._timed:
            timed = self._timed[name]
            if isinstance(bolt.state, KeyedMap):
                return {k: v.state(late) for k, v in timed.items()}
            return timed.state(late) if timed is not None else bolt.state.empty()
        return self._plain[name]

    def watermark(self, name: str) -> Any:
        """The smallest stream time over the spout partitions that sent bolt ``name`` a tuple
        (None: none did, or the bolt routes no late data)."""
        times = [t for (bolt, _s, _p), t in self._stream_times.items()
                 if bolt == name and t is not None]
        return min(times) if times else None

    def comparable(self, name: str, state: Any = None) -> Any:
        """``state`` of bolt ``name`` (by default the oracle's own) without what closed at
        :meth:`watermark`, and the keys left with nothing: a bolt routing late data may
        drop those at any time. Any other bolt's state as it is."""
        bolt = self._bolt(name)
        state = self.bolt_state(name) if state is None else state
        watermark = self.watermark(name)
        timing = timing_of(bolt.state.inner if isinstance(bolt.state, KeyedMap)
                            else bolt.state)
        if bolt.late is None or watermark is None or timing is None:
            return state
        if not isinstance(bolt.state, KeyedMap):
            return open_part(timing, state, watermark)
        kept = {k: open_part(timing, v, watermark) for k, v in state.items()}
        return {k: v for k, v in kept.items() if (v if timing.kind == "ttl" else v[1])}

    def table(self, name: str) -> dict[tuple[Any, ...], dict[str, Any]]:
        """Sink ``name``'s table (or topic): key tuple -> row, as ``ModelResult.table``."""
        return self.tables[name]


# ------------------------------------------------------------------ running


def run_oracle(topology: Topology, messages: Iterable[Message],
               withheld: Mapping[tuple[str, str], Mapping[tuple[str, int], int]] | None = None,
               ) -> OracleResult:
    """What ``topology`` computes over ``messages``, by the documented definitions alone
    (see the module). Raises :class:`OracleHalt` where an ``on_error="fail"`` topology
    stops, :class:`OracleUnsupported` for what it does not model, and what a topology's
    bug raises (``TypeError`` for an explode or emit returning a bare tuple).

    ``withheld``: per edge ``(source, target)``, a clock (partition -> offset): a tuple
    ``source`` emits for a record at or below it is not delivered to ``target`` (a node a
    deploy added gets from a bolt it carried only what it emits after the deploy's
    clock, docs/upgrading.md)."""
    topology.validate()
    result = OracleResult(topology)
    run = _Run(topology, result)
    run.withheld = dict(withheld or {})
    run.feed(messages)
    return result


class _Run:
    def __init__(self, topology: Topology, result: OracleResult) -> None:
        self.topology = topology
        self.result = result
        self.fail = topology.on_error == "fail"
        self.withheld: dict[tuple[str, str], Mapping[tuple[str, int], int]] = {}
        self.seq = 0
        self.timings: dict[str, Timing | None] = {}
        self.readers: dict[str, list[SpoutSpec[Any]]] = {}
        self.spouts = {s.name for s in topology.spouts}
        nodes = list(topology.nodes)
        self.downstream = {n.name: [m for m in nodes if not isinstance(m, SpoutSpec)
                                    and n.name in m.inputs] for n in nodes}
        for spout in topology.spouts:
            self.readers.setdefault(spout.topic, []).append(spout)
            result.outputs[spout.name] = []
            result.output_digests[spout.name] = (0, 0)
        for bolt in topology.bolts:
            result.outputs[bolt.name] = []
            result.output_digests[bolt.name] = (0, 0)
            keyed = isinstance(bolt.state, KeyedMap)
            inner = bolt.state.inner if isinstance(bolt.state, KeyedMap) else bolt.state
            timing = self.timings[bolt.name] = timing_of(inner)
            if not keyed and bolt.parallelism > 1 and bolt.emit is not None:
                raise OracleUnsupported(
                    f"bolt {bolt.name!r}: non-keyed state over {bolt.parallelism} instances "
                    "with an emit: what emit sees depends on which keys share an instance")
            if timing is not None:
                result._timed[bolt.name] = {} if keyed else None
            else:
                result._plain[bolt.name] = {} if keyed else bolt.state.empty()
        for sink in topology.sinks:
            result.sink_rows[sink.name] = []
            result.rejected_rows[sink.name] = []
            if isinstance(sink.target, Table | Topic):
                result.tables[sink.name] = {}
        self.appended: dict[tuple[str, Origin], int] = {}

    def feed(self, messages: Iterable[Message]) -> None:
        for message in messages:
            readers = self.readers.get(message.topic)
            if readers is None:
                raise ValueError(f"message on topic {message.topic!r}, which no spout of "
                                 f"topology {self.topology.name!r} reads")
            self.result.messages_processed += 1
            for spout in readers:
                try:
                    value = decoded(spout, message.value)
                    tuples = [value] if spout.explode is None else self._explode(spout, value)
                except Failed as failed:
                    self._bad(spout.name, failed.stage, message.origin, failed.error)
                    self.result.dead_letters.append(DeadLetter(
                        spout.name, spout.dead_letter, message, failed.error, failed.stage))
                    continue
                for t in tuples:
                    self.deliver(spout.name, message.origin, t)

    @staticmethod
    def _explode(spout: SpoutSpec[Any], value: Any) -> list[Any]:
        assert spout.explode is not None
        try:
            produced = spout.explode(value)
            if isinstance(produced, Iterator):
                produced = list(produced)
        except Exception as exc:  # broad: the user's explode may raise anything
            raise Failed("explode", exc) from exc
        return as_list(produced, f"spout {spout.name!r}: explode")

    def _bad(self, node: str, stage: str, origin: Origin, error: str) -> None:
        if self.fail:
            raise OracleHalt(node, stage, origin, error)

    def deliver(self, source: str, origin: Origin, t: Any) -> None:
        result = self.result
        kept = result.outputs.get(source)
        if kept is not None:
            kept.append((origin, t))
            if len(kept) > OUTPUTS_KEPT:
                del result.outputs[source]
        count, hashes = result.output_digests[source]
        result.output_digests[source] = (count + 1, (hashes + hash(repr((origin, t)))) % DIGEST)
        for node in self.downstream[source]:
            edge = self.withheld.get((source, node.name))
            if edge is not None:
                partition, offset = origin
                if partition in edge and offset <= edge[partition]:
                    continue
            if isinstance(node, SinkSpec):
                if node.late_of is None:
                    self.write(node, origin, t)
                continue
            if node.late is not None and source in self.spouts and self._late(source, node,
                                                                               origin, t):
                continue
            for out in self.run_bolt(node, origin, t):
                self.deliver(node.name, origin, out)

    # -- lateness (docs/writing-topologies.md, "Late data")

    def _late(self, spout: str, bolt: BoltSpec[Any, Any], origin: Origin, t: Any) -> bool:
        """Whether ``t`` is late for ``bolt`` at its spout partition's stream time (and
        move that time); a late tuple goes to the bolt's late topic or table."""
        timing = self.timings[bolt.name]
        assert timing is not None and bolt.event_time is not None
        try:
            event_time = bolt.event_time(t)
            timing.check_event_time(event_time)
            start, end, closes = timing.late_span(event_time)
        except Exception:  # broad: the user's event_time may raise anything
            return False  # the bolt quarantines it
        where = (bolt.name, spout, origin[0])
        now = self.result._stream_times.get(where)
        if now is not None and closes <= now:
            (topic, partition), offset = origin
            details = {"window_start": start, "window_end": end, "event_time": event_time,
                       "stream_time": now}
            if isinstance(bolt.late, str):
                self.result.late.append(DeadLetter(
                    bolt.name, bolt.late,
                    Message(topic, partition, offset, record_bytes(t)),
                    f"late for window [{start}, {end})", "late",
                    tuple((k, str(v)) for k, v in details.items())))
            else:
                sink = self.topology.node(f"{bolt.name}_late")
                assert isinstance(sink, SinkSpec)
                self.write(sink, origin, {"topic": topic, "partition": partition,
                                          "offset": offset, **details, "record": record_text(t)})
            return True
        if now is None or event_time > now:
            self.result._stream_times[where] = event_time
        return False

    # -- bolts (docs/writing-topologies.md, "Bolts" and "Bad records")

    def run_bolt(self, bolt: BoltSpec[Any, Any], origin: Origin, t: Any) -> list[Any]:
        try:
            key, value, event_time = self._contribution(bolt, t)
        except Failed as failed:
            self._quarantine(bolt, origin, t, failed)
            return []
        seen = self._absorb(bolt, key, value, event_time)
        if bolt.emit is None:
            return []
        try:
            emit = bolt.emit
            produced = emit.function(key, seen) if isinstance(emit, EmitByKey) else emit(t, seen)
            if isinstance(produced, Iterator):
                produced = list(produced)
        except Exception as exc:  # broad: the user's emit may raise anything
            self._quarantine(bolt, origin, t, Failed("emit", exc))
            return []
        return as_list(produced, f"bolt {bolt.name!r}: emit")

    def _quarantine(self, bolt: BoltSpec[Any, Any], origin: Origin, t: Any,
                    failed: Failed) -> None:
        self._bad(bolt.name, failed.stage, origin, failed.error)
        (topic, partition), offset = origin
        self.result.dead_letters.append(DeadLetter(
            bolt.name, self.topology.dead_letter_topic,
            Message(topic, partition, offset, record_bytes(t)),
            failed.error, failed.stage))

    def _contribution(self, bolt: BoltSpec[Any, Any], t: Any) -> tuple[Any, Any, Any]:
        """``(key, lifted value, event time)``, checked in the order key, the key's type
        (monoid), lift, lift's value (monoid), event time."""
        keyed = isinstance(bolt.state, KeyedMap)
        key = None
        if bolt.key is not None and (keyed or bolt.parallelism > 1):
            try:
                key = bolt.key(t)
                hash(key)
                if bolt.parallelism > 1 and not routable(key):
                    raise TypeError(f"cannot route a key of type {type(key).__name__}")
            except Exception as exc:  # broad: the user's key may raise anything
                raise Failed("key", exc) from exc
            if isinstance(bolt.state, KeyedMap):
                try:
                    bolt.state.check_key(key)
                except Exception as exc:  # broad: a (user) monoid's check_key may raise anything
                    raise Failed("monoid", exc) from exc
        try:
            value = bolt.lift(t)
        except Exception as exc:  # broad: the user's lift may raise anything
            raise Failed("lift", exc) from exc
        timing = self.timings[bolt.name]
        lifted = timing.inner if timing is not None else (
            bolt.state.inner if isinstance(bolt.state, KeyedMap) else bolt.state)
        try:
            lifted.check(value)
        except Exception as exc:  # broad: a (user) monoid's check may raise anything
            raise Failed("monoid", exc) from exc
        event_time = None
        if timing is not None:
            assert bolt.event_time is not None
            try:
                event_time = bolt.event_time(t)
                timing.check_event_time(event_time)
                if timing.kind != "ttl" and not timing.starts(event_time):
                    raise ValueError(f"no window covers event time {event_time}")
            except Exception as exc:  # broad: the user's event_time may raise anything
                raise Failed("event_time", exc) from exc
        return key, value, event_time

    def _absorb(self, bolt: BoltSpec[Any, Any], key: Any, value: Any, event_time: Any) -> Any:
        """Add the contribution; return what emit sees (the key's value, or the state)."""
        name, keyed = bolt.name, isinstance(bolt.state, KeyedMap)
        timing = self.timings[name]
        late = bolt.late is not None
        self.seq += 1
        if timing is None:
            plain = self.result._plain
            if keyed:
                states = plain[name]
                inner = bolt.state.inner  # type: ignore[attr-defined]
                states[key] = inner.combine(states.get(key, inner.empty()), value)
                return states[key]
            plain[name] = bolt.state.combine(plain[name], value)
            return plain[name]
        timed_states = self.result._timed
        if keyed:
            timed = timed_states[name].get(key)
            if timed is None:
                timed = timed_states[name][key] = Timed(timing)
        else:
            timed = timed_states[name]
            if timed is None:
                timed = timed_states[name] = Timed(timing)
        timed.add(event_time, value, self.seq)
        return timed.seen_by_emit(late)

    # -- sinks (docs/writing-topologies.md, "Sinks"; docs/sinks.md)

    def write(self, sink: SinkSpec, origin: Origin, t: Any) -> None:
        result = self.result
        result.sink_rows[sink.name].append((origin, t))
        target = sink.target
        if not isinstance(target, Table | Topic):
            return
        try:
            row = table_row(target, t) if isinstance(target, Table) \
                else topic_record(target, t)
        except Failed as failed:
            self._bad(sink.name, "row", origin, failed.error)
            result.rejected_rows[sink.name].append(
                RejectedRow(origin, "row", failed.error, record_text(t)))
            return
        table = result.tables[sink.name]
        if target.mode == "append":
            n = self.appended.get((sink.name, origin), 0)
            self.appended[(sink.name, origin)] = n + 1
            (topic, partition), offset = origin
            table[(topic, partition, offset, n)] = row
        elif isinstance(target, Topic):
            table[(row["key"],)] = row
        else:
            key = tuple(row[c] for c in target.key)
            old = table.get(key)
            if target.mode == "merge" and old is not None:
                row = {c: (v if c in target.key else old[c] + v) for c, v in row.items()}
            table[key] = row

