"""Running totals a batch at a time (``hailstorm.processors.running_totals``) give exactly
what a step per tuple gives: the engine's own absorb, merged value and emit, tuple after
tuple, with one or two segments, failing and non-list emits included."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from hailstorm.engine import BoltExecution, execution_of
from hailstorm.monoids import Count, Sum, per_key
from hailstorm.processors.actions import Failed
from hailstorm.processors.running_totals import add_and_emit
from hailstorm.topology import RecordFailed, Topology, by_key

KEYS = st.sampled_from(["a", "b", "c", "d", "e"])


def _listed(t: Any, total: Any) -> list[Any]:
    return [(t[0], total)]


def _failing(t: Any, total: Any) -> list[Any]:
    return [(t[0], 1 // (int(total) % 3))]  # fails where the total is a multiple of 3


def _generated(t: Any, total: Any) -> Any:
    return ((t[0], total, n) for n in range(int(abs(total)) % 3))  # not a list


def _none_or_two(t: Any, total: Any) -> list[Any] | None:
    return None if int(total) % 2 else [(t[0], total), (total,)]


EMITS = {"listed": _listed, "failing": _failing, "generated": _generated,
         "none or two": _none_or_two, "by key": by_key(lambda key, total: [(key, total)])}


_EXECUTIONS: dict[tuple[str, str], BoltExecution] = {}


def _execution(monoid: Any, emit: str) -> BoltExecution:
    """The engine's execution of a keyed ``monoid`` bolt with the emit named ``emit``
    (one per pair, so hypothesis reuses them)."""
    made = _EXECUTIONS.get((monoid.describe(), emit))
    if made is None:
        top = Topology(f"totals_{len(_EXECUTIONS)}")
        words = top.spout("words", topic="w", decoder="json")
        spec = top.bolt("totals", inputs=[words], key=lambda t: t[0],
                        state=per_key(monoid), lift=lambda t: t[1], emit=EMITS[emit])
        made = _EXECUTIONS[(monoid.describe(), emit)] = execution_of(spec)
    return made


@st.composite
def batches(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]], int, list[Any]]:
    kind = draw(st.sampled_from(["count", "long", "double"]))
    if kind == "double":
        monoid: Any = Sum("double")
        values: st.SearchStrategy[Any] = st.floats(allow_nan=False, allow_infinity=False,
                                                   width=32) | st.just(-0.0)
    else:
        monoid = Count() if kind == "count" else Sum()
        values = st.integers(-10, 10) | st.integers(-2**62, 2**62)
    segments = draw(st.lists(st.dictionaries(KEYS, values, max_size=4), min_size=1,
                             max_size=2))
    into = draw(st.integers(0, len(segments) - 1))
    tuples = draw(st.lists(st.tuples(KEYS, values), min_size=1, max_size=30))
    return monoid, segments, into, tuples


def _step_per_tuple(run: BoltExecution, segments: list[dict[str, Any]], into: int,
                    tuples: list[Any]) -> tuple[list[Any], list[tuple[int, str]]]:
    """What a bolt did before: the engine's absorb, merged value and emit, per tuple."""
    out: list[Any] = []
    failed: list[tuple[int, str]] = []
    for offset, t in enumerate(tuples):
        key, value = run.contribution(t)
        segments[into] = run.absorb(segments[into], key, value)
        try:
            produced = run.outputs(t, key, run.value_for_emit(key, segments))
        except RecordFailed as failure:
            failed.append((offset, str(failure)))
            continue
        out.extend((offset, emitted) for emitted in produced)
    return out, failed


@settings(max_examples=400, deadline=None)
@given(batch=batches(), emit=st.sampled_from(sorted(EMITS)))
def test_a_batch_at_a_time_is_a_step_per_tuple(batch: Any, emit: str) -> None:
    monoid, segments, into, tuples = batch
    run = _execution(monoid, emit)
    expected_segments = [dict(s) for s in segments]
    expected, expected_failed = _step_per_tuple(run, expected_segments, into, tuples)

    failed: list[Failed] = []
    offsets = list(range(len(tuples)))
    added = add_and_emit(run, segments, into, ["p"] * len(tuples), offsets, tuples,
                         [run.contribution(t) for t in tuples], failed)

    event(f"{len(segments)} segment(s), {'failures' if expected_failed else 'no failure'}")
    # repr: -0.0 and 0.0, 1 and 1.0 are equal but not the same total
    assert repr(list(zip(added.out.offsets, added.out.tuples, strict=True))) == repr(expected)
    assert added.out.partitions == ["p"] * len(expected)
    assert [(o, str(f)) for _p, o, _t, f in failed] == expected_failed
    assert repr(segments) == repr(expected_segments)
    assert added.keys == [t[0] for t in tuples]


def test_a_value_that_does_not_add_names_its_tuple() -> None:
    run = _execution(Sum(), "listed")
    segments: list[dict[str, Any]] = [{}]
    tuples = [("a", 1), ("b", "x")]
    try:
        add_and_emit(run, segments, 0, ["p", "p"], [5, 6], tuples, tuples, [])
    except TypeError as exc:
        assert "processing tuple ('b', 'x') from ('p', 6)" in "\n".join(exc.__notes__)
    else:
        raise AssertionError("a str added to an int")
