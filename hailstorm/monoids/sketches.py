"""Approximate monoids over hashed items: :class:`HyperLogLog` (distinct count) and
:class:`CountMinSketch` (per-item counts), with the process-independent
:func:`stable_hash` they hash with. Pure.
"""

from __future__ import annotations

import hashlib
import math
import operator
import struct
import sys
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import Any

from hailstorm.monoids.avro import record
from hailstorm.monoids.avro_columns import check_length
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


_ENTRY = 4
"""Bytes of one set register in a sparse state: ``index << 8 | rank``, unsigned little-endian."""
_ENTRY_CODEC = struct.Struct("<I")
"""Packs and unpacks one entry (faster than ``int.to_bytes`` and ``int.from_bytes``)."""
_LITTLE_ENDIAN = (sys.byteorder == "little"
                  and memoryview(bytes(_ENTRY)).cast("I").itemsize == _ENTRY)
"""Whether a sparse state's entries are this machine's own unsigned ints (read in place)."""

ESTIMATES_KEPT = 4096
ESTIMATES_KEPT_BYTES = 4 << 20
"""Estimates, and registers, a :class:`HyperLogLog` keeps at most to remember its last
estimates by (at least 16 estimates)."""


def _entries(state: bytes | bytearray) -> Sequence[int]:
    """The entries of a sparse state, ascending (``index << 8 | rank``)."""
    if _LITTLE_ENDIAN:
        with memoryview(state) as raw, raw.cast("I") as entries:
            return entries.tolist()
    return [entry for (entry,) in _ENTRY_CODEC.iter_unpack(state)]


def _split(entry: int) -> tuple[int, int]:
    """``(index, rank)`` of a sparse state's entry."""
    return entry >> 8, entry & 0xFF


def _find(state: bytearray, key: int) -> tuple[int, int]:
    """Where the entry ``key`` (``index << 8``) belongs in a sparse state, as an entry number,
    and the entry there (-1 past the last)."""
    if not _LITTLE_ENDIAN:
        listed = _entries(state)
        at = bisect_left(listed, key)
        return at, listed[at] if at < len(listed) else -1
    entries = memoryview(state).cast("I")
    at = bisect_left(entries, key)
    found = entries[at] if at < len(entries) else -1
    entries.release()  # so the state can grow
    return at, found


class HyperLogLog(Monoid[bytearray]):
    """Approximate distinct count (HyperLogLog with a 64-bit blake2b hash).

    ``m = 2**precision`` registers; the relative error is about ``1.04 / sqrt(m)``, 1.6% at
    the default precision 12. Merge is register-wise max. A state is a ``bytearray`` in one
    of two forms (as HyperLogLog++ keeps small sketches sparse):

    * **sparse**, while at most ``m // 32`` registers are set: 4 bytes per set register,
      ``index << 8 | rank`` as an unsigned little-endian integer, ascending; an empty
      state has no bytes. A lifted item is 4 bytes, and a key seen by a few items costs a
      few bytes in memory, on the wire and in snapshots instead of ``m``;
    * **dense**: the ``m`` registers, one byte each (length exactly ``m``).

    The form follows from the registers alone, so equal registers are equal states. A state
    turns dense in place when it outgrows the sparse form: use what :meth:`absorb` and
    :meth:`add` return, or the state they were given (the same object). Dense
    ``bytearray(m)`` states made by hand are accepted everywhere.
    """

    name = "HyperLogLog"

    def __init__(self, precision: int = 12) -> None:
        if not 4 <= precision <= 18:
            raise ValueError("HyperLogLog precision must be in 4..18")
        self.precision = precision
        self.m = 1 << precision
        self.sparse_limit = self.m // 32
        """Set registers a sparse state holds at most: 4 bytes each, so a sparse state takes
        at most an eighth of the dense form's ``m`` bytes."""
        self._sparse_bytes = self.sparse_limit * _ENTRY
        self._rest_bits = 64 - precision
        self._rest_mask = (1 << self._rest_bits) - 1
        m = self.m
        self._alpha = {16: 0.673, 32: 0.697, 64: 0.709}.get(m, 0.7213 / (1 + 1.079 / m))
        self._high_bits = int.from_bytes(b"\x80" * m, "little")
        self._estimates: dict[int, tuple[bytes, float]] = {}
        """``id(state)`` -> (its registers, their estimate), for :meth:`estimate` of dense
        states."""
        self._estimates_kept = max(16, min(ESTIMATES_KEPT, ESTIMATES_KEPT_BYTES // m))

    def empty(self) -> bytearray:
        return bytearray()

    def _entry(self, item: Any) -> int:
        """``index << 8 | rank`` of the register ``item`` sets."""
        h = int.from_bytes(stable_hash(item), "big")
        rest = h & self._rest_mask
        return (h >> self._rest_bits) << 8 | (self._rest_bits - rest.bit_length() + 1)

    def lift(self, item: Any) -> bytearray:
        """The state of one item: the one register it sets (sparse, but for ``m`` of 16)."""
        if self.sparse_limit:
            return bytearray(_ENTRY_CODEC.pack(self._entry(item)))
        return self._set(bytearray(self.m), self._entry(item))

    def add(self, state: bytearray, item: Any) -> bytearray:
        """``absorb(state, lift(item))`` without lifting (mutates and returns ``state``)."""
        return self._set(state, self._entry(item))

    def _set(self, state: bytearray, entry: int) -> bytearray:
        """Raise one register of ``state`` (in place) to the rank ``entry`` names."""
        index = entry >> 8
        size = len(state)
        if size == self.m:
            rank = entry & 0xFF
            if rank > state[index]:
                state[index] = rank
            return state
        if size == _ENTRY:  # one register set: most sketches of a few items (no search)
            (found,) = _ENTRY_CODEC.unpack(state)
            at = 0 if index << 8 <= found else 1
        elif size:
            at, found = _find(state, index << 8)
        else:
            at, found = 0, -1
        if found >> 8 == index:
            if entry > found:
                state[at * _ENTRY] = entry & 0xFF  # the entry's low byte: its rank
            return state
        if size < self._sparse_bytes:
            state[at * _ENTRY:at * _ENTRY] = _ENTRY_CODEC.pack(entry)
            return state
        state[:] = self._dense(state)
        return self._set(state, entry)

    def _dense(self, state: bytearray) -> bytearray:
        """The ``m`` registers of a state of either form (a new ``bytearray``)."""
        if len(state) == self.m:
            return bytearray(state)
        return self._dense_of(map(_split, _entries(state)))

    def _dense_of(self, registers: Iterable[tuple[int, int]]) -> bytearray:
        """The ``m`` registers with these ``(index, rank)`` set (a new ``bytearray``)."""
        dense = bytearray(self.m)
        for index, rank in registers:
            dense[index] = rank
        return dense

    def _sparse(self, registers: dict[int, int]) -> bytearray:
        """The state of ``index -> rank`` (ranks above zero), sparse while it fits."""
        if len(registers) > self.sparse_limit:
            return self._dense_of(registers.items())
        return bytearray(b"".join(_ENTRY_CODEC.pack(index << 8 | registers[index])
                                  for index in sorted(registers)))

    def combine(self, a: bytearray, b: bytearray) -> bytearray:
        m = self.m
        if len(a) != m and len(b) == m:
            a, b = b, a  # copy the dense one, absorb the sparse one
        elif len(a) == m and len(b) == m and a.count(0) > b.count(0):
            a, b = b, a  # copy the denser one, absorb the sparser one
        return self.absorb(bytearray(a), b)

    def combine_all(self, values: Iterable[bytearray]) -> bytearray:
        """Fold many states into a new one; sparse states all at once: their entries read
        together and sorted, so each register's highest rank comes last and wins."""
        states = values if isinstance(values, Sequence) else list(values)
        m = self.m
        if (not _LITTLE_ENDIAN or not self._merges_as(HyperLogLog)
                or any(len(state) == m for state in states)):
            return super().combine_all(states)
        with memoryview(b"".join(states)) as raw, raw.cast("I") as entries:
            registers = dict(map(_split, sorted(entries.tolist())))
        return self._sparse(registers)

    def absorb(self, acc: bytearray, value: bytearray) -> bytearray:
        m = self.m
        if len(value) == _ENTRY:  # one item (a lifted one): the hot path
            (entry,) = _ENTRY_CODEC.unpack(value)
            if len(acc) == m:
                index, rank = entry >> 8, entry & 0xFF
                if rank > acc[index]:
                    acc[index] = rank
                return acc
            return self._set(acc, entry)
        if len(value) != m:  # a few items
            if not value:
                return acc
            if len(acc) == m:
                for index, rank in map(_split, _entries(value)):
                    if rank > acc[index]:
                        acc[index] = rank
                return acc
            registers = dict(map(_split, _entries(acc)))
            for index, rank in map(_split, _entries(value)):
                if rank > registers.get(index, 0):
                    registers[index] = rank
            acc[:] = self._sparse(registers)
            return acc
        if len(acc) != m:
            acc[:] = self._dense(acc)
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
        acc[:] = (b ^ ((a ^ b) & lanes)).to_bytes(m, "little")
        return acc

    def copy(self, state: bytearray) -> bytearray:
        return bytearray(state)

    def estimate(self, state: bytearray) -> float:
        """Estimated number of distinct items (bias-corrected, linear counting when small).

        A sparse state's estimate is linear counting over its set registers. The last
        estimates of dense states are remembered with the registers they were made of, per
        state object: a bolt emitting a key's estimate after every tuple asks again about
        states that most tuples left as they were (an item seen before, or not above its
        register).
        """
        m = self.m
        if len(state) != m:  # at most m // 32 set: always the linear-counting range
            zeros = m - len(state) // _ENTRY
            return m * math.log(m / zeros)  # the float _estimate gives these registers
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

    def avro_column(self, states: Sequence[bytearray]) -> Any:
        return {"precision": [self.precision] * len(states),
                "registers": list(map(bytes, states))}

    @property
    def avro_column_copies(self) -> bool:
        """The registers are copied to ``bytes``."""
        return type(self).avro_column is HyperLogLog.avro_column

    def from_avro_column(self, column: Any, size: int) -> list[bytearray]:
        precisions, registers = column["precision"], column["registers"]
        check_length(precisions, size)
        check_length(registers, size)
        if precisions.count(self.precision) == size and self._sparse_column(registers):
            return list(map(bytearray, registers))
        return [self.from_avro({"precision": p, "registers": r})  # names what it refuses
                for p, r in zip(precisions, registers, strict=True)]

    def _sparse_column(self, registers: Sequence[bytes]) -> bool:
        """Every one of ``registers`` is a well-formed sparse state, checked for all of
        them at once (see :meth:`_entries_valid`)."""
        lengths = list(map(len, registers))
        if any(n % _ENTRY for n in lengths) or max(lengths, default=0) > \
                self.sparse_limit * _ENTRY:
            return False  # dense ones among them, or malformed
        ends = {end - 1 for end in accumulate(n // _ENTRY for n in lengths)}
        return self._entries_valid(b"".join(registers), ends)

    def _entries_valid(self, joined: bytes | bytearray, last_entries: set[int]) -> bool:
        """The whole entries of ``joined`` (sparse states one after the other, the entry
        numbers ``last_entries`` ending each) have ranks a hash can give and indexes within
        the registers, ascending within each state, each once."""
        if not joined:
            return True
        ranks = joined[::_ENTRY]
        entries = _entries(joined)
        if 0 in ranks or max(ranks) > self._rest_bits + 1 or max(entries) >> 8 >= self.m:
            return False
        ascending = map(operator.lt, [entry | 0xFF for entry in entries[:-1]], entries[1:])
        return all(i in last_entries for i, up in enumerate(ascending) if not up)

    def from_avro(self, data: Any) -> bytearray:
        registers = data["registers"]
        if data["precision"] != self.precision:
            raise ValueError(f"snapshot has precision {data['precision']}, not {self.precision}")
        if len(registers) == self.m:  # dense (every snapshot written before sparse states)
            if self.m - registers.count(0) > self.sparse_limit:
                return bytearray(registers)
            state = self._sparse({index: rank for index, rank in enumerate(registers) if rank})
        else:
            state = bytearray(registers)
        self._check_sparse(state)
        return state

    def _check_sparse(self, state: bytearray) -> None:
        """Raise ``ValueError`` unless ``state`` is a well-formed sparse state."""
        if len(state) % _ENTRY or len(state) // _ENTRY > self.sparse_limit:
            raise ValueError(f"{self.describe()}: {len(state)} bytes of registers are neither "
                             f"{self.m} (dense) nor at most {self.sparse_limit} entries of "
                             f"{_ENTRY} bytes (sparse)")
        if not self._entries_valid(state, set()):
            raise ValueError(f"{self.describe()}: sparse registers out of order or out of "
                             f"range: {_entries(state)!r:.200}")

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
