"""Which instances can restart alone in a local recovery (issue 42; docs/deployment.md,
"Local recovery"): one rule for the negotiator, which decides a recovery's scope
(:mod:`hailstorm.negotiator.recovery_scope`), and for the processors, which go on without a
peer that restarts alone (a spout stops sending to it and replays to its next incarnation;
a sink waits for that incarnation). Pure.

An instance can restart alone when what it needs can be replayed to it and what it sent
can be told apart from what its next incarnation sends: a bolt whose inputs are all spouts
(they re-read Kafka from the committed clock) and whose outputs are all sinks (they keep,
per sender, what its old incarnation promised by its last watermark, and drop the rest).

Not so (the whole topology restarts):

* a spout: its downstream bolts absorbed what it sent past the committed clock, and a round
  may start only once its replacement passed that, which nothing reports yet;
* a sink: its upstream bolts keep no output to resend what it had not committed;
* a bolt reading another bolt: likewise, the upstream bolt's output since the committed
  round is gone;
* a bolt feeding another bolt: that bolt absorbed the rows the failed one sent past its
  last watermark into its state, which cannot take them back out;
* a compacting bolt feeding a merge sink: a compacted row carries contributions of other
  partitions past the watermark, which its next incarnation sends again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hailstorm.protocol.layout import LayoutError, Role, parse_processor_id

__all__ = ["Shape", "alone_nodes", "kinds_of", "why_not_alone"]


@dataclass(frozen=True)
class Shape:
    """The topology's graph as a local recovery looks at it (from the driver's ``graph``
    in the expected record: :func:`hailstorm.topology.graph_of`)."""

    edges: frozenset[tuple[str, str]] = frozenset()
    """``(source, target)`` node names."""
    compacting: frozenset[str] = frozenset()
    """Bolts that emit once per key and flush."""
    merging: frozenset[str] = frozenset()
    """Sinks whose table adds rows into the stored ones (``mode="merge"``)."""

    @classmethod
    def of_graph(cls, graph: Mapping[str, Any] | None) -> Shape:
        """The shape of a published graph (empty for none: no bolt can restart alone)."""
        graph = graph or {}
        edges = graph.get("edges")
        nodes = graph.get("nodes")
        edges = edges if isinstance(edges, list) else []
        nodes = nodes if isinstance(nodes, list) else []
        nodes = [n for n in nodes if isinstance(n, dict) and "name" in n]
        return cls(
            frozenset((str(e["source"]), str(e["target"])) for e in edges
                      if isinstance(e, dict) and "source" in e and "target" in e),
            frozenset(str(n["name"]) for n in nodes if n.get("compacting")),
            frozenset(str(n["name"]) for n in nodes if n.get("mode") == "merge"))


def kinds_of(instances: Iterable[str]) -> dict[str, Role]:
    """Each node's role, by the processor ids of its instances (ids that are none are
    left out)."""
    kinds: dict[str, Role] = {}
    for name in instances:
        try:
            pid = parse_processor_id(name)
        except LayoutError:
            continue
        kinds[pid.name] = pid.role
    return kinds


def why_not_alone(instance: str, kinds: Mapping[str, Role], shape: Shape) -> str | None:
    """Why ``instance`` cannot restart alone (None: it can), ``kinds`` being every node's
    role (:func:`kinds_of` the expected ids)."""
    try:
        pid = parse_processor_id(instance)
    except LayoutError:
        return f"{instance} is no processor id"
    if pid.role is Role.SPOUT:
        return (f"{instance} is a spout: its bolts downstream absorbed what it sent past "
                "the committed clock, and a round may start only once its replacement "
                "passed that, which nobody reports yet")
    if pid.role is Role.SINK:
        return (f"{instance} is a sink: its upstream bolts keep no output to resend what it "
                "had not committed")
    inputs = sorted(s for s, t in shape.edges if t == pid.name)
    if not inputs:
        return f"{instance}'s inputs are unknown (the expected record has no graph)"
    bolts = [s for s in inputs if kinds.get(s) is not Role.SPOUT]
    if bolts:
        return (f"{instance} reads {', '.join(bolts)}, whose output since the committed "
                "round is not kept")
    outputs = sorted(t for s, t in shape.edges if s == pid.name)
    bolts = [t for t in outputs if kinds.get(t) is not Role.SINK]
    if bolts:
        return (f"{instance} feeds {', '.join(bolts)}, which absorbed what it sent past its "
                "last watermark")
    merging = [t for t in outputs if t in shape.merging]
    if pid.name in shape.compacting and merging:
        return (f"{instance} compacts its rows and feeds the merge table of "
                f"{', '.join(merging)}: a compacted row holds contributions past its last "
                "watermark")
    return None


def alone_nodes(instances: Iterable[str], graph: Mapping[str, Any] | None) -> frozenset[str]:
    """The nodes whose instances can restart alone (:func:`why_not_alone`), of a
    deployment with these processor ids and this graph."""
    instances = list(instances)
    kinds, shape = kinds_of(instances), Shape.of_graph(graph)
    return frozenset(parse_processor_id(i).name for i in instances
                     if why_not_alone(i, kinds, shape) is None)
