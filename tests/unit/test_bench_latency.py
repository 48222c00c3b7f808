"""``bench/latency.py``'s per-second tail: the p99 of the messages sent in each second."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from latency import p99_per_second

SECOND = 1_000_000_000


def test_one_slow_second_shows_as_the_greatest_not_the_median() -> None:
    arrived = []
    for second in range(5):
        late = 900 if second == 2 else 100  # ms: one second of a snapshot round, say
        for i in range(100):
            sent = second * SECOND + i * SECOND // 100
            arrived.append((sent, sent + late * 1_000_000))
    arrived.append((5 * SECOND, 5 * SECOND + 5_000 * 1_000_000))  # a part of a second: left out
    assert p99_per_second(arrived) == {"min": 100.0, "median": 100.0, "max": 900.0}


def test_a_run_shorter_than_a_second_is_its_own_second() -> None:
    assert p99_per_second([(0, 20_000_000), (10, 10_000_010)]) == {
        "min": 19.9, "median": 19.9, "max": 19.9}
