"""Spout-side pre-aggregation: declaring it, combining contributions, routing them, never
across a clock, absorbing them in the bolt, and carrying them on the wire."""

from __future__ import annotations

import itertools
import pickle
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import (
    Collect,
    Count,
    HyperLogLog,
    Max,
    Mean,
    Record,
    SetUnion,
    SlidingWindow,
    Sum,
    Table,
    Topology,
    Ttl,
    TumblingWindow,
    by_key,
    itself,
    per_key,
)
from hailstorm.engine import BoltExecution, CombinedGroups, execution_of
from hailstorm.processors import (
    Batch,
    BoltCore,
    Contributions,
    Emit,
    ForwardWatermark,
    ProtocolViolation,
    Router,
    WriteSnapshot,
)
from hailstorm.processors.router import StagedCombination
from hailstorm.processors.spout_core import SpoutCore
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.wire import DataBatch, FrameError, FrameReader, decode_frame, encode_frame
from hailstorm.topology import BoltSpec, TopologyError

P: Partition = ("lines", 0)
UPSERT = Table("totals", columns={"word": "text", "count": "bigint"}, key=["word"])


def wordcount(target: Any = UPSERT, *, parallelism: int = 2) -> Topology:
    top = Topology("pre")
    lines = top.spout("lines", topic="lines", decoder="text", explode=str.split)
    counts = top.bolt(
        "counts", inputs=[lines], key=lambda w: w, state=per_key(Count()), lift=Count.lift,
        emit=lambda w, n: [(w, n)], parallelism=parallelism, preaggregate=True,
    )
    top.sink("out", inputs=[counts], target=target)
    top.validate()
    return top


def counts_of(top: Topology) -> BoltSpec:
    node = top.node("counts")
    assert isinstance(node, BoltSpec)
    return node


# --------------------------------------------------------------------------- declaring


def test_an_upsert_table_may_read_a_preaggregating_bolt() -> None:
    assert counts_of(wordcount()).preaggregate


@pytest.mark.parametrize(
    "target",
    [
        Collect(),
        Table("t", columns={"word": "text", "count": "bigint"}, key=["word"], mode="merge"),
        Table("t", columns={"word": "text", "count": "bigint"}, mode="append"),
    ],
)
def test_other_sinks_may_not_read_a_preaggregating_bolt(target: Any) -> None:
    with pytest.raises(TopologyError, match="only upsert tables and topics may read such a bolt"):
        wordcount(target)


def test_a_bolt_may_not_read_a_preaggregating_bolt() -> None:
    top = Topology("pre")
    lines = top.spout("lines", topic="lines", decoder="text")
    counts = top.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                      lift=Count.lift, emit=lambda w, n: [(w, n)], preaggregate=True)
    top.bolt("again", inputs=[counts], state=Count(), lift=Count.lift)
    with pytest.raises(TopologyError, match="what bolt 'again' receives would depend"):
        top.validate()


def test_preaggregate_needs_a_spout_input_and_a_bool() -> None:
    top = Topology("pre")
    lines = top.spout("lines", topic="lines", decoder="text")
    first = top.bolt("first", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                     lift=Count.lift, emit=lambda w, n: [(w, n)])
    top.bolt("second", inputs=[first], state=Count(), lift=Count.lift, preaggregate=True)
    with pytest.raises(TopologyError, match="no input of this bolt is a spout"):
        top.validate()
    with pytest.raises(TopologyError, match="preaggregate must be True or False"):
        top.bolt("third", inputs=[lines], state=Count(), lift=Count.lift,
                 preaggregate="yes")  # type: ignore[arg-type]


def test_a_preaggregating_bolt_without_emit_or_readers_is_fine() -> None:
    top = Topology("pre")
    lines = top.spout("lines", topic="lines", decoder="text")
    top.bolt("quiet", inputs=[lines], state=Count(), lift=Count.lift, preaggregate=True)
    top.bolt("loud", inputs=[lines], state=Count(), lift=Count.lift,
             emit=lambda t, n: [n], preaggregate=True)
    top.validate()


# --------------------------------------------------------------------------- combining


def specs() -> dict[str, BoltSpec]:
    top = Topology("shapes")
    src = top.spout("src", topic="t", decoder="json")
    return {
        "keyed count": top.bolt("a", inputs=[src], key=lambda t: t[0], state=per_key(Count()),
                                lift=Count.lift, parallelism=3),
        "keyed sum": top.bolt("f", inputs=[src], key=lambda t: t[0], state=per_key(Sum()),
                              lift=lambda t: t[1] - 20, parallelism=2),
        "keyed float sum": top.bolt("p", inputs=[src], key=lambda t: t[0],
                                    state=per_key(Sum("double")), lift=lambda t: t[1] / 3),
        "keyed tuple sum by key": top.bolt(
            "q", inputs=[src], key=lambda t: (t[0], str(t[1] % 2)),
            state=per_key(Sum(), key_type=("string", "string")), lift=lambda t: t[1],
            emit=by_key(lambda key, total: [(*key, total)]), parallelism=2),
        "keyed mutable": top.bolt("b", inputs=[src], key=lambda t: t[0],
                                  state=per_key(SetUnion()), lift=lambda t: shared_lift),
        "keyed record": top.bolt("g", inputs=[src], key=lambda t: t[0], state=per_key(
            Record({"n": Count(), "total": Sum()})), lift=lambda t: {"n": 1, "total": t[1]},
            parallelism=2),
        "keyed shared record": top.bolt("h", inputs=[src], key=lambda t: t[0], state=per_key(
            Record({"n": Count(), "total": Sum()})), lift=lambda t: shared_record),
        "keyed record by key": top.bolt("m", inputs=[src], key=lambda t: t[0], state=per_key(
            Record({"n": Count(), "total": Sum()})), lift=lambda t: {"n": 1, "total": t[1]},
            emit=by_key(lambda key, value: [(key, value["total"])]), parallelism=2),
        "keyed float record": top.bolt("n", inputs=[src], key=lambda t: t[0], state=per_key(
            Record({"n": Count(), "total": Sum("double")})),
            lift=lambda t: {"n": 1, "total": t[1] / 3}),
        "keyed mutable by key": top.bolt("o", inputs=[src], key=lambda t: t[0],
                                         state=per_key(SetUnion()), lift=lambda t: shared_lift,
                                         emit=by_key(lambda key, value: [key])),
        "unkeyed routed": top.bolt("c", inputs=[src], key=lambda t: t[0], state=Sum(),
                                   lift=lambda t: t[1], parallelism=2),
        "unkeyed whole": top.bolt("d", inputs=[src], state=SetUnion(), lift=lambda t: {t[1]}),
        "windowed": top.bolt("e", inputs=[src], key=lambda t: t[0],
                             state=per_key(TumblingWindow(10, Sum())), lift=lambda t: t[1],
                             event_time=lambda t: t[1], late="drop"),
        "windowed page stats": top.bolt(
            "j", inputs=[src], key=lambda t: t[0], state=per_key(TumblingWindow(10, PAGE_STATS)),
            lift=lambda t: PAGE_STATS.lift(views=1, users=SPARSE_USERS.lift(t[1] % 7),
                                           latency=Mean.lift(t[1])),
            event_time=lambda t: t[1], late="drop", parallelism=2),
        "windowed shared sets": top.bolt("k", inputs=[src], key=lambda t: t[0],
                                         state=per_key(SlidingWindow(10, 5, SetUnion())),
                                         lift=lambda t: shared_lift, event_time=lambda t: t[1],
                                         late="drop"),
    }


SPARSE_USERS = HyperLogLog(10)
"""Sketches of a few users stay sparse: their entries are folded together."""
PAGE_STATS = Record({"views": Count(), "users": SPARSE_USERS, "latency": Mean()})


shared_lift = {"shared"}
"""What one lift returns for every tuple: combining must copy it before mutating."""
shared_record = {"n": 1, "total": 5}
"""The same for a Record of numbers, whose fields are added in place."""
TUPLES = st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 40)), max_size=30)


@settings(max_examples=80, deadline=None)
@given(tuples=TUPLES, shape=st.sampled_from(sorted(specs())))
def test_absorbing_combined_contributions_equals_absorbing_every_tuple(
    tuples: list[tuple[str, int]], shape: str
) -> None:
    spec = specs()[shape]
    run = execution_of(spec)
    combined = run.combine_contributions(tuples)
    assert len(combined.tuples) == len(combined.keys) == len(combined.values)
    groups = {
        (spec.key(t) if spec.key else None,
         tuple(spec.window.window_starts(t[1])) if spec.window else None)  # type: ignore[attr-defined]
        for t in tuples
    }
    assert len(combined) == len(groups)  # one contribution per routing key (and window)
    for instance in range(spec.parallelism):
        mine = [t for t in tuples if run.instance_for(t) == instance]
        expected = run.absorb_all(spec.state.empty(), mine)
        pairs = [
            (k, v)
            for t, k, v in zip(combined.tuples, combined.keys, combined.values, strict=True)
            if run.instance_for(t) == instance
        ]
        assert run.absorb_contributions(spec.state.empty(), pairs) == expected
    assert shared_lift == {"shared"} and shared_record == {"n": 1, "total": 5}
    assert shared_lift == {"shared"}  # lift's shared value was never mutated


@settings(max_examples=200, deadline=None)
@given(time=st.integers(-10**6, 10**6), shape=st.sampled_from(["tumbling", "sliding", "ttl"]))
def test_a_lifted_value_tells_the_groups_of_its_event_time(time: int, shape: str) -> None:
    window: Any = {"tumbling": TumblingWindow(10, Count()),
                   "sliding": SlidingWindow(10, 3, Count()),
                   "ttl": Ttl(Count(), 25)}[shape]
    read = window.lifted_groups()
    assert read is not None
    for value in (window.lift(time, 1), window.lift_unexpiring(time, 1)):
        assert read(value) == window.groups(time)


def _failing_time(t: tuple[str, int]) -> int:
    if t[1] == 13:
        raise ValueError("no time")
    return t[1]


WINDOW_SHAPES = ["windowed", "windowed page stats", "windowed shared sets"]


@settings(max_examples=150, deadline=None)
@given(tuples=TUPLES, shape=st.sampled_from(WINDOW_SHAPES), fails=st.booleans())
def test_windows_fold_their_groups_as_the_tuple_by_tuple_path_does(
    tuples: list[tuple[str, int]], shape: str, fails: bool
) -> None:
    """Keyed window state is combined a batch at a time (each group's lifted values
    folded, then put in their windows once): the same groups, order, last tuples, values
    and failures as lifting every tuple into its windows and merging those."""
    spec = specs()[shape]
    if fails:
        spec = replace(spec, event_time=_failing_time)
    batch, slow = BoltExecution(spec), BoltExecution(spec)
    slow.__dict__["_folds_windows"] = False  # the tuple-by-tuple path
    assert batch._folds_windows
    fast, expected = batch.combine_contributions(tuples), slow.combine_contributions(tuples)
    assert (fast.tuples, fast.keys, fast.values) == (
        expected.tuples, expected.keys, expected.values)
    assert [(i, f.stage) for i, f in fast.failures] == [
        (i, f.stage) for i, f in expected.failures]
    assert shared_lift == {"shared"}  # lift's shared value was never mutated


class _ByDay(TumblingWindow):  # a window grouping its own way: one group a day
    def groups(self, event_time: Any) -> tuple[Any, ...]:
        return (event_time // 100,)


class _OwnLift(TumblingWindow):  # a window lifting its own way
    def lift(self, event_time: Any, inner_value: Any) -> Any:
        return super().lift(event_time, inner_value)


def test_a_window_grouping_or_lifting_its_own_way_is_asked_its_groups() -> None:
    """Pre-aggregation reads the groups from the lifted value only where the window says
    how; a subclass with its own groups or lift gets them by groups(), as group_of does."""
    assert _ByDay(10, Count()).lifted_groups() is None
    assert _OwnLift(10, Count()).lifted_groups() is None
    top = Topology("own")
    src = top.spout("src", topic="t", decoder="json")
    top.bolt("days", inputs=[src], key=lambda t: t[0], state=per_key(_ByDay(10, Count())),
             lift=Count.lift, event_time=lambda t: t[1], preaggregate=True, late="drop",
             emit=lambda t, v: [(t[0], t[1])])
    run = execution_of(top.node("days"))
    combined = run.combine_contributions([("a", 1), ("a", 15), ("a", 150)])
    assert combined.tuples == [("a", 15), ("a", 150)]  # days 0 and 1, not windows 0, 10, 150


@settings(max_examples=150, deadline=None)
@given(tuples=st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(-50, 50)),
                       max_size=40),
       shape=st.sampled_from(["record", "shared record", "set", "max"]))
def test_keyed_contributions_combine_as_a_model_says(
    tuples: list[tuple[str, int]], shape: str
) -> None:
    """Keyed state without windows combines a batch at a time: one contribution per key,
    in last-seen order (as tuple by tuple: a compacting bolt emits in it), with the key's
    last tuple and its values combined, held to a model written out here (sums, counts,
    sets, maxima by hand)."""
    top = Topology("model")
    src = top.spout("src", topic="t", decoder="json")
    state, lift, fold = {
        "record": (per_key(Record({"n": Count(), "total": Sum()})),
                   lambda t: {"n": 1, "total": t[1]},
                   lambda acc, t: {"n": acc["n"] + 1, "total": acc["total"] + t[1]}),
        "shared record": (per_key(Record({"n": Count(), "total": Sum()})),
                          lambda t: shared_record,
                          lambda acc, t: {"n": acc["n"] + 1, "total": acc["total"] + 5}),
        "set": (per_key(SetUnion()), lambda t: {t[1] % 3},
                lambda acc, t: acc | {t[1] % 3}),
        "max": (per_key(Max()), lambda t: t[1], lambda acc, t: max(acc, t[1])),
    }[shape]
    spec = top.bolt("b", inputs=[src], key=lambda t: t[0], state=state, lift=lift,
                    parallelism=2)
    model: dict[str, tuple[tuple[str, int], Any]] = {}
    for t in tuples:
        first = {"record": {"n": 1, "total": t[1]}, "shared record": {"n": 1, "total": 5},
                 "set": {t[1] % 3}, "max": t[1]}[shape]
        seen = model.pop(t[0], None)  # moves to the end: last-seen order
        model[t[0]] = (t, first if seen is None else fold(seen[1], t))
    combined = execution_of(spec).combine_contributions(tuples)
    assert combined.keys == list(model)
    assert combined.tuples == [t for t, _ in model.values()]
    assert combined.values == [value for _, value in model.values()]
    assert not combined.failures
    assert shared_record == {"n": 1, "total": 5}  # lift's shared value was never mutated


def test_each_group_keeps_its_last_tuple_in_last_seen_order() -> None:
    spec = specs()["unkeyed routed"]
    tuples = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)]
    combined = execution_of(spec).combine_contributions(tuples)
    assert combined.tuples == [("a", 3), ("c", 4), ("b", 5)]
    assert combined.keys == [None, None, None]  # unkeyed state: no state key
    assert combined.values == [4, 4, 7]


def counting_bolts(parallelism: int, key_type: str) -> tuple[BoltSpec, BoltSpec]:
    """The same keyed count declared with ``key=itself, lift=Count.lift`` (whose batch fast
    paths the declaration records) and with lambdas (which the engine must call)."""
    top = Topology("same")
    src = top.spout("src", topic="t", decoder="json")
    known = top.bolt("known", inputs=[src], key=itself, state=per_key(Count(), key_type),
                     lift=Count.lift, parallelism=parallelism)
    called = top.bolt("called", inputs=[src], key=lambda t: t,
                      state=per_key(Count(), key_type), lift=lambda t: 1,
                      parallelism=parallelism)
    assert known.paths.lift_is_one and known.paths.key_is_tuple
    assert not called.paths.lift_is_one and not called.paths.key_is_tuple
    return known, called


class Word(str):
    """A str subclass: equal to its str, of another type."""


KINDS_OF_KEYS = [st.sampled_from(["a", "b", "é", Word("a")]), st.sampled_from([b"a", b"b"]),
                 st.integers(-2, 2) | st.booleans(),
                 st.sampled_from([0.0, -0.0, 1.0, 2.5, float("nan")]),
                 st.just(None), st.lists(st.integers(0, 1), max_size=1)]
ANY_KEYS = st.one_of(st.lists(st.one_of(KINDS_OF_KEYS), max_size=30),
                     *(st.lists(kind, max_size=30) for kind in KINDS_OF_KEYS))
"""Lists of keys of one kind (``1`` and ``True``, ``0.0`` and ``-0.0`` among them), or
mixed, some unhashable."""


def typed(items: list[Any]) -> list[tuple[type, str]]:
    """Told apart by type and representation (``1``/``True``, ``0.0``/``-0.0``)."""
    return [(type(item), repr(item)) for item in items]


@settings(max_examples=200, deadline=None)
@given(tuples=ANY_KEYS, parallelism=st.sampled_from([1, 2]),
       key_type=st.sampled_from(["string", "long", "double", "bytes", "json"]))
def test_a_bolt_keyed_by_itself_and_counting_combines_as_with_lambdas(
    tuples: list[Any], parallelism: int, key_type: str
) -> None:
    known, called = map(execution_of, counting_bolts(parallelism, key_type))
    fast, slow = known.combine_contributions(tuples), called.combine_contributions(tuples)
    assert typed(fast.tuples) == typed(slow.tuples)  # equal and of the same type
    assert typed(fast.keys) == typed(slow.keys)
    assert typed(fast.values) == typed(slow.values)
    assert [i for i, _ in fast.failures] == [i for i, _ in slow.failures]
    fast_pairs, slow_pairs = known.contributions(tuples)[0], called.contributions(tuples)[0]
    assert [typed(list(pair)) for pair in fast_pairs] == [typed(list(p)) for p in slow_pairs]


def _split(items: list[Any], cuts: list[int]) -> list[list[Any]]:
    """``items`` in consecutive pieces at the ``cuts`` (indices, any order)."""
    bounds = sorted({0, len(items), *(c % (len(items) + 1) for c in cuts)})
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


def _staged_and_at_once(spec: BoltSpec, tuples: list[Any], offsets: list[int],
                        cuts: list[int], boundaries: list[int]) -> tuple[Any, Any]:
    """What :class:`StagedCombination` gives for ``tuples`` added in pieces, and what the
    router gives for them at once: ``(routed, failed offsets)`` of each."""
    spec = replace(spec, preaggregate=True)
    whole = Batch([P] * len(tuples), offsets, tuples)
    failed_at_once: list[Any] = []
    router = Router([spec], preaggregate=True)
    at_once = router.route(whole, boundaries) if tuples else {}
    failed_at_once = [offset for _, offset, _, _ in router.failed]
    staged, failed_staged = StagedCombination(spec), []
    start = 0
    for piece in _split(tuples, cuts):
        stop = start + len(piece)
        staged.add(Batch([P] * len(piece), offsets[start:stop], piece), boundaries,
                   failed_staged)
        start = stop
    return ((staged.routed(), [offset for _, offset, _, _ in failed_staged]),
            (at_once, failed_at_once))


def _columns(part: Any) -> list[list[Any]]:
    return [list(part.partitions), list(part.offsets), typed(part.tuples), typed(part.keys),
            typed(part.values)]


OFFSETS_AND_CUTS = {"gaps": st.lists(st.integers(1, 3), min_size=40, max_size=40),
                    "cuts": st.lists(st.integers(0, 40), max_size=5),
                    "boundaries": st.lists(st.integers(0, 90), max_size=3)}


@settings(max_examples=150, deadline=None)
@given(tuples=TUPLES, shape=st.sampled_from(["keyed count", "keyed sum", "keyed float sum",
                                             "keyed tuple sum by key", "keyed mutable",
                                             "keyed record", "keyed shared record",
                                             "keyed record by key", "keyed float record",
                                             "keyed mutable by key"]),
       **OFFSETS_AND_CUTS)
def test_combining_as_staged_gives_what_routing_at_once_gives(
    tuples: list[tuple[str, int]], shape: str, gaps: list[int], cuts: list[int],
    boundaries: list[int],
) -> None:
    """Tuples combined a piece at a time as a spout stages them, runs between boundaries
    apart, give the contributions of routing them all at once: the same groups, values,
    last tuples, origins and order, on the same instances; lift's shared values unharmed."""
    spec = specs()[shape]
    offsets = list(itertools.accumulate(gaps))[:len(tuples)]
    staged, at_once = _staged_and_at_once(spec, tuples, offsets, cuts, sorted(boundaries))
    assert staged[0].keys() == at_once[0].keys()
    for destination, part in at_once[0].items():
        assert _columns(staged[0][destination]) == _columns(part)
    assert staged[1] == at_once[1] == []
    assert shared_lift == {"shared"} and shared_record == {"n": 1, "total": 5}


@pytest.mark.parametrize("shape", ["keyed float record", "keyed float sum"])
def test_staged_floats_are_folded_in_the_order_they_came_as_at_once(shape: str) -> None:
    """Float addition is not associative: a key seen before a piece and twice within it
    must be folded left to right, ``(a + b) + c``, as routing at once folds it, not
    ``a + (b + c)`` (which gave 2.3333333333333335 here, against 2.333333333333333)."""
    spec = specs()[shape]
    tuples = [("a", 1), ("a", 2), ("a", 4)]
    staged, at_once = _staged_and_at_once(spec, tuples, [1, 2, 3], cuts=[1], boundaries=[])
    assert [_columns(part) for part in staged[0].values()] == [
        _columns(part) for part in at_once[0].values()]
    left_to_right = 1 / 3 + 2 / 3 + 4 / 3
    total = {"n": 3, "total": left_to_right} if shape.endswith("record") else left_to_right
    assert [part.values for part in staged[0].values()] == [[total]]


@settings(max_examples=150, deadline=None)
@given(tuples=ANY_KEYS, parallelism=st.sampled_from([1, 2]), declared=st.booleans(),
       key_type=st.sampled_from(["string", "long", "double", "bytes", "json"]),
       **OFFSETS_AND_CUTS)
def test_combining_any_keys_as_staged_gives_the_same_contributions_and_failures(
    tuples: list[Any], parallelism: int, declared: bool, key_type: str, gaps: list[int],
    cuts: list[int], boundaries: list[int],
) -> None:
    """Keys of every kind (``1`` and ``True``, ``0.0`` and ``-0.0``, unhashable ones that
    fail): the same contributions and the same tuples left out. A piece that fails is
    combined in last-seen order, and so is a whole batch with a failure: then only the
    order may differ, and which of two equal keys of different types (``0`` and ``False``)
    stands for the group, as between a batch with a failure and one without; the last
    tuples and the values are of the same type."""
    spec = counting_bolts(parallelism, key_type)[0 if declared else 1]
    offsets = list(itertools.accumulate(gaps))[:len(tuples)]
    staged, at_once = _staged_and_at_once(spec, tuples, offsets, cuts, sorted(boundaries))
    assert staged[0].keys() == at_once[0].keys()
    for destination, part in at_once[0].items():
        mine = staged[0][destination]
        expected = list(zip(part.offsets, part.keys, typed(part.tuples), typed(part.values),
                            strict=True))
        for row in zip(mine.offsets, mine.keys, typed(mine.tuples), typed(mine.values),
                       strict=True):
            expected.remove(row)  # an equal row (keys compared by ==), each once
        assert expected == []
    assert staged[1] == at_once[1]


def test_only_bolts_grouping_by_state_key_merge_combined_groups() -> None:
    run = execution_of(specs()["windowed"])
    with pytest.raises(ValueError, match="only groups by state key merge"):
        run.merge_combined(CombinedGroups(), run.combine_contributions([("a", 1)]))


def test_key_itself_is_the_tuple() -> None:
    word = "storm"
    assert itself(word) is word
    assert Count.lift(word) == 1


# --------------------------------------------------------------------------- routing


def test_a_spout_router_sends_contributions_split_at_the_boundary() -> None:
    spec = counts_of(wordcount(parallelism=1))
    router = Router([spec], preaggregate=True)
    batch = Batch([P] * 6, [10, 11, 12, 13, 14, 15], ["a", "b", "a", "a", "b", "a"])
    (part,) = router.route(batch, [12]).values()
    assert isinstance(part, Contributions)
    # at or below 12: a x2, b x1 (origin 12); above: a x2, b x1 (origin 15)
    assert sorted(zip(part.offsets, part.keys, part.values, strict=True)) == [
        (12, "a", 2), (12, "b", 1), (15, "a", 2), (15, "b", 1)
    ]
    assert part.partitions == [P] * 4
    (whole,) = router.route(batch).values()
    assert isinstance(whole, Contributions)
    assert sorted(zip(whole.offsets, whole.keys, whole.values, strict=True)) == [
        (15, "a", 4), (15, "b", 2)
    ]


def test_contributions_go_to_the_instance_that_owns_the_key() -> None:
    spec = counts_of(wordcount(parallelism=2))
    words = [f"w{i}" for i in range(40)]
    routed = Router([spec], preaggregate=True).route(Batch([P] * 40, list(range(40)), words))
    for (name, instance), part in routed.items():
        assert name == "counts"
        assert all(execution_of(spec).instance_for(w) == instance for w in part.tuples)
    assert sorted(w for part in routed.values() for w in part.tuples) == sorted(words)


def test_only_a_spout_router_preaggregates() -> None:
    spec = counts_of(wordcount(parallelism=1))
    batch = Batch([P, P], [1, 2], ["a", "a"])
    (part,) = Router([spec]).route(batch).values()
    assert not isinstance(part, Contributions) and part.tuples == ["a", "a"]


def test_a_spout_never_combines_across_the_clock_it_announced() -> None:
    top = wordcount(parallelism=1)
    spout = SpoutCore(top.spouts[0], 0, top.downstream_of("lines"))
    spout.start({P: 1})
    spout.resume(1, {P: 4})  # a clock above the position: offsets 2..4 belong to round 1
    out = spout.on_records([2, 3, 4, 5, 6], [b"a", b"a b", b"a", b"a", b"b a"])
    (part,) = out.batches.values()
    assert isinstance(part, Contributions)
    assert sorted(zip(part.offsets, part.keys, part.values, strict=True)) == [
        (4, "a", 3), (4, "b", 1), (6, "a", 2), (6, "b", 1)
    ]
    assert spout.emitted == 7  # tuples, before combining


def test_a_clock_within_what_a_spout_combined_as_it_staged_splits_it() -> None:
    """Another spout of the partition read further, so the round's clock lies beyond this
    one's position, within what it staged but had not sent: the groups split there, as if
    the clock had been known when they were staged."""
    top = wordcount(parallelism=1)
    spout = SpoutCore(top.spouts[0], 0, top.downstream_of("lines"))
    assert spout.combines_when_staged
    spout.start({P: 1})
    spout.resume()
    spout.stage([2, 3, 4, 5, 6], [b"a", b"a b", b"a", b"a", b"b a"])
    assert spout.pause() == 1  # staged, not sent
    out = spout.resume(1, {P: 4})
    (part,) = out.batches.values()
    assert isinstance(part, Contributions)
    assert sorted(zip(part.offsets, part.keys, part.values, strict=True)) == [
        (4, "a", 3), (4, "b", 1), (6, "a", 2), (6, "b", 1)
    ]
    assert spout.emitted == 7 and spout.position == 6


# --------------------------------------------------------------------------- absorbing


def test_the_bolt_splits_contributions_at_the_clock_and_emits_once_per_key_and_flush(
) -> None:
    spec = counts_of(wordcount(parallelism=1))
    bolt = BoltCore(spec, ["s"])
    assert bolt.compacting
    out = bolt.on_contributions("s", [P, P], [3, 3], ["a", "b"], ["a", "b"], [2, 1])
    assert len(out) == 0  # held back until the flush
    (emit,) = bolt.flush()
    assert isinstance(emit, Emit)
    assert emit.batch.tuples == [("a", 2), ("b", 1)] and emit.batch.offsets == [3, 3]
    bolt.on_clock(1, {P: 5})
    bolt.on_contributions("s", [P, P], [5, 9], ["a", "a"], ["a", "a"], [1, 4])
    actions = bolt.on_watermark("s", {P: 9})
    (write,) = [a for a in actions if isinstance(a, WriteSnapshot)]
    assert write.state == {"a": 3, "b": 1}  # the contribution at 9 went to B
    assert not any(isinstance(a, ForwardWatermark) for a in actions)  # held for the rows
    emit, forward = bolt.flush()
    assert isinstance(emit, Emit) and emit.batch.tuples == [("a", 7)]  # A + B, latest origin
    assert emit.batch.offsets == [9]
    assert forward == ForwardWatermark({P: 9})
    assert bolt.flush() == [] and not bolt.unflushed
    assert bolt.merged_state() == {"a": 7, "b": 1}


def test_a_bolt_without_emit_absorbs_contributions_quietly() -> None:
    top = Topology("pre")
    lines = top.spout("lines", topic="lines", decoder="text")
    spec = top.bolt("quiet", inputs=[lines], key=lambda w: w, state=per_key(SetUnion()),
                    lift=lambda w: {w}, preaggregate=True)
    bolt = BoltCore(spec, ["s"], {P: 2})
    value = {"x"}
    out = bolt.on_contributions("s", [P, P, P], [2, 3, 4], ["a", "a", "b"], ["a", "a", "b"],
                                [{"old"}, value, {"y"}])
    assert len(out) == 0 and bolt.dropped == 1
    assert bolt.merged_state() == {"a": {"x"}, "b": {"y"}}
    bolt.on_contributions("s", [P], [5], ["a"], ["a"], [{"z"}])
    assert value == {"x"}  # the contribution received was copied, not mutated


def test_mismatched_contribution_columns_are_a_protocol_violation() -> None:
    bolt = BoltCore(counts_of(wordcount(parallelism=1)), ["s"])
    with pytest.raises(ProtocolViolation, match="1 tuples, 2 keys and 1 values"):
        bolt.on_contributions("s", [P], [1], ["a"], ["a", "b"], [1])


# --------------------------------------------------------------------------- wire


def test_contributions_round_trip_on_the_wire() -> None:
    frame = DataBatch.of([0, 1], [7, 9], [("a", 1), "b"], ["a", "b"], [{1, 2}, 3])
    assert frame.contributions
    (decoded,) = FrameReader().feed(encode_frame(frame))
    assert isinstance(decoded, DataBatch) and decoded.contributions
    assert (list(decoded.partitions), list(decoded.offsets)) == ([0, 1], [7, 9])
    assert (decoded.tuples, decoded.keys, decoded.values) == (
        [("a", 1), "b"], ["a", "b"], [{1, 2}, 3])
    plain = DataBatch.of([0], [1], ["a"])
    assert not plain.contributions
    assert not decode_frame(2, encode_frame(plain)[5:]).contributions  # type: ignore[union-attr]


def test_contribution_columns_must_agree() -> None:
    with pytest.raises(ValueError, match="both keys and values"):
        DataBatch([0], [1], ["a"], ["a"], None)
    with pytest.raises(ValueError, match="1 tuples, 2 keys"):
        DataBatch([0], [1], ["a"], ["a", "b"], [1, 2])


def test_a_corrupted_contribution_blob_is_an_error() -> None:
    good = encode_frame(DataBatch.of([0], [1], ["a"], ["a"], [1]))[5:]
    head = good[: 5 + 4 + 8]
    for blob in ([["a"], ["a"]], (["a"], ["a"]), (["a"], ["a"], [1, 2])):
        with pytest.raises(FrameError, match="three lists of 1 items"):
            decode_frame(2, head + pickle.dumps(blob))


def test_a_spout_never_combines_across_the_clock_bolts_loaded() -> None:
    top = wordcount(parallelism=1)
    spout = SpoutCore(top.spouts[0], 0, top.downstream_of("lines"))
    assert spout.start({P: -1}, loaded={P: 1}) == 0  # a bolt without snapshot: replay all
    spout.resume()
    (part,) = spout.on_records([0, 1, 2, 3], [b"a", b"a", b"a", b"a"]).batches.values()
    assert isinstance(part, Contributions)
    assert list(zip(part.offsets, part.values, strict=True)) == [(1, 2), (3, 2)]


def test_window_state_keeps_a_contribution_per_window_so_emit_sees_each() -> None:
    """The emitted row of a window is the window's: a later tuple of the same key in another
    window must not stand for it (an upsert table keyed by (key, window) would miss it)."""
    spec = specs()["windowed"]
    combined = execution_of(spec).combine_contributions([("a", 1), ("a", 12), ("a", 3), ("b", 4)])
    assert combined.tuples == [("a", 12), ("a", 3), ("b", 4)]
    assert combined.keys == ["a", "a", "b"]
    bolt = BoltCore(spec, ["s"])
    bolt.on_contributions("s", [P] * 3, [9] * 3, combined.tuples, combined.keys,
                          combined.values)
    assert bolt.merged_state() == execution_of(spec).absorb_all(
        spec.state.empty(), [("a", 1), ("a", 12), ("a", 3), ("b", 4)])


def test_records_of_numbers_are_added_in_place_never_into_what_lift_shares() -> None:
    spec = specs()["keyed shared record"]
    run = execution_of(spec)
    state = run.absorb_contributions(spec.state.empty(), [("a", shared_record)])
    state = run.absorb_contributions(state, [("a", shared_record), ("b", shared_record)])
    assert state == {"a": {"n": 2, "total": 10}, "b": {"n": 1, "total": 5}}
    assert shared_record == {"n": 1, "total": 5}
