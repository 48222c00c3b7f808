"""What a bolt declares about its own history, for upgrading a running topology
(``hailstorm plan``, :mod:`hailstorm.upgrade`): a rename (``previously=``), a new meaning of
its state (``version=``), how to turn its old state into the new one (``migrate=``), and
where new state starts when the records before it are gone (``start=``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from hailstorm.topology.errors import TopologyError, check_name

__all__ = ["STARTS", "NodeUpgrade", "Upgrade", "check_upgrade"]

STARTS = ("earliest", "latest")
"""Where a bolt without committed state starts (``start=``): ``earliest``, the log start
of its inputs' topics (records retention deleted are skipped); ``latest``, the committed
round's clock (nothing before it is read). Not declared: from offset 0, refused when
records before the log start are gone."""


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
    start: str
    """Where the bolt starts when it has no committed state (new, or a raised version):
    ``"earliest"`` (its inputs' log start) or ``"latest"`` (the committed round's clock);
    see :data:`STARTS`."""


@dataclass(frozen=True)
class NodeUpgrade:
    """A bolt's declared history (the defaults: never renamed, version 1, no migration)."""

    previously: str | None = None
    version: int = 1
    migrate: Callable[[Any], Any] | None = None
    start: str | None = None


def check_upgrade(
    declared: Mapping[str, Any], name: str, topology: str
) -> NodeUpgrade:
    """The :class:`NodeUpgrade` of bolt ``name`` from its keyword arguments, checked."""

    def error(problem: str, fix: str) -> TopologyError:
        return TopologyError(problem, fix=fix, node=f"bolt {name!r}", topology=topology)

    unknown = sorted(set(declared) - set(Upgrade.__annotations__))
    if unknown:
        raise error(f"unknown argument(s) {', '.join(unknown)}",
                    "see Topology.bolt's arguments (previously=, version=, migrate=, "
                    "start=)")
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
    start = declared.get("start")
    if start is not None and start not in STARTS:
        raise error(f"start must be 'earliest' or 'latest', got {start!r}",
                    "start='earliest' reads from the log start, start='latest' from the "
                    "committed round on")
    return NodeUpgrade(previously, version, migrate, start)
