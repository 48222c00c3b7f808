"""Approximate monoids over hashed items: :class:`HyperLogLog` (distinct count) and
:class:`CountMinSketch` (per-item counts), with the process-independent
:func:`stable_hash` they hash with. Pure.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from hailstorm.monoids.avro import record
from hailstorm.monoids.base import DEFAULT_NAMESPACE, Monoid

__all__ = ["CountMinSketch", "HyperLogLog", "stable_hash"]


def stable_hash(item: Any, digest_size: int = 8) -> bytes:
    """A hash of ``item`` that is identical across processes and runs (blake2b).

    ``str`` hashes its UTF-8 bytes, ``bytes`` itself; anything else hashes a type tag plus its
    ``repr`` (fine for ints, floats and tuples of those; avoid objects with address-based
    reprs).
    """
    if isinstance(item, str):
        data = item.encode()
    elif isinstance(item, bytes | bytearray):
        data = bytes(item)
    else:
        data = b"\x00" + type(item).__name__.encode() + b"\x00" + repr(item).encode()
    empty = _EMPTY_HASHERS.get(digest_size)
    if empty is None:
        return hashlib.blake2b(data, digest_size=digest_size).digest()
    hasher = empty.copy()  # a copy of a made hasher costs less than a new one
    hasher.update(data)
    return hasher.digest()


_EMPTY_HASHERS = {size: hashlib.blake2b(digest_size=size) for size in (8, 16)}
"""Empty BLAKE2b hashers of the digest sizes the sketches use, copied per item (never
updated themselves)."""


_NONZERO = re.compile(rb"[^\x00]")

SPARSE_REGISTERS = 16
"""Registers set at most in a state that :meth:`HyperLogLog.absorb` takes one by one (more
are merged all at once, about 10 us at precision 10)."""

ESTIMATES_KEPT = 4096
ESTIMATES_KEPT_BYTES = 4 << 20
"""Estimates, and registers, a :class:`HyperLogLog` keeps at most to remember its last
estimates by (at least 16 estimates)."""


class _OneItem(bytearray):
    """The registers of one lifted item (:meth:`HyperLogLog.lift`), which also carry the one
    register it sets, so absorbing it looks at no other (a bolt lifts an item per tuple).
    :class:`HyperLogLog`'s methods that change a state in place first mark such a state as
    no longer one item (``register`` -1); change a lifted state only through them."""

    __slots__ = ("rank", "register")
    register: int
    rank: int

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:  # pickle and copy
        if self.register < 0:
            return bytearray, (bytes(self),)
        return _one_item, (len(self), self.register, self.rank)


def _one_item(size: int, index: int, rank: int) -> _OneItem:
    """The registers of one item: ``size`` registers, ``rank`` at ``index``."""
    registers = _OneItem(size)
    registers[index] = rank
    registers.register = index
    registers.rank = rank
    return registers


class HyperLogLog(Monoid[bytearray]):
    """Approximate distinct count (HyperLogLog with a 64-bit blake2b hash).

    State: ``bytearray`` of ``m = 2**precision`` registers (``m`` bytes; the relative error is
    about ``1.04 / sqrt(m)``, 1.6% at the default precision 12). Merge is register-wise max.
    ``absorb`` of a lifted item only touches its one register. For ``per_key`` use consider a
    lower precision: every key costs ``m`` bytes.
    """

    name = "HyperLogLog"

    def __init__(self, precision: int = 12) -> None:
        if not 4 <= precision <= 18:
            raise ValueError("HyperLogLog precision must be in 4..18")
        self.precision = precision
        self.m = 1 << precision
        self._rest_bits = 64 - precision
        self._rest_mask = (1 << self._rest_bits) - 1
        m = self.m
        self._alpha = {16: 0.673, 32: 0.697, 64: 0.709}.get(m, 0.7213 / (1 + 1.079 / m))
        self._high_bits = int.from_bytes(b"\x80" * m, "little")
        self._estimates: dict[int, tuple[bytes, float]] = {}
        """``id(state)`` -> (its registers, their estimate), for :meth:`estimate`."""
        self._estimates_kept = max(16, min(ESTIMATES_KEPT, ESTIMATES_KEPT_BYTES // m))

    def empty(self) -> bytearray:
        return bytearray(self.m)

    def _register(self, item: Any) -> tuple[int, int]:
        h = int.from_bytes(stable_hash(item), "big")
        rest = h & self._rest_mask
        return h >> self._rest_bits, self._rest_bits - rest.bit_length() + 1

    def lift(self, item: Any) -> bytearray:
        """The state of one item."""
        return _one_item(self.m, *self._register(item))

    def add(self, state: bytearray, item: Any) -> bytearray:
        """``absorb(state, lift(item))`` without allocating (mutates ``state``)."""
        if type(state) is _OneItem:
            state.register = -1  # (see _OneItem)
        idx, rank = self._register(item)
        if rank > state[idx]:
            state[idx] = rank
        return state

    def combine(self, a: bytearray, b: bytearray) -> bytearray:
        if a.count(0) > b.count(0):
            a, b = b, a  # copy the denser one, absorb the sparser one
        return self.absorb(bytearray(a), b)

    def absorb(self, acc: bytearray, value: bytearray) -> bytearray:
        if type(acc) is _OneItem:
            acc.register = -1  # (see _OneItem)
        if type(value) is _OneItem and value.register >= 0:  # a lifted item: the hot path
            i, r = value.register, value.rank
            if r > acc[i]:
                acc[i] = r
            return acc
        nonzero = len(value) - value.count(0)
        if nonzero <= SPARSE_REGISTERS:  # a few items: register by register
            for match in _NONZERO.finditer(value):
                i = match.start()
                r = value[i]
                if r > acc[i]:
                    acc[i] = r
            return acc
        a = int.from_bytes(acc, "little")
        b = int.from_bytes(value, "little")
        high = self._high_bits
        if (a | b) & high:  # a register of 128 or more: no hash has such a rank
            acc[:] = bytes(map(max, acc, value))
            return acc
        # Every register at once, each byte a lane of one big integer (SWAR): with both
        # lanes below 128, (a | 0x80) - b keeps its high bit exactly where a >= b and never
        # borrows from the next lane; that bit, spread over its lane, picks a or b.
        a_wins = (((a | high) - b) & high) >> 7
        lanes = (a_wins << 8) - a_wins
        acc[:] = (b ^ ((a ^ b) & lanes)).to_bytes(self.m, "little")
        return acc

    def copy(self, state: bytearray) -> bytearray:
        return bytearray(state)

    def estimate(self, state: bytearray) -> float:
        """Estimated number of distinct items (bias-corrected, linear counting when small).

        The last estimates are remembered with the registers they were made of, per state
        object: a bolt emitting a key's estimate after every tuple asks again about states
        that most tuples left as they were (an item seen before, or not above its register).
        """
        remembered = self._estimates.get(id(state))
        if remembered is not None and remembered[0] == state:
            return remembered[1]
        registers = bytes(state)  # what the estimate is of, whatever happens to state
        estimate = self._estimate(registers)
        if len(self._estimates) >= self._estimates_kept:
            self._estimates.clear()
        self._estimates[id(state)] = (registers, estimate)
        return estimate

    def _estimate(self, state: bytes) -> float:
        m = self.m
        zeros = state.count(0)
        if zeros * 2.5 >= self._alpha * m:
            # The sum below is at least ``zeros``, so the raw estimate is at most 2.5 m:
            # linear counting, which needs only the zeros.
            return m * math.log(m / zeros)
        # sum(2**-r) over the registers, as sum(count(r) * 2**-r) over the values present:
        # a C scan of the registers per value instead of a Python step per register (the
        # same exact terms, so fsum gives the same float).
        terms: list[float] = []
        seen = rank = 0
        count = state.count
        while seen < m:
            n = count(rank)
            if n:
                terms.append(n * 2.0**-rank)
                seen += n
            rank += 1
        total = math.fsum(terms)
        est = self._alpha * m * m / total
        if est <= 2.5 * m and zeros:
            return m * math.log(m / zeros)
        return est

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return record(namespace, "HyperLogLog", [("precision", "int"), ("registers", "bytes")])

    def to_avro(self, state: bytearray) -> Any:
        return {"precision": self.precision, "registers": bytes(state)}

    def from_avro(self, data: Any) -> bytearray:
        if data["precision"] != self.precision or len(data["registers"]) != self.m:
            raise ValueError(f"snapshot has precision {data['precision']}, not {self.precision}")
        return bytearray(data["registers"])

    def describe(self) -> str:
        return f"HyperLogLog(p={self.precision})"


class CountMinSketch(Monoid[dict[int, int]]):
    """Approximate per-item counts; never underestimates non-negative counts.

    The state is the ``depth x width`` counter grid stored sparsely: ``dict`` flat cell index
    (``row * width + column``) -> counter, zero counters omitted (so equal grids are equal
    dicts). Snapshots store the dense row-major grid. Row ``i`` of an item is
    ``(h1 + i * h2) % width`` with ``h1, h2`` from a stable 128-bit blake2b hash. Error: at
    most ``e / width * total`` with probability ``1 - exp(-depth)``.
    """

    name = "CountMinSketch"

    def __init__(self, width: int = 2048, depth: int = 5) -> None:
        if width < 1 or depth < 1:
            raise ValueError("CountMinSketch needs width >= 1 and depth >= 1")
        self.width = width
        self.depth = depth

    def cells(self, item: Any) -> list[int]:
        """Flat indexes of the ``depth`` counters of ``item``."""
        digest = stable_hash(item, 16)
        h1 = int.from_bytes(digest[:8], "big")
        h2 = int.from_bytes(digest[8:], "big") | 1
        w = self.width
        return [i * w + (h1 + i * h2) % w for i in range(self.depth)]

    def empty(self) -> dict[int, int]:
        return {}

    def lift(self, item: Any, count: int = 1) -> dict[int, int]:
        """The state of ``count`` occurrences of ``item``."""
        return dict.fromkeys(self.cells(item), count) if count else {}

    def add(self, state: dict[int, int], item: Any, count: int = 1) -> dict[int, int]:
        """``absorb(state, lift(item, count))`` (mutates ``state``)."""
        return self.absorb(state, self.lift(item, count))

    def estimate(self, state: dict[int, int], item: Any) -> int:
        """Estimated count of ``item`` (an upper bound when all counts are non-negative)."""
        get = state.get
        return min(get(c, 0) for c in self.cells(item))

    def combine(self, a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
        if len(a) < len(b):
            a, b = b, a
        return self.absorb(dict(a), b)

    def absorb(self, acc: dict[int, int], value: dict[int, int]) -> dict[int, int]:
        get = acc.get
        for cell, v in value.items():
            n = get(cell, 0) + v
            if n:
                acc[cell] = n
            else:
                acc.pop(cell, None)
        return acc

    def copy(self, state: dict[int, int]) -> dict[int, int]:
        return dict(state)

    def avro_schema(self) -> Any:
        return self.avro_schema_in(DEFAULT_NAMESPACE)

    def avro_schema_in(self, namespace: str) -> Any:
        return record(
            namespace,
            "CountMinSketch",
            [
                ("width", "int"),
                ("depth", "int"),
                ("counters", {"type": "array", "items": "long"}),
            ],
        )

    def to_avro(self, state: dict[int, int]) -> Any:
        get = state.get
        grid = [get(i, 0) for i in range(self.width * self.depth)]
        return {"width": self.width, "depth": self.depth, "counters": grid}

    def from_avro(self, data: Any) -> dict[int, int]:
        if data["width"] != self.width or data["depth"] != self.depth:
            got = f"{data['width']}x{data['depth']}"
            raise ValueError(f"snapshot sketch is {got}, not {self.width}x{self.depth}")
        return {i: c for i, c in enumerate(data["counters"]) if c}

    def describe(self) -> str:
        return f"CountMinSketch({self.width}x{self.depth})"
