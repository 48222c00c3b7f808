"""A keyed bolt's chain of snapshots (:mod:`hailstorm.processors.deltas`): deltas on the
previous snapshot, differential ones on the last whole one, whole ones; loaded through
their bases, every snapshot is the state it was handed out at."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

from hypothesis import event, given, settings
from hypothesis import strategies as st

from hailstorm.monoids import Count, per_key
from hailstorm.processors import WriteSnapshot
from hailstorm.processors.deltas import DELTA_CHAIN_MAX, DIFFERENTIAL_MAX, DeltaChain


def hand_out(chain: DeltaChain, state: dict[str, int], rounds: list[set[str]]
             ) -> list[WriteSnapshot]:
    """Each round: the keys of ``rounds`` counted once more in ``state`` (noted as changed,
    as the bolt's core does), then the round's snapshot (nothing absorbed meanwhile)."""
    written = []
    for epoch, keys in enumerate(rounds, start=1):
        for key in keys:
            state[key] = state.get(key, 0) + 1
            if chain.changed is not None:
                chain.changed.add(key)
        written.append(chain.snapshot_of(epoch, {}, state))
        written[-1].content.get()  # the writer's copy, before the state changes again
        chain.folding({})  # B held nothing: nothing changed since the snapshot
    return written


def loads(written: list[WriteSnapshot], loaded: dict[str, int] | None = None
          ) -> list[tuple[dict[str, int], int]]:
    """Each snapshot loaded through its bases as the store does, and the files read."""
    loaded_files = [(loaded, 0)] if loaded is not None else []
    result: list[tuple[dict[str, int], int]] = []
    whole_at: int | None = None
    for w in written:
        if not w.delta:
            state, files = dict(w.state), 1
            whole_at = len(result)
        else:
            base, base_files = (result[whole_at] if w.on_whole and whole_at is not None
                                else result[-1] if result else loaded_files[0])
            assert base is not None, f"round {w.epoch}: a delta on nothing"
            state, files = {**base, **w.state}, base_files + 1
        result.append((state, files))
    return result


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(0, 300),
    rounds=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 400)), min_size=1,
                    max_size=120),
    loaded_whole=st.booleans(),
    chain_max=st.sampled_from([1, 3, DELTA_CHAIN_MAX]),
)
def test_every_snapshot_loads_as_the_state_it_was_handed_out_at(
        start: int, rounds: list[tuple[int, int]], loaded_whole: bool, chain_max: int) -> None:
    """Rounds of a few keys (some new, most in a stable key space) over a loaded state: each
    snapshot, loaded through its chain, is the state of its round, and a load reads at most
    a whole file, a differential one and ``DELTA_CHAIN_MAX`` deltas (shorter chains too,
    to reach their ends often)."""
    state = {f"k{i}": 1 for i in range(start)}
    loaded = dict(state)
    changes = [{f"k{(first + i * 7) % 500}" for i in range(n)} for n, first in rounds]
    expected = []
    written = []
    with patch("hailstorm.processors.deltas.DELTA_CHAIN_MAX", chain_max):
        chain = DeltaChain(per_key(Count()), loaded_whole)
        for keys in changes:
            written += hand_out(chain, state, [keys])
            expected.append(dict(state))
    for w, (state_loaded, files), want in zip(written, loads(written, loaded), expected,
                                              strict=True):
        assert state_loaded == want, f"round {w.epoch}"
        assert files <= chain_max + 2
    assert loaded_whole or not written[0].delta  # nothing to build on: whole
    kinds = {"differential" if w.on_whole else "delta" if w.delta else "whole"
             for w in written}
    event(f"kinds: {sorted(kinds)}")


def test_a_large_stable_state_is_written_whole_only_when_much_of_it_changed() -> None:
    """100,000 keys, 500 of them changed a round: after the first whole snapshot every
    chain of 32 deltas ends with a differential snapshot of the keys changed since it
    (16,000, then 32,000, ...), until those would be more than half the state."""
    state = {f"k{i}": 1 for i in range(100_000)}
    chain = DeltaChain(per_key(Count()), loaded_whole=False)
    rounds = [{f"k{(r * 500 + i) % 100_000}" for i in range(500)} for r in range(200)]
    written = hand_out(chain, state, rounds)
    kinds = ["W" if not w.delta else "D" if w.on_whole else "d" for w in written]
    assert kinds[0] == "W" and kinds[1:33] == ["d"] * 32
    assert [i for i, k in enumerate(kinds) if k == "W"] == [0, 132]
    differentials = [i for i, k in enumerate(kinds) if k == "D"]
    assert differentials == [33, 66, 99, 165, 198]
    assert [len(written[i].state) for i in differentials] == [
        16_500, 33_000, 49_500, 16_500, 33_000]
    # At 132 the keys changed since the whole one were 66,000: more than half the state.
    assert DIFFERENTIAL_MAX * len(state) < 66_000
    for (state_loaded, _), w in zip(loads(written), written, strict=True):
        if w.epoch in (33, 99, 132, 150):
            assert state_loaded == rebuilt_state(rounds[:w.epoch])


def rebuilt_state(rounds: list[set[str]]) -> dict[str, Any]:
    state = {f"k{i}": 1 for i in range(100_000)}
    for keys in rounds:
        for key in keys:
            state[key] += 1
    return state
