"""``bench/latency.py``'s per-second tail: the p99 of the messages sent in each second."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from latency import SUMMARIZED, describe_runs, p99_per_second, summarize

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


def test_runs_are_summarized_by_median_and_range_leaving_out_what_a_run_lacks() -> None:
    def run(p99: float, pause: float | None) -> dict[str, object]:
        return {"max_rate_msgs_per_s": 30000, "pause_mean_ms": pause,
                "latency_ms": {"p50": p99 / 4, "p90": p99 / 2, "p99": p99, "max": p99 * 2},
                "p99_per_second_ms": {"median": p99 / 3}}

    summary = summarize([run(600.0, 60.0), run(300.0, None), run(900.0, 50.0)])
    assert summary["runs"] == 3
    assert summary["p99_ms"] == {"median": 600.0, "min": 300.0, "max": 900.0}
    assert summary["p99_per_second_median_ms"] == {"median": 200.0, "min": 100.0, "max": 300.0}
    assert summary["pause_mean_ms"] == {"median": 55.0, "min": 50.0, "max": 60.0}
    assert set(SUMMARIZED) <= set(summary)
    text = describe_runs(summary)
    assert "p99 600 (300-900) ms" in text
    assert "a round's clock fixed in 55 (50-60) ms on average" in text


def test_latencies_fold_by_when_in_its_round_a_message_was_sent() -> None:
    from latency_rounds import PHASES, by_round_phase, describe_phases

    starts = [SECOND, 2 * SECOND]  # rounds every second
    arrived = [(SECOND // 2, SECOND)]  # before the first round: left out
    for round_start in starts:
        for i in range(100):
            sent = round_start + i * SECOND // 100
            late = 300 if i < 20 else 100  # ms: the round's first fifth waits longest
            arrived.append((sent, sent + late * 1_000_000))
    arrived.append((3 * SECOND + SECOND // 2, 3 * SECOND + SECOND))  # a late round
    phases = by_round_phase(arrived, starts, 1.0)
    assert len(phases) == PHASES
    assert phases[0] == {"from_s": 0.0, "to_s": 0.2, "messages": 40, "p50": 300.0, "p99": 300.0}
    assert [p["p99"] for p in phases[1:4]] == [100.0] * 3
    assert phases[-1]["to_s"] is None and phases[-1]["messages"] == 41  # the late one too
    assert phases[-1]["p99"] == 340.0  # 40 at 100 ms, one at 500: rank 39.6 of 0..40
    assert describe_phases(phases).startswith("0-0.2 s 300/300; 0.2-0.4 s 100/100")
    assert describe_phases(phases).endswith("; 0.8 s on 100/340")
    assert describe_phases([]) == "no round began while the load ran"
