"""The architecture's structural rules, checked from the source (issue 17).

* No import cycle between hailstorm's parts: each top-level module or subpackage of
  ``hailstorm`` (``hailstorm.kafka``, ``hailstorm.snapshots``, ...), the package root
  ``hailstorm`` itself are the nodes (``hailstorm.negotiator`` among them); an edge is any
  import, at module level or inside a function (a lazy import is still a dependency), except in an
  ``if TYPE_CHECKING:`` block.
* Nothing else under ``hailstorm/`` imports ``hailstorm.negotiator`` (``hailstorm
  negotiator`` runs it by module name).
* No import cycle between the modules of one package either (a face importing its modules
  while they import the face).
* Layers by vocabulary: ``hailstorm.topology`` declares and validates and imports nothing
  that executes (the engine, the processors, the runtime, the models...); the engine
  (``hailstorm.engine``) stands only on the declarations, so it imports neither a model nor
  the processors that run it.
* Every module is under ~600 lines, or its docstring says why not ("over 600 lines
  because ...").
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hailstorm",)
MAX_LINES = 620
REASON = "over 600 lines because"


def _modules() -> Iterator[tuple[str, Path]]:
    """``(dotted name, path)`` of every module of the checked packages."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name ``tree`` imports (``from a import b`` gives ``a.b``: ``b`` may be a
    submodule), skipping ``if TYPE_CHECKING:`` bodies."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))


def _node(dotted: str, known: set[str]) -> str | None:
    """The graph node of an imported name: its top-level part, or None outside the packages.
    ``hailstorm.Topology`` (an attribute of the root package, not a module) is ``hailstorm``."""
    parts = dotted.split(".")
    if parts[0] != "hailstorm":
        return None
    if len(parts) == 1 or f"hailstorm.{parts[1]}" not in known:
        return "hailstorm"
    return f"hailstorm.{parts[1]}"


def import_graph() -> dict[str, dict[str, list[str]]]:
    """``{node: {imported node: [the modules that import it]}}``."""
    modules = list(_modules())
    known = {name for name, _ in modules}
    graph: dict[str, dict[str, list[str]]] = {}
    for name, path in modules:
        source = _node(name, known)
        assert source is not None
        edges = graph.setdefault(source, {})
        tree = ast.parse(path.read_text(), filename=str(path))
        for dotted in _imported(tree, name, path.name == "__init__.py"):
            target = _node(dotted, known)
            if target is not None and target != source:
                users = edges.setdefault(target, [])
                if name not in users:
                    users.append(name)
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """One cycle ``[a, b, ..., a]`` of ``graph``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_no_import_cycle_between_packages() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle is not None:
        steps = [f"{a} -> {b} (in {', '.join(graph[a][b])})"
                 for a, b in itertools.pairwise(cycle)]
        pytest.fail("import cycle:\n  " + "\n  ".join(steps))


def test_hailstorm_never_imports_negotiator() -> None:
    graph = import_graph()
    offenders = {node: edges["hailstorm.negotiator"] for node, edges in graph.items()
                 if node != "hailstorm.negotiator" and "hailstorm.negotiator" in edges}
    assert not offenders, f"hailstorm modules importing negotiator: {offenders}"


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b": ["a.x"]}, "b": {"c": ["b.y"]}, "c": {"a": ["c.z"]}, "d": {"a": ["d"]}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": ["a"]}, "b": {}}) is None


def test_lazy_imports_count_and_type_checking_ones_do_not() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from hailstorm.kafka import Record\n"
        "def f():\n    from hailstorm.sinks.urls import redact\n"
        "    import hailstorm.negotiator.shell\n"
    )
    assert sorted(_imported(tree, "hailstorm.x", False)) == [
        "hailstorm.negotiator.shell", "hailstorm.sinks.urls.redact", "typing.TYPE_CHECKING"]


def test_modules_are_small_or_say_why() -> None:
    too_long = []
    for _, path in _modules():
        relative = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines < MAX_LINES:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if REASON not in " ".join(docstring.split()):
            too_long.append(f"{relative}: {lines} lines")
    assert not too_long, (
        f"modules of {MAX_LINES}+ lines whose docstring does not say '{REASON} ...': "
        f"{too_long}")


MODELS = ("hailstorm.model", "hailstorm.oracle")
"""The two oracles a run is judged by (issue 47)."""
JUDGES = ("hailstorm", "hailstorm.testing", "hailstorm.dev.harness", "hailstorm.cli",
          "hailstorm.dev.demo")
"""What may import a model besides the models: the package face (it re-exports
``run_model``), the user's test helpers, and the tooling that compares a run with them."""


def _module_imports() -> Iterator[tuple[str, str]]:
    """``(module, imported dotted name)`` for every import of every module."""
    for name, path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for dotted in _imported(tree, name, path.name == "__init__.py"):
            yield name, dotted


def _within(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def test_the_engine_never_imports_a_model() -> None:
    """The runtime, sinks, processors and protocol share the record vocabulary
    (``hailstorm.vocabulary``) with the models, never the models themselves: a model that the
    engine imports would share the engine's bugs with the check that is meant to find them."""
    offenders = sorted(
        f"{module} imports {dotted}" for module, dotted in _module_imports()
        if _within(dotted, MODELS) and not _within(module, MODELS)
        and module not in JUDGES[:1] and not _within(module, JUDGES[1:]))
    assert not offenders, "engine modules importing a model:\n  " + "\n  ".join(offenders)


def _module_of(dotted: str, known: set[str]) -> str | None:
    """The module an imported dotted name lives in: its longest prefix that is a module."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def module_graph() -> dict[str, dict[str, list[str]]]:
    """Module-level imports between the modules of one part (``hailstorm.processors.*``,
    ``hailstorm.topology.*``...): ``{module: {imported module: [module]}}``."""
    modules = list(_modules())
    known = {name for name, _ in modules}
    graph: dict[str, dict[str, list[str]]] = {}
    for name, path in modules:
        part = _node(name, known)
        edges = graph.setdefault(name, {})
        tree = ast.parse(path.read_text(), filename=str(path))
        for dotted in _imported(tree, name, path.name == "__init__.py"):
            target = _module_of(dotted, known)
            if target is not None and target != name and _node(target, known) == part:
                edges.setdefault(target, [name])
    return graph


def test_no_import_cycle_inside_a_package() -> None:
    """A package's face (``__init__``) may import its modules, but then none of them may
    import the face: the cycle only works while the face's imports are ordered just so."""
    cycle = find_cycle(module_graph())
    assert cycle is None, "import cycle inside a package: " + " -> ".join(cycle or [])


ORACLE_MAY_IMPORT = ("hailstorm.oracle", "hailstorm.vocabulary", "hailstorm.errors",
                     "hailstorm.topology", "hailstorm.topic", "hailstorm.monoids",
                     "hailstorm.decoders")
"""What the independent oracle may import of hailstorm: itself, the record vocabulary, the
error family (a leaf that executes nothing), and the declarations (nodes, tables, topics,
monoids, decoders) whose attributes it reads."""

ENGINE_PATHS = frozenset({
    "tuples_of", "tuples_of_many", "contribution", "contributions", "absorb", "absorb_all",
    "absorb_owned", "absorb_contributions", "process", "process_batch", "value_for_emit",
    "combine_contributions", "combine_all", "group_of", "instance_for", "split_by_instance",
    "instance_of_key", "to_row", "key_of", "record_of", "encode_value", "window_starts",
    "groups", "lifted_groups", "closes", "span", "lift_unexpiring", "check_time",
    "emitted", "open_part", "cut", "judge", "decode_all", "late_sink", "late_topic", "window",
    "value_monoid",
})
"""Attributes of the engine's execution paths (``BoltSpec``'s per-tuple and batch methods,
windows' and sinks' code, lateness) the oracle must never touch: it computes them again."""


def test_the_oracle_shares_no_execution_code_with_the_engine() -> None:
    """The oracle (issue 47) imports only the vocabulary and the declarations, and reads no
    attribute of the engine's execution paths: a bug there cannot hide from it."""
    offenders = sorted(
        f"{module} imports {dotted}" for module, dotted in _module_imports()
        if _within(module, ("hailstorm.oracle",)) and _within(dotted, ("hailstorm",))
        and not _within(dotted, ORACLE_MAY_IMPORT))
    for path in sorted((ROOT / "hailstorm" / "oracle").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ENGINE_PATHS:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} uses .{node.attr}")
    assert not offenders, "the oracle shares engine code:\n  " + "\n  ".join(offenders)


DECLARATIONS_NEVER_IMPORT = (
    "hailstorm.engine", "hailstorm.processors", "hailstorm.runtime", "hailstorm.sinks",
    "hailstorm.snapshots", "hailstorm.export", "hailstorm.lateness", "hailstorm.model",
    "hailstorm.oracle", "hailstorm.dev", "hailstorm.negotiator")
"""What executes, stores or judges a topology: ``hailstorm.topology`` declares only."""

ENGINE_STANDS_ON = ("hailstorm.engine", "hailstorm.topology", "hailstorm.monoids",
                    "hailstorm.decoders", "hailstorm.routing", "hailstorm.errors",
                    "hailstorm.vocabulary")
"""All the engine may import of hailstorm: itself, the declarations and the shared
vocabulary (so never a model, nor the processors and runtime that run it)."""


def test_declarations_import_no_execution_code() -> None:
    offenders = sorted(
        f"{module} imports {dotted}" for module, dotted in _module_imports()
        if _within(module, ("hailstorm.topology",))
        and _within(dotted, DECLARATIONS_NEVER_IMPORT))
    assert not offenders, "topology/ importing execution code:\n  " + "\n  ".join(offenders)


def test_the_engine_stands_only_on_the_declarations() -> None:
    offenders = sorted(
        f"{module} imports {dotted}" for module, dotted in _module_imports()
        if _within(module, ("hailstorm.engine",)) and _within(dotted, ("hailstorm",))
        and not _within(dotted, ENGINE_STANDS_ON))
    assert not offenders, "the engine importing above its layer:\n  " + "\n  ".join(offenders)
