"""Errors after which restarting the topology cannot help: the driver stops with the reason.

A processor raises a :class:`TopologyHalt`; its message crosses Spark (which wraps it in a
Py4J error carrying the Python traceback as text) marked with :data:`MARK`, and
:func:`halt_reason` finds it again on the driver, which then stops instead of resubmitting.
"""

from __future__ import annotations

import re

from hailstorm.errors import HaltError

MARK = "[halt] "
_FOUND = re.compile(re.escape(MARK) + r"(.+)")


class TopologyHalt(HaltError, RuntimeError):
    """Restarting would fail the same way (lost Kafka offsets, refused credentials, a sink
    behind the committed clock...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(MARK + reason)
        self.reason = reason


class TopologyHalted(HaltError, RuntimeError):
    """Raised on the driver: a processor halted the topology; ``str()`` is the reason."""


def halt_reason(text: str) -> str | None:
    """The reason of the first :class:`TopologyHalt` named in ``text`` (None: none)."""
    found = _FOUND.search(text)
    return found.group(1).strip() if found else None
