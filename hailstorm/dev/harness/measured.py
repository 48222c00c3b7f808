"""What a fault hurts and how the topology recovers from it: :class:`MeasuredRun` is the
:class:`~hailstorm.dev.harness.deployment.Deployment` that
:class:`~hailstorm.dev.harness.run.TopologyRun` hurts, knowing how far the topology got and
how much of it no round committed (so that a fault hits data in flight), and measuring the
recovery from each fault (flowing again, a commit past it, which processors restarted)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from hailstorm import kafka
from hailstorm.dev.harness.deployment import Deployment
from hailstorm.dev.harness.evidence import (
    COINCIDENT_RECOVERY,
    JOINED_RECOVERY,
    NODE_BACK,
    SESSION_EXPIRED,
    VICTIM_GONE,
    coincident_recovery,
    expects_recovery,
    fault_window,
    recovery_window,
)
from hailstorm.dev.harness.faults import (
    _RECOVERING,
    Fault,
    Recovery,
    _clock_key,
    restarted_processors,
)
from hailstorm.dev.harness.producing import BackgroundProducer
from hailstorm.dev.harness.wait import HarnessError
from hailstorm.protocol.clock import Partition, merge_max
from hailstorm.protocol.layout import RecoveryRecord
from hailstorm.protocol.states import Flowing

__all__ = ["MeasuredRun"]


class MeasuredRun(Deployment):
    """A deployment whose progress and recoveries the harness measures (context manager)."""

    # -- what the topology holds ---------------------------------------------------------

    def position(self) -> dict[str, int]:
        """The furthest offsets known: committed clock, master clock, spout positions."""
        best: dict[str, int] = {}

        def merge(clock: Mapping[Partition, int] | None) -> None:
            for p, o in (clock or {}).items():
                best[_clock_key(p)] = max(best.get(_clock_key(p), -1), o)

        committed = self.committed()
        merge(committed.clock if committed else None)
        master = self.master()
        merge(getattr(master.state, "clock", None) if master else None)
        for report in self.processors().values():
            merge(report.position)
        return best

    def uncommitted(self) -> int | None:
        """Messages in the source partitions that the committed clock does not cover yet
        (None: unknown). While the run's producer feeds every source topic, from what it
        had acknowledged (a ZooKeeper read: quick enough to take just before a fault);
        otherwise from Kafka's log ends (None when the broker does not answer)."""
        committed = self.committed()
        return self._beyond(committed.clock if committed else {})

    def unfixed(self) -> int | None:
        """Messages beyond every clock the master has fixed, the committed round's and the
        one it flows with (a round that may still commit); 0 while it is in any state but
        ``Flowing`` (a round's clock then may be the spouts' positions, whatever they read),
        None: unknown. What a recovery struck now cannot commit before it ends."""
        master = self.master()
        if master is None or not isinstance(master.state, Flowing):
            return 0
        committed = self.committed()
        return self._beyond(merge_max(committed.clock if committed else {},
                                      master.state.clock or {}))

    def _beyond(self, clock: Mapping[Partition, int]) -> int | None:
        """Messages in the source partitions past ``clock`` (see :meth:`uncommitted`)."""
        producer = self.producer
        if producer is not None and self.source_topics() == sorted(producer.produced.topics):
            return sum(max(0, last - clock.get(part, -1))
                       for part, last in producer.produced.clock().items())
        try:
            partitions = [(topic, number) for topic in self.source_topics()
                          for number in kafka.partitions_of(self.stack.kafka, topic, timeout=5)]
            ends = kafka.log_ends(self.stack.kafka, partitions)
        except Exception:  # a broker fault in progress: unknown, not zero
            return None
        return sum(max(0, end - clock.get(p, -1) - 1) for p, end in ends.items())

    def await_uncommitted(self, producer: BackgroundProducer | None,
                          timeout: float = 15.0) -> None:
        """While ``producer`` writes, wait (at most ``timeout`` s) until some produced data is
        not committed yet, so that the next fault hurts data in flight (a producer writes in
        chunks: between two, everything may be committed). Returns either way: a fault that
        still hits an idle topology is reported as such."""
        self._await_data(self.uncommitted, producer, timeout, poll=0.05)

    def await_unfixed(self, producer: BackgroundProducer | None,
                      timeout: float = 15.0) -> None:
        """While ``producer`` writes, wait (at most ``timeout`` s) until the master flows
        with some produced data beyond every clock it has fixed (:meth:`unfixed`), so that a
        fault timed for the recovery that a trigger struck now starts hits data in flight:
        without it, a round whose clock covered the producer's last chunk could commit
        after the trigger and leave the recovery nothing to replay until the next chunk.
        Returns either way, as :meth:`await_uncommitted` does."""
        self._await_data(self.unfixed, producer, timeout, poll=0.02)

    @staticmethod
    def _await_data(messages: Callable[[], int | None], producer: BackgroundProducer | None,
                    timeout: float, poll: float) -> None:
        """While ``producer`` writes, poll ``messages()`` until it counts some (at most
        ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while producer is not None and producer.running and time.monotonic() < deadline:
            if messages():
                return
            time.sleep(poll)

    # -- recovery -------------------------------------------------------------------------

    @staticmethod
    def _needed(fault: Fault, producer: BackgroundProducer | None) -> dict[str, int]:
        """The offsets a commit must include for ``fault`` to count as recovered from."""
        needed = dict(fault.position)
        if fault.acked is None:
            return needed
        # A message acknowledged after the kill on every partition: written to and read
        # from the new leaders. Once the producer stopped, what it wrote last will do.
        final = None if producer is None or producer.running else {
            _clock_key(part): o for part, o in producer.produced.clock().items()}
        for key, acked in fault.acked.items():
            want = acked + 1 if final is None else min(acked + 1, final.get(key, acked))
            needed[key] = max(needed.get(key, -1), want)
        return needed

    def _recovery_of(self, fault: Fault) -> RecoveryRecord | None:
        """The recovery recorded for ``fault`` so far (None: none yet)."""
        index = next(i for i, f in enumerate(self.faults) if f is fault)
        return self.accounting().matched.get(index)

    def _absorbed_at_once(self, fault: Fault) -> RecoveryRecord | None:
        """For a kill no recovery named by the end of its window: the global recovery that
        something else started at the same moment and that restarted its victims
        (:func:`~hailstorm.dev.harness.evidence.coincident_recovery`), noted in the fault's
        evidence; None when there is none."""
        found = coincident_recovery(
            fault, self.recoveries(), restarted_processors(fault.incarnations,
                                                           self.incarnations()))
        if found is not None:
            fault.evidence[COINCIDENT_RECOVERY] = fault.evidence[JOINED_RECOVERY] = True
            fault.add_detail(f"absorbed by the global recovery of epoch {found.epoch} "
                             f"({found.at - fault.at:+.2f} s): {found.reason}")
        return found

    def measure_recovery(self, fault: Fault, timeout: float = 180,
                         producer: BackgroundProducer | None = None) -> Recovery:
        """Seconds from ``fault`` until the topology flowed again after it, and until a
        commit passed it.

        A fault that fails a processor (:func:`~hailstorm.dev.harness.evidence.expects_recovery`)
        is recovered from once the master is ``Flowing`` in the epoch of the recovery
        recorded for it (a move through ``Initialize`` after the fault whose reason names
        the victim, see :meth:`accounting`) or a later one: a later epoch alone proves
        nothing, every snapshot round raises it; once the fault's
        :func:`~hailstorm.harness.evidence.fault_window` has passed without one, the wait
        ends (the fault lacks its evidence), unless a global recovery that something else
        started at the moment of a kill restarted its victims (:meth:`_absorbed_at_once`):
        then that recovery is the fault's. A negotiator kill: once a master written
        after the fault by another negotiator is ``Flowing``. A stall that restarts nothing
        and a broker fault may leave the topology flowing (spouts ride out a leader move):
        then "Flowing after" is when the master was first seen Flowing (about 0), or when
        it was last seen becoming Flowing after recovering. "Committed past it" needs a
        commit past the offsets the topology had reached (a broker fault: past those the
        producer had acknowledged at the kill, see :meth:`kill_broker`), standing after
        the fault (committed then, or confirmed by a round skipped because nothing had
        changed: :attr:`~hailstorm.protocol.layout.CommittedRecord.standing_at`), and the
        measurement lasts until a killed Kafka node answers again too
        (``restored_after``).
        """
        recovery = Recovery(fault, None, None)
        restart = next((r for f, r in self._restarts if f is fault), None)
        # A fault that never struck (its victim gone already, no session to expire) causes
        # no recovery to wait for: it fails the run for its missing evidence instead.
        needs_recovery = expects_recovery(fault) and fault.evidence.get(VICTIM_GONE, True) \
            and fault.evidence.get(SESSION_EXPIRED, True)
        deadline = time.monotonic() + timeout
        looked = 0.0  # when the recoveries were last read (every 0.5 s: one read per record)
        # After the fault's window no recovery can be matched to it: waiting out ``timeout``
        # would show nothing more (the report names the missing evidence).
        record_due = fault_window(fault, recovery_window(self.processor_session_timeout),
                                  self.timeout)[1] + 1.0
        while time.monotonic() < deadline and (
                recovery.committed_after is None
                or (restart is not None and recovery.restored_after is None)):
            self.alive()
            if restart is not None and restart.done and recovery.restored_after is None:
                restart.finish(0)  # raises when the node did not start
                assert restart.restarted_at is not None
                recovery.restored_after = restart.restarted_at - fault.at
                fault.evidence[NODE_BACK] = True
            if recovery.committed_after is not None:
                time.sleep(0.1)
                continue
            now = time.time()
            master = self.master()
            flowing = master is not None and master.state.__class__.__name__ == "Flowing"
            if needs_recovery:
                overdue = now > record_due
                if recovery.record is None and (time.monotonic() - looked >= 0.5 or overdue):
                    looked = time.monotonic()
                    recovery.record = self._recovery_of(fault)
                    if recovery.record is None and overdue:
                        recovery.record = self._absorbed_at_once(fault)
                        if recovery.record is None:
                            break
                if (recovery.flowing_after is None and flowing and recovery.record is not None
                        and master is not None
                        and master.state.epoch >= recovery.record.epoch):
                    recovery.flowing_after = now - fault.at
            elif fault.kind == "negotiator":
                if (recovery.flowing_after is None and master is not None and flowing
                        and master.entered_at >= fault.at and master.leader != fault.target):
                    recovery.flowing_after = now - fault.at
            elif master is not None and master.state.__class__.__name__ in _RECOVERING:
                recovery.flowing_after = None
            elif flowing and recovery.flowing_after is None:
                recovery.flowing_after = now - fault.at
            committed = self.committed()
            if (recovery.flowing_after is not None and committed is not None
                    and committed.standing_at >= fault.at
                    and all(committed.clock.get((t, int(p)), -1) >= o
                            for key, o in self._needed(fault, producer).items()
                            for t, p in [key.rsplit(":", 1)])):
                recovery.committed_after = now - fault.at
            time.sleep(0.1)
        recovery.restarted = restarted_processors(fault.incarnations, self.incarnations())
        return recovery

    def require_recovery(self, fault: Fault, timeout: float = 180,
                         producer: BackgroundProducer | None = None) -> Recovery:
        """:meth:`measure_recovery`, raising :class:`HarnessError` with
        :meth:`why_not_recovered` when no commit passed ``fault`` within ``timeout``."""
        recovery = self.measure_recovery(fault, timeout, producer)
        if recovery.committed_after is None:
            raise HarnessError(self.why_not_recovered(recovery, producer))
        return recovery

    def why_not_recovered(self, recovery: Recovery,
                          producer: BackgroundProducer | None = None) -> str:
        """What a recovery that ended without a commit past its fault saw: the fault and
        its evidence, the recovery matched to it (or the recoveries recorded around it and
        what they were matched to), the master now, and the committed clock against the
        offsets the commit needed."""
        fault = recovery.fault
        lines = [f"no commit past the {fault.kind} fault on {fault.target} (pid {fault.pid}, "
                 f"master {fault.phase or '?'} epoch {fault.epoch}, at {fault.at:.1f}; "
                 f"evidence {fault.evidence}; {fault.detail or 'no detail'})",
                 f"flowing again after: {recovery.flowing_after}; recovery matched: "
                 f"{recovery.record}"]
        accounting = self.accounting()
        low = fault.at - 60.0
        for r in self.recoveries():
            if r.at >= low:
                matched = next((self.faults[i] for i, m in (*accounting.matched.items(),
                                                            *accounting.apart.items())
                                if m == r), None)
                cause = (f"matched to the {matched.kind} fault on {matched.target} at "
                         f"{matched.at:.1f}" if matched is not None else
                         "a retry" if r in accounting.retries else
                         "declared" if r in accounting.declared else
                         "unexplained" if r in accounting.unexplained else "a start")
                lines.append(f"  recovery epoch {r.epoch} at {r.at:.1f} ({r.at - fault.at:+.1f} s)"
                             f" from {r.previous}: {r.reason} [{cause}]")
        master = self.master()
        lines.append(f"master now: {master.state if master else None}"
                     f" (leader {master.leader if master else None})")
        committed = self.committed()
        needed = self._needed(fault, producer)
        if committed is None:
            lines.append(f"nothing committed; needed {needed}")
        else:
            reached = {_clock_key(p): o for p, o in committed.clock.items()}
            short = {key: (reached.get(key, -1), o) for key, o in needed.items()
                     if reached.get(key, -1) < o}
            lines.append(f"committed at {committed.standing_at:.1f} "
                         f"({committed.standing_at - fault.at:+.1f} s after the fault); "
                         f"behind what it needed (committed, needed): {short or 'nothing'}")
        return "\n".join(lines)
