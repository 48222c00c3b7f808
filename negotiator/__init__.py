"""The hailstorm negotiator: drives a topology's master state in ZooKeeper.

- :mod:`negotiator.machine` — :func:`~negotiator.machine.step`, the pure state machine;
- :mod:`negotiator.outages` — no deadline expires while a processor waits out an outage;
- :mod:`negotiator.shell` — the kazoo shell: election, watches, CAS writes;
- :mod:`negotiator.daemon` — the ``python -m negotiator`` / ``hailstorm negotiator`` command.

The master states, the ZooKeeper layout and its records belong to :mod:`hailstorm.protocol`
(shared with processors, the driver and the tools); this package depends on it, never the
reverse: nothing in :mod:`hailstorm` imports :mod:`negotiator`.
"""

from hailstorm.protocol.states import (
    Flowing,
    Initialize,
    MasterState,
    NegotiatorDisconnected,
    SpoutsPaused,
    SpoutsRewind,
)
from negotiator.machine import Config, Decision, View, step

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
