"""Calling a topology's user functions the way the engine relies on: :func:`mapped` (a
function over a batch that cannot lose items silently), :func:`drained` (a generator's
failure is the function's) and :func:`as_output_list` (what an ``explode`` or ``emit``
returned, as the list of tuples it stands for). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["as_output_list", "drained", "mapped"]

T = TypeVar("T")


def mapped(function: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """``function`` of every item, a batch at a time (``list(map(...))``), raising
    :class:`RuntimeError` when the function raised ``StopIteration`` on one: ``map`` takes
    that for the end of ``items`` and would return fewer results, silently."""
    results = list(map(function, items))
    if len(results) != len(items):
        raise RuntimeError(f"{getattr(function, '__name__', function)!r} raised "
                           f"StopIteration on item {len(results)} of a batch")
    return results


def drained(produced: Any) -> Any:
    """A generator's (or other iterator's) items as a list, so that an exception it raises
    while producing them is the user function's failure; anything else unchanged."""
    return list(produced) if isinstance(produced, Iterator) else produced


def as_output_list(produced: Any, what: str) -> list[Any]:
    """What ``what`` (an ``explode`` or ``emit`` function) returned as a list of tuples:
    ``None`` is none; a tuple, string, bytes or mapping is a bug in the topology (a single
    tuple not wrapped in a list) and raises ``TypeError`` saying so."""
    kind = type(produced)
    if kind is list:
        return produced
    if produced is None:
        return []
    if kind is tuple or isinstance(produced, str | bytes | bytearray | Mapping):
        raise TypeError(
            f"{what} returned {produced!r}; it must return a list of tuples, e.g. "
            f"[{produced!r}] for a single tuple (or None/[] for none)"
        )
    try:
        return list(produced)
    except TypeError:
        raise TypeError(
            f"{what} returned {produced!r}; it must return a list of tuples (or None/[] for none)"
        ) from None
