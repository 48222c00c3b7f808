"""The graph of a topology's nodes: :class:`TopologyGraph` holds the nodes declared so far,
checks the whole graph (:meth:`~TopologyGraph.validate`: unknown inputs, cycles, dead ends,
pre-aggregation, late data) and answers what reads what, each node after its inputs.
:class:`~hailstorm.topology.Topology` extends it with the declaring of nodes. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hailstorm.topology.errors import TopologyError
from hailstorm.topology.specs import BoltSpec, Edge, Node, NodeRef, SinkSpec, SpoutSpec

__all__ = ["TopologyGraph"]


class TopologyGraph:
    """A named graph of nodes, checked as a whole (the nodes were each checked as they were
    declared) and walked in topological order."""

    name: str
    dead_letter_topic: str
    """The topic receiving records a bolt's function failed on."""
    source: str | None
    """How the topology was loaded (the ``load_topology`` ref), if it was."""
    _nodes: dict[str, Node]
    _order: list[Node] | None
    """The nodes in topological order, once checked (None after a node is added)."""

    def _error(self, problem: str, fix: str, node: str | None = None) -> TopologyError:
        return TopologyError(problem, fix=fix, node=node, topology=self.name, module=self.source)

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
            for name in _inputs(node):
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
            if isinstance(node, BoltSpec) and node.late is not None:
                bolts = [i for i in node.inputs if self._nodes[i].kind != "spout"]
                if bolts:
                    raise self._error(
                        f"late= needs every input to be a spout (lateness is decided per "
                        f"Kafka partition, in offset order), but {', '.join(map(repr, bolts))} "
                        "is a bolt",
                        "read the spouts directly, or drop late=",
                        f"bolt {node.name!r}",
                    )
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

    def _check_preaggregate(self, bolt: BoltSpec[Any, Any]) -> None:
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
    def spouts(self) -> list[SpoutSpec[Any]]:
        """Spouts, in topological order."""
        return [n for n in self.nodes if isinstance(n, SpoutSpec)]

    @property
    def bolts(self) -> list[BoltSpec[Any, Any]]:
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

    def inputs_of(self, node: NodeRef) -> list[SpoutSpec[Any] | BoltSpec[Any, Any]]:
        """The nodes whose tuples ``node`` receives."""
        spec = self.node(node if isinstance(node, str) else node.name)
        self._topological_order()
        return [self._nodes[n] for n in _inputs(spec)]  # type: ignore[misc]

    def downstream_of(self, node: NodeRef) -> list[BoltSpec[Any, Any] | SinkSpec]:
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
