"""Repeated log lines summed up (:mod:`hailstorm.repeats`): pure, time passed in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hailstorm.repeats import RepeatDigest


def test_the_first_line_of_a_kind_passes_and_the_rest_of_its_interval_is_summed_up() -> None:
    digest: RepeatDigest[str] = RepeatDigest(interval=10.0)
    assert digest.add("refused", "refused 1", 0.0) == ["refused 1"]
    assert digest.add("refused", "refused 2", 1.0) == []
    assert digest.add("other", "other 1", 2.0) == ["other 1"]
    assert digest.add("refused", "refused 3", 5.0) == []
    assert digest.add("other", "other 2", 10.5) == [
        "2 more lines like this in 10 s; the latest: refused 3"]
    assert digest.drain(11.0) == ["1 more line like this in 9 s; the latest: other 2"]
    assert digest.drain(12.0) == []


def test_a_kind_quiet_for_a_whole_interval_is_logged_at_once_again() -> None:
    digest: RepeatDigest[str] = RepeatDigest(interval=10.0)
    assert digest.add("k", "a", 0.0) == ["a"]
    assert digest.due(10.0) == []  # nothing counted: forgotten
    assert digest.add("k", "b", 30.0) == ["b"]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 5)), max_size=200))
def test_every_line_is_logged_or_counted_in_exactly_one_summary(
        lines: list[tuple[str, float]]) -> None:
    def counted(_key: str, count: int, _seconds: float, _latest: str) -> str:
        return f"+{count}"

    digest: RepeatDigest[str] = RepeatDigest(interval=10.0, summary=counted)
    out: list[str] = []
    now = 0.0
    for key, gap in lines:
        now += gap
        out += digest.add(key, key, now)
    out += digest.drain(now)
    assert sum(int(line[1:]) if line.startswith("+") else 1 for line in out) == len(lines)
