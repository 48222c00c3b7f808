"""Nested columns: striping values of any Avro schema into columns and assembling them back,
and the ``per_key_nested_columns`` snapshot layout built on it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hailstorm.monoids import (
    Count,
    HyperLogLog,
    KeyedChunks,
    KeyedColumns,
    KeyedValues,
    Max,
    Mean,
    Monoid,
    Record,
    SetUnion,
    Sum,
    TumblingWindow,
    per_key,
)
from hailstorm.monoids.avro_columns import assemble, columns_schema, stripe
from hailstorm.snapshots import (
    DirectorySnapshotStore,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotRef,
)
from hailstorm.snapshots import format as snapshot_format
from hailstorm.snapshots import layouts as snapshot_layouts

PutFormat = Any  # conftest.put_format_2 / put_format_3: a snapshot as that format wrote it

LEAVES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    ("long", st.integers(-(2**63), 2**63 - 1)),
    ("double", st.floats(allow_nan=False)),
    ("string", st.text(max_size=4)),
    ("bytes", st.binary(max_size=4)),
    ("boolean", st.booleans()),
    (["null", "long"], st.none() | st.integers(-5, 5)),
    ({"type": "map", "values": "long"},
     st.dictionaries(st.text(max_size=2), st.integers(-5, 5), max_size=2)),
    ({"type": "long", "logicalType": "timestamp-millis"}, st.integers(0, 2**40)),
]


def _array(child: tuple[Any, st.SearchStrategy[Any]]) -> tuple[Any, st.SearchStrategy[Any]]:
    schema, values = child
    return {"type": "array", "items": schema}, st.lists(values, max_size=3)


def _record(children: list[tuple[Any, st.SearchStrategy[Any]]]
            ) -> tuple[Any, st.SearchStrategy[Any]]:
    fields = [{"name": f"f{i}", "type": schema} for i, (schema, _) in enumerate(children)]
    values = st.fixed_dictionaries({f"f{i}": v for i, (_, v) in enumerate(children)})
    return {"type": "record", "name": "R", "fields": fields}, values


schemas_and_values = st.recursive(
    st.sampled_from(LEAVES),
    lambda children: children.map(_array) | st.lists(children, max_size=3).map(_record),
    max_leaves=8,
)
"""(an Avro schema, a strategy of its values): records and arrays nested in any way around
numbers, strings, bytes, unions, maps and logical types."""


def _named(schema: Any, counter: list[int]) -> Any:
    """``schema`` with its records named ``R1``, ``R2``, ... (names are unique in a schema)."""
    if isinstance(schema, dict) and schema.get("type") == "record":
        counter[0] += 1
        return {**schema, "name": f"R{counter[0]}",
                "fields": [{**f, "type": _named(f["type"], counter)} for f in schema["fields"]]}
    if isinstance(schema, dict) and schema.get("type") == "array":
        return {**schema, "items": _named(schema["items"], counter)}
    return schema


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_values_of_any_schema_stripe_into_columns_fastavro_writes_and_assemble_back(
        data: st.DataObject) -> None:
    inner, value_strategy = data.draw(schemas_and_values)
    schema = _named({"type": "record", "name": "Top", "fields": [{"name": "v", "type": inner}]},
                    [0])
    values = data.draw(st.lists(st.fixed_dictionaries({"v": value_strategy}), max_size=5))
    column_schema = columns_schema(schema)
    assert column_schema is not None
    column = stripe(schema, values)
    assert assemble(schema, column, len(values)) == values
    # Written and read by fastavro, the columns give what the values themselves give.
    assert assemble(schema, _round_trip(column_schema, column), len(values)) == \
        _round_trip({"type": "array", "items": schema}, values)


def _round_trip(schema: Any, datum: Any) -> Any:
    parsed = fastavro.parse_schema(schema)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, datum)
    buffer.seek(0)
    return fastavro.schemaless_reader(buffer, parsed, None)


def test_a_record_and_an_array_become_columns_of_their_leaves() -> None:
    schema = {"type": "record", "name": "W", "namespace": "ns", "fields": [
        {"name": "t", "type": ["null", "long"]},
        {"name": "buckets", "type": {"type": "array", "items": {
            "type": "record", "name": "B", "fields": [
                {"name": "start", "type": "long"}, {"name": "n", "type": "long"}]}}}]}
    values = [{"t": None, "buckets": [{"start": 0, "n": 2}, {"start": 60, "n": 1}]},
              {"t": 7, "buckets": []}]
    assert stripe(schema, values) == {
        "t": [None, 7],
        "buckets": {"lengths": [2, 0], "items": {"start": [0, 60], "n": [2, 1]}}}
    assert columns_schema(schema) == {
        "type": "record", "name": "WColumns", "namespace": "ns", "fields": [
            {"name": "t", "type": {"type": "array", "items": ["null", "long"]}},
            {"name": "buckets", "type": {"type": "record", "name": "NestedLists1", "fields": [
                {"name": "lengths", "type": {"type": "array", "items": "long"}},
                {"name": "items", "type": {"type": "record", "name": "BColumns", "fields": [
                    {"name": "start", "type": {"type": "array", "items": "long"}},
                    {"name": "n", "type": {"type": "array", "items": "long"}}]}}]}}]}


def test_only_records_and_arrays_without_named_references_are_striped() -> None:
    point = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "long"}]}
    assert columns_schema("long") is None
    assert columns_schema({"type": "map", "values": "long"}) is None
    assert columns_schema({"type": "record", "name": "Two", "fields": [
        {"name": "a", "type": point}, {"name": "b", "type": "P"}]}) is None
    assert columns_schema({"type": "array", "items": point}) is not None


@pytest.mark.parametrize(("column", "problem"), [
    ({"lengths": [1], "items": {"x": [1]}}, "1 array lengths for 2 values"),
    ({"lengths": [2, 1], "items": {"x": [1, 2]}}, "a column of 2 values for 3"),
    ({"lengths": [3, -1], "items": {"x": [1, 2]}}, "2 array lengths for 2 values"),
])
def test_columns_that_do_not_hold_every_value_are_refused(column: Any, problem: str) -> None:
    schema = {"type": "array", "items": {"type": "record", "name": "P", "fields": [
        {"name": "x", "type": "long"}]}}
    with pytest.raises(ValueError, match=problem):
        assemble(schema, column, 2)


# --------------------------------------------------------------------------- the layout

CLOCK = {("views", 0): 99}
WINDOWS = per_key(TumblingWindow(60, Record(
    {"views": Count(), "users": HyperLogLog(4), "latency": Mean()})))
"""Page views' state: per key, windows of a record of a count, a sketch and a mean."""


def _views(rng_seed: int, keys: int) -> dict[str, Any]:
    inner = WINDOWS.inner
    state: dict[str, Any] = {}
    for i in range(keys):
        for j in range((i + rng_seed) % 4):
            stats = Record.lift(inner.inner, views=Count.one,  # type: ignore[attr-defined]
                                users=HyperLogLog(4).lift(f"u{i * j}"),
                                latency=Mean.lift(float(i + j)))
            state = WINDOWS.absorb(state, {f"/p{i}": inner.lift(60 * j + i % 60, stats)})
    return state


def _put(store: DirectorySnapshotStore, monoid: Monoid[Any], state: Any, **kw: Any
         ) -> SnapshotRef:
    args = {"topology": "views", "bolt": "pages", "instance": 0, "parallelism": 1,
            "epoch": 1, "clock": CLOCK, **kw}
    return store.put(monoid=monoid, state=state, **args)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 3), keys=st.integers(0, 40), changed=st.integers(0, 10))
def test_window_states_read_back_as_format_2_and_3_files_do(
        tmp_path_factory: pytest.TempPathFactory, put_format_2: PutFormat,
        put_format_3: PutFormat, seed: int, keys: int, changed: int) -> None:
    store = DirectorySnapshotStore(tmp_path_factory.mktemp("snapshots"))
    state = _views(seed, keys)
    new = _put(store, WINDOWS, state)
    # A window is a record holding an array: format 3 keeps it whole, format 2 too.
    fields = put_format_3(store, WINDOWS, state, topology="views", bolt="fields", clock=CLOCK)
    old = put_format_2(store, WINDOWS, state, topology="views", bolt="old", clock=CLOCK)
    assert new.layout == "per_key_nested_columns"
    assert store.load(new, WINDOWS) == store.load(fields, WINDOWS) == \
        store.load(old, WINDOWS) == (CLOCK, state)
    assert list(store.to_json_rows(new)) == list(store.to_json_rows(old))
    assert store.writer_schema(new) == store.writer_schema(old)
    delta_state = _views(seed + 1, changed)
    for base in (new, fields, old):  # a delta in nested columns builds on any of them
        delta = _put(store, WINDOWS, delta_state, bolt=base.bolt, epoch=2, base=base)
        assert delta.layout == "per_key_nested_columns"
        assert store.load(delta, WINDOWS)[1] == {**state, **delta_state}


class Segment(Monoid[tuple[int, int]]):
    """A user monoid whose record names a type twice (by reference the second time)."""

    name = "Segment"
    immutable_state = True

    def empty(self) -> tuple[int, int]:
        return (0, 0)

    def combine(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (min(a[0], b[0]), max(a[1], b[1]))

    def avro_schema(self) -> Any:
        return {"type": "record", "name": "Segment", "fields": [
            {"name": "low", "type": {"type": "record", "name": "End",
                                     "fields": [{"name": "at", "type": "long"}]}},
            {"name": "high", "type": "End"}]}

    def to_avro(self, state: tuple[int, int]) -> Any:
        return {"low": {"at": state[0]}, "high": {"at": state[1]}}

    def from_avro(self, data: Any) -> tuple[int, int]:
        return (data["low"]["at"], data["high"]["at"])


def test_a_value_naming_a_type_by_reference_is_written_in_field_columns(
        tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path)
    monoid = per_key(Segment())
    ref = _put(store, monoid, {"a": (1, 5), "b": (-2, 3)})
    assert ref.layout == "per_key_field_columns"
    assert store.load(ref, monoid)[1] == {"a": (1, 5), "b": (-2, 3)}


def test_a_nested_columns_file_without_its_entry_schema_is_corrupt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = DirectorySnapshotStore(tmp_path)
    for module in (snapshot_format, snapshot_layouts):  # writes it under another name
        monkeypatch.setattr(module, "ENTRY_SCHEMA_KEY", "hailstorm.something_else")
    ref = _put(store, WINDOWS, _views(1, 3))
    monkeypatch.undo()
    with pytest.raises(SnapshotCorruptError, match=r"no valid hailstorm\.entry_schema"):
        store.load(ref, WINDOWS)


class Nameless(Segment):
    """A user monoid whose record schema has no name (Avro refuses it)."""

    name = "Nameless"

    def avro_schema(self) -> Any:
        return {"type": "record", "fields": [{"name": "low", "type": "long"}]}


def test_a_malformed_value_schema_is_named_whatever_the_layout(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"the Avro schema of per_key\(Nameless\) is invalid"):
        _put(DirectorySnapshotStore(tmp_path), per_key(Nameless()), {"a": (1, 2)})


FIGURES = Record({"spent": Sum(), "events": Count(), "largest": Max()})
"""A Record of numbers: ``copy_keys`` copies its states as columns (KeyedColumns)."""

figure_states = st.fixed_dictionaries({"spent": st.integers(-50, 50),
                                       "events": st.integers(0, 5),
                                       "largest": st.none() | st.integers(-9, 9)})
key_types: list[tuple[Any, st.SearchStrategy[Any]]] = [
    ("string", st.text(max_size=3)),
    ("long", st.integers(-20, 20)),
    (("string", "long"), st.tuples(st.sampled_from(["de", "fr"]), st.integers(0, 9))),
]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), key_type=st.sampled_from(key_types))
def test_records_of_numbers_are_copied_as_columns_and_written_as_a_dict_of_them_is(
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
        key_type: tuple[Any, st.SearchStrategy[Any]]) -> None:
    spec, keys = key_type
    monoid = per_key(FIGURES, key_type=spec)
    state = data.draw(st.dictionaries(keys, figure_states, max_size=30))
    asked = data.draw(st.lists(keys, unique=True, max_size=30))  # some absent from state
    model = {k: dict(state[k]) if k in state else FIGURES.empty() for k in asked}
    whole_model = {k: dict(v) for k, v in state.items()}
    copy = monoid.copy_keys(state, asked)
    whole = monoid.copy_keys(state)
    assert isinstance(copy, KeyedColumns) and isinstance(whole, KeyedColumns)
    for value in state.values():  # absorbing on after the copy changes nothing in it
        FIGURES.absorb(value, {"spent": 1, "events": 1, "largest": 99})
    assert copy == model and dict(copy) == model and list(copy) == asked
    assert whole == whole_model
    store = DirectorySnapshotStore(tmp_path_factory.mktemp("snapshots"))
    written = _put(store, monoid, copy, bolt="columns")
    as_dict = _put(store, monoid, model, bolt="dict")
    assert store.load(written, monoid) == store.load(as_dict, monoid) == (CLOCK, model)
    assert list(store.to_json_rows(written)) == list(store.to_json_rows(as_dict))


def test_other_states_are_copied_as_dicts_or_as_chunks_of_their_columns() -> None:
    counts = per_key(Count())
    assert counts.copy_keys({"a": 2, "b": 3}, ["b", "c"]) == {"b": 3, "c": 0}
    assert counts.copy_keys({"a": 2, "b": 3}) == {"a": 2, "b": 3}  # every key
    nested = per_key(Record({"users": HyperLogLog(4), "n": Count()}))  # a mutable field
    state = {"a": nested.inner.lift(users=HyperLogLog(4).lift("u"), n=1)}
    copy = nested.copy_keys(state, ["a"])
    assert type(copy) is KeyedChunks and copy == state and copy["a"]["users"] is not \
        state["a"]["users"]
    sets = per_key(SetUnion())  # mutable states whose column may share them: dicts
    state = {"a": {"x"}}
    copy = sets.copy_keys(state, ["a"])
    assert type(copy) is dict and copy == state and copy["a"] is not state["a"]


PAGE_STATS = Record({"views": Count(), "users": HyperLogLog(10), "latency": Mean()})
PAGE_WINDOWS = TumblingWindow(10, PAGE_STATS)
"""Page views' windows: ``copy_keys`` copies their states as chunks of nested columns."""

views = st.lists(st.tuples(st.integers(0, 35), st.sampled_from("uvwxyz"), st.integers(0, 99)),
                 max_size=6)


def _page_windows(observed: list[tuple[int, str, int]]) -> Any:
    state = PAGE_WINDOWS.empty()
    for time, user, latency in observed:
        value = PAGE_STATS.lift(views=1, users=PAGE_STATS.fields["users"].lift(user),
                                latency=Mean.lift(latency))
        state = PAGE_WINDOWS.absorb(state, PAGE_WINDOWS.lift_unexpiring(time, value))
    return state


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), key_type=st.sampled_from(key_types), size=st.integers(1, 4))
def test_windows_are_copied_as_chunks_of_columns_and_written_as_a_dict_of_them_is(
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
        key_type: tuple[Any, st.SearchStrategy[Any]], size: int) -> None:
    spec, keys = key_type
    monoid = per_key(PAGE_WINDOWS, key_type=spec)
    state = {k: _page_windows(v)
             for k, v in data.draw(st.dictionaries(keys, views, max_size=20)).items()}
    asked = data.draw(st.lists(keys, unique=True, max_size=20))  # some absent from state
    model = {k: PAGE_WINDOWS.copy(state[k]) if k in state else PAGE_WINDOWS.empty()
             for k in asked}
    whole_model = {k: PAGE_WINDOWS.copy(v) for k, v in state.items()}
    copy, whole = monoid.copy_keys(state, asked), monoid.copy_keys(state)
    small = KeyedChunks.of(PAGE_WINDOWS, state, asked, size)
    assert isinstance(copy, KeyedChunks) and isinstance(whole, KeyedChunks)
    for value in state.values():  # absorbing on after the copy changes nothing in it
        PAGE_WINDOWS.absorb(value, _page_windows([(5, "q", 1), (25, "r", 2)]))
    assert copy == small == model and dict(copy) == model and list(copy) == asked
    assert whole == whole_model
    assert all(len(keys) <= size for keys, _column in small.chunks)
    store = DirectorySnapshotStore(tmp_path_factory.mktemp("snapshots"))
    written = _put(store, monoid, copy, bolt="chunks")
    rechunked = _put(store, monoid, small, bolt="small")  # chunks of another size
    as_dict = _put(store, monoid, model, bolt="dict")
    assert store.load(written, monoid) == store.load(rechunked, monoid) == \
        store.load(as_dict, monoid) == (CLOCK, model)
    assert list(store.to_json_rows(written)) == list(store.to_json_rows(rechunked)) == \
        list(store.to_json_rows(as_dict))


@given(state=st.dictionaries(st.sampled_from("abcdef"), st.none() | st.integers(-5, 5)),
       keys=st.sets(st.sampled_from("abcdefgh")), monoid=st.sampled_from([Count(), Max()]))
def test_immutable_values_are_copied_as_each_key_would_be(
        state: dict[str, Any], keys: set[str], monoid: Monoid[Any]) -> None:
    keyed = per_key(monoid)
    state = {k: v for k, v in state.items() if v is not None or isinstance(monoid, Max)}
    expected = {k: state[k] if k in state else monoid.empty() for k in keys}
    assert keyed.copy_keys(state, keys) == expected
    copy = keyed.copy_keys(state, sorted(keys))
    assert isinstance(copy, KeyedValues) and copy == expected and list(copy) == sorted(keys)
    assert keyed.copy_keys(state) == state and isinstance(keyed.copy_keys(state), KeyedValues)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), key_type=st.sampled_from(key_types), size=st.integers(1, 4))
def test_immutable_values_are_copied_as_lists_and_written_as_a_dict_of_them_is(
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
        key_type: tuple[Any, st.SearchStrategy[Any]], size: int) -> None:
    """Counts (written in columns of keys and values) and means (tuples, whose Avro
    schema is a record: nested columns), copied as the list of the keys and of their
    values: a snapshot writes the copy as it writes a dict of the same keys and values."""
    spec, keys = key_type
    store = DirectorySnapshotStore(tmp_path_factory.mktemp("snapshots"))
    observations = st.lists(st.integers(-9, 9), min_size=1, max_size=3)
    for monoid in (per_key(Count(), key_type=spec), per_key(Mean(), key_type=spec)):
        inner = monoid.inner
        state = {k: inner.combine_all([inner.lift(x) for x in xs]) for k, xs in
                 data.draw(st.dictionaries(keys, observations, max_size=20)).items()}
        asked = data.draw(st.lists(keys, unique=True, max_size=20))  # some absent
        model = {k: state[k] if k in state else inner.empty() for k in asked}
        copy, whole = monoid.copy_keys(state, asked), monoid.copy_keys(state)
        assert isinstance(copy, KeyedValues) and isinstance(whole, KeyedValues)
        assert copy == model and list(copy) == asked and whole == state
        assert [k for keys_, _ in copy.value_chunks(size) for k in keys_] == asked
        name = type(inner).__name__.lower()
        written = _put(store, monoid, copy, bolt=f"{name}-copy")
        as_dict = _put(store, monoid, model, bolt=f"{name}-dict")
        assert store.load(written, monoid) == store.load(as_dict, monoid) == (CLOCK, model)
        assert list(store.to_json_rows(written)) == list(store.to_json_rows(as_dict))
