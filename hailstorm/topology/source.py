"""Readable names of user functions for ``hailstorm show``: a function's qualified name, or a
lambda's own source text (found by parsing its module). Pure.
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Callable
from typing import Any

__all__ = ["function_name"]


def function_name(function: Callable[..., Any] | None) -> str:
    """A short readable name: the qualified name, or a lambda's own source text."""
    if function is None:
        return "-"
    name = getattr(function, "__qualname__", None) or type(function).__name__
    if getattr(function, "__name__", None) == "<lambda>":
        return _lambda_source(function) or name
    return name


def _lambda_source(function: Callable[..., Any]) -> str | None:
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    try:
        source = "".join(linecache.getlines(code.co_filename))
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    arguments = list(code.co_varnames[: code.co_argcount])
    candidates = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Lambda)
        and node.lineno == code.co_firstlineno
        and [a.arg for a in node.args.args] == arguments
    ]
    if len(candidates) != 1:
        return None
    segment = ast.get_source_segment(source, candidates[0])
    if segment is None:
        return None
    text = " ".join(segment.split())
    return text if len(text) <= 72 else text[:69] + "..."
