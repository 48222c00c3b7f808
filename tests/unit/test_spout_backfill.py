"""A spout partition's two cursors (hailstorm.processors.backfill) driven like the spout
shell drives them, under random interleavings of live arrivals, live reads, bounded
backfill reads and rounds: a bolt catching up from nothing and a carried bolt end equal to
the reference model, every round's labels are what the machine accepts, and the cursors
join exactly once the backfill read up to the live position."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.model import Message, run_model
from hailstorm.monoids import Count, per_key
from hailstorm.processors import BoltCore, SpoutCore, SpoutOutput
from hailstorm.processors.actions import WriteSnapshot
from hailstorm.processors.backfill import (
    BUDGET_MAX,
    BUDGET_MIN,
    BackfillPace,
    joinable,
    new_dead_letters,
    within_live,
)
from hailstorm.protocol.catchup import label_accepted
from hailstorm.topology import Topology
from hailstorm.vocabulary import DeadLetter

P = ("w", 0)
WORDS = [b"a b", b"A", b"b a B", b"c", b"C c"]


def topology() -> Topology:
    top = Topology("t")
    lines = top.spout("lines", "w", decoder="text", explode=str.split)
    top.bolt("counts", [lines], key=str.lower, state=per_key(Count()), lift=lambda w: 1)
    top.bolt("cased", [lines], key=lambda w: w, state=per_key(Count()), lift=lambda w: 1)
    return top


class Cursors:
    """The spout shell's rules over one partition, feeding two bolt cores directly."""

    def __init__(self, values: list[bytes], committed: int) -> None:
        self.top = top = topology()
        spec = top.spouts[0]
        self.values = values
        self.arrived = committed + 1
        model = run_model(top, [Message("w", 0, o, v) for o, v in
                                enumerate(values[:committed + 1])])
        self.counts = BoltCore(top.node("counts"), ["s"], {P: committed},  # type: ignore[arg-type]
                               model.instance_states("counts")[0])
        self.cased = BoltCore(top.node("cased"), ["s"])  # type: ignore[arg-type]
        self.live = SpoutCore(spec, 0, top.downstream_of(spec))
        self.live.start({P: committed})
        self.back: SpoutCore | None = SpoutCore(spec, 0, [top.node("cased")])  # type: ignore[list-item]
        self.back.start({P: -1})
        self.back_clock: dict[Any, int] | None = None
        self.epoch = 0
        self.saved: list[tuple[str, WriteSnapshot]] = []
        self.rounds: list[tuple[dict[Any, int], dict[Any, int]]] = []
        for bolt in (self.counts, self.cased):
            self._acted(bolt, bolt.on_watermark("s", {P: -1}))
        self.deliver(SpoutOutput(None, watermark=self.live.watermark()), backfill=False)
        self.deliver(SpoutOutput(None, watermark=self.back.watermark()), backfill=True)
        self.deliver(self.live.resume(), backfill=False)  # Flowing(None)
        self.deliver(self.back.resume(), backfill=True)

    def _acted(self, bolt: BoltCore, actions: list[Any]) -> None:
        self.saved += [(bolt.spec.name, a) for a in actions if isinstance(a, WriteSnapshot)]

    def deliver(self, out: SpoutOutput, backfill: bool) -> None:
        """To the bolts the cursor feeds: the live one to counts (and to cased once
        joined), the backfill one to cased; cased's round clock is the backfill one."""
        targets = [self.cased] if backfill else \
            [self.counts] + ([self.cased] if self.back is None else [])
        for bolt in targets:
            if out.clock is not None:
                clock = out.clock.clock if bolt is self.counts or self.back_clock is None \
                    else self.back_clock
                self._acted(bolt, bolt.on_clock(out.clock.epoch, clock))
            for (name, _i), part in out.batches.items():
                if name == bolt.spec.name:
                    bolt.on_data("s", part.partitions, part.offsets, part.tuples)
            self._acted(bolt, bolt.on_watermark("s", out.watermark))

    def arrive(self, n: int) -> None:
        self.arrived = min(len(self.values), self.arrived + n)

    def read_live(self, n: int) -> None:
        first = self.live.next_offset
        last = min(self.arrived, first + n)
        if first < last and not self.live.paused:
            self.deliver(self.live.on_records(range(first, last), self.values[first:last]),
                         backfill=False)

    def read_back(self, n: int) -> None:
        back = self.back
        if back is None or back.paused:
            return
        first = back.next_offset
        last = min(self.arrived, first + n)
        offsets, values, reached = within_live(range(first, last), self.values[first:last],
                                               self.live.position)
        if len(offsets):
            self.deliver(back.on_records(offsets, values), backfill=True)
        assert back.position <= self.live.position
        if joinable(back, self.live, reached):
            self.back = None

    def round(self) -> None:
        live = {P: self.live.pause()}
        backfill = live if self.back is None else {P: self.back.pause()}
        self.epoch += 1
        self.back_clock = backfill
        self.rounds.append((live, backfill))
        self.deliver(self.live.resume(self.epoch, live), backfill=False)
        if self.back is not None:
            self.deliver(self.back.resume(self.epoch, backfill), backfill=True)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=40), st.data())
def test_two_cursors_end_equal_to_the_model(values: list[bytes], data: st.DataObject) -> None:
    committed = data.draw(st.integers(-1, len(values) - 1))
    cursors = Cursors(values, committed)
    steps = data.draw(st.lists(st.tuples(st.sampled_from(["arrive", "live", "back", "round"]),
                                         st.integers(1, 6)), max_size=40))
    for kind, n in steps:
        {"arrive": cursors.arrive, "live": cursors.read_live, "back": cursors.read_back,
         "round": lambda _n: cursors.round()}[kind](n)
    cursors.arrive(len(values))
    cursors.read_live(len(values))
    for _ in range(len(values) + 2):
        cursors.read_back(3)
    assert cursors.back is None, "the cursors did not join"
    cursors.read_live(len(values))  # nothing left: the watermarks cover everything
    cursors.round()
    model = run_model(cursors.top, [Message("w", 0, o, v) for o, v in enumerate(values)])
    assert cursors.counts.merged_state() == model.instance_states("counts")[0]
    assert cursors.cased.merged_state() == model.instance_states("cased")[0]
    # every round's labels are what the negotiator accepts, in order
    by_epoch = {(name, w.epoch): w.clock for name, w in cursors.saved}
    for epoch, (live, backfill) in enumerate(cursors.rounds, start=1):
        assert by_epoch[("counts", epoch)] == live
        assert label_accepted(by_epoch[("cased", epoch)], live, backfill)
    assert by_epoch[("cased", len(cursors.rounds))] == cursors.rounds[-1][0]  # joined


def test_within_live() -> None:
    assert within_live([3, 4, 6], ["a", "b", "c"], 4) == ([3, 4], ["a", "b"], True)
    assert within_live([3, 4], ["a", "b"], 4) == ([3, 4], ["a", "b"], False)
    assert within_live([5], ["a"], 4) == ([], [], True)


def test_only_the_spouts_own_dead_letters_are_dropped() -> None:
    from hailstorm.vocabulary import Message as Msg

    decode = DeadLetter("lines", "dl", Msg("w", 0, 1, b"x"), "bad", "decode")
    late = DeadLetter("cased", "late", Msg("w", 0, 2, b"y"), "late", "late")
    failed = DeadLetter("cased", "dl", Msg("w", 0, 3, b"z"), "boom", "key")
    assert new_dead_letters([decode, late, failed], "lines") == [late, failed]


def test_backfill_pace() -> None:
    pace = BackfillPace(4_000)
    assert pace.allowed() == 4_000
    pace.read(4_000)
    assert pace.allowed() == 0  # the rest waits for the next round
    pace.round_committed(3, 0.4)
    pace.round_committed(3, 0.4)  # judged once
    pace.round_started()
    assert pace.budget == 6_000 and pace.allowed() == 5_000  # one read at most a batch
    pace.round_committed(4, 2.5)
    assert pace.budget == 3_000
    pace.round_committed(5, None)
    assert pace.budget == 3_000
    for epoch in range(6, 40):
        pace.round_committed(epoch, 9.0)
    assert pace.budget == BUDGET_MIN
    for epoch in range(40, 90):
        pace.round_committed(epoch, 0.1)
    assert pace.budget == BUDGET_MAX


def test_a_backfill_cuts_at_every_bolts_loaded_clock_and_quarantines_above_it() -> None:
    """Bolts catching up from different clocks (a carried one held at the committed
    round's, one restarted mid-backfill at its own): no pre-aggregated group spans either
    clock (each drops what is at or below its own), and a tuple one of them fails on is
    quarantined only above what that one loaded (the rest was quarantined before)."""
    top = Topology("t")
    lines = top.spout("lines", "w", decoder="text", explode=str.split)
    for name in ("early", "late"):
        top.bolt(name, [lines], key=str.lower, state=per_key(Count()), preaggregate=True,
                 lift=lambda w: 1 if w != "bad" else 1 / 0)
    spec = top.spouts[0]
    back = SpoutCore(spec, 0, top.downstream_of(spec))
    back.start({P: -1}, None, None, loaded_by_bolt={"early": {P: 3}, "late": {P: 6}})
    back.resume()
    out = back.on_records(list(range(10)), [b"a bad"] * 10)
    for name in ("early", "late"):
        assert sorted(set(out.batches[(name, 0)].offsets)) == [3, 6, 9]
    quarantined = sorted((d.node, d.message.offset) for d in out.dead_letters)
    assert quarantined == [("early", o) for o in range(4, 10)] + \
        [("late", o) for o in range(7, 10)]
