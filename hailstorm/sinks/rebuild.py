"""Which sinks ``hailstorm sink rebuild`` can rebuild from the committed round (pure).

A sink behind the committed clock (see :mod:`hailstorm.processors.sink_guard`) lacks rows
that no replay brings back. When its table is a function of the committed state of the bolt
feeding it, the table can be rebuilt from that state instead: for an **upsert** table fed
by **one keyed bolt** (``per_key`` state without windows or ttl) whose ``key`` is
:func:`~hailstorm.routing.itself` (the tuple is its key, as in the word count), the row of
every key is the one ``emit(key, value)`` gives with the key's committed value, exactly
what the last tuple of the key produced. :func:`rebuild_refusal` says why any other sink
cannot be rebuilt (merge and append tables sum or list every tuple ever received, which no
state holds). The rebuild itself is :func:`hailstorm.export.rebuild_sink`.
"""

from __future__ import annotations

from hailstorm.routing import itself
from hailstorm.topology import BoltSpec, SinkSpec, SpoutSpec, Table, Topology

__all__ = ["rebuild_refusal", "sink_progress_id", "source_topics_of"]


def source_topics_of(topology: Topology, node: str) -> frozenset[str]:
    """The topics of every spout upstream of ``node`` (transitively)."""
    topics: set[str] = set()
    stack = [node]
    while stack:
        spec = topology.node(stack.pop())
        if isinstance(spec, SpoutSpec):
            topics.add(spec.topic)
        else:
            stack.extend(getattr(spec, "inputs", ()))
    return frozenset(topics)


def sink_progress_id(name: str, sink: str) -> str:
    """The id the progress of ``sink`` of the topology named ``name`` (in ZooKeeper) is
    stored under (one instance per sink)."""
    return f"{name}/sink:{sink}:0"


def rebuild_refusal(topology: Topology, sink: str) -> str | None:
    """Why ``sink`` cannot be rebuilt from a bolt's committed state (None: it can)."""
    spec = topology.node(sink)
    if not isinstance(spec, SinkSpec):
        return f"{sink!r} is a {spec.kind}, not a sink"
    target = spec.target
    if not isinstance(target, Table):
        return f"sink {sink!r} writes {type(target).__name__}, not a table"
    if target.mode != "upsert":
        return (f"table {target.name!r} is a {target.mode} table: its rows sum or list every "
                "tuple ever received, which no committed state holds (only upsert tables "
                "can be rebuilt)")
    inputs = [topology.node(name) for name in spec.inputs]
    if spec.late_of is not None or len(inputs) != 1 or not isinstance(inputs[0], BoltSpec):
        return f"sink {sink!r} does not read exactly one bolt"
    bolt = inputs[0]
    if not bolt.keyed or bolt.window is not None or bolt.emit is None:
        return (f"bolt {bolt.name!r} does not keep plain per_key state with an emit "
                "(windows and ttl emit per event)")
    if bolt.key is not itself and not bolt.emits_by_key:
        return (f"bolt {bolt.name!r} is not keyed by the tuple itself (key=itself) and its "
                "emit reads tuples, which no state holds (emit=by_key(...) reads the key)")
    return None

