"""What a mid-run deploy in a chaos run (``hailstorm chaos --deploy``, docs/chaos.md) means
for the comparison with the model, pure: the nodes it starts at the committed clock, the
edges on which the model withholds what carried bolts emitted before it, the order the run
consumed the messages in as far as a deploy can tell, and the comparison of the nodes
started late."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hailstorm.dev.harness.compare import Comparison, compare_with_model
from hailstorm.dev.harness.results import BoltStates
from hailstorm.model import run_model
from hailstorm.protocol.clock import Clock
from hailstorm.topology import Topology
from hailstorm.vocabulary import Message

__all__ = ["combined", "compare_deployed", "in_deploy_order", "started_at_deploy",
           "withheld_at_deploys"]


def started_at_deploy(before: Topology, after: Topology) -> list[str]:
    """The nodes a deploy of ``after`` over ``before`` starts at the committed clock: its
    new bolts declaring ``start="latest"`` (not renamed from one of ``before``), and its new
    sinks that read only those. Pure."""
    old = {n.name for n in before.nodes}
    late = [b.name for b in after.bolts if b.name not in old
            and (upgrade := after.upgrades.get(b.name)) is not None
            and upgrade.start == "latest" and upgrade.previously not in old]
    return late + [s.name for s in after.sinks if s.name not in old
                   and s.inputs and set(s.inputs) <= set(late)]


def _declared(topology: Topology, name: str) -> tuple[str, int]:
    """Node ``name``'s state source (``previously=`` or itself) and version."""
    upgrade = topology.upgrades.get(name)
    if upgrade is None:
        return name, 1
    return upgrade.previously or name, upgrade.version


def withheld_at_deploys(initial: Topology, deploys: Sequence[tuple[Topology, Clock]]
                        ) -> dict[tuple[str, str], Clock]:
    """The edges on which the model must withhold tuples (:func:`run_model`'s
    ``withheld``): for each deploy of a topology at a committed clock, from every bolt
    whose state it carried (same name or ``previously=``, version not raised) to every
    node it added or rebuilt, what the bolt emitted at or below that clock (the new node
    gets only what it emits from then on, docs/upgrading.md). Pure."""
    withheld: dict[tuple[str, str], Clock] = {}
    before = initial
    for after, clock in deploys:
        old_bolts = {b.name for b in before.bolts}
        old_sinks = {s.name for s in before.sinks}
        carried = set()
        for bolt in after.bolts:
            was, version = _declared(after, bolt.name)
            if was in old_bolts and version <= _declared(before, was)[1]:
                carried.add(bolt.name)
        added = [b for b in after.bolts if b.name not in carried] + \
            [s for s in after.sinks if _declared(after, s.name)[0] not in old_sinks]
        for node in added:
            for feed in node.inputs:
                if feed in carried:
                    withheld[(feed, node.name)] = dict(clock)
        before = after
    return withheld


def in_deploy_order(messages: Sequence[Message], clocks: Sequence[Clock]) -> list[Message]:
    """``messages`` (in partition and offset order) reordered so that everything at or
    below each deploy's committed clock (``clocks``, in deploy order) comes before what is
    above it, partition and offset order kept within: the order the run consumed them in
    as far as a deploy can tell. A carried bolt's emissions after a deploy hold everything
    before it, on every partition, and the model must see them so (a running total
    emitted for a record above the clock counts every record below it). Pure."""
    def segment(message: Message) -> int:
        for index, clock in enumerate(clocks):
            if message.offset <= clock.get(message.source, -1):
                return index
        return len(clocks)

    return sorted(messages, key=segment)  # stable: partition and offset order within


def combined(parts: Sequence[Comparison]) -> Comparison:
    """One comparison of several (of disjoint nodes): totals summed, lists joined."""
    total = Comparison()
    for part in parts:
        total.lost += part.lost
        total.duplicated += part.duplicated
        total.wrong += part.wrong
        total.keys_compared += part.keys_compared
        total.differences += part.differences
        total.instance_mismatches += part.instance_mismatches
        total.model_disagreements += part.model_disagreements
        total.oracle_note = total.oracle_note or part.oracle_note
    oracles = [p.oracle for p in parts]
    if parts and all(o is not None for o in oracles):
        total.oracle = combined([o for o in oracles if o is not None])
    return total


def compare_deployed(topology: Topology, deploys: Sequence[tuple[Topology, Clock]],
                     initial: Topology, messages: Sequence[Message],
                     states: Mapping[str, BoltStates], tables: Mapping[str, Any],
                     ) -> tuple[list[str], Comparison | None]:
    """The nodes ``deploys`` started at a committed clock (:func:`started_at_deploy`) and
    their committed states and tables against the model of ``topology`` over the messages
    after that clock (None: there were none). Every other node is the model's over every
    message: a re-sharded bolt's too, by the final parallelism."""
    late: list[str] = []
    parts = []
    before = initial
    for deployed, clock in deploys:
        nodes = started_at_deploy(before, deployed)
        before = deployed
        if not nodes:
            continue
        late += nodes
        after = [m for m in messages if m.offset > clock.get((m.topic, m.partition), -1)]
        parts.append(compare_with_model(
            run_model(topology, after), states, {n: tables[n] for n in nodes if n in tables},
            bolts=nodes))
    return late, combined(parts) if parts else None
