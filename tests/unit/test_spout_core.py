"""The pure spout core: rewind, skip, decode/explode, route, pause/resume, watermarks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import routing
from hailstorm.engine import execution_of
from hailstorm.model import messages, run_model
from hailstorm.monoids import Count, Sum, TumblingWindow, per_key
from hailstorm.processors import Batch, ForwardClock, ProtocolViolation, Router, spout_core
from hailstorm.processors.spout_core import Backlog, SpoutCore, SpoutOutput
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import ProcessorState
from hailstorm.routing import route
from hailstorm.topology import Collect, Topology

P: Partition = ("lines", 0)


def topology() -> Topology:
    top = Topology("spouts")
    lines = top.spout("lines", topic="lines", decoder="text", explode=str.split)
    top.bolt(
        "counts",
        inputs=[lines],
        key=lambda w: w,
        state=per_key(Count()),
        lift=Count.lift,
        emit=lambda w, n: [(w, n)],
        parallelism=3,
    )
    top.bolt("total", inputs=[lines], state=Count(), lift=Count.lift)
    top.sink("raw", inputs=[lines], target=Collect())
    return top


def make_spout(partition: int = 0) -> SpoutCore:
    top = topology()
    spec = top.spouts[0]
    return SpoutCore(spec, partition, top.downstream_of(spec))


def flat(output: SpoutOutput, destination: tuple[str, int]) -> list[tuple[int, Any]]:
    batch = output.batches.get(destination, Batch())
    return list(zip(batch.offsets, batch.tuples, strict=True))


def test_start_returns_the_next_offset_to_read() -> None:
    spout = make_spout()
    assert spout.start({P: 41, ("other", 0): 3}) == 42
    assert spout.position == 41 and spout.paused
    assert make_spout().start({}) == 0  # nothing included yet: read from the beginning
    assert make_spout(partition=7).start({P: 9}) == 0  # another partition's entry


def test_use_before_start_is_an_error() -> None:
    spout = make_spout()
    with pytest.raises(RuntimeError, match="before start"):
        spout.on_records([0], [b"a"])
    with pytest.raises(RuntimeError, match="before start"):
        spout.resume()
    assert spout.watermark() == {P: -1}


def test_destinations_cover_every_instance() -> None:
    assert make_spout().destinations == [
        ("counts", 0),
        ("counts", 1),
        ("counts", 2),
        ("total", 0),
        ("raw", 0),
    ]


def test_routes_keyed_tuples_by_key_and_others_to_instance_zero() -> None:
    spout = make_spout()
    spout.start({})
    spout.resume()
    words = ["a", "b", "c", "d", "e", "f", "g"]
    out = spout.on_records([0, 1], [" ".join(words[:4]).encode(), " ".join(words[4:]).encode()])
    for i in range(3):
        batch = out.batches.get(("counts", i), Batch())
        assert all(route(w, 3) == i for w in batch.tuples)
        assert all(p == P for p in batch.partitions)
    routed = sorted(w for i in range(3) for _, w in flat(out, ("counts", i)))
    assert routed == sorted(words)
    everything = [(0, w) for w in words[:4]] + [(1, w) for w in words[4:]]
    assert flat(out, ("total", 0)) == everything
    assert flat(out, ("raw", 0)) == everything
    assert out.watermark == {P: 1} and out.clock is None and not out.dead_letters
    assert spout.emitted == 7


def test_routing_matches_the_reference_model() -> None:
    top = topology()
    values = ["x y z", "y y", "", "q r s t"]
    result = run_model(top, messages("lines", values))
    spout = SpoutCore(top.spouts[0], 0, top.downstream_of("lines"))
    spout.start({})
    out = spout.resume()
    out = spout.on_records(range(len(values)), [v.encode() for v in values])
    model_states = result.instance_states("counts")
    for i in range(3):
        words = out.batches.get(("counts", i), Batch()).tuples
        assert set(words) == set(model_states[i])


def test_skips_records_at_or_below_the_position() -> None:
    spout = make_spout()
    spout.start({P: 4})
    spout.resume()
    # The broker may answer from an earlier batch base offset.
    out = spout.on_records([2, 3, 4, 5, 6], [b"old", b"old", b"old", b"new", b"newer"])
    assert flat(out, ("total", 0)) == [(5, "new"), (6, "newer")]
    out = spout.on_records([6, 7], [b"dup", b"next"])
    assert flat(out, ("total", 0)) == [(7, "next")]
    assert spout.position == 7


def test_decode_failures_become_dead_letters_and_advance() -> None:
    spout = make_spout()
    spout.start({})
    spout.resume()
    out = spout.on_records([0, 1, 2], [b"ok", b"\xff\xfe", None])
    assert flat(out, ("total", 0)) == [(0, "ok")]
    assert [d.message.offset for d in out.dead_letters] == [1, 2]
    letter = out.dead_letters[0]
    assert letter.node == "lines" and letter.topic == "spouts.dead-letter"
    assert letter.stage == "decode" and letter.message.value == b"\xff\xfe"
    assert letter.message.topic == "lines" and letter.message.partition == 0
    assert out.watermark == {P: 2} and spout.rejected == 2


def test_explode_failures_are_dead_letters_too() -> None:
    top = Topology("boom")
    spout_spec = top.spout("nums", topic="nums", decoder="json", explode=lambda v: [1 // v])
    top.sink("out", inputs=[spout_spec], target=Collect())
    spout = SpoutCore(spout_spec, 0, top.downstream_of(spout_spec))
    spout.start({})
    spout.resume()
    out = spout.on_records([0, 1], [b"0", b"1"])
    assert [d.stage for d in out.dead_letters] == ["explode"]
    assert flat(out, ("out", 0)) == [(1, 1)]


def test_explode_generators_that_raise_are_dead_letters() -> None:
    def explode(v: int) -> Any:
        yield 1
        yield 1 // v

    top = Topology("boom")
    spec = top.spout("nums", topic="nums", decoder="json", explode=explode)
    top.sink("out", inputs=[spec], target=Collect())
    spout = SpoutCore(spec, 0, top.downstream_of(spec))
    spout.start({})
    spout.resume()
    out = spout.on_records([0, 1], [b"0", b"1"])
    assert [(d.stage, d.message.offset) for d in out.dead_letters] == [("explode", 0)]
    assert flat(out, ("out", 0)) == [(1, 1), (1, 1)]


def test_pre_aggregation_quarantines_what_the_bolt_would() -> None:
    """A spout combining contributions for a ``preaggregate`` bolt leaves out the tuples
    the bolt's functions fail on, as dead letters of that bolt (what run_model predicts)."""
    top = Topology("pre")
    spec = top.spout("events", topic="events", decoder="json")
    top.bolt("sums", inputs=[spec], key=lambda e: e["k"], state=per_key(Sum()),
             lift=lambda e: e["n"], emit=lambda e, n: [(e["k"], n)], preaggregate=True)
    spout = SpoutCore(spec, 0, top.downstream_of(spec), quarantine_topic="pre.dead-letter")
    spout.start({})
    spout.resume()
    values = [b'{"k": "a", "n": 1}', b'{"n": 2}', b'{"k": "a"}', b'{"k": "b", "n": 1.5}',
              b'{"k": "a", "n": 3}']
    out = spout.on_records(list(range(5)), values)
    part = out.batches[("sums", 0)]
    assert (part.keys, part.values) == (["a"], [4])  # type: ignore[attr-defined]
    letters = [(d.node, d.topic, d.stage, d.message.offset) for d in out.dead_letters]
    expected = run_model(top, messages("events", [v.decode() for v in values])).dead_letters
    assert letters == [(d.node, d.topic, d.stage, d.message.offset) for d in expected] == [
        ("sums", "pre.dead-letter", "key", 1), ("sums", "pre.dead-letter", "lift", 2),
        ("sums", "pre.dead-letter", "monoid", 3)]
    assert out.dead_letters[0].message.value == b"{'n': 2}"


class PreemptAfter:
    """A flush's ``preempt``: no to the first ``n`` asks, yes from then on."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked > self.n


def test_a_pause_preempts_a_flush_under_way_and_what_it_staged_goes_out_after_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flush asks ``preempt`` between slices of the keys it routes; once told a round is
    pausing, it emits nothing and keeps everything staged, dead letters included: after
    the pause the spout emits exactly what a spout never preempted emits."""
    monkeypatch.setattr(routing, "ROUTE_PIECE", 1)  # every key a slice
    top = Topology("pre")
    spec = top.spout("events", topic="events", decoder="json")
    top.bolt("sums", inputs=[spec], key=lambda e: e["k"], state=per_key(Sum()),
             lift=lambda e: e["n"], preaggregate=True, parallelism=2)
    top.bolt("users", inputs=[spec], key=lambda e: e["k"], state=per_key(Count()),
             lift=Count.lift, parallelism=3)
    values = [b'{"k": "a", "n": 1}', b'{"n": 2}', b'{"k": "b", "n": 3}', b'{"k": "c", "n": 4}',
              b'{"k": "a", "n": 5}', b'{"k": "d", "n": 6}']
    spouts = [SpoutCore(spec, 0, top.downstream_of(spec), quarantine_topic="pre.dead-letter")
              for _ in range(2)]
    for spout in spouts:
        spout.start({("events", 0): 2})
        spout.resume()
    steady, preempted = spouts
    preempt = PreemptAfter(1)
    preempted.stage([3, 4, 5], values[3:])
    out = preempted.flush(preempt)
    assert preempt.asked == 2 and preempted.preempted == 1
    assert out.batches == {} and not out.dead_letters and out.watermark == {("events", 0): 2}
    assert preempted.position == 2 and preempted.staged == 3 and preempted.emitted == 0
    assert preempted.pause() == 2
    preempted.stage([5, 6], [values[5], b'{"k": "e", "n": 7}'])  # held while paused
    after = preempted.resume(1, {("events", 0): 2})
    assert after.clock == ForwardClock(1, {("events", 0): 2})

    steady.stage([3, 4, 5, 6], [*values[3:], b'{"k": "e", "n": 7}'])
    expected = steady.flush()
    assert after.batches == expected.batches and len(after.batches) >= 3
    assert after.dead_letters == expected.dead_letters
    assert preempted.emitted == steady.emitted and preempted.position == steady.position == 6


def test_a_flush_is_not_preempted_where_stream_times_are_judged() -> None:
    top = Topology("late")
    spec = top.spout("events", topic="events", decoder="json")
    top.bolt("windows", inputs=[spec], key=lambda e: e["k"],
             state=per_key(TumblingWindow(10, Count(), retention=10)), lift=Count.lift,
             event_time=lambda e: e["t"], parallelism=2, late="late.late")
    spout = SpoutCore(spec, 0, top.downstream_of(spec))
    spout.start({})
    spout.resume()
    spout.stage([0, 1], [b'{"k": "a", "t": 0}', b'{"k": "b", "t": 1}'])
    out = spout.flush(PreemptAfter(0))
    assert spout.preempted == 0 and sum(map(len, out.batches.values())) == 2


def first(items: list[Any]) -> Any:
    """A user function that raises StopIteration on an empty list."""
    return next(iter(items))


def test_user_functions_raising_stop_iteration_lose_no_record() -> None:
    """``map`` takes a StopIteration for the end of its input, which would end a batch
    early: the decoder, explode, key and lift that raise it quarantine their record (as
    ``run_model`` does) and every other record goes through."""
    top = Topology("stop")
    spec = top.spout("events", topic="events", decoder=lambda raw: first(json.loads(raw)),
                     explode=lambda e: [first(e["tags"])])
    top.bolt("sums", inputs=[spec], key=lambda t: t["k"], state=per_key(Sum()),
             lift=lambda t: first(t["n"]), preaggregate=True, parallelism=2)
    values = ['[{"tags": [{"k": "a", "n": [1]}]}]', '[]', '[{"tags": []}]',
              '[{"tags": [{"k": "b", "n": []}]}]', '[{"tags": [{"k": "a", "n": [2]}]}]']
    spout = SpoutCore(spec, 0, top.downstream_of(spec), quarantine_topic="stop.dead-letter")
    spout.start({})
    spout.resume()
    out = spout.on_records(list(range(len(values))), [v.encode() for v in values])
    sums = {k: v for part in out.batches.values()
            for k, v in zip(part.keys, part.values, strict=True)}  # type: ignore[attr-defined]
    assert sums == {"a": 3}
    expected = run_model(top, messages("events", values)).dead_letters
    assert [(d.stage, d.message.offset) for d in out.dead_letters] == \
        [(d.stage, d.message.offset) for d in expected] == [
            ("decode", 1), ("explode", 2), ("lift", 3)]


def test_pre_aggregation_does_not_quarantine_again_what_the_bolts_loaded() -> None:
    top = Topology("pre")
    spec = top.spout("events", topic="events", decoder="json")
    top.bolt("sums", inputs=[spec], key=lambda e: e["k"], state=per_key(Sum()),
             lift=lambda e: e["n"], preaggregate=True)
    spout = SpoutCore(spec, 0, top.downstream_of(spec))
    spout.start({("events", 0): -1}, loaded={("events", 0): 1})  # replays 0..1 below it
    spout.resume()
    out = spout.on_records([0, 1, 2], [b'{"n": 1}', b'{"k": "a", "n": 1}', b'{"n": 3}'])
    assert [d.message.offset for d in out.dead_letters] == [2]


def test_paused_spout_holds_records_until_resume_sends_the_clock_first() -> None:
    spout = make_spout()
    spout.start({P: 9})
    spout.resume()
    spout.on_records([10], [b"a"])
    assert spout.pause() == 10
    held = spout.on_records([10, 11, 12], [b"dup", b"b", b"c"])
    assert held.batches == {} and held.watermark == {P: 10} and held.clock is None
    assert spout.held == 2 and spout.watermark() == {P: 10}
    assert spout.on_records([12, 13], [b"c", b"d"]).batches == {}
    out = spout.resume(1, {P: 10, ("other", 0): 5})
    assert out.clock == ForwardClock(1, {P: 10, ("other", 0): 5})
    assert flat(out, ("total", 0)) == [(11, "b"), (12, "c"), (13, "d")]
    assert out.watermark == {P: 13} and spout.held == 0 and not spout.paused


def test_a_barrier_round_marks_the_position_and_the_spout_reads_on() -> None:
    spout = make_spout()
    spout.start({P: 9})
    spout.resume()
    spout.on_records([10], [b"a"])
    spout.stage([11], [b"b"])  # staged, not emitted: beyond the mark
    position, part = spout.cut(1)
    assert position == 10 and part == ForwardClock(1, {P: 10}, partial=True)
    assert not spout.paused
    out = spout.on_records([12], [b"c"])
    assert flat(out, ("total", 0)) == [(11, "b"), (12, "c")] and out.clock is None
    out = spout.resume(1, {P: 10, ("other", 0): 5})  # beyond the clock: at its own mark
    assert out.clock == ForwardClock(1, {P: 10, ("other", 0): 5})
    assert out.batches == {}


def test_a_barrier_rounds_clock_must_be_where_the_spout_cut() -> None:
    spout = make_spout()
    spout.start({})
    spout.resume()
    spout.on_records([0, 1], [b"a", b"b"])
    spout.cut(1)
    spout.on_records([2], [b"c"])
    with pytest.raises(ProtocolViolation, match="beyond the clock of round 1"):
        spout.resume(1, {P: 0})
    spout.pause()
    with pytest.raises(ValueError, match="paused"):
        spout.cut(2)


def test_resume_after_rewind_without_a_clock() -> None:
    spout = make_spout()
    assert spout.start({P: 2}) == 3
    spout.on_records([3], [b"x"])  # fetched before Flowing: held
    out = spout.resume()
    assert out.clock is None and flat(out, ("total", 0)) == [(3, "x")]


def test_each_round_announces_its_clock_once() -> None:
    spout = make_spout()
    spout.start({})
    spout.pause()
    assert spout.resume(3, {P: -1}).clock == ForwardClock(3, {P: -1})
    spout.pause()
    assert spout.resume(3, {P: -1}).clock is None  # the same round seen again
    assert spout.resume(2, {P: -1}).clock is None  # an older round
    assert spout.resume(None, None).clock is None


def test_a_clock_below_the_position_is_a_protocol_violation() -> None:
    spout = make_spout()
    spout.start({})
    spout.resume()
    spout.on_records([0, 1, 2], [b"a", b"b", b"c"])
    spout.pause()
    with pytest.raises(ProtocolViolation, match="beyond the clock of round 1"):
        spout.resume(1, {P: 1})
    with pytest.raises(ValueError, match="epoch"):
        spout.resume(None, {P: 5})


def test_resume_when_already_flowing_is_fine_if_nothing_passed_the_clock() -> None:
    spout = make_spout()
    spout.start({})
    spout.resume()
    spout.on_records([0], [b"a"])
    out = spout.resume(1, {P: 0})
    assert out.clock == ForwardClock(1, {P: 0})


def test_rewinding_again_discards_held_records() -> None:
    spout = make_spout()
    spout.start({})
    spout.on_records([0, 1], [b"a", b"b"])
    assert spout.held == 2
    assert spout.start({P: 0}) == 1
    assert spout.held == 0
    out = spout.resume()
    assert out.batches == {}


def test_backlog_is_behind_from_a_full_fetch_to_the_end_and_caught_up_until_a_pause() -> None:
    backlog = Backlog()
    backlog.fetched(full=False, at_end=True)  # a trickle: never behind, so never caught up
    assert backlog.state is ProcessorState.FLOWING
    backlog.fetched(full=True, at_end=False)
    backlog.fetched(full=False, at_end=False)  # a short fetch alone does not end it
    assert backlog.state is ProcessorState.BEHIND
    backlog.paused()  # a round in the middle of a backlog leaves it behind
    assert backlog.state is ProcessorState.BEHIND
    backlog.fetched(full=True, at_end=True)
    assert backlog.state is ProcessorState.CAUGHT_UP
    backlog.fetched(full=False, at_end=True)
    backlog.fetched(full=True, at_end=False)  # a new burst: no report until the next pause
    assert backlog.state is ProcessorState.CAUGHT_UP  # until a round covers it
    backlog.paused()
    assert backlog.state is ProcessorState.FLOWING


def test_a_recoverys_replay_is_caught_up_at_the_partitions_end_however_short() -> None:
    backlog = Backlog()
    backlog.rewound()
    backlog.fetched(full=False, at_end=False)
    assert backlog.state is ProcessorState.FLOWING  # still replaying
    backlog.fetched(full=False, at_end=True)  # the replay was read: its round is due
    assert backlog.state is ProcessorState.CAUGHT_UP
    backlog.paused()
    backlog.fetched(full=False, at_end=True)  # a trickle again afterwards
    assert backlog.state is ProcessorState.FLOWING


def test_staged_records_wait_for_a_flush_and_a_pause_leaves_them_beyond_the_clock() -> None:
    spout = make_spout()
    spout.start({P: 9})
    spout.resume()
    spout.stage([10, 11], [b"a", b"\xff"])
    spout.stage([11, 12], [b"dup", b"c"])  # a re-fetch of a staged offset is skipped
    assert spout.position == 9 and spout.staged_through == 12 and spout.next_offset == 13
    assert spout.pause() == 9  # staged records are not emitted: the clock may stay below
    spout.stage([12, 13], [b"c", b"d"])  # fetched while paused: held after the staged
    assert spout.held == 1 and spout.flush().batches == {}
    out = spout.resume(1, {P: 9})
    assert out.clock == ForwardClock(1, {P: 9})
    assert flat(out, ("total", 0)) == [(10, "a"), (12, "c"), (13, "d")]
    assert [d.message.offset for d in out.dead_letters] == [11]
    assert out.watermark == {P: 13} and spout.flush().batches == {}


def test_rewinding_discards_staged_records() -> None:
    spout = make_spout()
    spout.start({})
    spout.resume()
    spout.stage([0, 1], [b"a", b"b"])
    assert spout.start({P: 0}) == 1
    assert spout.staged_through == 0
    spout.resume()
    assert spout.flush().batches == {}


@given(st.lists(st.one_of(st.text(max_size=2), st.integers(-3, 3)), max_size=20),
       st.integers(2, 4))
def test_a_batch_goes_where_instance_for_sends_each_tuple(tuples: list[Any],
                                                          parallelism: int) -> None:
    """Keys are taken and routed a batch at a time; where the key function fails (here on
    0), the tuples still go where ``instance_for`` sends them, instance 0."""
    top = Topology("batch")
    source = top.spout("source", topic="source", decoder="text")
    bolt = top.bolt("b", inputs=[source], key=lambda t: t.upper() if isinstance(t, str) else 6 // t,
                    state=Count(), lift=Count.lift, parallelism=parallelism)
    n = len(tuples)
    routed = Router(top.downstream_of(source)).route(Batch([P] * n, list(range(n)), tuples))
    for i in range(parallelism):
        expected = [(o, t) for o, t in enumerate(tuples) if execution_of(bolt).instance_for(t) == i]
        batch = routed.get(("b", i), Batch())
        assert list(zip(batch.offsets, batch.tuples, strict=True)) == expected


def test_a_key_function_raising_stop_iteration_loses_no_tuple() -> None:
    """``map`` takes a StopIteration for the end of its input: the batch's keys would come
    out short. Every tuple still goes where ``instance_for`` sends it."""
    top = Topology("stop")
    source = top.spout("source", topic="source", decoder="json")
    bolt = top.bolt("b", inputs=[source], key=lambda t: next(iter(t)), state=Count(),
                    lift=Count.lift, parallelism=3)
    tuples: list[Any] = [["a"], [], ["b"], ["c"], ["d"]]
    n = len(tuples)
    routed = Router(top.downstream_of(source)).route(Batch([P] * n, list(range(n)), tuples))
    assert sorted(o for batch in routed.values() for o in batch.offsets) == list(range(n))
    for (_, i), batch in routed.items():
        assert all(execution_of(bolt).instance_for(t) == i for t in batch.tuples)


def test_router_with_no_tuples_routes_nothing() -> None:
    top = topology()
    assert Router(top.downstream_of("lines")).route(Batch()) == {}


# --------------------------------------------------------------------------- properties


@st.composite
def spout_script(draw: st.DrawFn) -> tuple[int, list[tuple[str, Any]]]:
    """A rewind point and a sequence of fetches (overlapping ranges, as a broker may
    return; emitted at once, or staged for a later flush), flushes (some preempted after
    a few slices), pauses and resumes with clocks."""
    rewind = draw(st.integers(-1, 5))
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["fetch", "fetch", "stage", "flush", "preempt", "pause",
                                     "resume"]))
        if kind in ("fetch", "stage"):
            start = draw(st.integers(0, 30))
            steps.append((kind, list(range(start, start + draw(st.integers(0, 4))))))
        else:
            steps.append((kind, draw(st.integers(0, 6))))
    return rewind, steps


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5), st.integers(0, 3)),
                max_size=12))
def test_preempted_flushes_delay_the_stream_but_never_change_it(
    fetches: list[tuple[int, int, int]],
) -> None:
    """Two spouts stage the same fetches; one flushes each time, the other has flushes
    preempted after a few slices of keys. What reaches each destination, concatenated,
    is the same."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(routing, "ROUTE_PIECE", 1)
        spouts = make_spout(), make_spout()
        streams: tuple[dict[Any, list[Any]], ...] = ({}, {})
        for spout in spouts:
            spout.start({})
            spout.resume()
        for start, length, asks in [*fetches, (0, 0, -1)]:  # the last one not preempted
            offsets = list(range(start, start + length))
            values = [f"w{o} v{o % 7} w{o}".encode() for o in offsets]
            for i, spout in enumerate(spouts):
                spout.stage(offsets, values)
                out = spout.flush(PreemptAfter(asks) if i and asks >= 0 else None)
                for destination, batch in out.batches.items():
                    streams[i].setdefault(destination, []).extend(
                        zip(batch.offsets, batch.tuples, strict=True))
        assert streams[0] == streams[1]
        assert spouts[0].position == spouts[1].position
        assert spouts[0].staged == spouts[1].staged == 0


@settings(max_examples=200, deadline=None)
@given(script=spout_script())
def test_emits_each_new_offset_once_in_order_and_never_past_an_unannounced_clock(
    script: tuple[int, list[tuple[str, Any]]],
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(routing, "ROUTE_PIECE", 1)  # a preempt asked between any two keys
        run_spout_script(*script)


def run_spout_script(rewind: int, steps: list[tuple[str, Any]]) -> None:
    spout = make_spout()
    spout.start({P: rewind})
    emitted: list[int] = []
    expected: list[int] = []  # offsets newer than anything fetched before them
    newest = rewind
    epoch = 0
    reported = rewind  # the position the master last saw (it derives clocks from it)
    for kind, arg in [*steps, ("resume", 0), ("flush", 0)]:
        if kind in ("fetch", "stage"):
            for o in arg:
                if o > newest:
                    expected.append(o)
                    newest = o
            if kind == "stage":
                spout.stage(arg, [str(o).encode() for o in arg])
                continue
            out = spout.on_records(arg, [str(o).encode() for o in arg])
        elif kind == "flush":
            out = spout.flush()
        elif kind == "preempt":
            position, preempted = spout.position, spout.preempted
            out = spout.flush(PreemptAfter(arg))
            if spout.preempted > preempted:
                assert not out.batches and spout.position == position
        elif kind == "pause":
            reported = spout.pause()
            continue
        elif spout.paused:
            epoch += 1
            clock = reported + arg  # the master may pick any clock >= the paused position
            assert all(o <= clock for o in emitted), "emitted past the clock before Flowing"
            out = spout.resume(epoch, {P: clock})
            assert out.clock == ForwardClock(epoch, {P: clock})
        else:
            continue
        offsets = out.batches.get(("total", 0), Batch()).offsets
        if spout.paused:
            assert not offsets
        emitted.extend(offsets)
        assert out.watermark == {P: spout.position}
        assert spout.position == (emitted[-1] if emitted else rewind)
    assert emitted == expected


def _combining_spout(*, sink: bool = False) -> SpoutCore:
    top = Topology("pre")
    spec = top.spout("lines", topic="lines", decoder="text", explode=str.split)
    top.bolt("counts", inputs=[spec], key=lambda w: w, state=per_key(Count()),
             lift=Count.lift, emit=lambda w, n: [(w, n)], preaggregate=True)
    if sink:
        top.sink("raw", inputs=[spec], target=Collect())
    spout = SpoutCore(spec, 0, top.downstream_of(spec))
    spout.start({})
    spout.resume()
    return spout


def test_a_combining_spout_stages_full_fetches_until_combine_tuples(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a backlog (full fetches), a spout whose every reader is a bolt it
    pre-aggregates for keeps staging, so a flush combines many fetches; a fetch that is not
    full (a stream, the backlog's end) is sent at its end."""
    monkeypatch.setattr(spout_core, "COMBINE_TUPLES", 6)
    spout = _combining_spout()
    assert spout.combines
    spout.stage([0, 1], [b"a b", b"a a"])
    assert not spout.flush_due(fetch_ended=True, fetch_full=True)  # 4 tuples, 2 groups
    assert spout.flush_due(fetch_ended=True, fetch_full=False)
    spout.stage([2], [b"b a"])
    assert spout.flush_due(fetch_ended=False, fetch_full=True)  # 6: COMBINE_TUPLES
    out = spout.flush()
    part = out.batches[("counts", 0)]
    combined = sorted(zip(part.keys, part.values, strict=True))  # type: ignore[attr-defined]
    assert combined == [("a", 4), ("b", 2)]
    assert spout.staged == spout.staged_bytes == 0 and spout.position == 2
    assert not spout.has_staged


def test_a_combining_spout_sends_every_fetch_once_combining_saves_little() -> None:
    """Staging fetch after fetch pays only while the staged tuples combine into at most
    COMBINE_GROUPS_MAX as many groups: one new key per tuple (millions of users) is sent
    at the end of each fetch, as a stream is; within a fetch the spout stages on."""
    spout = _combining_spout()
    spout.stage([0, 1], [b"a b", b"a c"])  # 4 tuples, 3 groups: over half
    assert spout_core.COMBINE_GROUPS_MAX == 0.5
    assert spout.flush_due(fetch_ended=True, fetch_full=True)
    assert not spout.flush_due(fetch_ended=False, fetch_full=True)
    spout.stage([2], [b"a a b b"])  # 8 tuples, 3 groups: combining pays again
    assert not spout.flush_due(fetch_ended=True, fetch_full=True)
    out = spout.flush()
    part = out.batches[("counts", 0)]
    combined = sorted(zip(part.keys, part.values, strict=True))  # type: ignore[attr-defined]
    assert combined == [("a", 4), ("b", 3), ("c", 1)]


def test_a_spout_with_any_other_reader_sends_every_fetch() -> None:
    """A reader that receives every tuple (a sink, a bolt without pre-aggregation) would get
    a batch as big as the combined fetches, and a bolt judging lateness a flush a round's
    pause cannot preempt: such a spout sends every fetch's end, as before."""
    for spout in (make_spout(), _combining_spout(sink=True)):
        spout.start({})
        spout.resume()
        assert not spout.combines
        spout.stage([0], [b"a b"])
        assert spout.flush_due(fetch_ended=True, fetch_full=True)
        assert not spout.flush_due(fetch_ended=False, fetch_full=True)
    top = Topology("late")
    spec = top.spout("events", topic="events", decoder="json")
    top.bolt("per_minute", inputs=[spec], key=lambda e: e["k"],
             state=per_key(TumblingWindow(60, Count())), lift=Count.lift,
             event_time=lambda e: e["t"], late="late.late", preaggregate=True)
    assert not SpoutCore(spec, 0, top.downstream_of(spec)).combines


def test_staged_bytes_bound_a_combining_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spout combining fetch after fetch sends once FLUSH_BYTES of messages wait (a
    bound on the memory its staged tuples take)."""
    monkeypatch.setattr(spout_core, "FLUSH_BYTES", 10)
    spout = _combining_spout()
    spout.stage([0], [b"aaaa aaaa"])
    assert spout.staged_bytes == 9
    assert not spout.flush_due(fetch_ended=True, fetch_full=True)
    spout.stage([1, 2], [None, b"c"])  # a tombstone holds no bytes
    assert spout.staged_bytes == 10
    assert spout.flush_due(fetch_ended=False, fetch_full=True)


def test_records_without_tuples_still_wait_to_be_flushed() -> None:
    """A record that explodes into nothing (or fails to decode) moves the position only
    when it is flushed: has_staged says it waits, though no tuple does."""
    spout = _combining_spout()
    spout.stage([0, 1], [b"", b"   "])
    assert spout.staged == 0 and spout.has_staged and spout.position == -1
    spout.flush()
    assert spout.position == 1 and not spout.has_staged
