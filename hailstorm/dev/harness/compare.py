"""Checking what a run committed: :func:`compare_with_model` names lost, duplicated and wrong
values of the bolt states and sink tables against :func:`hailstorm.model.run_model` and
against the independent oracle (:func:`hailstorm.oracle.run_oracle`), and
:func:`model_disagreements` where the two models differ (a bug in one of them);
:func:`compare_tables` compares sink tables with expected rows, such as those the
independent by-hand counts (:data:`BY_HAND`) compute without the topology's code."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hailstorm.dev.harness.results import BoltStates, keyed_append_rows
from hailstorm.dev.harness.side_outputs import SideRecord, predicted, side_output_places
from hailstorm.model import Message, ModelResult, RecordHalt, run_model
from hailstorm.oracle import (
    DIGEST,
    OUTPUTS_KEPT,
    OracleHalt,
    OracleResult,
    OracleUnsupported,
    run_oracle,
)
from hailstorm.topic import Topic
from hailstorm.topology import SinkSpec, Table, Topology


@dataclass(frozen=True)
class Difference:
    node: str
    """The bolt or sink."""
    key: Any
    expected: Any
    actual: Any
    kind: Literal["lost", "duplicated", "wrong"]


@dataclass
class Comparison:
    """Committed states against the model (and the oracle): totals and the first
    differences."""

    lost: int = 0
    """Missing units of count (per_key(Count)-like states), or missing keys otherwise."""
    duplicated: int = 0
    wrong: int = 0
    differences: list[Difference] = field(default_factory=list)
    instance_mismatches: list[str] = field(default_factory=list)
    keys_compared: int = 0
    oracle: Comparison | None = None
    """The same states and tables against the independent oracle (None: not run, see
    :attr:`oracle_note`)."""
    model_disagreements: list[str] = field(default_factory=list)
    """Where the model and the oracle differ over the same messages: a bug in one of them
    (or in the documentation they were written from), whatever the run did."""
    oracle_note: str = ""
    """Why the oracle was not run, when it was not."""
    side: SideTally | None = None
    """The dead letters, late records and rejected rows read back (None: not read); their
    differences count in :attr:`lost`, :attr:`duplicated` and :attr:`wrong` too."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong or self.instance_mismatches
                    or self.model_disagreements
                    or (self.oracle is not None and not self.oracle.ok))

    def first(self, n: int = 5) -> list[Difference]:
        return self.differences[:n]

    def oracle_lines(self) -> list[str]:
        """What the oracle found, for a report: the run against it, and any disagreement
        between the two models."""
        if self.oracle is None:
            return [f"oracle: {self.oracle_note or 'not run'}"]
        o = self.oracle
        lines = [f"oracle: {o.keys_compared} keys and rows against the independent oracle: "
                 f"{o.lost} lost, {o.duplicated} duplicated, {o.wrong} wrong"]
        lines += [f"  {d.kind}: {d.node}[{d.key!r}] expected {d.expected!r}, "
                  f"committed {d.actual!r}" for d in o.first(5)]
        if self.model_disagreements:
            lines.append(f"BUG: the model and the oracle disagree ({len(self.model_disagreements)}"
                         " differences):")
            lines += [f"  {line}" for line in self.model_disagreements[:10]]
        else:
            lines.append("the model and the oracle agree")
        return lines


@dataclass(frozen=True)
class SideTally:
    """The side outputs (:mod:`~hailstorm.dev.harness.side_outputs`) a run wrote against
    one model's."""

    read: int
    expected: int
    lost: int
    duplicated: int
    wrong: int
    places: tuple[str, ...]
    """The topics and ``<table>_rejected`` tables read or expected."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong)

    def summary(self, model: str) -> str:
        """``"<model> expects N: L lost, D duplicated, W wrong"``."""
        return (f"{model} expects {self.expected}: {self.lost} lost, {self.duplicated} "
                f"duplicated, {self.wrong} wrong")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _append_target(topology: Topology, sink: str) -> bool:
    spec = topology.node(sink)
    return isinstance(spec, SinkSpec) and isinstance(spec.target, Table | Topic) \
        and spec.target.mode == "append"


def _canonical(rows: Mapping[tuple[Any, ...], Mapping[str, Any]]) -> dict[tuple[Any, ...],
                                                                         dict[str, Any]]:
    """Append rows keyed ``(topic, partition, offset, n)`` renumbered canonically per
    origin (:func:`keyed_append_rows`)."""
    return keyed_append_rows(((k[0], k[1], k[2]), row) for k, row in rows.items())


def compare_with_model(
    model: ModelResult,
    states: Mapping[str, BoltStates],
    tables: Mapping[str, Mapping[tuple[Any, ...], Mapping[str, Any]]] | None = None,
    limit: int = 20,
    oracle: OracleResult | None = None,
    bolts: Collection[str] | None = None,
    side_outputs: Sequence[SideRecord] | None = None,
) -> Comparison:
    """Lost, duplicated and wrong values of every bolt's committed state vs the model
    (``bolts``: of those only; a bolt compared but missing from ``states`` is wrong).

    For integer values (``per_key(Count())``-like): a key whose count is lower than the
    model's lost the difference, a higher one was double-counted; a key only the model has
    is lost, one only the runtime has is duplicated. Any other difference is wrong.
    Per-instance states must equal the model's per-instance states too. A bolt routing late
    data is compared without the windows closed at the model's watermark
    (:meth:`ModelResult.comparable`): it may drop those at any time.

    ``tables`` (sink name -> key -> row, as :meth:`TopologyRun.sink_tables` reads them) are
    compared with :meth:`ModelResult.table`: a missing row is lost, an extra one
    duplicated, a different one wrong.

    The same merged states and tables are compared with the independent oracle
    (:attr:`Comparison.oracle`): ``oracle``, or :func:`~hailstorm.oracle.run_oracle` over
    the model's messages (when the model was given a list), and the two models with each
    other (:attr:`Comparison.model_disagreements`); either difference fails the comparison.

    ``side_outputs`` (the dead letters, late records and rejected rows the run wrote, as
    :meth:`TopologyRun.side_outputs` reads them) are compared with each model's
    (:func:`compare_side_outputs`; :attr:`Comparison.side`).
    """
    result = Comparison()
    topology = model.topology

    def note(d: Difference) -> None:
        if len(result.differences) < limit:
            result.differences.append(d)

    compared = [b.name for b in topology.bolts if bolts is None or b.name in bolts]
    for name in compared:
        if name not in states:
            continue
        for i, (want, got) in enumerate(zip(model.instance_states(name),
                                            states[name].instances, strict=False)):
            if model.comparable(name, want) != model.comparable(name, got):
                result.instance_mismatches.append(f"{name}:{i}")
    _compare_run(topology, compared,
                 lambda name: model.comparable(name, model.bolt_state(name)),
                 model.comparable, model.table, states, tables, result, note)
    if side_outputs is not None:
        result.side = compare_side_outputs(predicted(model), side_outputs, result, note,
                                           side_output_places(topology))
    if oracle is None:
        if model.messages is None:
            result.oracle_note = "not run (the model was not given a list of messages)"
            return result
        try:
            oracle = run_oracle(topology, model.messages, model.withheld)
        except OracleUnsupported as exc:
            result.oracle_note = f"not run: {exc}"
            return result
        except OracleHalt as exc:
            result.model_disagreements.append(
                f"the oracle halts ({exc}) where the model ran to the end")
            return result
    result.model_disagreements = model_disagreements(model, oracle, limit)
    against = result.oracle = Comparison()

    def note_oracle(d: Difference) -> None:
        if len(against.differences) < limit:
            against.differences.append(d)

    assert oracle is not None
    _compare_run(topology, compared, oracle.comparable, oracle.comparable, oracle.table,
                 states, tables, against, note_oracle)
    if side_outputs is not None:
        against.side = compare_side_outputs(predicted(oracle), side_outputs, against,
                                            note_oracle, side_output_places(topology))
    return result


def compare_side_outputs(expected: Sequence[SideRecord], actual: Sequence[SideRecord],
                         result: Comparison, note: Callable[[Difference], None],
                         places: Iterable[str] = ()) -> SideTally:
    """The side outputs a run wrote against a model's, as multisets (see
    :mod:`~hailstorm.dev.harness.side_outputs` for what is compared), counted into
    ``result``: records alike but for their content (:attr:`SideRecord.identity`) are
    paired, and each pair that differs is wrong; an expected record left over is lost, a
    written one duplicated (a record written twice, or one no model has)."""
    want, got = Counter(expected), Counter(actual)
    want_by: dict[Any, list[SideRecord]] = {}
    got_by: dict[Any, list[SideRecord]] = {}
    for record, n in (want - got).items():
        want_by.setdefault(record.identity, []).extend([record] * n)
    for record, n in (got - want).items():
        got_by.setdefault(record.identity, []).extend([record] * n)
    lost = duplicated = wrong = 0
    for identity in sorted(set(want_by) | set(got_by), key=repr):
        missing, extra = want_by.get(identity, []), got_by.get(identity, [])
        place, node, origin, stage = identity
        where = f"{place} ({node}, {stage})"
        for a, b in zip(missing, extra, strict=False):
            wrong += 1
            note(Difference(where, origin, a.brief(), b.brief(), "wrong"))
        for a in missing[len(extra):]:
            lost += 1
            note(Difference(where, origin, a.brief(), None, "lost"))
        for b in extra[len(missing):]:
            duplicated += 1
            note(Difference(where, origin, None, b.brief(), "duplicated"))
    result.lost += lost
    result.duplicated += duplicated
    result.wrong += wrong
    result.keys_compared += max(len(expected), len(actual))
    read = sorted({*places, *(r.place for r in [*expected, *actual])})
    return SideTally(len(actual), len(expected), lost, duplicated, wrong, tuple(read))


def _compare_run(
    topology: Topology,
    bolts: Sequence[str],
    expected_state: Callable[[str], Any],
    comparable: Callable[[str, Any], Any],
    expected_table: Callable[[str], Rows],
    states: Mapping[str, BoltStates],
    tables: Mapping[str, Rows] | None,
    result: Comparison,
    note: Callable[[Difference], None],
) -> None:
    """The merged committed states of ``bolts`` and the tables against one model's."""
    for name in bolts:
        expected = expected_state(name)
        if name not in states:
            result.wrong += 1
            note(Difference(name, None, "a committed state", None, "wrong"))
            continue
        actual = comparable(name, states[name].merged)
        if isinstance(expected, dict) and isinstance(actual, dict):
            keys = sorted(set(expected) | set(actual), key=repr)
            result.keys_compared += len(keys)
            for key in keys:
                want, got = expected.get(key), actual.get(key)
                if want == got:
                    continue
                if (want is None or _is_count(want)) and (got is None or _is_count(got)):
                    delta = (got or 0) - (want or 0)
                    if delta < 0:
                        result.lost += -delta
                        note(Difference(name, key, want, got, "lost"))
                    else:
                        result.duplicated += delta
                        note(Difference(name, key, want, got, "duplicated"))
                else:
                    result.wrong += 1
                    note(Difference(name, key, want, got, "wrong"))
        else:
            result.keys_compared += 1
            if expected != actual:
                if _is_count(expected) and _is_count(actual):
                    if actual < expected:
                        result.lost += expected - actual
                        note(Difference(name, None, expected, actual, "lost"))
                    else:
                        result.duplicated += actual - expected
                        note(Difference(name, None, expected, actual, "duplicated"))
                else:
                    result.wrong += 1
                    note(Difference(name, None, expected, actual, "wrong"))
    for sink, table in (tables or {}).items():
        want_rows = expected_table(sink)
        if _append_target(topology, sink):
            want_rows = _canonical(want_rows)
        _compare_rows(sink, want_rows, table, result, note)


# ------------------------------------------------------------------ model against oracle


def _multiset(items: Iterable[Any]) -> Counter[str]:
    return Counter(map(repr, items))


def _differ(what: str, want: Counter[str], got: Counter[str], lines: list[str]) -> None:
    """Lines for the items only the model has (``-``) or only the oracle has (``+``)."""
    for item in sorted(want - got):
        lines.append(f"{what}: model only: {item:.300}")
    for item in sorted(got - want):
        lines.append(f"{what}: oracle only: {item:.300}")


def _differ_outputs(name: str, model: ModelResult, oracle: OracleResult,
                    lines: list[str]) -> None:
    """A node's outputs: item by item while the oracle kept them all, else by their number
    and the sum of their hashes."""
    want = model.outputs(name)
    got = oracle.outputs.get(name)
    if got is not None and len(want) <= OUTPUTS_KEPT:
        _differ(f"{name} emitted", _multiset(want), _multiset(got), lines)
        return
    digest = (len(want), sum(hash(repr(item)) for item in want) % DIGEST)
    if digest != oracle.output_digests[name]:
        lines.append(f"{name} emitted: {len(want)} tuples by the model, "
                     f"{oracle.output_digests[name][0]} by the oracle, not the same ones")


def model_disagreements(model: ModelResult, oracle: OracleResult, limit: int = 20
                        ) -> list[str]:
    """Where :func:`~hailstorm.model.run_model` and :func:`~hailstorm.oracle.run_oracle`
    differ over the same messages, as readable lines (empty: they agree): bolt states
    merged across instances, every node's output, the tables and topics, dead letters, late
    records and rejected rows (compared without their error texts)."""
    topology = model.topology
    lines: list[str] = []
    if model.messages_processed != oracle.messages_processed:
        lines.append(f"messages: the model read {model.messages_processed}, the oracle "
                     f"{oracle.messages_processed}")
    for bolt in topology.bolts:
        want, got = model.bolt_state(bolt.name), oracle.bolt_state(bolt.name)
        if want == got:
            continue
        if isinstance(want, dict) and isinstance(got, dict):
            for key in sorted(set(want) | set(got), key=repr):
                if want.get(key, _NONE) != got.get(key, _NONE):
                    lines.append(f"bolt {bolt.name}[{key!r}]: model {want.get(key, _NONE)!r:.200},"
                                 f" oracle {got.get(key, _NONE)!r:.200}")
        else:
            lines.append(f"bolt {bolt.name}: model {want!r:.200}, oracle {got!r:.200}")
    for name in [s.name for s in topology.spouts] + [b.name for b in topology.bolts]:
        _differ_outputs(name, model, oracle, lines)
    for sink in topology.sinks:
        if isinstance(sink.target, Table | Topic):
            want_rows, got_rows = model.table(sink.name), oracle.table(sink.name)
            if _append_target(topology, sink.name):
                want_rows, got_rows = _canonical(want_rows), _canonical(got_rows)
            _differ(f"table {sink.name}", _multiset(want_rows.items()),
                    _multiset(got_rows.items()), lines)
        else:
            _differ(f"sink {sink.name} received", _multiset(model.sink_rows(sink.name)),
                    _multiset(oracle.sink_rows[sink.name]), lines)
        _differ(f"rejected by {sink.name}",
                _multiset((r.origin, r.stage, r.record) for r in model.rejected_rows[sink.name]),
                _multiset((r.origin, r.stage, r.record)
                          for r in oracle.rejected_rows[sink.name]), lines)
    _differ("dead letter", _multiset(_letter(d) for d in model.dead_letters),
            _multiset(_letter(d) for d in oracle.dead_letters), lines)
    _differ("late", _multiset(_letter(d) for d in model.late),
            _multiset(_letter(d) for d in oracle.late), lines)
    if len(lines) > limit:
        lines[limit:] = [f"... and {len(lines) - limit} more"]
    return lines


_NONE: Any = type("Absent", (), {"__repr__": lambda self: "<absent>"})()


def _letter(d: Any) -> tuple[Any, ...]:
    """A dead letter or late record without its error text."""
    return (d.node, d.topic, d.stage, d.message, d.details)


def oracle_disagreements(topology: Topology, messages: Sequence[Message], limit: int = 20
                         ) -> list[str]:
    """:func:`model_disagreements` of both models run over ``messages``; with
    ``on_error="fail"``, where each halts (node, stage and origin) is compared instead."""
    model_halt = oracle_halt = None
    try:
        model = run_model(topology, messages)
    except RecordHalt as exc:
        model_halt = exc
    try:
        oracle = run_oracle(topology, messages)
    except OracleHalt as exc:
        oracle_halt = exc
    if model_halt is None and oracle_halt is None:
        return model_disagreements(model, oracle, limit)
    if model_halt is None or oracle_halt is None:
        return [f"halts: model {model_halt or 'runs to the end'}, oracle "
                f"{oracle_halt or 'runs to the end'}"]
    (topic, partition), offset = oracle_halt.origin
    where = f"{oracle_halt.node}: {oracle_halt.stage} failed on the record at " \
        f"{topic}:{partition}:{offset}:"
    return [] if str(model_halt).startswith(where) else [
        f"halts: model {model_halt}, oracle {oracle_halt}"]


Rows = Mapping[tuple[Any, ...], Mapping[str, Any]]
"""A table's content: key tuple -> row."""


def _compare_rows(sink: str, want_rows: Rows, table: Rows, result: Comparison,
                  note: Callable[[Difference], None]) -> None:
    """A missing row is lost, an extra one duplicated, a different one wrong."""
    keys = sorted(set(want_rows) | set(table), key=repr)
    result.keys_compared += len(keys)
    for key in keys:
        want_row, got_row = want_rows.get(key), table.get(key)
        if want_row is not None and got_row is not None and dict(want_row) == dict(got_row):
            continue
        if got_row is None:
            result.lost += 1
            note(Difference(sink, key, want_row, None, "lost"))
        elif want_row is None:
            result.duplicated += 1
            note(Difference(sink, key, None, got_row, "duplicated"))
        else:
            result.wrong += 1
            note(Difference(sink, key, want_row, got_row, "wrong"))


def compare_tables(expected: Mapping[str, Rows], tables: Mapping[str, Rows],
                   limit: int = 20) -> Comparison:
    """Sink tables against expected rows (a table missing from ``tables`` is all lost)."""
    result = Comparison()

    def note(d: Difference) -> None:
        if len(result.differences) < limit:
            result.differences.append(d)

    for sink, want_rows in expected.items():
        _compare_rows(sink, want_rows, tables.get(sink, {}), result, note)
    return result


# ------------------------------------------------------------------ independent checks

_LETTERS = re.compile(r"[^\W\d_]+")


def wordcount_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """``word_counts`` as a plain :class:`collections.Counter` of the lowercase letter runs
    of every UTF-8 line: written apart from the topology and the model (no hailstorm
    code), so a bug they share still shows."""
    counts: Counter[str] = Counter()
    for message in messages:
        try:
            text = (message.value or b"").decode("utf-8")
        except UnicodeDecodeError:
            continue
        counts.update(_LETTERS.findall(text.lower()))
    return {"word_counts": {(w,): {"word": w, "count": n} for w, n in counts.items()}}


def _spending(messages: Iterable[Message]) -> Iterator[dict[str, Any]]:
    """The JSON objects of ``messages`` with a string ``user`` and an integer ``amount``."""
    for message in messages:
        try:
            event = json.loads(message.value or b"")
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("user"), str) \
                and type(event.get("amount")) is int:
            yield event


def user_totals_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """``user_totals`` summed by hand from the JSON events (see :func:`wordcount_by_hand`)."""
    spent: Counter[str] = Counter()
    events: Counter[str] = Counter()
    for event in _spending(messages):
        spent[event["user"]] += event["amount"]
        events[event["user"]] += 1
    return {"user_totals": {(u,): {"user_id": u, "spent": spent[u], "events": n}
                            for u, n in events.items()}}


def top_spenders_by_hand(messages: Iterable[Message], top: int = 10) -> dict[str, Rows]:
    """``top_spenders`` ranked by hand from the JSON events (see :func:`wordcount_by_hand`):
    each country's ``top`` users by what they spent there, most first, ties by user id."""
    spent: dict[str, Counter[str]] = {}
    for event in _spending(messages):
        if event["amount"] >= 0 and isinstance(event.get("country"), str):
            spent.setdefault(event["country"], Counter())[event["user"]] += event["amount"]
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for country, totals in spent.items():
        best = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:top]
        for rank, (user, total) in enumerate(best, start=1):
            rows[(country, rank)] = {"country": country, "rank": rank, "user_id": user,
                                     "spent": total}
    return {"top_spenders": rows}


def wordstream_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """``wordstream``'s ``totals`` topic as :func:`wordcount_by_hand` counts it: the newest
    record per word is ``{"count": n, "word": w}`` in compact JSON."""
    counts = wordcount_by_hand(messages)["word_counts"]
    totals: dict[tuple[Any, ...], dict[str, Any]] = {}
    for (word,), row in counts.items():
        key = word.encode()
        value = f'{{"count":{row["count"]},"word":{json.dumps(word, ensure_ascii=False)}}}'
        totals[(key,)] = {"key": key, "value": value.encode()}
    return {"totals": totals}


BY_HAND: dict[str, Callable[[Iterable[Message]], dict[str, Rows]]] = {
    "wordcount": wordcount_by_hand,
    "wordstream": wordstream_by_hand,
    "user_totals": user_totals_by_hand,
    "top_spenders": top_spenders_by_hand,
}
"""Sink tables computed without the topology's code, by topology name: chaos runs check the
tables against these as well as against :func:`run_model`."""
