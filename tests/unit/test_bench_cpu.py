"""The benchmarks' CPU per role: readings of ``process_cpu_seconds_total`` turned into
seconds and microseconds per item of the run (``bench/common.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from common import cpu_by_role, cpu_figures


def test_cpu_by_role_sums_the_instances_read_twice() -> None:
    before = {"spout:events:0": 1.0, "spout:events:1": 2.0, "bolt:totals:0": 0.5,
              "sink:out:0": 0.25, "bolt:totals:1": 9.0}
    after = {"spout:events:0": 3.5, "spout:events:1": 2.5, "bolt:totals:0": 4.5,
             "sink:out:0": 1.25, "bolt:gone:0": 7.0}  # totals:1 ended, gone:0 came after
    assert cpu_by_role(before, after) == {"spout": 3.0, "bolt": 4.0, "sink": 1.0}


def test_a_processor_reading_less_than_before_counts_nothing() -> None:
    assert cpu_by_role({"bolt:b:0": 5.0}, {"bolt:b:0": 1.0}) == {
        "spout": 0.0, "bolt": 0.0, "sink": 0.0}


def test_cpu_figures_per_item_and_the_line() -> None:
    figures, line = cpu_figures({"spout": 13.5, "bolt": 15.0, "sink": 4.0}, 1_000_000, "event")
    assert figures == {
        "cpu_s_spouts": 13.5, "cpu_s_bolts": 15.0, "cpu_s_sinks": 4.0,
        "cpu_us_per_event_spouts": 13.5, "cpu_us_per_event_bolts": 15.0,
        "cpu_us_per_event_sinks": 4.0,
    }
    assert "spouts 13.5 us, bolts 15.0 us, sinks 4.0 us per event (32.5 in all" in line
