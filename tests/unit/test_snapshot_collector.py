"""The negotiator's snapshot collector: garbage is deleted once older than the retention,
also when no round commits after it (an idle topology skips its rounds and asks again), and
the store is not listed again once rounds were collected whole."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hailstorm.monoids import Count, per_key
from hailstorm.negotiator import daemon
from hailstorm.negotiator.daemon import SnapshotCollector
from hailstorm.negotiator.decision import ForgetSnapshots
from hailstorm.snapshots import SnapshotRef

T0 = 1_000_000.0
RETENTION = 60.0


def _put(collector: SnapshotCollector, epoch: int) -> SnapshotRef:
    ref = collector.store.put(topology="wc", bolt="counts", instance=0, parallelism=1,
                              epoch=epoch, clock={("words", 0): epoch},
                              monoid=per_key(Count()), state={"a": epoch})
    path = collector.store.root / ref.key  # type: ignore[attr-defined]
    os.utime(path, (T0 - 1, T0 - 1))  # written just before the commit of round 7
    return ref


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    now = SimpleNamespace(value=T0)
    monkeypatch.setattr(daemon, "time", SimpleNamespace(time=lambda: now.value))
    return now


def test_garbage_goes_once_old_enough_without_another_commit(
    tmp_path: Path, clock: SimpleNamespace
) -> None:
    collector = SnapshotCollector("wc", str(tmp_path / "store"), RETENTION)
    garbage, previous, committed = (_put(collector, e) for e in (3, 5, 7))
    listed: list[int] = []
    forget_rounds = collector.store.forget_rounds

    def counting(*args: Any, **kwargs: Any) -> list[str]:
        listed.append(args[1])
        return forget_rounds(*args, **kwargs)

    collector.store.forget_rounds = counting  # type: ignore[method-assign]
    action = ForgetSnapshots(7, frozenset({previous.uri, committed.uri}), frozenset({5, 7}))

    collector.forget(action)  # the commit of round 7: the garbage is younger than retention
    assert {r.epoch for r in collector.store.list("wc")} == {3, 5, 7}
    clock.value = T0 + RETENTION / 2
    collector.forget(action)  # a skipped round: still too young
    assert {r.epoch for r in collector.store.list("wc")} == {3, 5, 7}
    clock.value = T0 + RETENTION + 1
    collector.forget(action)  # a later skipped round: old enough now, and gone
    assert {r.epoch for r in collector.store.list("wc")} == {5, 7}
    assert garbage.epoch == 3 and listed == [7, 7, 7]
    clock.value = T0 + 2 * RETENTION
    collector.forget(action)  # collected whole: the store is not listed again
    assert listed == [7, 7, 7]
    collector.forget(ForgetSnapshots(9, frozenset({committed.uri}), frozenset({7, 9})))
    assert listed == [7, 7, 7, 9], "a newer commit is collected"
