"""Forged snapshot refs (as someone who can write ZooKeeper would plant them) never make the
store delete a file it does not own: ``../`` paths, absolute paths and URIs, files of another
topology or of a round not kept, files that are not snapshots, links out of the store. The
refs are checked before anything is removed, on a directory and on an fsspec store."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.monoids import Count, per_key
from hailstorm.snapshots import (
    DirectorySnapshotStore,
    FsspecSnapshotStore,
    SnapshotRef,
    SnapshotRefRefused,
    SnapshotStore,
    snapshot_key,
    snapshot_key_problem,
)

MONOID = per_key(Count())


def _put(store: SnapshotStore, epoch: int, *, topology: str = "wc", bolt: str = "counts",
         instance: int = 0) -> SnapshotRef:
    return store.put(topology=topology, bolt=bolt, instance=instance, parallelism=1,
                     epoch=epoch, clock={("words", 0): epoch}, monoid=MONOID,
                     state={"a": epoch})


@pytest.fixture
def store(tmp_path: Path) -> DirectorySnapshotStore:
    return DirectorySnapshotStore(tmp_path / "store")


@given(st.sampled_from(["wc", "other"]), st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,8}",
                                                        fullmatch=True),
       st.integers(0, 99), st.integers(0, 10**6))
def test_every_key_the_store_writes_passes_the_check(topology: str, bolt: str, instance: int,
                                                     epoch: int) -> None:
    key = snapshot_key(topology, bolt, instance, epoch)
    assert snapshot_key_problem(key, topology) is None
    assert snapshot_key_problem(key, topology, {epoch}) is None
    assert snapshot_key_problem(key, topology, {epoch + 1}) is not None
    assert snapshot_key_problem(key, f"{topology}x") is not None


@pytest.mark.parametrize("key", [
    "../wc/counts/0/epoch-000000000001.avro",
    "wc/../0/epoch-000000000001.avro",
    "wc/../../0/epoch-000000000001.avro",
    "wc/counts/00/epoch-000000000001.avro",
    "wc/counts/0/epoch-1.avro",
    "wc/counts/0/../../x/0/epoch-000000000001.avro",
    "wc/counts/0/.epoch-000000000001.avro.1.x.tmp",
    "wc/stack.json",
    "/etc/passwd",
    "wc/counts/0/epoch-000000000001.avro\n",
])
def test_malformed_keys_are_refused(key: str) -> None:
    assert snapshot_key_problem(key, "wc") is not None


def _forged(store: DirectorySnapshotStore, tmp_path: Path) -> list[str]:
    """Refs a ZooKeeper writer could plant, each naming a file that exists."""
    outside = tmp_path / "outside.avro"
    outside.write_bytes(b"precious")
    other = _put(store, 5, topology="other")
    notes = store.root / "wc" / "notes.txt"
    notes.write_text("not a snapshot")
    return [
        "../outside.avro",
        str(outside),
        outside.as_uri(),
        f"{store.root.as_uri()}/../outside.avro",
        other.key,  # another topology's file
        other.uri,
        "wc/notes.txt",
        (store.root / "wc" / "counts" / "0" / "epoch-000000000001.avro").as_uri(),  # old round
        "table:/etc/passwd",
    ]


def test_forged_keep_refs_delete_nothing(store: DirectorySnapshotStore, tmp_path: Path) -> None:
    refs = {epoch: _put(store, epoch) for epoch in (1, 2, 3, 4, 5)}
    forged = _forged(store, tmp_path)
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    for ref in forged:
        with pytest.raises(SnapshotRefRefused, match="refused"):
            store.forget_rounds("wc", 5, {4, 5}, keep_refs=[refs[5].uri, ref])
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before
    # The genuine refs pass and are what is kept.
    removed = store.forget_rounds("wc", 5, {4, 5}, keep_refs=[refs[4].uri, refs[5].key])
    assert sorted(removed) == [refs[e].key for e in (1, 2, 3)]
    assert (tmp_path / "outside.avro").read_bytes() == b"precious"


def test_delete_refuses_anything_but_a_snapshot_file(store: DirectorySnapshotStore,
                                                     tmp_path: Path) -> None:
    ref = _put(store, 1)
    for forged in _forged(store, tmp_path):
        if forged.startswith("table:") or "other" in forged or "epoch-000000000001" in forged:
            continue  # a sink's name; snapshot files of the store: delete() may remove them
        with pytest.raises(SnapshotRefRefused):
            store.delete(forged)
    assert (tmp_path / "outside.avro").exists() and (store.root / "wc" / "notes.txt").exists()
    store.delete(ref)
    assert not ref.path.exists()


def test_a_link_out_of_the_store_is_not_followed_to_delete(store: DirectorySnapshotStore,
                                                           tmp_path: Path) -> None:
    """A bolt directory that is a link to elsewhere: its files look like garbage rounds, but
    they are not the store's, and stay."""
    _put(store, 9)
    elsewhere = tmp_path / "elsewhere"
    victim_store = DirectorySnapshotStore(elsewhere)
    victim = _put(victim_store, 1, topology="wc", bolt="counts")
    (store.root / "wc" / "linked").symlink_to(elsewhere / "wc" / "counts")
    linked_key = "wc/linked/0/epoch-000000000001.avro"
    assert store.forget_rounds("wc", 9, {9}) == []
    with pytest.raises(SnapshotRefRefused, match="outside the snapshot store"):
        store.delete(linked_key)
    assert victim.path.exists()


def test_an_object_store_refuses_forged_refs_too() -> None:
    store = FsspecSnapshotStore(f"memory://hailstorm-{uuid.uuid4().hex[:8]}/snapshots")
    refs = {epoch: _put(store, epoch) for epoch in (1, 2, 3)}
    other = _put(store, 3, topology="other")
    for forged in ("../x/counts/0/epoch-000000000003.avro", "/etc/passwd",
                   "memory://elsewhere/wc/counts/0/epoch-000000000003.avro", other.uri,
                   refs[1].uri):
        with pytest.raises(SnapshotRefRefused):
            store.forget_rounds("wc", 3, {2, 3}, keep_refs=[forged])
    assert [r.epoch for r in store.list("wc")] == [1, 2, 3]
    with pytest.raises(SnapshotRefRefused):
        store.delete("wc/../other/counts/0/epoch-000000000003.avro")
    assert store.forget_rounds("wc", 3, {2, 3}, keep_refs=[refs[3].uri]) == [refs[1].key]
    assert [r.epoch for r in store.list("other")] == [3]
