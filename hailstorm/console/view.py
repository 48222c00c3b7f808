"""What the web console shows, computed from status documents (pure).

The console's server (:mod:`hailstorm.console.server`) takes a status document
(:func:`hailstorm.status.assemble`) every interval and feeds it to a :class:`History`;
:meth:`History.view` turns the latest document and what was kept of the earlier ones into
the data the page draws: the DAG laid out with every instance's phase and every edge's
rate, lag and throughput series, the snapshot rounds, recoveries and dead letters (with
the instances past half their budget for bad records, which the page marks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hailstorm.protocol.layout import LayoutError, parse_processor_id, processor_label
from hailstorm.status.document import budget_problem

Phase = Literal["flowing", "paused", "recovering", "stopped", "dead"]
"""How an instance is drawn: moving data, a spout standing paused for a snapshot round (a
stop's last round, or one that is no barrier),
the topology (re)starting, stopped on request, or failed or gone (see :func:`phase_of`)."""

PHASES: tuple[Phase, ...] = ("flowing", "paused", "recovering", "stopped", "dead")

RECOVERING_STATES = frozenset({"Initialize", "SpoutsRewind", "NegotiatorDisconnected"})
"""Master states in which no instance is flowing: the topology is (re)starting."""

LOCAL_RECOVERY_STATES = frozenset({"Restarting", "Replaying"})
"""Master states of a local recovery: the instances it names recover, the others flow."""

ROUNDS_KEPT = 60
"""How many snapshot rounds the timeline keeps."""

DEAD_LETTERS_KEPT = 20
"""How many of the latest dead letters the console lists."""

# Layout, in SVG user units.
NODE_WIDTH = 230
NODE_HEADER = 58
INSTANCE_SIZE = 16
INSTANCE_GAP = 6
INSTANCES_PER_ROW = 8
STEP = INSTANCE_SIZE + INSTANCE_GAP
LAYER_GAP = 120
NODE_GAP = 30
MARGIN = 20


def node_of(processor: str) -> str | None:
    """The topology node a processor id belongs to (None for a malformed id)."""
    try:
        return parse_processor_id(processor).name
    except LayoutError:
        return None


def master_phase(master: Mapping[str, Any] | None) -> Phase:
    """The phase of the topology as a whole, from the master record (None: no master)."""
    if master is None or master.get("state") in RECOVERING_STATES:
        return "recovering"
    if master.get("state") == "Stopped":
        return "stopped"
    if master.get("state") == "SpoutsPaused" and not master.get("barrier"):
        return "paused"  # a barrier round stops no spout: they read on
    return "flowing"


def phase_of(processor: Mapping[str, Any], master: Mapping[str, Any] | None) -> Phase:
    """The phase of one instance (a processor row of the status document): ``dead`` when it
    failed, or is missing while the master does not know yet; ``recovering`` while the
    master (re)starts the topology, whether the instance registered again or not yet, or
    restarts this instance alone (a local recovery);
    ``stopped`` while the topology is stopped (its instances left on request)."""
    topology = master_phase(master)
    if topology == "stopped":
        return "stopped"
    if processor.get("error"):
        return "dead"
    if topology == "recovering" or (
            master is not None and master.get("state") in LOCAL_RECOVERY_STATES
            and processor.get("id") in (master.get("instances") or ())):
        return "recovering"
    if not processor.get("registered"):
        return "dead"
    barrier = master is not None and master.get("barrier")
    if processor.get("role") == "spout" and (
            topology == "paused" or (processor.get("state") == "paused" and not barrier)):
        return "paused"
    return "flowing"


def layers(nodes: Sequence[Mapping[str, Any]], edges: Iterable[Mapping[str, Any]],
           ) -> dict[str, int]:
    """Each node's column: the length of the longest path reaching it from a spout."""
    inputs: dict[str, list[str]] = {str(n["name"]): [] for n in nodes}
    for edge in edges:
        if edge["target"] in inputs and edge["source"] in inputs:
            inputs[str(edge["target"])].append(str(edge["source"]))
    depth: dict[str, int] = {}

    def visit(name: str, seen: frozenset[str]) -> int:
        if name not in depth:
            sources = [s for s in inputs[name] if s not in seen]  # a cycle cannot be built
            depth[name] = 1 + max((visit(s, seen | {name}) for s in sources), default=-1)
        return depth[name]

    for name in inputs:
        visit(name, frozenset())
    return depth


def _node_height(instances: int) -> int:
    rows = max(1, -(-instances // INSTANCES_PER_ROW))
    return NODE_HEADER + rows * STEP + INSTANCE_GAP


def layout(graph: Mapping[str, Any], instances: Mapping[str, Sequence[str]],
           ) -> dict[str, Any]:
    """Positions of the DAG: nodes in columns by :func:`layers`, each with its instances
    as a grid of squares; edges from the right of their source to the left of their
    target."""
    nodes = [n for n in graph.get("nodes", []) if isinstance(n, Mapping) and "name" in n]
    edges = [e for e in graph.get("edges", [])
             if isinstance(e, Mapping) and "source" in e and "target" in e]
    depth = layers(nodes, edges)
    columns: dict[int, list[Mapping[str, Any]]] = {}
    for node in nodes:
        columns.setdefault(depth[str(node["name"])], []).append(node)
    placed: dict[str, dict[str, Any]] = {}
    height = 0
    for column, members in sorted(columns.items()):
        y = MARGIN
        for node in members:
            name = str(node["name"])
            ids = list(instances.get(name, ()))
            h = _node_height(len(ids))
            x = MARGIN + column * (NODE_WIDTH + LAYER_GAP)
            placed[name] = {
                "name": name, "kind": node.get("kind"), "parallelism": node.get("parallelism"),
                "caption": list(node.get("caption") or []), "x": x, "y": y,
                "w": NODE_WIDTH, "h": h,
                "instances": [
                    {"id": pid, "label": processor_label(pid),
                     "x": x + INSTANCE_GAP + (i % INSTANCES_PER_ROW) * STEP,
                     "y": y + NODE_HEADER + (i // INSTANCES_PER_ROW) * STEP,
                     "size": INSTANCE_SIZE}
                    for i, pid in enumerate(ids)
                ],
            }
            y += h + NODE_GAP
        height = max(height, y)
    width = MARGIN + (max(columns, default=0) + 1) * (NODE_WIDTH + LAYER_GAP) - LAYER_GAP + MARGIN
    drawn = []
    for edge in edges:
        source, target = placed.get(str(edge["source"])), placed.get(str(edge["target"]))
        if source is None or target is None:
            continue
        drawn.append({
            "source": source["name"], "target": target["name"],
            "routing": edge.get("routing"),
            "from": [source["x"] + source["w"], source["y"] + source["h"] / 2],
            "to": [target["x"], target["y"] + target["h"] / 2],
        })
    return {"width": width, "height": max(height, 2 * MARGIN), "nodes": list(placed.values()),
            "edges": drawn}


def instances_by_node(processors: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Processor ids grouped by their node, in the status document's order."""
    grouped: dict[str, list[str]] = {}
    for p in processors:
        name = node_of(str(p["id"]))
        if name is not None:
            grouped.setdefault(name, []).append(str(p["id"]))
    return grouped


def node_rates(processors: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Tuples/s a node sends downstream: the sum of its instances' output rates (every
    edge out of a node carries all of it). None where no instance has a rate yet."""
    rates: dict[str, float | None] = {}
    for p in processors:
        name = node_of(str(p["id"]))
        if name is None:
            continue
        rate = p.get("out_per_s")
        rates.setdefault(name, None)
        if rate is not None:
            rates[name] = (rates[name] or 0.0) + float(rate)
    return rates


@dataclass
class Round:
    """One committed snapshot round as the console saw it."""

    epoch: int
    committed_at: float
    clock: dict[str, int]
    snapshot_s: float | None
    pause_s: float | None
    size_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "committed_at": self.committed_at,
                "offsets": sum(o + 1 for o in self.clock.values()),
                "clock": self.clock, "snapshot_s": self.snapshot_s, "pause_s": self.pause_s,
                "size_bytes": self.size_bytes}


@dataclass
class History:
    """The last ``window`` seconds of status documents, as series, and the rounds seen."""

    window: float = 300.0
    samples: deque[tuple[float, dict[str, Any]]] = field(default_factory=deque)
    rounds: dict[int, Round] = field(default_factory=dict)
    latest: dict[str, Any] | None = None

    def add(self, doc: dict[str, Any]) -> None:
        """Keep one status document (its time is ``doc["time"]``)."""
        now = float(doc["time"])
        self.latest = doc
        self.samples.append((now, {
            "lag": {r["partition"]: r.get("lag") for r in doc.get("partitions", [])},
            "in": {p["id"]: p.get("in_per_s") for p in doc.get("processors", [])},
            "out": {p["id"]: p.get("out_per_s") for p in doc.get("processors", [])},
        }))
        while self.samples and self.samples[0][0] < now - self.window:
            self.samples.popleft()
        for entry in (doc.get("committed_previous"), doc.get("committed")):
            if entry:
                self._round(entry)
        for epoch in sorted(self.rounds)[:-ROUNDS_KEPT]:
            del self.rounds[epoch]

    def _round(self, entry: Mapping[str, Any]) -> None:
        epoch = int(entry["epoch"])
        seen = self.rounds.get(epoch)
        if seen is None:
            self.rounds[epoch] = Round(epoch, float(entry["committed_at"]),
                                       dict(entry.get("clock") or {}), entry.get("snapshot_s"),
                                       entry.get("pause_s"), entry.get("size_bytes"))
        elif seen.size_bytes is None:
            seen.size_bytes = entry.get("size_bytes")

    def series(self) -> dict[str, Any]:
        """Times (seconds before the latest sample) and, per partition and per instance,
        the lag and the rates at each time (None: unknown then)."""
        if not self.samples:
            return {"times": [], "lag": {}, "in": {}, "out": {}}
        last = self.samples[-1][0]
        out: dict[str, Any] = {"times": [round(t - last, 2) for t, _ in self.samples]}
        for kind in ("lag", "in", "out"):
            keys = sorted({k for _, s in self.samples for k in s[kind]})
            out[kind] = {k: [s[kind].get(k) for _, s in self.samples] for k in keys}
        return out

    def view(self, dead_letters: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """What the page draws (see the module docstring)."""
        doc = self.latest or {}
        processors = doc.get("processors", [])
        graph = doc.get("graph") or {
            "nodes": [{"name": n, "kind": None, "parallelism": None, "caption": []}
                      for n in instances_by_node(processors)], "edges": []}
        drawn = layout(graph, instances_by_node(processors))
        phases = {str(p["id"]): phase_of(p, doc.get("master")) for p in processors}
        rates = node_rates(processors)
        for node in drawn["nodes"]:
            for instance in node["instances"]:
                instance["phase"] = phases.get(instance["id"], "dead")
        for edge in drawn["edges"]:
            edge["rate"] = rates.get(edge["source"])
        quarantined = {str(p["id"]): p["quarantined"] for p in processors
                       if p.get("quarantined")}
        over_half = {str(p["id"]): text for p in processors if (text := budget_problem(p))}
        return {
            "master_phase": master_phase(doc.get("master")),
            "layout": drawn,
            "phases": phases,
            "phase_counts": {phase: sum(1 for v in phases.values() if v == phase)
                             for phase in PHASES},
            "series": self.series(),
            "rounds": [self.rounds[e].to_json() for e in sorted(self.rounds)],
            "recoveries": list(doc.get("recoveries", [])),
            "dead_letters": {
                "topics": list((doc.get("graph") or {}).get("dead_letter_topics") or []),
                "by_processor": quarantined,
                "total": sum(quarantined.values()),
                "over_half_budget": over_half,
                "latest": list(dead_letters)[-DEAD_LETTERS_KEPT:],
            },
        }
