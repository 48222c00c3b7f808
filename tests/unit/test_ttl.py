"""Time to live (``per_key(..., ttl=)``, :class:`~hailstorm.monoids.Ttl`): sessions against a
brute-force definition, the laws, lateness and the dropping of idle keys against the model
for any interleaving of partitions, and the topology rules."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.engine import execution_of
from hailstorm.lateness import StreamTime
from hailstorm.model import Message, run_model
from hailstorm.monoids import Count, SetUnion, Sum, Ttl, TumblingWindow, per_key
from hailstorm.processors import BoltCore, WriteSnapshot
from hailstorm.processors.expiry import ClosedWindows
from hailstorm.testing import check_monoid_laws
from hailstorm.topology import BoltSpec, Topology, TopologyError

TTL = 10
RETENTION = 5


def sessions_by_hand(events: list[tuple[int, int]], ttl: int = TTL) -> tuple[int, ...]:
    """``(start, end, sum, ...)`` of ``(time, value)`` events: sorted by time, a new
    session after every gap of more than ``ttl``."""
    sessions: list[list[int]] = []
    for t, v in sorted(events):
        if sessions and t - sessions[-1][1] <= ttl:
            sessions[-1][1] = t
            sessions[-1][2] += v
        else:
            sessions.append([t, t, v])
    return tuple(x for session in sessions for x in session)


timed = st.lists(st.tuples(st.integers(0, 100), st.integers(-3, 3)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(events=timed, data=st.data())
def test_sessions_are_the_gaps_of_the_sorted_times_in_any_merge_order(
    events: list[tuple[int, int]], data: st.DataObject,
) -> None:
    m = Ttl(Sum(), TTL)
    parts = [m.lift(t, v) for t, v in data.draw(st.permutations(events))]
    while len(parts) > 1:  # merge random neighbours, some by combine, some by absorb
        i = data.draw(st.integers(0, len(parts) - 2))
        merged = (m.combine(parts[i], parts[i + 1]) if data.draw(st.booleans())
                  else m.absorb(parts[i], parts[i + 1]))
        parts[i:i + 2] = [merged]
    assert (parts[0] if parts else m.empty()) == sessions_by_hand(events)
    assert m.emitted(parts[0] if parts else m.empty()) == (
        sessions_by_hand(events)[-1] if events else 0)


def test_sessions_within_ttl_join_from_either_side_and_no_further() -> None:
    m = Ttl(Count(), TTL)
    for a, b in ((0, TTL), (TTL, 0)):  # exactly ttl apart, either first: one session
        assert m.absorb(m.lift(a, 1), m.lift(b, 1)) == (0, TTL, 2)
        assert m.combine(m.lift(a, 1), m.lift(b, 1)) == (0, TTL, 2)
    for a, b in ((0, TTL + 1), (TTL + 1, 0)):  # further apart: two
        assert m.absorb(m.lift(a, 1), m.lift(b, 1)) == (0, 0, 1, TTL + 1, TTL + 1, 1)
    bridged = m.combine_all([m.lift(0, 1), m.lift(2 * TTL, 1), m.lift(TTL, 1)])
    assert bridged == (0, 2 * TTL, 3) and m.reached(bridged) == 2 * TTL
    assert m.reached(m.combine(m.lift(0, 1), m.lift(50, 1))) == 50  # the latest end


def test_ttl_follows_the_monoid_laws_and_round_trips_avro() -> None:
    m = Ttl(Sum(), TTL)
    check_monoid_laws(m, timed.map(lambda es: m.combine_all(m.lift(t, v) for t, v in es)))
    inner = Ttl(Count(), 3)
    check_monoid_laws(per_key(inner), st.dictionaries(st.sampled_from("ab"), timed.map(
        lambda es: inner.combine_all(inner.lift(t, 1) for t, _ in es))))
    sets = Ttl(SetUnion("long"), TTL)  # mutable inner states: owned, copied, never shared
    check_monoid_laws(sets, timed.map(
        lambda es: sets.combine_all(sets.lift(t, {v}) for t, v in es)))


def ttl_topology(parallelism: int = 2) -> Topology:
    top = Topology("tt")
    events = top.spout("events", topic="ev", decoder="json")
    top.bolt("active", inputs=[events], key=lambda e: e["k"],
             state=per_key(Ttl(Count(), TTL, retention=RETENTION)), lift=Count.lift,
             event_time=lambda e: e["t"], emit=lambda e, n: [(e["k"], n)],
             parallelism=parallelism, late="tt.late")
    return top


@st.composite
def partitions(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Events per partition: times mostly rising, sometimes behind or far ahead."""
    result = []
    for _ in range(draw(st.integers(1, 3))):
        t, es = 0, []
        for _ in range(draw(st.integers(0, 14))):
            t += draw(st.sampled_from([0, 1, 3, 8, 12, 30]) | st.integers(0, 20))
            behind = draw(st.just(0) | st.integers(1, 16))
            es.append({"k": draw(st.sampled_from("abc")), "t": max(0, t - behind)})
        result.append(es)
    return result


def interleave(parts: list[list[dict[str, Any]]], rng: random.Random
               ) -> list[tuple[int, int, dict[str, Any]]]:
    """``(partition, offset, event)`` in a random interleaving (offset order kept)."""
    order = [p for p, es in enumerate(parts) for _ in es]
    rng.shuffle(order)
    cursors = [0] * len(parts)
    out = []
    for p in order:
        out.append((p, cursors[p], parts[p][cursors[p]]))
        cursors[p] += 1
    return out


def late_by_hand(parts: list[list[dict[str, Any]]]) -> set[tuple[int, int]]:
    """Late ``(partition, offset)``: ``RETENTION`` or more behind the newest on-time event
    time before it in its partition."""
    late = set()
    for p, es in enumerate(parts):
        now = None
        for o, e in enumerate(es):
            if now is not None and e["t"] + RETENTION <= now:
                late.add((p, o))
            elif now is None or e["t"] > now:
                now = e["t"]
    return late


@settings(max_examples=300, deadline=None)
@given(parts=partitions(), seed=st.integers(0, 2**32))
def test_the_model_routes_the_late_and_keeps_sessions_of_the_rest(
    parts: list[list[dict[str, Any]]], seed: int,
) -> None:
    messages = [Message("ev", p, o, json.dumps(e).encode())
                for p, o, e in interleave(parts, random.Random(seed))]
    result = run_model(ttl_topology(), messages)
    late = late_by_hand(parts)
    assert {(d.message.partition, d.message.offset) for d in result.late} == late
    on_time: dict[str, list[tuple[int, int]]] = {}
    for p, es in enumerate(parts):
        for o, e in enumerate(es):
            if (p, o) not in late:
                on_time.setdefault(e["k"], []).append((e["t"], 1))
    assert result.bolt_state("active") == {k: sessions_by_hand(es) for k, es in on_time.items()}
    last_row: dict[str, int] = dict(row for _origin, row in result.outputs("active"))
    assert last_row == {k: sessions_by_hand(es)[-1] for k, es in on_time.items()}


def run_one_instance(parts: list[list[dict[str, Any]]],
                     order: list[tuple[int, int, dict[str, Any]]],
                     expire_now: Any, budget: int) -> tuple[dict[str, Any], dict[str, int]]:
    """One bolt instance fed ``order``, its spouts judging lateness per partition, dropping
    closed sessions whenever ``expire_now()``: its state, and every key's last row."""
    spec = ttl_topology(parallelism=1).node("active")
    assert isinstance(spec, BoltSpec)
    clocks = {p: StreamTime(spec) for p in range(len(parts))}
    closed = ClosedWindows(spec)
    segments: list[Any] = [{}]
    rows: dict[str, int] = {}
    for p, _o, e in order:
        if clocks[p].judge(e) is not None:
            continue
        key, value = execution_of(spec).contribution(e)
        closed.note([p], [(key, value)])
        segments[0] = execution_of(spec).absorb(segments[0], key, value)
        run = execution_of(spec)
        rows.update(run.outputs(e, key, run.value_for_emit(key, segments)))
        if expire_now():
            closed.expire(segments, dict.fromkeys(clocks), budget)
    return segments[0], rows


def assert_as_the_model(parts: list[list[dict[str, Any]]], state: dict[str, Any],
                        rows: dict[str, int]) -> None:
    """``state`` equals the model's without what closed at its watermark, and ``rows``
    are the model's last rows."""
    model = run_model(ttl_topology(parallelism=1), [
        Message("ev", p, o, json.dumps(e).encode())
        for p, es in enumerate(parts) for o, e in enumerate(es)])
    assert model.comparable("active", state) == model.comparable(
        "active", model.bolt_state("active"))
    assert rows == dict(row for _origin, row in model.outputs("active"))


@settings(max_examples=600, deadline=None)
@given(parts=partitions(), seed=st.integers(0, 2**32), budget=st.integers(1, 3))
def test_a_bolt_dropping_idle_keys_ends_as_the_model_and_emits_the_same(
    parts: list[list[dict[str, Any]]], seed: int, budget: int,
) -> None:
    """Dropping closed sessions at random moments, in a random interleaving, changes
    neither the state (but for what closed) nor a row."""
    rng = random.Random(seed)
    state, rows = run_one_instance(parts, interleave(parts, rng), lambda: rng.random() < 0.5,
                                   budget)
    assert_as_the_model(parts, state, rows)


def windows_topology() -> Topology:
    """The same events counted in tumbling windows of 10 (retention 5), routing late data."""
    top = Topology("tw")
    events = top.spout("events", topic="ev", decoder="json")
    top.bolt("active", inputs=[events], key=lambda e: e["k"],
             state=per_key(TumblingWindow(10, Count(), retention=RETENTION)),
             lift=Count.lift, event_time=lambda e: e["t"],
             emit=lambda e, w: [((e["k"], e["t"] - e["t"] % 10), w[1][e["t"] - e["t"] % 10])],
             late="tw.late")
    return top


@settings(max_examples=300, deadline=None)
@given(parts=partitions(), seed=st.integers(0, 2**32), budget=st.integers(1, 3),
       windows=st.booleans())
def test_a_bolt_restored_from_any_of_its_snapshots_ends_as_the_model(
    parts: list[list[dict[str, Any]]], seed: int, budget: int, windows: bool,
) -> None:
    """A bolt instance takes rounds (some pending while more tuples come), drops what
    closed at random moments, and is restored from a random snapshot of its own (deltas
    applied, dropped keys forgotten) to replay the tuples after it: its state and the last
    row of every key (those of the first run up to the snapshot, then the replay's) equal
    the model's."""
    rng = random.Random(seed)
    top = windows_topology() if windows else ttl_topology(parallelism=1)
    spec = top.node("active")
    assert isinstance(spec, BoltSpec)
    judges = {p: StreamTime(spec) for p in range(len(parts))}
    on_time = [(("ev", p), o, e) for p, o, e in interleave(parts, rng)
               if judges[p].judge(e) is None]
    start = {("ev", p): -1 for p in range(len(parts))}

    def run(core: BoltCore, tuples: list[tuple[Any, int, Any]], rounds: bool
            ) -> tuple[list[tuple[Any, int, Any]], list[WriteSnapshot]]:
        rows: list[tuple[Any, int, Any]] = []
        written: list[WriteSnapshot] = []
        sent = dict(core.low_water_mark or start)
        for p, o, e in tuples:
            out = core.on_data("s", [p], [o], [e])
            rows.extend((p, o, row) for row in out.tuples)
            sent[p] = o
            if rounds and rng.random() < 0.3:
                core.on_clock(len(written) + len(core.pending_epochs) + 1, dict(sent))
            if rng.random() < 0.15:  # rounds stay pending a while
                written += [w for w in core.on_watermark("s", dict(sent))
                            if isinstance(w, WriteSnapshot)]
            if rng.random() < 0.5:
                core.expire(budget)
        return rows, written

    first = BoltCore(spec, ["s"])
    first.on_watermark("s", start)
    rows, written = run(first, on_time, rounds=True)
    model = run_model(top, [Message("ev", p, o, json.dumps(e).encode())
                            for p, es in enumerate(parts) for o, e in enumerate(es)])
    states: list[Any] = []
    for w in written:  # as the snapshot store loads them
        states.append({**states[-1], **w.state} if w.delta else dict(w.state))
    if written:
        i = rng.randrange(len(written))
        clock = written[i].clock
        restored = BoltCore(spec, ["s"], clock, states[i])
        restored.on_watermark("s", dict(clock))
        within = [r for r in rows if r[1] <= clock.get(r[0], -1)]
        replayed, _ = run(restored, [t for t in on_time if t[1] > clock.get(t[0], -1)],
                          rounds=False)
        rows, first = within + replayed, restored
    assert model.comparable("active", first.merged_state()) == model.comparable(
        "active", model.bolt_state("active"))
    assert dict(row for _p, _o, row in rows) == dict(
        row for _origin, row in model.outputs("active"))


def test_a_session_stays_while_an_on_time_tuple_can_still_reach_it() -> None:
    """The edge: ``a`` ended at 0; both partitions reached 14, so a tuple at 10 (10 + 5 >
    14) is on time and extends ``a``'s session (10 - 0 <= 10): ``a`` must survive a drop
    at 14 (0 + 10 + 5 > 14)."""
    parts = [[{"k": "a", "t": 0}, {"k": "b", "t": 14}, {"k": "a", "t": 10}],
             [{"k": "b", "t": 14}]]
    order = [(0, 0, parts[0][0]), (0, 1, parts[0][1]), (1, 0, parts[1][0]),
             (0, 2, parts[0][2])]
    state, rows = run_one_instance(parts, order, lambda: True, 10)
    assert state["a"] == (0, 10, 2) and rows["a"] == 2
    assert_as_the_model(parts, state, rows)


def test_idle_keys_are_dropped_once_every_partition_is_past_them() -> None:
    spec = ttl_topology(parallelism=1).node("active")
    assert isinstance(spec, BoltSpec)
    closed = ClosedWindows(spec)
    segments: list[Any] = [{"a": (0, 3, 2), "b": (2, 2, 1, 30, 31, 2)}, {"a": (1, 1, 1)}]
    closed.note([0, 1], [("a", (3, 3, 1)), ("b", (31, 31, 1))])
    assert closed.bound({0: 0, 1: 0}) == 3
    assert closed.expire(segments, {0: 0, 1: 0}, 10) == 0  # 3 + 10 + 5 > 3
    closed.note([0], [("c", (40, 40, 1))])
    assert closed.bound({0: 0, 1: 0}) == 31  # partition 1 is the slowest
    assert closed.expire(segments, {0: 0, 1: 0}, 10) == 3
    assert segments == [{"b": (30, 31, 2)}, {}]
    assert (closed.windows, closed.keys) == (3, 1)  # "a" left both segments: one key


def _driving(core: BoltCore) -> tuple[Callable[..., None],
                                     Callable[[int, dict[Any, int]], WriteSnapshot]]:
    """``feed(*(partition, offset, tuple))`` and ``snapshot(epoch, clock)`` (the round
    learned and covered by upstream ``s``'s watermark: what it writes, read as the
    snapshot writer reads it) for ``core``."""

    def feed(*items: tuple[Any, int, dict[str, Any]]) -> None:
        core.on_data("s", [i[0] for i in items], [i[1] for i in items], [i[2] for i in items])

    def snapshot(epoch: int, clock: dict[Any, int]) -> WriteSnapshot:
        actions = [*core.on_clock(epoch, clock), *core.on_watermark("s", clock)]
        [written] = [w for w in actions if isinstance(w, WriteSnapshot)]
        assert written.state is not None  # the writer copies it: its A may change again
        return written

    return feed, snapshot


def test_dropped_keys_leave_the_snapshots_too() -> None:
    """A delta records a key dropped since the last snapshot with the identity, and a bolt
    loading it forgets the key: dropped keys are gone from what a restart reads."""
    spec = ttl_topology(parallelism=1).node("active")
    assert isinstance(spec, BoltSpec)
    a, b = ("ev", 0), ("ev", 1)
    core = BoltCore(spec, ["s"])
    feed, snapshot = _driving(core)

    stay = {f"w{i}": (35, 35, 1) for i in range(4)}
    feed((a, 0, {"k": "x", "t": 0}), (b, 0, {"k": "y", "t": 1}), (b, 1, {"k": "z", "t": 30}),
         *[(b, 2 + i, {"k": k, "t": 35}) for i, k in enumerate(stay)])
    first = snapshot(1, {a: 0, b: 5})
    assert first.state == {"x": (0, 0, 1), "y": (1, 1, 1), "z": (30, 30, 1), **stay}
    feed((a, 1, {"k": "z", "t": 40}))  # both partitions are past 1 + 10 + 5 now
    assert core.expire(100) == 2 and core.closed_windows is not None
    assert core.closed_windows.keys == 2
    second = snapshot(2, {a: 1, b: 5})
    assert second.delta and second.state == {"x": (), "y": (), "z": (30, 40, 2)}
    restarted = BoltCore(spec, ["s"], second.clock, {**first.state, **second.state})
    assert restarted.merged_state() == {"z": (30, 40, 2), **stay}


def test_a_sweep_after_the_last_round_with_nothing_read_since_asks_for_a_round() -> None:
    """The negotiator skips a round at the committed clock; a drop no snapshot holds, with
    nothing absorbed since (the clock stays), must make the bolt ask for one, and only
    then: a drop while a round is pending, or before tuples that move the clock, goes into
    a round taken anyway."""
    spec = ttl_topology(parallelism=1).node("active")
    assert isinstance(spec, BoltSpec)
    a, b = ("ev", 0), ("ev", 1)
    core = BoltCore(spec, ["s"])
    feed, snapshot = _driving(core)

    core.on_watermark("s", {a: -1, b: -1})
    feed((a, 0, {"k": "x", "t": 0}), (b, 0, {"k": "y", "t": 1}), (a, 1, {"k": "z", "t": 30}),
         (b, 1, {"k": "z", "t": 40}))
    assert core.expire(100) == 2, "x and y closed at 30"
    assert not core.unsaved_sweep, "read since the last round: the next clock moves"
    snapshot(1, {a: 1, b: 1})
    assert not core.unsaved_sweep
    feed((a, 2, {"k": "v", "t": 80}), (b, 2, {"k": "v", "t": 80}))
    core.on_clock(2, {a: 2, b: 2})
    assert core.expire(100) == 1 and not core.unsaved_sweep, "z goes into pending round 2"
    [written] = [w for w in core.on_watermark("s", {a: 2, b: 2}) if isinstance(w, WriteSnapshot)]
    assert not written.state.get("z") and not core.unsaved_sweep  # (delta or whole)
    feed((a, 3, {"k": "w", "t": 100}), (b, 3, {"k": "w", "t": 100}))
    snapshot(3, {a: 3, b: 3})
    assert core.merged_state()["v"] == (80, 80, 2) and not core.unsaved_sweep
    assert core.expire(100) == 1, "v closed at 100"
    assert core.unsaved_sweep, "dropped after round 3's snapshot, nothing read since"
    assert not snapshot(4, {a: 3, b: 3}).state.get("v") and not core.unsaved_sweep


def test_ttl_state_is_kept_per_key_and_routes_late_data() -> None:
    top = Topology("bad")
    events = top.spout("events", topic="ev", decoder="json")
    with pytest.raises(TopologyError, match="needs late="):
        top.bolt("nolate", inputs=[events], key=lambda e: e["k"],
                 state=per_key(Count(), ttl=60), lift=Count.lift, event_time=lambda e: e["t"])
    with pytest.raises(TopologyError, match="per key"):
        top.bolt("unkeyed", inputs=[events], state=Ttl(Count(), 60),
                 lift=Count.lift,  # type: ignore[arg-type]
                 event_time=lambda e: e["t"], late="bad.late")
    with pytest.raises(TopologyError, match="event time"):
        top.bolt("untimed", inputs=[events], key=lambda e: e["k"],
                 state=per_key(Count(), ttl=60), lift=Count.lift, late="bad.late")
    with pytest.raises(ValueError, match="retention must be > 0"):
        Ttl(Count(), 60, retention=0)
    with pytest.raises(TypeError, match="ttl must be a number"):
        Ttl(Count(), timedelta(hours=1))
    with pytest.raises(ValueError, match="not both"):
        per_key(TumblingWindow(60, Count()), ttl=60)
    assert per_key(Count(), ttl=60).describe() == "per_key(ttl(60s, Count))"
