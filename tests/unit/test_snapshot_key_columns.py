"""Key columns: tuple keys written as one column per position (format ``"5"``), read back
in every keyed layout, beside files of format ``"4"`` that hold them as records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hailstorm.monoids import Count, Mean, Monoid, Record, Sum, TopK, per_key
from hailstorm.monoids.avro import codec
from hailstorm.monoids.avro_columns import stripe
from hailstorm.snapshots import DirectorySnapshotStore, SnapshotCorruptError, SnapshotRef
from hailstorm.snapshots.layouts import COLUMN_KEYS

CLOCK = {("events", 0): 41}

PutFormat4 = Any  # conftest.put_format_4: a snapshot as format "4" wrote it

KEY_TYPES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (("string", "string"), st.tuples(st.text(max_size=3), st.text(max_size=3))),
    (("string", "long"), st.tuples(st.text(max_size=3), st.integers(-(2**63), 2**63 - 1))),
    (("long", ("string", "boolean")),
     st.tuples(st.integers(-5, 5), st.tuples(st.text(max_size=2), st.booleans()))),
    (("json", "double"), st.tuples(st.lists(st.integers(0, 3), max_size=2).map(tuple),
                                   st.floats(allow_nan=False))),
]
"""Tuple key types (one nests a tuple; one has a part stored as JSON) and their keys."""

MONOIDS: list[tuple[Monoid[Any], st.SearchStrategy[Any]]] = [
    (Sum(), st.integers(-(2**62), 2**62)),  # per_key_columns
    (Mean(), st.tuples(st.floats(-1e9, 1e9), st.integers(1, 9))),  # per_key_nested_columns
    (Record({"n": Count(), "total": Sum()}),
     st.fixed_dictionaries({"n": st.integers(0, 9), "total": st.integers(-9, 9)})),
]


@pytest.fixture
def store(tmp_path: Path) -> DirectorySnapshotStore:
    return DirectorySnapshotStore(tmp_path / "snapshots")


def put(store: DirectorySnapshotStore, monoid: Monoid[Any], state: Any, *, epoch: int = 1,
        base: SnapshotRef | None = None, bolt: str = "totals") -> SnapshotRef:
    return store.put(topology="tops", bolt=bolt, instance=0, parallelism=1, epoch=epoch,
                     clock=CLOCK, monoid=monoid, state=state, base=base)


def read(ref: SnapshotRef) -> tuple[dict[str, Any], list[Any]]:
    with open(ref.path, "rb") as f:  # plain fastavro
        reader = fastavro.reader(f)
        return reader.metadata, list(reader)


@given(st.sampled_from(KEY_TYPES).flatmap(
    lambda kt: st.tuples(st.just(kt[0]), st.lists(kt[1], max_size=20))))
def test_a_codecs_column_is_the_stripe_of_its_avro_data(case: tuple[Any, list[Any]]) -> None:
    key_type, keys = case
    key = codec(key_type, hashable=True)
    schema = key.schema("hailstorm.state", "PerKeyKey")
    assert key.column(keys) == stripe(schema, [key.encode(k) for k in keys])


def test_tuple_keys_are_written_as_one_column_per_position(
        store: DirectorySnapshotStore) -> None:
    monoid = per_key(Sum(), key_type=("string", "string"))
    state = {("DE", "u2"): 5, ("DE", "u1"): 7, ("AT", "u9"): 1}
    ref = put(store, monoid, state)
    meta, records = read(ref)
    assert (meta["hailstorm.format"], meta["hailstorm.layout"]) == ("5", "per_key_columns")
    assert meta["hailstorm.key_columns"] == "1"
    assert records == [{"keys": {"k0": ["DE", "DE", "AT"], "k1": ["u2", "u1", "u9"]},
                        "values": [5, 7, 1]}]
    assert ref.records == 3 and store.load(ref, monoid) == (CLOCK, state)
    assert sorted((tuple(r["key"].values()), r["value"]) for r in store.to_json_rows(ref)) \
        == sorted(state.items())


def test_keys_of_one_primitive_stay_an_array(store: DirectorySnapshotStore) -> None:
    meta, records = read(put(store, per_key(Count()), {"b": 2, "a": 1}))
    assert meta["hailstorm.format"] == "2" and "hailstorm.key_columns" not in meta
    assert records == [{"keys": ["b", "a"], "values": [2, 1]}]


def test_a_chunk_holds_at_most_column_keys(store: DirectorySnapshotStore) -> None:
    monoid = per_key(TopK(2), key_type=("string", "long"))
    state = {("c", i): {f"u{i % 7}": float(i)} for i in range(2 * COLUMN_KEYS + 5)}
    ref = put(store, monoid, state)
    _, records = read(ref)
    assert [len(r["keys"]["k1"]) for r in records] == [COLUMN_KEYS, COLUMN_KEYS, 5]
    assert ref.layout == "per_key_nested_columns" and store.load(ref, monoid)[1] == state


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_keyed_layout_reads_what_it_wrote_and_what_format_4_wrote(
        tmp_path_factory: pytest.TempPathFactory, put_format_4: PutFormat4,
        data: st.DataObject) -> None:
    key_type, keys = data.draw(st.sampled_from(KEY_TYPES))
    inner, values = data.draw(st.sampled_from(MONOIDS))
    monoid = per_key(inner, key_type=key_type)
    state = data.draw(st.dictionaries(keys, values, max_size=30))
    changed = data.draw(st.dictionaries(keys, values, max_size=8))
    store = DirectorySnapshotStore(tmp_path_factory.mktemp("snapshots"))
    new = put(store, monoid, state)
    old = put_format_4(store, monoid, state, topology="tops", bolt="old", clock=CLOCK)
    assert read(new)[0]["hailstorm.format"] == "5"
    assert "hailstorm.key_columns" not in read(old)[0] and new.layout == old.layout
    assert store.load(new, monoid) == store.load(old, monoid) == (CLOCK, state)
    rows = sorted(map(repr, store.to_json_rows(new)))
    assert rows == sorted(map(repr, store.to_json_rows(old)))
    # deltas of either format build on bases of the other
    on_old = put(store, monoid, changed, epoch=2, base=old, bolt="old")
    on_new = put_format_4(store, monoid, changed, topology="tops", bolt="totals", epoch=2,
                          clock=CLOCK, base=new)
    assert store.load(on_old, monoid)[1] == store.load(on_new, monoid)[1] \
        == {**state, **changed}


def test_positions_of_different_lengths_are_corrupt(
        store: DirectorySnapshotStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monoid = per_key(Sum(), key_type=("string", "long"))
    tuple_codec = type(codec(("string", "long"), hashable=True))
    column = tuple_codec.column
    monkeypatch.setattr(tuple_codec, "column",
                        lambda self, xs: {**column(self, xs), "k1": [1]})
    ref = put(store, monoid, {("a", 1): 1, ("b", 2): 2})
    monkeypatch.undo()
    with pytest.raises(SnapshotCorruptError, match="a column of 1 values for 2"):
        store.load(ref, monoid)


@pytest.mark.parametrize("inner", [Sum("long"), Record({"n": Count(), "total": Sum("long")})],
                         ids=["per_key_columns", "per_key_nested_columns"])
def test_key_columns_read_through_schema_resolution(
        store: DirectorySnapshotStore, inner: Monoid[Any]) -> None:
    old = per_key(inner, key_type=("string", "long"))
    state = {("a", 1): 3, ("b", 2): 4} if isinstance(inner, Sum) else \
        {("a", 1): {"n": 1, "total": 3}, ("b", 2): {"n": 2, "total": 4}}
    ref = put(store, old, state)
    if isinstance(inner, Sum):  # a long sum read as a double
        new: Monoid[Any] = per_key(Sum("double"), key_type=("string", "long"))
        expected: dict[Any, Any] = {("a", 1): 3.0, ("b", 2): 4.0}
    else:  # a record gaining a field
        new = per_key(Record({"n": Count(), "total": Sum("long"), "m": Mean()}),
                      key_type=("string", "long"))
        expected = {("a", 1): {"n": 1, "total": 3, "m": Mean().empty()},
                    ("b", 2): {"n": 2, "total": 4, "m": Mean().empty()}}
    loaded = store.load(ref, new)[1]
    assert loaded == expected
    assert all(type(k) is tuple for k in loaded)
