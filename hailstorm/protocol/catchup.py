"""Catching up on a node's own clock: the pure decisions (docs/upgrading.md).

A bolt whose committed state is behind the committed round (new, a raised ``version=``,
or still catching up when the topology restarted) is *behind*. Rather than making every
spout replay the history to every bolt inside the rounds (where no round can commit before
the replay ends), the behind bolts *catch up*, with every node downstream of them and every bolt
they read (:func:`catching_up`): each spout partition reads a second cursor from the lowest
of their clocks, sent only to them, while the live cursor keeps feeding the other nodes from
the committed clock.

* The committed record keeps, beside the round's clock ``K``, each catching-up node's own
  clock (``CommittedRecord.clocks``); a node without an entry is at ``K``.
* :func:`plan_rewind` (Initialize -> SpoutsRewind): which nodes catch up, the live clock
  (min over the other bolts' loads) and the backfill clock (min over theirs).
* A round pauses both cursors: the nodes catching up save at the backfill cursors' clock
  raised to what they loaded (:func:`label_accepted`); the others at the live clock.
  :func:`commit_clocks` is what the commit records for them: a node whose label reached the
  round's clock has *joined* and gets no entry.
* :func:`committed_low_water_mark`: what the committed state as a whole needs replayed.
* :func:`reads_history`: whether a bolt without committed state can get any record from
  before the committed round at all (one fed only through carried bolts cannot: they send
  what they emit from the committed round on), so where it starts.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hailstorm.protocol.clock import NOTHING, Clock, Partition, dominates, low_water_mark

__all__ = [
    "Rewind",
    "behind_bolts",
    "catching_up",
    "commit_clocks",
    "committed_low_water_mark",
    "inputs_of_graph",
    "label_accepted",
    "loaded_by_node",
    "plan_rewind",
    "reads_history",
]


def inputs_of_graph(graph: Mapping[str, Any] | None) -> dict[str, frozenset[str]]:
    """Each bolt's and sink's inputs, from the DAG the driver publishes in ``expected``
    (``hailstorm.topology.graph_of``); ``{}`` without one (an older driver) or for a
    graph that is not of that shape."""
    if not graph:
        return {}
    try:
        kinds = {str(n["name"]): str(n["kind"]) for n in graph.get("nodes", ())}
        inputs: dict[str, set[str]] = {n: set() for n, k in kinds.items() if k != "spout"}
        for edge in graph.get("edges", ()):
            target = str(edge["target"])
            if target in inputs:
                inputs[target].add(str(edge["source"]))
    except (TypeError, KeyError, AttributeError):
        return {}
    return {n: frozenset(i) for n, i in inputs.items()}


def behind_bolts(loads: Mapping[str, Sequence[Mapping[Partition, int]]],
                 committed: Mapping[Partition, int] | None,
                 partitions: Iterable[Partition]) -> frozenset[str]:
    """The bolts with an instance whose loaded clock is below the committed clock on some
    partition (none when nothing is committed)."""
    if committed is None:
        return frozenset()
    domain = sorted(partitions)
    return frozenset(
        bolt for bolt, clocks in loads.items()
        if any(c.get(p, NOTHING) < committed.get(p, NOTHING) for c in clocks for p in domain))


def catching_up(inputs: Mapping[str, Collection[str]], behind: Collection[str]) -> frozenset[str]:
    """The nodes that catch up on their own clock, given each bolt's and sink's inputs (a
    name that is no key is a spout) and the ``behind`` bolts: the smallest set holding
    them that every node reading one of its nodes is in (downstream: it must see only
    backfill clocks) and every bolt one of its nodes reads is in (upstream: likewise).

    A carried bolt that a node catching up reads is *held* this way: it reads the backfill
    with the others, drops what its state already holds and emits what it did not, so its
    readers get its emissions on the backfill clock; its own clock stays the committed
    round's until the backfill passes it. Nodes unconnected to ``behind`` but through
    spouts stay current.
    """
    readers: dict[str, set[str]] = {}
    for node, feeds in inputs.items():
        for feed in feeds:
            readers.setdefault(feed, set()).add(node)
    found: set[str] = set()
    todo = [b for b in behind if b in inputs]
    while todo:
        node = todo.pop()
        if node in found:
            continue
        found.add(node)
        todo.extend(readers.get(node, ()))
        todo.extend(i for i in inputs[node] if i in inputs)
    return frozenset(found)


@dataclass(frozen=True)
class Rewind:
    """Where the spouts rewind: ``live`` for every node but ``catching_up``, which read
    a second cursor from ``backfill`` (None when no node catches up)."""

    live: Clock
    backfill: Clock | None
    catching_up: frozenset[str]


def plan_rewind(loads: Mapping[str, Sequence[Mapping[Partition, int]]],
                committed: Mapping[Partition, int] | None,
                inputs: Mapping[str, Collection[str]],
                partitions: Iterable[Partition]) -> Rewind:
    """The rewind of an Initialize whose bolts loaded ``loads`` (bolt -> its instances'
    loaded clocks), ``committed`` being the committed round's clock.

    Without nodes catching up: the live clock is the low water mark over every bolt
    instance, as ever. Otherwise it is that over the bolts that do not catch up (the
    committed clock when there are none), and the backfill clock that over the ones that
    do, never above the live clock (where it would be, the live cursor serves them too).
    """
    domain = sorted(partitions)
    behind = behind_bolts(loads, committed, domain)
    nodes = catching_up(inputs, behind) if behind else frozenset()
    if not nodes:
        everyone = [c for clocks in loads.values() for c in clocks]
        return Rewind(low_water_mark(everyone, domain), None, frozenset())
    assert committed is not None  # behind bolts are behind a committed round
    current = [c for bolt, clocks in loads.items() if bolt not in nodes for c in clocks]
    live = low_water_mark(current, domain) if current \
        else {p: committed.get(p, NOTHING) for p in domain}
    late = [c for bolt, clocks in loads.items() if bolt in nodes for c in clocks]
    backfill = low_water_mark(late, domain)
    return Rewind(live, {p: min(backfill[p], live[p]) for p in domain}, nodes)


def label_accepted(label: Mapping[Partition, int], live: Mapping[Partition, int],
                   backfill: Mapping[Partition, int]) -> bool:
    """A catching-up bolt's snapshot label for a round paused at ``live`` whose backfill
    cursors paused at ``backfill``: at least the backfill clock (what it was sent, raised
    by what it loaded), at most the round's clock."""
    return dominates(label, backfill) and dominates(live, label)


def commit_clocks(labels: Mapping[str, Mapping[Partition, int]],
                  live: Mapping[Partition, int]) -> dict[str, Clock]:
    """The committed record's ``clocks`` for the nodes catching up, saved at ``labels``
    in a round at ``live``: each at its own label, but those whose label reached ``live``
    (they joined: from the next start, they load at the round's clock like any other)."""
    domain = set(live)
    return {node: {p: label.get(p, NOTHING) for p in sorted(domain | set(label))}
            for node, label in sorted(labels.items())
            if any(label.get(p, NOTHING) != live.get(p, NOTHING) for p in domain | set(label))}


def loaded_by_node(nodes: Iterable[str], clock: Mapping[Partition, int],
                   clocks: Mapping[str, Mapping[Partition, int]],
                   held: Collection[str]) -> dict[str, Clock]:
    """What each of ``nodes`` (catching up) loaded, as a committed record at ``clock``
    with the nodes' own ``clocks`` tells: a node's own clock, else the round's for a bolt
    whose state the round ``held`` (a carried bolt held back with them); a node with
    neither loaded no state the record knows of, and is absent."""
    return {node: dict(clocks[node]) if node in clocks else dict(clock)
            for node in nodes if node in clocks or node in held}


def committed_low_water_mark(clock: Mapping[Partition, int],
                             clocks: Mapping[str, Mapping[Partition, int]]) -> Clock:
    """What the committed state as a whole includes: the round's ``clock`` lowered to the
    clocks of the nodes catching up (a replay for all of it starts above this)."""
    return low_water_mark([clock, *clocks.values()], sorted(clock))


def reads_history(node: str, inputs: Mapping[str, Collection[str]],
                  carried: Collection[str]) -> bool:
    """Whether ``node`` (a bolt without committed state) can be sent records from before
    the committed round: some path up from it reaches a spout without passing a
    ``carried`` bolt (one whose state the committed round holds: it drops what its state
    already holds and emits only from the committed round on). ``inputs`` as for
    :func:`catching_up` (a name that is no key is a spout).

    A bolt fed only through carried bolts starts at the committed round's clock: no spout
    need replay anything for it, since nothing it would be sent comes of that replay."""
    seen: set[str] = set()
    todo = [node]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in inputs:
            return True  # a spout
        todo.extend(i for i in inputs[name] if i not in carried)
    return False
