"""The sequential reference model: what a topology computes, with no concurrency.

:func:`run_model` feeds Kafka-like messages through a topology in the order given, in one
process: decode (failures become dead letters or halt, per the topology's ``on_error``),
explode, then push each tuple depth-first through the DAG. Bolts keep one state per
instance, split by the same routing function the distributed runtime uses, and use the same
lift/emit code (the engine's :class:`~hailstorm.engine.BoltExecution`). The exactly-once
runtime must end in the states and tables this model computes.

Every tuple carries its *origin* ``((topic, partition), offset)``: the Kafka message it
came from. Tuples a bolt emits inherit the origin of the tuple that caused them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hailstorm.bad_records import BadRecordBudget
from hailstorm.decoders import DecodeError
from hailstorm.engine import execution_of, tuples_of
from hailstorm.errors import HaltError
from hailstorm.lateness import StreamTime, without_closed_windows
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import ProcessorId
from hailstorm.topic import Topic
from hailstorm.topology import (
    BoltSpec,
    RowError,
    SinkSpec,
    SpoutSpec,
    Table,
    Topology,
)
from hailstorm.vocabulary import (
    DeadLetter,
    Message,
    Origin,
    RejectedRow,
    halt_reason_of,
    late_row,
    messages,
    record_text,
)

# Re-exported: the record vocabulary lives in hailstorm.vocabulary; users met it here first.
__all__ = [
    "DeadLetter",
    "Message",
    "ModelResult",
    "Origin",
    "RecordHalt",
    "RejectedRow",
    "messages",
    "record_text",
    "run_model",
]


class RecordHalt(HaltError, RuntimeError):
    """:func:`run_model` on a topology with ``on_error="fail"`` met a bad record, or a
    spout or bolt failed on more records than its budget allows (see
    :mod:`hailstorm.bad_records`)."""


class ModelResult:
    """The outcome of :func:`run_model`."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.messages_processed = 0
        """Messages consumed, including those that became dead letters."""
        self.messages: Sequence[Message] | None = None
        """The messages, when given as a list or tuple: the harness runs the independent
        oracle (:mod:`hailstorm.oracle`) over the same ones."""
        self.withheld: dict[tuple[str, str], Mapping[Partition, int]] = {}
        """The edges :func:`run_model` withheld tuples on (the oracle withholds the same)."""
        self.dead_letters: list[DeadLetter] = []
        """Quarantined records, in the order met."""
        self.late: list[DeadLetter] = []
        """Late tuples (stage ``"late"``) of bolts declaring ``late="<topic>"``, in the order
        met (with ``late=Table(...)`` they are rows of the bolt's late sink)."""
        self.rejected_rows: dict[str, list[RejectedRow]] = {s.name: [] for s in topology.sinks}
        """Per table sink, the tuples that did not become rows (``<table>_rejected``)."""
        self._states: dict[str, list[Any]] = {
            b.name: [b.state.empty() for _ in range(b.parallelism)] for b in topology.bolts
        }
        self._outputs: dict[str, list[tuple[Origin, Any]]] = {
            n.name: [] for n in topology.nodes if not isinstance(n, SinkSpec)
        }
        self._sink_rows: dict[str, list[tuple[Origin, Any]]] = {s.name: [] for s in topology.sinks}
        self._tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {
            s.name: {} for s in topology.sinks if isinstance(s.target, Table | Topic)
        }
        self._append_counts: dict[tuple[str, Origin], int] = {}
        self._stream_times: dict[tuple[str, str, Partition], StreamTime] = {}
        """``(bolt, spout, partition)`` -> that spout's stream time of the partition for the
        bolt: each spout keeps its own, as the runtime's spout instances do."""

    def _bolt(self, name: str) -> BoltSpec:
        node = self.topology.node(name)
        if not isinstance(node, BoltSpec):
            raise KeyError(f"{name!r} is a {node.kind}, not a bolt")
        return node

    def instance_states(self, name: str) -> list[Any]:
        """Bolt ``name``'s state per instance (index = instance number)."""
        self._bolt(name)
        return self._states[name]

    def bolt_state(self, name: str) -> Any:
        """Bolt ``name``'s whole state: its instance states merged."""
        bolt = self._bolt(name)
        states = self._states[name]
        return states[0] if len(states) == 1 else bolt.state.combine_all(states)

    def watermark(self, name: str) -> Any:
        """For bolt ``name`` routing late data: the smallest stream time over the
        partitions (of each spout) that sent it a tuple (None when none did or the bolt does
        not route late data). Every window closed at it is closed for good."""
        times = [clock.time for (bolt, _s, _p), clock in self._stream_times.items()
                 if bolt == name and clock.time is not None]
        return min(times) if times else None

    def comparable(self, name: str, state: Any) -> Any:
        """``state`` of bolt ``name`` as it compares with the model's: for a bolt routing
        late data, without the windows closed at :meth:`watermark` (a bolt may drop those
        at any time, see :mod:`hailstorm.lateness`); else ``state`` itself."""
        bolt = self._bolt(name)
        if bolt.late is None:
            return state
        return without_closed_windows(bolt, state, self.watermark(name))

    def outputs(self, name: str) -> list[tuple[Origin, Any]]:
        """``(origin, tuple)`` emitted by spout or bolt ``name``, in order."""
        if name not in self._outputs:
            self.topology.node(name)
            raise KeyError(f"{name!r} is a sink; use sink_rows({name!r})")
        return self._outputs[name]

    def sink_rows(self, name: str) -> list[tuple[Origin, Any]]:
        """``(origin, tuple)`` received by sink ``name``, in order."""
        if name not in self._sink_rows:
            node = self.topology.node(name)
            raise KeyError(f"{name!r} is a {node.kind}, not a sink")
        return self._sink_rows[name]

    def table(self, name: str) -> dict[tuple[Any, ...], dict[str, Any]]:
        """Final content of sink ``name``'s table (or topic): key tuple -> row.

        ``upsert``: the last row per key; ``merge``: rows per key with non-key columns
        added up; ``append``: every row, keyed by ``(topic, partition, offset, n)`` where
        ``n`` numbers the rows caused by the same message.

        A :class:`~hailstorm.topic.Topic` sink's rows are its encoded records
        ``{"key": bytes, "value": bytes}``: upsert keyed ``(key,)`` (the newest record per
        key, what a compacted topic keeps), append keyed by origin as above.
        """
        if name not in self._tables:
            node = self.topology.node(name)
            if isinstance(node, SinkSpec):
                raise KeyError(
                    f"sink {name!r} writes to {node.target.describe()}, not a table; "
                    f"use sink_rows({name!r})"
                )
            raise KeyError(f"{name!r} is a {node.kind}, not a sink")
        return self._tables[name]

    # -- feeding ----------------------------------------------------------------------

    def _write(self, sink: SinkSpec, origin: Origin, t: Any) -> None:
        self._sink_rows[sink.name].append((origin, t))
        target = sink.target
        table = self._tables.get(sink.name)
        if table is None:
            return
        row: dict[str, Any]
        if isinstance(target, Topic):
            record_key, value, _partition, _headers = target.record_of(t)
            row = {"key": record_key, "value": value}
            if target.mode == "upsert":
                table[(record_key,)] = row
                return
        else:
            assert isinstance(target, Table)
            row = target.to_row(t)
            if target.mode != "append":
                key = target.key_of(row)
                old = table.get(key)
                if target.mode == "merge" and old is not None:
                    for column in target.value_columns:
                        row[column] = old[column] + row[column]
                table[key] = row
                return
        counter = (sink.name, origin)
        n = self._append_counts.get(counter, 0)
        self._append_counts[counter] = n + 1
        (topic, partition), offset = origin
        table[(topic, partition, offset, n)] = row


def run_model(topology: Topology, messages: Iterable[Message],
              withheld: Mapping[tuple[str, str], Mapping[Partition, int]] | None = None,
              ) -> ModelResult:
    """Run ``topology`` over ``messages`` sequentially and return the result.

    ``withheld`` (a deploy's, docs/upgrading.md): per edge ``(source, target)``, a clock
    at or below which what ``source`` emits never reaches ``target``: a node added by a
    deploy at that committed clock gets from a bolt whose state the deploy carried only
    what it emits from then on.

    Messages are processed in the order given. Each goes to every spout reading its
    topic. Tuples travel depth-first: a bolt absorbs a tuple and its emitted tuples reach
    the downstream nodes before the next tuple is processed.

    Bad records follow the topology's ``on_error`` policy. With ``"quarantine"`` a
    decode/explode failure and a tuple a bolt's function fails on (see
    :class:`~hailstorm.topology.RecordFailed`) are recorded in ``dead_letters``, a sink
    tuple whose row fails in ``rejected_rows``, and processing goes on, until a spout or
    bolt fails on more records than the budget allows (:class:`~hailstorm.topology.Quarantine`;
    counted as :mod:`hailstorm.bad_records` says, in this order): that record raises
    :class:`RecordHalt` with the reason the runtime gives. With ``"fail"`` the first one
    raises :class:`RecordHalt`. Other exceptions (a monoid failing on values it accepted)
    propagate, annotated with the node and the tuple.
    """
    topology.validate()
    result = ModelResult(topology)
    if isinstance(messages, list | tuple):
        result.messages = messages
    result.withheld = cut = dict(withheld or {})
    spouts_by_topic: dict[str, list[SpoutSpec]] = {}
    for spout in topology.spouts:
        spouts_by_topic.setdefault(spout.topic, []).append(spout)
    downstream: dict[str, Sequence[BoltSpec | SinkSpec]] = {
        n.name: topology.downstream_of(n.name) for n in topology.nodes
    }
    states = result._states
    runs = {bolt.name: execution_of(bolt) for bolt in topology.bolts}
    outputs = result._outputs

    fail = topology.on_error == "fail"
    quarantine = topology.dead_letter_topic
    spout_names = {s.name for s in topology.spouts}
    late_sinks = {s.name: s for s in topology.sinks if s.late_of is not None}
    stream_times = result._stream_times
    policy = topology.quarantine
    budgets: dict[str, BadRecordBudget] = {}
    received: dict[str, int] = {}

    def count(where: str, position: int, node: str, stage: str | None, error: str,
              origin: Origin) -> None:
        """Count a record of ``node`` at processor ``where`` (bad: a ``stage``); halt past
        the budget, as the runtime does."""
        budget = budgets.get(where)
        if budget is None:
            budget = budgets[where] = BadRecordBudget(policy, where)
            budget.begin(position)  # its first record, as the processor's
        bad = () if stage is None else ((node, position, stage, error, origin),)
        reason = budget.observe(position, bad)
        if reason is not None:
            raise RecordHalt(reason)

    def spout_id(spout: str, origin: Origin) -> str:
        return str(ProcessorId.spout(spout, origin[0]))

    def write(sink: SinkSpec, origin: Origin, t: Any) -> None:
        try:
            result._write(sink, origin, t)
        except RowError as exc:
            if fail:
                raise RecordHalt(halt_reason_of(sink.name, "row", origin, str(exc))) from exc
            result.rejected_rows[sink.name].append(
                RejectedRow(origin, "row", str(exc), record_text(t)))
        except Exception as exc:  # broad: user code may raise anything; noted and re-raised
            exc.add_note(f"in sink {sink.name!r}, writing tuple {t!r} from {origin}")
            raise

    def deliver(source: str, origin: Origin, t: Any) -> None:
        outputs[source].append((origin, t))
        for node in downstream[source]:
            if cut and origin[1] <= cut.get((source, node.name), {}).get(origin[0], -1):
                continue  # emitted before the deploy that added ``node``
            if isinstance(node, BoltSpec) and node.late is not None and source in spout_names:
                clock = stream_times.get((node.name, source, origin[0]))
                if clock is None:
                    clock = stream_times[(node.name, source, origin[0])] = StreamTime(node)
                why = clock.judge(t)
                if why is not None:
                    if node.late_sink is not None:
                        write(late_sinks[node.late_sink], origin, late_row(origin, t, why))
                    else:
                        result.late.append(DeadLetter.of_late(node, origin, t, why))
                    continue
            if isinstance(node, SinkSpec):
                if node.late_of is None:  # (a late sink gets only the late tuples)
                    write(node, origin, t)
                continue
            instance_states = states[node.name]
            try:
                run = runs[node.name]
                instance = run.instance_for(t)
                state, produced, failure = run.process(instance_states[instance], t)
            except Exception as exc:  # broad: user code may raise anything; noted and re-raised
                exc.add_note(f"in bolt {node.name!r}, processing tuple {t!r} from {origin}")
                raise
            instance_states[instance] = state
            if failure is not None:
                if fail:
                    raise RecordHalt(halt_reason_of(failure.node, failure.stage, origin,
                                                    failure.error)) from failure
                result.dead_letters.append(DeadLetter.of_tuple(quarantine, origin, t, failure))
            if policy is not None and policy.max_bad is not None:
                if node.preaggregate and source in spout_names:  # the spout combines for it
                    where, position = spout_id(source, origin), origin[1]
                else:  # the bolt instance, counting the tuples it receives
                    where = str(ProcessorId.bolt(node.name, instance))
                    position = received[where] = received.get(where, 0) + 1
                if failure is None:
                    count(where, position, node.name, None, "", origin)
                else:
                    count(where, position, node.name, failure.stage, failure.error, origin)
            for out in produced:
                deliver(node.name, origin, out)

    for message in messages:
        readers = spouts_by_topic.get(message.topic)
        if readers is None:
            raise ValueError(
                f"message on topic {message.topic!r}, but no spout of topology "
                f"{topology.name!r} reads it (spouts read: {', '.join(spouts_by_topic)})"
            )
        result.messages_processed += 1
        origin = message.origin
        for spout in readers:
            try:
                tuples = tuples_of(spout, message.value)
            except DecodeError as exc:
                if fail:
                    raise RecordHalt(halt_reason_of(spout.name, exc.stage, origin, str(exc))) \
                        from exc
                result.dead_letters.append(
                    DeadLetter(spout.name, spout.dead_letter, message, str(exc), exc.stage)
                )
                if policy is not None and policy.max_bad is not None:
                    count(spout_id(spout.name, origin), message.offset, spout.name,
                          exc.stage, str(exc), origin)
                continue
            if policy is not None and policy.max_bad is not None:
                count(spout_id(spout.name, origin), message.offset, spout.name, None, "",
                      origin)
            for t in tuples:
                deliver(spout.name, origin, t)
    return result
