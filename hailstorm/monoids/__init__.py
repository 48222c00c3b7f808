"""Commutative monoids: the only kind of state a hailstorm bolt keeps.

A :class:`Monoid` describes a *type* of state (it holds configuration, never data):
``empty()`` is the identity, ``combine(a, b)`` must be associative and commutative, and
``combine`` never mutates its arguments. ``absorb(acc, value)`` is the hot-path variant that
may update ``acc`` in place and returns the result; the runtime only calls it on state it
owns. Every monoid knows the Avro schema of its state, because snapshots are Avro files
anyone can read with fastavro.

States are plain Python data (``int``, ``float``, ``tuple``, ``dict``, ``set``,
``bytearray``, ``None``) so they compare with ``==`` and pickle cheaply. Library monoids
offer a ``lift(...)`` method that turns one input tuple into a state, e.g.
``per_key(Count()).lift("page-1", Count.one)``.

The library:

=============================  ==========================================================
monoid                         state
=============================  ==========================================================
``Sum(kind)``                  ``int`` (``"long"``) or ``float`` (``"double"``)
``Count()``                    ``int``
``Min(kind)``, ``Max(kind)``   ``None`` (identity) or the value
``Mean()``                     ``(sum: float, count: int)``
``Last(value_type)``           ``None`` or ``(order, value)``
``SetUnion(item_type)``        ``set`` of items
``Events(value_type)``         ``dict`` event id -> value
``TopK(k)``                    ``dict`` item -> score, at most ``k`` entries
``HyperLogLog(precision)``     ``bytearray``: 4 bytes per set register while at most
                               ``2**precision // 32`` are set, else every register
``CountMinSketch(w, d)``       ``dict`` cell index -> non-zero counter (sparse d x w grid)
``KeyedMap(inner)``            ``dict`` key -> inner state
``TumblingWindow``,            ``(max_event_time_seen or None, dict window_start -> inner
``SlidingWindow``              state)``
``Ttl(inner, ttl)``            ``tuple`` of sessions ``(start, end, inner_state, ...)``
=============================  ==========================================================

User-defined monoids are ordinary subclasses. For example a boolean "any" flag:

>>> class AnyTrue(Monoid[bool]):
...     name = "AnyTrue"
...     immutable_state = True
...     def empty(self) -> bool:
...         return False
...     def combine(self, a: bool, b: bool) -> bool:
...         return a or b
...     def avro_schema(self) -> str:
...         return "boolean"
...     def to_avro(self, state: bool) -> bool:
...         return state
...     def from_avro(self, data: bool) -> bool:
...         return data
>>> flags = per_key(AnyTrue())
>>> flags.combine({"a": False}, {"a": True, "b": False})
{'a': True, 'b': False}
>>> flags.describe()
'per_key(AnyTrue)'

Check it with :func:`hailstorm.testing.check_monoid_laws` before trusting it. Snapshots write
keyed values a chunk at a time as :meth:`Monoid.avro_column` gives them (the column of their
``to_avro`` values, see :mod:`~hailstorm.monoids.avro_columns`); a monoid may override it to
build the column faster, and the laws check that it gives the same.

Avro names: library monoids build their schema with :meth:`Monoid.avro_schema_in`, which puts
every record under a namespace derived from its position in the nesting
(``hailstorm.state.PerKeyEntry``, ``hailstorm.state.per_key.Tumbling``,
``hailstorm.state.per_key.tumbling.Mean``...), so nested schemas never redefine a name.

Modules, one per family: :mod:`~hailstorm.monoids.base` (the :class:`Monoid` contract),
:mod:`~hailstorm.monoids.scalars`, :mod:`~hailstorm.monoids.containers`,
:mod:`~hailstorm.monoids.sketches`, :mod:`~hailstorm.monoids.keyed` (``per_key`` and
``Record``), :mod:`~hailstorm.monoids.windows`, :mod:`~hailstorm.monoids.ttl`, the
private Avro codec layer :mod:`~hailstorm.monoids.avro` and the Avro values' nested columns
:mod:`~hailstorm.monoids.avro_columns`; this package re-exports the public names.
"""

from hailstorm.monoids.base import DEFAULT_NAMESPACE, Monoid
from hailstorm.monoids.containers import Events, SetUnion, TopK
from hailstorm.monoids.keyed import KeyedMap, Record, per_key
from hailstorm.monoids.keyed_copies import KeyedChunks, KeyedColumns, KeyedValues
from hailstorm.monoids.scalars import Count, Last, Max, Mean, Min, Sum
from hailstorm.monoids.sketches import CountMinSketch, HyperLogLog, stable_hash
from hailstorm.monoids.ttl import Ttl
from hailstorm.monoids.windows import (
    EventTimed,
    SlidingWindow,
    TumblingWindow,
    Window,
    WindowState,
    WindowValue,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "Count",
    "CountMinSketch",
    "EventTimed",
    "Events",
    "HyperLogLog",
    "KeyedChunks",
    "KeyedColumns",
    "KeyedMap",
    "KeyedValues",
    "Last",
    "Max",
    "Mean",
    "Min",
    "Monoid",
    "Record",
    "SetUnion",
    "SlidingWindow",
    "Sum",
    "TopK",
    "Ttl",
    "TumblingWindow",
    "Window",
    "WindowState",
    "WindowValue",
    "per_key",
    "stable_hash",
]
