"""The issue-12 suite runner's summary (``bench/issue12.py``): pure, no benchmark runs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from issue12 import WORKLOADS, figures_of, markdown, summarize


def wordcount_line(hailstorm: int, baseline: int, bytewax: int) -> dict[str, object]:
    """The figures ``bench/wordcount_throughput.py`` prints (the ones the runner reads)."""
    return {"hailstorm_lines_per_s": hailstorm, "hailstorm_table_lines_per_s": 1,
            "baseline_lines_per_s": baseline, "bytewax_word_count_lines_per_s": bytewax,
            "bytewax_word_count_final_lines_per_s": 1,
            "ratio_hailstorm_to_baseline": round(hailstorm / baseline, 3),
            "ratio_hailstorm_to_bytewax_word_count": round(hailstorm / bytewax, 3)}


NO_OTHER_PEERS = {"pathway": None, "quix": None, "pyflink": None,
                  "to_pathway": None, "to_quix": None, "to_pyflink": None, "cpu": None,
                  "machine": None}


def test_the_figures_of_each_script_are_found_by_their_names() -> None:
    assert figures_of(wordcount_line(90, 100, 30)) == {
        "hailstorm": 90.0, "baseline": 100.0, "bytewax": 30.0, "to_baseline": 0.9,
        "to_bytewax": 3.0, **NO_OTHER_PEERS}  # running totals, not the end-only variant
    events = {"hailstorm_events_per_s": 60, "baseline_events_per_s": 120,
              "ratio_hailstorm_to_baseline": 0.5, "pathway_events_per_s": 100,
              "ratio_hailstorm_to_pathway": 0.6}  # --no-bytewax
    assert figures_of(events) == {"hailstorm": 60.0, "baseline": 120.0, "bytewax": None,
                                  "to_baseline": 0.5, "to_bytewax": None,
                                  **NO_OTHER_PEERS, "pathway": 100.0, "to_pathway": 0.6}


def test_the_processors_cpu_is_summed_over_roles() -> None:
    line = wordcount_line(90, 100, 30) | {"cpu_us_per_line_spouts": 16.5,
                                          "cpu_us_per_line_bolts": 9.0,
                                          "cpu_us_per_line_sinks": 5.3, "cpu_s_bolts": 2.7,
                                          "cpu_us_per_line_machine": 44.0,
                                          "cpu_us_per_line_others": 13.2}
    assert figures_of(line)["cpu"] == 30.8  # the machine and the rest are no role
    assert figures_of(line)["machine"] == 44.0


def test_medians_ranges_and_targets_met() -> None:
    runs = [wordcount_line(h, 100, 30) for h in (70, 95, 81)]
    summary = summarize(runs, WORKLOADS["wordcount-300k"])
    assert summary["hailstorm"] == {"median": 81.0, "min": 70.0, "max": 95.0,
                                    "all": [70.0, 81.0, 95.0]}
    assert summary["to_baseline_met"] == 2 and summary["to_bytewax_met"] == 1
    table = markdown({"wordcount-300k": summary})
    assert "| wordcount-300k | 3 | 81 (70-95) | 100 | **0.81**" in table
    assert table.endswith("| - | - | - | - | - |")  # no Pathway, Quix, PyFlink or CPU figure
    with_cpu = [run | {"cpu_us_per_line_spouts": cpu}
                for run, cpu in zip(runs, (31, 30, 40), strict=True)]
    assert markdown({"wordcount-300k": summarize(with_cpu, WORKLOADS["wordcount-300k"])}
                    ).endswith("| - | 31.0 (30.0-40.0) | - |")
    assert "**0.81** (0.70, 0.81, 0.95; >= 0.8 in 2 of 3)" in table
    untargeted = summarize(runs[:1], WORKLOADS["pageviews"])
    assert untargeted["to_baseline_met"] is None
