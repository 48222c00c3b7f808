"""Declaring topologies: spouts, bolts and sinks wired into a DAG.

A topology lives in a plain Python module that defines a module-level ``topology``::

    topology = Topology("wordcount")
    lines = topology.spout("lines", topic="words", decoder="text",
                           explode=lambda line: re.findall(r"[a-z]+", line.lower()))
    counts = topology.bolt("counts", inputs=[lines], key=lambda word: word,
                           state=per_key(Count()), lift=lambda word: 1,
                           emit=lambda word, count: [(word, count)], parallelism=2)
    topology.sink("word_counts", inputs=[counts], target=Table(...))

Everything here is a pure description plus the pure per-tuple functions the distributed
runtime and the sequential reference model (:mod:`hailstorm.model`) share:
:meth:`SpoutSpec.tuples_of`, :meth:`BoltSpec.contribution`, :meth:`BoltSpec.absorb`,
:meth:`BoltSpec.value_for_emit`, :meth:`BoltSpec.outputs` (plus the batch helpers built on
them) and :meth:`Table.to_row`. Mistakes raise :class:`TopologyError` naming the module,
the node and the fix.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import linecache
import os
import re
import sys
import traceback
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any, ClassVar, Literal

from hailstorm.decoders import DecodeError, Decoder, DecoderSpec, resolve_decoder
from hailstorm.monoids import KeyedMap, Monoid, Window
from hailstorm.routing import KeyRouter, partition_by_instance
from hailstorm.sqltypes import ColumnRule, column_rule

__all__ = [
    "BoltSpec",
    "Collect",
    "Combined",
    "Edge",
    "Node",
    "RecordFailed",
    "RowError",
    "SinkSpec",
    "SinkTarget",
    "SpoutSpec",
    "Table",
    "Topology",
    "TopologyError",
    "graph_of",
    "load_topology",
    "render_dot",
    "render_text",
]

NAME_PATTERN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
"""Topology, node, table and column names: safe as ZooKeeper path segments, Kafka topic
names and unquoted SQL identifiers."""

TOPIC_PATTERN = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
"""Kafka's rule for topic names (``.`` and ``..`` are also refused)."""

Routing = Literal["key", "all"]


# --------------------------------------------------------------------------- errors


class TopologyError(Exception):
    """A topology (or its module) is invalid.

    The message reads ``<module>: topology 'x', bolt 'y': <problem>. Fix: <fix>``; the
    parts are also available as attributes (``module`` is filled in by
    :func:`load_topology`).
    """

    def __init__(
        self,
        problem: str,
        *,
        fix: str = "",
        node: str | None = None,
        topology: str | None = None,
        module: str | None = None,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.node = node
        self.topology = topology
        self.module = module

    def __str__(self) -> str:
        where = []
        if self.topology:
            where.append(f"topology {self.topology!r}")
        if self.node:
            where.append(self.node)
        text = self.problem.rstrip(".")
        if where:
            text = f"{', '.join(where)}: {text}"
        if self.module:
            text = f"{self.module}: {text}"
        if self.fix:
            text = f"{text}. Fix: {self.fix.rstrip('.')}."
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (self.problem, self.fix, self.node, self.topology, self.module))


def _rebuild_error(
    problem: str, fix: str, node: str | None, topology: str | None, module: str | None
) -> TopologyError:
    return TopologyError(problem, fix=fix, node=node, topology=topology, module=module)


class RowError(ValueError):
    """A sink tuple cannot be turned into a row of its table."""


REJECTED_SUFFIX = "_rejected"
"""A table's :attr:`Table.rejected_table` is its name and this."""

OnError = Literal["quarantine", "fail"]
ON_ERROR_POLICIES: tuple[OnError, ...] = ("quarantine", "fail")


class RecordFailed(Exception):
    """A user function failed on one record (a bad record, a "poison pill").

    ``node`` is the node whose function failed, ``stage`` which function (``key``,
    ``lift``, ``event_time``, ``monoid`` for a value the state's monoid refuses, ``emit``,
    ``row``) and ``error`` the original exception as text. Per the topology's ``on_error``
    policy the runtime and :func:`~hailstorm.model.run_model` quarantine the record (a dead
    letter) or stop the topology.
    """

    def __init__(self, node: str, stage: str, original: BaseException) -> None:
        self.node = node
        self.stage = stage
        self.error = f"{type(original).__name__}: {original}"
        super().__init__(f"{node}: {stage} failed: {self.error}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_failure, (self.node, self.stage, self.error))


def _rebuild_failure(node: str, stage: str, error: str) -> RecordFailed:
    failure = RecordFailed(node, stage, Exception())
    failure.error = error
    failure.args = (f"{node}: {stage} failed: {error}",)
    return failure


def _check_name(name: object, what: str, node: str | None, topology: str | None) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise TopologyError(
            f"{what} {name!r} is not a valid name (it must match {NAME_PATTERN.pattern}: "
            "lowercase letters, digits and '_', not starting with a digit, at most 63 "
            "characters) because it becomes a ZooKeeper path segment, part of Kafka topic "
            "names and an SQL identifier",
            fix=f"rename it, e.g. {_suggest_name(name)!r}",
            node=node,
            topology=topology,
        )


def _suggest_name(name: object) -> str:
    text = re.sub(r"[^a-z0-9_]+", "_", str(name).lower()).strip("_") or "name"
    if text[0].isdigit():
        text = f"_{text}"
    return text[:63]


def check_topic_name(topic: object, what: str, node: str | None, topology: str | None) -> None:
    if not isinstance(topic, str) or not TOPIC_PATTERN.match(topic) or topic in {".", ".."}:
        raise TopologyError(
            f"{what} {topic!r} is not a valid Kafka topic name (1-249 characters from "
            "a-z A-Z 0-9 . _ -, and not '.' or '..')",
            fix="use a name such as 'page-views' or 'words'",
            node=node,
            topology=topology,
        )


def function_name(function: Callable[..., Any] | None) -> str:
    """A short readable name: the qualified name, or a lambda's own source text."""
    if function is None:
        return "-"
    name = getattr(function, "__qualname__", None) or type(function).__name__
    if getattr(function, "__name__", None) == "<lambda>":
        return _lambda_source(function) or name
    return name


def _lambda_source(function: Callable[..., Any]) -> str | None:
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    try:
        source = "".join(linecache.getlines(code.co_filename))
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    arguments = list(code.co_varnames[: code.co_argcount])
    candidates = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Lambda)
        and node.lineno == code.co_firstlineno
        and [a.arg for a in node.args.args] == arguments
    ]
    if len(candidates) != 1:
        return None
    segment = ast.get_source_segment(source, candidates[0])
    if segment is None:
        return None
    text = " ".join(segment.split())
    return text if len(text) <= 72 else text[:69] + "..."


# --------------------------------------------------------------------------- sinks


class SinkTarget(ABC):
    """Where a sink writes. Executing targets against databases is the sink runtime's job;
    a target here is a validated description."""

    @abstractmethod
    def describe(self) -> str:
        """One line for ``hailstorm show``."""

    @property
    def latest_per_key(self) -> bool:
        """True when the target keeps only the newest row (record) per key, so how many
        intermediate rows it receives does not change what it holds."""
        return False


@dataclass(frozen=True, eq=False)
class Collect(SinkTarget):
    """Keep the rows in memory: for tests and :func:`hailstorm.model.run_model`."""

    def describe(self) -> str:
        return "collect (in memory)"


TableMode = Literal["upsert", "merge", "append"]
_MODES: tuple[str, ...] = ("upsert", "merge", "append")
_NUMERIC_TYPES = {
    "smallint",
    "integer",
    "int",
    "bigint",
    "real",
    "double precision",
    "float",
    "numeric",
    "decimal",
}
_OTHER_TYPES = {
    "text",
    "varchar",
    "boolean",
    "bytea",
    "date",
    "timestamp",
    "timestamptz",
    "json",
    "jsonb",
}
_TYPE_PATTERN = re.compile(r"^([a-z ]+?)\s*(\(\s*\d+\s*(,\s*\d+\s*)?\))?$")


def _base_type(sql_type: str) -> str | None:
    match = _TYPE_PATTERN.match(sql_type.strip().lower())
    if not match:
        return None
    base = " ".join(match.group(1).split())
    return base if base in _NUMERIC_TYPES or base in _OTHER_TYPES else None


@dataclass(frozen=True, eq=False)
class Table(SinkTarget):
    """A database table a sink keeps up to date (validated description, no I/O).

    ``columns`` maps column name -> SQL type, in row order. ``mode``:

    * ``"upsert"``: one row per ``key``; a new row for a key replaces the old one
      (use with bolts that emit running totals);
    * ``"merge"``: one row per ``key``; non-key columns (all numeric) are added to the
      stored ones (use with bolts that emit increments);
    * ``"append"``: every tuple adds a row (no ``key``).

    ``row`` turns a tuple into ``{column: value}``; by default tuples/lists map
    positionally onto ``columns`` and dicts pass through. ``url`` names the database
    (``None``: the sink job's default, SQLite).
    """

    name: str
    columns: Mapping[str, str]
    key: Sequence[str] = ()
    mode: TableMode = "upsert"
    url: str | None = None
    row: Callable[[Any], Mapping[str, Any]] | None = None
    column_names: tuple[str, ...] = field(init=False, repr=False)
    value_columns: tuple[str, ...] = field(init=False, repr=False)
    column_rules: tuple[ColumnRule, ...] = field(init=False, repr=False)
    """What each column can hold, in column order (see :meth:`to_row`)."""

    def __post_init__(self) -> None:
        node = f"table {self.name!r}"
        _check_name(self.name, "table name", node, None)
        longest = 63 - len(REJECTED_SUFFIX)
        if len(self.name) > longest:
            raise TopologyError(
                f"table name {self.name!r} is longer than {longest} characters, so the name "
                f"of its table of rejected rows, {self.rejected_table!r}, would not fit an "
                "SQL identifier (63)",
                fix=f"shorten it, e.g. {self.name[:longest]!r}",
                node=node,
            )
        if not isinstance(self.columns, Mapping) or not self.columns:
            raise TopologyError(
                "columns must be a non-empty dict of column name -> SQL type",
                fix='pass columns={"word": "text", "count": "bigint"}',
                node=node,
            )
        for column, sql_type in self.columns.items():
            _check_name(column, "column", node, None)
            if not isinstance(sql_type, str) or _base_type(sql_type) is None:
                raise TopologyError(
                    f"column {column!r} has unsupported type {sql_type!r}",
                    fix="use one of " + ", ".join(sorted(_NUMERIC_TYPES | _OTHER_TYPES)),
                    node=node,
                )
        key = (self.key,) if isinstance(self.key, str) else tuple(self.key)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "columns", dict(self.columns))
        object.__setattr__(self, "column_names", tuple(self.columns))
        added = set(self.columns) - set(key) if self.mode == "merge" else set()
        object.__setattr__(self, "column_rules", tuple(
            column_rule(sql_type, nullable=column not in key and column not in added)
            for column, sql_type in self.columns.items()))
        if self.mode not in _MODES:
            raise TopologyError(
                f"mode {self.mode!r} is not one of {', '.join(_MODES)}",
                fix='use mode="upsert" for running totals, "merge" for increments, '
                '"append" for one row per tuple',
                node=node,
            )
        for column in key:
            if column not in self.columns:
                raise TopologyError(
                    f"key column {column!r} is not among the columns ({', '.join(self.columns)})",
                    fix=f"add {column!r} to columns or remove it from key",
                    node=node,
                )
        if len(set(key)) != len(key):
            raise TopologyError(
                f"key {list(key)} lists a column twice", fix="list each column once", node=node
            )
        if self.mode in ("upsert", "merge") and not key:
            raise TopologyError(
                f"{self.mode} mode needs key columns to find the row to update",
                fix='pass key=["..."] naming the identifying columns, or use mode="append"',
                node=node,
            )
        if self.mode == "append" and key:
            raise TopologyError(
                "append mode writes every tuple as a new row, so key is not used",
                fix='drop key=..., or use mode="upsert"/"merge" for one row per key',
                node=node,
            )
        values = tuple(c for c in self.columns if c not in key)
        object.__setattr__(self, "value_columns", values)
        if self.mode == "merge":
            for column in values:
                if _base_type(self.columns[column]) not in _NUMERIC_TYPES:
                    raise TopologyError(
                        f"merge mode adds non-key columns together, but {column!r} has "
                        f"type {self.columns[column]!r}",
                        fix="make every non-key column numeric (bigint, double precision, "
                        '...), add it to key, or use mode="upsert"',
                        node=node,
                    )
        if self.url is not None and not isinstance(self.url, str):
            raise TopologyError(
                f"url must be a string, got {self.url!r}", fix="pass a URL string", node=node
            )
        if self.row is not None and not callable(self.row):
            raise TopologyError(
                f"row must be a function tuple -> dict of column values, got {self.row!r}",
                fix="pass row=lambda t: {...} or leave it out for positional tuples",
                node=node,
            )

    @property
    def rejected_table(self) -> str:
        """``<name>_rejected``: the sink's tuples that did not become rows of this table."""
        return self.name + REJECTED_SUFFIX

    def to_row(self, t: Any, *, check: bool = True) -> dict[str, Any]:
        """The ``{column: value}`` row for sink tuple ``t``; raises :class:`RowError` when
        ``row`` fails, the shape does not fit the columns, or (``check``) a value cannot be
        stored in its column (its type, an integer's range, null in a key column or a
        merged one, an unhashable key)."""
        row = self._shaped(t)
        if check:
            self._check_row(row)
        return row

    def _check_row(self, row: Mapping[str, Any]) -> None:
        for column, rule in zip(self.column_names, self.column_rules, strict=True):
            problem = rule.problem(row[column])
            if problem is not None:
                raise RowError(f"table {self.name!r}: column {column!r} = "
                               f"{row[column]!r:.80} {problem}")
        try:
            hash(self.key_of(row))
        except TypeError:
            raise RowError(f"table {self.name!r}: the key {self.key_of(row)!r:.80} is not "
                           "hashable") from None

    def rows_fit(self, rows: Sequence[Sequence[Any]]) -> bool:
        """True when every row (values in column order) passes :meth:`to_row`'s checks,
        checked a column at a time; False: some row may not (check them one by one)."""
        for index, rule in enumerate(self.column_rules):
            if not rule.column_fits(list(map(itemgetter(index), rows))):
                return False
        return True

    def _shaped(self, t: Any) -> dict[str, Any]:
        if self.row is None:
            value = t
        else:
            try:
                value = self.row(t)
            except Exception as exc:
                raise RowError(
                    f"table {self.name!r}: the row function failed: {type(exc).__name__}: {exc}"
                ) from exc
        if isinstance(value, Mapping):
            row = dict(value)
            if row.keys() != self.columns.keys():
                missing = [c for c in self.column_names if c not in row]
                extra = [c for c in row if c not in self.columns]
                raise RowError(
                    f"table {self.name!r}: row {row!r} does not match the columns "
                    f"({', '.join(self.column_names)}): missing {missing}, unexpected {extra}"
                )
            return row
        if isinstance(value, tuple | list):
            if len(value) != len(self.column_names):
                raise RowError(
                    f"table {self.name!r}: tuple {value!r} has {len(value)} values but the "
                    f"table has {len(self.column_names)} columns "
                    f"({', '.join(self.column_names)})"
                )
            return dict(zip(self.column_names, value, strict=True))
        raise RowError(
            f"table {self.name!r}: cannot make a row out of {value!r}; emit tuples or dicts, "
            "or give the Table a row= function"
        )

    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        """The key tuple of ``row`` (in ``key`` order)."""
        return tuple(row[c] for c in self.key)

    @property
    def latest_per_key(self) -> bool:
        return self.mode == "upsert"

    def describe(self) -> str:
        columns = ", ".join(f"{c} {t}" for c, t in self.columns.items())
        text = f"table {self.name}({columns}) {self.mode}"
        if self.key:
            text += f" on ({', '.join(self.key)})"
        if self.url:
            text += f" at {_redact_url(self.url)}"
        return text


def _redact_url(url: str) -> str:
    from hailstorm.sinks.urls import redact  # the one redaction rule (sinks import lazily)

    return redact(url)


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True, eq=False)
class SpoutSpec:
    """Reads one Kafka topic; one instance per partition at run time."""

    name: str
    topic: str
    decoder: Decoder
    explode: Callable[[Any], Iterable[Any] | None] | None
    dead_letter: str
    kind: ClassVar[str] = "spout"

    def tuples_of(self, raw: bytes | None) -> list[Any]:
        """Decode a message value and explode it into tuples.

        Raises :class:`~hailstorm.decoders.DecodeError` when the decoder or the explode
        function fails, a generator explode included (the message belongs in the
        dead-letter topic). An explode function returning something that is not a
        collection of tuples is a bug in the topology and raises ``TypeError``.
        """
        value = self.decoder.decode(raw)
        if self.explode is None:
            return [value]
        try:
            exploded = _drained(self.explode(value))
        except Exception as exc:
            raise DecodeError(
                f"spout {self.name!r}: explode failed: {type(exc).__name__}: {exc}",
                exc,
                stage="explode",
            ) from exc
        return _as_output_list(exploded, f"spout {self.name!r}: explode")

    def tuples_of_many(self, raws: Sequence[bytes | None]) -> list[list[Any] | DecodeError]:
        """:meth:`tuples_of` for a batch: each failed message yields its DecodeError.

        The batch is decoded and exploded a batch at a time (no per-message Python of
        hailstorm's own); when anything fails, or an explode returns something other
        than a list, it is done again message by message, which tells the failures apart
        (so the decoder and explode must be deterministic, as replays need anyway)."""
        fast = self._tuples_of_batch(raws)
        if fast is not None:
            return list(fast)
        results: list[list[Any] | DecodeError] = []
        for raw in raws:
            try:
                results.append(self.tuples_of(raw))
            except DecodeError as exc:
                results.append(exc)
        return results

    def _tuples_of_batch(self, raws: Sequence[bytes | None]) -> list[list[Any]] | None:
        """Every message's tuples when nothing fails and every explode returns a list
        (else None: the caller takes them one by one)."""
        if None in raws:  # a tombstone: its DecodeError is for tuples_of to make
            return None
        try:
            values = self.decoder.decode_all(raws)  # type: ignore[arg-type]
            if self.explode is None:
                return [[value] for value in values]
            exploded = list(map(self.explode, values))
        except Exception:
            return None
        if not set(map(type, exploded)) <= {list}:
            return None
        return exploded  # type: ignore[return-value]  # every one a list


def _drained(produced: Any) -> Any:
    """A generator's (or other iterator's) items as a list, so that an exception it raises
    while producing them is the user function's failure; anything else unchanged."""
    return list(produced) if isinstance(produced, Iterator) else produced


def _as_output_list(produced: Any, what: str) -> list[Any]:
    kind = type(produced)
    if kind is list:
        return produced
    if produced is None:
        return []
    if kind is tuple or isinstance(produced, str | bytes | bytearray | Mapping):
        raise TypeError(
            f"{what} returned {produced!r}; it must return a list of tuples, e.g. "
            f"[{produced!r}] for a single tuple (or None/[] for none)"
        )
    try:
        return list(produced)
    except TypeError:
        raise TypeError(
            f"{what} returned {produced!r}; it must return a list of tuples (or None/[] for none)"
        ) from None


@dataclass(frozen=True, eq=False)
class BoltSpec:
    """Keeps commutative-monoid state and emits tuples.

    Per tuple ``t`` the runtime:

    1. computes the state contribution (:meth:`contribution`): for keyed state (a
       ``KeyedMap``) the pair ``(key(t), v)``, otherwise ``(None, v)``, where
       ``v = lift(t)``, or ``window.lift(event_time(t), lift(t))`` for window state;
    2. absorbs it into the state it belongs to (:meth:`absorb`);
    3. reads the value to emit from the state(s) (:meth:`value_for_emit`: the merged
       value for that key, or the whole state) and calls ``emit(t, value)``
       (:meth:`outputs`).

    With ``parallelism > 1`` each instance holds the part of the state for the keys it
    owns (see :mod:`hailstorm.routing`); emit sees that instance's state.

    With ``preaggregate`` the spouts feeding the bolt do steps 1 and the combining part of 2
    for a whole fetched batch (:meth:`combine_contributions`): the bolt receives one
    contribution per key (and window) per batch, and emit runs once per contribution with
    the batch's last tuple of that group.
    """

    name: str
    inputs: tuple[str, ...]
    state: Monoid[Any]
    lift: Callable[[Any], Any]
    emit: Callable[[Any, Any], Iterable[Any] | None] | None
    key: Callable[[Any], Any] | None
    parallelism: int
    event_time: Callable[[Any], Any] | None
    preaggregate: bool = False
    """Spouts combine contributions per key and batch before sending them (declared safe
    by the topology's author; checked by :meth:`Topology.validate`)."""
    keyed: bool = field(init=False)
    """True when the state is a ``KeyedMap`` (state = dict key -> value)."""
    value_monoid: Monoid[Any] = field(init=False, repr=False)
    """The monoid of one contribution: the ``KeyedMap``'s inner monoid, or the state."""
    window: Window | None = field(init=False, repr=False)
    """The window monoid when contributions are windowed (lift takes the event time)."""
    additive: bool = field(init=False, repr=False)
    """Keyed sums and counts: contributions are numbers added in place."""
    instance_of_key: KeyRouter = field(init=False, repr=False)
    """The instance that owns a routing key (memoized :func:`~hailstorm.routing.route`)."""
    _check_value: Callable[[Any], None] | None = field(init=False, repr=False)
    _check_key: Callable[[Any], None] | None = field(init=False, repr=False)
    _key_classes: tuple[type, ...] | None = field(init=False, repr=False)
    kind: ClassVar[str] = "bolt"

    def __post_init__(self) -> None:
        keyed_map = self.state if isinstance(self.state, KeyedMap) else None
        value_monoid = keyed_map.inner if keyed_map is not None else self.state
        window = value_monoid if isinstance(value_monoid, Window) else None
        object.__setattr__(self, "keyed", keyed_map is not None)
        object.__setattr__(self, "additive", keyed_map is not None and keyed_map.additive)
        object.__setattr__(self, "value_monoid", value_monoid)
        object.__setattr__(self, "window", window)
        object.__setattr__(self, "instance_of_key", KeyRouter(max(1, self.parallelism), 1 << 18))
        lifted = window.inner if window is not None else value_monoid
        checks = type(lifted).check is not Monoid.check
        object.__setattr__(self, "_check_value", lifted.check if checks else None)
        object.__setattr__(self, "_check_key",
                           keyed_map.check_key if keyed_map is not None else None)
        object.__setattr__(self, "_key_classes",
                           keyed_map.key_classes if keyed_map is not None else None)

    @property
    def routing(self) -> Routing:
        """``"key"`` when tuples are routed by the key function, else ``"all"``."""
        return "key" if self.key is not None else "all"

    # -- the shared per-tuple functions -------------------------------------------------

    def instance_for(self, t: Any) -> int:
        """The instance (``0 <= i < parallelism``) that receives tuple ``t``: instance 0
        when ``key`` fails on it (that instance then quarantines it, see
        :meth:`contribution`)."""
        if self.parallelism == 1 or self.key is None:
            return 0
        try:
            return self.instance_of_key(self.key(t))
        except Exception:
            return 0

    def split_by_instance(self, tuples: Sequence[Any]) -> list[list[Any]]:
        """Tuples grouped per receiving instance (order kept within each group)."""
        return partition_by_instance(tuples, self.key, self.parallelism)

    def contribution(self, t: Any) -> tuple[Any, Any]:
        """``(state key or None, value)``: what tuple ``t`` adds to the state.

        Raises :class:`RecordFailed` when a user function fails on ``t`` (``key``, ``lift``,
        ``event_time``) or the state's monoid refuses the lifted value or the key
        (``monoid``, see :meth:`~hailstorm.monoids.Monoid.check`); nothing is absorbed then.
        """
        key = None
        value = _NO_VALUE
        if self.key is not None and (self.keyed or self.parallelism > 1):
            try:
                key = self.key(t)
                if type(key) not in _PLAIN_KEYS:
                    self._check_routable(key)
            except Exception as exc:
                raise RecordFailed(self.name, "key", exc) from exc
            if self._key_classes is not None and not isinstance(key, self._key_classes):
                self._refused_by_monoid(self._check_key, key)  # type: ignore[arg-type]
        try:
            value = self.lift(t)
            if self._check_value is not None:
                self._check_value(value)
        except Exception as exc:
            raise RecordFailed(self.name, "lift" if value is _NO_VALUE else "monoid",
                               exc) from exc
        if self.window is not None:
            try:
                event_time = self.event_time(t)  # type: ignore[misc]
                self.window.check_time(event_time)
                value = self.window.lift(event_time, value)
            except Exception as exc:
                raise RecordFailed(self.name, "event_time", exc) from exc
        return (key if self.keyed else None), value

    def _check_routable(self, key: Any) -> None:
        """Raise ``TypeError`` for a key that cannot be a dict key or be routed."""
        hash(key)
        if self.parallelism > 1:
            self.instance_of_key(key)

    def _keys_and_values(self, tuples: Sequence[Any]) -> tuple[list[Any] | None, list[Any]]:
        """``key(t)`` (None when the bolt neither keys nor routes by key) and ``lift(t)`` of
        every tuple, checked as :meth:`contribution` checks them but a batch at a time (no
        window state); raises whatever a function or check raises first."""
        values = list(map(self.lift, tuples))
        if self._check_value is not None:
            self.value_monoid.check_many(values)
        if self.key is None or not (self.keyed or self.parallelism > 1):
            return None, values
        keys = list(map(self.key, tuples))
        key_types = set(map(type, keys))
        if not key_types <= _PLAIN_KEYS:
            for key in keys:
                self._check_routable(key)
        if self._key_classes is not None and not key_types <= set(self._key_classes):
            self.state.check_keys(keys)  # type: ignore[attr-defined]
        return keys, values

    def _unwindowed_contributions(self, tuples: Sequence[Any]) -> list[tuple[Any, Any]]:
        """:meth:`contribution` of every tuple (no window state), a batch at a time."""
        keys, values = self._keys_and_values(tuples)
        if keys is not None and self.keyed:
            return list(zip(keys, values, strict=True))
        return list(zip(repeat(None), values))

    def _refused_by_monoid(self, check: Callable[[Any], None], item: Any) -> None:
        try:
            check(item)
        except Exception as exc:
            raise RecordFailed(self.name, "monoid", exc) from exc

    def contributions(
        self, tuples: Sequence[Any]
    ) -> tuple[list[tuple[Any, Any]], Sequence[int], list[tuple[int, RecordFailed]]]:
        """:meth:`contribution` of a batch: ``(contributions, the index of the tuple of
        each, (index, failure) of the other tuples)``."""
        contribution = self.contribution
        try:
            if self.window is None:  # functions mapped, values checked, a batch at a time
                return self._unwindowed_contributions(tuples), range(len(tuples)), []
            return [contribution(t) for t in tuples], range(len(tuples)), []
        except Exception:
            pass  # one by one: the failing tuples are named
        kept: list[tuple[Any, Any]] = []
        indices: list[int] = []
        failures: list[tuple[int, RecordFailed]] = []
        for index, t in enumerate(tuples):
            try:
                kept.append(contribution(t))
            except RecordFailed as failure:
                failures.append((index, failure))
                continue
            indices.append(index)
        return kept, indices, failures

    def absorb(self, state: Any, key: Any, value: Any) -> Any:
        """Merge a contribution into ``state`` (owned by the caller; may be mutated)."""
        if self.keyed:
            return self.state.absorb(state, {key: value})
        return self.state.absorb(state, value)

    def value_for_emit(self, key: Any, states: Sequence[Any]) -> Any:
        """What ``emit`` receives: the merged value of ``key`` (keyed state) or the
        merged whole state, across ``states`` (e.g. ``(A, B)`` while a snapshot is
        pending). Do not mutate the result."""
        if self.keyed:
            present = [s[key] for s in states if key in s]
            if len(present) == 1:
                return present[0]
            if not present:
                return self.value_monoid.empty()
            return self.value_monoid.combine_all(present)
        if len(states) == 1:
            return states[0]
        return self.state.combine_all(states)

    def outputs(self, t: Any, value: Any) -> list[Any]:
        """``emit(t, value)`` as a list of output tuples (empty without emit); raises
        :class:`RecordFailed` when emit fails."""
        if self.emit is None:
            return []
        try:
            produced = self.emit(t, value)
            if type(produced) is list:
                return produced
            produced = _drained(produced)
        except Exception as exc:
            raise RecordFailed(self.name, "emit", exc) from exc
        return _as_output_list(produced, f"bolt {self.name!r}: emit")

    # -- single-state conveniences (the model; a runtime with no snapshot pending) -------

    def process(self, state: Any, t: Any) -> tuple[Any, list[Any], RecordFailed | None]:
        """Absorb ``t`` into ``state``; return ``(state, output tuples, failure)``.

        A failure before absorbing (:meth:`contribution`) leaves the state as it was; a
        failing emit keeps the absorbed state and outputs nothing.
        """
        try:
            key, value = self.contribution(t)
        except RecordFailed as failure:
            return state, [], failure
        state = self.absorb(state, key, value)
        if self.emit is None:
            return state, [], None
        try:
            return state, self.outputs(t, self.value_for_emit(key, (state,))), None
        except RecordFailed as failure:
            return state, [], failure

    def process_batch(self, state: Any, tuples: Sequence[Any]) -> tuple[Any, list[tuple[int, Any]]]:
        """Absorb ``tuples`` in order; return ``(state, [(tuple index, output), ...])``.

        Without ``emit`` the batch is pre-aggregated and absorbed once. Failing tuples are
        skipped (see :meth:`process`).
        """
        if self.emit is None:
            return self.absorb_all(state, tuples), []
        emitted: list[tuple[int, Any]] = []
        for index, t in enumerate(tuples):
            state, produced, _failure = self.process(state, t)
            emitted.extend((index, out) for out in produced)
        return state, emitted

    def absorb_all(self, state: Any, tuples: Sequence[Any]) -> Any:
        """Absorb many tuples without emitting (pre-aggregates per key); failing tuples
        are skipped."""
        return self.absorb_contributions(state, self.contributions(tuples)[0])

    def absorb_contributions(self, state: Any, contributions: Iterable[tuple[Any, Any]]) -> Any:
        """Absorb many ``(key, value)`` contributions without emitting (pre-aggregates per
        key; the values are not mutated)."""
        if self.additive:  # numbers: add in place
            get = state.get
            for key, value in contributions:
                state[key] = get(key, 0) + value
            return state
        if self.keyed:
            inner = self.value_monoid
            update: dict[Any, Any] = {}
            for key, value in contributions:
                if key in update:
                    update[key] = inner.absorb(update[key], value)
                else:  # lift may return a shared value: never mutate it in place
                    update[key] = value if inner.immutable_state else inner.copy(value)
            return self.state.absorb(state, update) if update else state
        monoid = self.state
        for _key, value in contributions:
            state = monoid.absorb(state, value)
        return state

    @property
    def groups_by_key(self) -> bool:
        """The group of a contribution (:meth:`group_of`) is its state key."""
        return self.keyed and self.window is None

    def group_of(self, t: Any, key: Any) -> Any:
        """What pre-aggregation combines and compaction emits once: the state key ``key``
        of ``t``; for unkeyed state routed by ``key`` (``parallelism > 1``) the routing
        key; otherwise one group. With window state the windows of ``t`` are part of it,
        so emit still sees a tuple of every window touched."""
        if not self.keyed:
            key = self.key(t) if self.key is not None and self.parallelism > 1 else None
        if self.window is not None:
            return key, tuple(self.window.window_starts(self.event_time(t)))  # type: ignore[misc]
        return key

    def combine_contributions(self, tuples: Sequence[Any]) -> Combined:
        """Pre-aggregate ``tuples`` (what a spout does for a ``preaggregate`` bolt): one
        combined contribution per group, in the order each group was last seen (keyed
        sums and counts without windows, whose groups are independent: first seen).

        For keyed state the group is the state key; for unkeyed state routed by ``key``
        (``parallelism > 1``) it is the routing key and the state key is ``None``;
        otherwise everything is one group. With window state, tuples of different windows
        are also different groups, so emit still sees a tuple of every window touched.
        Absorbing the result gives exactly the state that absorbing ``tuples`` one by one
        gives; tuples failing :meth:`contribution` are left out and listed in ``failures``.
        """
        if self.groups_by_key and self.additive and tuples:
            combined = _combine_sums_of(self, tuples)
            if combined is not None:
                return combined
        inner = self.value_monoid
        copy = None if inner.immutable_state else inner.copy
        absorb = inner.absorb
        contributions, indices, failures = self.contributions(tuples)
        values: dict[Any, Any] = {}
        last: dict[Any, Any] = {}
        by_key = self.groups_by_key
        group_of = self.group_of
        for index, (key, value) in zip(indices, contributions, strict=True):
            t = tuples[index]
            group = key if by_key else group_of(t, key)
            current = values.get(group, _NO_VALUE)
            if current is _NO_VALUE:  # the first value may be shared: copy before mutating
                values[group] = value if copy is None else copy(value)
            else:
                values[group] = absorb(current, value)
            last.pop(group, None)
            last[group] = t
        window = self.window
        if not self.keyed:
            state_keys: list[Any] = [None] * len(last)
        elif window is None:
            state_keys = list(last)
        else:
            state_keys = [group[0] for group in last]
        return Combined(list(last.values()), state_keys, [values[g] for g in last], failures)


_NO_VALUE: Any = object()

_PLAIN_KEYS = frozenset({str, int, float, bytes, bool, type(None)})
"""Key types that are hashable and routable as they are (others are checked)."""


def _combine_sums_of(spec: BoltSpec, tuples: Sequence[Any]) -> Combined | None:
    """:meth:`BoltSpec.combine_contributions` for keyed sums and counts without windows,
    a batch at a time: the key and lift functions are mapped over the batch and the sums
    taken by C code (``Counter`` when every value is 1). Groups come in first-seen order,
    each with its last tuple. None when a function fails or the monoid refuses a key or
    value (the caller takes the tuple-by-tuple path, which names the culprits)."""
    try:
        keys, values = spec._keys_and_values(tuples)
        assert keys is not None  # keyed state
        value_types = set(map(type, values))
        if value_types == {int} and values.count(1) == len(values):
            sums: dict[Any, Any] = Counter(keys)
        else:
            sums = {}
            get = sums.get
            for key, value in zip(keys, values, strict=True):
                sums[key] = get(key, 0) + value
        last = dict(zip(keys, tuples, strict=True))
    except Exception:
        return None
    return Combined(list(last.values()), list(last), list(sums.values()))


@dataclass(frozen=True, slots=True)
class Combined:
    """Contributions pre-aggregated by :meth:`BoltSpec.combine_contributions`: for each
    group, the last tuple seen (what emit receives), the state key (``None`` for unkeyed
    state) and the combined value (for the bolt's value monoid)."""

    tuples: list[Any]
    keys: list[Any]
    values: list[Any]
    failures: list[tuple[int, RecordFailed]] = field(default_factory=list)
    """``(index in the input, failure)`` of the tuples left out."""

    def __len__(self) -> int:
        return len(self.tuples)


@dataclass(frozen=True, eq=False)
class SinkSpec:
    """Writes the tuples of its inputs to a :class:`SinkTarget`."""

    name: str
    inputs: tuple[str, ...]
    target: SinkTarget
    kind: ClassVar[str] = "sink"
    routing: ClassVar[Routing] = "all"


Node = SpoutSpec | BoltSpec | SinkSpec
NodeRef = SpoutSpec | BoltSpec | SinkSpec | str


@dataclass(frozen=True)
class Edge:
    """A connection ``source -> target``; ``routing`` is ``"key"`` or ``"all"``."""

    source: str
    target: str
    routing: Routing


# --------------------------------------------------------------------------- topology


class Topology:
    """A named DAG of spouts, bolts and sinks; build it with :meth:`spout`,
    :meth:`bolt` and :meth:`sink`.

    ``dead_letter`` is the topic receiving quarantined records: messages no decoder could
    read and records a user function failed on (default ``<name>.dead-letter``; a spout may
    override it for its messages).

    ``on_error`` is the policy for a record that makes a user function raise (decoder,
    explode, key, lift, event_time, emit, a sink's row; or a value the state's monoid
    refuses): ``"quarantine"`` (the default) sends it to the dead-letter topic (a sink's
    row to its table's ``<table>_rejected`` table) and goes on; ``"fail"`` stops the
    topology with the record and the error as the reason.
    """

    def __init__(self, name: str, *, dead_letter: str | None = None,
                 on_error: OnError = "quarantine") -> None:
        _check_name(name, "topology name", None, None)
        self.name = name
        self.dead_letter_topic = dead_letter if dead_letter is not None else f"{name}.dead-letter"
        check_topic_name(self.dead_letter_topic, "dead-letter topic", None, name)
        if on_error not in ON_ERROR_POLICIES:
            raise TopologyError(
                f"on_error {on_error!r} is not one of {', '.join(ON_ERROR_POLICIES)}",
                fix='pass on_error="quarantine" (bad records go to the dead-letter topic) '
                'or on_error="fail" (the topology stops)',
                topology=name,
            )
        self.on_error: OnError = on_error
        self.source: str | None = None
        """How the topology was loaded (the ``load_topology`` ref), if it was."""
        self.module_file: str | None = None
        """Absolute path of the module file that defined it, if known."""
        self._nodes: dict[str, Node] = {}
        self._order: list[Node] | None = None

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, nodes={list(self._nodes)})"

    # -- building -----------------------------------------------------------------------

    def _error(self, problem: str, fix: str, node: str | None = None) -> TopologyError:
        return TopologyError(problem, fix=fix, node=node, topology=self.name, module=self.source)

    def _add(self, node: Node) -> None:
        if node.name in self._nodes:
            other = self._nodes[node.name]
            raise self._error(
                f"the name {node.name!r} is already used by a {other.kind}",
                f"give this {node.kind} a different name",
                f"{node.kind} {node.name!r}",
            )
        self._nodes[node.name] = node
        self._order = None

    def spout(
        self,
        name: str,
        topic: str,
        decoder: DecoderSpec = "bytes",
        explode: Callable[[Any], Iterable[Any] | None] | None = None,
        dead_letter: str | None = None,
    ) -> SpoutSpec:
        """Read ``topic`` (one instance per partition).

        ``decoder``: ``"bytes"``, ``"text"``, ``"json"``, ``Avro(schema)`` or a function
        ``bytes -> value``. ``explode`` maps the decoded value to a list of tuples (by
        default the value itself is the one tuple). Messages that fail to decode or
        explode go to ``dead_letter`` (default: the topology's dead-letter topic).
        """
        label = f"spout {name!r}"
        _check_name(name, "spout name", label, self.name)
        check_topic_name(topic, "topic", label, self.name)
        try:
            resolved = resolve_decoder(decoder)
        except (TypeError, ValueError) as exc:
            raise self._error(
                str(exc),
                "pass decoder='text' (or 'bytes', 'json', Avro(schema), a function)",
                label,
            ) from exc
        if explode is not None and not callable(explode):
            raise self._error(
                f"explode must be a function value -> list of tuples, got {explode!r}",
                "pass explode=lambda value: [...] or leave it out",
                label,
            )
        dead = dead_letter if dead_letter is not None else self.dead_letter_topic
        check_topic_name(dead, "dead-letter topic", label, self.name)
        spec = SpoutSpec(name, topic, resolved, explode, dead)
        self._add(spec)
        return spec

    def _input_names(self, inputs: object, label: str, kind: str) -> tuple[str, ...]:
        if isinstance(inputs, str | SpoutSpec | BoltSpec | SinkSpec):
            inputs = [inputs]
        if not isinstance(inputs, Iterable) or isinstance(inputs, bytes | Mapping):
            raise self._error(
                f"inputs must be a list of spouts/bolts (or their names), got {inputs!r}",
                f"pass inputs=[...] listing the nodes this {kind} reads",
                label,
            )
        names: list[str] = []
        for ref in inputs:
            if isinstance(ref, SinkSpec):
                raise self._error(
                    f"input {ref.name!r} is a sink, and sinks emit nothing",
                    "read from the bolt or spout that feeds that sink instead",
                    label,
                )
            if isinstance(ref, SpoutSpec | BoltSpec):
                if self._nodes.get(ref.name) is not ref:
                    raise self._error(
                        f"input {ref.name!r} belongs to another topology",
                        f"use a node created by this topology ({self.name!r})",
                        label,
                    )
                names.append(ref.name)
            elif isinstance(ref, str):
                names.append(ref)
            else:
                raise self._error(
                    f"input {ref!r} is not a spout, bolt or node name",
                    "list the values returned by topology.spout(...)/topology.bolt(...)",
                    label,
                )
        if not names:
            raise self._error(
                f"a {kind} needs at least one input",
                f"pass inputs=[...] naming the spouts/bolts this {kind} reads",
                label,
            )
        for duplicate in {n for n in names if names.count(n) > 1}:
            raise self._error(
                f"input {duplicate!r} is listed twice, so each of its tuples would arrive twice",
                "list each input once",
                label,
            )
        return tuple(names)

    def bolt(
        self,
        name: str,
        inputs: Sequence[NodeRef],
        state: Monoid[Any],
        lift: Callable[[Any], Any],
        emit: Callable[[Any, Any], Iterable[Any] | None] | None = None,
        key: Callable[[Any], Any] | None = None,
        parallelism: int = 1,
        event_time: Callable[[Any], Any] | None = None,
        preaggregate: bool = False,
    ) -> BoltSpec:
        """Keep ``state`` (a commutative monoid) over the tuples of ``inputs``.

        ``lift(t)`` is the monoid value a tuple contributes; with keyed state
        (``per_key(...)``) it is stored under ``key(t)``, with window state it lands in the
        windows of ``event_time(t)``. ``emit(t, value)`` returns the list of tuples to send
        downstream, where ``value`` is the current value for ``key(t)`` (keyed state) or
        the whole state. ``parallelism > 1`` splits the state by ``key``.

        ``preaggregate=True`` lets the spouts feeding this bolt combine the contributions of
        each fetched batch per key (and window) before sending them, never across a snapshot
        clock. The state is the same; emit then runs once per group and batch with its last
        tuple instead of once per tuple, so only upsert tables may read the bolt, and the
        table keys of emit's rows must depend on ``key(t)`` (and the windows) alone.
        """
        label = f"bolt {name!r}"
        _check_name(name, "bolt name", label, self.name)
        names = self._input_names(inputs, label, "bolt")
        if not isinstance(state, Monoid):
            raise self._error(
                f"state must be a Monoid (e.g. Count(), per_key(Sum())), got {state!r}",
                "pass state=<a monoid from hailstorm.monoids>",
                label,
            )
        for argument, function, example in (
            ("lift", lift, "lift=lambda t: 1"),
            ("key", key, "key=lambda t: t[0]"),
            ("emit", emit, "emit=lambda t, value: [(t, value)]"),
            ("event_time", event_time, "event_time=lambda t: t['ts']"),
        ):
            if function is not None and not callable(function):
                raise self._error(
                    f"{argument} must be a function, got {function!r}", f"pass {example}", label
                )
            if argument == "lift" and function is None:
                raise self._error(
                    "lift is required: it turns a tuple into the monoid value to absorb",
                    "pass lift=lambda t: ... (e.g. lift=lambda t: 1 for Count())",
                    label,
                )
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise self._error(
                f"parallelism must be an integer >= 1, got {parallelism!r}",
                "use parallelism=1 (one instance) or more",
                label,
            )
        if not isinstance(preaggregate, bool):
            raise self._error(
                f"preaggregate must be True or False, got {preaggregate!r}",
                "pass preaggregate=True to let spouts combine contributions per batch",
                label,
            )
        spec = BoltSpec(
            name, names, state, lift, emit, key, parallelism, event_time, preaggregate
        )
        if spec.keyed and key is None:
            raise self._error(
                f"state {state.describe()} is keyed, so each tuple needs a key",
                "pass key=lambda t: ... returning the key the value is stored under",
                label,
            )
        if parallelism > 1 and key is None:
            raise self._error(
                f"parallelism={parallelism} needs a key function to route each tuple to "
                "the instance that owns its part of the state",
                "pass key=lambda t: ..., or use parallelism=1",
                label,
            )
        if spec.window is not None and event_time is None:
            raise self._error(
                f"state {state.describe()} is windowed, so each tuple needs an event time",
                "pass event_time=lambda t: ... returning the tuple's timestamp",
                label,
            )
        if spec.window is None and event_time is not None:
            raise self._error(
                f"event_time is only used by window state, and {state.describe()} has none",
                "remove event_time=..., or wrap the state in TumblingWindow/SlidingWindow",
                label,
            )
        self._add(spec)
        return spec

    def sink(self, name: str, inputs: Sequence[NodeRef], target: SinkTarget) -> SinkSpec:
        """Write the tuples of ``inputs`` to ``target``: a :class:`Table`, a
        :class:`~hailstorm.topic.Topic` or :class:`Collect`."""
        label = f"sink {name!r}"
        _check_name(name, "sink name", label, self.name)
        names = self._input_names(inputs, label, "sink")
        if not isinstance(target, SinkTarget):
            raise self._error(
                f"target must be a SinkTarget such as Table(...) or Collect(), got {target!r}",
                'pass target=Table("name", columns={...}, key=[...], mode="upsert")',
                label,
            )
        spec = SinkSpec(name, names, target)
        self._add(spec)
        return spec

    # -- validation and introspection -------------------------------------------------

    def validate(self) -> None:
        """Check the whole graph (unknown inputs, cycles, dead ends); raise
        :class:`TopologyError`. Node-local rules were checked when nodes were added."""
        self._topological_order()

    def _topological_order(self) -> list[Node]:
        if self._order is not None:
            return self._order
        if not self._nodes:
            raise self._error(
                "the topology has no nodes", "add a spout, a bolt and a sink to it", None
            )
        for node in self._nodes.values():
            for name in getattr(node, "inputs", ()):
                if name not in self._nodes:
                    known = ", ".join(n for n, x in self._nodes.items() if x.kind != "sink")
                    raise self._error(
                        f"input {name!r} is not a node of this topology (known: {known})",
                        "fix the spelling, or define that spout/bolt",
                        f"{node.kind} {node.name!r}",
                    )
                if self._nodes[name].kind == "sink":
                    raise self._error(
                        f"input {name!r} is a sink, and sinks emit nothing",
                        "read from the bolt or spout that feeds that sink instead",
                        f"{node.kind} {node.name!r}",
                    )
        cycle = _find_cycle(self._nodes)
        if cycle:
            raise self._error(
                "the graph has a cycle: " + " -> ".join(cycle),
                "a topology must be acyclic; remove one of these inputs",
                f"{self._nodes[cycle[0]].kind} {cycle[0]!r}",
            )
        for node in self._nodes.values():
            if isinstance(node, BoltSpec) and node.emit is None:
                readers = [n.name for n in self._nodes.values() if node.name in _inputs(n)]
                if readers:
                    raise self._error(
                        f"{', '.join(map(repr, readers))} read(s) this bolt, but it has no "
                        "emit function, so nothing would ever arrive",
                        "pass emit=lambda t, value: [...] to this bolt",
                        f"bolt {node.name!r}",
                    )
        for node in self._nodes.values():
            if isinstance(node, BoltSpec) and node.preaggregate:
                self._check_preaggregate(node)
        placed: set[str] = set()
        order: list[Node] = []
        remaining = list(self._nodes.values())
        while remaining:  # definition order, each node after its inputs
            for node in remaining:
                if all(i in placed for i in _inputs(node)):
                    order.append(node)
                    placed.add(node.name)
                    remaining.remove(node)
                    break
        self._order = order
        return order

    def _check_preaggregate(self, bolt: BoltSpec) -> None:
        """A pre-aggregating bolt sees fewer tuples, so emit runs less often: only upsert
        tables and topics (latest row per key) may read it, and some spout must feed it."""
        label = f"bolt {bolt.name!r}"
        if not any(isinstance(self._nodes[i], SpoutSpec) for i in bolt.inputs):
            raise self._error(
                "preaggregate=True only applies to tuples coming from spouts, and no input "
                "of this bolt is a spout",
                "remove preaggregate=True",
                label,
            )
        for reader in self._nodes.values():
            if bolt.name not in _inputs(reader):
                continue
            target = reader.target if isinstance(reader, SinkSpec) else None
            if target is None or not target.latest_per_key:
                raise self._error(
                    f"preaggregate=True makes emit run once per key and fetched batch, not "
                    f"once per tuple, so what {reader.kind} {reader.name!r} receives would "
                    "depend on batch sizes; only upsert tables and topics may read such a bolt",
                    "remove preaggregate=True, or make the reader an upsert Table or Topic "
                    "sink",
                    label,
                )

    @property
    def nodes(self) -> list[Node]:
        """All nodes, each after its inputs (definition order otherwise)."""
        return list(self._topological_order())

    def node(self, name: str) -> Node:
        """The node called ``name`` (``KeyError`` if none)."""
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(
                f"topology {self.name!r} has no node {name!r} (nodes: {', '.join(self._nodes)})"
            ) from None

    @property
    def spouts(self) -> list[SpoutSpec]:
        """Spouts, in topological order."""
        return [n for n in self.nodes if isinstance(n, SpoutSpec)]

    @property
    def bolts(self) -> list[BoltSpec]:
        """Bolts, in topological order."""
        return [n for n in self.nodes if isinstance(n, BoltSpec)]

    @property
    def sinks(self) -> list[SinkSpec]:
        """Sinks, in topological order."""
        return [n for n in self.nodes if isinstance(n, SinkSpec)]

    @property
    def source_topics(self) -> list[str]:
        """The Kafka topics the spouts read (sorted, each once)."""
        return sorted({s.topic for s in self.spouts})

    @property
    def dead_letter_topics(self) -> list[str]:
        """The dead-letter topics of the spouts and, when there are bolts, the topology's
        (sorted, each once)."""
        topics = {s.dead_letter for s in self.spouts}
        if self.bolts:
            topics.add(self.dead_letter_topic)
        return sorted(topics)

    def inputs_of(self, node: NodeRef) -> list[SpoutSpec | BoltSpec]:
        """The nodes whose tuples ``node`` receives."""
        spec = self.node(node if isinstance(node, str) else node.name)
        self._topological_order()
        return [self._nodes[n] for n in _inputs(spec)]  # type: ignore[misc]

    def downstream_of(self, node: NodeRef) -> list[BoltSpec | SinkSpec]:
        """The nodes that receive ``node``'s tuples, in topological order."""
        name = node if isinstance(node, str) else node.name
        self.node(name)
        return [n for n in self.nodes if name in _inputs(n)]  # type: ignore[misc]

    @property
    def edges(self) -> list[Edge]:
        """Every connection with its routing (``"key"`` for keyed bolts, else ``"all"``)."""
        return [
            Edge(source, n.name, n.routing)
            for n in self.nodes
            if not isinstance(n, SpoutSpec)
            for source in n.inputs
        ]


def _inputs(node: Node) -> tuple[str, ...]:
    return () if isinstance(node, SpoutSpec) else node.inputs


def _find_cycle(nodes: Mapping[str, Node]) -> list[str] | None:
    """A cycle as ``[a, b, ..., a]`` following data flow, or None."""
    downstream: dict[str, list[str]] = {name: [] for name in nodes}
    for node in nodes.values():
        for source in _inputs(node):
            downstream[source].append(node.name)
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(nodes, white)
    for start in nodes:
        if color[start] != white:
            continue
        path: list[str] = [start]
        iterators = [iter(downstream[start])]
        color[start] = grey
        while iterators:
            nxt = next(iterators[-1], None)
            if nxt is None:
                color[path.pop()] = black
                iterators.pop()
            elif color[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            elif color[nxt] == white:
                color[nxt] = grey
                path.append(nxt)
                iterators.append(iter(downstream[nxt]))
    return None


# --------------------------------------------------------------------------- loading


def load_topology(ref: str) -> Topology:
    """Import the module ``ref`` (a file path such as ``topologies/wordcount.py`` or a
    dotted name such as ``topologies.wordcount``) and return its validated ``topology``.

    Like ``python file.py`` and ``python -m name``, the module can import its neighbours:
    the file's directory (for a path) or the current directory (for a dotted name) is
    appended to ``sys.path`` if missing. The ref is recorded as ``topology.source`` (and
    the file as ``module_file``) so that executors can load the same module. Every failure
    raises :class:`TopologyError`.
    """
    is_path = ref.endswith(".py") or "/" in ref or os.sep in ref
    module = _import_path(ref) if is_path else _import_dotted(ref)
    topology = getattr(module, "topology", None)
    if topology is None:
        found = [n for n, v in vars(module).items() if isinstance(v, Topology)]
        fix = (
            f"add `topology = {found[0]}` at the end of the module"
            if found
            else 'define `topology = Topology("name")` at module level'
        )
        raise TopologyError("the module defines no `topology`", fix=fix, module=ref)
    if not isinstance(topology, Topology):
        raise TopologyError(
            f"`topology` is a {type(topology).__name__}, not a hailstorm Topology",
            fix='assign `topology = Topology("name")` and build it with topology.spout/bolt/sink',
            module=ref,
        )
    topology.source = ref
    topology.module_file = getattr(module, "__file__", None)
    if topology.module_file:
        topology.module_file = os.path.abspath(topology.module_file)
    try:
        topology.validate()
    except TopologyError as exc:
        exc.module = ref
        raise
    return topology


def _import_path(ref: str) -> Any:
    path = os.path.abspath(ref)
    if not os.path.isfile(path):
        raise TopologyError(
            f"no such file {ref!r} (looked in {os.getcwd()})",
            fix="check the path, or pass a dotted module name such as topologies.wordcount",
            module=ref,
        )
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    digest = hashlib.blake2b(path.encode(), digest_size=4).hexdigest()
    module_name = f"_hailstorm_topology_{stem}_{digest}"
    _ensure_on_path(os.path.dirname(path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TopologyError(
            f"cannot import {ref!r} as a Python module", fix="give it a .py suffix", module=ref
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        _reraise_import_failure(ref, path, exc)
    return module


def _ensure_on_path(directory: str) -> None:
    if not any(os.path.abspath(entry or ".") == directory for entry in sys.path):
        sys.path.append(directory)


def _import_dotted(ref: str) -> Any:
    _ensure_on_path(os.getcwd())
    try:
        return importlib.import_module(ref)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (ref == exc.name or ref.startswith(exc.name + ".")):
            raise TopologyError(
                f"no module named {ref!r} (current directory {os.getcwd()})",
                fix="check the spelling, run from the directory that contains the package "
                "(or add it to PYTHONPATH), or pass a file path such as topologies/x.py",
                module=ref,
            ) from exc
        _reraise_import_failure(ref, None, exc)
    except BaseException as exc:
        _reraise_import_failure(ref, None, exc)


def _reraise_import_failure(ref: str, path: str | None, exc: BaseException) -> Any:
    if isinstance(exc, TopologyError):
        if exc.module is None:
            exc.module = ref
        raise exc
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        raise exc
    location = ""
    frames = traceback.extract_tb(exc.__traceback__)
    module_path = path if path is not None else _module_origin(ref)
    for frame in reversed(frames):
        if module_path and os.path.abspath(frame.filename) == os.path.abspath(module_path):
            location = f" at line {frame.lineno}"
            break
    raise TopologyError(
        f"importing the module failed{location}: {type(exc).__name__}: {exc}",
        fix="correct the module (`python " + (path or f"-m {ref}") + "` shows the full traceback)",
        module=ref,
    ) from exc


def _module_origin(ref: str) -> str | None:
    try:
        spec = importlib.util.find_spec(ref)
    except Exception:
        return None
    return spec.origin if spec is not None else None


# --------------------------------------------------------------------------- rendering


def _node_details(node: Node) -> list[tuple[str, str]]:
    if isinstance(node, SpoutSpec):
        details = [
            ("topic", f"{node.topic} (one instance per partition)"),
            ("decoder", node.decoder.describe()),
        ]
        if node.explode is not None:
            details.append(("explode", function_name(node.explode)))
        details.append(("dead letters", node.dead_letter))
        return details
    if isinstance(node, BoltSpec):
        details = [
            ("parallelism", str(node.parallelism)),
            (
                "inputs",
                ", ".join(
                    f"{i} (routed by key)" if node.routing == "key" else i for i in node.inputs
                ),
            ),
            ("state", node.state.describe()),
        ]
        if node.key is not None:
            details.append(("key", function_name(node.key)))
        details.append(("lift", function_name(node.lift)))
        if node.event_time is not None:
            details.append(("event time", function_name(node.event_time)))
        details.append(("emit", function_name(node.emit)))
        if node.preaggregate:
            details.append(("preaggregate", "spouts combine contributions per key and batch"))
        return details
    return [("inputs", ", ".join(node.inputs)), ("target", node.target.describe())]


def render_text(topology: Topology) -> str:
    """A readable listing of the topology: nodes, kinds, parallelism, inputs, state,
    sink targets (no trailing newline)."""
    nodes = topology.nodes
    lines = [f"topology {topology.name}"]
    if topology.source:
        lines[0] += f"  ({topology.source})"
    lines.append(f"  source topics: {', '.join(topology.source_topics) or '-'}")
    lines.append(f"  dead letters:  {', '.join(topology.dead_letter_topics) or '-'}")
    lines.append(f"  on error:      {topology.on_error}")
    for node in nodes:
        lines.append("")
        lines.append(f"{node.kind} {node.name}")
        details = _node_details(node)
        width = max(len(label) for label, _ in details) + 1
        lines.extend(f"  {label + ':':<{width}} {value}" for label, value in details)
    return "\n".join(lines)


_DOT_SHAPES = {"spout": "cds", "bolt": "box", "sink": "cylinder"}
_DOT_STYLE = {"spout": "filled", "bolt": "rounded,filled", "sink": "filled"}
_DOT_COLORS = {"spout": "#dbeafe", "bolt": "#fef3c7", "sink": "#dcfce7"}


def _dot_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _caption(node: Node) -> list[str]:
    """What a node is, in a line or two: its topic and decoder, its state, its target."""
    if isinstance(node, SpoutSpec):
        return [f"topic {node.topic}", node.decoder.describe()]
    if isinstance(node, BoltSpec):
        return [node.state.describe()]
    if isinstance(node.target, Table):
        table = node.target
        caption = [f"table {table.name}", table.mode]
        if table.key:
            caption[1] += f" on ({', '.join(table.key)})"
        return caption
    return [node.target.describe()]


def graph_of(topology: Topology) -> dict[str, Any]:
    """The DAG as plain JSON data (what the driver publishes for ``hailstorm ui``): nodes
    with kind, parallelism (spouts: None, one instance per partition) and caption; edges
    with routing; the dead-letter topics."""
    return {
        "nodes": [
            {"name": node.name, "kind": node.kind,
             "parallelism": None if isinstance(node, SpoutSpec) else
             node.parallelism if isinstance(node, BoltSpec) else 1,
             "caption": _caption(node)}
            for node in topology.nodes
        ],
        "edges": [{"source": e.source, "target": e.target, "routing": e.routing}
                  for e in topology.edges],
        "dead_letter_topics": list(topology.dead_letter_topics),
    }


def render_dot(topology: Topology) -> str:
    """Graphviz DOT: spouts (cds), bolts (rounded boxes), sinks (cylinders); edges are
    labelled with their routing, ``key`` or ``all`` (ends with a newline)."""
    lines = [
        f"digraph {_dot_string(topology.name)} {{",
        "  rankdir=LR;",
        '  node [fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for node in topology.nodes:
        caption = _caption(node)
        if isinstance(node, BoltSpec) and node.parallelism > 1:
            caption.append(f"x{node.parallelism}")
        label = "\n".join([f"{node.kind} {node.name}", *caption])
        lines.append(
            f"  {_dot_string(node.name)} [label={_dot_string(label)}, "
            f"shape={_DOT_SHAPES[node.kind]}, style={_dot_string(_DOT_STYLE[node.kind])}, "
            f"fillcolor={_dot_string(_DOT_COLORS[node.kind])}];"
        )
    for edge in topology.edges:
        lines.append(
            f"  {_dot_string(edge.source)} -> {_dot_string(edge.target)} "
            f"[label={_dot_string(edge.routing)}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"
