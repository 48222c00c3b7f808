"""Test helpers for hailstorm users: the sequential reference model and monoid law checks.

:func:`run_model` runs a topology in one process over a finite list of messages; it is the
oracle distributed runs are compared with.

>>> from hypothesis import strategies as st
>>> from hailstorm.monoids import Count, per_key
>>> check_monoid_laws(per_key(Count()), st.dictionaries(st.text(), st.integers(0, 9)))

:func:`check_monoid_laws` needs a strategy of *states*; :func:`states_of` builds one by
folding lifted values, e.g. ``states_of(m, st.text().map(m.lift))``.
"""

from __future__ import annotations

import copy as _copy
import io
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import fastavro
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hailstorm.model import Message, ModelResult, messages, run_model
from hailstorm.monoids import Monoid
from hailstorm.monoids.avro_columns import stripe
from hailstorm.monoids.scalars import canonical_text

__all__ = [
    "Message",
    "ModelResult",
    "approx_equal",
    "avro_round_trip",
    "check_monoid_laws",
    "messages",
    "run_model",
    "states_of",
]

Equal = Callable[[Any, Any], bool]


def states_of(
    monoid: Monoid[Any], lifted: st.SearchStrategy[Any], *, max_values: int = 8
) -> st.SearchStrategy[Any]:
    """States built by folding up to ``max_values`` lifted values with ``combine_all``."""
    return st.lists(lifted, max_size=max_values).map(monoid.combine_all)


def approx_equal(rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> Equal:
    """An ``equal`` for :func:`check_monoid_laws` that compares floats with ``math.isclose``.

    Recurses into dicts (same keys), lists, tuples and sets (sets compare with ``==``).
    """

    def eq(a: Any, b: Any) -> bool:
        if isinstance(a, float) or isinstance(b, float):
            if not isinstance(a, int | float) or not isinstance(b, int | float):
                return False
            return a == b or math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(eq(v, b[k]) for k, v in a.items())
        if isinstance(a, list | tuple) and isinstance(b, list | tuple):
            return (
                type(a) is type(b)
                and len(a) == len(b)
                and all(eq(x, y) for x, y in zip(a, b, strict=True))
            )
        return bool(a == b)

    return eq


def avro_round_trip(monoid: Monoid[Any], state: Any) -> Any:
    """Serialize ``state`` with the monoid's parsed Avro schema and read it back."""
    schema = fastavro.parse_schema(monoid.avro_schema())
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, monoid.to_avro(state))
    buf.seek(0)
    return monoid.from_avro(fastavro.schemaless_reader(buf, schema, None))


def _show(x: Any, limit: int = 400) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[:limit] + f"... ({len(r)} chars)"


def check_monoid_laws(
    monoid: Monoid[Any],
    values: st.SearchStrategy[Any],
    *,
    max_examples: int = 200,
    equal: Equal | None = None,
) -> None:
    """Property-test ``monoid`` on states drawn from ``values``; raise AssertionError if broken.

    Checks identity (both sides), associativity, commutativity, that ``combine`` mutates
    neither input nor returns structure shared with them, that ``absorb`` agrees with
    ``combine``, that ``combine_all`` folds (lists and iterators, empty and single) into a
    new state sharing nothing with its inputs, that ``copy`` is equal and independent, and that
    states survive an Avro round trip (``parse_schema`` + schemaless writer/reader) and
    combine after it as before (a state loaded from a snapshot must not change a result),
    and that ``avro_column`` (how snapshots write a chunk of keyed values) gives the
    column of exactly what ``to_avro`` gives, which ``from_avro_column`` reads back as
    ``from_avro`` does.
    ``equal`` replaces ``==`` (e.g. :func:`approx_equal` for float states). The error message
    names the monoid, the law and the counterexample.
    """
    eq: Equal = equal or (lambda x, y: bool(x == y))
    what = monoid.describe()
    try:
        schema = fastavro.parse_schema(monoid.avro_schema())
    except Exception as exc:  # broad: the user's avro_schema() and fastavro parsing
        raise AssertionError(f"{what}: avro_schema() is not a valid Avro schema: {exc}") from exc

    @contextmanager
    def law(name: str, **example: Any) -> Iterator[None]:
        shown = ", ".join(f"{k}={_show(v)}" for k, v in example.items())
        try:
            yield
        except AssertionError as exc:
            raise AssertionError(f"{what}: {name} violated: {exc} [{shown}]") from None
        except Exception as exc:  # broad: the user's monoid may raise anything; an AssertionError
            raise AssertionError(f"{what}: {name} raised {exc!r} [{shown}]") from exc

    def same(x: Any, y: Any, detail: str) -> None:
        if not eq(x, y):
            raise AssertionError(f"{detail}: {_show(x)} != {_show(y)}")

    def combine(a: Any, b: Any) -> Any:
        return monoid.combine(a, b)

    def round_trip(state: Any) -> Any:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, monoid.to_avro(state))
        buf.seek(0)
        return monoid.from_avro(fastavro.schemaless_reader(buf, schema, None))

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        report_multiple_bugs=False,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )
    @given(a=values, b=values, c=values)
    def laws(a: Any, b: Any, c: Any) -> None:
        a0, b0, c0 = _copy.deepcopy(a), _copy.deepcopy(b), _copy.deepcopy(c)

        with law("left identity", a=a0):
            same(combine(monoid.empty(), a), a0, "combine(empty, a) != a")
        with law("right identity", a=a0):
            same(combine(a, monoid.empty()), a0, "combine(a, empty) != a")
        with law("immutability of combine inputs", a=a0, b=b0):
            ab = combine(a, b)
            same(a, a0, "combine(a, b) mutated a")
            same(b, b0, "combine(a, b) mutated b")
        with law("commutativity", a=a0, b=b0):
            same(ab, combine(b, a), "combine(a, b) != combine(b, a)")
        with law("associativity", a=a0, b=b0, c=c0):
            left = combine(ab, c)
            right = combine(a, combine(b, c))
            same(left, right, "combine(combine(a, b), c) != combine(a, combine(b, c))")
        with law("combine result independence", a=a0, b=b0, c=c0):
            r = combine(a, b)
            monoid.absorb(r, c)
            same(a, a0, "absorbing into combine(a, b) changed a")
            same(b, b0, "absorbing into combine(a, b) changed b")
        with law("absorb agrees with combine", a=a0, b=b0):
            absorbed = monoid.absorb(monoid.copy(a), b)
            same(absorbed, ab, "absorb(copy(a), b) != combine(a, b)")
            same(b, b0, "absorb(acc, b) mutated b")
            same(monoid.absorb(monoid.empty(), a), a0, "absorb(empty, a) != a")
        with law("combine_all folds", a=a0, b=b0, c=c0):
            folded = monoid.combine_all([a, b, c])
            same(folded, left, "combine_all([a, b, c]) != a+b+c")
            same(monoid.combine_all(iter([a, b, c])), left,
                 "combine_all(iter([a, b, c])) != a+b+c")
            same(monoid.combine_all([]), monoid.empty(), "combine_all([]) != empty")
            same(monoid.combine_all([a]), a0, "combine_all([a]) != a")
            same(a, a0, "combine_all mutated a")
            same(b, b0, "combine_all mutated b")
        with law("combine_all result independence", a=a0, b=b0, c=c0):
            monoid.absorb(monoid.combine_all([a, b]), c)
            monoid.absorb(monoid.combine_all([a]), b)
            same(a, a0, "absorbing into combine_all([a, ...]) changed a")
            same(b, b0, "absorbing into combine_all([a, b]) changed b")
        with law("copy independence", a=a0, b=b0):
            dup = monoid.copy(a)
            same(dup, a0, "copy(a) != a")
            monoid.absorb(dup, b)
            same(a, a0, "absorbing into copy(a) changed a")
        for name, state in (("a", a), ("combine(a, b)", ab)):
            with law("Avro round trip", state=state):
                same(round_trip(state), state, f"from_avro(to_avro({name})) != {name}")
        with law("Avro column", a=a0, b=b0):
            states = [a, b, ab]
            column = monoid.avro_column(states)
            striped = stripe(monoid.avro_schema(), [monoid.to_avro(s) for s in states])
            if canonical_text(column) != canonical_text(striped):
                raise AssertionError(f"avro_column([a, b, combine(a, b)]) is {_show(column)}, "
                                     f"not the column of their to_avro {_show(striped)}")
            read = monoid.from_avro_column(column, len(states))
            for state, back in zip(states, read, strict=True):
                same(back, state, "from_avro_column(avro_column(states)) != states")
            same(read, [round_trip(s) for s in states],
                 "from_avro_column(avro_column(states)) != from_avro(to_avro(s)) of each")
        with law("combine after an Avro round trip", a=a0, b=b0):
            # A state loaded from a snapshot must combine as the state itself did.
            same(combine(round_trip(a), b), ab, "combine(from_avro(to_avro(a)), b) != "
                 "combine(a, b)")

    laws()
