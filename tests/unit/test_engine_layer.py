"""The engine layer: a bolt's declaration records its batch fast paths once, and the engine
compiles one execution per bolt, whose key-routing memo the router and the core share."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Count, Max, Record, Sum, Topology, itself, per_key
from hailstorm.engine import execution_of
from hailstorm.monoids import TumblingWindow
from hailstorm.routing import KEY_INT_BITS
from hailstorm.topology import RecordFailed


def test_the_declaration_records_which_fast_paths_apply() -> None:
    top = Topology("paths")
    src = top.spout("src", topic="t", decoder="text")
    counts = top.bolt("counts", inputs=[src], key=itself, state=per_key(Count()),
                      lift=Count.lift)
    sums = top.bolt("sums", inputs=[src], key=lambda t: t, state=per_key(Sum()), lift=len)
    windows = top.bolt("windows", inputs=[src], key=itself,
                       state=per_key(TumblingWindow(60, Count())), lift=Count.lift,
                       event_time=len, late="drop")
    unkeyed = top.bolt("unkeyed", inputs=[src], state=Count(), lift=lambda t: 1)
    assert counts.paths.lift_is_one and counts.paths.key_is_tuple
    assert counts.paths.adds_numbers
    assert sums.paths.adds_numbers and not sums.paths.key_is_tuple
    assert not sums.paths.lift_is_one
    assert windows.paths.lift_is_one and not windows.paths.adds_numbers
    assert not unkeyed.paths.adds_numbers and not unkeyed.paths.lift_is_one
    totals = top.bolt("totals", inputs=[src], key=itself,
                      state=per_key(Record({"n": Count(), "chars": Sum()})),
                      lift=lambda t: {"n": 1, "chars": len(t)})
    mixed = top.bolt("mixed", inputs=[src], key=itself,
                     state=per_key(Record({"n": Count(), "longest": Max()})),
                     lift=lambda t: {"n": 1, "longest": len(t)})
    assert totals.paths.adds_records and not totals.paths.adds_numbers
    assert not mixed.paths.adds_records and not counts.paths.adds_records


def test_one_execution_per_bolt() -> None:
    top = Topology("once")
    src = top.spout("src", topic="t", decoder="text")
    a = top.bolt("a", inputs=[src], key=itself, state=per_key(Count()), lift=Count.lift,
                 parallelism=3)
    b = top.bolt("b", inputs=[src], key=itself, state=per_key(Count()), lift=Count.lift,
                 parallelism=3)
    assert execution_of(a) is execution_of(a)
    assert execution_of(a) is not execution_of(b)
    assert execution_of(a).instance_of_key is execution_of(a).instance_of_key
    assert execution_of(a).instance_for("w") == execution_of(b).instance_for("w")


def assert_batch_is_tuple_by_tuple(bolt: Any, tuples: list[Any]) -> None:
    """``contributions(tuples)`` is ``contribution()`` tuple by tuple: the same values,
    and the same tuples refused at the same stage."""
    run = execution_of(bolt)
    expected, refused = [], []
    for index, t in enumerate(tuples):
        try:
            expected.append((index, run.contribution(t)))
        except RecordFailed as failure:
            refused.append((index, failure.stage))
    contributions, indices, failures = run.contributions(tuples)
    assert list(zip(indices, contributions, strict=True)) == expected
    assert [(index, failure.stage) for index, failure in failures] == refused


tuples_of_a_window_bolt = st.lists(st.tuples(
    st.sampled_from("ab"), st.integers(-3, 3) | st.text(max_size=1) | st.floats(),
    st.integers(0, 100) | st.booleans() | st.floats() | st.none() | st.just(2**70)),
    max_size=8)


@settings(max_examples=300, deadline=None)
@given(tuples=tuples_of_a_window_bolt, late=st.booleans())
def test_a_window_bolts_batch_contributions_are_its_tuples_contributions(
        tuples: list[tuple[Any, Any, Any]], late: bool) -> None:
    """The batch path gives what contribution() gives tuple by tuple: the same values, and
    the same tuples refused at the same stage (a value the window's inner monoid refuses,
    an event time the window refuses)."""
    top = Topology("windowed")
    src = top.spout("src", topic="t", decoder="json")
    bolt = top.bolt("sums", inputs=[src], key=lambda t: t[0],
                    state=per_key(TumblingWindow(10, Sum())), lift=lambda t: t[1],
                    event_time=lambda t: t[2], late="drop" if late else "windowed.late")
    assert_batch_is_tuple_by_tuple(bolt, tuples)


@settings(max_examples=300, deadline=None)
@given(tuples=st.lists(st.tuples(
    st.sampled_from(["DE", "FR"]),
    st.text(max_size=1) | st.integers(-2, 2) | st.floats() | st.none() | st.binary(max_size=1)
    | st.lists(st.integers(0, 1), max_size=1) | st.just({"a": 1})
    | st.sampled_from([1 << KEY_INT_BITS - 1, -1 << KEY_INT_BITS + 1])), max_size=8),
       parallelism=st.sampled_from([1, 2]))
def test_a_bolt_keyed_by_tuples_refuses_in_a_batch_what_it_refuses_alone(
        tuples: list[tuple[Any, Any]], parallelism: int) -> None:
    """Tuple keys of plain parts are taken without routing each one; a part that cannot be
    hashed or routed (a list, a dict, an int too wide to encode) fails the tuple at its
    key, as contribution() does."""
    top = Topology("composite")
    src = top.spout("src", topic="t", decoder="json")
    bolt = top.bolt("counts", inputs=[src], key=lambda t: (t[0], t[1]),
                    state=per_key(Count(), key_type="json"), lift=Count.lift,
                    parallelism=parallelism)
    assert_batch_is_tuple_by_tuple(bolt, tuples)
