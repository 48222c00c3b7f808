"""The sink's round and commit policy (hailstorm.processors.sink_core), without a database:
a model writer commits through whatever the core asks, and random interleavings of
watermarks, round clocks, idleness, waiting rows, time and refused commits check the rules."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.processors.sink_core import (
    COMMIT_INTERVAL,
    COMMIT_ROWS,
    MIN_COMMIT_INTERVAL,
    Commit,
    ReportRound,
    SinkAction,
    SinkCore,
    covers,
)
from hailstorm.protocol.clock import Clock, Partition

P0: Partition = ("t", 0)
P1: Partition = ("t", 1)
OTHER: Partition = ("u", 0)
"""A partition of the topology no upstream of this sink carries."""
PARTITIONS = [P0, P1, OTHER]  # wire indices 0, 1, 2
JOINED = 5
QUICK: dict[str, Any] = {"took": 0.0}
"""A commit that took no time."""
UP = {"caught_up": True}
"""No frame waits to be read after this one."""


def test_covers_skips_only_the_partitions_no_upstream_carries() -> None:
    clicks, views = ("clicks", 0), ("views", 0)
    clock = {clicks: 10, views: 1999}
    carried = {clicks: 12}
    assert covers({clicks: 10}, clock, carried)
    assert not covers({clicks: 9}, clock, carried)
    assert not covers({}, clock, carried)
    assert not covers({clicks: 10}, clock, {clicks: 12, views: 1500})


def test_nothing_happens_before_every_upstream_spoke() -> None:
    core = SinkCore(JOINED, ["a", "b"], PARTITIONS, writes=True, last_commit=0.0)
    assert core.on_round(JOINED, {P0: -1}, pending=3, now=9.0) == []
    assert core.on_watermark("a", {0: 4, 1: 4}, pending=3, now=9.0, **UP) == []
    assert core.on_idle(pending=3, now=9.0) == []
    actions = core.on_watermark("b", {0: 2}, pending=3, now=9.0, **UP)
    assert actions == [Commit({P0: 2, P1: 4}, (JOINED,))]


def test_a_round_is_reported_only_after_the_commit_that_covers_it() -> None:
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=True, last_commit=0.0)
    assert core.on_watermark("a", {0: 3, 1: 3}, pending=0, now=0.01, **UP) == []
    [commit] = core.on_round(JOINED, {P0: 3, P1: 1, OTHER: 50}, pending=0, now=0.2)
    assert commit == Commit({P0: 3, P1: 3}, (JOINED,))
    assert core.committed(commit, {P0: 2, P1: 3}, now=0.3, **QUICK) == []  # the table lags
    assert core.rounds == {JOINED: {P0: 3, P1: 1, OTHER: 50}}
    [commit] = core.on_watermark("a", {0: 4}, pending=1, now=0.4, **UP)
    assert core.committed(commit, {P0: 4, P1: 3}, now=0.4, **QUICK) == [
        ReportRound(JOINED, {P0: 3, P1: 1, OTHER: 50})]
    assert core.rounds == {}


def test_the_cadence_without_a_round() -> None:
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=True, last_commit=0.0)
    core.on_watermark("a", {0: 0}, pending=0, now=0.0, **UP)
    assert core.on_watermark("a", {0: 1}, pending=10, now=MIN_COMMIT_INTERVAL / 2,
                             **UP) == []  # too soon
    assert core.on_watermark("a", {0: 2}, pending=COMMIT_ROWS, now=MIN_COMMIT_INTERVAL / 2,
                             **UP) == [Commit({P0: 2}, ())]  # a full buffer does not wait
    core.committed(Commit({P0: 2}, ()), {P0: 2}, now=MIN_COMMIT_INTERVAL / 2, **QUICK)
    [commit] = core.on_idle(pending=10, now=MIN_COMMIT_INTERVAL * 1.5)
    assert core.committed(commit, {P0: 2}, now=MIN_COMMIT_INTERVAL * 1.5, **QUICK) == []
    assert core.on_idle(pending=0, now=10.0) == []  # nothing waits: nothing to do


def test_one_commit_at_a_time_and_what_arrived_meanwhile_is_decided_when_it_ends() -> None:
    """While a commit runs (in the background) the core asks for no other; a round
    announced meanwhile commits as soon as it ended, and with nothing held nothing does."""
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=True, last_commit=0.0)
    core.on_watermark("a", {0: 0}, pending=0, now=0.0, **UP)
    [first] = core.on_idle(pending=10, now=1.0)
    assert core.committing
    assert not core.must_wait(COMMIT_ROWS - 1) and core.must_wait(COMMIT_ROWS)
    assert core.on_watermark("a", {0: 3, 1: 3}, pending=20, now=1.1, **UP) == []
    assert core.on_round(JOINED, {P0: 3, P1: 3}, pending=20, now=1.1) == []
    assert core.on_idle(pending=20, now=5.0) == []
    assert core.committed(first, {P0: 0}, now=1.2, took=0.2) == []
    [second] = core.resume(pending=20, now=1.2, caught_up=False)
    assert second == Commit({P0: 3, P1: 3}, (JOINED,))
    assert core.committed(second, {P0: 3, P1: 3}, now=1.3, took=0.1) == [
        ReportRound(JOINED, {P0: 3, P1: 3})]
    assert core.resume(pending=0, now=1.3, caught_up=True) == []  # nothing held
    assert not core.must_wait(COMMIT_ROWS)  # no commit runs: read on


def test_a_sink_keeping_up_commits_again_once_it_read_what_arrived() -> None:
    """A group commit: after a quick commit the next waits :data:`MIN_COMMIT_INTERVAL` from
    the start of the last; after a slow one it comes as soon as the sink is caught up."""
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=True, last_commit=0.0)
    core.on_watermark("a", {0: 0}, pending=0, now=0.0, **UP)
    [commit] = core.on_idle(pending=10, now=1.0)
    core.committed(commit, {P0: 0}, now=1.005, took=0.005)  # a quick one
    assert core.on_watermark("a", {0: 1}, pending=10, now=1.0 + MIN_COMMIT_INTERVAL * 0.9,
                             **UP) == []
    [commit] = core.on_idle(pending=10, now=1.0 + MIN_COMMIT_INTERVAL)
    core.committed(commit, {P0: 1}, now=3.0, took=1.5)  # a slow one
    [commit] = core.on_watermark("a", {0: 2}, pending=10, now=3.001, **UP)
    assert commit == Commit({P0: 2}, ())


def test_a_sink_behind_its_upstreams_commits_at_the_longest_interval() -> None:
    """Frames keep waiting to be read (a backlog): the cadence waits :data:`COMMIT_INTERVAL`
    after the last commit ended, so rows of one key arriving meanwhile are written once."""
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=True, last_commit=0.0)
    core.on_watermark("a", {0: 0}, pending=0, now=0.0, caught_up=False)
    [commit] = core.on_idle(pending=10, now=1.0)
    core.committed(commit, {P0: 0}, now=1.5, took=0.5)
    behind = {"pending": 10, "caught_up": False}
    assert core.on_watermark("a", {0: 1}, now=1.5 + COMMIT_INTERVAL * 0.9, **behind) == []
    [commit] = core.on_watermark("a", {0: 2}, now=1.5 + COMMIT_INTERVAL, **behind)
    assert commit == Commit({P0: 2}, ())
    assert core.cadence_due(1.5 + COMMIT_INTERVAL * 0.9, caught_up=True)


@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0), st.floats(0.0, 10.0), st.booleans())
def test_the_cadence_waits_at_least_the_shortest_and_at_most_the_longest_interval(
    took: float, since_end: float, more: float, caught_up: bool
) -> None:
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=True, last_commit=0.0)
    core.on_watermark("a", {0: 0}, pending=0, now=0.0, **UP)
    [commit] = core.on_idle(pending=1, now=1.0)
    core.committed(commit, {P0: 0}, now=1.0 + took, took=took)
    now = 1.0 + took + since_end
    due = core.cadence_due(now, caught_up=caught_up)
    if now - 1.0 < MIN_COMMIT_INTERVAL:
        assert not due, "never sooner than the shortest interval after the last began"
    if since_end >= COMMIT_INTERVAL:
        assert due, "never later than the longest interval after the last ended"
    if caught_up:
        assert core.cadence_due(now + more, caught_up=True) >= due, "waiting never undoes it"


def test_rounds_of_earlier_runs_and_repeated_clocks_are_ignored() -> None:
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=True, last_commit=0.0)
    core.on_watermark("a", {0: 9, 1: 9}, pending=0, now=0.0, **UP)
    assert core.on_round(JOINED - 1, {P0: 1}, pending=0, now=0.1) == []
    assert len(core.on_round(JOINED, {P0: 1}, pending=0, now=0.1)) == 1
    assert core.on_round(JOINED, {P0: 1}, pending=0, now=0.1) == []
    core.fenced({P0: 0})  # refused: nothing reported, the round waits
    assert core.rounds == {JOINED: {P0: 1}} and core.committed_through == {P0: 0}
    [again] = core.on_watermark("a", {0: 10}, pending=0, now=0.2, **UP)
    reports = core.committed(again, {P0: 10, P1: 9}, now=0.2, **QUICK)
    assert reports == [ReportRound(JOINED, {P0: 1})]
    # Announced again once reported (the other upstreams' CLOCK, the master's Flowing):
    # nothing to do, nothing to log.
    assert core.on_round(JOINED, {P0: 1}, pending=0, now=0.3) == []
    assert core.on_round(JOINED - 1, {P0: 1}, pending=0, now=0.3) == []


def test_without_a_target_the_mark_is_the_progress() -> None:
    core = SinkCore(JOINED, ["a"], PARTITIONS, writes=False, last_commit=0.0)
    assert core.on_round(JOINED, {P0: 5, OTHER: 7}, pending=0, now=0.0) == []
    assert core.on_watermark("a", {0: 4}, pending=0, now=0.0, **UP) == []
    assert core.on_watermark("a", {0: 5}, pending=0, now=0.0, **UP) == [
        ReportRound(JOINED, {P0: 5, OTHER: 7})]
    assert core.committed_through == {P0: 5}
    assert core.on_round(JOINED, {P0: 5, OTHER: 7}, pending=0, now=0.1) == []


# --------------------------------------------------------------------------- interleavings

UPSTREAMS = ["a", "b"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("watermark"), st.just("a"),  # "a" carries both partitions
                  st.fixed_dictionaries({0: st.integers(-1, 30), 1: st.integers(-1, 30)}),
                  st.booleans()),
        st.tuples(st.just("watermark"), st.just("b"),  # "b" only the first
                  st.fixed_dictionaries({0: st.integers(-1, 30)}), st.booleans()),
        st.tuples(st.just("round"), st.integers(JOINED - 2, JOINED + 4),
                  st.fixed_dictionaries({P0: st.integers(-1, 30), P1: st.integers(-1, 30),
                                         OTHER: st.integers(-1, 99)})),
        st.tuples(st.just("idle")),
        st.tuples(st.just("rows"), st.sampled_from([0, 1, 50, COMMIT_ROWS])),
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.1, 0.3, COMMIT_INTERVAL])),
        st.tuples(st.just("refuse"), st.booleans()),
        st.tuples(st.just("took"), st.sampled_from([0.0, 0.01, 0.1, 1.0])),
        st.tuples(st.just("background"), st.booleans()),
        st.tuples(st.just("end")),
    ),
    max_size=60,
)


class Sim:
    """A sink shell with a model writer (it commits through exactly what it is asked), at
    once or, ``background``, on a thread of its own until an ``end`` while frames arrive."""

    def __init__(self, writes: bool) -> None:
        self.core = SinkCore(JOINED, UPSTREAMS, PARTITIONS, writes=writes, last_commit=0.0)
        self.writes = writes
        self.now = 0.0
        self.pending = 0
        self.refuse = False
        self.table: Clock = {}
        self.last_commit = 0.0
        self.last_started = 0.0
        self.took = 0.0
        """How long the model writer's next commit takes."""
        self.caught_up = True
        """Whether no frame waited to be read at the last decision."""
        self.commits: list[Clock] = []
        self.clocks: dict[int, Clock] = {}
        self.announced: dict[int, Clock] = {}
        self.reported: dict[int, Clock] = {}
        self.spoke: set[str] = set()
        self.background = False
        self.running: tuple[Commit, float, int] | None = None
        """The commit running in the background, when it began and the rows then waiting."""
        self.announced_meanwhile = False
        """A round was announced while it ran."""

    def step(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        core, now, pending = self.core, self.now, self.pending
        if kind == "watermark":
            self.spoke.add(op[1])
            self.caught_up = op[3]
            self.act(core.on_watermark(op[1], op[2], pending=pending, now=now,
                                       caught_up=op[3]), forced=False)
        elif kind == "round":  # one clock per round, however often it is announced
            clock = self.clocks.setdefault(op[1], op[2])
            # A round starts after the previous one committed (this sink reported it): one
            # below the last reported is announced again, or never (then nothing comes of it).
            possible = op[1] > max(self.reported, default=-1) or op[1] in self.announced
            if op[1] >= JOINED and possible:
                self.announced[op[1]] = clock
            if self.running is not None and possible and op[1] >= JOINED:
                self.announced_meanwhile = True
            self.act(core.on_round(op[1], clock, pending=pending, now=now), forced=True)
        elif kind == "idle":
            self.caught_up = True
            self.act(core.on_idle(pending=pending, now=now), forced=False)
        elif kind == "rows":
            self.pending = op[1]
        elif kind == "tick":
            self.now += op[1]
        elif kind == "took":
            self.took = op[1]
        elif kind == "background":
            self.background = op[1]
        elif kind == "end":
            self.end()
        else:
            self.refuse = op[1]

    def act(self, actions: list[SinkAction], *, forced: bool) -> None:
        if actions:
            assert self.spoke == set(UPSTREAMS), "no decision before every upstream spoke"
        for action in actions:
            if isinstance(action, Commit):
                self.commit(action, forced)
            else:
                self.report(action)

    def commit(self, commit: Commit, forced: bool) -> None:
        assert self.writes
        assert self.running is None, "one commit at a time"
        lwm = self.core.low_water_mark()
        assert commit.through == lwm, "rows are committed through the low water mark"
        assert OTHER not in commit.through
        if self.commits:  # the mark never moves back
            assert all(commit.through.get(p, -1) >= o for p, o in self.commits[-1].items())
        if not (forced or commit.due or self.pending >= COMMIT_ROWS):
            assert ((self.caught_up and self.now - self.last_started >= MIN_COMMIT_INTERVAL)
                    or self.now - self.last_commit >= COMMIT_INTERVAL), "the cadence"
        self.commits.append(commit.through)
        if self.background:
            self.running = (commit, self.now, self.pending)
            self.announced_meanwhile = False
            return
        self.now += self.took  # the commit began at the decision and took this long
        self.apply(commit, started=self.now - self.took, forced=forced)
        self.pending = 0

    def end(self) -> None:
        """The background commit ends: rows that arrived meanwhile wait, and what arrived
        meanwhile is decided on."""
        if self.running is None:
            return
        commit, started, pending = self.running
        self.running = None
        if self.pending == pending:  # none arrived meanwhile
            self.pending = 0
        self.apply(commit, started=started, forced=False)
        actions = self.core.resume(pending=self.pending, now=self.now,
                                   caught_up=self.caught_up)
        self.act(actions, forced=self.announced_meanwhile)

    def apply(self, commit: Commit, *, started: float, forced: bool) -> None:
        """The model writer commits ``commit`` (begun at ``started``) by now, or refuses."""
        if self.refuse:
            self.core.fenced(self.table)
            return
        self.table = {p: max(o, self.table.get(p, -1)) for p, o in commit.through.items()}
        self.last_started, self.last_commit = started, self.now
        done = self.core.committed(commit, self.table, self.now, took=self.now - started)
        self.act(list(done), forced=forced)

    def report(self, report: ReportRound) -> None:
        lwm = self.core.low_water_mark()
        progress = self.table if self.writes else lwm
        # A round is announced again and again (every upstream forwards its CLOCK, and the
        # master announces it too), and reported once.
        assert report.epoch >= JOINED
        assert report.epoch not in self.reported, f"round {report.epoch} reported twice"
        assert report.clock == self.announced[report.epoch]
        assert covers(progress, report.clock, lwm), "a round only once the table covers it"
        self.reported[report.epoch] = report.clock


@settings(max_examples=300, deadline=None)
@given(ops, st.booleans())
def test_random_interleavings_keep_the_rules_and_every_round_is_reported(
    steps: list[tuple[Any, ...]], writes: bool
) -> None:
    sim = Sim(writes)
    for op in steps:
        sim.step(op)
    # The stream catches up everywhere and the database accepts again: every round of
    # this run that was announced gets reported.
    sim.refuse = False
    sim.step(("background", False))
    sim.step(("end",))
    sim.step(("watermark", "a", {0: 40, 1: 40}, True))
    sim.step(("watermark", "b", {0: 40}, True))
    sim.step(("rows", 1))
    sim.step(("tick", COMMIT_INTERVAL))
    sim.step(("idle",))
    assert sim.reported == sim.announced
    assert sim.core.rounds == {}
