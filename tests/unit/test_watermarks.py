"""Low water marks over upstream instances (hailstorm.processors.watermarks)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.processors.watermarks import UNBOUNDED, UpstreamWatermarks
from hailstorm.protocol.clock import Partition

P0: Partition = ("t", 0)
P1: Partition = ("t", 1)
P2: Partition = ("u", 0)
PARTITIONS = [P0, P1, P2]


def test_silent_upstream_holds_everything_back() -> None:
    marks = UpstreamWatermarks(["a", "b"])
    assert not marks.complete and marks.silent == ["a", "b"]
    assert not marks.observe("a", {P0: 10})
    assert marks.lwm([P0, P1]) == {P0: -1, P1: -1}
    assert marks.covers({P0: -1, P1: -1})
    assert not marks.covers({P0: 0})
    assert marks.outgoing() is None
    assert marks.observe("b", {P1: 4})
    assert marks.complete and marks.silent == []
    assert marks.lwm([P0, P1, P2]) == {P0: 10, P1: 4, P2: UNBOUNDED}
    assert marks.outgoing() == {P0: 10, P1: 4}


def test_minimum_over_upstreams_carrying_a_partition() -> None:
    marks = UpstreamWatermarks(["a", "b"])
    marks.observe("a", {P0: 3, P1: 8})
    marks.observe("b", {P0: 5})
    assert marks.lwm(PARTITIONS) == {P0: 3, P1: 8, P2: UNBOUNDED}
    assert marks.covers({P0: 3, P1: 8, P2: 1_000_000})
    assert not marks.covers({P0: 4, P1: 8})
    assert not marks.observe("b", {P0: 6})  # a still holds P0 at 3
    assert marks.observe("a", {P0: 7, P1: 8})
    assert marks.offset(P0) == 6


def test_watermarks_only_move_forward() -> None:
    marks = UpstreamWatermarks(["a"])
    marks.observe("a", {P0: 9})
    assert not marks.observe("a", {P0: 2})  # a stale marker is harmless
    assert marks.offset(P0) == 9
    assert not marks.observe("a", {P0: 9})


def test_an_upstream_carrying_nothing_constrains_nothing_once_it_speaks() -> None:
    marks = UpstreamWatermarks(["a", "idle"])
    marks.observe("a", {P0: 1})
    assert marks.offset(P0) == -1
    assert marks.observe("idle", {})
    assert marks.offset(P0) == 1


def test_registering_a_new_upstream_holds_back_again() -> None:
    marks = UpstreamWatermarks(["a"])
    marks.observe("a", {P0: 5})
    marks.register("a")  # idempotent
    assert marks.offset(P0) == 5
    marks.register("late")
    assert marks.offset(P0) == -1 and marks.outgoing() is None
    assert marks.upstreams == ["a", "late"]


def test_unknown_upstream_is_an_error() -> None:
    marks = UpstreamWatermarks(["a"])
    with pytest.raises(KeyError, match="unknown upstream 'x'"):
        marks.observe("x", {P0: 1})


def test_no_upstreams_covers_everything() -> None:
    marks = UpstreamWatermarks()
    assert marks.complete
    assert marks.covers({P0: 100})
    assert marks.outgoing() == {}


# --------------------------------------------------------------------------- properties


@dataclass
class Stream:
    """One upstream's ordered frames: ("data", (p, o)) or ("wm", {p: o})."""

    name: str
    frames: list[tuple[str, object]]


@st.composite
def upstream_streams(draw: st.DrawFn) -> list[Stream]:
    """Several upstreams, each carrying some partitions and sending tuples in any order
    interleaved with valid, monotone watermarks (some upstreams stay silent a long time)."""
    count = draw(st.integers(1, 4))
    streams = []
    for index in range(count):
        domain = draw(st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=3))
        tuples = draw(
            st.lists(st.tuples(st.sampled_from(domain), st.integers(0, 12)), max_size=12)
            if domain
            else st.just([])
        )
        final = 12
        claimed = dict.fromkeys(domain, -1)
        frames: list[tuple[str, object]] = []
        for sent in range(len(tuples) + 1):
            if draw(st.booleans()):
                remaining = tuples[sent:]
                mark = {}
                for p in domain:
                    left = [o for q, o in remaining if q == p]
                    ceiling = min(left) - 1 if left else final
                    claimed[p] = draw(st.integers(claimed[p], max(claimed[p], ceiling)))
                    mark[p] = claimed[p]
                frames.append(("wm", mark))
            if sent < len(tuples):
                frames.append(("data", tuples[sent]))
        streams.append(Stream(f"u{index}", frames))
    return streams


@settings(max_examples=300, deadline=None)
@given(streams=upstream_streams(), order=st.lists(st.integers(0, 3), max_size=80))
def test_lwm_never_passes_a_tuple_in_flight(streams: list[Stream], order: list[int]) -> None:
    marks = UpstreamWatermarks(s.name for s in streams)
    cursor = {s.name: 0 for s in streams}
    spoken: set[str] = set()
    previous = marks.lwm(PARTITIONS)
    schedule = [i % len(streams) for i in order] + [
        i for i, s in enumerate(streams) for _ in s.frames
    ]
    for i in schedule:
        stream = streams[i]
        if cursor[stream.name] == len(stream.frames):
            continue
        kind, payload = stream.frames[cursor[stream.name]]
        cursor[stream.name] += 1
        if kind == "wm":
            assert isinstance(payload, dict)
            marks.observe(stream.name, payload)
            spoken.add(stream.name)
        current = marks.lwm(PARTITIONS)
        for p in PARTITIONS:  # monotone
            assert current[p] >= previous[p]
        previous = current
        if len(spoken) < len(streams):  # a silent upstream holds everything back
            assert all(o == -1 for o in current.values())
            assert marks.outgoing() is None
        in_flight: list[tuple[Partition, int]] = [
            payload  # type: ignore[misc]
            for s in streams
            for kind, payload in s.frames[cursor[s.name] :]
            if kind == "data"
        ]
        for p, o in in_flight:
            assert current[p] < o, f"LWM {current} passed in-flight tuple {(p, o)}"
            assert not marks.covers({p: o})
        outgoing = marks.outgoing()
        if outgoing is not None:
            assert all(outgoing[p] == current[p] for p in outgoing)
            assert all(current[p] == UNBOUNDED for p in PARTITIONS if p not in outgoing)


@settings(max_examples=100, deadline=None)
@given(
    domains=st.lists(
        st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=3), min_size=1, max_size=4
    ),
    final=st.integers(0, 50),
)
def test_final_watermarks_cover_everything_carried(
    domains: list[list[Partition]], final: int
) -> None:
    names = [f"u{i}" for i in range(len(domains))]
    marks = UpstreamWatermarks(names)
    for name, domain in zip(names, domains, strict=True):
        marks.observe(name, dict.fromkeys(domain, final))
    carried = {p for d in domains for p in d}
    for p in PARTITIONS:
        assert marks.offset(p) == (final if p in carried else UNBOUNDED)
    assert marks.covers(dict.fromkeys(PARTITIONS, final))
    assert marks.outgoing() == dict.fromkeys(carried, final)
