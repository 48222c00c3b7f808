"""Laws, accuracy and Avro snapshots of the monoid library."""

from __future__ import annotations

import copy
import doctest
import hashlib
import io
import itertools
import math
import pickle
import random
from collections import Counter
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hailstorm.monoids as monoids_module
import hailstorm.monoids.windows as windows_module
import hailstorm.testing as testing_module
from hailstorm.monoids import (
    Count,
    CountMinSketch,
    HyperLogLog,
    KeyedMap,
    Last,
    Max,
    Mean,
    Min,
    Monoid,
    Record,
    SetUnion,
    SlidingWindow,
    Sum,
    TopK,
    TumblingWindow,
    per_key,
)
from hailstorm.monoids.avro import sorted_keys
from hailstorm.testing import approx_equal, avro_round_trip, check_monoid_laws, states_of

EXAMPLES = 40

nat = st.integers(0, 10**6)
ints = st.integers(-(10**6), 10**6)
integral_floats = st.integers(-(2**40), 2**40).map(float)
keys = st.sampled_from(["a", "b", "c", "", "é", "k" * 20])
items = st.text(max_size=3)
times = st.integers(0, 400)
finite_floats = st.floats(allow_nan=False)


class AnyTrue(Monoid[bool]):
    """A user-defined monoid (as in the module docstring)."""

    name = "AnyTrue"
    immutable_state = True

    def empty(self) -> bool:
        return False

    def combine(self, a: bool, b: bool) -> bool:
        return a or b

    def avro_schema(self) -> Any:
        return "boolean"

    def to_avro(self, state: bool) -> Any:
        return state

    def from_avro(self, data: Any) -> bool:
        return bool(data)


def mean_states() -> st.SearchStrategy[Any]:
    return states_of(Mean(), st.integers(-1000, 1000).map(Mean.lift))


def topk_states(m: TopK, item: st.SearchStrategy[Any] = keys) -> st.SearchStrategy[Any]:
    return st.dictionaries(item, st.integers(-50, 50), max_size=m.k)


def hll_states(m: HyperLogLog) -> st.SearchStrategy[Any]:
    return states_of(m, items.map(m.lift))


def window_states(w: Any, inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """States of ``w`` built from values lifted with their event time and without it
    (:meth:`~hailstorm.monoids.Window.lift_unexpiring`, a bolt routing late data)."""
    return states_of(w, st.tuples(times, inner, st.booleans()).map(
        lambda tvu: w.lift_unexpiring(*tvu[:2]) if tvu[2] else w.lift(*tvu[:2])))


def _cases() -> list[tuple[Monoid[Any], st.SearchStrategy[Any]]]:
    cms = CountMinSketch(width=16, depth=3)
    hll4 = HyperLogLog(4)
    hll12 = HyperLogLog(12)
    top3 = TopK(3)
    top2 = TopK(2, score_type="long")
    top_tuple = TopK(2, item_type=("string", "long"))
    point = {
        "type": "record",
        "name": "test.Point",
        "fields": [{"name": "x", "type": "long"}, {"name": "y", "type": "long"}],
    }
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=3),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
        max_leaves=6,
    )
    orders = st.tuples(st.integers(0, 3), st.integers(0, 3))
    json_keys = st.one_of(st.integers(-5, 5), keys, st.tuples(keys, st.integers(0, 3)))
    tumbling_topk = TumblingWindow(60, top2)
    sliding_hll = SlidingWindow(60, 20, hll4)
    tumbling_sum = TumblingWindow(10, Sum())
    tumbling_mean = TumblingWindow(60, Mean())
    tumbling_now = TumblingWindow(10, Count(), retention=0)
    tumbling_float = TumblingWindow(2.5, Count(), time_type="double")
    sliding_keyed = SlidingWindow(30, 10, per_key(Count()))
    sliding_sets = SlidingWindow(20, 5, SetUnion(), retention=40)
    return [
        (Count(), nat),
        (Sum(), ints),
        (Sum("double"), integral_floats),
        (Min(), st.none() | ints),
        (Max(), st.none() | ints),
        (Min("double"), st.none() | finite_floats),
        (Max("string"), st.none() | st.text(max_size=3)),
        (Min(("long", "string")), st.none() | st.tuples(ints, st.text(max_size=2))),
        (Mean(), mean_states()),
        (Last(), st.none() | st.tuples(orders, st.text(max_size=2))),
        (Last("double"), st.none() | st.tuples(orders, finite_floats)),
        (Last("json", order_type="long"), st.none() | st.tuples(st.integers(0, 3), json_values)),
        (  # keys not in sorted order, as records are written: a snapshot sorts them
            Last("json", order_type="long"),
            st.none() | st.tuples(st.integers(0, 1), st.tuples(
                st.sampled_from(["u1", "u2"]), st.sampled_from(["pro", "team"]),
            ).map(lambda t: {"user": t[0], "plan": t[1]})),
        ),
        (
            Last(point, order_type=("long", "string")),
            st.none()
            | st.tuples(
                st.tuples(st.integers(0, 2), st.sampled_from(["p", "q"])),
                st.fixed_dictionaries({"x": st.integers(0, 2), "y": st.integers(0, 2)}),
            ),
        ),
        (SetUnion(), st.sets(items)),
        (SetUnion("long"), st.sets(ints)),
        (SetUnion(("string", "long")), st.sets(st.tuples(keys, st.integers(0, 3)))),
        (top3, topk_states(top3)),
        (top2, topk_states(top2)),
        (top_tuple, topk_states(top_tuple, st.tuples(keys, st.integers(0, 2)))),
        (hll4, hll_states(hll4)),
        (hll12, hll_states(hll12)),
        (cms, states_of(cms, st.tuples(items, st.integers(-3, 5)).map(lambda t: cms.lift(*t)))),
        (per_key(Count()), st.dictionaries(keys, nat)),
        (per_key(Sum(), key_type="long"), st.dictionaries(ints, ints)),
        (per_key(Count(), key_type="double"), st.dictionaries(finite_floats, nat)),
        (
            per_key(Count(), key_type=("string", "long")),
            st.dictionaries(st.tuples(keys, ints), nat),
        ),
        (per_key(Count(), key_type="json"), st.dictionaries(json_keys, nat)),
        (per_key(Mean()), st.dictionaries(keys, mean_states())),
        (per_key(per_key(Count())), st.dictionaries(keys, st.dictionaries(keys, nat))),
        (per_key(SetUnion()), st.dictionaries(keys, st.sets(items))),
        (per_key(top2), st.dictionaries(keys, topk_states(top2))),
        (per_key(hll4), st.dictionaries(keys, hll_states(hll4))),
        (per_key(AnyTrue()), st.dictionaries(keys, st.booleans())),
        (
            tumbling_topk,
            window_states(tumbling_topk, st.tuples(keys, ints).map(lambda t: top2.lift(*t))),
        ),
        (sliding_hll, window_states(sliding_hll, items.map(hll4.lift))),
        (tumbling_mean, window_states(tumbling_mean, st.integers(0, 9).map(Mean.lift))),
        (tumbling_now, window_states(tumbling_now, st.just(Count.one))),
        (
            tumbling_float,
            states_of(
                tumbling_float,
                st.integers(0, 200).map(lambda t: tumbling_float.lift(t / 2, 1)),
            ),
        ),
        (
            sliding_keyed,
            window_states(sliding_keyed, keys.map(lambda k: KeyedMap.lift(k, Count.one))),
        ),
        (sliding_sets, window_states(sliding_sets, items.map(SetUnion.lift))),
        (
            per_key(tumbling_sum),
            st.dictionaries(keys, window_states(tumbling_sum, st.integers(-5, 5))),
        ),
        (
            page_stats,
            st.fixed_dictionaries(
                {"views": nat, "users": hll_states(hll4), "latency": mean_states()}
            ),
        ),
        (user_figures, st.fixed_dictionaries({"spent": ints, "events": nat})),
        (per_key(user_figures),
         st.dictionaries(keys, st.fixed_dictionaries({"spent": ints, "events": nat}))),
        (
            per_key(TumblingWindow(300, page_stats)),
            st.dictionaries(
                keys,
                window_states(
                    TumblingWindow(300, page_stats),
                    st.tuples(items, st.integers(0, 50)).map(
                        lambda t: page_stats.lift(
                            views=1, users=hll4.lift(t[0]), latency=Mean.lift(t[1])
                        )
                    ),
                ),
            ),
        ),
    ]


page_stats = Record({"views": Count(), "users": HyperLogLog(4), "latency": Mean()})
user_figures = Record({"spent": Sum(), "events": Count()})
"""Every field additive and immutable: the fast paths of Record's absorb and copy."""

CASES = _cases()


@pytest.mark.parametrize(("monoid", "values"), CASES, ids=[m.describe() for m, _ in CASES])
def test_laws(monoid: Monoid[Any], values: st.SearchStrategy[Any]) -> None:
    check_monoid_laws(monoid, values, max_examples=EXAMPLES)


def test_laws_with_approximate_floats() -> None:
    # Arbitrary float sums are only approximately associative: approx_equal accepts that.
    check_monoid_laws(
        per_key(Mean()),
        st.dictionaries(keys, states_of(Mean(), st.floats(-1e6, 1e6).map(Mean.lift))),
        max_examples=EXAMPLES,
        equal=approx_equal(rel_tol=1e-9, abs_tol=1e-6),
    )


class Product(Sum):
    """A monoid of its own built on Sum: it multiplies."""

    name = "Product"

    def empty(self) -> Any:
        return 1

    def combine(self, a: Any, b: Any) -> Any:
        return a * b

    def absorb(self, acc: Any, value: Any) -> Any:
        return acc * value


class MaxRecord(Record):
    """A Record merging its own way: field by field maxima."""

    def combine(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {name: max(a[name], b[name]) for name in self.fields}

    def absorb(self, acc: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
        return self.combine(acc, value)


def test_a_subclass_merging_its_own_way_folds_by_its_absorb() -> None:
    """combine_all's batch folds are their class's own: a subclass overriding combine or
    absorb is folded by its absorb, not summed as a Sum or field by field as a Record."""
    assert Product().combine_all([2, 3, 4]) == 24
    assert Product().combine_all(iter([5])) == 5
    check_monoid_laws(Product(), st.integers(1, 5), max_examples=EXAMPLES)
    record = MaxRecord({"a": Count(), "b": Count()})
    assert record.combine_all([{"a": 1, "b": 5}, {"a": 3, "b": 2}]) == {"a": 3, "b": 5}


def test_combine_all_adds_onto_the_first_state_as_absorbing_into_its_copy_does() -> None:
    """Folding keeps what absorbing one by one into a copy of the first state gives: ints
    of a double sum stay exact ints, -0.0 stays -0.0, a Record keeps its state's own keys."""
    total = Sum("double").combine_all([2**53, 1, 1])
    assert total == 2**53 + 2 and type(total) is int
    assert math.copysign(1, Sum("double").combine_all([-0.0, -0.0])) == -1
    assert Mean().combine_all([(2**53, 1), (1, 1), (1, 1)]) == (2**53 + 2, 3)
    assert Mean().combine_all([]) == Mean().empty()
    record = Record({"n": Count(), "total": Sum()})
    assert record.combine_all([{"total": 5, "n": 1, "x": 0}, {"n": 1, "total": 6}]) == {
        "total": 11, "n": 2, "x": 0}
    assert list(record.combine_all([{"total": 5, "n": 1}, {"n": 1, "total": 6}])) == [
        "total", "n"]


class PositiveMean(Mean):
    """A Mean checking its own way: counts above zero."""

    def check(self, value: Any) -> None:
        super().check(value)
        if value[1] <= 0:
            raise ValueError("counts above zero")


def test_a_batch_check_asks_a_subclass_checking_its_own_way() -> None:
    with pytest.raises(ValueError, match="above zero"):
        PositiveMean().check_many([(1.0, 1), (1.0, -1)])
    Mean().check_many([(1.0, 1), (1.0, -1)])
    with pytest.raises(TypeError, match="Mean's count"):
        Mean().check_many([(1.0, 1), (1.0, 1.5)])


# --------------------------------------------------------------------------- broken monoids


class Subtraction(Sum):
    name = "Subtraction"

    def combine(self, a: Any, b: Any) -> Any:
        return a - b

    def absorb(self, acc: Any, value: Any) -> Any:
        return acc - value


class FirstWins(Last):
    name = "FirstWins"

    def combine(self, a: Any, b: Any) -> Any:
        return b if a is None else a


class MutatingUnion(SetUnion):
    name = "MutatingUnion"

    def combine(self, a: set[Any], b: set[Any]) -> set[Any]:
        a |= b
        return a


class SharingMap(KeyedMap):
    """Forgets to copy inner states: the result aliases a's sets."""

    def copy(self, state: dict[Any, Any]) -> dict[Any, Any]:
        return dict(state)


class LossyAvro(Sum):
    name = "LossyAvro"

    def to_avro(self, state: Any) -> Any:
        return abs(state)


@pytest.mark.parametrize(
    ("monoid", "values", "law"),
    [
        (Subtraction(), ints, "identity|associativity|commutativity"),
        (FirstWins(), st.none() | st.tuples(st.tuples(nat, nat), items), "commutativity"),
        (MutatingUnion(), st.sets(items), "immutability of combine inputs|independence"),
        (SharingMap(SetUnion()), st.dictionaries(keys, st.sets(items)), "mutat|changed"),
        (LossyAvro(), ints, "Avro round trip"),
    ],
    ids=["subtraction", "first-wins", "mutating", "sharing", "lossy-avro"],
)
def test_broken_monoids_are_caught(
    monoid: Monoid[Any], values: st.SearchStrategy[Any], law: str
) -> None:
    with pytest.raises(AssertionError, match=law) as info:
        check_monoid_laws(monoid, values, max_examples=200)
    assert monoid.describe() in str(info.value)


def test_exceptions_become_assertion_errors() -> None:
    class Exploding(Count):
        name = "Exploding"

        def combine(self, a: int, b: int) -> int:
            if a and b:
                raise RuntimeError("boom")
            return a + b

        def absorb(self, acc: int, value: int) -> int:
            return self.combine(acc, value)

    with pytest.raises(AssertionError, match=r"Exploding: .* raised RuntimeError\('boom'\)"):
        check_monoid_laws(Exploding(), nat, max_examples=50)


# --------------------------------------------------------------------------- accuracy


def test_hyperloglog_accuracy_100k() -> None:
    hll = HyperLogLog(12)
    state = hll.empty()
    for i in range(100_000):
        hll.add(state, f"user-{i}")
    assert abs(hll.estimate(state) - 100_000) / 100_000 < 0.03
    # Duplicates do not count.
    for i in range(0, 100_000, 7):
        hll.add(state, f"user-{i}")
    assert abs(hll.estimate(state) - 100_000) / 100_000 < 0.03


def test_hyperloglog_small_range_and_paths_agree() -> None:
    hll = HyperLogLog(12)
    names = [f"x{i}" for i in range(300)]
    lifted = hll.combine_all(hll.lift(n) for n in names)
    added = hll.empty()
    for n in names:
        hll.add(added, n)
    assert lifted == added
    assert abs(hll.estimate(lifted) - 300) <= 6
    halves = hll.combine(
        hll.combine_all(hll.lift(n) for n in names[::2]),
        hll.combine_all(hll.lift(n) for n in names[1::2]),
    )
    assert halves == lifted
    assert hll.estimate(hll.empty()) == 0.0


@settings(max_examples=200, deadline=None)
@given(registers=st.lists(st.integers(0, 54), min_size=16, max_size=16).map(bytearray)
       | st.binary(min_size=1024, max_size=1024).map(lambda b: bytearray(x % 55 for x in b)))
def test_hyperloglog_estimate_is_the_formula_over_every_register(registers: bytearray) -> None:
    """``estimate`` sums ``2**-r`` per register value present, not per register: the same
    float as the textbook formula, also for the linear-counting range."""
    hll = HyperLogLog(4 if len(registers) == 16 else 10)
    m = hll.m
    raw = hll._alpha * m * m / math.fsum(2.0**-r for r in registers)
    zeros = registers.count(0)
    expected = m * math.log(m / zeros) if raw <= 2.5 * m and zeros else raw
    assert hll.estimate(registers) == expected


def test_a_lifted_item_is_its_one_register_and_grows_in_place_when_absorbed_into() -> None:
    hll = HyperLogLog(6)
    a, b = hll.lift("a"), hll.lift("b")
    registers_of = hll.combine(a, b)
    for copied in (pickle.loads(pickle.dumps(a, protocol=5)), copy.deepcopy(a), copy.copy(a)):
        assert copied == a and hll.absorb(hll.absorb(hll.empty(), copied), b) == registers_of
    grown = hll.lift("a")
    assert hll.absorb(grown, b) is grown  # an accumulator that was a lifted item: in place
    added = hll.lift("a")
    assert hll.add(added, "b") is added
    for state in (grown, added):
        assert state == registers_of
        assert hll.absorb(hll.empty(), state) == registers_of  # absorbed whole, not as "a"
        copied = pickle.loads(pickle.dumps(state, protocol=5))
        assert copied == registers_of and hll.absorb(hll.empty(), copied) == registers_of


def model_registers(precision: int, items: list[str]) -> dict[int, int]:
    """HyperLogLog's registers written out from the paper: the first ``precision`` bits of
    the item's 64-bit BLAKE2b (big-endian) pick the register, the rest's leading zeros + 1
    are the rank; a register keeps the highest rank."""
    registers: dict[int, int] = {}
    rest_bits = 64 - precision
    for item in items:
        h = int.from_bytes(hashlib.blake2b(item.encode(), digest_size=8).digest(), "big")
        index, rest = h >> rest_bits, h & ((1 << rest_bits) - 1)
        rank = rest_bits - rest.bit_length() + 1
        registers[index] = max(registers.get(index, 0), rank)
    return registers


def registers_in(precision: int, state: bytearray) -> dict[int, int]:
    """The set registers of a state of either form, read as the docstring specifies."""
    if len(state) == 1 << precision:
        return {index: rank for index, rank in enumerate(state) if rank}
    assert len(state) % 4 == 0
    entries = [int.from_bytes(state[at:at + 4], "little") for at in range(0, len(state), 4)]
    assert entries == sorted(entries)
    return {entry >> 8: entry & 0xFF for entry in entries}


hll_items = st.lists(st.text(max_size=3), max_size=80)


@pytest.mark.parametrize("big_endian", [False, True])
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(precision=st.sampled_from([4, 5, 6, 10, 12]), items=hll_items, cut=st.integers(0, 80))
def test_hyperloglog_states_hold_the_registers_of_a_model_in_the_form_their_count_says(
        precision: int, items: list[str], cut: int, big_endian: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Lifted, added, absorbed or combined in halves, sparse or dense: a state holds the
    model's registers, sparse exactly while at most m // 32 are set, and estimates, Avro
    (also from the dense registers every earlier snapshot held) and pickle agree."""
    import hailstorm.monoids.sketches as sketches

    monkeypatch.setattr(sketches, "_LITTLE_ENDIAN", not big_endian)  # both ways of reading
    hll = HyperLogLog(precision)
    m = hll.m
    expected = model_registers(precision, items)
    lifted = hll.empty()
    for item in items:
        lifted = hll.absorb(lifted, hll.lift(item))
    added = hll.empty()
    for item in items:
        added = hll.add(added, item)
    halves = hll.combine(hll.combine_all(map(hll.lift, items[:cut])),
                         hll.combine_all(map(hll.lift, items[cut:])))
    into_half = hll.absorb(hll.combine_all(map(hll.lift, items[cut:])),
                           hll.combine_all(map(hll.lift, items[:cut])))
    dense = bytearray(m)
    for index, rank in expected.items():
        dense[index] = rank
    for state in (lifted, added, halves, into_half):
        assert registers_in(precision, state) == expected
        assert (len(state) == m) == (len(expected) > m // 32)
        assert state == lifted
        assert hll.estimate(state) == hll.estimate(bytearray(dense))
        assert hll.from_avro(hll.to_avro(state)) == state
        assert hll.from_avro({"precision": precision, "registers": bytes(dense)}) == state
        assert pickle.loads(pickle.dumps(state, protocol=5)) == state
        assert hll.absorb(bytearray(dense), state) == dense  # into registers made by hand
        assert registers_in(precision, hll.absorb(hll.copy(state), dense)) == expected


@pytest.mark.parametrize("registers", [
    b"\x01", b"\x01\x00\x00\x00" * 33,  # not whole entries; more than m // 32 of them
    b"\x01\x02\x00\x00\x01\x01\x00\x00",  # out of order
    b"\x01\x01\x00\x00\x02\x01\x00\x00",  # a register twice
    b"\x00\x01\x00\x00", b"\x38\x01\x00\x00",  # ranks 0 and 56 (at most 64 - 10 + 1)
    b"\x01\x00\x04\x00",  # register 1024 of 1024
])
def test_hyperloglog_refuses_malformed_sparse_registers(registers: bytes) -> None:
    with pytest.raises(ValueError, match="HyperLogLog"):
        HyperLogLog(10).from_avro({"precision": 10, "registers": registers})
    fine = bytes(HyperLogLog(10).lift("a"))  # among well-formed ones, read a column at once
    with pytest.raises(ValueError, match="HyperLogLog"):
        HyperLogLog(10).from_avro_column(
            {"precision": [10, 10, 10], "registers": [fine, registers, fine]}, 3)


@settings(max_examples=300, deadline=None)
@given(precision=st.sampled_from([4, 6, 10]),
       items=st.lists(hll_items, max_size=6),
       corrupt=st.none() | st.tuples(st.integers(0, 5), st.integers(0, 200), st.integers(0, 255)))
def test_a_column_of_hyperloglog_registers_reads_as_each_register_does(
        precision: int, items: list[list[str]], corrupt: tuple[int, int, int] | None) -> None:
    """Sparse states of a column are checked all at once: they must be refused exactly when
    one of them is, and read as each is otherwise."""
    m = HyperLogLog(precision)
    registers = [bytes(m.combine_all(m.lift(i) for i in group)) for group in items]
    if corrupt is not None and registers:
        which, at, byte = corrupt
        target = bytearray(registers[which % len(registers)])
        if target:
            target[at % len(target)] = byte
        registers[which % len(registers)] = bytes(target)
    column = {"precision": [precision] * len(registers), "registers": registers}
    try:
        expected = [m.from_avro({"precision": precision, "registers": r}) for r in registers]
    except ValueError:
        with pytest.raises(ValueError):
            m.from_avro_column(column, len(registers))
        return
    assert m.from_avro_column(column, len(registers)) == expected


def test_hyperloglog_refuses_dense_registers_it_would_keep_sparse_out_of_range() -> None:
    """A dense value of a few registers becomes sparse on loading: it is checked as one."""
    dense = bytearray(1024)
    dense[3] = 200  # no 64-bit hash has such a rank
    with pytest.raises(ValueError, match="out of range"):
        HyperLogLog(10).from_avro({"precision": 10, "registers": bytes(dense)})


registers_of_10 = st.binary(min_size=1024, max_size=1024).map(bytearray)


@settings(max_examples=300, deadline=None)
@given(acc=registers_of_10, value=registers_of_10, density=st.integers(0, 1024))
def test_hyperloglog_absorb_is_the_register_wise_max(acc: bytearray, value: bytearray,
                                                     density: int) -> None:
    """Sparse or dense, below 128 (every rank a hash gives) or not: absorb is max."""
    hll = HyperLogLog(10)
    value[density:] = bytes(1024 - density)  # from a few registers set to all of them
    expected = bytearray(map(max, acc, value))
    assert hll.absorb(bytearray(acc), value) == expected
    low = bytearray(r % 62 for r in acc)
    assert hll.absorb(low, bytearray(r % 62 for r in value)) == bytearray(
        map(max, (r % 62 for r in acc), (r % 62 for r in value)))


def test_hyperloglog_estimates_follow_a_state_changed_in_place() -> None:
    hll = HyperLogLog(6)
    state = hll.empty()
    seen = []
    for i in range(300):
        hll.add(state, f"u{i}")
        seen.append(hll.estimate(state))
        assert seen[-1] == hll.estimate(bytearray(state)) == hll.estimate(state)
    assert len(set(seen)) > 30


event_times = st.lists(st.integers(-2**64, 2**64) | st.floats(allow_nan=True) | st.booleans()
                       | st.integers(0, 10**6) | st.none(), max_size=6)


@settings(max_examples=300, deadline=None)
@given(times=event_times, time_type=st.sampled_from(["long", "double"]))
def test_a_batch_of_event_times_is_refused_exactly_when_one_of_them_is(
        times: list[Any], time_type: str) -> None:
    window = TumblingWindow(10, Count(), time_type=time_type)
    refused = []
    for t in times:
        try:
            window.check_time(t)
        except (TypeError, ValueError) as exc:
            refused.append(type(exc))
    try:
        window.check_times(times)
    except (TypeError, ValueError) as exc:
        assert refused and type(exc) is refused[0]  # the first refused, named
    else:
        assert not refused


def test_stable_hash_is_not_pythons_salted_hash() -> None:
    # Register positions are fixed across processes: pin one.
    hll = HyperLogLog(12)
    assert hll.lift("hailstorm") == hll.lift("hailstorm")
    assert monoids_module.stable_hash("hailstorm").hex() == "7181827ddc1c55af"


@given(st.text(max_size=5) | st.binary(max_size=5) | st.integers() | st.tuples(st.integers()),
       st.sampled_from([8, 16, 4]))
def test_stable_hash_is_blake2b_of_the_item_at_every_digest_size(item: Any, size: int) -> None:
    """Copied hashers (sizes 8 and 16) hash as a new one does (and as any other size)."""
    digest = monoids_module.stable_hash(item, size)
    assert len(digest) == size
    assert digest == monoids_module.stable_hash(copy.deepcopy(item), size)
    data = (item.encode() if isinstance(item, str) else bytes(item) if isinstance(item, bytes)
            else b"\x00" + type(item).__name__.encode() + b"\x00" + repr(item).encode())
    assert digest == hashlib.blake2b(data, digest_size=size).digest()


def test_count_min_sketch_never_underestimates() -> None:
    rng = random.Random(7)
    cms = CountMinSketch(width=256, depth=4)
    truth: Counter[str] = Counter()
    state = cms.empty()
    for _ in range(20_000):
        item = f"i{int(rng.paretovariate(1.2))}"
        truth[item] += 1
        cms.add(state, item)
    total = sum(truth.values())
    for item, n in truth.items():
        est = cms.estimate(state, item)
        assert est >= n
        assert est - n <= math.e / 256 * total * 3  # loose bound, deterministic here
    for row in range(cms.depth):
        assert sum(state.get(row * 256 + c, 0) for c in range(256)) == total
    assert cms.estimate(state, "never-seen") >= 0
    assert cms.combine(state, cms.lift("i1", -truth["i1"])) != state


def test_topk_exact_on_running_totals() -> None:
    rng = random.Random(3)
    topk = TopK(5)
    totals: Counter[str] = Counter()
    lifted = []
    for _ in range(3000):
        item = f"w{min(int(rng.expovariate(0.15)), 60)}"
        totals[item] += 1
        lifted.append(topk.lift(item, totals[item]))
    expected = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    rng.shuffle(lifted)  # any order: the monoid is commutative
    chunks = [topk.combine_all(lifted[i : i + 97]) for i in range(0, len(lifted), 97)]
    rng.shuffle(chunks)
    state = topk.combine_all(chunks)
    assert TopK.top(state) == expected
    assert topk.combine_all(lifted) == state


@given(st.integers(1, 4), st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(-3, 3)),
                                   max_size=40))
def test_topk_absorbing_items_one_at_a_time_keeps_the_best_of_each_items_highest(
        k: int, scored: list[tuple[str, int]]) -> None:
    """The model: each item's highest score, the k best of those (score down, item up)."""
    topk = TopK(k)
    state = topk.empty()
    highest: dict[str, int] = {}
    for item, score in scored:
        state = topk.absorb(state, TopK.lift(item, score))
        highest[item] = max(score, highest.get(item, score))
        best = sorted(highest.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        assert TopK.top(state) == best


def test_topk_ties_break_on_item() -> None:
    topk = TopK(2)
    state = topk.combine_all(topk.lift(i, 1) for i in ["d", "b", "c", "a"])
    assert TopK.top(state) == [("a", 1), ("b", 1)]
    assert topk.absorb(state, {"z": 2, "a": 0}) == {"z": 2, "a": 1}


def test_mean_and_last_values() -> None:
    mean = Mean()
    assert Mean.value(mean.empty()) is None
    assert Mean.value(mean.combine_all(map(Mean.lift, [1, 2, 3, 4]))) == 2.5
    last = Last()
    a, b, c = last.lift((5, 0), "old"), last.lift((9, 1), "new"), last.lift((9, 1), "tie")
    assert Last.value(last.combine_all([b, a])) == "new"
    assert last.combine(b, c) == last.combine(c, b) == c  # repr("tie") > repr("new")
    assert Last.value(last.empty()) is None


def test_tumbling_window_expiry() -> None:
    w = TumblingWindow(60, Count())
    state = w.combine_all([w.lift(10, 1), w.lift(20, 1), w.lift(70, 1)])
    assert state == (70, {0: 2, 60: 1})
    state = w.absorb(state, w.lift(130, 1))  # [0, 60) ends at 60 <= 130 - 60
    assert state == (130, {60: 1, 120: 1})
    assert w.absorb(w.copy(state), w.lift(5, 1)) == state  # too late: dropped
    assert w.windows(state) == [(60, 120, 1), (120, 180, 1)]
    events = [w.lift(t, 1) for t in (10, 20, 70, 130, 5, 179, 119)]
    for p in itertools.permutations(events):
        assert w.combine_all(p) == (179, {60: 2, 120: 2})


def test_retention_zero_keeps_only_the_current_window() -> None:
    w = TumblingWindow(60, Count(), retention=0)
    assert w.combine(w.lift(59, 1), w.lift(60, 1)) == (60, {60: 1})


def test_sliding_window_covers_every_window() -> None:
    w = SlidingWindow(30, 10, Count())
    assert w.lift(25, 1) == (25, {20: 1, 10: 1, 0: 1})
    assert sorted(w.window_starts(30)) == [10, 20, 30]
    state = w.combine_all(w.lift(t, 1) for t in (25, 31, 95))
    # horizon: start <= 95 - 30 - 30 = 35 expired
    assert state == (95, {90: 1, 80: 1, 70: 1})
    hll = HyperLogLog(8)
    sw = SlidingWindow(60, 30, hll)
    lifted = sw.lift(45, hll.lift("x"))
    assert lifted[1][0] == lifted[1][30] and lifted[1][0] is not lifted[1][30]


# --------------------------------------------------------------------------- copies


def test_copy_is_independent_for_containers() -> None:
    keyed = per_key(SetUnion())
    state = {"a": {"x"}}
    dup = keyed.copy(state)
    keyed.absorb(dup, {"a": {"y"}, "b": {"z"}})
    assert state == {"a": {"x"}}

    value = {"k": {"v"}}
    acc = keyed.absorb(keyed.empty(), value)
    keyed.absorb(acc, {"k": {"w"}})
    assert value == {"k": {"v"}}  # a new key stores a copy of the value

    hll = HyperLogLog(6)
    w = TumblingWindow(60, hll)
    state2 = w.lift(5, hll.lift("a"))
    before = pickle.loads(pickle.dumps(state2))
    dup2 = w.copy(state2)
    w.absorb(dup2, w.lift(6, hll.lift("b")))
    assert state2 == before and dup2 != state2

    nested = per_key(TumblingWindow(60, per_key(SetUnion())))
    state3 = {"k": (1, {0: {"a": {"x"}}})}
    dup3 = nested.copy(state3)
    nested.absorb(dup3, {"k": (2, {0: {"a": {"y"}}})})
    assert state3 == {"k": (1, {0: {"a": {"x"}}})}


def _owned_cases() -> list[tuple[Monoid[Any], st.SearchStrategy[Any]]]:
    keys = st.sampled_from("abcd")
    figures = st.fixed_dictionaries({"spent": st.integers(-9, 9), "events": st.integers(0, 9)})
    stats = st.fixed_dictionaries({"views": st.integers(0, 9),
                                   "users": st.sampled_from("xyz").map(HyperLogLog(4).lift),
                                   "latency": st.integers(0, 9).map(Mean.lift)})
    return [(per_key(user_figures), st.dictionaries(keys, figures)),
            (per_key(page_stats), st.dictionaries(keys, stats)),
            (per_key(SetUnion()), st.dictionaries(keys, st.sets(st.sampled_from("xyz")))),
            (per_key(Count()), st.dictionaries(keys, st.integers(0, 9)))]


@pytest.mark.parametrize(("keyed", "states"), _owned_cases(),
                         ids=[m.describe() for m, _ in _owned_cases()])
def test_absorb_owned_equals_absorb(keyed: Any, states: st.SearchStrategy[Any]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None)
    @given(states, states)
    def check(acc: Any, value: Any) -> None:
        expected = keyed.absorb(keyed.copy(acc), keyed.copy(value))
        assert keyed.absorb_owned(keyed.copy(acc), keyed.copy(value)) == expected

    check()


@pytest.mark.parametrize(("keyed", "states"), _owned_cases(),
                         ids=[m.describe() for m, _ in _owned_cases()])
def test_absorb_key_merges_one_keys_value_and_leaves_the_others(
        keyed: Any, states: st.SearchStrategy[Any]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None)
    @given(states, states, st.sampled_from("abcd"))
    def check(acc: Any, values: Any, key: str) -> None:
        inner = keyed.inner
        value = values.get(key, inner.empty())
        before, kept = keyed.copy(acc), inner.copy(value)
        result = keyed.absorb_key(acc, key, value)
        assert result is acc and value == kept  # in place; the value is not taken
        expected = (inner.combine(before[key], kept) if key in before else kept)
        assert result == {**before, key: expected}
        assert inner.immutable_state or result[key] is not value  # never shared

    check()


def test_keyed_map_keeps_identity_entries_and_get() -> None:
    m = per_key(Sum())
    assert m.combine({"a": 0}, {}) == {"a": 0}
    assert m.get({"a": 3}, "b") == 0
    assert m.absorb({"a": 1}, {"a": 2, "b": 5}) == {"a": 3, "b": 5}


# --------------------------------------------------------------------------- Avro


def _sample_states() -> list[tuple[Monoid[Any], Any]]:
    hll = HyperLogLog(10)
    cms = CountMinSketch(64, 3)
    top = TopK(3)
    tw = TumblingWindow(60, top)
    sw = SlidingWindow(60, 20, hll)
    tsum = TumblingWindow(60, Sum())
    pkw = per_key(tsum)
    samples: list[tuple[Monoid[Any], Any]] = [
        (Count(), 42),
        (Sum(), -7),
        (Sum("double"), 2.5),
        (Min(), 3),
        (Max("double"), None),
        (Mean(), (10.0, 4)),
        (Last(), ((17, 2), "latest")),
        (Last("json"), ((1, 1), {"a": [1, 2, None]})),
        (SetUnion(), {"x", "y"}),
        (top, top.combine_all(top.lift(w, s) for w, s in [("a", 3), ("b", 9), ("c", 1)])),
        (hll, hll.combine_all(hll.lift(i) for i in range(500))),
        (cms, cms.combine_all(cms.lift(i, 2) for i in "abcdef")),
        (per_key(Count()), {"a": 1, "b": 2}),
        (per_key(Mean(), key_type=("string", "long")), {("fr", 3): (4.0, 2), ("de", 1): (1.0, 1)}),
        (per_key(per_key(Count())), {"a": {"x": 1}, "b": {}}),
        (tw, tw.combine_all([tw.lift(5, top.lift("a", 1)), tw.lift(65, top.lift("b", 2))])),
        (sw, sw.combine_all(sw.lift(t, hll.lift(t)) for t in range(0, 200, 7))),
        (pkw, {"a": tsum.lift(61, 3), "b": tsum.empty()}),
        (per_key(AnyTrue()), {"a": True}),
        (per_key(Record({"spent": Sum(), "events": Count()})),
         {"u2": {"spent": 7, "events": 2}, "u1": {"spent": -3, "events": 1}}),
        (per_key(Record({"mean": Mean(), "n": Count()}), key_type="long"),
         {3: {"mean": (4.0, 2), "n": 2}, 1: {"mean": (0.0, 0), "n": 0}}),
    ]
    return samples


SAMPLES = _sample_states()


@pytest.mark.parametrize(("monoid", "state"), SAMPLES, ids=[m.describe() for m, _ in SAMPLES])
def test_avro_container_round_trip(monoid: Monoid[Any], state: Any) -> None:
    schema = fastavro.parse_schema(monoid.avro_schema())
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [monoid.to_avro(state)], metadata={"monoid": monoid.describe()})
    buf.seek(0)
    reader = fastavro.reader(buf)  # an offline reader needs nothing but the file
    assert reader.metadata["monoid"] == monoid.describe()
    (record,) = list(reader)
    assert monoid.from_avro(record) == state
    assert avro_round_trip(monoid, state) == state


def test_nested_schemas_have_unique_names() -> None:
    nested: list[Monoid[Any]] = [
        per_key(TumblingWindow(60, Mean())),
        per_key(per_key(per_key(Mean()))),
        per_key(
            TumblingWindow(60, per_key(Last(order_type=("long", "string")))),
            key_type=("string", "long"),
        ),
        SlidingWindow(60, 10, per_key(TopK(3, item_type=("string", "long")), key_type=("long",))),
        TumblingWindow(60, SlidingWindow(30, 10, per_key(Min(("long", "long"))))),
    ]
    for m in nested:
        fastavro.parse_schema(m.avro_schema())
        fastavro.parse_schema(m.avro_schema_in("bolt.counts"))
    names = _record_names(nested[0].avro_schema())
    assert names == [
        "hailstorm.state.PerKeyEntry",
        "hailstorm.state.per_key.Tumbling",
        "hailstorm.state.per_key.TumblingBucket",
        "hailstorm.state.per_key.tumbling.Mean",
    ]


def _record_names(schema: Any) -> list[str]:
    out: list[str] = []
    if isinstance(schema, dict):
        if schema.get("type") == "record":
            out.append(schema["name"])
            for f in schema["fields"]:
                out += _record_names(f["type"])
        elif schema.get("type") == "array":
            out += _record_names(schema["items"])
    elif isinstance(schema, list):
        for s in schema:
            out += _record_names(s)
    return out


@pytest.mark.parametrize(("monoid", "state"), [(m, s) for m, s in SAMPLES
                                                if isinstance(m, KeyedMap)],
                         ids=[m.describe() for m, _ in SAMPLES if isinstance(m, KeyedMap)])
def test_avro_entries_are_the_items_of_to_avro(monoid: KeyedMap[Any, Any, Any],
                                              state: Any) -> None:
    keys = sorted_keys(state)
    assert list(monoid.avro_entries(state, keys)) == monoid.to_avro(state)
    assert monoid.from_avro(monoid.to_avro(state)) == state


@given(st.dictionaries(st.tuples(st.sampled_from(["DE", "FR", ""]), st.text(max_size=3),
                                  st.integers(-3, 3)), st.just(1))
       | st.dictionaries(st.tuples(st.integers(0, 2))
                         | st.tuples(st.integers(0, 2), st.text(max_size=2)), st.just(1))
       | st.dictionaries(st.tuples(st.integers(0, 2), st.text(max_size=1) | st.integers(0, 2)),
                         st.just(1)))
def test_sorted_keys_are_sorted_as_whole_tuples(state: dict[Any, int]) -> None:
    """Tuples of one length sort a position at a time: the order is still the tuples'
    own; keys that do not compare keep their order (as ``sorted`` would refuse them)."""
    try:
        expected = sorted(state)
    except TypeError:
        expected = list(state)
    assert sorted_keys(state) == expected


def test_tuple_keys_of_plain_parts_map_to_their_records_field_by_field() -> None:
    plain, json_part = per_key(Sum(), key_type=("string", "long")), per_key(
        Sum(), key_type=("string", "json"))
    state = {("DE", 3): 5, ("", -1): 2}
    assert plain.to_avro(state) == [{"key": {"k0": "", "k1": -1}, "value": 2},
                                    {"key": {"k0": "DE", "k1": 3}, "value": 5}]
    assert plain.from_avro(plain.to_avro(state)) == state
    assert json_part.from_avro(json_part.to_avro({("DE", (1, 2)): 5})) == {("DE", (1, 2)): 5}
    with pytest.raises(ValueError, match="2-tuple"):
        plain.to_avro({("DE",): 1})


def test_records_of_sums_are_their_own_avro_values() -> None:
    plain = Record({"spent": Sum(), "events": Count(), "total": Sum("double")})
    assert plain.avro_as_is and not Record({"mean": Mean(), "n": Count()}).avro_as_is
    state = plain.lift(spent=3, events=1, total=0.5)
    assert plain.to_avro(state) is state and plain.from_avro(state) == state
    assert not Mean().avro_as_is and Count().avro_as_is


def test_tuple_keys_read_offline_as_records() -> None:
    m = per_key(Count(), key_type=("string", "long"))
    assert m.to_avro({("fr", 3): 2}) == [{"key": {"k0": "fr", "k1": 3}, "value": 2}]


# --------------------------------------------------------------------------- misc


def test_describe() -> None:
    assert per_key(Count()).describe() == "per_key(Count)"
    assert TumblingWindow(60, TopK(10)).describe() == "tumbling(60s, TopK(10))"
    assert (
        SlidingWindow(60, 10, HyperLogLog()).describe()
        == "sliding(60s every 10s, HyperLogLog(p=12))"
    )
    assert per_key(Sum("double"), key_type="long").describe() == "per_key(Sum(double), key=long)"
    assert TumblingWindow(60, Mean(), retention=120).describe() == (
        "tumbling(60s, Mean, retention=120s)"
    )
    assert repr(Count()) == "<Count Count>"


@pytest.mark.parametrize(("monoid", "state"), SAMPLES, ids=[m.describe() for m, _ in SAMPLES])
def test_monoids_pickle(monoid: Monoid[Any], state: Any) -> None:
    clone = pickle.loads(pickle.dumps(monoid))
    assert clone.describe() == monoid.describe()
    assert clone.combine(state, clone.empty()) == state


def test_bad_configuration_is_rejected() -> None:
    for make in (
        lambda: Sum("int"),
        lambda: TopK(0),
        lambda: HyperLogLog(2),
        lambda: per_key(Count(), key_type={"type": "map", "values": "long"}),
        lambda: TumblingWindow(0, Count()),
        lambda: SlidingWindow(10, 0, Count()),
        lambda: Min("float"),
    ):
        with pytest.raises(ValueError):
            make()
    with pytest.raises(ValueError):
        HyperLogLog(8).from_avro(HyperLogLog(10).to_avro(HyperLogLog(10).empty()))
    with pytest.raises(ValueError, match="slide 20s is longer than the windows' size 10s: an "
                                         "event time in the gap between two windows would "
                                         "belong to no window"):
        SlidingWindow(10, 20, Count())
    assert SlidingWindow(10, 10, Count()).window_starts(25) == [20]


def test_docstring_examples() -> None:
    public = {name: getattr(monoids_module, name) for name in monoids_module.__all__}
    for module in (monoids_module, windows_module, testing_module):
        result = doctest.testmod(module, extraglobs=public)
        assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize(("monoid", "good", "bad"), [
    (Sum(), [0, 7, True], [1.5, "3", None]),
    (Sum("double"), [0, 2.5], ["3", None]),
    (Count(), [1], [1.0]),
    (Max("string"), ["a", None], [3]),
    (Min("double"), [1, 1.5], ["x"]),
    (Mean(), [Mean.lift(3), (1.5, 2)], [3, (1, 2, 3), ("x", 1), (1.0, 1.0)]),
    (Record({"n": Count(), "m": Max("long")}), [{"n": 1, "m": None}],
     [{"n": 1}, {"n": 1.0, "m": 2}, [1, 2]]),
    (SetUnion(), [{"a"}], []),  # no check of its own: anything goes
])
def test_check_refuses_what_would_break_the_state_or_its_snapshot(
    monoid: Monoid[Any], good: list[Any], bad: list[Any]
) -> None:
    for value in good:
        monoid.check(value)
    for value in bad:
        with pytest.raises(TypeError):
            monoid.check(value)


def test_keyed_maps_check_their_keys() -> None:
    per_key(Count()).check_key("word")
    per_key(Count(), key_type="long").check_key(3)
    per_key(Count(), key_type=("string", "long")).check_key(("a", 1))  # tuples: not checked
    with pytest.raises(TypeError, match=r"per_key\(Count\)'s key takes str values, not int 3"):
        per_key(Count()).check_key(3)
