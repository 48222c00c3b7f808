"""Pre-aggregation: a batch's tuples combined per group before a bolt absorbs them (what a
spout does for a ``preaggregate`` bolt). :class:`Combining` is the part of
:class:`~hailstorm.engine.BoltExecution` that combines: :meth:`Combining.
combine_contributions` one batch at once (:class:`Combined`), and for a bolt whose groups
are its state keys, batch after batch into one :class:`CombinedGroups`
(:meth:`Combining.combine_into`, :meth:`Combining.merge_combined`), which a spout does as it
stages a backlog. Absorbing what either gives equals absorbing every tuple. Pure.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from hailstorm.engine.calls import mapped
from hailstorm.monoids import EventTimed, Monoid, Window
from hailstorm.topology import BatchPaths, BoltSpec, RecordFailed

__all__ = ["Combined", "CombinedGroups", "Combining"]

_NO_VALUE: Any = object()
"""No value (``None`` may be one)."""

_key_of = itemgetter(0)

_PLAIN_KEYS = frozenset({str, int, float, bytes, bool, type(None)})
"""Key types that are hashable and routable as they are (others are checked)."""

_INTERCHANGEABLE_KEYS = frozenset({str, int, bytes})
"""Types whose equal values are interchangeable (unlike ``float``'s ``0.0``, ``-0.0``)."""


@dataclass(frozen=True, slots=True)
class Combined:
    """Contributions pre-aggregated by :meth:`Combining.combine_contributions`: for each
    group, the last tuple seen (what emit receives), the state key (``None`` for unkeyed
    state) and the combined value (for the bolt's value monoid)."""

    tuples: list[Any]
    keys: list[Any]
    values: list[Any]
    failures: list[tuple[int, RecordFailed]] = field(default_factory=list)
    """``(index in the input, failure)`` of the tuples left out."""

    def __len__(self) -> int:
        return len(self.tuples)


@dataclass
class CombinedGroups:
    """Contributions combined per state key across several calls of
    :meth:`Combining.combine_contributions` (see :meth:`Combining.merge_combined`):
    what one call over all their tuples would have given, for a bolt whose groups are its
    state keys."""

    values: Counter[Any] = field(default_factory=Counter)
    """State key -> combined value, in the order :meth:`combined` lists the groups (a
    ``Counter``, so that keys whose every value is 1 are counted by C code)."""
    last: dict[Any, Any] = field(default_factory=dict)
    """State key -> the group's last tuple (unless :attr:`keys_stand`)."""
    keys_stand: bool = True
    """Every group's last tuple is its key (``key=itself``, keys of types whose equal values
    are interchangeable), or no tuple is read (``emit=by_key``: the key goes in its place):
    :attr:`last` is not kept."""
    owned: set[Any] = field(default_factory=set)
    """The keys whose value was copied here (absorbed into in place from then on): a value
    taken from a :class:`Combined` may be shared."""

    def keep_last(self) -> dict[Any, Any]:
        """:attr:`last`, kept from now on (the keys standing for the groups so far)."""
        if self.keys_stand:
            self.keys_stand = False
            self.last = {key: key for key in self.values}
        return self.last

    def combined(self) -> Combined:
        keys = list(self.values)
        subjects = keys if self.keys_stand else list(map(self.last.__getitem__, keys))
        return Combined(subjects, keys, list(self.values.values()))


def _absorb_each(monoid: Monoid[Any], values: dict[Any, Any], owned: set[Any],
                 keys: Sequence[Any], lifted: Sequence[Any]) -> None:
    """Absorb each of ``lifted`` into ``values[key]`` by ``monoid``, each key moved to the
    end (last seen comes last). A value first taken as it is may be shared (lift may return
    one object for every tuple): it is copied before anything is absorbed into it, and its
    key is ``owned`` from then on."""
    absorb = monoid.absorb
    copy = None if monoid.immutable_state else monoid.copy
    pop = values.pop
    for key, value in zip(keys, lifted, strict=True):
        current = pop(key, _NO_VALUE)
        if current is _NO_VALUE:
            values[key] = value
        elif copy is None or key in owned:
            values[key] = absorb(current, value)
        else:
            owned.add(key)
            values[key] = absorb(copy(current), value)


def _add_each(sums: dict[Any, Any], keys: Sequence[Any], values: Sequence[Any]) -> None:
    """Add each of ``values`` to ``sums[key]`` (from 0), in order: keyed sums and counts,
    first seen first."""
    get = sums.get
    for key, value in zip(keys, values, strict=True):
        sums[key] = get(key, 0) + value


class Combining:
    """The combining part of :class:`~hailstorm.engine.BoltExecution` (what it needs of
    the rest is declared for the type checker below)."""

    if TYPE_CHECKING:
        spec: BoltSpec[Any, Any]
        keyed: bool
        window: EventTimed[Any] | None
        event_time: Callable[[Any], Any] | None
        late: object
        groups_by_key: bool
        emits_by_key: bool
        paths: BatchPaths
        value_monoid: Monoid[Any]

        def contributions(self, tuples: Sequence[Any]) -> tuple[
                list[tuple[Any, Any]], Sequence[int], list[tuple[int, RecordFailed]]]: ...

        def _keys_and_values(self, tuples: Sequence[Any]
                             ) -> tuple[list[Any] | None, list[Any], set[type]]: ...

        def group_of(self, t: Any, key: Any) -> Any: ...

    def combine_contributions(self, tuples: Sequence[Any]) -> Combined:
        """Pre-aggregate ``tuples`` (what a spout does for a ``preaggregate`` bolt): one
        combined contribution per group, in the order each group was last seen (keyed
        sums and counts without windows: first seen).

        For keyed state the group is the state key; for unkeyed state routed by ``key``
        (``parallelism > 1``) it is the routing key and the state key is ``None``;
        otherwise everything is one group. With window state, tuples of different windows
        are also different groups, so emit still sees a tuple of every window touched.
        Absorbing the result gives exactly the state that absorbing ``tuples`` one by one
        gives; tuples failing :meth:`contribution` are left out and listed in ``failures``.
        """
        if self.groups_by_key and tuples:
            combined = (self._combine_sums(tuples) if self.paths.adds_numbers
                        else self._combine_by_key(tuples))
            if combined is not None:
                return combined
        elif self.keyed and tuples and self._folds_windows:
            combined = self._combine_windows(tuples)
            if combined is not None:
                return combined
        contributions, indices, failures = self.contributions(tuples)
        groups = self._groups(tuples, contributions, indices)
        # Each group's values gathered, then folded at once by the monoid's combine_all (a
        # new state: lift may return one shared object for every tuple). A group seen once
        # keeps its value as it is, so the many groups seen once per batch
        # (high-cardinality keys) are never copied.
        parts: defaultdict[Any, list[Any]] = defaultdict(list)
        for group, (_key, value) in zip(groups, contributions, strict=True):
            parts[group].append(value)
        last = dict(zip(groups, indices, strict=True))  # each group's last tuple
        order = list(dict.fromkeys(reversed(groups)))
        order.reverse()  # groups in the order each was last seen
        combine_all = self.value_monoid.combine_all
        values = [part[0] if len(part) == 1 else combine_all(part)
                  for part in map(parts.__getitem__, order)]
        if not self.keyed:
            state_keys: list[Any] = [None] * len(order)
        elif self.window is None:
            state_keys = order
        else:
            state_keys = [group[0] for group in order]
        return Combined([tuples[last[g]] for g in order], state_keys, values, failures)

    def combine_into(self, groups: CombinedGroups, tuples: Sequence[Any]
                     ) -> list[tuple[int, RecordFailed]]:
        """:meth:`merge_combined` of :meth:`combine_contributions` of ``tuples`` (which
        came after those of ``groups``), for a bolt whose groups are its state keys;
        returns the tuples left out (``(index, failure)``). Plain keys whose every value
        is 1 (counts) are counted straight into ``groups`` by C code; other values not
        summed by C code are absorbed straight into ``groups``, tuple after tuple (one
        fold in the order the tuples came, as routing them at once folds them), and other
        sums are added the same way. With ``emit=by_key`` no last tuple is kept."""
        if tuples:
            try:
                keys, values, key_types = self._keys_and_values(tuples)
            except Exception:  # a user function or check failed: combine_contributions
                keys = None    # names the tuple
            if keys is not None and not self.paths.adds_numbers:
                _absorb_each(self.value_monoid, groups.values, groups.owned, keys, values)
                self._keep_last(groups, keys, tuples, key_types)
                return []
            if keys is not None and key_types <= _PLAIN_KEYS and (
                    self.paths.lift_is_one
                    or (set(map(type, values)) == {int} and values.count(1) == len(values))):
                groups.values.update(keys)  # first seen first, as Counter(keys) gives
                self._keep_last(groups, keys, tuples, key_types)
                return []
            if keys is not None:  # other sums: added in one pass, in the order they came
                _add_each(groups.values, keys, values)
                self._keep_last(groups, keys, tuples, key_types)
                return []
        combined = self.combine_contributions(tuples)
        self.merge_combined(groups, combined)
        return combined.failures

    def merge_combined(self, groups: CombinedGroups, combined: Combined) -> None:
        """Absorb ``combined`` (:meth:`combine_contributions` of tuples that came after
        those of ``groups``) into ``groups``, for a bolt whose groups are its state keys:
        each key's value combined by the value monoid, its last tuple replaced, and the
        groups in the order one call over all the tuples gives (keyed sums and counts:
        first seen; else last seen)."""
        if not self.groups_by_key:
            raise ValueError(f"bolt {self.spec.name!r}: only groups by state key merge")
        values, keys = groups.values, combined.keys
        self._keep_last(groups, keys, combined.tuples, set(map(type, keys)))
        if not values:  # (dict's update: a Counter's would count the pairs)
            dict.update(values, zip(keys, combined.values, strict=True))
            return
        if self.paths.adds_numbers:
            _add_each(values, keys, combined.values)
            return
        _absorb_each(self.value_monoid, values, groups.owned, keys, combined.values)

    def _keep_last(self, groups: CombinedGroups, keys: Sequence[Any], tuples: Sequence[Any],
                   key_types: set[type]) -> None:
        """Note ``tuples`` (of ``keys``) as their groups' last, unless the key stands for
        them: ``emit=by_key`` reads no tuple, and with ``key=itself`` a key of a type whose
        equal values are interchangeable is its tuple."""
        if groups.keys_stand and (self.emits_by_key or (
                self.paths.key_is_tuple and key_types <= _INTERCHANGEABLE_KEYS)):
            return
        groups.keep_last().update(zip(keys, tuples, strict=True))

    def _groups(self, tuples: Sequence[Any], contributions: Sequence[tuple[Any, Any]],
                indices: Sequence[int]) -> list[Any]:
        """:meth:`group_of` of every contribution (of ``tuples[indices[i]]``); for keyed
        state read from the contribution where the window can tell (see
        :meth:`~hailstorm.monoids.EventTimed.lifted_groups`), without calling
        ``event_time`` again."""
        if self.groups_by_key:
            return list(map(_key_of, contributions))
        window = self.window
        read = window.lifted_groups() if self.keyed and window is not None else None
        if read is not None:
            return [(key, read(value)) for key, value in contributions]
        group_of = self.group_of
        return [group_of(tuples[i], key)
                for i, (key, _value) in zip(indices, contributions, strict=True)]

    def _combine_by_key(self, tuples: Sequence[Any]) -> Combined | None:
        """:meth:`combine_contributions` for keyed state without windows, a batch at a
        time: keys and values as :meth:`_keys_and_values` gives them, then one loop
        absorbing the values of keys seen again (a batch of distinct keys, common with
        millions of users, combines nothing). Groups come in last-seen order, each with
        its last tuple, as from the tuple-by-tuple path (a compacting bolt emits in this
        order). None when a function fails or the monoid refuses a key or value (the
        caller takes the tuple-by-tuple path, which names them)."""
        try:
            keys, values, _types = self._keys_and_values(tuples)
            assert keys is not None  # keyed state
            last = dict(zip(keys, tuples, strict=True))
        except Exception:  # a user function or check failed on some tuple (any error):
            return None    # the tuple-by-tuple path names it
        if len(last) == len(keys):
            return Combined(list(tuples), keys, values)
        combined: dict[Any, Any] = {}
        _absorb_each(self.value_monoid, combined, set(), keys, values)
        order = list(combined)
        return Combined(list(map(last.__getitem__, order)), order,
                        list(map(combined.__getitem__, order)))

    @cached_property
    def _folds_windows(self) -> bool:
        """Window state whose contributions :meth:`_combine_windows` may fold before
        lifting them into their windows: a :class:`~hailstorm.monoids.Window` lifting,
        grouping and merging as the class itself does."""
        window = self.window
        return (isinstance(window, Window) and window.lifted_groups() is not None
                and window._merges_as(Window))

    def _combine_windows(self, tuples: Sequence[Any]) -> Combined | None:
        """:meth:`combine_contributions` for keyed window state, a batch at a time: the
        tuples grouped by key and windows first, each group's lifted values folded by the
        inner monoid's :meth:`~hailstorm.monoids.Monoid.combine_all`, and the fold put in
        its windows once, where the tuple-by-tuple path lifts every value into its
        windows and merges those (:meth:`~hailstorm.monoids.Window.combine_all` folds each
        window by the inner monoid too). A group's event time is its latest; none with
        ``late=`` (:meth:`~hailstorm.monoids.Window.lift_unexpiring`). Each of a group's
        windows covers every time of the group, so none expires within it (checked as
        :meth:`~hailstorm.monoids.Window.absorb` judges, float rounding aside). Groups
        come in last-seen order, each with its last tuple. None when a function fails, a
        check refuses or a window would expire (the caller takes the tuple-by-tuple path,
        which names the tuple)."""
        window = self.window
        assert isinstance(window, Window) and self.event_time is not None
        try:
            keys, values, _types = self._keys_and_values(tuples)
            assert keys is not None  # keyed state
            event_times = mapped(self.event_time, tuples)
            window.check_times(event_times)
            starts = list(map(tuple, map(window.window_starts, event_times)))
            if not all(starts):
                return None  # a time no window covers (infinite, say): refused one by one
            groups = list(zip(keys, starts, strict=True))
        except Exception:  # a user function or check failed on some tuple (any error):
            return None    # the tuple-by-tuple path names it
        parts: defaultdict[Any, list[Any]] = defaultdict(list)
        for group, value in zip(groups, values, strict=True):
            parts[group].append(value)
        last = dict(zip(groups, tuples, strict=True))  # each group's last tuple
        order = list(dict.fromkeys(reversed(groups)))
        order.reverse()  # groups in the order each was last seen
        if self.late is not None:
            times: dict[Any, Any] = dict.fromkeys(order)
        else:
            times = {}
            for group, event_time in zip(groups, event_times, strict=True):
                if group not in times or event_time > times[group]:
                    times[group] = event_time
            retention, size = window.retention, window.size
            if any(min(starts) <= t - retention - size for (_key, starts), t in times.items()):
                return None
        fold, copy = window.inner.combine_all, window.inner.copy
        combined = []
        for group in order:
            part = parts[group]
            value = part[0] if len(part) == 1 else fold(part)
            first, *others = group[1]  # window_starts' order, as lift fills the windows
            buckets = {first: value}
            for start in others:
                buckets[start] = copy(value)
            combined.append((times[group], buckets))
        return Combined(list(map(last.__getitem__, order)), list(map(_key_of, order)),
                        combined)

    def _combine_sums(self, tuples: Sequence[Any]) -> Combined | None:
        """:meth:`combine_contributions` for keyed sums and counts without windows, a batch
        at a time: keys and values as :meth:`_keys_and_values` gives them, the sums taken
        by C code (``Counter`` when every value is 1). Groups come in first-seen order, each
        with its last tuple. None when a function fails or the monoid refuses a key or value
        (the caller takes the tuple-by-tuple path, which names them). With ``key=itself``
        and keys of one type in ``_INTERCHANGEABLE_KEYS``, a group's last tuple equals its
        key and has its type, so the key stands for it."""
        try:
            keys, values, key_types = self._keys_and_values(tuples)
            assert keys is not None  # keyed state
            if self.paths.lift_is_one or (
                    set(map(type, values)) == {int} and values.count(1) == len(values)):
                sums: dict[Any, Any] = Counter(keys)
            else:
                sums = {}
                _add_each(sums, keys, values)
            if (self.paths.key_is_tuple and len(key_types) == 1
                    and key_types <= _INTERCHANGEABLE_KEYS):
                return Combined(list(sums), list(sums), list(sums.values()))
            last = dict(zip(keys, tuples, strict=True))
        except Exception:  # a user function or check failed on some tuple (any error):
            return None    # the tuple-by-tuple path names it
        return Combined(list(last.values()), list(last), list(sums.values()))
