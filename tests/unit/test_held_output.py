"""A bolt's output held while it drains its queue: the batches joined, the last watermark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Collect, Count, Table, Topology, per_key
from hailstorm.processors import Batch, Contributions, Router
from hailstorm.processors.held_output import HOLD_TUPLES, HeldOutput

TABLE = Table("totals", columns={"word": "text", "count": "bigint"}, key=["word"])


def downstream(target: object) -> Router:
    """The router of a bolt feeding a two-instance keyed bolt and a sink of ``target``."""
    top = Topology("held")
    lines = top.spout("lines", topic="words", decoder="text", explode=str.split)
    counts = top.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                      lift=lambda w: 1, emit=lambda w, n: [(w, n)], parallelism=2)
    top.bolt("again", inputs=[counts], key=lambda t: t[0], state=per_key(Count()),
             lift=lambda t: 1, parallelism=3)
    top.sink("out", inputs=[counts], target=target)
    return Router(top.downstream_of("counts"))


def test_batches_are_joined_in_order_and_only_the_last_watermark_is_kept() -> None:
    held = HeldOutput()
    assert held.take() == (None, None)
    first = Batch([0, 1], [5, 3], [("a", 1), ("b", 1)])
    assert not held.hold(first)
    held.hold_watermark({0: 5})
    assert not held.hold(Batch([0], [6], [("a", 2)]))
    held.hold_watermark({0: 6, 1: 3})
    batch, watermark = held.take()
    assert batch == Batch([0, 1, 0], [5, 3, 6], [("a", 1), ("b", 1), ("a", 2)])
    assert watermark == {0: 6, 1: 3}
    assert first == Batch([0, 1], [5, 3], [("a", 1), ("b", 1)])  # the caller's, unchanged
    assert held.take() == (None, None)


def test_a_batch_held_alone_is_sent_as_it_is() -> None:
    held = HeldOutput()
    big = Batch([0] * HOLD_TUPLES, list(range(HOLD_TUPLES)), ["w"] * HOLD_TUPLES)
    assert held.hold(big)
    assert held.take()[0] is big
    small = Batch([0], [1], ["w"])
    held.hold(small)
    held.hold(Batch([0], [2], ["v"]))
    assert held.take()[0] == Batch([0, 0], [1, 2], ["w", "v"])
    assert small == Batch([0], [1], ["w"])


def test_a_full_hold_asks_to_be_sent() -> None:
    held = HeldOutput()
    assert not held.hold(Batch([0] * (HOLD_TUPLES - 1), list(range(HOLD_TUPLES - 1)),
                               ["w"] * (HOLD_TUPLES - 1)))
    assert held.hold(Batch([0], [HOLD_TUPLES], ["w"]))


def test_only_plain_batches_are_held() -> None:
    with pytest.raises(TypeError, match="Contributions"):
        HeldOutput().hold(Contributions([0], [1], ["w"], ["w"], [1]))


batches = st.lists(
    st.lists(st.tuples(st.integers(0, 1), st.sampled_from("abcdef"), st.integers(1, 9)),
             max_size=6),
    max_size=6)


@settings(max_examples=150, deadline=None)
@given(batches, st.sampled_from(["upsert", "append"]))
def test_routing_the_held_batch_leaves_each_receiver_what_the_batches_one_by_one_did(
        parts: list[list[tuple[int, str, int]]], mode: str) -> None:
    """Each instance of a keyed bolt gets the same tuples in the same order; a table gets
    rows that end in the same table (an upsert sink is sent the last row per key)."""
    router = downstream(TABLE if mode == "upsert" else Collect())
    offset = 0
    held = HeldOutput()
    one_by_one: dict[tuple[str, int], list[tuple[int, int, object]]] = {}
    for part in parts:
        batch = Batch([p for p, _w, _n in part], list(range(offset, offset + len(part))),
                      [(w, n) for _p, w, n in part])
        offset += len(part)
        for dest, routed in router.route(batch).items():
            one_by_one.setdefault(dest, []).extend(
                zip(routed.partitions, routed.offsets, routed.tuples, strict=True))
        held.hold(batch)
    joined, _ = held.take()
    at_once = {dest: list(zip(routed.partitions, routed.offsets, routed.tuples, strict=True))
               for dest, routed in (router.route(joined) if joined else {}).items()}
    for dest in sorted(set(one_by_one) | set(at_once)):
        if dest[0] == "again" or mode == "append":
            assert at_once.get(dest, []) == one_by_one.get(dest, [])
        else:  # the upsert table: the same last row (and origin) per key
            def last(rows: list[tuple[int, int, object]]) -> dict[object, tuple[int, int]]:
                return {t[0]: (p, o) for p, o, t in rows}  # type: ignore[index]
            assert last(at_once.get(dest, [])) == last(one_by_one.get(dest, []))
