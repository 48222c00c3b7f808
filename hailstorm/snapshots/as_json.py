"""Snapshot contents as JSON data (what ``hailstorm snapshots --show``, ``hailstorm export``
and live queries print)."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

__all__ = ["jsonable"]


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: tuples and sets become lists, bytes base64, dict keys text."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {
            k if isinstance(k, str) else json.dumps(jsonable(k), sort_keys=True): jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, set | frozenset):
        items = [jsonable(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)
