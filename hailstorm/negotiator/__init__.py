"""The hailstorm negotiator: drives a topology's master state in ZooKeeper.

- :mod:`hailstorm.negotiator.machine` — :func:`~hailstorm.negotiator.machine.step`, the pure
  state machine;
- :mod:`hailstorm.negotiator.cadence` — when the next snapshot round starts, and when one is
  skipped because it would change nothing;
- :mod:`hailstorm.negotiator.outages` — no deadline expires while a processor waits out an outage;
- :mod:`hailstorm.negotiator.shell` — the kazoo shell: election, watches, CAS writes;
- :mod:`hailstorm.negotiator.daemon` — the ``python -m hailstorm.negotiator`` /
  ``hailstorm negotiator`` command.

The master states, the ZooKeeper layout and its records belong to :mod:`hailstorm.protocol`
(shared with processors, the driver and the tools); this package depends on it, never the
reverse: nothing in :mod:`hailstorm` imports :mod:`hailstorm.negotiator`.
"""

from hailstorm.negotiator.machine import Config, Decision, View, step
from hailstorm.protocol.states import (
    Flowing,
    Initialize,
    MasterState,
    NegotiatorDisconnected,
    SpoutsPaused,
    SpoutsRewind,
)

__all__ = [
    "Config",
    "Decision",
    "Flowing",
    "Initialize",
    "MasterState",
    "NegotiatorDisconnected",
    "SpoutsPaused",
    "SpoutsRewind",
    "View",
    "step",
]
