"""A topology for people and pages: :func:`render_text` (``hailstorm show``),
:func:`render_dot` (Graphviz) and :func:`graph_of` (the JSON the console lays out). Pure.
"""

from __future__ import annotations

from typing import Any

from hailstorm.topology.builder import Topology
from hailstorm.topology.source import function_name
from hailstorm.topology.specs import BoltSpec, EmitByKey, Node, SpoutSpec
from hailstorm.topology.tables import Table

__all__ = ["graph_of", "render_dot", "render_text"]


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
        if isinstance(node.emit, EmitByKey):
            details.append(("emit", f"by_key({function_name(node.emit.function)})"))
        else:
            details.append(("emit", function_name(node.emit)))
        if node.preaggregate:
            details.append(("preaggregate", "spouts combine contributions per key and batch"))
        if node.late_topic is not None:
            details.append(("late", f"topic {node.late_topic} (decided per source partition)"))
        elif node.late_sink is not None:
            details.append(("late", f"sink {node.late_sink} (decided per source partition)"))
        elif node.window is not None:
            details.append(("late", 'dropped (late="drop")'))
        return details
    details = [("inputs", ", ".join(node.inputs)), ("target", node.target.describe())]
    if node.late_of is not None:
        details.append(("writes", f"the late tuples of bolt {node.late_of}"))
    return details


def render_text(topology: Topology) -> str:
    """A readable listing of the topology: nodes, kinds, parallelism, inputs, state,
    sink targets (no trailing newline)."""
    nodes = topology.nodes
    lines = [f"topology {topology.name}"]
    if topology.source:
        lines[0] += f"  ({topology.source})"
    lines.append(f"  source topics: {', '.join(topology.source_topics) or '-'}")
    lines.append(f"  dead letters:  {', '.join(topology.dead_letter_topics) or '-'}")
    policy = topology.quarantine.describe() if topology.quarantine else topology.on_error
    lines.append(f"  on error:      {policy}")
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


def _traits(node: Node) -> dict[str, Any]:
    """What a local recovery must know of a node (:mod:`hailstorm.protocol.alone`): a
    bolt's ``compacting``, a sink's ``mode`` (of its table or topic; none for others)."""
    if isinstance(node, BoltSpec):
        return {"compacting": node.compacting}
    if isinstance(node, SpoutSpec):
        return {}
    mode = getattr(node.target, "mode", None)
    return {} if mode is None else {"mode": mode}


def graph_of(topology: Topology) -> dict[str, Any]:
    """The DAG as plain JSON data (what the driver publishes for ``hailstorm ui`` and the
    negotiator): nodes with kind, parallelism (spouts: None, one instance per partition),
    caption and the traits a local recovery looks at (:func:`_traits`); edges with
    routing; the dead-letter topics."""
    return {
        "nodes": [
            {"name": node.name, "kind": node.kind,
             "parallelism": None if isinstance(node, SpoutSpec) else
             node.parallelism if isinstance(node, BoltSpec) else 1,
             "caption": _caption(node), **_traits(node)}
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
