"""Sliding-window averages of two number streams, with a database counter of busy windows.

This is the task of "concurrent exactly-once" (two streams of numbers; average the
numbers of a sliding time window and write the average out; when a window holds more than
a threshold of numbers, add one to a counter in a transactional database), made
deterministic.

Input: the topics ``numbers-a`` and ``numbers-b``, each message a JSON object
``{"ts": <event time, epoch seconds>, "value": <number>}``.

Windows: ``[start, start + 10)`` for every ``start`` that is a multiple of 5, so each
number lands in the two windows covering its ``ts``.

Output:

* ``window_averages(window_start, window_end, count, average)``: one row per window,
  upserted after every number with the window's running count and average;
* ``window_counters(name, value)``: the row ``busy_windows`` counts the windows that held
  more than ``THRESHOLD`` numbers. It is a merge-mode table: the ``busy`` bolt emits
  ``("busy_windows", 1)`` at the moment a window's count reaches ``THRESHOLD + 1``, and the
  database adds it to the stored value.

Why the result is deterministic: windows are chosen by each number's own timestamp
(event time), never by the clock of the machine processing it, so neither processing
speed nor pauses change which numbers share a window. Averages and counts are
commutative monoids, so the interleaving of the two streams does not matter either: a
window's final row is the mean and count of exactly the numbers whose ``ts`` falls in
it, and since every number adds exactly one to the count of each of its windows, the
count of a window passes ``THRESHOLD + 1`` exactly once if and only if the window ends up
with more than ``THRESHOLD`` numbers. The one condition: a number must not arrive more
than ``RETENTION`` seconds (event time) behind the newest timestamp the bolt has already
seen; windows that old are closed, and such late numbers are dropped (``late="drop"``).
"""

from typing import Any

from hailstorm import Count, Mean, SlidingWindow, Table, Topology

SIZE = 10
"""Window length, seconds."""
SLIDE = 5
"""A new window starts every SLIDE seconds."""
THRESHOLD = 3
"""A window holding more than THRESHOLD numbers is busy."""
RETENTION = 300
"""How late (event time, seconds) a number may arrive and still count."""

WINDOWS = SlidingWindow(SIZE, SLIDE, Mean(), retention=RETENTION)


def reading(message: dict[str, Any]) -> list[tuple[int, float]]:
    """The ``(ts, value)`` tuple of one message."""
    return [(int(message["ts"]), float(message["value"]))]


def window_rows(reading: tuple[int, float], windows: Any) -> list[tuple[int, int, int, float]]:
    """``(window_start, window_end, count, average)`` of the windows covering a reading."""
    ts, _ = reading
    buckets = windows[1]
    rows = []
    for start in WINDOWS.window_starts(ts):
        mean = buckets.get(start)
        if mean is not None:  # None: the window was already closed (late number)
            total, count = mean
            rows.append((start, start + SIZE, count, total / count))
    return rows


def crossed_threshold(window: tuple[int, int, int, float]) -> bool:
    """True for the one update that takes a window past THRESHOLD numbers."""
    return window[2] == THRESHOLD + 1


topology = Topology("window_average")

numbers_a = topology.spout("numbers_a", topic="numbers-a", decoder="json", explode=reading)
numbers_b = topology.spout("numbers_b", topic="numbers-b", decoder="json", explode=reading)

windows = topology.bolt(
    "windows",
    inputs=[numbers_a, numbers_b],
    state=WINDOWS,
    event_time=lambda reading: reading[0],
    lift=lambda reading: Mean.lift(reading[1]),
    emit=window_rows,
    late="drop",  # numbers RETENTION behind the newest are ignored (see the docstring)
)

busy = topology.bolt(
    "busy",
    inputs=[windows],
    state=Count(),
    lift=lambda window: 1 if crossed_threshold(window) else 0,
    emit=lambda window, _: [("busy_windows", 1)] if crossed_threshold(window) else [],
)

topology.sink(
    "window_averages",
    inputs=[windows],
    target=Table(
        "window_averages",
        columns={
            "window_start": "bigint",
            "window_end": "bigint",
            "count": "bigint",
            "average": "double precision",
        },
        key=["window_start"],
        mode="upsert",
    ),
)

topology.sink(
    "window_counters",
    inputs=[busy],
    target=Table(
        "window_counters",
        columns={"name": "text", "value": "bigint"},
        key=["name"],
        mode="merge",
    ),
)
