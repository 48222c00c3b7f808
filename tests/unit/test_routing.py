"""Routing must be stable across processes and machines, and spread keys evenly."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from hashlib import blake2b
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.routing import (
    MEMO_RESTS,
    ROUTE_PIECE,
    KeyRouter,
    encode_key,
    partition_by_instance,
    route,
    route_many,
    stable_hash,
)

REPO = Path(__file__).resolve().parents[2]

# Pinned values: changing them re-shards every deployed bolt's state. Do not update them
# casually; a change here needs a state migration.
PINNED = [
    ("hello", 16971457280165897195, [1, 2, 1, 11]),
    ("word", 18165465395361784754, [0, 2, 2, 2]),
    (42, 6992369943499900636, [0, 1, 5, 12]),
    (-1, 11013912761209266244, [0, 1, 0, 4]),
    (3.5, 2630616468501039044, [0, 2, 5, 4]),
    (b"raw", 15376199789390776053, [1, 0, 4, 5]),
    (("fr", 3), 6824013501484001045, [1, 2, 6, 5]),
    (None, 15140417470076621291, [1, 2, 2, 11]),
    ("", 16317348638040016837, [1, 1, 4, 5]),
]


@pytest.mark.parametrize(("key", "hash_value", "instances"), PINNED)
def test_pinned_hashes_and_routes(key: object, hash_value: int, instances: list[int]) -> None:
    assert stable_hash(key) == hash_value
    assert [route(key, n) for n in (2, 3, 7, 16)] == instances


def test_canonical_encoding_written_out() -> None:
    assert encode_key("a") == b"S\x00\x00\x00\x01a"
    assert encode_key(b"a") == b"B\x00\x00\x00\x01a"
    assert encode_key(1) == b"I\x00\x01\x01"
    assert encode_key(-1) == b"I\x00\x01\xff"
    assert encode_key(255) == b"I\x00\x02\x00\xff"
    assert encode_key(None) == b"N"
    assert encode_key(("a", 1)) == b"T\x00\x00\x00\x02" + b"S\x00\x00\x00\x01a" + b"I\x00\x01\x01"
    # The hash is BLAKE2b-64 of that encoding, big-endian.
    expected = int.from_bytes(blake2b(b"S\x00\x00\x00\x01a", digest_size=8).digest(), "big")
    assert stable_hash("a") == expected


def test_keys_equal_as_dict_keys_route_alike() -> None:
    assert encode_key(1) == encode_key(1.0) == encode_key(True)
    assert encode_key(0) == encode_key(-0.0) == encode_key(False)
    assert encode_key(("a", 2)) == encode_key(["a", 2.0])
    assert encode_key(1.5) != encode_key(1)
    assert encode_key("1") != encode_key(1)
    assert encode_key(float("nan")) == encode_key(float("nan"))


def test_unsupported_key_type_names_the_fix() -> None:
    with pytest.raises(TypeError, match="cannot route on a key of type dict"):
        route({"a": 1}, 4)


def test_same_routes_in_another_process_with_another_hash_seed() -> None:
    keys = ["hello", "word", ("fr", 3)]
    code = (
        "from hailstorm.routing import route; "
        "print([route(k, 7) for k in ['hello', 'word', ('fr', 3)]])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    output = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == str([route(k, 7) for k in keys])


def test_distribution_is_roughly_uniform() -> None:
    counts = Counter(route(f"user-{i}", 8) for i in range(16_000))
    assert set(counts) == set(range(8))
    assert all(1800 <= n <= 2200 for n in counts.values()), counts


def test_parallelism_one_never_hashes() -> None:
    assert route({"unhashable": "but fine"}, 1) == 0
    assert route_many(["a", "b"], 1) == [0, 0]
    with pytest.raises(ValueError, match="parallelism"):
        route("a", 0)


keys = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: st.tuples(inner, inner) | st.lists(inner, max_size=3).map(tuple),
    max_leaves=6,
)


@given(keys, st.integers(min_value=1, max_value=64))
def test_route_is_deterministic_and_in_range(key: object, parallelism: int) -> None:
    first = route(key, parallelism)
    assert 0 <= first < parallelism
    assert route(key, parallelism) == first
    assert route_many([key, key], parallelism) == [first, first]


@given(keys | st.tuples(st.text(max_size=3), keys) | st.lists(keys, max_size=3))
def test_stable_hash_is_the_blake2b_of_the_canonical_encoding(key: object) -> None:
    """Whatever path hashes a key (a str, a tuple's items, the general encoder), it hashes
    the bytes :func:`encode_key` gives."""
    expected = int.from_bytes(blake2b(encode_key(key), digest_size=8).digest(), "big")
    assert stable_hash(key) == expected


@given(st.lists(st.tuples(st.text(max_size=3), st.integers())), st.integers(1, 5))
def test_partition_by_instance_is_an_order_keeping_partition(
    tuples: list[tuple[str, int]], parallelism: int
) -> None:
    parts = partition_by_instance(tuples, lambda t: t[0], parallelism)
    assert len(parts) == parallelism
    assert sorted(t for part in parts for t in part) == sorted(tuples)
    for instance, part in enumerate(parts):
        assert all(route(t[0], parallelism) == instance for t in part)
        assert part == [t for t in tuples if route(t[0], parallelism) == instance]


def test_the_key_router_remembers_what_route_says_within_its_bound() -> None:
    router = KeyRouter(3, limit=4)
    keys = ["a", "b", 1, 1.0, True, ("x", 2), None, "c", "d", "e"]
    assert [router(k) for k in keys] == [route(k, 3) for k in keys]
    assert [router(k) for k in keys] == [route(k, 3) for k in keys]  # from the memo
    assert len(router._memo) <= 4
    assert router(["unhashable", 1]) == route(["unhashable", 1], 3)
    with pytest.raises(ValueError):
        KeyRouter(0)


@given(st.lists(st.one_of(st.text(max_size=3), st.integers(-5, 5),
                          st.lists(st.integers(0, 3), max_size=2)), max_size=30),
       st.integers(1, 4))
def test_a_batch_of_keys_routes_as_each_key_does(keys: list[object], parallelism: int) -> None:
    router = KeyRouter(parallelism, limit=4)  # a small memo: it starts afresh too
    assert router.many(keys) == [route(k, parallelism) for k in keys]
    assert router.many(keys) == [route(k, parallelism) for k in keys]


@given(st.text(st.characters(categories=["Cs", "Ll", "Lo", "Nd", "Zs"])) | st.text())
def test_a_text_key_hashes_as_its_canonical_encoding(key: str) -> None:
    # stable_hash encodes text inline (the common key): it must be what encode_key says,
    # surrogates included.
    digest = blake2b(encode_key(key), digest_size=8).digest()
    assert stable_hash(key) == int.from_bytes(digest, "big")


def test_a_batch_of_new_keys_is_routed_in_pieces_and_what_is_routed_is_remembered() -> None:
    keys = [f"k{i}" for i in range(2 * ROUTE_PIECE + 5)]
    calls: list[int] = []
    router = KeyRouter(3)
    assert router.many(keys, between=lambda: calls.append(len(router._memo))) == \
        route_many(keys, 3)
    assert calls == [ROUTE_PIECE, 2 * ROUTE_PIECE]  # between two pieces, not after the last

    class Abandon(Exception):
        pass

    def abandon() -> None:
        raise Abandon

    fresh = KeyRouter(3)
    with pytest.raises(Abandon):
        fresh.many(keys, between=abandon)
    assert fresh._memo == {k: route(k, 3) for k in keys[:ROUTE_PIECE]}
    assert fresh.many(keys) == route_many(keys, 3)


def hashed_route(key: object, parallelism: int) -> int:
    """The route by its definition: the 64-bit BLAKE2b of the canonical encoding."""
    return int.from_bytes(blake2b(encode_key(key), digest_size=8).digest(), "big") % parallelism


@given(st.lists(st.text(st.characters(categories=["Cs", "Ll", "Lo", "Nd", "Zs"]))
                | st.text(), max_size=20), st.integers(2, 7))
def test_a_batch_of_text_keys_routes_as_the_definition_says(
        keys: list[str], parallelism: int) -> None:
    # text keys take their own loop (the tag hashed once): the same bytes, surrogates too
    assert route_many(keys, parallelism) == [hashed_route(k, parallelism) for k in keys]
    assert route_many(iter(keys), parallelism) == [hashed_route(k, parallelism) for k in keys]


TEXT = st.text(st.characters(categories=["Cs", "Ll", "Lo", "Nd", "Zs"])) | st.text()


@given(st.lists(st.lists(TEXT, max_size=3).map(tuple), max_size=20)
       | st.lists(st.tuples(TEXT, TEXT), max_size=20), st.integers(2, 7))
def test_a_batch_of_tuple_keys_of_text_routes_as_the_definition_says(
        keys: list[tuple[str, ...]], parallelism: int) -> None:
    # composite keys of text take their own loop too (each length's header hashed once)
    assert route_many(keys, parallelism) == [hashed_route(k, parallelism) for k in keys]


@given(st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=5), keys, st.integers(2, 7))
def test_a_batch_mixing_tuples_of_text_with_other_keys_routes_by_definition(
        text_keys: list[tuple[str, str]], other: object, parallelism: int) -> None:
    batch = [*text_keys, other, (text_keys[0][0], 1), [text_keys[0][0]]]
    assert route_many(batch, parallelism) == [hashed_route(k, parallelism) for k in batch]


def test_the_key_router_rests_its_memo_while_most_keys_are_new() -> None:
    router = KeyRouter(3)
    batches = [[f"b{b}k{i}" for i in range(100)] for b in range(MEMO_RESTS + 2)]
    hot = batches[0][:10]
    assert router.many(batches[0]) == [hashed_route(k, 3) for k in batches[0]]
    remembered = dict(router._memo)
    for batch in batches[1:MEMO_RESTS + 1]:  # resting: routed alike, nothing remembered
        assert router.many(hot + batch) == [hashed_route(k, 3) for k in hot + batch]
    assert router._memo == remembered
    last = batches[MEMO_RESTS + 1]  # rested: looked up and remembered again
    assert router.many(hot + last) == [hashed_route(k, 3) for k in hot + last]
    assert set(last) <= set(router._memo)


def test_a_key_router_keeps_its_memo_for_recurring_keys() -> None:
    router = KeyRouter(2)
    hot = [f"k{i}" for i in range(100)]
    router.many(hot)  # all new: it rests, then looks again
    for _ in range(MEMO_RESTS):
        router.many(hot)
    for round_ in range(3):
        fresh = [f"new{round_}-{i}" for i in range(40)]  # 40 of 140 miss: the memo stays
        assert router.many(hot + fresh) == [hashed_route(k, 2) for k in hot + fresh]
        assert set(fresh) <= set(router._memo)


def test_a_resting_router_still_routes_in_pieces() -> None:
    keys = [f"k{i}" for i in range(2 * ROUTE_PIECE + 5)]
    router = KeyRouter(3)
    router.many(keys)  # all new: the memo rests
    calls: list[int] = []
    assert router.many(keys[::-1], between=lambda: calls.append(1)) == \
        [hashed_route(k, 3) for k in keys[::-1]]
    assert calls == [1, 1]
