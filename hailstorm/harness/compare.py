"""Checking what a run committed: :func:`compare_with_model` names lost, duplicated and wrong
values of the bolt states and sink tables against :func:`hailstorm.model.run_model`,
:func:`compare_tables` compares sink tables with expected rows, such as those the
independent by-hand counts (:data:`BY_HAND`) compute without the topology's code."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hailstorm.harness.results import BoltStates, keyed_append_rows
from hailstorm.model import Message, ModelResult
from hailstorm.topic import Topic
from hailstorm.topology import SinkSpec, Table


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
    """Committed states against the model: totals and the first differences."""

    lost: int = 0
    """Missing units of count (per_key(Count)-like states), or missing keys otherwise."""
    duplicated: int = 0
    wrong: int = 0
    differences: list[Difference] = field(default_factory=list)
    instance_mismatches: list[str] = field(default_factory=list)
    keys_compared: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong or self.instance_mismatches)

    def first(self, n: int = 5) -> list[Difference]:
        return self.differences[:n]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)



def compare_with_model(
    model: ModelResult,
    states: Mapping[str, BoltStates],
    tables: Mapping[str, Mapping[tuple[Any, ...], Mapping[str, Any]]] | None = None,
    limit: int = 20,
) -> Comparison:
    """Lost, duplicated and wrong values of every bolt's committed state vs the model.

    For integer values (``per_key(Count())``-like): a key whose count is lower than the
    model's lost the difference, a higher one was double-counted; a key only the model has
    is lost, one only the runtime has is duplicated. Any other difference is wrong.
    Per-instance states must equal the model's per-instance states too. A bolt routing late
    data is compared without the windows closed at the model's watermark
    (:meth:`ModelResult.comparable`): it may drop those at any time.

    ``tables`` (sink name -> key -> row, as :meth:`TopologyRun.sink_tables` reads them) are
    compared with :meth:`ModelResult.table`: a missing row is lost, an extra one
    duplicated, a different one wrong.
    """
    result = Comparison()

    def note(d: Difference) -> None:
        if len(result.differences) < limit:
            result.differences.append(d)

    for bolt in model.topology.bolts:
        name = bolt.name
        comparable = model.comparable  # a late-routing bolt may have dropped closed windows
        expected = comparable(name, model.bolt_state(name))
        if name not in states:
            result.wrong += 1
            note(Difference(name, None, "a committed state", None, "wrong"))
            continue
        actual = comparable(name, states[name].merged)
        for i, (want, got) in enumerate(zip(model.instance_states(name),
                                            states[name].instances, strict=False)):
            if comparable(name, want) != comparable(name, got):
                result.instance_mismatches.append(f"{name}:{i}")
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
        want_rows = model.table(sink)
        spec = model.topology.node(sink)
        if isinstance(spec, SinkSpec) and isinstance(spec.target, Table | Topic) \
                and spec.target.mode == "append":
            want_rows = keyed_append_rows(((k[0], k[1], k[2]), row)
                                          for k, row in want_rows.items())
        _compare_rows(sink, want_rows, table, result, note)
    return result


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


def user_totals_by_hand(messages: Iterable[Message]) -> dict[str, Rows]:
    """``user_totals`` summed by hand from the JSON events (see :func:`wordcount_by_hand`)."""
    spent: Counter[str] = Counter()
    events: Counter[str] = Counter()
    for message in messages:
        try:
            event = json.loads(message.value or b"")
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("user"), str) \
                and type(event.get("amount")) is int:
            spent[event["user"]] += event["amount"]
            events[event["user"]] += 1
    return {"user_totals": {(u,): {"user_id": u, "spent": spent[u], "events": n}
                            for u, n in events.items()}}


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
}
"""Sink tables computed without the topology's code, by topology name: chaos runs check the
tables against these as well as against :func:`run_model`."""
