"""What a topology may be called and what goes wrong in one: the one name rule
(:data:`NAME_PATTERN`, checked by :func:`check_name`), Kafka's topic-name rule,
:class:`TopologyError` for invalid topologies, :class:`Quarantine` (the ``on_error`` policy
with a budget for bad records), :class:`RowError` for a sink tuple that is no
row of its table, and :class:`RecordFailed` for a user function failing on one record.
Pure.

While a module loads (:func:`collecting`), declarations (:func:`declaration`) and name
checks (:func:`deferred`) note their problems instead of raising at the first one, so that
:func:`all_problems` reports every one in a single error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

from hailstorm.errors import DefinitionError, RecordError

__all__ = [
    "NAME_PATTERN",
    "ON_ERROR_POLICIES",
    "TOPIC_PATTERN",
    "OnError",
    "Quarantine",
    "RecordFailed",
    "RowError",
    "TopologyError",
    "Unbuilt",
    "all_problems",
    "check_name",
    "check_topic_name",
    "collecting",
    "declaration",
    "deferred",
    "is_collecting",
    "on_error_policy",
    "suggest_name",
]


NAME_PATTERN = re.compile(r"^[a-z_][a-z0-9_]{0,62}\Z")
"""Topology, node, table and column names: safe as ZooKeeper path segments, Kafka topic
names and unquoted SQL identifiers."""

TOPIC_PATTERN = re.compile(r"^[a-zA-Z0-9._-]{1,249}\Z")
"""Kafka's rule for topic names (``.`` and ``..`` are also refused)."""


class TopologyError(DefinitionError):
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
        self.problems: list[TopologyError] = [self]
        """Every problem this error reports (more than itself when a module had several)."""

    def __str__(self) -> str:
        where = []
        if self.topology:
            where.append(f"topology {self.topology!r}")
        if self.node:
            where.append(self.node)
        text = self.problem if len(self.problems) > 1 else self.problem.rstrip(".")
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


class RowError(RecordError, ValueError):
    """A sink tuple cannot be turned into a row of its table."""


OnError = Literal["quarantine", "fail"]
"""What the runtime does with a record a user function fails on (see :class:`RecordFailed`)."""
ON_ERROR_POLICIES: tuple[OnError, ...] = ("quarantine", "fail")


@dataclass(frozen=True)
class Quarantine:
    """The ``on_error`` policy that quarantines bad records, up to a budget.

    A spout or bolt may fail on at most ``max_bad`` (a fraction) of any ``window``
    consecutive records it handles: past ``max_bad * window`` bad records among the last
    ``window``, the topology halts with the rate and a sample of the errors (see
    :mod:`hailstorm.bad_records`). ``on_error="quarantine"`` is ``Quarantine()``: 1% of
    10,000 records. ``max_bad=None`` sets no limit.
    """

    max_bad: float | None = 0.01
    window: int = 10_000

    def __post_init__(self) -> None:
        if self.max_bad is not None and (
                isinstance(self.max_bad, bool) or not isinstance(self.max_bad, int | float)
                or not 0 <= self.max_bad <= 1):
            raise TopologyError(
                f"Quarantine(max_bad={self.max_bad!r}) is not a fraction between 0 and 1",
                fix="pass e.g. max_bad=0.01 (at most 1% of the records may be bad) or "
                "max_bad=None (no limit)")
        if isinstance(self.window, bool) or not isinstance(self.window, int) \
                or self.window < 1:
            raise TopologyError(
                f"Quarantine(window={self.window!r}) is not a positive number of records",
                fix="pass e.g. window=10_000")

    @property
    def limit(self) -> int | None:
        """Bad records allowed among ``window`` consecutive ones (None: no limit)."""
        if self.max_bad is None:
            return None
        return int(self.max_bad * self.window + 1e-9)

    def describe(self) -> str:
        """``Quarantine(max_bad=0.01, window=10000)``, as declared."""
        return f"Quarantine(max_bad={self.max_bad!r}, window={self.window!r})"


def on_error_policy(on_error: object, topology: str) -> tuple[OnError, Quarantine | None]:
    """``(mode, budget)`` of a topology's declared ``on_error``: ``"quarantine"`` with
    ``Quarantine()`` or the one declared, or ``"fail"`` with none."""
    if isinstance(on_error, Quarantine):
        return "quarantine", on_error
    if on_error == "quarantine":
        return "quarantine", Quarantine()
    if on_error == "fail":
        return "fail", None
    raise TopologyError(
        f"on_error {on_error!r} is not one of {', '.join(ON_ERROR_POLICIES)} or a "
        "Quarantine(...)",
        fix='pass on_error="quarantine" (bad records go to the dead-letter topic, up to 1% '
        'of them), on_error=Quarantine(max_bad=0.05, window=1000) (another budget) or '
        'on_error="fail" (the topology stops)',
        topology=topology,
    )


class RecordFailed(RecordError):
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


NAME_USES = {
    "topology name": "it names the topology's ZooKeeper node and snapshot directory and "
                     "starts its dead-letter topic's name",
    "spout name": "it is part of the spout's processor ids (ZooKeeper node names)",
    "bolt name": "it is part of the bolt's processor ids (ZooKeeper node names) and "
                 "snapshot directory",
    "sink name": "it is part of the sink's processor id (a ZooKeeper node name)",
    "table name": "it becomes an unquoted SQL identifier",
    "column": "it becomes an unquoted SQL identifier",
}
"""Why each kind of name must follow :data:`NAME_PATTERN`: only what is true of it."""


def check_name(name: object, what: str, node: str | None, topology: str | None) -> None:
    """Raise :class:`TopologyError` unless ``name`` (the ``what`` of ``node`` in
    ``topology``) follows :data:`NAME_PATTERN`; the message says why for that kind of name
    and suggests one (``user_id`` for ``userId``)."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        why = NAME_USES.get(what, "it is used in ZooKeeper, Kafka and SQL names")
        raise TopologyError(
            f"{what} {name!r} is not a valid name: it must match {NAME_PATTERN.pattern} "
            "(lowercase letters, digits and '_', not starting with a digit, at most 63 "
            f"characters) because {why}",
            fix=f"rename it, e.g. {suggest_name(name)!r}",
            node=node,
            topology=topology,
        )


def suggest_name(name: object) -> str:
    """A valid name close to ``name``: ``userId`` -> ``user_id``, ``Page Views`` ->
    ``page_views``, ``2fa`` -> ``_2fa``."""
    text = str(name)
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", text)
    text = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "name"
    if text[0].isdigit():
        text = f"_{text}"
    return text[:63]


_COLLECTED: ContextVar[list[TopologyError] | None] = ContextVar(
    "hailstorm_topology_problems", default=None)


@contextmanager
def collecting() -> Iterator[list[TopologyError]]:
    """While loading a module: the problems :func:`deferred` blocks meet, in order, instead
    of each raising at once (see :func:`~hailstorm.topology.load_topology`)."""
    problems: list[TopologyError] = []
    token = _COLLECTED.set(problems)
    try:
        yield problems
    finally:
        _COLLECTED.reset(token)


def is_collecting() -> bool:
    """Within :func:`collecting`."""
    return _COLLECTED.get() is not None


@contextmanager
def deferred() -> Iterator[None]:
    """A :class:`TopologyError` raised in the block is noted (within :func:`collecting`)
    and the code after the block goes on; outside, it is raised as usual."""
    try:
        yield
    except TopologyError as error:
        problems = _COLLECTED.get()
        if problems is None:
            raise
        problems.append(error)


M = TypeVar("M", bound=Callable[..., Any])


class Unbuilt(str):
    """What a declaration returns, while a module loads, in place of a node it found a
    problem in: its name, so that later declarations may read it and report their own
    problems (the loader raises them all at the end)."""

    @property
    def name(self) -> str:
        return str(self)


def declaration(method: M) -> M:
    """A declaration (``spout``, ``bolt``, ``sink``) whose :class:`TopologyError`, while a
    module loads (:func:`~hailstorm.topology.errors.collecting`), is noted and answered with
    an :class:`Unbuilt` so that loading goes on; otherwise raised."""

    @functools.wraps(method)
    def declare(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except TopologyError as error:
            if not is_collecting():
                raise
            with deferred():
                raise error from None
            name = kwargs.get("name", args[0] if args else "")
            return Unbuilt(name if isinstance(name, str) else repr(name))

    return cast(M, declare)


def all_problems(problems: Sequence[TopologyError], module: str) -> TopologyError:
    """One error for every problem of ``module`` (the one itself when there is one)."""
    for problem in problems:
        problem.module = None
    if len(problems) == 1:
        problems[0].module = module
        return problems[0]
    lines = "\n".join(f"  {i}. {problem}" for i, problem in enumerate(problems, 1))
    error = TopologyError(f"{len(problems)} problems:\n{lines}", module=module)
    error.problems = list(problems)
    return error


def check_topic_name(topic: object, what: str, node: str | None, topology: str | None) -> None:
    """Raise :class:`TopologyError` unless ``topic`` follows :data:`TOPIC_PATTERN`."""
    if not isinstance(topic, str) or not TOPIC_PATTERN.match(topic) or topic in {".", ".."}:
        raise TopologyError(
            f"{what} {topic!r} is not a valid Kafka topic name (1-249 characters from "
            "a-z A-Z 0-9 . _ -, and not '.' or '..')",
            fix="use a name such as 'page-views' or 'words'",
            node=node,
            topology=topology,
        )
