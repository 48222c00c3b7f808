"""Copies of some keys of a ``per_key`` state as a snapshot takes them: the Avro columns it
writes, built at once from the states, instead of a copy of every state and later its
column (pure; see :meth:`~hailstorm.monoids.KeyedMap.copy_keys`).

* :class:`KeyedColumns`: values of a :class:`~hailstorm.monoids.Record` whose
  :attr:`~hailstorm.monoids.Record.flat_columns` hold, one list per field, in the keys'
  own order (written as they are, a chunk at a time);
* :class:`KeyedValues`: immutable values (numbers, strings, tuples), the keys and the
  values themselves as two lists, sliced a chunk at a time as they are written;
* :class:`KeyedChunks`: values of any other monoid whose column shares nothing with its
  states (:attr:`~hailstorm.monoids.Monoid.avro_column_copies`: windows, sketches), each
  chunk of :data:`COLUMN_KEYS` keys striped into its nested column, as the
  ``per_key_nested_columns`` layout writes them.

Each keeps the keys in the order it was given them: a snapshot writes them so (see
:func:`~hailstorm.snapshots.format.write_snapshot` on why it does not sort them).

Read as a mapping, a copy holds the states themselves (built from its columns on first
use: tests and tools read it so, snapshots never).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

from hailstorm.monoids.base import MISSING, Monoid

if TYPE_CHECKING:
    from hailstorm.monoids.keyed import Record

__all__ = ["COLUMN_KEYS", "KeyedChunks", "KeyedColumns", "KeyedCopy", "KeyedValues"]

COLUMN_KEYS = 1024
"""Keys per record of the snapshots' column layouts (at most)."""


class KeyedCopy(Mapping[Any, Any]):
    """A copy of some keys of a ``per_key`` state as the Avro columns a snapshot writes."""

    __slots__ = ("_states",)

    def __init__(self) -> None:
        self._states: dict[Any, Any] | None = None

    @abstractmethod
    def column_chunks(self, size: int) -> Iterator[tuple[list[Any], Any]]:
        """``(keys, their nested column)`` in the copy's order, ``size`` keys at a
        time."""

    @abstractmethod
    def _built(self) -> dict[Any, Any]:
        """The states the columns hold, by key."""

    def _mapping(self) -> dict[Any, Any]:
        if self._states is None:
            self._states = self._built()
        return self._states

    def __getitem__(self, key: Any) -> Any:
        return self._mapping()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._mapping()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._mapping()!r})"


class _KeyList(KeyedCopy):
    """A copy that keeps its keys as one list, in their order."""

    __slots__ = ("key_list",)

    def __init__(self, keys: list[Any]) -> None:
        super().__init__()
        self.key_list = keys
        """The keys, without repeats."""

    def __iter__(self) -> Iterator[Any]:
        return iter(self.key_list)

    def __len__(self) -> int:
        return len(self.key_list)


class KeyedColumns(_KeyList):
    """Some keys of a ``per_key`` state of :class:`~hailstorm.monoids.Record` values whose
    :attr:`~hailstorm.monoids.Record.flat_columns` hold, copied as their Avro column (one
    list per field, in the order of :attr:`key_list`)."""

    __slots__ = ("_inner", "column")

    def __init__(self, inner: Record, keys: list[Any], column: dict[str, list[Any]]) -> None:
        super().__init__(keys)
        self._inner = inner
        self.column = column
        """Field name -> the field's Avro values, one per key of :attr:`key_list`."""

    def column_chunks(self, size: int) -> Iterator[tuple[list[Any], dict[str, list[Any]]]]:
        keys, column = self.key_list, self.column
        for start in range(0, len(keys), size):
            end = start + size
            yield keys[start:end], {name: values[start:end] for name, values in column.items()}

    def _built(self) -> dict[Any, Any]:
        states = self._inner.from_avro_column(self.column, len(self.key_list))
        return dict(zip(self.key_list, states, strict=True))


class KeyedValues(_KeyList):
    """Some keys of a ``per_key`` state of immutable values, copied as the list of the keys
    and the list of their values (which nothing changes in place: the copy shares them)."""

    __slots__ = ("_inner", "value_list")

    def __init__(self, inner: Monoid[Any], keys: list[Any], values: list[Any]) -> None:
        super().__init__(keys)
        self._inner = inner
        self.value_list = values
        """The state of each key of :attr:`key_list`."""

    def value_chunks(self, size: int) -> Iterator[tuple[list[Any], list[Any]]]:
        """``(keys, their states)`` in the copy's order, ``size`` keys at a time."""
        keys, values = self.key_list, self.value_list
        for start in range(0, len(keys), size):
            yield keys[start:start + size], values[start:start + size]

    def column_chunks(self, size: int) -> Iterator[tuple[list[Any], Any]]:
        column = self._inner.avro_column
        for keys, values in self.value_chunks(size):
            yield keys, column(values)

    def _built(self) -> dict[Any, Any]:
        return dict(zip(self.key_list, self.value_list, strict=True))


class KeyedChunks(KeyedCopy):
    """Some keys of a ``per_key`` state whose inner monoid's Avro column is a copy of its
    states (:attr:`~hailstorm.monoids.Monoid.avro_column_copies`), copied as the nested
    column of each chunk of :data:`COLUMN_KEYS` keys (:meth:`of`)."""

    __slots__ = ("_inner", "chunks", "size")

    def __init__(self, inner: Monoid[Any], chunks: list[tuple[list[Any], Any]],
                 size: int) -> None:
        super().__init__()
        self._inner = inner
        self.chunks = chunks
        """``(keys, their nested column)``, ``size`` keys each (the last: at most)."""
        self.size = size

    @classmethod
    def of(cls, inner: Monoid[Any], state: Mapping[Any, Any], keys: Sequence[Any],
           size: int = COLUMN_KEYS) -> KeyedChunks:
        """The copy of ``keys`` of ``state`` (an absent key: the inner identity; a repeat
        counts once, where the key first came), ``inner``'s states by key."""
        ordered = list(dict.fromkeys(keys))
        values = list(map(state.get, ordered, [MISSING] * len(ordered)))
        if MISSING in values:
            values = [inner.empty() if v is MISSING else v for v in values]
        column = inner.avro_column
        return cls(inner, [(ordered[start:start + size], column(values[start:start + size]))
                           for start in range(0, len(ordered), size)], size)

    def column_chunks(self, size: int) -> Iterator[tuple[list[Any], Any]]:
        if size == self.size:
            return iter(self.chunks)
        keys = list(self)  # another size than it was built for: from the states
        states, column = self._mapping(), self._inner.avro_column
        return ((keys[start:start + size], column([states[k] for k in keys[start:start + size]]))
                for start in range(0, len(keys), size))

    def _built(self) -> dict[Any, Any]:
        build = self._inner.from_avro_column
        return dict(chain.from_iterable(
            zip(keys, build(column, len(keys)), strict=True) for keys, column in self.chunks))

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(keys for keys, _column in self.chunks)

    def __len__(self) -> int:
        return sum(len(keys) for keys, _column in self.chunks)
