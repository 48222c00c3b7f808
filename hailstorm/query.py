"""Reading a bolt's state without stopping the topology: the committed round, by key.

The committed round's snapshots are consistent at its clock (every bolt saved exactly the
records up to it), so they answer "what was the count of ``storm`` at clock C" while the
topology runs on, is stopped, or is gone; Spark is not needed::

    result = query_committed(store, "wordcount", bolt_spec, keys=["storm"], zk=zk)
    result.values    # {"storm": 72925}
    result.epoch, result.clock

A key is looked up in the one snapshot file of the instance that owns it (the bolt's
routing at the round's parallelism); without keys every key of the round is returned.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hailstorm.clock import Clock, clock_to_json
from hailstorm.export import choose_round
from hailstorm.monoids import KeyedMap
from hailstorm.routing import route
from hailstorm.snapshots import SnapshotStore, jsonable
from hailstorm.topology import BoltSpec

__all__ = ["QueryResult", "parse_key", "query_committed"]


@dataclass(frozen=True)
class QueryResult:
    """A bolt's values at one round: ``values`` by key (``missing``: keys it does not
    hold); for non-keyed state, ``values`` is ``{None: state}``."""

    topology: str
    bolt: str
    epoch: int
    clock: Clock
    source: str
    """Why this round: ``committed in ZooKeeper``, ``latest complete round``, ``--epoch``."""
    values: dict[Any, Any] = field(default_factory=dict)
    missing: list[Any] = field(default_factory=list)

    def to_json_lines(self) -> list[str]:
        """One JSON object per key: ``key``, ``value`` (null when missing), ``found``,
        ``epoch``, ``clock``."""
        clock = clock_to_json(self.clock)
        rows = [{"key": jsonable(k), "value": jsonable(v), "found": True} for k, v in
                self.values.items()]
        rows += [{"key": jsonable(k), "value": None, "found": False} for k in self.missing]
        return [json.dumps({**row, "epoch": self.epoch, "clock": clock},
                           separators=(",", ":"), ensure_ascii=False) for row in rows]


def parse_key(text: str, bolt: BoltSpec) -> Any:
    """A key typed on the command line: JSON when it parses to a key the bolt's state can
    hold (``42``, ``["fr", 3]`` as a tuple), else the text itself."""
    state = bolt.state
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, list):
        value = tuple(value)
    check = getattr(state, "check_key", None) if isinstance(state, KeyedMap) else None
    if check is None:
        return value if not isinstance(value, dict) else text
    try:
        check(value)
    except (TypeError, ValueError):
        return text
    return value


def query_committed(store: SnapshotStore, topology: str, bolt: BoltSpec,
                    keys: Sequence[Any] | None = None, *, zk: str | None = None,
                    epoch: int | None = None) -> QueryResult:
    """``bolt``'s state in the committed round (or round ``epoch``, else the latest
    complete one), for ``keys`` or all of it."""
    chosen = choose_round(store, topology, bolt.name, epoch=epoch, zk=zk)
    refs = chosen.refs
    parallelism = refs[0].parallelism
    result = QueryResult(topology, bolt.name, chosen.epoch, dict(chosen.clock), chosen.source)
    if not isinstance(bolt.state, KeyedMap):
        states = [store.load(ref, bolt.state)[1] for ref in refs]
        whole = states[0] if len(states) == 1 else bolt.state.combine_all(states)
        result.values[None] = whole
        return result
    if keys is None:
        for ref in refs:
            result.values.update(store.load(ref, bolt.state)[1])
        return result
    by_instance: dict[int, list[Any]] = {}
    for key in keys:
        by_instance.setdefault(route(key, parallelism), []).append(key)
    for instance, wanted in sorted(by_instance.items()):
        state = store.load(refs[instance], bolt.state)[1]
        for key in wanted:
            if key in state:
                result.values[key] = state[key]
            else:
                result.missing.append(key)
    return result
