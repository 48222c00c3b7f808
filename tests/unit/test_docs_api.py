"""``docs/writing-topologies.md`` against the code: every parameter of what ``hailstorm``
exports for topology authors is named in a section of the docs that shows its function."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hailstorm
from hailstorm import Topology

DOCS = Path(__file__).resolve().parents[2] / "docs" / "writing-topologies.md"

NOT_FOR_AUTHORS = {
    # Made by Topology's methods (their parameters are checked there), or a base to extend.
    "BoltSpec", "SinkSpec", "SpoutSpec", "SinkTarget", "Monoid",
    # Records a model run returns, read by their fields, never built by an author.
    "DeadLetter", "RejectedRow", "ModelResult",
}
"""Exports whose constructors are not part of writing a topology (why, by group)."""

AUTHOR_METHODS = (Topology.spout, Topology.bolt, Topology.sink)


def parameters(function: Callable[..., Any]) -> list[str]:
    """The names a caller may pass: ``**kwargs: Unpack[SomeTypedDict]`` counts its keys."""
    names = []
    hints = typing.get_type_hints(function, include_extras=True) \
        if inspect.isfunction(function) else {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == "self" or parameter.kind is parameter.VAR_POSITIONAL:
            continue
        if parameter.kind is parameter.VAR_KEYWORD:
            unpacked = typing.get_args(hints.get(parameter.name))
            names += [key for td in unpacked for key in typing.get_type_hints(td)]
            continue
        names.append(parameter.name)
    return names


def author_api() -> Iterator[tuple[str, str, list[str]]]:
    """``(name, how the docs call it, parameters)`` of every author-facing callable."""
    for name in hailstorm.__all__:
        obj = getattr(hailstorm, name)
        if name in NOT_FOR_AUTHORS or (inspect.isclass(obj) and issubclass(obj, Exception)):
            continue
        yield name, name, parameters(obj)
    for method in AUTHOR_METHODS:
        yield f"Topology.{method.__name__}", f".{method.__name__}", parameters(method)


def sections(text: str) -> list[str]:
    """The docs cut at every heading (fenced code does not hold headings)."""
    parts: list[str] = [""]
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("#"):
            parts.append("")
        parts[-1] += line + "\n"
    return parts


def test_every_parameter_of_the_authors_api_is_in_the_docs_near_its_function() -> None:
    docs = sections(DOCS.read_text())
    missing = []
    for name, called, params in author_api():
        pattern = rf"\w{re.escape(called)}\(" if called.startswith(".") \
            else rf"(?<![\w.]){re.escape(called)}\b"
        shown = [s for s in docs if re.search(pattern, s)]
        if not shown:
            missing.append(f"{name}: not in the docs")
            continue
        missing += [f"{name}({p}=...): no section showing {called} names {p}"
                    for p in params if not any(re.search(rf"\b{p}\b", s) for s in shown)]
    assert not missing, "docs/writing-topologies.md lacks:\n" + "\n".join(missing)


def test_the_check_sees_keyword_arguments_and_methods() -> None:
    assert {"previously", "version", "migrate", "start"} <= set(parameters(Topology.bolt))
    assert "self" not in parameters(Topology.sink)
    assert ("Topology.bolt", ".bolt", parameters(Topology.bolt)) in list(author_api())
