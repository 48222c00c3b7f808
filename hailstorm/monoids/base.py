"""The :class:`Monoid` contract every state type follows, and what all monoids share. Pure.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from hailstorm.monoids.avro_columns import assemble, stripe

__all__ = ["DEFAULT_NAMESPACE", "MISSING", "Monoid", "S"]

S = TypeVar("S")
"""The type of a monoid's states."""

#: Namespace of the records of a top-level state schema.
DEFAULT_NAMESPACE = "hailstorm.state"


class Monoid(ABC, Generic[S]):
    """A commutative monoid over states of type ``S``."""

    #: Short name shown by ``hailstorm show`` and used in Avro schema names.
    name: str = "monoid"

    #: True when states are never mutated in place (ints, tuples, frozensets...): containers
    #: such as :class:`KeyedMap` then store values without copying them.
    immutable_state: ClassVar[bool] = False

    #: True when :meth:`to_avro` returns the state itself (so :meth:`from_avro` is the
    #: identity too): containers then hand such states to the Avro writer as they are.
    avro_as_is: bool = False

    @property
    def avro_column_copies(self) -> bool:
        """:meth:`avro_column` of states shares nothing that absorbing into them later
        changes, so a snapshot may take the column as its copy of them (see
        :meth:`~hailstorm.monoids.KeyedMap.copy_keys`): true of immutable states; a monoid
        of mutable states whose column is built anew says so."""
        return self.immutable_state

    @abstractmethod
    def empty(self) -> S:
        """The identity element (a fresh value each call)."""

    @abstractmethod
    def combine(self, a: S, b: S) -> S:
        """Associative, commutative merge; must not mutate ``a`` or ``b``."""

    def absorb(self, acc: S, value: S) -> S:
        """Merge ``value`` into ``acc`` (which the caller owns and may be mutated)."""
        return self.combine(acc, value)

    def combine_all(self, values: Iterable[S]) -> S:
        """Fold many states into a new state the caller owns: it shares nothing with
        ``values``, which are not mutated. Override it where a column of states folds
        faster at once (pre-aggregation folds each key's values of a batch with it).
        This one copies the first state and absorbs the others into the copy."""
        states = iter(values)
        first = next(states, MISSING)
        if first is MISSING:
            return self.empty()
        acc = self.copy(first)
        for v in states:
            acc = self.absorb(acc, v)
        return acc

    def _merges_as(self, owner: type[Monoid[Any]]) -> bool:
        """Whether this monoid merges as ``owner`` does (neither :meth:`combine` nor
        :meth:`absorb` overridden below it): a fold of ``owner``'s own
        (:meth:`combine_all`) holds only then; a subclass merging its own way folds by
        its :meth:`absorb`."""
        cls = type(self)
        return cls.combine is owner.combine and cls.absorb is owner.absorb

    def copy(self, state: S) -> S:
        """An independent copy of ``state`` (for handing state ``A`` to a snapshot writer)."""
        return self.combine(self.empty(), state)

    def check(self, value: Any) -> None:
        """Raise ``TypeError``/``ValueError`` when ``value`` (what a bolt's lift returned) is
        not a state of this monoid. Bolts call it before absorbing, so a bad record is
        quarantined instead of breaking the state or its snapshot. The default accepts
        anything; a user-defined monoid may override it."""

    def check_many(self, values: Sequence[Any]) -> None:
        """:meth:`check` for a batch: raise if any value is refused (which one is for
        :meth:`check` to tell). Override it when a batch can be checked faster."""
        if type(self).check is Monoid.check:
            return
        check = self.check
        for value in values:
            check(value)

    @abstractmethod
    def avro_schema(self) -> Any:
        """Avro schema (fastavro form) of the serialized state."""

    def avro_schema_in(self, namespace: str) -> Any:
        """Avro schema with named types placed under ``namespace`` (used when nested).

        The default ignores ``namespace``: a user-defined monoid whose schema defines named
        types must keep those names unique itself.
        """
        return self.avro_schema()

    @abstractmethod
    def to_avro(self, state: S) -> Any:
        """State -> a value matching :meth:`avro_schema`."""

    @abstractmethod
    def from_avro(self, data: Any) -> S:
        """Inverse of :meth:`to_avro`."""

    def avro_column(self, states: Sequence[S]) -> Any:
        """The :meth:`to_avro` values of ``states`` as one nested column
        (:func:`hailstorm.monoids.avro_columns.stripe`): how snapshots write a chunk of
        keyed values. A monoid may build it faster without the values in between; it
        must give exactly this."""
        values = states if self.avro_as_is else list(map(self.to_avro, states))
        return stripe(self.avro_schema(), values)

    def from_avro_column(self, column: Any, size: int) -> list[S]:
        """The ``size`` states whose :meth:`avro_column` is ``column``: :meth:`from_avro` of
        each value it holds (how snapshots load a chunk of keyed values). Raises what
        ``from_avro`` raises for a value, and ``ValueError`` when ``column`` holds another
        number of values. A monoid may build the states faster; it must give exactly
        these."""
        values = assemble(self.avro_schema(), column, size)
        return values if self.avro_as_is else list(map(self.from_avro, values))

    def describe(self) -> str:
        """Human description for ``hailstorm show`` (e.g. ``per_key(Count)``)."""
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


MISSING: Any = object()
"""A sentinel for "no entry" in the states' dict lookups (states may hold None)."""
