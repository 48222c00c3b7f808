"""The snapshot store: round trips, integrity, atomicity, re-sharding, listing and GC."""

from __future__ import annotations

import io
import json
import os
import random
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
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
    TumblingWindow,
    per_key,
)
from hailstorm.protocol.clock import Clock, clock_to_json
from hailstorm.routing import route
from hailstorm.snapshots import (
    DirectorySnapshotStore,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotMismatchError,
    SnapshotRef,
    layouts,
    snapshot_key,
)
from hailstorm.snapshots.format import write_snapshot
from hailstorm.snapshots.layouts import COLUMN_KEYS
from hailstorm.snapshots.rewrites import same_content

PutFormat1 = Any  # conftest.put_format_1: store a snapshot as format "1" wrote it
PutFormat2 = Any  # conftest.put_format_2: store a snapshot as format "2" wrote it
PutFormat3 = Any  # conftest.put_format_3: store a snapshot as format "3" wrote it

CLOCK: Clock = {("words", 0): 41, ("words", 1): -1, ("clicks", 0): 7}


class AnyTrue(Monoid[bool]):
    """A user-defined, non-library monoid."""

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


class DefaultedPair(Monoid[tuple[int, int]]):
    """A user-defined monoid whose Avro record has a field with a default."""

    name = "DefaultedPair"
    immutable_state = True

    def empty(self) -> tuple[int, int]:
        return (0, 0)

    def combine(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])

    def avro_schema(self) -> Any:
        return {"type": "record", "name": "Pair", "fields": [
            {"name": "a", "type": "long"}, {"name": "b", "type": "long", "default": 0}]}

    def to_avro(self, state: tuple[int, int]) -> Any:
        return {"a": state[0], "b": state[1]}

    def from_avro(self, data: Any) -> tuple[int, int]:
        return (data["a"], data["b"])


class TaggedCount(Monoid[tuple[int, str | None]]):
    """A user-defined monoid whose ``to_avro`` leaves a nullable field out when it is
    None (fastavro writes such a record's field as null)."""

    name = "TaggedCount"
    immutable_state = True

    def empty(self) -> tuple[int, str | None]:
        return (0, None)

    def combine(self, a: tuple[int, str | None], b: tuple[int, str | None]
                ) -> tuple[int, str | None]:
        tags = [t for t in (a[1], b[1]) if t is not None]
        return (a[0] + b[0], max(tags) if tags else None)

    def avro_schema(self) -> Any:
        return {"type": "record", "name": "TaggedCount", "fields": [
            {"name": "n", "type": "long"}, {"name": "tag", "type": ["null", "string"]}]}

    def to_avro(self, state: tuple[int, str | None]) -> Any:
        return {"n": state[0]} if state[1] is None else {"n": state[0], "tag": state[1]}

    def from_avro(self, data: Any) -> tuple[int, str | None]:
        return (data["n"], data["tag"])


@pytest.fixture
def store(tmp_path: Path) -> DirectorySnapshotStore:
    return DirectorySnapshotStore(tmp_path / "snapshots")


def put(
    store: DirectorySnapshotStore,
    monoid: Monoid[Any],
    state: Any,
    *,
    bolt: str = "counts",
    instance: int = 0,
    parallelism: int = 1,
    epoch: int = 1,
    clock: Clock = CLOCK,
    base: SnapshotRef | None = None,
) -> SnapshotRef:
    return store.put(
        topology="wordcount",
        bolt=bolt,
        instance=instance,
        parallelism=parallelism,
        epoch=epoch,
        clock=clock,
        monoid=monoid,
        state=state,
        base=base,
    )


def hll_state() -> bytearray:
    hll = HyperLogLog(precision=6)
    state = hll.empty()
    for item in ["a", "b", "c", "d"]:
        state = hll.add(state, item)
    return state


CASES: list[tuple[Monoid[Any], Any]] = [
    (per_key(Count()), {"apple": 3, "pear": 1, "é": 12}),
    (per_key(Sum("double")), {"x": 1.5, "y": -0.25}),
    (per_key(Mean()), {"a": (3.0, 2), "b": (-1.0, 1)}),
    (per_key(Count(), key_type=("string", "long")), {("fr", 3): 2, ("de", 1): 5}),
    (per_key(per_key(Count())), {"outer": {"inner": 1, "other": 2}, "empty": {}}),
    (per_key(Count()), {}),
    (Mean(), (12.5, 4)),
    (Count(), 99),
    (SetUnion(), {"x", "y"}),
    (TopK(3), {"a": 3.0, "b": 2.0}),
    (HyperLogLog(precision=6), hll_state()),
    (TumblingWindow(60, Count()), (130, {60: 2, 120: 1})),
    (AnyTrue(), True),
]


# --------------------------------------------------------------------------- round trips


# Named by the monoid alone: a set's repr differs between processes (string hashing is
# salted), and parallel workers must collect the same ids.
@pytest.mark.parametrize(("monoid", "state"), CASES, ids=[repr(m)[:40] for m, _ in CASES])
def test_round_trip(store: DirectorySnapshotStore, monoid: Monoid[Any], state: Any) -> None:
    ref = put(store, monoid, state, epoch=3)
    assert ref.epoch == 3 and ref.clock == CLOCK and ref.monoid == monoid.describe()
    assert ref.records == (len(state) if isinstance(state, dict) and "per_key" in ref.monoid else 1)
    assert ref.size_bytes == ref.path.stat().st_size
    assert ref.duration_s is not None and ref.duration_s >= 0
    clock, loaded = store.load(ref, monoid)
    assert clock == CLOCK
    assert loaded == state
    assert type(loaded) is type(state)
    assert store.load(ref.key, monoid) == (CLOCK, state)  # by key, as recorded in ZooKeeper
    assert store.load(ref.uri, monoid) == (CLOCK, state)  # by URI


def test_layout_and_metadata(store: DirectorySnapshotStore) -> None:
    ref = put(store, per_key(Count()), {"a": 1}, bolt="counts", instance=2, parallelism=4, epoch=7)
    assert ref.key == "wordcount/counts/2/epoch-000000000007.avro"
    assert ref.path == store.root / "wordcount" / "counts" / "2" / "epoch-000000000007.avro"
    assert ref.uri == ref.path.as_uri()
    assert snapshot_key("wordcount", "counts", 2, 7) == ref.key
    assert (ref.instance, ref.parallelism, ref.layout) == (2, 4, "per_key_columns")
    assert ref.checksum.startswith("sha256:") and len(ref.checksum) == 71
    assert json.loads(json.dumps(ref.to_json()))["clock"] == clock_to_json(CLOCK)


def test_snapshots_are_readable_by_their_owner_only(store: DirectorySnapshotStore) -> None:
    ref = put(store, per_key(Count()), {"a": 1}, bolt="counts", instance=0, parallelism=1,
              epoch=3)
    assert stat.S_IMODE(ref.path.stat().st_mode) == 0o600
    for directory in (ref.path.parent, store.root / "wordcount"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_readable_offline_with_plain_fastavro(store: DirectorySnapshotStore) -> None:
    state = {("fr", 3): (10.0, 4), ("de", 1): (2.0, 1)}
    ref = put(store, per_key(Mean(), key_type=("string", "long")), state, epoch=5)
    with open(ref.path, "rb") as f:  # no hailstorm code below this line
        reader = fastavro.reader(f)
        meta = reader.metadata
        records = list(reader)
    assert meta["avro.codec"] == "deflate"
    assert meta["hailstorm.topology"] == "wordcount" and meta["hailstorm.bolt"] == "counts"
    assert (meta["hailstorm.epoch"], meta["hailstorm.instance"]) == ("5", "0")
    assert meta["hailstorm.parallelism"] == "1"
    assert json.loads(meta["hailstorm.clock"]) == {"clicks:0": 7, "words:0": 41, "words:1": -1}
    assert meta["hailstorm.monoid"] == "per_key(Mean, key=(string, long))"
    assert meta["hailstorm.records"] == "2"
    assert meta["hailstorm.created"].endswith("+00:00")
    assert (meta["hailstorm.format"], meta["hailstorm.layout"]) == ("5", "per_key_nested_columns")
    assert meta["hailstorm.key_columns"] == "1"
    entry = json.loads(meta["hailstorm.entry_schema"])  # the {key, value} the columns hold
    assert [f["name"] for f in entry["fields"]] == ["key", "value"]
    assert entry["fields"][0]["type"]["name"].endswith(".PerKeyKey")
    assert entry["fields"][1]["type"]["name"].endswith(".Mean")
    assert records == [{  # a tuple key's positions and a Mean's fields are columns, in
        "keys": {"k0": ["fr", "de"], "k1": [3, 1]},  # the order the state holds its keys
        "values": {"sum": [10.0, 2.0], "count": [4, 1]},
    }]


def test_keyed_state_is_written_in_columns_of_at_most_column_keys(
        store: DirectorySnapshotStore) -> None:
    state = {f"k{i:05d}": i for i in reversed(range(2 * COLUMN_KEYS + 7))}
    ref = put(store, per_key(Count()), state)
    with open(ref.path, "rb") as f:
        records = list(fastavro.reader(f))
    assert [len(r["keys"]) for r in records] == [COLUMN_KEYS, COLUMN_KEYS, 7]
    assert [k for r in records for k in r["keys"]] == list(state)  # the state's order
    assert [v for r in records for v in r["values"]] == list(state.values())
    assert ref.records == len(state) and store.load(ref, per_key(Count()))[1] == state


def test_a_columns_record_with_fewer_values_than_keys_is_corrupt(
        store: DirectorySnapshotStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monoid = per_key(Count())
    monkeypatch.setattr(type(monoid), "avro_columns",
                        lambda self, state, keys, **_: (list(keys), [state[k] for k in keys][1:]))
    ref = put(store, monoid, {"a": 1, "b": 2})
    monkeypatch.undo()
    with pytest.raises(SnapshotCorruptError, match="a record of 2 keys and 1 values"):
        store.load(ref, monoid)


def test_format_1_files_still_read(store: DirectorySnapshotStore,
                                   put_format_1: PutFormat1) -> None:
    monoid = per_key(Record({"n": Count(), "total": Sum()}))
    state = {"b": {"n": 2, "total": 5}, "a": {"n": 1, "total": 3}}
    ref = put_format_1(store, monoid, state, clock=CLOCK)
    assert (ref.layout, ref.records) == ("per_key", 2)
    with open(ref.path, "rb") as f:
        reader = fastavro.reader(f)
        assert reader.metadata["hailstorm.format"] == "1"
        assert [r["key"] for r in reader] == ["b", "a"]  # a record per key, in state order
    assert store.load(ref, monoid) == (CLOCK, state)
    assert store.writer_schema(ref) == store.writer_schema(put(store, monoid, state, epoch=2))
    assert sorted(r["key"] for r in store.to_json_rows(ref)) == ["a", "b"]


def test_a_delta_in_columns_builds_on_a_format_1_base(
        store: DirectorySnapshotStore, put_format_1: PutFormat1) -> None:
    monoid = per_key(Count())
    base = put_format_1(store, monoid, {"a": 1, "b": 2}, clock=CLOCK)
    delta = put(store, monoid, {"b": 5, "c": 1}, epoch=2, base=base)
    assert (base.layout, delta.layout) == ("per_key", "per_key_columns")
    assert [r.epoch for r in store.chain(delta)] == [2, 1]
    assert store.load(delta, monoid)[1] == {"a": 1, "b": 5, "c": 1}
    raw = sorted((r["key"], r["value"]) for r in store.to_json_rows(delta))
    assert raw == [("a", 1), ("b", 5), ("c", 1)]


RECORD = per_key(Record({"n": Count(), "total": Sum(), "last": Max(), "seen": SetUnion()}))
"""A Record of every kind of field column: numbers, a nullable extremum and an array."""

record_values = st.fixed_dictionaries({
    "n": st.integers(0, 2**40),
    "total": st.integers(-(2**62), 2**62),
    "last": st.one_of(st.none(), st.integers(-(2**62), 2**62)),
    "seen": st.sets(st.text(max_size=3), max_size=3),
})


def test_record_values_are_written_in_nested_columns(store: DirectorySnapshotStore) -> None:
    state = {"b": {"n": 2, "total": 5, "last": None, "seen": {"x", "y"}},
             "a": {"n": 1, "total": -3, "last": 7, "seen": set()}}
    ref = put(store, RECORD, state)
    with open(ref.path, "rb") as f:
        reader = fastavro.reader(f)
        meta, records = reader.metadata, list(reader)
    assert (meta["hailstorm.format"], meta["hailstorm.layout"]) == ("4", "per_key_nested_columns")
    assert records == [{"keys": ["b", "a"], "values": {
        "n": [2, 1], "total": [5, -3], "last": [None, 7],
        "seen": {"lengths": [2, 0], "items": ["x", "y"]}}}]  # an array: lengths and items
    assert store.load(ref, RECORD) == (CLOCK, state)


def test_format_3_files_still_read(store: DirectorySnapshotStore,
                                   put_format_3: PutFormat3) -> None:
    state = {"b": {"n": 2, "total": 5, "last": None, "seen": {"x"}},
             "a": {"n": 1, "total": -3, "last": 7, "seen": set()}}
    ref = put_format_3(store, RECORD, state, clock=CLOCK)
    with open(ref.path, "rb") as f:
        reader = fastavro.reader(f)
        meta, records = reader.metadata, list(reader)
    assert (meta["hailstorm.format"], meta["hailstorm.layout"]) == ("3", "per_key_field_columns")
    assert records == [{"keys": ["b", "a"], "values": {
        "n": [2, 1], "total": [5, -3], "last": [None, 7], "seen": [["x"], []]}}]
    assert store.load(ref, RECORD) == (CLOCK, state)
    assert store.writer_schema(ref) == store.writer_schema(put(store, RECORD, state, epoch=2))


def test_values_that_are_no_record_or_array_keep_whole_value_columns(
        store: DirectorySnapshotStore) -> None:
    for epoch, (monoid, state) in enumerate([
            (per_key(Count()), {"a": 1}), (per_key(Max()), {"a": 3, "b": None})], start=1):
        ref = put(store, monoid, state, epoch=epoch)
        assert ref.layout == "per_key_columns"
        assert store.load(ref, monoid)[1] == state


def test_arrays_and_records_with_defaults_are_written_in_nested_columns(
        store: DirectorySnapshotStore) -> None:
    for epoch, (monoid, state) in enumerate([
            (per_key(TopK(2)), {"a": {"x": 2.0}, "b": {}}),  # an array of records
            (per_key(DefaultedPair()), {"a": (1, 2)})], start=1):  # a field with a default
        ref = put(store, monoid, state, epoch=epoch)
        assert ref.layout == "per_key_nested_columns"
        assert store.load(ref, monoid)[1] == state


@settings(max_examples=60, deadline=None,  # put_format_2 is a stateless function
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=st.dictionaries(st.text(max_size=4), record_values, max_size=40),
       changed=st.dictionaries(st.text(max_size=4), record_values, max_size=10))
def test_value_columns_read_as_format_2_files_do(
        tmp_path_factory: pytest.TempPathFactory, put_format_2: PutFormat2,
        put_format_3: PutFormat3, state: dict[str, Any], changed: dict[str, Any]) -> None:
    store = DirectorySnapshotStore(tmp_path_factory.mktemp("snapshots"))
    old = put_format_2(store, RECORD, state, bolt="old", clock=CLOCK)
    fields = put_format_3(store, RECORD, state, bolt="fields", clock=CLOCK)
    new = put(store, RECORD, state, bolt="new")
    assert (fields.layout, new.layout) == ("per_key_field_columns", "per_key_nested_columns")
    assert store.load(new, RECORD) == store.load(fields, RECORD) == \
        store.load(old, RECORD) == (CLOCK, state)
    assert store.writer_schema(new) == store.writer_schema(fields) == store.writer_schema(old)
    assert list(store.to_json_rows(new)) == list(store.to_json_rows(fields)) == \
        list(store.to_json_rows(old))
    delta = put(store, RECORD, changed, bolt="old", epoch=2, base=old)  # on a format-2 base
    assert store.load(delta, RECORD)[1] == {**state, **changed}
    delta = put(store, RECORD, changed, bolt="fields", epoch=2, base=fields)  # on format 3
    assert store.load(delta, RECORD)[1] == {**state, **changed}


def test_a_nullable_field_a_value_leaves_out_is_written_as_null(
        store: DirectorySnapshotStore) -> None:
    monoid = per_key(TaggedCount())
    state = {"a": (1, None), "b": (2, "x")}
    ref = put(store, monoid, state)
    assert ref.layout == "per_key_nested_columns"
    assert store.load(ref, monoid)[1] == state


@pytest.mark.parametrize(("layout", "problem"), [
    ("per_key_field_columns", r"field columns of \[1, 2\] values for 2 keys"),
    ("per_key_nested_columns", r"a column of 1 values for 2"),
])
def test_a_value_column_shorter_than_its_keys_is_corrupt(
        store: DirectorySnapshotStore, monkeypatch: pytest.MonkeyPatch,
        put_format_3: PutFormat3, layout: str, problem: str) -> None:
    monoid = per_key(Record({"n": Count(), "total": Sum()}))
    if layout == "per_key_field_columns":
        real_fields = layouts.value_columns
        monkeypatch.setattr(layouts, "value_columns", lambda values, names: {
            **real_fields(values, names), "total": [1]})
    else:
        real_nested = Record.avro_column
        monkeypatch.setattr(Record, "avro_column", lambda self, states: {
            **real_nested(self, states), "total": [1]})
    putter = put_format_3 if layout == "per_key_field_columns" else put
    ref = putter(store, monoid, {"a": {"n": 1, "total": 1}, "b": {"n": 2, "total": 2}})
    monkeypatch.undo()
    assert ref.layout == layout
    with pytest.raises(SnapshotCorruptError, match=problem):
        store.load(ref, monoid)


def test_large_state_streams_in_reasonable_time(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    state = {f"key-{i:06d}": i for i in range(100_000)}
    started = time.perf_counter()
    ref = put(store, monoid, state)
    _, loaded = store.load(ref, monoid)
    elapsed = time.perf_counter() - started
    assert loaded == state and ref.records == 100_000
    assert elapsed < 5, f"100k keys took {elapsed:.1f}s"
    with open(ref.path, "rb") as f:
        assert sum(1 for _ in fastavro.block_reader(f)) > 1  # written as many Avro blocks


# --------------------------------------------------------------------------- integrity


def test_flipped_byte_in_records_is_detected(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    ref = put(store, monoid, {f"k{i}": i for i in range(500)})
    data = bytearray(ref.path.read_bytes())
    data[-40] ^= 0x01
    ref.path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="checksum mismatch") as error:
        store.load(ref, monoid)
    assert str(ref.uri) in str(error.value)
    with pytest.raises(SnapshotCorruptError):
        list(store.to_json_rows(ref, monoid))


def test_tampered_clock_is_detected(store: DirectorySnapshotStore) -> None:
    ref = put(store, per_key(Count()), {"a": 1})
    data = ref.path.read_bytes()
    assert data.count(b'"words:0":41') == 1
    ref.path.write_bytes(data.replace(b'"words:0":41', b'"words:0":42'))
    with pytest.raises(SnapshotCorruptError, match="checksum mismatch"):
        store.load(ref.key, per_key(Count()))


def test_any_flipped_byte_fails_loudly(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    ref = put(store, monoid, {f"k{i}": i for i in range(50)})
    original = ref.path.read_bytes()
    for position in range(0, len(original), max(1, len(original) // 60)):
        data = bytearray(original)
        data[position] ^= 0x20
        ref.path.write_bytes(bytes(data))
        with pytest.raises(SnapshotError) as error:
            store.load(ref, monoid)
        assert str(ref.path) in str(error.value), position
    ref.path.write_bytes(original)
    assert store.load(ref, monoid)[1] == {f"k{i}": i for i in range(50)}


def test_truncated_and_foreign_files(store: DirectorySnapshotStore, tmp_path: Path) -> None:
    ref = put(store, per_key(Count()), {"a": 1, "b": 2})
    ref.path.write_bytes(ref.path.read_bytes()[:-10])
    with pytest.raises(SnapshotCorruptError):
        store.load(ref, per_key(Count()))
    ref.path.write_bytes(b"not avro at all")
    with pytest.raises(SnapshotCorruptError, match="unreadable Avro header"):
        store.resolve(ref.key)
    foreign = ref.path.with_name("epoch-000000000009.avro")
    with open(foreign, "wb") as f:
        fastavro.writer(f, {"type": "record", "name": "R", "fields": []}, [{}])
    with pytest.raises(SnapshotCorruptError, match="not a hailstorm snapshot"):
        store.resolve(str(foreign.relative_to(store.root)))


def test_a_flipped_header_value_reads_as_corrupt_not_as_a_mismatched_round(
        store: DirectorySnapshotStore) -> None:
    """A bit flipped in a header's metadata (here instance 1 turned into 0) fails the
    checksum before the round's files are matched up, so recovery falls back a round."""
    refs = [put(store, per_key(Count()), {"a": i}, instance=i, parallelism=2, epoch=4)
            for i in range(2)]
    data = bytearray(refs[1].path.read_bytes())
    at = data.find(b"hailstorm.instance") + len(b"hailstorm.instance") + 1
    assert data[at:at + 1] == b"1"
    data[at] = ord("0")
    refs[1].path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="checksum mismatch") as caught:
        store.load_for_instance([r.uri for r in refs], per_key(Count()), 0, 1)
    assert caught.value.uri == refs[1].uri


def test_refs_outside_the_store_are_refused(store: DirectorySnapshotStore,
                                            tmp_path: Path) -> None:
    ref = put(store, per_key(Count()), {"a": 1})
    outside = tmp_path / "elsewhere.avro"
    outside.write_bytes(ref.path.read_bytes())
    for uri in (outside.as_uri(), f"{store.root.as_uri()}/../elsewhere.avro",
                "file:///etc/passwd"):
        with pytest.raises(SnapshotError, match="outside the snapshot store"):
            store.resolve(uri)
    assert store.resolve(ref.uri) == store.resolve(ref.key)


def test_wrong_monoid_is_refused(store: DirectorySnapshotStore) -> None:
    ref = put(store, per_key(Count()), {"a": 1})
    with pytest.raises(SnapshotMismatchError, match=r"holds per_key\(Count\)"):
        store.load(ref, per_key(Sum("double")))
    with pytest.raises(SnapshotMismatchError):
        store.load(ref, Count())


# --------------------------------------------------------------------------- durability


def test_crash_before_rename_leaves_no_snapshot(
    store: DirectorySnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(src: Any, dst: Any) -> None:
        raise OSError("simulated crash between write and rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        put(store, per_key(Count()), {"a": 1}, epoch=4)
    directory = store.root / "wordcount" / "counts" / "0"
    assert list(directory.iterdir()) == []  # neither the final file nor the temporary one
    assert store.list("wordcount") == []


def test_file_and_directory_are_synced_around_the_rename(
    store: DirectorySnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        assert Path(src).name.startswith(".") and Path(dst).name == "epoch-000000000001.avro"
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    put(store, per_key(Count()), {"a": 1})
    assert events[-3:] == ["fsync-file", "replace", "fsync-dir"]


def test_never_overwritten_unless_identical(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    first = put(store, monoid, {"a": 1, "b": 2}, epoch=2)
    again = put(store, monoid, {"b": 2, "a": 1}, epoch=2)  # a retried write: accepted
    assert again == first
    with pytest.raises(SnapshotExistsError, match="never overwritten"):
        put(store, monoid, {"a": 1, "b": 3}, epoch=2)
    with pytest.raises(SnapshotExistsError):
        put(store, monoid, {"a": 1, "b": 2}, epoch=2, clock={("words", 0): 0})
    assert store.load(first, monoid)[1] == {"a": 1, "b": 2}
    assert [p.name for p in first.path.parent.iterdir()] == [first.path.name]


ORDER_FIGURES = Record({"spent": Sum(), "events": Count()})


@pytest.mark.parametrize("layout", [None, *sorted(layouts.KEYED_LAYOUTS)])
@pytest.mark.parametrize("monoid", [
    per_key(ORDER_FIGURES, key_type=("string", "long")),  # key columns, field columns
    per_key(TumblingWindow(10, Record({"users": HyperLogLog(4), "n": Count()}))),  # nested
], ids=["records-by-tuple", "windows"])
def test_a_round_written_again_in_another_key_order_is_the_same_round(
        layout: str | None, monoid: Monoid[Any]) -> None:
    """Snapshots write keys in the state's order, which another process holding the same
    state need not share: a round written again is the same when its entries are, in any
    order and chunks, and not when a value or a key differs."""
    def value(i: int) -> Any:
        if monoid.inner is ORDER_FIGURES:
            return {"spent": i, "events": i % 3}
        inner = monoid.inner
        return inner.absorb(inner.empty(), inner.lift_unexpiring(i % 10, inner.inner.lift(
            users=HyperLogLog(4).lift(f"u{i}"), n=1)))

    def key(i: int) -> Any:
        return (f"k{i % 7}", i) if monoid.inner is ORDER_FIGURES else f"k{i}"

    state = {key(i): value(i) for i in range(COLUMN_KEYS + 40)}

    def written(state: dict[Any, Any]) -> io.BytesIO:
        raw = io.BytesIO()
        write_snapshot(raw, topology="t", bolt="b", instance=0, parallelism=1, epoch=3,
                       clock=CLOCK, monoid=monoid, state=state, layout=layout)
        return raw

    first = written(state)
    shuffled = list(state.items())
    random.Random(4).shuffle(shuffled)
    assert first.getvalue() != written(dict(shuffled)).getvalue()  # other bytes
    assert same_content(first, written(dict(shuffled)), "t/b/0")
    changed = dict(shuffled)
    changed[key(5)] = value(6)
    assert not same_content(first, written(changed), "t/b/0")
    renamed = dict(shuffled)
    renamed[key(COLUMN_KEYS + 41)] = renamed.pop(key(5))
    assert not same_content(first, written(renamed), "t/b/0")


def test_invalid_names_and_instances(store: DirectorySnapshotStore) -> None:
    with pytest.raises(ValueError, match="bolt name"):
        put(store, Count(), 1, bolt="../escape")
    with pytest.raises(ValueError, match="out of range"):
        put(store, Count(), 1, instance=2, parallelism=2)
    with pytest.raises(ValueError, match="not a snapshot key"):
        store.resolve("../outside.avro")


# --------------------------------------------------------------------------- re-sharding


def write_round(
    store: DirectorySnapshotStore, monoid: Monoid[Any], state: dict[Any, Any], parallelism: int
) -> list[SnapshotRef]:
    shards: list[dict[Any, Any]] = [{} for _ in range(parallelism)]
    for key, value in state.items():
        shards[route(key, parallelism)][key] = value
    return [
        put(store, monoid, shard, instance=i, parallelism=parallelism, epoch=6)
        for i, shard in enumerate(shards)
    ]


@pytest.mark.parametrize("new_parallelism", [1, 2, 3, 5])
def test_resharding_keyed_state(store: DirectorySnapshotStore, new_parallelism: int) -> None:
    monoid = per_key(Count(), key_type=("string", "long"))
    state = {(f"k{i % 37}", i): i for i in range(1000)}
    refs = write_round(store, monoid, state, parallelism=2)
    union: dict[Any, Any] = {}
    for instance in range(new_parallelism):
        clock, part = store.load_for_instance(
            list(reversed(refs)), monoid, instance, new_parallelism
        )
        assert clock == CLOCK
        assert all(route(k, new_parallelism) == instance for k in part)
        assert union.keys().isdisjoint(part)
        union.update(part)
    assert union == state


def test_resharding_accepts_keys_and_a_custom_route(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    state = {f"w{i}": i for i in range(100)}
    refs = write_round(store, monoid, state, parallelism=3)
    by_length = [
        store.load_for_instance([r.key for r in refs], monoid, i, 2, lambda k, n: len(k) % n)[1]
        for i in range(2)
    ]
    assert by_length[0] == {k: v for k, v in state.items() if len(k) % 2 == 0}
    assert by_length[0] | by_length[1] == state


def test_resharding_non_keyed_state(store: DirectorySnapshotStore) -> None:
    monoid = Mean()
    refs = [
        put(store, monoid, (10.0, 2), instance=0, parallelism=2, epoch=6),
        put(store, monoid, (5.0, 3), instance=1, parallelism=2, epoch=6),
    ]
    assert store.load_for_instance(refs, monoid, 0, 1) == (CLOCK, (15.0, 5))
    assert store.load_for_instance(refs, monoid, 1, 2) == (CLOCK, (5.0, 3))  # unchanged
    with pytest.raises(SnapshotMismatchError, match="not keyed"):
        store.load_for_instance(refs, monoid, 0, 3)


def test_resharding_needs_one_complete_round(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    refs = write_round(store, monoid, {f"k{i}": i for i in range(20)}, parallelism=3)
    with pytest.raises(SnapshotMismatchError, match=r"needs instances 0..2"):
        store.load_for_instance(refs[:2], monoid, 0, 1)
    other = put(store, monoid, {}, instance=2, parallelism=3, epoch=7)
    with pytest.raises(SnapshotMismatchError, match="same round"):
        store.load_for_instance([*refs[:2], other], monoid, 0, 1)
    with pytest.raises(SnapshotMismatchError, match="no snapshots"):
        store.load_for_instance([], monoid, 0, 1)


# --------------------------------------------------------------------------- listing, rows, GC


def test_list_sorted_with_details(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    put(store, monoid, {"a": 1, "b": 2}, bolt="totals", epoch=2)
    put(store, monoid, {"a": 1}, bolt="counts", instance=1, parallelism=2, epoch=1)
    put(store, monoid, {"a": 1}, bolt="counts", instance=0, parallelism=2, epoch=2)
    put(store, monoid, {}, bolt="counts", instance=0, parallelism=2, epoch=1)
    (store.root / "wordcount" / "counts" / "0" / ".epoch-000000000003.avro.1.x.tmp").touch()
    listed = store.list("wordcount")
    assert [(r.bolt, r.instance, r.epoch) for r in listed] == [
        ("counts", 0, 1),
        ("counts", 0, 2),
        ("counts", 1, 1),
        ("totals", 0, 2),
    ]
    assert [r.records for r in listed] == [0, 1, 1, 2]
    assert all(r.size_bytes > 0 and r.clock == CLOCK for r in listed)
    assert store.list("other") == []
    assert [(r.instance, r.epoch) for r in store.latest_round("wordcount", "counts")] == [(0, 2)]
    assert store.latest_round("wordcount", "missing") == []


def test_json_rows(store: DirectorySnapshotStore) -> None:
    keyed = per_key(Mean(), key_type=("string", "long"))
    ref = put(store, keyed, {("fr", 3): (10.0, 4)})
    assert list(store.to_json_rows(ref, keyed)) == [{"key": ["fr", 3], "value": [10.0, 4]}]
    assert list(store.to_json_rows(ref)) == [
        {"key": {"k0": "fr", "k1": 3}, "value": {"sum": 10.0, "count": 4}}
    ]
    whole = put(store, SetUnion(), {"b", "a"}, bolt="uniques")
    assert list(store.to_json_rows(whole, SetUnion())) == [{"state": ["a", "b"]}]
    hll = put(store, HyperLogLog(precision=6), hll_state(), bolt="hll")
    [row] = store.to_json_rows(hll.key, HyperLogLog(precision=6))
    json.dumps(row)  # bytes became text


def test_delete_older_than(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    for epoch in (1, 2, 3, 4):
        put(store, monoid, {"a": epoch}, bolt="counts", epoch=epoch)
    put(store, monoid, {"a": 1}, bolt="rare", epoch=1)  # its latest round: always kept
    stale = store.root / "wordcount" / "counts" / "0" / ".epoch-000000000002.avro.9.dead.tmp"
    busy = store.root / "wordcount" / "counts" / "0" / ".epoch-000000000005.avro.9.live.tmp"
    stale.touch()
    busy.touch()
    removed = store.delete_older_than("wordcount", 3)
    assert sorted(removed) == [
        "wordcount/counts/0/.epoch-000000000002.avro.9.dead.tmp",
        "wordcount/counts/0/epoch-000000000001.avro",
        "wordcount/counts/0/epoch-000000000002.avro",
    ]
    assert [(r.bolt, r.epoch) for r in store.list("wordcount")] == [
        ("counts", 3),
        ("counts", 4),
        ("rare", 1),
    ]
    assert busy.exists() and not stale.exists()
    assert store.delete_older_than("wordcount", 3) == []
    ref = store.list("wordcount")[0]
    store.delete(ref)
    store.delete(ref.key)  # already gone: no error
    assert len(store.list("wordcount")) == 2


def test_forget_rounds_keeps_the_committed_rounds_and_anything_newer(
    store: DirectorySnapshotStore,
) -> None:
    monoid = per_key(Count())
    for epoch in (1, 2, 3, 5, 6, 7):
        put(store, monoid, {"a": epoch}, bolt="counts", epoch=epoch)
    put(store, monoid, {"a": 1}, bolt="rare", epoch=2)  # an old round of another bolt
    stale = store.root / "wordcount" / "counts" / "0" / ".epoch-000000000004.avro.9.dead.tmp"
    writing = store.root / "wordcount" / "counts" / "0" / ".epoch-000000000007.avro.9.live.tmp"
    stale.touch()
    writing.touch()
    # Round 6 committed; round 3 was the previous committed one; 5 was abandoned.
    removed = store.forget_rounds("wordcount", 6, {6, 3})
    assert sorted(removed) == [
        "wordcount/counts/0/.epoch-000000000004.avro.9.dead.tmp",
        "wordcount/counts/0/epoch-000000000001.avro",
        "wordcount/counts/0/epoch-000000000002.avro",
        "wordcount/counts/0/epoch-000000000005.avro",
        "wordcount/rare/0/epoch-000000000002.avro",
    ]
    assert [(r.bolt, r.epoch) for r in store.list("wordcount")] == [
        ("counts", 3), ("counts", 6), ("counts", 7)
    ]
    assert writing.exists()
    assert store.forget_rounds("wordcount", 6, {6, 3}) == []
    assert store.forget_rounds("nothing_here", 6, ()) == []


def test_forget_rounds_spares_recent_files(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    old = put(store, monoid, {"a": 1}, bolt="counts", epoch=1)
    recent = put(store, monoid, {"a": 2}, bolt="counts", epoch=2)
    put(store, monoid, {"a": 3}, bolt="counts", epoch=3)
    os.utime(old.path, (1_000.0, 1_000.0))
    os.utime(recent.path, (2_000.0, 2_000.0))
    assert store.forget_rounds("wordcount", 3, {3}, written_before=1_500.0) == [old.key]
    assert [r.epoch for r in store.list("wordcount")] == [2, 3]


def test_forget_rounds_reads_a_files_base_once_and_again_once_the_file_changed(
        store: DirectorySnapshotStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A negotiator follows the same chains of deltas at every commit: a file's header is
    read once while its ``stat`` stays the same, and again when the file was replaced."""
    first, second, third = chain_of_three(store)
    read: list[str] = []
    ref_at = store._ref_at

    def counted(locator: Any) -> SnapshotRef:
        read.append(Path(locator).name)
        return ref_at(locator)
    monkeypatch.setattr(store, "_ref_at", counted)
    assert store.forget_rounds("wordcount", 3, {3}) == []  # 3 builds on 2, 2 on 1
    assert sorted(read) == ["epoch-000000000001.avro", "epoch-000000000002.avro",
                            "epoch-000000000003.avro"]
    read.clear()
    assert store.forget_rounds("wordcount", 3, {3}) == []
    assert read == []
    elsewhere = DirectorySnapshotStore(tmp_path / "elsewhere")  # round 3 whole, put in place
    whole = put(elsewhere, per_key(Count()), {"a": 5, "b": 2, "c": 1, "d": 7}, epoch=3)
    assert whole.path is not None and third.path is not None
    os.replace(whole.path, third.path)
    assert sorted(store.forget_rounds("wordcount", 3, {3})) == [first.key, second.key]
    assert read == ["epoch-000000000003.avro"]


# --------------------------------------------------------------------------- deltas


def chain_of_three(store: DirectorySnapshotStore, instance: int = 0,
                   parallelism: int = 1) -> list[SnapshotRef]:
    """Round 1 whole, 2 and 3 deltas: the state at 3 is {"a": 5, "b": 2, "c": 1, "d": 7}."""
    monoid = per_key(Count())
    kw: dict[str, Any] = {"instance": instance, "parallelism": parallelism}
    first = put(store, monoid, {"a": 1, "b": 2, "c": 1}, epoch=1, **kw)
    second = put(store, monoid, {"a": 4}, epoch=2, base=first, **kw)
    third = put(store, monoid, {"a": 5, "d": 7}, epoch=3, base=second, **kw)
    return [first, second, third]


def test_a_delta_loads_as_its_base_with_its_keys_replaced(
        store: DirectorySnapshotStore) -> None:
    first, second, third = chain_of_three(store)
    assert (first.base, second.base, third.base) == (None, first.key, second.key)
    assert (second.records, third.records) == (1, 2)
    monoid = per_key(Count())
    assert store.load(second.key, monoid) == (CLOCK, {"a": 4, "b": 2, "c": 1})
    assert store.load(third.uri, monoid)[1] == {"a": 5, "b": 2, "c": 1, "d": 7}
    assert [r.epoch for r in store.chain(third)] == [3, 2, 1]
    assert store.load_for_instance([third.key], monoid, 0, 1)[1] == {
        "a": 5, "b": 2, "c": 1, "d": 7}
    rows = list(store.to_json_rows(third, monoid))
    assert sorted((r["key"], r["value"]) for r in rows) == [("a", 5), ("b", 2), ("c", 1),
                                                             ("d", 7)]
    raw = list(store.to_json_rows(third))  # no monoid: the records, a delta's replacing
    assert sorted((r["key"], r["value"]) for r in raw) == [("a", 5), ("b", 2), ("c", 1),
                                                            ("d", 7)]
    with open(third.path, "rb") as fo:  # alone, a delta is a plain Avro file of its keys
        assert [k for r in fastavro.reader(fo) for k in r["keys"]] == ["a", "d"]
    assert store.list("wordcount")[2].to_json()["base"] == second.key


def test_a_held_state_follows_its_chain_reading_only_the_newer_deltas(
        store: DirectorySnapshotStore) -> None:
    """What a standby does: the state of round 1, then of 2, then of 3, each time reading
    only what came after what it holds; the same state as loading each round whole."""
    first, second, third = chain_of_three(store)
    monoid = per_key(Count())
    held = store.load(first, monoid)[1]
    for previous, ref in ((first, second), (second, third)):
        assert store.load_after(ref, monoid, previous, held) == store.load(ref, monoid)
    assert store.load_after(third, monoid, third, held) == store.load(third, monoid)
    # Not built on what it holds: a newer whole snapshot, an older round, another monoid.
    fresh = put(store, monoid, {"z": 1}, epoch=4)
    assert store.load_after(fresh, monoid, third, dict(held)) is None
    assert store.load_after(first, monoid, third, dict(held)) is None
    assert store.load_after(third, per_key(Sum()), first, {}) is None


def test_a_differential_snapshot_loads_on_the_whole_one_and_a_held_state_loads_it_whole(
        store: DirectorySnapshotStore) -> None:
    """Round 4 holds every key changed since the whole round 1, on top of it: loading it
    reads 4 and 1; a standby holding round 2 or 3 loads round 5 whole (a differential
    snapshot's file cannot be told from a first delta on 1 after a fall back to it), one
    holding 4 reads only 5; the rounds 2 and 3 no longer hold anything a load needs."""
    first, second, third = chain_of_three(store)
    monoid = per_key(Count())
    differential = put(store, monoid, {"a": 6, "d": 7, "e": 1}, epoch=4, base=first)
    fifth = put(store, monoid, {"b": 3}, epoch=5, base=differential)
    assert [r.epoch for r in store.chain(fifth)] == [5, 4, 1]
    at_fifth = {"a": 6, "b": 3, "c": 1, "d": 7, "e": 1}
    assert store.load(fifth, monoid)[1] == at_fifth
    for held_ref in (second, third):
        assert store.load_after(fifth, monoid, held_ref, store.load(held_ref, monoid)[1]) \
            is None
    held = store.load(differential, monoid)[1]
    assert store.load_after(fifth, monoid, differential, held) == (CLOCK, at_fifth)
    store.forget_rounds("wordcount", 4, keep_epochs=[4])
    assert [r.epoch for r in store.list("wordcount")] == [1, 4, 5]


def test_deltas_re_shard_like_whole_snapshots(store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    heads = []
    for instance in (0, 1):
        state = {f"k{i}": i + 1 for i in range(40) if route(f"k{i}", 2) == instance}
        first = put(store, monoid, state, instance=instance, parallelism=2, epoch=1)
        changed = {k: v * 10 for k, v in state.items() if int(k[1:]) % 3 == 0}
        heads.append(put(store, monoid, changed, instance=instance, parallelism=2, epoch=2,
                         base=first))
    whole = {f"k{i}": (i + 1) * (10 if i % 3 == 0 else 1) for i in range(40)}
    for parallelism in (1, 3):
        got: dict[str, int] = {}
        for instance in range(parallelism):
            part = store.load_for_instance([h.key for h in heads], monoid, instance,
                                           parallelism)[1]
            assert all(route(k, parallelism) == instance for k in part)
            got.update(part)
        assert got == whole


def test_a_delta_builds_only_on_an_earlier_round_of_its_own_instance(
        store: DirectorySnapshotStore) -> None:
    monoid = per_key(Count())
    first = put(store, monoid, {"a": 1}, epoch=2)
    for wrong in ({"epoch": 2}, {"epoch": 1}, {"epoch": 3, "instance": 1, "parallelism": 2},
                  {"epoch": 3, "bolt": "other"}):
        with pytest.raises(ValueError, match="cannot be the base"):
            put(store, monoid, {"a": 2}, base=first, **wrong)
    with pytest.raises(ValueError, match="not keyed"):
        put(store, Count(), 3, bolt="total", epoch=3,
            base=put(store, Count(), 2, bolt="total", epoch=2))


def test_a_damaged_or_missing_base_is_the_corruption_of_the_round_built_on_it(
        store: DirectorySnapshotStore) -> None:
    first, second, third = chain_of_three(store)
    monoid = per_key(Count())
    data = bytearray(first.path.read_bytes())
    data[-5] ^= 0xFF
    first.path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError) as caught:
        store.load(third.key, monoid)
    assert caught.value.uri == third.uri and first.uri in str(caught.value)
    with pytest.raises(SnapshotCorruptError) as caught:
        store.load_for_instance([third.uri], monoid, 0, 1)
    assert caught.value.uri == third.uri  # what the negotiator finds in the round
    second.path.unlink()
    with pytest.raises(SnapshotCorruptError, match=r"base .* cannot be read") as caught:
        store.load(third.key, monoid)
    assert caught.value.uri == third.uri


def test_garbage_collection_keeps_what_kept_rounds_build_on(
        store: DirectorySnapshotStore) -> None:
    first, second, third = chain_of_three(store)
    monoid = per_key(Count())
    fourth = put(store, monoid, {"a": 1, "b": 1}, epoch=4)  # whole again
    put(store, monoid, {"b": 9}, epoch=5, base=fourth)
    # Round 5 committed, 3 the previous one: 1 and 2 are what 3 builds on.
    assert store.forget_rounds("wordcount", 5, {5, 3}) == []
    assert store.load(third.key, monoid)[1] == {"a": 5, "b": 2, "c": 1, "d": 7}
    # Round 6 (a delta on 5) committed: 1 to 3 are garbage now; 4 is what 5 builds on.
    sixth = put(store, monoid, {"c": 3}, epoch=6, base=store.resolve(
        "wordcount/counts/0/epoch-000000000005.avro"))
    assert sorted(store.forget_rounds("wordcount", 6, {6, 5})) == [r.key for r in
                                                                   (first, second, third)]
    assert store.load(sixth.key, monoid)[1] == {"a": 1, "b": 9, "c": 3}
    assert store.delete_older_than("wordcount", 6) == []  # 6 is newest; 4 and 5 under it
    assert [r.epoch for r in store.list("wordcount")] == [4, 5, 6]


@pytest.mark.parametrize(("topology", "bolt"), [("wc\n", "counts"), ("wc", "counts\n")])
def test_snapshot_keys_refuse_names_ending_in_a_newline(topology: str, bolt: str) -> None:
    with pytest.raises(ValueError, match="name"):
        snapshot_key(topology, bolt, 0, 1)


def test_a_keyed_snapshot_with_a_key_twice_reads_as_corrupt(
        store: DirectorySnapshotStore) -> None:
    """Loading puts a file's records into the state without looking at each key: the count
    of distinct keys against the records is what catches a file naming a key twice."""
    monoid = per_key(Count())
    state = {"a": 1, "b": 2, "c": 3}

    class NamingATwice(dict[str, int]):
        def __iter__(self) -> Iterator[str]:
            return iter(["a", "a", "c"])

    ref = put(store, monoid, NamingATwice(state))
    with pytest.raises(SnapshotCorruptError, match="3 records, but 2 distinct keys"):
        store.load(ref, monoid)
    with pytest.raises(SnapshotCorruptError, match="3 records, but 2 distinct keys"):
        store.load_for_instance([ref], monoid, 0, 2)  # re-sharded: read the same way
    good = put(store, monoid, state, epoch=4)
    assert store.load(good, monoid) == (CLOCK, state)
