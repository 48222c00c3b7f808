"""State that evolved: snapshots of an older monoid read through Avro schema resolution or a
bolt's migrate= function (hailstorm.snapshots.evolution and SnapshotStore.load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.monoids import (
    Count,
    HyperLogLog,
    Max,
    Mean,
    Monoid,
    Record,
    SetUnion,
    Sum,
    TopK,
    per_key,
)
from hailstorm.routing import route
from hailstorm.snapshots import DirectorySnapshotStore, SnapshotMismatchError, SnapshotRef
from hailstorm.snapshots.evolution import (
    evolution_problem,
    reader_schema,
    resolution_problem,
    snapshot_record_schema,
)

CLOCK = {("words", 0): 41}


@pytest.fixture
def store(tmp_path: Path) -> DirectorySnapshotStore:
    return DirectorySnapshotStore(tmp_path / "snapshots")


def put(store: DirectorySnapshotStore, monoid: Monoid[Any], state: Any, *, instance: int = 0,
        parallelism: int = 1) -> SnapshotRef:
    return store.put(topology="wc", bolt="counts", instance=instance, parallelism=parallelism,
                     epoch=1, clock=CLOCK, monoid=monoid, state=state)


def test_a_long_sum_reads_as_a_double(store: DirectorySnapshotStore) -> None:
    ref = put(store, Sum("long"), 41)
    clock, state = store.load(ref, Sum("double"))
    assert clock == CLOCK and state == 41.0 and isinstance(state, float)
    keyed = put(store, per_key(Sum("long")), {"a": 1, "b": 2}, instance=1, parallelism=2)
    assert store.load(keyed, per_key(Sum("double")))[1] == {"a": 1.0, "b": 2.0}


def test_a_record_gaining_a_field_reads_it_as_the_identity(
        store: DirectorySnapshotStore) -> None:
    old = per_key(Record({"n": Count()}))
    new = per_key(Record({"n": Count(), "total": Sum("double"), "users": HyperLogLog(6)}))
    ref = put(store, old, {"a": {"n": 3}})
    assert ref.layout == "per_key_nested_columns"  # resolved a record's worth at a time
    state = store.load(ref, new)[1]
    assert state == {"a": {"n": 3, "total": 0.0, "users": HyperLogLog(6).empty()}}


@pytest.mark.parametrize("layout", ["per_key_nested_columns", "per_key_field_columns"])
def test_value_columns_resolve_a_record_losing_a_field_and_promoting_another(
        store: DirectorySnapshotStore, put_format_3: Any, layout: str) -> None:
    old = per_key(Record({"n": Count(), "total": Sum("long"), "gone": Max()}))
    new = per_key(Record({"total": Sum("double"), "n": Count()}))
    state = {f"k{i:04d}": {"n": i, "total": -i, "gone": i % 3 or None} for i in range(2500)}
    ref = put(store, old, state) if layout == "per_key_nested_columns" \
        else put_format_3(store, old, state, topology="wc")
    assert ref.layout == layout
    loaded = store.load(ref, new)[1]
    assert loaded == {k: {"total": float(-v["n"]), "n": v["n"]} for k, v in state.items()}
    assert all(type(v["total"]) is float for v in loaded.values())


@pytest.mark.parametrize(
    "layout", ["per_key_nested_columns", "per_key_field_columns", "per_key_columns"])
def test_keys_are_promoted_in_every_keyed_layout(
        store: DirectorySnapshotStore, put_format_2: Any, put_format_3: Any, layout: str
) -> None:
    old = per_key(Record({"n": Count()}), key_type="long")
    new = per_key(Record({"n": Count(), "m": Max()}), key_type="double")
    state = {1: {"n": 3}, 2: {"n": 4}}
    putter = {"per_key_nested_columns": lambda *a, **k: put(*a),
              "per_key_field_columns": put_format_3, "per_key_columns": put_format_2}[layout]
    ref = putter(store, old, state, topology="wc")
    assert ref.layout == layout
    loaded = store.load(ref, new)[1]
    assert loaded == {1.0: {"n": 3, "m": None}, 2.0: {"n": 4, "m": None}}
    assert {type(k) for k in loaded} == {float}


def test_a_type_change_is_refused_without_migrate_and_converted_with_it(
        store: DirectorySnapshotStore) -> None:
    ref = put(store, per_key(Count()), {"a": 2, "b": 5})
    with pytest.raises(SnapshotMismatchError, match=r"Count is not Sum\(double\)"):
        store.load(ref, per_key(Sum("double")))
    state = store.load(ref, per_key(Sum("double")), migrate=lambda n: n * 1.5)[1]
    assert state == {"a": 3.0, "b": 7.5}
    whole = put(store, Count(), 4, instance=1, parallelism=2)
    assert store.load(whole, Sum("double"), migrate=float)[1] == 4.0


def test_conversion_and_resharding_together(store: DirectorySnapshotStore) -> None:
    keys = {f"k{i}": i for i in range(40)}
    refs = [put(store, per_key(Count()),
                {k: v for k, v in keys.items() if route(k, 2) == i}, instance=i, parallelism=2)
            for i in range(2)]
    merged: dict[str, Any] = {}
    for instance in range(3):
        _, part = store.load_for_instance(refs, per_key(Sum("double")), instance, 3,
                                          migrate=float)
        assert all(route(k, 3) == instance for k in part)
        merged.update(part)
    assert merged == {k: float(v) for k, v in keys.items()}


def test_the_same_monoid_never_needs_a_reader_schema(store: DirectorySnapshotStore) -> None:
    ref = put(store, per_key(Count()), {"a": 1})
    assert store.load(ref, per_key(Count()), migrate=lambda _: 99)[1] == {"a": 1}
    assert store.writer_schema(ref)["name"] == "hailstorm.state.PerKeyEntry"


MONOIDS: list[Monoid[Any]] = [
    Count(), Sum("long"), Sum("double"), Max(), Mean(), TopK(3), SetUnion(), HyperLogLog(6),
    Record({"n": Count(), "m": Mean()}), per_key(Count()), per_key(Record({"n": Count()})),
]


@given(st.sampled_from(MONOIDS))
def test_every_state_reads_with_its_own_reader_schema(monoid: Monoid[Any]) -> None:
    writer = snapshot_record_schema(monoid)
    assert resolution_problem(writer, reader_schema(monoid)) is None
    assert evolution_problem(monoid.describe(), writer, monoid.describe(),
                             reader_schema(monoid)) is None


@pytest.mark.parametrize(("writer", "reader", "problem"), [
    ("long", "double", None),
    ("int", "long", None),
    ("double", "long", "double cannot be read as long"),
    ({"type": "array", "items": "long"}, {"type": "array", "items": "double"}, None),
    ({"type": "map", "values": "string"}, {"type": "map", "values": "long"},
     "string at {} cannot be read as long"),
    (["null", "long"], ["null", "double"], None),
    ("long", ["null", "string"], "long matches no branch of the new union"),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]},
     {"type": "enum", "name": "E", "symbols": ["A"]}, "enum lost the symbols ['B']"),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]},
     {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"},
                                                 {"name": "b", "type": "long"}]},
     "new field b has no default"),
    ({"type": "record", "name": "R", "fields": []},
     {"type": "record", "name": "S", "fields": []}, "record R cannot be read as record S"),
])
def test_resolution_follows_the_avro_rules(writer: Any, reader: Any,
                                           problem: str | None) -> None:
    assert resolution_problem(writer, reader) == problem


def test_the_plan_reads_a_bolts_state_from_the_first_readable_header(
        store: DirectorySnapshotStore, tmp_path: Path) -> None:
    from hailstorm.upgrade.deployed import _stored

    good = put(store, per_key(Count()), {"a": 1}, instance=1, parallelism=2)
    missing = str(tmp_path / "snapshots" / "gone.avro")
    state = _stored(store, [missing, good.uri])
    assert (state.monoid, state.parallelism) == ("per_key(Count)", 2)
    assert state.schema == store.writer_schema(good)
    with pytest.raises(LookupError, match=r"gone\.avro"):
        _stored(store, [missing])


def test_a_format_1_record_gaining_a_field_reads_it_as_the_identity(
        store: DirectorySnapshotStore, put_format_1: Any) -> None:
    old = per_key(Record({"n": Count()}))
    new = per_key(Record({"n": Count(), "total": Sum("double")}))
    ref = put_format_1(store, old, {"a": {"n": 3}, "b": {"n": 1}}, topology="wc")
    assert store.load(ref, new)[1] == {"a": {"n": 3, "total": 0.0},
                                       "b": {"n": 1, "total": 0.0}}
    converted = store.load(ref, per_key(Sum("double")), migrate=lambda v: float(v["n"]))[1]
    assert converted == {"a": 3.0, "b": 1.0}


@pytest.mark.parametrize(("old", "new", "problem"), [
    (per_key(Record({"n": Count()}), key_type=("string", "long")),
     per_key(Record({"n": Count(), "m": Max()}), key_type=("string", "long")), None),
    (per_key(Count(), key_type=("string", "long")),
     per_key(Count(), key_type=("string", "double")), None),  # a part promoted
    (per_key(Count(), key_type=("string", "long")),
     per_key(Count(), key_type=("string", "long", "long")), "is not"),
    (per_key(Count(), key_type=("string", "long")),
     per_key(Count(), key_type=("long", "long")), "string is not long"),
])
def test_tuple_keys_evolve_part_by_part(old: Monoid[Any], new: Monoid[Any],
                                        problem: str | None) -> None:
    found = evolution_problem(old.describe(), snapshot_record_schema(old), new.describe(),
                              reader_schema(new))
    assert found is None if problem is None else problem in (found or "")
