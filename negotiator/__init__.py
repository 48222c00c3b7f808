"""The hailstorm negotiator: drives a topology's master state in ZooKeeper.

- :mod:`negotiator.states` — the master states and the legal transition relation (data);
- :mod:`negotiator.machine` — :func:`~negotiator.machine.step`, the pure state machine;
- :mod:`negotiator.layout` — ZooKeeper paths, processor ids and JSON records (shared with
  processors and the driver);
- :mod:`negotiator.shell` — the kazoo shell: election, watches, CAS writes;
- :mod:`negotiator.daemon` — the ``python -m negotiator`` / ``hailstorm negotiator`` command.
"""

from negotiator.machine import Config, Decision, View, step
from negotiator.states import (
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
