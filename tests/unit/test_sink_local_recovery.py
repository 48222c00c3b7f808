"""A sink whose upstream bolt restarts alone (a local recovery, issue 42): it keeps what the
old incarnation promised by its last watermark and takes the rest from the new one, so
every origin's rows are applied once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Table
from hailstorm.processors.watermarks import UpstreamWatermarks
from hailstorm.protocol.clock import Partition
from hailstorm.sinks.buffer import RowBuffer

P0: Partition = ("words", 0)
P1: Partition = ("words", 1)
TOTALS = Table("totals", {"word": "text", "n": "bigint"}, key=["word"], mode="merge")
LOG = Table("events", {"word": "text", "n": "bigint"}, mode="append")
COUNTS = Table("counts", {"word": "text", "n": "bigint"}, key=["word"], mode="upsert")
LATEST = {P0: 10**9, P1: 10**9}


def origins(buffer: RowBuffer) -> list[tuple[Partition, int]]:
    return sorted(buffer.select(LATEST).origins)


def test_the_old_incarnations_rows_above_its_watermark_are_forgotten() -> None:
    buffer = RowBuffer(LOG)
    buffer.add_many([P0, P0, P1, P1], [3, 7, 4, 9], [("a", 1)] * 4, sender="bolt:b:1")
    buffer.add_many([P0], [8], [("x", 1)], sender="bolt:b:0")  # another sender: kept
    assert buffer.part_from("bolt:b:1", {P0: 5, P1: 4}) == 2
    assert origins(buffer) == [(P0, 3), (P0, 8), (P1, 4)]
    # The new incarnation replays from the committed clock: what its predecessor sent
    # through the watermark is dropped, the rest is taken.
    buffer.add_many([P0, P0, P1, P1], [3, 7, 4, 9], [("a", 1)] * 4, sender="bolt:b:1")
    assert origins(buffer) == [(P0, 3), (P0, 7), (P0, 8), (P1, 4), (P1, 9)]


def test_a_sender_that_never_sent_a_watermark_is_taken_whole_from_its_next_one() -> None:
    buffer = RowBuffer(TOTALS)
    buffer.add_many([P0], [3], [("a", 1)], sender="bolt:b:1")
    assert buffer.part_from("bolt:b:1", {}) == 1 and len(buffer) == 0
    buffer.add_many([P0], [3], [("a", 1)], sender="bolt:b:1")
    assert buffer.select(LATEST).rows == [("a", 1)]


def test_upsert_rows_stay_and_the_last_arrival_wins() -> None:
    buffer = RowBuffer(COUNTS)
    buffer.add_many([P0, P1], [3, 9], [("a", 1), ("a", 2)], sender="bolt:b:1")
    assert buffer.part_from("bolt:b:1", {P0: 5, P1: 4}) == 0
    buffer.add_many([P1, P0], [9, 3], [("a", 1), ("a", 2)], sender="bolt:b:1")
    assert buffer.select(LATEST).rows == [("a", 2)]


def test_a_senders_watermark_is_what_it_promised() -> None:
    marks = UpstreamWatermarks(["bolt:b:0", "bolt:b:1"])
    assert marks.of("bolt:b:1") is None
    marks.observe("bolt:b:1", {0: 5, 1: 4})
    marks.observe("bolt:b:1", {0: 3})  # an older claim stays true
    assert marks.of("bolt:b:1") == {0: 5, 1: 4}


@settings(deadline=None)
@given(sent=st.lists(st.integers(0, 30), min_size=1, max_size=30, unique=True),
       data=st.data())
def test_every_origin_is_applied_once_whatever_the_old_one_got_through(
        sent: list[int], data: st.DataObject) -> None:
    """The old incarnation sends a prefix of its rows (in offset order, its watermark
    behind the last of them), the new one replays every row above the committed clock:
    each origin ends in the buffer once."""
    sent.sort()
    committed = data.draw(st.integers(-1, max(sent)))
    replayed = [o for o in sent if o > committed]
    got = data.draw(st.integers(0, len(replayed)))  # how far the old one got
    watermark = data.draw(st.integers(committed, replayed[got - 1] if got else committed))
    buffer = RowBuffer(LOG, floor={P0: committed})
    buffer.add_many([P0] * got, replayed[:got], [("a", o) for o in replayed[:got]],
                    sender="bolt:b:1")
    buffer.part_from("bolt:b:1", {P0: watermark})
    buffer.add_many([P0] * len(replayed), replayed, [("a", o) for o in replayed],
                    sender="bolt:b:1")
    assert origins(buffer) == [(P0, o) for o in replayed]
