"""Stable key routing: which bolt instance receives a tuple.

A bolt with ``parallelism=n`` runs ``n`` instances; a tuple goes to instance
``route(key(t), n)``. The hash must give the same answer in every process on every
machine (Spark executors, the reference model, a restarted task), so Python's salted
:func:`hash` is out. Keys are encoded canonically and hashed with BLAKE2b (64 bits).

Keys that compare equal as dictionary keys route to the same instance: ``True``, ``1`` and
``1.0`` are all the integer 1, ``-0.0`` is 0. Supported key types: ``None``, ``bool``,
``int``, ``float``, ``str``, ``bytes`` and tuples/lists of those (nested freely).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Sequence
from hashlib import blake2b
from itertools import chain
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = [
    "KEY_INT_BITS",
    "MEMO_RESTS",
    "ROUTE_PIECE",
    "KeyRouter",
    "encode_key",
    "itself",
    "partition_by_instance",
    "route",
    "route_many",
    "stable_hash",
]

_NONE = b"N"
_INT = b"I"
_FLOAT = b"F"
_STR = b"S"
_BYTES = b"B"
_TUPLE = b"T"


KEY_INT_BITS = 8 * 0xFFFF - 1
"""The most bits an ``int`` in a key may have: its encoding's length field has 2 bytes
(a wider one cannot be routed: ``OverflowError``)."""


def _encode_int(value: int, out: bytearray) -> None:
    length = (value.bit_length() + 8) // 8  # room for the sign bit
    out += _INT
    out += length.to_bytes(2, "big")
    out += value.to_bytes(length, "big", signed=True)


def _encoded_str(key: str) -> bytes:
    """The canonical encoding of a ``str`` key (the common case: :func:`stable_hash` takes
    it without a buffer)."""
    data = key.encode("utf-8", "surrogatepass")
    return b"%b%b%b" % (_STR, len(data).to_bytes(4, "big"), data)


def _encode(key: Any, out: bytearray) -> None:
    kind = type(key)
    if kind is str:
        out += _encoded_str(key)
    elif kind is int or kind is bool:
        _encode_int(int(key), out)
    elif kind is float:
        if math.isfinite(key) and key.is_integer():
            _encode_int(int(key), out)  # 1.0 == 1 as a dict key, so it must route alike
        else:
            out += _FLOAT
            out += struct.pack(">d", math.nan if math.isnan(key) else key)
    elif kind is bytes or kind is bytearray or kind is memoryview:
        data = bytes(key)
        out += _BYTES
        out += len(data).to_bytes(4, "big")
        out += data
    elif kind is tuple or kind is list:
        out += _TUPLE
        out += len(key).to_bytes(4, "big")
        for item in key:
            _encode(item, out)
    elif key is None:
        out += _NONE
    elif isinstance(key, bool | int):  # int subclasses such as IntEnum
        _encode_int(int(key), out)
    elif isinstance(key, str):
        _encode(str(key), out)
    elif isinstance(key, float):
        _encode(float(key), out)
    elif isinstance(key, tuple):  # namedtuples
        _encode(tuple(key), out)
    else:
        raise TypeError(
            f"cannot route on a key of type {kind.__name__} ({key!r}): keys must be None, "
            "bool, int, float, str, bytes, or tuples of those; make the key function "
            "return one of these (e.g. str(value))"
        )


def itself(t: T) -> T:
    """The tuple itself: ``key=itself`` for tuples that are their own keys (the words of
    word count). A bolt declared with it records so (``BoltSpec.paths``), and the engine
    keys its batches (without window or ttl state) without a call per tuple."""
    return t


def encode_key(key: Any) -> bytes:
    """The canonical byte encoding of ``key`` that :func:`stable_hash` hashes."""
    out = bytearray()
    _encode(key, out)
    return bytes(out)


_BLAKE2B_64 = blake2b(digest_size=8)
"""An empty 64-bit BLAKE2b, copied for every key (never updated itself)."""

_UNSIGNED_64 = struct.Struct(">Q").unpack
"""A big-endian 64-bit digest as an ``int``."""


def _encoded_part(part: Any) -> bytes:
    """The canonical encoding of one item of a tuple key."""
    return _encoded_str(part) if type(part) is str else encode_key(part)


def stable_hash(key: Any) -> int:
    """A 64-bit hash of ``key``, identical in every process, machine and Python run."""
    kind = type(key)
    if kind is str:
        encoded = _encoded_str(key)
    elif kind is tuple:  # a composite key: its items' encodings after the header
        encoded = b"".join([_TUPLE, len(key).to_bytes(4, "big"), *map(_encoded_part, key)])
    else:
        encoded = encode_key(key)
    hasher = _BLAKE2B_64.copy()  # a copy of a made hasher: 0.5 us less than a new one
    hasher.update(encoded)
    return _UNSIGNED_64(hasher.digest())[0]


_BLAKE2B_64_STR = blake2b(digest_size=8)
_BLAKE2B_64_STR.update(_STR)
"""A 64-bit BLAKE2b that took the tag every ``str`` key's encoding starts with."""


def _routed_strs(keys: Iterable[str], parallelism: int) -> list[int]:
    """:func:`route` of ``str`` keys: :func:`stable_hash` without a call per key (the
    same bytes hashed, the tag taken once)."""
    copy = _BLAKE2B_64_STR.copy
    from_bytes = int.from_bytes
    instances: list[int] = []
    add = instances.append
    for key in keys:
        data = key.encode("utf-8", "surrogatepass")
        hasher = copy()
        hasher.update(len(data).to_bytes(4, "big"))
        hasher.update(data)
        add(from_bytes(hasher.digest(), "big") % parallelism)
    return instances


def _routed_str_tuples(keys: Iterable[tuple[str, ...]], parallelism: int) -> list[int]:
    """:func:`route` of tuple keys whose items are all ``str`` (composite keys such as
    ``(country, user)``): :func:`stable_hash` without a call per key or an encoding joined
    per key (the same bytes hashed, each length's header taken once)."""
    headed: dict[int, Any] = {}
    from_bytes = int.from_bytes
    instances: list[int] = []
    add = instances.append
    for key in keys:
        size = len(key)
        base = headed.get(size)
        if base is None:
            base = headed[size] = blake2b(_TUPLE + size.to_bytes(4, "big"), digest_size=8)
        hasher = base.copy()
        for part in key:
            data = part.encode("utf-8", "surrogatepass")
            hasher.update(b"%b%b%b" % (_STR, len(data).to_bytes(4, "big"), data))
        add(from_bytes(hasher.digest(), "big") % parallelism)
    return instances


def _check_parallelism(parallelism: int) -> None:
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")


def route(key: Any, parallelism: int) -> int:
    """The instance (``0 <= i < parallelism``) that owns ``key``."""
    if parallelism == 1:
        return 0
    _check_parallelism(parallelism)
    return stable_hash(key) % parallelism


def route_many(keys: Iterable[Any], parallelism: int) -> list[int]:
    """:func:`route` for many keys at once."""
    if parallelism == 1:
        return [0 for _ in keys]
    _check_parallelism(parallelism)
    keys = keys if isinstance(keys, list) else list(keys)
    kinds = set(map(type, keys))
    if kinds == {str}:
        return _routed_strs(keys, parallelism)
    if kinds == {tuple} and set(map(type, chain.from_iterable(keys))) == {str}:
        return _routed_str_tuples(keys, parallelism)
    return [stable_hash(k) % parallelism for k in keys]


ROUTE_PIECE = 4096
"""Keys :meth:`KeyRouter.many` routes between two calls of its ``between`` (a few ms)."""


MEMO_RESTS = 8
"""Batches :meth:`KeyRouter.many` routes without its memo after one where most keys missed
it (high-cardinality keys, where looking up and remembering cost more than hashing)."""

_JUDGED_BATCH = 64
"""The fewest keys a batch of :meth:`KeyRouter.many` needs to say how often keys recur."""


class KeyRouter:
    """:func:`route` over ``parallelism`` instances with a memo: a hot key is hashed once,
    not once per batch. Holds at most ``limit`` keys (then starts afresh); keys equal as
    dictionary keys (``1``, ``1.0``, ``True``) route alike anyway. Routing many keys where
    most miss the memo, it rests the memo for :data:`MEMO_RESTS` batches (the instances
    are the same either way)."""

    def __init__(self, parallelism: int, limit: int = 1 << 20) -> None:
        _check_parallelism(parallelism)
        self.parallelism = parallelism
        self.limit = limit
        self._memo: dict[Any, int] = {}
        self._resting = 0
        """Batches :meth:`many` still routes without the memo."""

    def __call__(self, key: Any) -> int:
        memo = self._memo
        try:
            return memo[key]
        except KeyError:
            pass
        except TypeError:  # unhashable (a list): nothing to remember it by
            return route(key, self.parallelism)
        if len(memo) >= self.limit:
            memo.clear()
        instance = memo[key] = route(key, self.parallelism)
        return instance

    def many(self, keys: Sequence[Any], between: Callable[[], None] | None = None
             ) -> list[int]:
        """The instance of each of ``keys``, a batch at a time: remembered ones looked up,
        the others routed (:func:`route_many`) and remembered, :data:`ROUTE_PIECE` at a
        time; while the memo rests, every key is routed and none remembered. ``between``
        is called between two pieces; it may raise to abandon the call (the keys routed
        so far stay remembered, unless the memo rests)."""
        if self._resting > 0:
            self._resting -= 1
            return self._routed(list(keys), between, remember=False)
        memo = self._memo
        try:
            instances = list(map(memo.get, keys))
        except TypeError:  # an unhashable key among them
            return list(map(self, keys))
        if None not in instances:
            return instances  # type: ignore[return-value]  # no None among them
        missing = [key for key, instance in zip(keys, instances, strict=True) if instance is None]
        if len(instances) >= _JUDGED_BATCH and 2 * len(missing) > len(instances):
            self._resting = MEMO_RESTS
        fill = iter(self._routed(missing, between, remember=True)).__next__
        return [fill() if instance is None else instance for instance in instances]

    def _routed(self, keys: list[Any], between: Callable[[], None] | None, *,
                remember: bool) -> list[int]:
        """:func:`route_many` of ``keys``, :data:`ROUTE_PIECE` at a time, remembered or
        not; ``between`` is called between two pieces."""
        memo = self._memo
        routed: list[int] = []
        for start in range(0, len(keys), ROUTE_PIECE):
            if start and between is not None:
                between()
            new = keys[start:start + ROUTE_PIECE]
            piece = route_many(new, self.parallelism)
            routed += piece
            if remember:
                if len(memo) + len(new) > self.limit:
                    memo.clear()
                memo.update(zip(new[:self.limit], piece[:self.limit], strict=True))
        return routed


def partition_by_instance(
    tuples: Sequence[T], key: Callable[[T], Any] | None, parallelism: int
) -> list[list[T]]:
    """Split ``tuples`` into one list per instance, keeping their relative order.

    With ``parallelism == 1`` every tuple goes to instance 0 and ``key`` is not called
    (``key`` may then be ``None``).
    """
    if parallelism == 1:
        return [list(tuples)]
    if key is None:
        raise ValueError(f"parallelism {parallelism} needs a key function to route tuples")
    buckets: list[list[T]] = [[] for _ in range(parallelism)]
    for t in tuples:
        buckets[stable_hash(key(t)) % parallelism].append(t)
    return buckets
