"""What a bolt declares about its own history, for upgrading a running topology
(``hailstorm plan``, :mod:`hailstorm.upgrade`): a rename (``previously=``), a new meaning of
its state (``version=``) and how to turn its old state into the new one (``migrate=``).
Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from hailstorm.topology.errors import TopologyError, check_name

__all__ = ["NodeUpgrade", "Upgrade", "check_upgrade"]


class Upgrade(TypedDict, total=False):
    """The keyword arguments :meth:`Topology.bolt <hailstorm.topology.Topology.bolt>` takes
    about the bolt's history."""

    previously: str
    """The bolt's name in the deployment it replaces: its state follows the rename."""
    version: int
    """The meaning of the state (default 1): raise it when ``key`` or ``lift`` changed
    meaning, and the bolt starts with new state instead of mixing the two."""
    migrate: Callable[[Any], Any]
    """Old state -> new state, for a state type change no Avro schema resolution carries:
    called per key with the old value (keyed state) or once with the whole old state, as
    decoded from the snapshot with the schema it was written with."""


@dataclass(frozen=True)
class NodeUpgrade:
    """A bolt's declared history (the defaults: never renamed, version 1, no migration)."""

    previously: str | None = None
    version: int = 1
    migrate: Callable[[Any], Any] | None = None


def check_upgrade(
    declared: Mapping[str, Any], name: str, topology: str
) -> NodeUpgrade:
    """The :class:`NodeUpgrade` of bolt ``name`` from its keyword arguments, checked."""

    def error(problem: str, fix: str) -> TopologyError:
        return TopologyError(problem, fix=fix, node=f"bolt {name!r}", topology=topology)

    unknown = sorted(set(declared) - set(Upgrade.__annotations__))
    if unknown:
        raise error(f"unknown argument(s) {', '.join(unknown)}",
                    "see Topology.bolt's arguments (previously=, version=, migrate=)")
    previously = declared.get("previously")
    if previously is not None:
        check_name(previously, "previously", f"bolt {name!r}", topology)
        if previously == name:
            raise error(f"previously={previously!r} is the bolt's own name",
                        "name the bolt's old name, or leave previously= out")
    version = declared.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise error(f"version must be an integer >= 1, got {version!r}",
                    "raise version= by one when key or lift changed meaning")
    migrate = declared.get("migrate")
    if migrate is not None and not callable(migrate):
        raise error(f"migrate must be a function old state -> new state, got {migrate!r}",
                    "pass migrate=lambda old: ... or leave it out")
    return NodeUpgrade(previously, version, migrate)
