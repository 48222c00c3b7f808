"""The snapshot store on an fsspec filesystem without rename (``memory://`` here; S3 through
s3fs against a real S3 server in ``tests/integration/test_s3_snapshots.py``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from hailstorm.monoids import Count, Mean, Monoid, per_key
from hailstorm.protocol.clock import Clock
from hailstorm.snapshots import (
    DirectorySnapshotStore,
    FsspecSnapshotStore,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotRef,
    open_store,
)

CLOCK: Clock = {("words", 0): 41, ("words", 1): -1}


@pytest.fixture
def store() -> FsspecSnapshotStore:
    return FsspecSnapshotStore(f"memory://hailstorm-{uuid.uuid4().hex[:8]}/snapshots")


def put(store: FsspecSnapshotStore, monoid: Monoid[Any], state: Any, *, bolt: str = "counts",
        instance: int = 0, parallelism: int = 1, epoch: int = 1,
        base: SnapshotRef | None = None) -> SnapshotRef:
    return store.put(topology="wordcount", bolt=bolt, instance=instance,
                     parallelism=parallelism, epoch=epoch, clock=CLOCK, monoid=monoid,
                     state=state, base=base)


def test_locations_pick_their_store(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path), DirectorySnapshotStore)
    assert isinstance(open_store(tmp_path.as_uri()), DirectorySnapshotStore)
    assert open_store(tmp_path.as_uri()).root == tmp_path  # type: ignore[attr-defined]
    assert isinstance(open_store("memory://bucket/prefix"), FsspecSnapshotStore)


def test_round_trip_and_refs(store: FsspecSnapshotStore) -> None:
    monoid = per_key(Count())
    ref = put(store, monoid, {"a": 3, "b": 1}, epoch=4)
    assert ref.key == "wordcount/counts/0/epoch-000000000004.avro"
    assert ref.uri == f"{store.url}/{ref.key}"
    assert ref.duration_s is not None
    assert store.load(ref, monoid) == (CLOCK, {"a": 3, "b": 1})
    assert store.load(ref.uri, monoid) == store.load(ref.key, monoid)
    assert store.resolve(ref.uri) == ref


def test_never_overwritten_unless_identical(store: FsspecSnapshotStore) -> None:
    monoid = per_key(Count())
    first = put(store, monoid, {"a": 1, "b": 2}, epoch=2)
    assert put(store, monoid, {"b": 2, "a": 1}, epoch=2) == first  # a retried write
    with pytest.raises(SnapshotExistsError, match="never overwritten"):
        put(store, monoid, {"a": 1, "b": 3}, epoch=2)
    assert store.load(first, monoid)[1] == {"a": 1, "b": 2}


def test_a_corrupt_object_is_detected(store: FsspecSnapshotStore) -> None:
    monoid = Mean()
    ref = put(store, monoid, (2.0, 1))
    path = f"{store.base}/{ref.key}"
    data = bytearray(store.fs.cat_file(path))
    data[-3] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))
    with pytest.raises(SnapshotCorruptError):
        store.load(ref, monoid)


def test_refs_outside_the_store_are_refused(store: FsspecSnapshotStore) -> None:
    with pytest.raises(SnapshotError, match="outside the snapshot store"):
        store.resolve("memory://elsewhere/wordcount/counts/0/epoch-000000000001.avro")
    for key in ("../x.avro", "/abs/x.avro", "wordcount//x.avro"):
        with pytest.raises(ValueError, match="not a snapshot key"):
            store.resolve(key)


def test_listing_resharding_and_garbage_collection(store: FsspecSnapshotStore) -> None:
    monoid = per_key(Count())
    for epoch in (1, 2, 3):
        for instance in (0, 1):
            put(store, monoid, {f"k{instance}{epoch}": epoch}, instance=instance,
                parallelism=2, epoch=epoch)
    put(store, monoid, {"a": 1}, bolt="rare", epoch=1)
    store.fs.pipe_file(f"{store.base}/wordcount/counts/notes.txt", b"not a snapshot")
    assert [(r.bolt, r.instance, r.epoch) for r in store.list("wordcount")] == [
        ("counts", 0, 1), ("counts", 0, 2), ("counts", 0, 3),
        ("counts", 1, 1), ("counts", 1, 2), ("counts", 1, 3), ("rare", 0, 1)]
    round3 = store.latest_round("wordcount", "counts")
    assert store.load_for_instance(round3, monoid, 0, 1) == (CLOCK, {"k03": 3, "k13": 3})
    assert sorted(store.delete_older_than("wordcount", 2)) == [
        "wordcount/counts/0/epoch-000000000001.avro", "wordcount/counts/1/epoch-000000000001.avro"]
    assert sorted(store.forget_rounds("wordcount", 3, {3})) == [
        "wordcount/counts/0/epoch-000000000002.avro", "wordcount/counts/1/epoch-000000000002.avro",
        "wordcount/rare/0/epoch-000000000001.avro"]
    assert store.forget_rounds("wordcount", 3, {3}, written_before=0.0) == []
    assert store.forget_rounds("nothing_here", 3, ()) == []
    ref = store.list("wordcount")[0]
    store.delete(ref)
    store.delete(ref.key)  # gone already: no error
    assert len(store.list("wordcount")) == 1


def test_deltas_load_through_their_chain_and_keep_it_from_collection(
        store: FsspecSnapshotStore) -> None:
    monoid = per_key(Count())
    first = put(store, monoid, {"a": 1, "b": 2}, epoch=1)
    second = put(store, monoid, {"b": 3}, epoch=2, base=first)
    put(store, monoid, {"x": 1}, epoch=3)  # an abandoned whole round
    assert store.load(second.uri, monoid)[1] == {"a": 1, "b": 3}
    assert store.forget_rounds("wordcount", 3, {2}) == [
        "wordcount/counts/0/epoch-000000000003.avro"]
    assert [r.epoch for r in store.list("wordcount")] == [1, 2]


@pytest.mark.parametrize("kind", ["directory", "fsspec"])
def test_a_listing_skips_a_file_collected_while_it_lists(kind: str, tmp_path: Path,
                                                         store: FsspecSnapshotStore) -> None:
    """The negotiator's garbage collection may delete a file between the listing of the
    files and the read of their headers: the listing leaves it out instead of failing."""
    chosen: DirectorySnapshotStore | FsspecSnapshotStore = (
        DirectorySnapshotStore(tmp_path) if kind == "directory" else store)
    monoid = per_key(Count())
    for epoch in (1, 2):
        put(chosen, monoid, {"a": epoch}, epoch=epoch)  # type: ignore[arg-type]
    files = type(chosen)._files

    def collected_meanwhile(self: Any, topology: str) -> Any:
        for found in files(self, topology):
            if found[2] == 1:  # epoch 1 goes, by another process's hand
                found[3].unlink() if kind == "directory" else self.fs.rm_file(found[3])
            yield found

    setattr(chosen, "_files", collected_meanwhile.__get__(chosen))  # noqa: B010
    assert [r.epoch for r in chosen.list("wordcount")] == [2]
