"""Stranded processors: seen in the stage attempt, gone from ZooKeeper, no successor."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hailstorm.runtime.stranding import MIN_GRACE, StrandingWatch, stranding_grace

GRACE = 10.0


def test_the_grace_is_three_session_timeouts_and_at_least_ten_seconds() -> None:
    assert stranding_grace(6.0) == 18.0
    assert stranding_grace(2.0) == MIN_GRACE == 10.0


def test_a_processor_gone_for_the_grace_is_stranded_with_how_long() -> None:
    watch = StrandingWatch(GRACE)
    assert watch.observe(0.0, "a1", ["spout:s:t:0", "bolt:b:0"]) == []
    assert watch.observe(2.0, "a1", ["spout:s:t:0"]) == []
    assert watch.observe(11.0, "a1", ["spout:s:t:0"]) == []
    assert watch.observe(12.5, "a1", ["spout:s:t:0"]) == [("bolt:b:0", 10.5)]


def test_a_successor_in_time_clears_it() -> None:
    watch = StrandingWatch(GRACE)
    watch.observe(0.0, "a1", ["bolt:b:0"])
    watch.observe(1.0, "a1", [])
    assert watch.observe(9.0, "a1", ["bolt:b:0"]) == []
    assert watch.observe(15.0, "a1", ["bolt:b:0"]) == []
    watch.observe(16.0, "a1", [])  # gone again: timed from here
    assert watch.observe(25.0, "a1", []) == []
    assert watch.observe(26.0, "a1", []) == [("bolt:b:0", 10.0)]


def test_a_processor_that_never_registered_in_the_attempt_is_not_stranded() -> None:
    watch = StrandingWatch(GRACE)
    watch.observe(0.0, "a1", ["spout:s:t:0"])
    assert watch.observe(100.0, "a1", ["spout:s:t:0"]) == []  # bolt:b:0 never came


def test_a_new_attempt_starts_over() -> None:
    watch = StrandingWatch(GRACE)
    watch.observe(0.0, "a1", ["bolt:b:0"])
    watch.observe(1.0, "a1", [])
    assert watch.observe(20.0, "a2", []) == []  # the next attempt's processors not yet seen
    assert watch.observe(40.0, "a2", []) == []


def test_a_gap_in_the_readings_never_counts() -> None:
    watch = StrandingWatch(GRACE)
    watch.observe(0.0, "a1", ["bolt:b:0"])
    watch.observe(1.0, "a1", [])
    watch.unknown()  # ZooKeeper out: the processors wait it out too
    assert watch.observe(30.0, "a1", []) == []
    assert watch.observe(39.0, "a1", []) == []
    assert watch.observe(40.0, "a1", []) == [("bolt:b:0", 10.0)]


_EVENT = st.one_of(
    st.tuples(st.floats(0.0, 8.0), st.sampled_from(["a1", "a2"]),
              st.frozensets(st.sampled_from(["p0", "p1", "p2"]))),
    st.just(None),  # ZooKeeper could not be read
)


@given(st.lists(_EVENT, max_size=40))
def test_stranded_means_seen_then_missing_in_every_reading_for_the_grace(events) -> None:
    """Against a direct reading of the history: a processor is stranded at a reading when
    it was living in an earlier reading of the same attempt, and every reading of that
    attempt since its last sighting (with no unreadable gap) missed it, the first of them
    at least the grace ago."""
    watch = StrandingWatch(GRACE)
    history: list[tuple[float, str, frozenset[str]] | None] = []
    now = 0.0
    for event in events:
        if event is None:
            watch.unknown()
            history.append(None)
            continue
        step, attempt, living = event
        now += step
        got = watch.observe(now, attempt, living)
        history.append((now, attempt, living))
        expected = []
        for processor in ("p0", "p1", "p2"):
            if processor in living:
                continue
            missing_from = None
            for past in reversed(history):
                if past is None or past[1] != attempt:
                    break  # a gap, or another attempt: absences before it do not count
                if processor in past[2]:
                    break
                missing_from = past[0]
            seen = any(p is not None and p[1] == attempt and processor in p[2]
                       for p in _since_last_attempt_change(history, attempt))
            if seen and missing_from is not None and now - missing_from >= GRACE:
                expected.append((processor, now - missing_from))
        assert got == expected


def _since_last_attempt_change(history, attempt):
    """The readings of ``attempt`` since the last reading of another attempt."""
    out = []
    for past in reversed(history):
        if past is not None and past[1] != attempt:
            break
        out.append(past)
    return out
