"""The budget for bad records (pure): the sliding window against a brute-force count, the
per-processor budget and its reason, the policy's declaration, placing failed tuples in a
batch, and the digest that aggregates quarantine warnings."""

from __future__ import annotations

import itertools
import logging
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Quarantine, Sum, Topology, per_key
from hailstorm.bad_records import (
    SAMPLED_ERRORS,
    BadRecordBudget,
    BadRecordWindow,
    QuarantineDigest,
    error_kind,
    positions_in_batch,
)
from hailstorm.console.view import History
from hailstorm.halt import TopologyHalt
from hailstorm.model import RecordHalt, messages, run_model
from hailstorm.quarantine import DeadLetterWriter
from hailstorm.status.document import budget_problem
from hailstorm.topology import TopologyError
from hailstorm.topology.errors import on_error_policy
from hailstorm.vocabulary import DeadLetter, Message

# --------------------------------------------------------------------------- the reference


def brute_force_trip(bad: list[bool], window: int, limit: int) -> tuple[int, int, int] | None:
    """The first record (1-based) whose last ``window`` records hold more than ``limit``
    bad ones, with that count and the number of records in its window."""
    for i in range(1, len(bad) + 1):
        if not bad[i - 1]:
            continue
        start = max(0, i - window)
        count = sum(bad[start:i])
        if count > limit:
            return i, count, i - start
    return None


def batches(draw: st.DrawFn, n: int) -> list[int]:
    """Cut points splitting ``n`` records into batches."""
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=8))) | {0, n})
    return cuts


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[bool], int, float, list[int]]:
    window = draw(st.integers(1, 40))
    max_bad = draw(st.sampled_from([0.0, 0.01, 0.1, 0.25, 0.5, 0.9, 1.0]))
    bad = draw(st.lists(st.booleans(), max_size=120))
    return bad, window, max_bad, batches(draw, len(bad))


@settings(max_examples=400, deadline=None)
@given(runs())
def test_the_window_trips_where_a_brute_force_count_does_whatever_the_batches(
        run: tuple[list[bool], int, float, list[int]]) -> None:
    bad, window, max_bad, cuts = run
    policy = Quarantine(max_bad=max_bad, window=window)
    assert policy.limit is not None
    expected = brute_force_trip(bad, window, policy.limit)
    counter = BadRecordWindow(policy, first=1)
    tripped = None
    for start, stop in itertools.pairwise(cuts):
        fill = counter.observe(stop, [i + 1 for i in range(start, stop) if bad[i]])
        if fill is not None:
            tripped = fill
            break
        # Within the budget, the window counts exactly its last records.
        assert counter.fill().bad == sum(bad[max(0, stop - window):stop])
        assert counter.fill().records == min(window, stop)
    if expected is None:
        assert tripped is None
    else:
        assert tripped is not None
        at, count, records = expected
        assert (tripped.bad, tripped.records, tripped.limit) == (count, records, policy.limit)
        assert counter.last == at


@given(st.lists(st.integers(0, 30), min_size=1, max_size=60), st.integers(1, 20))
def test_positions_count_once_and_may_start_anywhere(offsets: list[int], window: int) -> None:
    """A spout counts offsets: several failed tuples of one message are one bad record."""
    offsets = sorted(offsets)
    first = 1000
    policy = Quarantine(max_bad=1.0, window=window)  # never trips: only counting
    counter = BadRecordWindow(policy, first=first)
    assert counter.observe(first + offsets[-1], [first + o for o in offsets]) is None
    distinct = set(offsets)
    assert counter.fill().bad == sum(1 for o in distinct if o > offsets[-1] - window)
    assert counter.fill().records == min(window, offsets[-1] + 1)


def test_every_record_bad_trips_right_after_the_limit() -> None:
    policy = Quarantine()  # 1% of 10,000: 100 allowed
    counter = BadRecordWindow(policy, first=0)
    fill = counter.observe(10_000, range(10_001))
    assert fill is not None and (fill.bad, fill.records, fill.limit) == (101, 101, 100)
    assert fill.rate == 1.0 and fill.used == 1.01


def test_a_spread_rate_under_the_budget_never_trips() -> None:
    counter = BadRecordWindow(Quarantine(), first=0)
    for start in range(0, 1_000_000, 5_000):  # one bad record in every 101
        assert counter.observe(start + 4_999, range(start + 100, start + 5_000, 101)) is None
    assert 95 <= counter.fill().bad <= 100


# --------------------------------------------------------------------------- the budget


def failure(node: str, position: int, error: str = "KeyError: 'amount'",
            stage: str = "lift") -> tuple[str, int, str, str, tuple[tuple[str, int], int]]:
    return node, position, stage, error, (("events", 0), position)


def test_nodes_have_windows_of_their_own_and_the_reason_samples_errors() -> None:
    budget = BadRecordBudget(Quarantine(max_bad=0.1, window=50), "spout:events:events:0")
    budget.restart(0)
    # The spout's decoder fails on 5 in 50 (its limit), a bolt it pre-aggregates for on 4.
    assert budget.observe(49, [failure("events", p, "DecodeError: not JSON", "decode")
                               for p in range(0, 50, 10)]) is None
    assert budget.observe(99, [failure("counts", p) for p in (51, 52, 53, 54)]) is None
    errors = [f"ValueError: bad value {n}" for n in range(6)]
    reason = budget.observe(120, [failure("counts", 100 + n, e) for n, e in enumerate(errors)]
                            + [failure("counts", 106, "ValueError: after the halt")])
    assert reason is not None
    assert reason.startswith(
        "counts: 6 of the last 50 records at spout:events:events:0 failed (12.00%), more "
        "than on_error=Quarantine(max_bad=0.1, window=50) allows (5 of any 50); errors: "
        "lift KeyError: 'amount' (4 times, first at events:0:51); "
        "lift ValueError: bad value 0 (once, first at events:0:100); "
        "lift ValueError: bad value 1 (once, first at events:0:101); 4 more with other "
        "errors. Fix the function")  # 100..105: the 6th in 50 (51..54 left the window)
    assert SAMPLED_ERRORS == 3
    fill = budget.fullest()
    assert fill is not None and fill.bad == 6


def test_no_budget_counts_nothing() -> None:
    for policy in (None, Quarantine(max_bad=None)):
        budget = BadRecordBudget(policy, "bolt:b:0")
        assert budget.observe(10**6, [failure("b", p) for p in range(10**4)]) is None
        assert budget.fullest() is None


def test_a_restart_counts_from_scratch() -> None:
    budget = BadRecordBudget(Quarantine(max_bad=0.5, window=4), "bolt:b:0")
    assert budget.observe(2, [failure("b", 1), failure("b", 2)]) is None
    budget.restart()
    assert budget.windows == {} and budget.observe(2, [failure("b", 2)]) is None
    assert budget.observe(3, [failure("b", 3), failure("b", 4)]) is not None


def test_the_dead_letter_writer_halts_past_the_budget_and_tells_the_metrics() -> None:
    fills = []
    writer = DeadLetterWriter("localhost:1", 1.0, "quarantine", owner="t/bolt:b:0",
                              topology="t", budget=Quarantine(max_bad=0.5, window=4),
                              on_fill=fills.append)
    writer.start(1)
    writer.budget.begin(1)  # a bolt counts the tuples it receives from 1
    letter = DeadLetter("b", "t.dead-letter", Message("events", 0, 7, b"x"), "KeyError: 'k'",
                        "lift")
    writer.count(5, [(letter, 4)])
    assert fills[-1].bad == 1 and fills[-1].records == 4
    writer.count(6, [(letter, 6)])
    with pytest.raises(TopologyHalt, match=r"^\[halt\] b: 3 of the last 4 records at "
                                           r"bolt:b:0 failed \(75\.00%\), .* errors: lift "
                                           r"KeyError: 'k' \(3 times, first at events:0:7\)"):
        writer.count(9, [(letter, 9), (letter, 7)])  # any order within a batch


def test_the_dead_letter_writer_logs_one_line_per_kind_not_per_record(
        caplog: pytest.LogCaptureFixture) -> None:
    writer = DeadLetterWriter("localhost:1", 1.0, "quarantine", owner="t/bolt:b:0",
                              topology="t")
    with caplog.at_level(logging.WARNING, logger="hailstorm.quarantine"):
        for offset in range(1_000):
            writer.log_quarantined("b", "lift", f"KeyError: {offset}", (("events", 0), offset))
        writer.close()
    assert [r.getMessage() for r in caplog.records] == [
        "quarantined the record at events:0:0 (b lift): KeyError: 0",
        "quarantined 999 more records at b (lift, KeyError) in 0 s; the latest: the record "
        "at events:0:999 (b lift): KeyError: 999"]


# --------------------------------------------------------------------------- the declaration


def test_the_policy_as_declared() -> None:
    assert on_error_policy("quarantine", "t") == ("quarantine", Quarantine(0.01, 10_000))
    assert on_error_policy("fail", "t") == ("fail", None)
    custom = Quarantine(max_bad=0.05, window=1_000)
    assert on_error_policy(custom, "t") == ("quarantine", custom)
    topology = Topology("t", on_error=custom)
    assert (topology.on_error, topology.quarantine) == ("quarantine", custom)
    assert Topology("t").quarantine == Quarantine()
    assert Quarantine().limit == 100 and Quarantine(max_bad=None).limit is None
    assert Quarantine(max_bad=0.001, window=1000).limit == 1
    assert Quarantine(max_bad=0.07, window=100).limit == 7  # not 6 by rounding


@given(st.integers(0, 1000), st.integers(1, 100_000))
def test_the_limit_is_the_fraction_of_the_window(per_mille: int, window: int) -> None:
    assert Quarantine(max_bad=per_mille / 1000, window=window).limit == per_mille * window // 1000


@pytest.mark.parametrize("bad", [
    {"max_bad": -0.1}, {"max_bad": 1.5}, {"max_bad": "1%"}, {"max_bad": True},
    {"window": 0}, {"window": 10.5}, {"window": True}])
def test_a_wrong_budget_is_refused_with_a_fix(bad: dict[str, object]) -> None:
    with pytest.raises(TopologyError, match=r"Fix: pass e\.g\."):
        Quarantine(**bad)  # type: ignore[arg-type]


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(TopologyError, match=r"on_error 'skip' is not one of quarantine, fail "
                                            r"or a Quarantine\(\.\.\.\)"):
        Topology("t", on_error="skip")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- positions


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5)), max_size=40), st.data())
def test_failed_tuples_are_placed_among_their_origins_tuples(
        origins: list[tuple[int, int]], data: st.DataObject) -> None:
    failed_indices = sorted(data.draw(st.sets(st.integers(0, max(0, len(origins) - 1)),
                                              max_size=len(origins))) if origins else [])
    failed = [origins[i] for i in failed_indices]
    partitions = [p for p, _ in origins]
    offsets = [o for _, o in origins]
    placed = positions_in_batch(failed, partitions, offsets)
    assert [origins[i] for i in placed] == failed  # each at a tuple of its own origin
    assert len(set(placed)) == len(placed)  # never two at one tuple
    if len(set(origins)) == len(origins):  # unique origins: exactly where they were
        assert placed == failed_indices


def test_an_origin_the_batch_does_not_hold_goes_last() -> None:
    assert positions_in_batch([(0, 9)], [0, 0], [1, 2]) == [1]
    assert positions_in_batch([(0, 9)], [], []) == [-1]


# --------------------------------------------------------------------------- the digest


@st.composite
def quarantined(draw: st.DrawFn) -> list[tuple[float, str, str]]:
    gaps = draw(st.lists(st.floats(0, 25, allow_nan=False), min_size=1, max_size=80))
    times = list(itertools.accumulate(gaps))
    kinds = st.sampled_from([("a", "KeyError: 'x'"), ("a", "KeyError: 'y'"),
                             ("a", "ValueError: v"), ("b", "KeyError: 'x'")])
    return [(t, *draw(kinds)) for t in times]


@given(quarantined())
def test_the_digest_logs_each_kind_at_most_once_an_interval_and_counts_everything(
        events: list[tuple[float, str, str]]) -> None:
    digest = QuarantineDigest(interval=10.0)
    logged: list[tuple[float, str]] = []
    for now, node, error in events:
        logged += [(now, line) for line in digest.add(node, "lift", error, (("t", 0), 1), now)]
    end = events[-1][0] + 100
    logged += [(end, line) for line in digest.due(end)]
    accounted = 0
    last: dict[tuple[str, str], float] = {}
    for now, line in logged:
        if line.startswith("quarantined the record"):
            accounted += 1
            node = line.split("(")[1].split()[0]
            kind = line.split("): ")[1].split(":")[0]
        else:
            accounted += int(line.split()[1].replace(",", ""))
            node = line.split(" at ")[1].split()[0]
            kind = line.split(", ")[1].split(")")[0]
        key = (node, kind)
        if key in last:
            assert now - last[key] >= 10.0, (key, now, last[key])
        last[key] = now
    assert accounted == len(events)


def test_error_kind() -> None:
    assert error_kind("KeyError: 'amount'") == "KeyError"
    assert error_kind("no JSON here") == "no JSON here"
    assert error_kind("bad value: 3") == "bad value: 3"


# --------------------------------------------------------------------------- status


def test_status_names_a_processor_past_half_its_budget() -> None:
    row = {"id": "bolt:totals:0", "bad_records": {"bad": 51, "records": 10_000, "limit": 100}}
    assert budget_problem(row) == (
        "bolt:totals:0: 51 of its last 10,000 records were bad (0.51%), 51% of its budget "
        "for bad records (100 per window; one more than that halts the topology): see the "
        "dead-letter topic")
    assert budget_problem({"id": "x", "bad_records": {"bad": 50, "records": 9, "limit": 100}}) \
        is None
    assert budget_problem({"id": "x", "bad_records": None}) is None


# --------------------------------------------------------------------------- the model


def amounts_topology(on_error: object, *, preaggregate: bool = False) -> Topology:
    """Per-user totals of JSON events whose lift raises on an event without an amount."""
    topology = Topology("m", on_error=on_error)  # type: ignore[arg-type]
    events = topology.spout("events", topic="t", decoder="json")
    topology.bolt("totals", inputs=[events], key=lambda e: e["user"], state=per_key(Sum()),
                  lift=lambda e: e["amount"], preaggregate=preaggregate)
    return topology


def test_the_model_halts_a_topology_whose_every_record_fails_at_its_budget() -> None:
    events = [{"user": f"u{i}"} for i in range(500)]
    with pytest.raises(RecordHalt) as halted:
        run_model(amounts_topology("quarantine"), messages("t", events))
    assert str(halted.value) == (
        "totals: 101 of the last 101 records at bolt:totals:0 failed (100.00%), more than "
        "on_error=Quarantine(max_bad=0.01, window=10000) allows (100 of any 10,000); errors: "
        "lift KeyError: 'amount' (101 times, first at t:0:0). Fix the function or the "
        "records (see the dead-letter topic), or declare a larger budget, and start the "
        "topology again")
    # Without a limit every one is quarantined.
    result = run_model(amounts_topology(Quarantine(max_bad=None)), messages("t", events))
    assert len(result.dead_letters) == 500


def test_a_preaggregated_bolt_is_counted_at_the_spout_that_combines_for_it() -> None:
    events = [{"user": "u"} for _ in range(20)]
    with pytest.raises(RecordHalt, match=r"^totals: 3 of the last 3 records at "
                                         r"spout:events:t:1 failed"):
        run_model(amounts_topology(Quarantine(max_bad=0.2, window=10), preaggregate=True),
                  messages("t", events, partition=1))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["ok", "no-json", "no-amount"]), max_size=60),
                min_size=1, max_size=3),
       st.sampled_from([0.0, 0.1, 0.2, 0.5]), st.integers(1, 12), st.randoms())
def test_the_model_halts_where_each_window_goes_over_its_budget(
        partitions: list[list[str]], max_bad: float, window: int, rng: random.Random) -> None:
    """Spouts count their partition's offsets (decode failures); the bolt, fed from every
    partition, the tuples it receives in the model's order (lift failures)."""
    policy = Quarantine(max_bad=max_bad, window=window)
    assert policy.limit is not None
    queues = [messages("t", [b"{" if k == "no-json" else {"user": "u", **(
                  {"amount": 1} if k == "ok" else {})} for k in kinds], partition=p)
              for p, kinds in enumerate(partitions)]
    order = []  # the partitions interleaved at random, each in its order
    while any(queues):
        order.append(rng.choice([q for q in queues if q]).pop(0))
    kinds = {(m.partition, m.offset): partitions[m.partition][m.offset] for m in order}
    # Where a brute force over each window would halt, in the order the model goes.
    spout_seen: dict[int, list[bool]] = {}
    bolt_seen: list[bool] = []
    expected = None
    for m in order:
        kind = kinds[(m.partition, m.offset)]
        spout_seen.setdefault(m.partition, []).append(kind == "no-json")
        trip = brute_force_trip(spout_seen[m.partition], window, policy.limit)
        if trip is not None:
            expected = (f"events: {trip[1]} of the last {trip[2]} records at "
                        f"spout:events:t:{m.partition} failed")
            break
        if kind == "no-json":
            continue
        bolt_seen.append(kind == "no-amount")
        trip = brute_force_trip(bolt_seen, window, policy.limit)
        if trip is not None:
            expected = f"totals: {trip[1]} of the last {trip[2]} records at bolt:totals:0 failed"
            break
    if expected is None:
        run_model(amounts_topology(policy), order)
    else:
        with pytest.raises(RecordHalt, match=expected):
            run_model(amounts_topology(policy), order)


def test_the_console_marks_an_instance_past_half_its_budget() -> None:
    window = {"bad": 420, "records": 1_000, "limit": 500}
    history = History()
    history.add({"time": 1.0, "master": {"state": "Flowing", "epoch": 3}, "processors": [
        {"id": "spout:events:t:0", "role": "spout", "registered": True, "quarantined": 0,
         "bad_records": None},
        {"id": "bolt:totals:0", "role": "bolt", "registered": True, "quarantined": 4_200,
         "bad_records": window}]})
    marked = history.view()["dead_letters"]["over_half_budget"]
    assert marked == {"bolt:totals:0": budget_problem({"id": "bolt:totals:0",
                                                      "bad_records": window})}
    assert "84% of its budget" in marked["bolt:totals:0"]
