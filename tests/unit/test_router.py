"""Routing batches to downstream instances, and what an upsert table sink is sent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Collect, Count, Table, Topology, per_key
from hailstorm.model import messages, run_model
from hailstorm.processors import Batch, Router, latest_per_key
from hailstorm.topology import RowError

TABLE = Table("totals", columns={"word": "text", "count": "bigint"}, key=["word"])


def topology(target: object = TABLE) -> Topology:
    top = Topology("routing")
    lines = top.spout("lines", topic="words", decoder="text", explode=str.split)
    counts = top.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                      lift=lambda w: 1, emit=lambda w, n: [(w, n)], parallelism=2)
    top.sink("out", inputs=[counts], target=target)
    return top


def test_an_upsert_sink_gets_the_last_row_of_each_key_in_order() -> None:
    batch = Batch([0, 1, 0, 1, 0], [5, 3, 6, 4, 7],
                  [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", 2)])
    out = latest_per_key(batch, TABLE)
    assert out.tuples == [("a", 2), ("c", 1), ("b", 2)]
    assert (out.partitions, out.offsets) == ([0, 1, 0], [6, 4, 7])
    unique = Batch([0], [1], [("z", 1)])
    assert latest_per_key(unique, TABLE) is unique


def test_tuples_without_a_row_are_passed_on_for_the_sink_to_reject() -> None:
    batch = Batch([0, 0, 0, 0], [1, 2, 3, 4], [("a", 1), ("bad",), ["x"], ("a", 2)])
    out = latest_per_key(batch, TABLE)
    assert out.tuples == [("bad",), ["x"], ("a", 2)]


def test_a_failing_key_routes_to_instance_zero_which_quarantines() -> None:
    top = Topology("routing")
    lines = top.spout("lines", topic="words", decoder="json")
    bolt = top.bolt("b", inputs=[lines], key=lambda t: t["k"], state=per_key(Count()),
                    lift=lambda t: 1, parallelism=4)
    routed = Router([bolt]).route(Batch([0, 0], [1, 2], [{"k": "x"}, {"j": "y"}]))
    assert routed[("b", 0)].tuples[-1] == {"j": "y"}


def test_router_coalesces_only_for_upsert_sinks() -> None:
    batch = Batch([0, 0], [1, 2], [("a", 1), ("a", 2)])
    upsert = Router(topology().downstream_of("counts")).route(batch)
    assert upsert[("out", 0)].tuples == [("a", 2)]
    merge = Table("deltas", columns={"word": "text", "count": "bigint"}, key=["word"],
                  mode="merge")
    for target in (merge, Collect()):
        routed = Router(topology(target).downstream_of("counts")).route(batch)
        assert routed[("out", 0)].tuples == [("a", 1), ("a", 2)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcde"), max_size=6), max_size=12),
       st.integers(1, 5))
def test_coalesced_batches_end_in_the_same_table(lines: list[list[str]], size: int) -> None:
    """Upserting the last row per key of each batch ends as upserting every row."""
    top = topology()
    result = run_model(top, messages("words", [" ".join(words) for words in lines]))
    rows = result.sink_rows("out")
    table: dict[str, int] = {}
    for start in range(0, len(rows), size):
        chunk = rows[start:start + size]
        batch = Batch([o[0] for o, _ in chunk], [o[1] for o, _ in chunk], [t for _, t in chunk])
        for word, count in latest_per_key(batch, TABLE).tuples:
            table[word] = count
    assert table == {key[0]: row["count"] for key, row in result.table("out").items()}


TWO_KEYS = Table("ranks", columns={"country": "text", "rank": "integer", "user": "text"},
                 key=["country", "rank"])
part = st.sampled_from(["DE", "FR", 1, 1.0, True]) | st.lists(st.just(1), max_size=1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(part, part, part) | st.tuples(part, part).map(list)
                | st.tuples(part, part, part).map(list) | st.tuples(part)
                | st.fixed_dictionaries({"country": part, "rank": part, "user": part}),
                max_size=8))
def test_the_last_row_per_key_is_found_as_row_by_row(tuples: list[object]) -> None:
    """Tuples of the table's width are keyed a batch at a time; the result is what keying
    each tuple's row gives: the last of each key, and every tuple without a row (a wrong
    width, an unhashable key) kept apart, in order."""
    last: dict[object, int] = {}
    for index, t in enumerate(tuples):
        try:
            last[TWO_KEYS.key_of(TWO_KEYS.to_row(t, check=False))] = index
        except (RowError, TypeError):
            last[("unrowable", index, object())] = index
    keep = sorted(last.values())
    keys = TWO_KEYS.keys_of_many(tuples)
    if keys is not None:
        assert keys == [TWO_KEYS.key_of(TWO_KEYS.to_row(t, check=False)) for t in tuples]
    batch = Batch([0] * len(tuples), list(range(len(tuples))), tuples)
    assert latest_per_key(batch, TWO_KEYS).offsets == keep
