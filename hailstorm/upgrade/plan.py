"""The plan of an upgrade: what ``hailstorm run`` does to each node when a new topology
replaces a deployed one (:func:`make_plan`), from two pure descriptions: the deployed
nodes (:class:`~hailstorm.upgrade.describe.NodeDescription`, as the last driver recorded
them) with the state the committed round holds (:class:`StoredState`, from the snapshots'
metadata), and the new topology's nodes. Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hailstorm.errors import DefinitionError
from hailstorm.protocol.catchup import catching_up, reads_history
from hailstorm.protocol.clock import NOTHING, Partition, partition_key
from hailstorm.snapshots.evolution import evolution_problem
from hailstorm.upgrade.describe import NodeDescription
from hailstorm.upgrade.tables import table_changes

__all__ = ["Action", "NodePlan", "Plan", "StoredState", "UpgradeRefused", "gone_before",
           "make_plan", "source_topics", "state_change_problem"]


class Action(enum.StrEnum):
    """What a run does to one node."""

    CARRY = "carry"
    """State (or progress) kept as it is."""
    RESHARD = "reshard"
    """State kept, split by key over a new number of instances."""
    MIGRATE = "migrate"
    """State read with the new Avro schema (a compatible evolution)."""
    CONVERT = "convert"
    """State turned into the new type by the bolt's ``migrate=`` function."""
    NEW = "new"
    """No state to carry: starts empty and reads its inputs' retained records."""
    RESTART = "restart"
    """``version=`` raised: the old state is dropped, the new one built from the retained
    records."""
    DROP = "drop"
    """Removed from the topology (``--allow-drop``): its state is deleted."""
    REBUILD = "rebuild"
    """A sink's table replaced by one rebuilt from the committed state (``--rebuild``),
    its progress set to the committed clock."""
    REFUSE = "refuse"
    """Not done: ``run`` stops before starting anything (see the fix)."""


class UpgradeRefused(DefinitionError):
    """The new topology cannot replace the deployed one as it is (the plan refuses a
    node)."""


@dataclass(frozen=True)
class StoredState:
    """What the committed round holds for one bolt (its snapshots' metadata)."""

    monoid: str
    schema: Any
    """The Avro schema the snapshot records were written with."""
    parallelism: int


@dataclass(frozen=True)
class NodePlan:
    """The decision for one node: ``action``, why (``detail``), and for a refusal the
    ``fix``. ``stored_as`` is the name the node's state is stored under (a rename)."""

    node: str
    kind: str
    action: Action
    detail: str
    fix: str = ""
    stored_as: str | None = None

    def line(self) -> str:
        """The one-line form ``run`` and ``plan`` print."""
        text = f"{self.kind} {self.node}: {self.action.value}: {self.detail}"
        return f"{text}. Fix: {self.fix}" if self.fix else text


@dataclass(frozen=True)
class Plan:
    """Every node's decision: the new topology's nodes in order, then removed ones."""

    nodes: tuple[NodePlan, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def refused(self) -> tuple[NodePlan, ...]:
        return tuple(n for n in self.nodes if n.action is Action.REFUSE)

    @property
    def renames(self) -> dict[str, str]:
        """Old bolt name -> new name, for state that follows a rename."""
        return {n.stored_as: n.node for n in self.nodes
                if n.stored_as and n.stored_as != n.node
                and n.action in (Action.CARRY, Action.RESHARD, Action.MIGRATE, Action.CONVERT)}

    @property
    def discarded(self) -> frozenset[str]:
        """Names whose committed state is deleted (dropped nodes, raised versions)."""
        return frozenset(n.stored_as or n.node for n in self.nodes
                         if n.action in (Action.DROP, Action.RESTART))

    @property
    def rebuilds(self) -> tuple[str, ...]:
        """The sinks whose table a run rebuilds from the committed state."""
        return tuple(n.node for n in self.nodes if n.action is Action.REBUILD)

    def lines(self) -> list[str]:
        return [n.line() for n in self.nodes] + list(self.notes)

    def check(self) -> None:
        """Raise :class:`UpgradeRefused` naming the first refused node."""
        if self.refused:
            first = self.refused[0]
            more = f" (and {len(self.refused) - 1} more: hailstorm plan)" \
                if len(self.refused) > 1 else ""
            raise UpgradeRefused(f"upgrade refused: {first.line()}{more}")


def state_change_problem(old: StoredState, new: NodeDescription) -> str | None:
    """Why the stored state cannot be read as the new bolt's state by Avro schema
    resolution (None: it can): see :func:`hailstorm.snapshots.evolution.evolution_problem`."""
    return evolution_problem(old.monoid, old.schema, str(new.state), new.schema)


_MEANING = ("key", "lift", "event_time")


def source_topics(name: str, nodes: Mapping[str, NodeDescription]) -> frozenset[str]:
    """The topics of the spouts upstream of node ``name`` (through any bolts)."""
    topics: set[str] = set()
    seen: set[str] = set()
    todo = [name]
    while todo:
        node = nodes.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.kind == "spout" and node.topic is not None:
            topics.add(node.topic)
        todo.extend(node.inputs)
    return frozenset(topics)


def gone_before(topics: Collection[str],
                log_starts: Mapping[Partition, int]) -> dict[Partition, int]:
    """The partitions of ``topics`` whose log no longer starts at offset 0, with their
    log start: a bolt reading from offset 0 would need the records before it."""
    return {p: start for p, start in sorted(log_starts.items())
            if p[0] in topics and start > 0}


def _gone_text(gone: Mapping[Partition, int]) -> str:
    return ", ".join(f"{partition_key(p)} offsets 0..{start - 1}" for p, start in gone.items())


def _fresh_start(node: NodeDescription, detail: str, gone: Mapping[Partition, int] | None,
                 decide: Any, action: Action, history: bool = True) -> NodePlan:
    """The decision for a bolt without state to carry (new, or a raised version), by its
    ``start=`` and the records its inputs lost (``gone``; None: not known). ``history``
    False: it is fed only through carried bolts, so no record before the committed round
    can reach it (:func:`~hailstorm.protocol.catchup.reads_history`)."""
    if not history and node.start != "latest":
        return decide(action, f"{detail}: starts empty at the committed round's clock: it is "
                      "fed only through carried bolts, which send what they emit from then "
                      "on (no record is replayed for it)")
    if node.start == "latest":
        return decide(action, f"{detail}: starts empty at the committed round's clock "
                      "(start='latest'): no record up to it is read")
    if node.start == "earliest":
        lost = f"; gone: {_gone_text(gone)}" if gone else \
            "; nothing is gone" if gone is not None else ""
        return decide(action, f"{detail}: starts empty and reads the retained records of "
                      f"its inputs from their log start (start='earliest'{lost})")
    if gone:
        return decide(Action.REFUSE, f"{detail}: it would read its inputs from offset 0, "
                      f"but records are gone: {_gone_text(gone)}",
                      "declare start='earliest' on the bolt (read from the log start, "
                      "without them) or start='latest' (start empty at the committed "
                      "round's clock)")
    return decide(action, f"{detail}: starts empty and reads the retained records of its "
                  "inputs (from offset 0)")


def backfill_detail(node: NodeDescription, new: Mapping[str, NodeDescription],
                    committed: Mapping[Partition, int],
                    log_starts: Mapping[Partition, int] | None) -> str | None:
    """What a bolt catching up on its own clock reads: from where its empty state starts
    (offset 0, or with ``start='earliest'`` the log start) up to the ``committed`` clock,
    per source partition, and how many records. None where the log starts are unknown
    and needed."""
    topics = source_topics(node.name, new)
    ranges: dict[Partition, tuple[int, int]] = {}
    for p, last in sorted(committed.items()):
        if p[0] not in topics or last == NOTHING:
            continue
        first = 0
        if node.start == "earliest":
            if log_starts is None or p not in log_starts:
                return None
            first = log_starts[p]
        if first <= last:
            ranges[p] = (first, last)
    if not ranges:
        return "nothing to backfill: its inputs committed no record"
    text = ", ".join(f"{partition_key(p)} {a}..{b}" for p, (a, b) in ranges.items())
    records = sum(b - a + 1 for a, b in ranges.values())
    return (f"backfilled from offsets {text} ({records} records) on its own clock while "
            "rounds keep committing; it joins the rounds' clock when it reaches it")


def _plan_bolt(node: NodeDescription, old: NodeDescription | None,
               stored: StoredState | None, source: str, new_names: Collection[str],
               gone: Mapping[Partition, int] | None, history: bool = True) -> NodePlan:
    def decide(action: Action, detail: str, fix: str = "") -> NodePlan:
        return NodePlan(node.name, "bolt", action, detail, fix, source)

    renamed = f" (renamed from {source})" if source != node.name else ""
    if node.previously and node.previously in new_names:
        return decide(Action.REFUSE, f"previously={node.previously!r} names a node still in "
                      "the topology", "remove previously=, or the old node")
    if old is not None and node.version < old.version:
        return decide(Action.REFUSE, f"version {node.version} is older than the deployed "
                      f"version {old.version}", f"declare version={old.version + 1} or more")
    if old is not None and node.version > old.version:
        return _fresh_start(node, f"version {old.version} -> {node.version}{renamed}: its "
                            "state is dropped", gone, decide, Action.RESTART, history)
    if old is not None and same_fingerprints(old, node):
        # A new state type comes with its own lift: only the key is compared then.
        meaning = _MEANING if stored is None or stored.monoid == node.state else ("key",)
        changed = [f for f in meaning if old.functions.get(f) != node.functions.get(f)]
        if changed:
            what = " and ".join(f"the {f} function" for f in changed)
            return decide(Action.REFUSE, f"{what} changed (fingerprint), so the state would "
                          "mix values of the old and new meaning",
                          f"declare version={node.version + 1} on the bolt (new state, built "
                          "from the retained records), or undo the change")
    if stored is None:
        return _fresh_start(node, f"no committed state{renamed}", gone, decide, Action.NEW,
                            history)
    if stored.parallelism != node.parallelism and not node.keyed and node.parallelism != 1:
        return decide(Action.REFUSE, f"{node.state} is not keyed: its state cannot be split "
                      f"from {stored.parallelism} into {node.parallelism} instances",
                      "use parallelism=1, or keyed state (per_key)")
    shard = "" if stored.parallelism == node.parallelism else \
        f", re-sharded from {stored.parallelism} to {node.parallelism} instances"
    if stored.monoid == node.state:
        action = Action.CARRY if not shard else Action.RESHARD
        return decide(action, f"{node.state} state carried{renamed}{shard}")
    if node.migrates:
        return decide(Action.CONVERT, f"{stored.monoid} -> {node.state} by its migrate= "
                      f"function{renamed}{shard}")
    problem = state_change_problem(stored, node)
    if problem is None:
        return decide(Action.MIGRATE, f"{stored.monoid} read as {node.state} (Avro schema "
                      f"resolution){renamed}{shard}")
    return decide(Action.REFUSE, f"state {problem}",
                  f"declare migrate=lambda old: ... (old state -> new) on the bolt, or "
                  f"version={node.version + 1} to build the new state from the retained "
                  "records, or undo the change")


def same_fingerprints(old: NodeDescription, new: NodeDescription) -> bool:
    """Whether the two descriptions' function fingerprints can be compared: the same
    Python (bytecode) and the same scheme (:data:`~hailstorm.upgrade.describe.FINGERPRINTS`)."""
    return old.python == new.python and old.fingerprints == new.fingerprints


def target_change(old: NodeDescription, new: NodeDescription) -> str | None:
    """How a sink's target changed between its deployed and its new description (a topic
    for a table, a table for a topic, another topic), or None (unchanged, or not known: an
    older driver did not record a topic sink's topic)."""
    def target(d: NodeDescription) -> str | None:
        if d.table is not None:
            return f"table {d.table.get('name', d.name)}"
        return None if d.topic is None else f"topic {d.topic}"

    before, after = target(old), target(new)
    if before is None or after is None or before.split()[0] == after.split()[0] == "table":
        return None  # a table's own changes are table_changes'
    return None if before == after else f"{before} -> {after}"


def _plan_sink(node: NodeDescription, old: NodeDescription, carried: NodePlan,
               decided: Mapping[str, Action], asked: bool, refusal: str | None) -> NodePlan:
    """The decision for a sink the deployed topology has too (``carried``: keep its
    progress, unless its table changed): a changed table definition (or ``--rebuild``,
    ``asked``) is rebuilt from the committed state of its input bolt, or refused."""
    target = target_change(old, node)
    if target is not None:
        return NodePlan(node.name, "sink", Action.REFUSE, (
            f"its target changed ({target}): the new one holds none of the rows written so "
            "far, and the progress kept would leave it so"),
            "keep the old target, or write the new one from a sink of another name (it "
            "gets what its inputs emit from now on)")
    changes = table_changes(old.table, node.table) \
        if old.table is not None and node.table is not None else []
    row_changed = same_fingerprints(old, node) and "row" in old.functions \
        and old.functions.get("row") != node.functions.get("row")
    if not changes and not asked:
        if not row_changed:
            return carried
        return replace(carried, detail=(
            f"{carried.detail}; its row function changed (fingerprint): rows written before "
            f"keep what the old one made of them (--rebuild {node.name} rewrites every row "
            "from the committed state)"))
    table = (node.table or {}).get("name", node.name)
    what = f"table {table} changed ({', '.join(changes)})" if changes else \
        f"table {table} rebuilt on request (--rebuild {node.name})"

    def refuse(why: str, fix: str) -> NodePlan:
        return NodePlan(node.name, "sink", Action.REFUSE, f"{what}: {why}", fix)

    undo = "undo the change" if changes else f"leave out --rebuild {node.name}"
    new_sink = "or write the new table from a sink of another name (it gets what its " \
        "inputs emit from now on)"
    if refusal is not None:
        return refuse(f"it cannot be rebuilt from the committed state ({refusal}), and its "
                      "progress would leave it without every row not written since",
                      f"{undo}, {new_sink}")
    bolt = node.inputs[0]
    if decided.get(bolt) not in (Action.CARRY, Action.RESHARD, Action.MIGRATE,
                                 Action.CONVERT):
        return refuse(f"its input {bolt} has no committed state this run keeps, so there "
                      "is nothing to rebuild it from",
                      f"{undo}; change the table in a later deploy, once {bolt} committed")
    if not asked:
        return refuse("its progress would leave the new table without every row not "
                      "written since",
                      f"pass --rebuild {node.name} to rebuild it from the committed state "
                      f"of {bolt} (the old table is replaced), {undo}, {new_sink}")
    old_name = (old.table or {}).get("name", table)
    replaced = f"replaces table {old_name}" if old_name == table else \
        f"is created (table {old_name} is left as it is)"
    return NodePlan(node.name, "sink", Action.REBUILD, (
        f"{what}: rebuilt from the committed state of {bolt}: table {table} {replaced}, "
        "with every key's row from the committed round, and the sink's progress is set to "
        "the committed clock, in one transaction"))


def make_plan(
    deployed: Mapping[str, NodeDescription] | None,
    states: Mapping[str, StoredState],
    new: Mapping[str, NodeDescription],
    allow_drop: Collection[str] = (),
    log_starts: Mapping[Partition, int] | None = None,
    committed: Mapping[Partition, int] | None = None,
    rebuild: Collection[str] = (),
    rebuild_refusals: Mapping[str, str] | None = None,
    own_clocks: Mapping[str, Mapping[Partition, int]] | None = None,
) -> Plan:
    """What a run of the ``new`` nodes does, given the ``deployed`` ones (None: not
    recorded, e.g. by an older driver: only the stored state is compared), the
    committed round's ``states`` by bolt name, and the source partitions' ``log_starts``
    (None: not known; then a bolt built from offset 0 is not checked for lost records).
    With the ``committed`` round's clock, a bolt catching up on its own clock says what
    its backfill reads (:func:`backfill_detail`). ``rebuild`` names the sinks whose
    table the run may rebuild from the committed state (``--rebuild``);
    ``rebuild_refusals`` says why a sink cannot be (see
    :func:`hailstorm.sinks.rebuild.rebuild_refusal`; absent: it can). ``own_clocks``: the
    committed record's nodes still catching up on a clock of their own (a carried bolt
    among them goes on catching up, and sends its backfill: not only what it emits from
    the committed round on)."""
    notes: list[str] = []
    old_nodes: dict[str, NodeDescription] = dict(deployed or {})
    old_names = set(old_nodes) | set(states)
    if not old_names:
        notes.append("nothing deployed under this name: every node starts afresh")
    elif deployed is None:
        notes.append("the deployed driver recorded no node descriptions: function changes "
                      "cannot be checked, only the stored state")
    plans: list[NodePlan] = []
    taken: set[str] = set()
    bolt_args: dict[str, tuple[Any, Any, Any, Any, Any, Any]] = {}
    for node in new.values():
        source = node.name
        if node.name not in old_names and node.previously in old_names:
            source = node.previously
        old = old_nodes.get(source)
        if source in old_names:
            taken.add(source)
        if old is not None and old.python != node.python:
            notes.append(f"{node.name}: functions not compared (deployed with Python "
                         f"{old.python}, now {node.python})")
        elif old is not None and old.fingerprints != node.fingerprints:
            notes.append(f"{node.name}: functions not compared (deployed by a hailstorm "
                         f"that fingerprinted them another way, scheme {old.fingerprints}; "
                         f"now {node.fingerprints}): the next deploy compares them")
        if node.kind == "bolt":
            gone = None if log_starts is None or not old_names else \
                gone_before(source_topics(node.name, new), log_starts)
            bolt_args[node.name] = (node, old, states.get(source), source, set(new), gone)
            plans.append(_plan_bolt(*bolt_args[node.name]))
        elif old is None or old.kind != node.kind:
            plans.append(NodePlan(node.name, node.kind, Action.NEW,
                                  f"reads topic {node.topic} from its first retained offset"
                                  if node.kind == "spout" else
                                  "writes what its inputs emit from now on"))
        elif node.kind == "spout" and old.topic != node.topic:
            plans.append(NodePlan(node.name, "spout", Action.NEW,
                                  f"reads topic {node.topic} (was {old.topic}) from its first "
                                  "retained offset"))
        else:
            plans.append(NodePlan(node.name, node.kind, Action.CARRY,
                                  "resumes at the committed clock" if node.kind == "spout"
                                  else "keeps its progress"))
    rebuilt = {n.node for n in plans if n.action in (Action.NEW, Action.RESTART)
               and n.kind == "bolt"}
    carried = {n.node for n in plans if n.kind == "bolt" and n.node not in rebuilt
               and n.action is not Action.REFUSE} if old_names else set()
    graph = {n.name: n.inputs for n in new.values() if n.kind == "bolt"}
    still = {n: own for n, own in (own_clocks or {}).items() if n in carried}
    current = carried - set(still)  # at the committed clock: they emit from it on
    for i, bolt in enumerate(plans):  # fed only through current bolts: starts at the clock
        if bolt.kind == "bolt" and current and bolt.node not in carried \
                and not reads_history(bolt.node, graph, current):
            plans[i] = _plan_bolt(*bolt_args[bolt.node], history=False)
            rebuilt.discard(bolt.node)
    for i, bolt in enumerate(plans):
        if bolt.node not in rebuilt:
            continue
        feeds = set(new[bolt.node].inputs)
        if feeds & current:
            bolt = replace(bolt, detail=(
                f"{bolt.detail}; but its input {', '.join(sorted(feeds & current))} is "
                "carried and sends only what it emits from the committed round on, not its "
                "history"))
        for feed in sorted(feeds & set(still)):
            bolt = replace(bolt, detail=(
                f"{bolt.detail}; but its input {feed} is carried, still catching up, and "
                f"sends only what it emits from its own clock ({_clock_text(still[feed])}) "
                "on, not its history before it"))
        plans[i] = bolt
    if committed is not None:
        plans = _with_backfills(plans, new, rebuilt, committed, log_starts, still)
    decided = {n.node: n.action for n in plans}
    for i, sink in enumerate(plans):
        if sink.kind == "sink" and sink.action is Action.CARRY:
            plans[i] = _plan_sink(new[sink.node], old_nodes[sink.node], sink, decided,
                                  sink.node in rebuild, (rebuild_refusals or {}).get(sink.node))
    for i, sink in enumerate(plans):
        starts = sorted(set(new[sink.node].inputs) & rebuilt)
        if sink.kind == "sink" and sink.action is Action.CARRY and starts:
            plans[i] = replace(sink, detail=(
                f"keeps its progress; its input {', '.join(starts)} starts over, so the table "
                "keeps rows of the old state and gets none for records at or before its "
                "progress (rebuild it with hailstorm export once the bolt caught up)"))
    for name in sorted(old_names - taken - set(new)):
        kind = old_nodes[name].kind if name in old_nodes else "bolt"
        if name in allow_drop:
            plans.append(NodePlan(name, kind, Action.DROP, "removed: its committed state "
                                  "and records are deleted" if kind == "bolt" else "removed"))
        else:
            plans.append(NodePlan(name, kind, Action.REFUSE,
                                  "removed from the topology (or renamed without previously=)",
                                  f"pass --allow-drop {name} to delete it, or declare "
                                  f"previously={name!r} on the node that replaces it"))
    for name in sorted(set(rebuild) - {n.node for n in plans if n.kind == "sink"
                                       and n.action in (Action.REBUILD, Action.REFUSE)}):
        notes.append(f"--rebuild {name}: no deployed sink of that name is kept, so nothing "
                     "is rebuilt")
    for name in sorted(set(allow_drop) - (old_names - taken - set(new))):
        notes.append(f"--allow-drop {name}: no deployed node of that name is removed, so "
                     "nothing is dropped")
    return Plan(tuple(plans), tuple(notes))


def _clock_text(clock: Mapping[Partition, int]) -> str:
    """``topic:0 9, topic:1 4``."""
    return ", ".join(f"{partition_key(p)} {o}" for p, o in sorted(clock.items()))


def _with_backfills(plans: list[NodePlan], new: Mapping[str, NodeDescription],
                    rebuilt: Collection[str], committed: Mapping[Partition, int],
                    log_starts: Mapping[Partition, int] | None,
                    still: Mapping[str, Mapping[Partition, int]]) -> list[NodePlan]:
    """``plans`` with what catches up on its own clock said: the rebuilt bolts reading
    history (not ``start='latest'``) and the carried bolts ``still`` catching up (at
    their own clocks), the nodes downstream of them and the carried bolts they read,
    *held* meanwhile (:func:`~hailstorm.protocol.catchup.catching_up`, as the negotiator
    decides)."""
    behind = {b for b in rebuilt if new[b].start != "latest"} | set(still)
    inputs = {n.name: n.inputs for n in new.values() if n.kind != "spout"}
    nodes = catching_up(inputs, behind)
    done: list[NodePlan] = []
    for plan in plans:
        if plan.node in nodes and plan.action is not Action.REFUSE:
            feeding = sorted(set(new[plan.node].inputs) & nodes)
            extra: str | None
            if plan.node in still:
                extra = (f"still catching up: carried at its own clock "
                         f"({_clock_text(still[plan.node])}), and its backfill goes on from "
                         "there")
            elif plan.kind == "bolt" and plan.node in behind:
                extra = backfill_detail(new[plan.node], new, committed, log_starts)
            elif feeding:
                extra = f"catches up with {', '.join(feeding)}"
            else:
                readers = [n for n in sorted(nodes) if plan.node in inputs[n]]
                why = [n for n in readers if n in behind
                       or set(inputs[n]) & nodes - {plan.node}] or readers
                extra = (f"held while {', '.join(why)} "
                         f"{'catches' if len(why) == 1 else 'catch'} up: it reads the backfill "
                         "with them, drops what its state holds, and moves past the "
                         "committed round when the backfill does (its readers get what it "
                         "emits on the backfill's clock)")
            if extra is not None:
                plan = replace(plan, detail=f"{plan.detail}; {extra}")
        done.append(plan)
    return done
