"""Declaring topologies: spouts, bolts and sinks wired into a DAG.

A topology lives in a plain Python module that defines a module-level ``topology``::

    topology = Topology("wordcount")
    lines = topology.spout("lines", topic="words", decoder="text",
                           explode=lambda line: re.findall(r"[a-z]+", line.lower()))
    counts = topology.bolt("counts", inputs=[lines], key=itself,
                           state=per_key(Count()), lift=Count.lift,
                           emit=lambda word, count: [(word, count)], parallelism=2)
    topology.sink("word_counts", inputs=[counts], target=Table(...))

Everything here is a pure description, checked as it is declared; the code that runs a
spout or a bolt is :mod:`hailstorm.engine`'s (which imports this package, never the other
way round), and a sink target's rows are :meth:`Table.to_row`. Mistakes raise
:class:`TopologyError` naming the module, the node and the fix; loading a module reports
all of its mistakes in one.

One owner per concept; this package re-exports what the rest of hailstorm imports:

* :mod:`~hailstorm.topology.errors`: the name rule (:data:`NAME_PATTERN`), topic names,
  :class:`TopologyError`, :class:`RowError`, :class:`RecordFailed`, and the collecting of
  every problem of a module being loaded;
* :mod:`~hailstorm.topology.late_rules`: what a window or ttl bolt must say about late data;
* :mod:`~hailstorm.topology.source`: readable names of user functions (a lambda's source);
* :mod:`~hailstorm.topology.tables`: sink targets (:class:`Table`, :class:`Collect`) and the
  one vocabulary of SQL column types;
* :mod:`~hailstorm.topology.specs`: the nodes, and the batch fast paths a bolt's
  declaration allows (:class:`BatchPaths`);
* :mod:`~hailstorm.topology.graph`: the graph of declared nodes, its checks (unknown
  inputs, cycles, dead ends, pre-aggregation, late data) and what reads what;
* :mod:`~hailstorm.topology.builder`: :class:`Topology`, declaring nodes and checking each;
* :mod:`~hailstorm.topology.loading`: importing a topology module (:func:`load_topology`);
* :mod:`~hailstorm.topology.render`: :func:`render_text`, :func:`render_dot`, :func:`graph_of`.
"""

from hailstorm.topology import specs
from hailstorm.topology.builder import Topology
from hailstorm.topology.errors import (
    NAME_PATTERN,
    ON_ERROR_POLICIES,
    TOPIC_PATTERN,
    OnError,
    Quarantine,
    RecordFailed,
    RowError,
    TopologyError,
    check_name,
    check_topic_name,
)
from hailstorm.topology.loading import load_topology
from hailstorm.topology.render import graph_of, render_dot, render_text
from hailstorm.topology.source import function_name
from hailstorm.topology.specs import *  # noqa: F403  (its __all__, re-exported below)
from hailstorm.topology.tables import REJECTED_SUFFIX, Collect, SinkTarget, Table, TableMode

__all__ = [  # the nodes (specs' __all__), the builder, errors, tables, loading, rendering
    *specs.__all__,
    "NAME_PATTERN",
    "ON_ERROR_POLICIES",
    "REJECTED_SUFFIX",
    "TOPIC_PATTERN",
    "Collect",
    "OnError",
    "Quarantine",
    "RecordFailed",
    "RowError",
    "SinkTarget",
    "Table",
    "TableMode",
    "Topology",
    "TopologyError",
    "check_name",
    "check_topic_name",
    "function_name",
    "graph_of",
    "load_topology",
    "render_dot",
    "render_text",
]
