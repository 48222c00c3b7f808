"""Declaring nodes: :class:`Topology`, whose :meth:`~Topology.spout`,
:meth:`~Topology.bolt` and :meth:`~Topology.sink` check each node as it is added (each
kind's overloads spell out its precise types, what a topology's author sees in an editor,
next to the checks of that node). The whole graph's checks and queries are
:class:`~hailstorm.topology.graph.TopologyGraph`'s, which it extends. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, Unpack, overload

from hailstorm.decoders import Decoder, DecoderSpec, resolve_decoder
from hailstorm.monoids import KeyedMap, Monoid, Ttl, Window, WindowValue
from hailstorm.topology.errors import (
    OnError,
    Quarantine,
    check_name,
    check_topic_name,
    declaration,
    deferred,
    on_error_policy,
)
from hailstorm.topology.graph import TopologyGraph
from hailstorm.topology.late_rules import DROP, late_problem
from hailstorm.topology.specs import (
    BoltSpec,
    Emit,
    EmitByKey,
    Explode,
    Inputs,
    Node,
    SinkSpec,
    SpoutSpec,
)
from hailstorm.topology.tables import SinkTarget, Table
from hailstorm.topology.upgrades import NodeUpgrade, Upgrade, check_upgrade

__all__ = ["Topology"]


T = TypeVar("T")
U = TypeVar("U")
D = TypeVar("D")
K = TypeVar("K")
L = TypeVar("L")
S = TypeVar("S")
V = TypeVar("V")


class Topology(TopologyGraph):
    """A named DAG of spouts, bolts and sinks; build it with :meth:`spout`,
    :meth:`bolt` and :meth:`sink`.

    ``dead_letter`` is the topic receiving quarantined records: messages no decoder could
    read and records a user function failed on (default ``<name>.dead-letter``; a spout may
    override it for its messages).

    ``on_error`` is the policy for a record that makes a user function raise (decoder,
    explode, key, lift, event_time, emit, a sink's row; or a value the state's monoid
    refuses): ``"quarantine"`` (the default) sends it to the dead-letter topic (a sink's
    row to its table's ``<table>_rejected`` table) and goes on, as long as a spout or bolt
    fails on at most 1% of any 10,000 consecutive records it handles (else the topology
    stops with the rate and a sample of the errors); ``Quarantine(max_bad=..., window=...)``
    sets another budget (``max_bad=None``: none); ``"fail"`` stops the topology with the
    first bad record and its error as the reason.
    """

    def __init__(self, name: str, *, dead_letter: str | None = None,
                 on_error: OnError | Quarantine = "quarantine") -> None:
        with deferred():
            check_name(name, "topology name", None, None)
        self.name = name
        self.dead_letter_topic = dead_letter if dead_letter is not None else f"{name}.dead-letter"
        check_topic_name(self.dead_letter_topic, "dead-letter topic", None, name)
        # "quarantine" (also for a Quarantine) or "fail"; the budget (None for "fail")
        self.on_error, self.quarantine = on_error_policy(on_error, name)
        self.source: str | None = None
        """How the topology was loaded (the ``load_topology`` ref), if it was."""
        self.module_file: str | None = None
        """Absolute path of the module file that defined it, if known."""
        self._nodes: dict[str, Node] = {}
        self.upgrades: dict[str, NodeUpgrade] = {}
        """Each bolt's declared history (:mod:`hailstorm.topology.upgrades`)."""
        self._order: list[Node] | None = None

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, nodes={list(self._nodes)})"

    # -- building -----------------------------------------------------------------------

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

    # The overloads type a spout's tuples by its decoder and explode (bytes, text, what a
    # decoder function returns, what explode returns a list of; Any for JSON and Avro).
    @overload
    def spout(self, name: str, topic: str, decoder: Literal["bytes"] = ..., explode: None = ...,
              dead_letter: str | None = ...) -> SpoutSpec[bytes]: ...
    @overload
    def spout(self, name: str, topic: str, decoder: Literal["bytes"] = ...,
              explode: Explode[bytes, T] = ..., dead_letter: str | None = ...) -> SpoutSpec[T]: ...
    @overload
    def spout(self, name: str, topic: str, decoder: Literal["text"], explode: None = ...,
              dead_letter: str | None = ...) -> SpoutSpec[str]: ...
    @overload
    def spout(self, name: str, topic: str, decoder: Literal["text"], explode: Explode[str, T],
              dead_letter: str | None = ...) -> SpoutSpec[T]: ...
    @overload
    def spout(self, name: str, topic: str, decoder: Callable[[bytes], D], explode: None = ...,
              dead_letter: str | None = ...) -> SpoutSpec[D]: ...
    @overload
    def spout(self, name: str, topic: str, decoder: Callable[[bytes], D],
              explode: Explode[D, T], dead_letter: str | None = ...) -> SpoutSpec[T]: ...
    @overload
    def spout(self, name: str, topic: str, decoder: str | Decoder, explode: None = ...,
              dead_letter: str | None = ...) -> SpoutSpec[Any]: ...
    @overload
    def spout(self, name: str, topic: str, decoder: str | Decoder, explode: Explode[Any, T],
              dead_letter: str | None = ...) -> SpoutSpec[T]: ...

    @declaration
    def spout(
        self,
        name: str,
        topic: str,
        decoder: DecoderSpec = "bytes",
        explode: Callable[[Any], Iterable[Any] | None] | None = None,
        dead_letter: str | None = None,
    ) -> SpoutSpec[Any]:
        """Read ``topic`` (one instance per partition).

        ``decoder``: ``"bytes"``, ``"text"``, ``"json"``, ``Avro(schema)`` or a function
        ``bytes -> value``. ``explode`` maps the decoded value to a list of tuples (by
        default the value itself is the one tuple). Messages that fail to decode or
        explode go to ``dead_letter`` (default: the topology's dead-letter topic).
        """
        label = f"spout {name!r}"
        with deferred():
            check_name(name, "spout name", label, self.name)
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

    # The overloads tie a bolt's functions to its inputs' tuples T and its state: lift
    # returns what the state absorbs (KeyedMap[K, S, L]: an L; Window[V]: a V; Monoid[S]: an
    # S), emit receives the value of the tuple's key (an S) or the whole state, a KeyedMap's
    # key function returns its key type K, and the bolt sends what emit returns a list of.
    # A bolt without emit sends nothing (BoltSpec[T, Any]).
    @overload
    def bolt(self, name: str, inputs: Inputs[T], state: KeyedMap[K, S, L],
             lift: Callable[[T], L], emit: None = ..., key: Callable[[T], K] | None = ...,
             parallelism: int = ..., event_time: Callable[[T], Any] | None = ...,
             preaggregate: bool = ...,
             late: str | Table | None = ..., **upgrade: Unpack[Upgrade]) -> BoltSpec[T, Any]: ...
    @overload
    def bolt(self, name: str, inputs: Inputs[T], state: Window[V],
             lift: Callable[[T], V], emit: None = ..., key: Callable[[T], Any] | None = ...,
             parallelism: int = ..., event_time: Callable[[T], Any] | None = ...,
             preaggregate: bool = ...,
             late: str | Table | None = ..., **upgrade: Unpack[Upgrade]) -> BoltSpec[T, Any]: ...
    @overload
    def bolt(self, name: str, inputs: Inputs[T], state: Monoid[S],
             lift: Callable[[T], S], emit: None = ..., key: Callable[[T], Any] | None = ...,
             parallelism: int = ..., event_time: Callable[[T], Any] | None = ...,
             preaggregate: bool = ...,
             late: str | Table | None = ..., **upgrade: Unpack[Upgrade]) -> BoltSpec[T, Any]: ...
    @overload
    def bolt(self, name: str, inputs: Inputs[T], state: KeyedMap[K, S, L],
             lift: Callable[[T], L], emit: Emit[T, S, U] | EmitByKey[K, S, U],
             key: Callable[[T], K] | None = ...,
             parallelism: int = ..., event_time: Callable[[T], Any] | None = ...,
             preaggregate: bool = ...,
             late: str | Table | None = ..., **upgrade: Unpack[Upgrade]) -> BoltSpec[T, U]: ...
    @overload
    def bolt(self, name: str, inputs: Inputs[T], state: Window[V],
             lift: Callable[[T], V], emit: Emit[T, WindowValue[V], U],
             key: Callable[[T], Any] | None = ..., parallelism: int = ...,
             event_time: Callable[[T], Any] | None = ..., preaggregate: bool = ...,
             late: str | Table | None = ..., **upgrade: Unpack[Upgrade]) -> BoltSpec[T, U]: ...
    @overload
    def bolt(self, name: str, inputs: Inputs[T], state: Monoid[S],
             lift: Callable[[T], S], emit: Emit[T, S, U], key: Callable[[T], Any] | None = ...,
             parallelism: int = ..., event_time: Callable[[T], Any] | None = ...,
             preaggregate: bool = ...,
             late: str | Table | None = ..., **upgrade: Unpack[Upgrade]) -> BoltSpec[T, U]: ...

    @declaration
    def bolt(
        self,
        name: str,
        inputs: Inputs[Any],
        state: Monoid[Any],
        lift: Callable[[Any], Any],
        emit: Emit[Any, Any, Any] | EmitByKey[Any, Any, Any] | None = None,
        key: Callable[[Any], Any] | None = None,
        parallelism: int = 1,
        event_time: Callable[[Any], Any] | None = None,
        preaggregate: bool = False,
        late: str | Table | None = None,
        **upgrade: Unpack[Upgrade],
    ) -> BoltSpec[Any, Any]:
        """Keep ``state`` (a commutative monoid) over the tuples of ``inputs``.

        ``lift(t)`` is the monoid value a tuple contributes; with keyed state
        (``per_key(...)``) it is stored under ``key(t)``, with window state it lands in the
        windows of ``event_time(t)``. ``emit(t, value)`` returns the list of tuples to send
        downstream, where ``value`` is the current value for ``key(t)`` (keyed state) or
        the whole state; ``emit=by_key(lambda key, value: ...)`` reads the key instead of
        the tuple (keyed state only; see :func:`~hailstorm.topology.specs.by_key`).
        ``parallelism > 1`` splits the state by ``key``.

        ``preaggregate=True`` lets the spouts feeding this bolt combine the contributions of
        each fetched batch per key (and window) before sending them, never across a snapshot
        clock (a backlog's fetches together, when every node a spout feeds is such a
        bolt). The state is the same; emit then runs once per group and batch with its last
        tuple instead of once per tuple, so only upsert tables may read the bolt, and the
        table keys of emit's rows must depend on ``key(t)`` (and the windows) alone.

        Window and ttl state must say what happens to late tuples: ``late="<topic>"``
        (window state read from spouts) routes them to that topic: a tuple is late when its
        (earliest) window closed
        (``end + retention``) at the largest event time its Kafka partition reached before
        it, the same decision in every run (see :mod:`hailstorm.lateness`). The windows
        then expire nothing by themselves. ``late=Table(...)`` (e.g.
        ``hailstorm.lateness.late_table("clicks_late")``) writes them to that table instead,
        through a sink ``<name>_late`` this adds. ``late="drop"`` drops them (retention
        behind each key's newest event time), knowingly; without ``late=`` such a bolt is
        refused.

        ``previously=``, ``version=``, ``migrate=`` and ``start=`` declare the bolt's history
        for an upgrade of a running topology (:class:`~hailstorm.topology.upgrades.Upgrade`).

        ``per_key(..., ttl=...)`` state (:class:`~hailstorm.monoids.Ttl`) needs
        ``event_time=`` and ``late=``: a tuple ``retention`` (default ``ttl``) or more behind
        its partition's newest event time is late, and keys idle long enough are dropped.
        """
        label = f"bolt {name!r}"
        with deferred():
            check_name(name, "bolt name", label, self.name)
        names = self._input_names(inputs, label, "bolt")
        if not isinstance(state, Monoid):
            raise self._error(
                f"state must be a Monoid (e.g. Count(), per_key(Sum())), got {state!r}",
                "pass state=<a monoid from hailstorm.monoids>",
                label,
            )
        if isinstance(emit, EmitByKey) and not isinstance(state, KeyedMap):
            raise self._error(
                "emit=by_key(...) reads a tuple's key, and this bolt's state has no keys",
                "use emit=lambda t, value: [...], or keyed state (per_key(...))",
                label,
            )
        for argument, function, example in (
            ("lift", lift, "lift=lambda t: 1"),
            ("key", key, "key=lambda t: t[0]"),
            ("emit", emit.function if isinstance(emit, EmitByKey) else emit,
             "emit=lambda t, value: [(t, value)]"),
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
        self._check_late(late, state, label)
        spec = BoltSpec(name, names, state, lift, emit, key, parallelism, event_time,
                        preaggregate, None if late == DROP else late)
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
                f"state {state.describe()} keeps event time (windows or a ttl), so each "
                "tuple needs one",
                "pass event_time=lambda t: ... returning the tuple's timestamp",
                label,
            )
        if spec.window is None and event_time is not None:
            raise self._error(
                f"event_time is only used by window or ttl state, and {state.describe()} "
                "has none",
                "remove event_time=..., or wrap the state in TumblingWindow/SlidingWindow, "
                "or use per_key(..., ttl=...)",
                label,
            )
        self._add(spec)
        self.upgrades[name] = check_upgrade(upgrade, name, self.name)
        if spec.late_sink is not None:
            assert isinstance(late, Table)
            self._add(SinkSpec(spec.late_sink, names, late, late_of=name))
        return spec

    @declaration
    def sink(self, name: str, inputs: Inputs[Any], target: SinkTarget) -> SinkSpec:
        """Write the tuples of ``inputs`` to ``target``: a :class:`Table`, a
        :class:`~hailstorm.topic.Topic` or :class:`Collect`."""
        label = f"sink {name!r}"
        with deferred():
            check_name(name, "sink name", label, self.name)
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

    def _check_late(self, late: Any, state: Monoid[Any], label: str) -> None:
        """A window or ttl bolt decides what happens to late tuples (see
        :mod:`~hailstorm.topology.late_rules`); a ttl one is keyed."""
        if isinstance(state, Ttl):
            raise self._error(
                f"ttl state must be kept per key, got {state.describe()}",
                "use per_key(inner, ttl=...)", label)
        problem = late_problem(late, state)
        if problem is not None:
            raise self._error(*problem, label)
        if isinstance(late, str) and late != DROP:
            check_topic_name(late, "late topic", label, self.name)
