"""The bounded waits the harness is built on: :func:`wait_for` and the
:class:`HarnessError` it raises."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hailstorm.errors import HailstormError


class HarnessError(HailstormError):
    """A bounded wait timed out, or a process the harness started died unexpectedly."""


def wait_for(what: str, predicate: Callable[[], Any], timeout: float,
             alive: Callable[[], None] = lambda: None, poll: float = 0.2) -> Any:
    """Poll ``predicate`` until truthy and return its value; ``alive`` raises on a death."""
    deadline = time.monotonic() + timeout
    while True:
        alive()
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
