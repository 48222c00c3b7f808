"""What a deployment declared, node by node, as plain JSON data: the
:class:`NodeDescription` the driver records in ZooKeeper's ``expected`` record when it
starts and ``hailstorm plan`` compares with a new topology. Pure.

The functions a node declares are recorded as fingerprints (:func:`fingerprint`): a hash
of the function's own bytecode, constants, names and nested functions (not its file or line,
so moving code changes nothing; not the functions it calls). Bytecode differs between Python
versions, so fingerprints are compared only when both sides ran the same ``major.minor``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from hailstorm.snapshots.evolution import reader_schema
from hailstorm.topic import Topic
from hailstorm.topology import BoltSpec, EmitByKey, SinkSpec, SpoutSpec, Table, Topology
from hailstorm.upgrade.tables import table_definition

__all__ = ["FINGERPRINTS", "PYTHON", "NodeDescription", "describe_topology", "fingerprint"]

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
"""The Python version whose bytecode the fingerprints hash."""

FINGERPRINTS = 2
"""How fingerprints are made: 2 follows the module-level functions and constants a
function names; 1 (recorded before, and by descriptions without the field) did not.
Fingerprints of two schemes are not compared."""


def _stable_repr(value: Any) -> str:
    """``repr`` that is the same in every process: sets sorted (string hashes vary between
    processes), objects whose repr shows an address by their type."""
    if isinstance(value, frozenset | set):
        return f"{type(value).__name__}({sorted(map(_stable_repr, value))})"
    if isinstance(value, tuple | list):
        return f"{type(value).__name__}({[_stable_repr(v) for v in value]})"
    if isinstance(value, dict):
        return f"dict({[(_stable_repr(k), _stable_repr(v)) for k, v in value.items()]})"
    text = repr(value)
    if " at 0x" in text:
        kind = type(value)
        return f"<{kind.__module__}.{kind.__qualname__}>"
    return text


def _code_parts(code: types.CodeType, out: list[bytes]) -> None:
    out.append(code.co_code)
    out.append(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_parts(const, out)
        else:
            out.append(_stable_repr(const).encode())


def _names(code: types.CodeType) -> set[str]:
    """Every name ``code`` (nested code included) looks up: globals among them."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _globals_parts(target: Any, code: types.CodeType, depth: int, out: list[bytes]) -> None:
    """What ``target`` names at module level, in its own module: functions by their
    fingerprint (a helper that ``key`` calls), compiled patterns by their pattern and
    flags, plain constants by value. Other modules' objects are left out (a library's
    upgrade is not the topology's change)."""
    scope = getattr(target, "__globals__", None)
    module = getattr(target, "__module__", None)
    if not scope or depth >= 3:
        return
    for name in sorted(_names(code)):
        value = scope.get(name)
        if isinstance(value, types.FunctionType):
            if value is not target and value.__module__ == module:
                out.append(f"{name}={fingerprint(value, depth + 1)}".encode())
        elif isinstance(value, re.Pattern):
            out.append(f"{name}=re({value.pattern!r}, {value.flags})".encode())
        elif isinstance(value, str | bytes | int | float | tuple | frozenset):
            out.append(f"{name}={_stable_repr(value)}".encode())


def fingerprint(function: Callable[..., Any] | None, depth: int = 0) -> str | None:
    """A short stable hash of what ``function`` computes (None for no function).

    Code objects hash their bytecode, names and constants (nested code included), their
    default arguments and closure values (functions among them by their own fingerprint,
    three levels deep), and the module-level functions (likewise) and constants of their
    own module that they name; ``functools.partial`` adds its arguments; anything else
    (builtins, callable objects) hashes its qualified name."""
    if function is None:
        return None
    parts: list[bytes] = []
    target: Any = function
    while isinstance(target, functools.partial):
        parts.append(_stable_repr((target.args, sorted(target.keywords.items()))).encode())
        target = target.func
    code = getattr(target, "__code__", None)
    if isinstance(code, types.CodeType):
        _code_parts(code, parts)
        _globals_parts(target, code, depth, parts)
        parts.append(_stable_repr(getattr(target, "__defaults__", None)).encode())
        for cell in getattr(target, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(value) and depth < 3:
                parts.append(str(fingerprint(value, depth + 1)).encode())
            else:
                parts.append(_stable_repr(value).encode())
    else:
        kind = type(target)
        parts.append(f"{getattr(target, '__module__', kind.__module__)}."
                     f"{getattr(target, '__qualname__', kind.__qualname__)}".encode())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


@dataclass(frozen=True)
class NodeDescription:
    """One node as deployed: its kind, wiring and what its state and functions were."""

    name: str
    kind: str
    inputs: tuple[str, ...] = ()
    parallelism: int | None = None
    """Bolts and sinks; None for spouts (one instance per partition)."""
    topic: str | None = None
    """Spouts: the source topic; sinks writing a topic: that topic (None where an older
    driver recorded a topic sink)."""
    state: str | None = None
    """Bolts: ``monoid.describe()``."""
    schema: Any = None
    """Bolts: the Avro schema of the state's snapshot records."""
    keyed: bool = False
    functions: Mapping[str, str | None] = field(default_factory=dict)
    """Fingerprints of the node's functions (bolts: key, lift, emit, event_time; spouts:
    explode, and the decoder's name)."""
    version: int = 1
    previously: str | None = None
    migrates: bool = False
    """The bolt declares ``migrate=`` (old state -> new state)."""
    start: str | None = None
    """Bolts: ``start=`` (where new state starts when records are gone)."""
    table: Mapping[str, Any] | None = None
    """Sinks writing a table: its definition (:func:`hailstorm.upgrade.tables.table_definition`:
    name, columns and their types, key, mode); the ``row`` function is among ``functions``."""
    python: str = PYTHON
    fingerprints: int = FINGERPRINTS
    """The scheme of :attr:`functions` (:data:`FINGERPRINTS`)."""

    def to_json(self) -> dict[str, Any]:
        """JSON data (a schema's bytes defaults as ISO-8859-1 text, as Avro writes them)."""
        data = asdict(self)
        data["inputs"] = list(self.inputs)
        data["functions"] = dict(self.functions)
        data["schema"] = _jsonable(self.schema)
        data["table"] = None if self.table is None else dict(self.table)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeDescription:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["inputs"] = tuple(values.get("inputs") or ())
        values.setdefault("fingerprints", 1)  # recorded before the field
        values["functions"] = dict(values.get("functions") or {})
        return cls(**values)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def describe_topology(topology: Topology) -> dict[str, NodeDescription]:
    """Every node of ``topology`` described, by name."""
    described: dict[str, NodeDescription] = {}
    for node in topology.nodes:
        if isinstance(node, SpoutSpec):
            described[node.name] = NodeDescription(
                node.name, "spout", topic=node.topic, functions={
                    "decoder": node.decoder.name,
                    "explode": fingerprint(node.explode)})
        elif isinstance(node, BoltSpec):
            upgrade = topology.upgrades.get(node.name)
            described[node.name] = NodeDescription(
                node.name, "bolt", tuple(node.inputs), node.parallelism,
                state=node.state.describe(), schema=reader_schema(node.state),
                keyed=node.keyed, functions={
                    "key": fingerprint(node.key), "lift": fingerprint(node.lift),
                    "emit": f"by_key:{fingerprint(node.emit.function)}"
                    if isinstance(node.emit, EmitByKey) else fingerprint(node.emit),
                    "event_time": fingerprint(node.event_time)},
                version=upgrade.version if upgrade else 1,
                previously=upgrade.previously if upgrade else None,
                migrates=upgrade is not None and upgrade.migrate is not None,
                start=upgrade.start if upgrade else None)
        elif isinstance(node, SinkSpec):
            table = node.target if isinstance(node.target, Table) else None
            described[node.name] = NodeDescription(
                node.name, "sink", tuple(node.inputs), 1,
                topic=node.target.name if isinstance(node.target, Topic) else None,
                functions={} if table is None else {"row": fingerprint(table.row)},
                table=None if table is None else table_definition(table))
    return described
