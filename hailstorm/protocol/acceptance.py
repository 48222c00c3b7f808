"""An operator's acceptance of a sink behind the committed clock (``hailstorm sink accept``).

``/hailstorm/<topology>/sink-acceptances/<sink>`` holds a :class:`SinkAcceptance`: the
committed round whose gap the operator accepted for every instance of the sink. A sink
opening on progress below the committed clock goes on when an acceptance covers that clock
(:func:`hailstorm.processors.sink_guard.opening_shortfall`); a later committed round needs
no acceptance (the sink saved it), and an older acceptance never covers a newer clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hailstorm.protocol.clock import Clock, clock_from_json, clock_to_json
from hailstorm.protocol.layout import LayoutError, TopologyPaths, decode, encode

__all__ = ["SinkAcceptance", "acceptance_node"]


def acceptance_node(paths: TopologyPaths, sink: str) -> str:
    """``sink-acceptances/<sink>`` under the topology's root."""
    if not sink or "/" in sink:
        raise LayoutError(f"not a sink name: {sink!r}")
    return f"{paths.root}/sink-acceptances/{sink}"


@dataclass(frozen=True)
class SinkAcceptance:
    """The operator accepted that ``sink`` lacks rows at or below ``clock`` (round
    ``epoch``'s committed clock), at ``accepted_at`` (Unix seconds)."""

    sink: str
    epoch: int
    clock: Clock
    accepted_at: float

    def to_json(self) -> bytes:
        return encode({"sink": self.sink, "epoch": self.epoch,
                       "clock": clock_to_json(self.clock), "accepted_at": self.accepted_at})

    @classmethod
    def from_json(cls, raw: bytes | Mapping[str, Any]) -> SinkAcceptance:
        data = raw if isinstance(raw, Mapping) else decode(raw)
        try:
            return cls(str(data["sink"]), int(data["epoch"]), clock_from_json(data["clock"]),
                       float(data["accepted_at"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LayoutError(f"bad SinkAcceptance: {exc!r}") from None
