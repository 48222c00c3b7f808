"""Which round of a bolt's snapshots to read (``hailstorm export``, ``hailstorm query``).

Which round (:func:`choose_round`): ``epoch`` when given; else the committed round in
ZooKeeper (``/hailstorm/<topology>/committed``) when ZooKeeper is configured and has one;
else the newest complete round in the snapshot store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hailstorm.export.errors import ExportError
from hailstorm.protocol.clock import Clock
from hailstorm.snapshots import SnapshotError, SnapshotRef, SnapshotStore, snapshot_key
from hailstorm.zookeeper import zk_client


@dataclass(frozen=True)
class Round:
    """One complete round of a bolt's snapshots, and why it was chosen."""

    epoch: int
    clock: Clock
    refs: tuple[SnapshotRef, ...]
    source: str
    """``"--epoch"``, ``"committed in ZooKeeper"`` or ``"latest complete round"``."""


def complete_rounds(
    store: SnapshotStore, topology: str, bolt: str
) -> dict[int, tuple[SnapshotRef, ...]]:
    """Epoch -> the refs of every round of ``bolt`` that has all its instances."""
    by_epoch: dict[int, list[SnapshotRef]] = {}
    for ref in store.list(topology):
        if ref.bolt == bolt:
            by_epoch.setdefault(ref.epoch, []).append(ref)
    rounds = {}
    for epoch, refs in by_epoch.items():
        refs.sort(key=lambda r: r.instance)
        n = refs[0].parallelism
        same = all(r.parallelism == n and r.clock == refs[0].clock for r in refs)
        if same and [r.instance for r in refs] == list(range(n)):
            rounds[epoch] = tuple(refs)
    return dict(sorted(rounds.items()))


def read_committed(zk: str, topology: str, timeout: float = 5.0) -> Any:
    """The topology's :class:`~hailstorm.protocol.layout.CommittedRecord` (None when there is
    none); raises ``ExportError`` when ZooKeeper cannot be reached."""
    from hailstorm.protocol.records import TopologyRecords

    client = zk_client(zk, timeout)
    try:
        client.start(timeout=timeout)
    except Exception as exc:  # broad: kazoo's start raises untyped errors; an ExportError
        client.close()
        raise ExportError(f"cannot reach ZooKeeper at {zk}: {exc}") from None
    try:
        return TopologyRecords(client, topology).committed()
    finally:
        client.stop()
        client.close()


def committed_round(
    store: SnapshotStore, topology: str, bolt: str, committed: Any
) -> Round | None:
    """The round of ``bolt`` the ``committed`` record lists (its instances' files, under
    whatever name they were written: a renamed bolt's are its old name's), or None when
    it lists no file of ``bolt``."""
    prefix = f"bolt:{bolt}:"
    located: list[SnapshotRef] = []
    for processor, location in sorted(committed.snapshots.items()):
        if not processor.startswith(prefix):
            continue
        instance = int(processor[len(prefix) :])
        try:
            ref = store.resolve(location)
        except (OSError, ValueError, SnapshotError):  # written where the store is mounted
            key = snapshot_key(topology, bolt, instance, committed.epoch)  # elsewhere
            ref = store.resolve(key)
        located.append(ref)
    if not located:
        return None
    located.sort(key=lambda r: r.instance)
    if [r.instance for r in located] != list(range(located[0].parallelism)):
        raise ExportError(
            f"the committed round {committed.epoch} of {topology}/{bolt} lists instances "
            f"{[r.instance for r in located]}, not 0..{located[0].parallelism - 1}"
        )
    return Round(committed.epoch, committed.clock_of(bolt), tuple(located),
                 "committed in ZooKeeper")


def choose_round(
    store: SnapshotStore,
    topology: str,
    bolt: str,
    *,
    epoch: int | None = None,
    zk: str | None = None,
    on_note: Callable[[str], None] = lambda _: None,
) -> Round:
    """The round to read: ``epoch`` if given, else the committed round (ZooKeeper, when
    ``zk`` is given and holds one for this bolt), else the latest complete round."""
    rounds = complete_rounds(store, topology, bolt)
    where = f"{store.location}/{topology}/{bolt}"
    if epoch is not None:
        refs = rounds.get(epoch)
        if refs is None:
            known = ", ".join(map(str, rounds)) or "none"
            raise ExportError(
                f"no complete round {epoch} of {topology}/{bolt} under {store.location} "
                f"(complete rounds: {known})"
            )
        return Round(epoch, dict(refs[0].clock), refs, "--epoch")
    if zk:
        committed = read_committed(zk, topology)
        if committed is None:
            on_note(f"no committed round in ZooKeeper for {topology}; using the latest one")
        else:
            chosen = committed_round(store, topology, bolt, committed)
            if chosen is not None:
                return chosen
            on_note(f"the committed round {committed.epoch} has no snapshot of {bolt}")
    if not rounds:
        raise ExportError(
            f"no complete snapshot round of {topology}/{bolt} in {where} (is "
            "HAILSTORM_SNAPSHOTS / --snapshots right, and has the topology saved a round?)"
        )
    newest = max(rounds)
    return Round(newest, dict(rounds[newest][0].clock), rounds[newest], "latest complete round")
