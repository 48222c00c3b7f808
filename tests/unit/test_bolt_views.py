"""A bolt's merged views: while a round is pending, a keyed bolt of copied values (a TopK, a
set, a record) keeps each touched key's value merged across its segments and absorbs into
it, instead of merging the segments for every tuple it emits for. What emit receives must
be what merging per tuple gives, through rounds opened, handed out, copied, folded and
passed (barrier rounds known only in part)."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from hailstorm.engine import execution_of
from hailstorm.monoids import SetUnion, TopK, Ttl, TumblingWindow, per_key
from hailstorm.processors import BoltCore, WriteSnapshot
from hailstorm.topology import BoltSpec, Topology

P0, P1 = ("ev", 0), ("ev", 1)


def top_bolt(monoid: str) -> BoltSpec[Any, Any]:
    """A bolt keyed by country over ``(country, user, score)`` tuples, emitting the
    country's whole value for every tuple (as ``top_spenders``' ``top`` does)."""
    top = Topology("views")
    events = top.spout("events", topic="ev", decoder="json")
    if monoid == "topk":
        return top.bolt("top", inputs=[events], key=lambda t: t[0],
                        state=per_key(TopK(3, score_type="long")),
                        lift=lambda t: TopK.lift(t[1], t[2]),
                        emit=lambda t, top: [(t[0], tuple(TopK.top(top)))])
    return top.bolt("seen", inputs=[events], key=lambda t: t[0], state=per_key(SetUnion()),
                    lift=lambda t: frozenset({t[1]}),
                    emit=lambda t, users: [(t[0], tuple(sorted(users)))])


steps = st.lists(st.one_of(
    st.tuples(st.just("data"), st.sampled_from([P0, P1]),
              st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from("uvwxyz"),
                                 st.integers(0, 50)), min_size=1, max_size=6)),
    st.tuples(st.just("clock"), st.booleans()),  # whole, or one partition's part
    st.tuples(st.just("watermark")),
    st.tuples(st.just("copy")),
), max_size=40)


class Driven:
    """One core driven through the steps, recording what it emitted."""

    def __init__(self, spec: BoltSpec[Any, Any], views: bool) -> None:
        self.core = BoltCore(spec, ["s"], {}, {}, loaded_whole=True)  # deltas: copied later
        execution_of(spec).merges_views = views
        self.core.on_watermark("s", {P0: -1, P1: -1})
        self.emitted: list[Any] = []
        self.uncopied: list[WriteSnapshot] = []

    def act(self, actions: list[Any]) -> None:
        self.uncopied += [a for a in actions if isinstance(a, WriteSnapshot)]


@settings(max_examples=300, deadline=None)
@given(monoid=st.sampled_from(["topk", "set"]), plan=steps)
def test_emit_sees_what_merging_per_tuple_gives(monoid: str, plan: list[Any]) -> None:
    cores = [Driven(top_bolt(monoid), views=True), Driven(top_bolt(monoid), views=False)]
    views_core = cores[0].core
    sent = {P0: -1, P1: -1}
    epoch = 0
    for step in plan:
        if step[0] == "data":
            p, tuples = step[1], step[2]
            offsets = list(range(sent[p] + 1, sent[p] + 1 + len(tuples)))
            sent[p] = offsets[-1]
            for d in cores:
                d.emitted += d.core.on_data("s", [p] * len(tuples), offsets, tuples).tuples
            if views_core._views:  # emitted from merged views
                event("emitted from merged views")
        elif step[0] == "clock":
            epoch += 1  # a new round; a part only: passed by the next one
            clock = dict(sent) if step[1] else {P0: sent[P0]}
            for d in cores:
                d.act(d.core.on_clock(epoch, clock, partial=not step[1]))
        elif step[0] == "watermark":
            for d in cores:
                d.act(d.core.on_watermark("s", dict(sent)))
        else:
            for d in cores:
                if d.uncopied:
                    d.uncopied.pop(0).content.get()
    views, merging = cores
    assert views.emitted == merging.emitted
    assert views.core.merged_state() == merging.core.merged_state()


def test_windows_and_ttl_keep_no_views() -> None:
    """A sweep drops closed windows (and idle ttl sessions) from the segments between
    tuples, which a kept merge would not see: such bolts merge per tuple."""
    top = Topology("windows")
    events = top.spout("events", topic="ev", decoder="json")
    windowed = top.bolt("w", inputs=[events], key=lambda t: t[0],
                        state=per_key(TumblingWindow(10, SetUnion())),
                        lift=lambda t: frozenset({t[1]}), event_time=lambda t: t[2],
                        emit=lambda t, w: [t[0]], late="drop")
    idle = top.bolt("s", inputs=[events], key=lambda t: t[0],
                    state=per_key(Ttl(SetUnion(), 10)), lift=lambda t: frozenset({t[1]}),
                    event_time=lambda t: t[2], emit=lambda t, w: [t[0]], late="windows.late")
    assert not execution_of(windowed).merges_views and not execution_of(idle).merges_views
    assert execution_of(top_bolt("topk")).merges_views
    assert execution_of(top_bolt("set")).merges_views
