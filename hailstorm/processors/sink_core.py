"""A sink's round and commit policy, pure: when to commit its table, when to report a round.

A sink buffers the rows it receives (its writer, in the shell) and commits them with its
progress in one transaction. Two rules make that exactly once:

* **rows are committed through the low water mark** over the upstream instances, never
  beyond: a row above it may still be followed by rows below it;
* **a round is reported only once the table covers its clock**: bolts never re-emit what a
  committed round holds, so a round may only commit once every sink's table holds
  everything up to its clock. When the low water mark covers a pending round's clock
  (``CLOCK`` from upstream, or ``Flowing(e, C)`` from the master), the sink commits at once
  and then reports the round, as a bolt reports a snapshot. Partitions no upstream carries
  are complete by definition (:func:`covers`).

When to commit otherwise (rows of one key arriving between two commits are written once):
as soon as a round is due or arrived, when :data:`COMMIT_ROWS` rows wait, and while the
mark moves or rows wait: once the sink has read every frame that arrived (it is caught up)
and :data:`MIN_COMMIT_INTERVAL` has passed since the last commit began, or
:data:`COMMIT_INTERVAL` since it ended when frames keep waiting (a backlog); and when the
stream went quiet with rows waiting (bolts forward a watermark only when it moves, so the
tail of a burst would otherwise wait for the next round). A sink keeping up with a stream
thus commits again as soon as it has read what arrived during its last commit (a group
commit): a slow commit makes the next one larger, never later.

:class:`SinkCore` takes what arrived (watermarks, round clocks, idleness, with how many rows
wait and the time) and returns actions: :class:`Commit` (the shell commits the writer
through ``through`` and hands the new progress back to :meth:`SinkCore.committed`, or
:meth:`SinkCore.fenced` when the database refused) and :class:`ReportRound`. A sink without
a table or topic (``writes=False``) commits nothing: its progress is the low water mark.
No I/O, no clock of its own.

**One commit at a time.** The shell may run a commit on a thread of its own and read on
meanwhile: from a :class:`Commit` until :meth:`SinkCore.committed` (or
:meth:`SinkCore.fenced`) the core asks for no other. What arrives meanwhile is remembered,
and :meth:`SinkCore.resume`, asked once the commit ended, decides on it as if it arrived
then (a round announced meanwhile commits at once; the frames read meanwhile are the group
commit's). It reads on only while fewer than :data:`COMMIT_ROWS` rows wait
(:meth:`SinkCore.must_wait`): then it waits for the commit to end, so its buffer stays
bounded and a slow database holds its upstreams back, as a commit on its main thread did.

A round is announced several times (every upstream instance forwards the CLOCK, and the
master announces ``Flowing(e, C)`` too) and reported once: an announcement of a round at or
below the last one reported is ignored (rounds of a run only go up, and a round starts only
after the previous one committed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hailstorm.processors.watermarks import UpstreamWatermarks
from hailstorm.protocol.clock import NOTHING, UNBOUNDED, Clock, Partition

__all__ = [
    "COMMIT_INTERVAL",
    "COMMIT_ROWS",
    "MIN_COMMIT_INTERVAL",
    "Commit",
    "ReportRound",
    "SinkAction",
    "SinkCore",
    "covers",
]

COMMIT_ROWS = 100_000
"""A sink commits as soon as this many rows (upsert: keys) wait and the low water mark
allows, and while a commit runs reads no more frames once this many wait: a bound on its
buffer."""
COMMIT_INTERVAL = 0.5
"""The longest a sink waits after a commit (seconds) while the mark moves or rows wait and
frames keep arriving faster than it reads them (a backlog): it then commits at this pace,
rows of one key arriving meanwhile written once (a round due or :data:`COMMIT_ROWS` rows
commit at once)."""
MIN_COMMIT_INTERVAL = 0.05
"""The shortest time between the starts of two commits (seconds): a sink keeping up with a
stream commits at most this often, and its rows wait half of it on average in its buffer
(plus the commit itself)."""


@dataclass(frozen=True)
class Commit:
    """Commit the buffered rows at or below ``through`` (the low water mark), then tell
    :meth:`SinkCore.committed` the writer's progress (or :meth:`SinkCore.fenced`)."""

    through: Clock
    due: tuple[int, ...]
    """Epochs of the pending rounds the mark covers: reported once the table covers them."""


@dataclass(frozen=True)
class ReportRound:
    """The table covers round ``epoch``'s ``clock``: report it (``snapshots/<sink>/<i>``)."""

    epoch: int
    clock: Clock


SinkAction = Commit | ReportRound


def covers(through: Mapping[Partition, int], clock: Mapping[Partition, int],
           carried: Mapping[Partition, int]) -> bool:
    """``through`` includes everything of ``clock`` this sink can receive: partitions no
    upstream carries (absent from ``carried``) are complete by definition, or a sink fed by
    one spout of a two-topic topology would wait for the other topic forever."""
    return all(through.get(p, NOTHING) >= o for p, o in clock.items() if p in carried)


class SinkCore:
    """One sink instance's rounds and commit cadence in the run it joined (``epoch``).

    ``partitions`` are the source partitions in wire-index order (watermarks arrive keyed
    by index); ``committed`` is what the table already holds when the run starts;
    ``last_commit`` is when the cadence starts counting (the shell's start).
    """

    def __init__(
        self,
        epoch: int,
        upstreams: Iterable[str],
        partitions: Sequence[Partition],
        *,
        writes: bool,
        last_commit: float,
        committed: Mapping[Partition, int] | None = None,
    ) -> None:
        self.epoch = epoch
        self.marks = UpstreamWatermarks(upstreams)
        self.partitions = tuple(partitions)
        self.writes = writes
        self.rounds: dict[int, Clock] = {}
        """Rounds announced and not reported yet: epoch -> clock."""
        self.reported = -1
        """The latest round reported (-1: none yet)."""
        self.last_commit = last_commit
        """When the last commit ended (the shell's start before the first)."""
        self.last_started = last_commit
        """When the last commit began."""
        self.committed_through: Clock = dict(committed or {})
        """What the table holds as far as this sink knows (without a target: the mark)."""
        self.committing = False
        """A :class:`Commit` was asked for and has not ended (:meth:`committed`)."""
        self._held = False
        """Something arrived while committing that may call for a commit."""
        self._owed = False
        """A round was announced while committing: the next commit is at once."""

    # -- inputs ---------------------------------------------------------------------------

    def on_watermark(self, sender: str, watermark: Mapping[int, int], *, pending: int,
                     now: float, caught_up: bool) -> list[SinkAction]:
        """An upstream's WATERMARK (keyed by wire index); ``pending``: rows waiting;
        ``caught_up``: no frame waits to be read after this one."""
        advanced = self.marks.observe(sender, watermark)
        if advanced or pending:
            return self._decide(force=False, pending=pending, now=now, caught_up=caught_up)
        return []

    def on_round(self, epoch: int, clock: Mapping[Partition, int], *, pending: int,
                 now: float) -> list[SinkAction]:
        """A round's clock (CLOCK from upstream, or ``Flowing(epoch, clock)``): the first
        time a round of this run is announced, commit at once."""
        if epoch < self.epoch or epoch <= self.reported or epoch in self.rounds:
            return []
        self.rounds[epoch] = dict(clock)
        return self._decide(force=True, pending=pending, now=now, caught_up=False)

    def on_idle(self, *, pending: int, now: float) -> list[SinkAction]:
        """Nothing arrived for a while: commit the rows that wait, if any."""
        if pending:
            return self._decide(force=False, pending=pending, now=now, caught_up=True)
        return []

    def committed(self, commit: Commit, progress: Mapping[Partition, int],
                  now: float, *, took: float) -> list[ReportRound]:
        """The shell committed ``commit`` in ``took`` seconds, ending at ``now``;
        ``progress`` is what the table holds now."""
        self.committing = False
        self.committed_through = dict(progress)
        self.last_started, self.last_commit = now - took, now
        return self._settle(commit.due, commit.through)

    def fenced(self, progress: Mapping[Partition, int]) -> None:
        """The commit was refused (another writer moved the progress): ``progress`` is what
        the table holds. Nothing is reported; the next commit tries again."""
        self.committing = False
        self.committed_through = dict(progress)

    def must_wait(self, pending: int) -> bool:
        """While a commit runs, ``pending`` rows wait: read no more before it ends (at
        :data:`COMMIT_ROWS`, what the next commit takes at once)."""
        return self.committing and pending >= COMMIT_ROWS

    def resume(self, *, pending: int, now: float, caught_up: bool) -> list[SinkAction]:
        """A commit ended (:meth:`committed`, :meth:`fenced`): decide on what arrived while
        it ran (nothing did: no action)."""
        if not self._held:
            return []
        force, self._held, self._owed = self._owed, False, False
        return self._decide(force=force, pending=pending, now=now, caught_up=caught_up)

    # -- policy ---------------------------------------------------------------------------

    def low_water_mark(self) -> Clock:
        """The low water mark of the partitions some upstream carries (the others are
        absent: no row of theirs can ever reach this sink)."""
        marks = self.marks.lwm(range(len(self.partitions)))
        return {self.partitions[i]: offset for i, offset in marks.items()
                if offset < UNBOUNDED}

    def cadence_due(self, now: float, *, caught_up: bool) -> bool:
        """The cadence's commit is due: caught up and :data:`MIN_COMMIT_INTERVAL` after the
        last commit began, or :data:`COMMIT_INTERVAL` after it ended in any case."""
        if caught_up and now - self.last_started >= MIN_COMMIT_INTERVAL:
            return True
        return now - self.last_commit >= COMMIT_INTERVAL

    def _decide(self, *, force: bool, pending: int, now: float,
                caught_up: bool) -> list[SinkAction]:
        if self.committing:  # one at a time: decided on when it ends (resume)
            self._held, self._owed = True, self._owed or force
            return []
        if not self.marks.complete:
            return []
        lwm = self.low_water_mark()
        due = tuple(e for e, clock in sorted(self.rounds.items()) if covers(lwm, clock, lwm))
        if not self.writes:
            self.committed_through = lwm
            return list(self._settle(due, lwm))
        if force or due or pending >= COMMIT_ROWS or self.cadence_due(now, caught_up=caught_up):
            self.committing = True
            return [Commit(lwm, due)]
        return []

    def _settle(self, due: Sequence[int], carried: Mapping[Partition, int]) -> list[ReportRound]:
        """Report every round of ``due`` the table covers; the others wait for a commit."""
        reports = []
        for epoch in due:
            clock = self.rounds.pop(epoch)
            if covers(self.committed_through, clock, carried):
                reports.append(ReportRound(epoch, clock))
                self.reported = max(self.reported, epoch)
            else:
                self.rounds[epoch] = clock  # the next commit gets there
        return reports
