"""Dropping the closed windows of a bolt routing late data (``late=``). Pure.

A tuple reaches such a bolt only when it is not late for its partition: its window's
``start + size + retention`` is above the partition's stream time (see
:mod:`hailstorm.lateness`). A bolt instance keeps, per upstream spout instance and
partition, the latest window start it received; the smallest of those over every one its
upstreams carry is at or below every stream time (each spout keeps its own, so two spouts
reading one topic count apart). A window that closed at that bound can receive no tuple any
more, so dropping it (and a key left without windows) changes no row.

A pass is needed only when the bound rose. A tuple that is not late for its partition
brings windows that do not close before that partition's progress, and so not before the
bound (the smallest progress: progress only grows, and a pending round's is an earlier
one). So once a pass over every key ends, nothing in the state is closed at the bound it
began with, nor at any lower one, until the bound rises past it
(:meth:`ClosedWindows.expire` then starts the next pass). The bound falls only when an
upstream carries a partition it did not before; passes then resume as soon as it rises
above where it fell to (a window that partition brought earlier may wait until then: only
memory, never a row).

The same holds for ttl sessions (:class:`~hailstorm.monoids.Ttl`): a session ending
``ttl + retention`` at or before the bound can be reached by no tuple that is not late.

While a round is pending, the bound is the one when its clock arrived (every tuple absorbed
then was within the clock): what is dropped goes into that round's snapshot, and a bolt
restored from it replays the tuples after the clock, which must find nothing they reach
dropped. A later bound, raised by tuples after the clock, could cut a window those tuples
had reached (:meth:`ClosedWindows.round_started`). A key's parts in the segments are cut as
one state (:meth:`~hailstorm.monoids.EventTimed.cut`): a ttl session may be split across
them (with the round's bound, a later part cannot reach a closed earlier one, but the cut
does not rely on it).

Snapshots follow: a key whose value changed by dropping is written anew in the next delta,
and a key dropped whole is written with the identity (no window, no session), which loading
drops again (:func:`~hailstorm.lateness.forget_dropped`). The model keeps everything;
:meth:`~hailstorm.model.ModelResult.comparable` is how a state is compared with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableSet, Sequence
from typing import Any

from hailstorm.topology import BoltSpec

__all__ = ["SLICES_PER_PASS", "ClosedWindows"]

SLICES_PER_PASS = 5
"""A pass over the keys takes at most this many calls of :meth:`ClosedWindows.expire`, so the
sweep keeps up with keys that arrive fast (a slice costs about 1 µs a key)."""


class ClosedWindows:
    """One bolt instance's closed windows (or ttl sessions): noted as contributions
    arrive, dropped a slice of keys at a time by :meth:`expire`."""

    def __init__(self, spec: BoltSpec[Any, Any]) -> None:
        assert spec.window is not None
        self.keyed = spec.keyed
        self.window = spec.window
        self.reached: dict[tuple[str, Any], Any] = {}
        """The latest event-time progress received per ``(upstream, partition)`` (window
        start, or ttl session end: :meth:`~hailstorm.monoids.EventTimed.reached`): each
        spout keeps its own stream time, so two spouts reading one topic progress apart."""
        self._at_rounds: list[dict[Any, Any]] = []
        """:attr:`reached` when each pending round's clock arrived, oldest first."""
        self._sweep: list[Any] = []
        """Keys still to look at in the current pass."""
        self._slice = 0
        """Keys a call looks at in the current pass."""
        self._pass_bound: Any = None
        """The bound the current pass began with."""
        self._swept_bound: Any = None
        """The bound the last whole pass began with: nothing is closed at it (see the
        module), so a pass at a bound no higher finds nothing to drop."""
        self.windows = 0
        """Closed windows (or sessions) dropped so far."""
        self.keys = 0
        """Keys dropped with their last window so far."""

    def note(self, partitions: Sequence[Any], contributions: Sequence[tuple[Any, Any]],
             upstream: str = "") -> None:
        """Contributions ``(key, value)`` arrived from ``partitions`` through ``upstream``."""
        reached = self.reached
        progress = self.window.reached
        for p, (_key, value) in zip(partitions, contributions, strict=True):
            at = progress(value)
            if at is not None and ((upstream, p) not in reached or at > reached[upstream, p]):
                reached[upstream, p] = at

    def round_started(self) -> None:
        """A round's clock arrived: every tuple absorbed so far is within it, so the
        progress now is what that round's snapshot may be cut at."""
        self._at_rounds.append(dict(self.reached))

    def round_written(self) -> None:
        """The oldest pending round's snapshot was handed out."""
        self._at_rounds.pop(0)

    def round_dropped(self, index: int) -> None:
        """The pending round at ``index`` (oldest first) was dropped, never to be written."""
        self._at_rounds.pop(index)

    def bound(self, partitions: Mapping[Any, Any] | None,
              carried: Iterable[tuple[str, Any]] | None = None) -> Any:
        """What closed at this event time is closed for good: the smallest progress over
        ``carried`` (every ``(upstream, partition)`` the upstreams carry; by default
        ``partitions`` through the upstream ``""``); None until each sent a tuple. While a
        round is pending, its progress when its clock arrived: a snapshot holds only cuts
        that tuples within its clock justify, or replaying the tuples after it could
        reach what was cut."""
        reached = self._at_rounds[0] if self._at_rounds else self.reached
        required = list(carried) if carried is not None else [("", p) for p in partitions or ()]
        if not partitions or not required or any(k not in reached for k in required):
            return None
        return min(reached[k] for k in required)

    def expire(self, segments: list[Any], partitions: Mapping[Any, Any] | None,
               budget: int, changed: MutableSet[Any] | None = None,
               carried: Iterable[tuple[str, Any]] | None = None) -> int:
        """Drop from ``segments`` (the bolt's states, changed in place) what closed at
        :meth:`bound`, looking at up to ``budget`` keys from where the last call stopped;
        returns the windows (or sessions) dropped; a call looks at more keys when the pass
        would otherwise take more than :data:`SLICES_PER_PASS` calls, and none when the
        bound has not risen since the last whole pass began (see the module). A key's parts
        in the segments are cut as one state. The keys of ``segments[0]`` this changes or
        removes are added to ``changed`` (what the next delta snapshot holds)."""
        bound = self.bound(partitions, carried)
        if bound is None:
            return 0
        if not self._sweep and self._swept_bound is not None and bound <= self._swept_bound:
            self._swept_bound = bound  # (lower when a partition is newly carried)
            return 0
        window = self.window
        cut_of, open_part, parts = window.cut, window.open_part, window.parts
        before = self.windows
        if not self.keyed:
            cut = cut_of(segments, bound)
            for i, value in enumerate(segments):
                kept = open_part(value, cut)
                if kept is not value:
                    self.windows += parts(value) - parts(kept)
                    segments[i] = kept
            self._swept_bound = bound
            return self.windows - before
        if not self._sweep:
            self._sweep = list(segments[0]) if len(segments) == 1 else list(
                dict.fromkeys(k for segment in segments for k in segment))
            self._slice = -(-len(self._sweep) // SLICES_PER_PASS)
            self._pass_bound = bound
        sweep = self._sweep
        for _ in range(min(max(budget, self._slice), len(sweep))):
            key = sweep.pop()
            held = [(i, segment, segment[key]) for i, segment in enumerate(segments)
                    if key in segment]
            cut = cut_of([value for _i, _segment, value in held], bound) if held else None
            if cut is None:
                continue
            left = len(held)
            for i, segment, value in held:
                kept = open_part(value, cut)
                if kept is value:
                    continue
                if i == 0 and changed is not None:
                    changed.add(key)
                self.windows += parts(value) - parts(kept)
                if parts(kept):
                    segment[key] = kept  # a new value: a snapshot may share the old
                else:
                    del segment[key]
                    left -= 1
            if not left:
                self.keys += 1
        if not sweep:
            self._swept_bound = self._pass_bound
        return self.windows - before
