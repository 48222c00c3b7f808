"""What a spout does in a local recovery (issue 42; docs/deployment.md, "Local
recovery"): in ``Restarting`` it stops sending to the instances that restart alone (and
flows again if the abandoned round was pausing it); in ``Replaying`` it connects to their
new incarnations and replays to them, with the backfill cursor, what its partition holds
after the committed clock up to the live position, then feeds them from the live stream
and reports ``replayed``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from hailstorm.failpoints import pause_point
from hailstorm.processors import SpoutCore
from hailstorm.processors.backfill import BackfillPace
from hailstorm.protocol.clock import NOTHING
from hailstorm.protocol.layout import Replaying, Restarting, parse_processor_id
from hailstorm.runtime.data_plane import DataPlaneError

if TYPE_CHECKING:
    from hailstorm.runtime.spout import SpoutShell

__all__ = ["REPLAY_BUDGET", "abandon_replay", "go_on_without", "replay", "replayed",
           "resume_abandoned"]

log = logging.getLogger("hailstorm.processor")

REPLAY_BUDGET = 1 << 62
"""Records a local recovery's replay may read (no round runs meanwhile to pace it; each
step reads at most :data:`~hailstorm.processors.backfill.BACKFILL_BATCH`)."""


def go_on_without(spout: SpoutShell, state: Restarting) -> None:
    """Instances downstream restart alone: stop sending to them (their next
    incarnations get a replay), and resume if a round was pausing (it is abandoned)."""
    abandon_replay(spout, f"Restarting({state.epoch})")
    for receiver in state.instances:
        spout.detach(receiver, f"Restarting({state.epoch})")
    assert spout.coord is not None
    spout.coord.replayed = ()  # an earlier recovery's: not this one's
    resume_abandoned(spout)
    spout.flowing_reported = None
    spout.report_flowing(state.epoch)


def abandon_replay(spout: SpoutShell, why: str) -> None:
    """Drop a replay under way (more instances restart: the next ``Replaying`` replays
    to all of them from the committed clock)."""
    if spout.replay is None:
        return
    log.info("replay to %s abandoned: %s", ", ".join(spout.replay[1]), why)
    spout.close_backfill()
    _end_replay(spout)


def _end_replay(spout: SpoutShell) -> None:
    """The backfill cursor serves no replay any more (joined the live one, or dropped)."""
    spout.replay = None
    spout.back_receivers = frozenset()
    spout.pace = BackfillPace()


def resume_abandoned(spout: SpoutShell) -> None:
    """Flow again, without a clock, if a round abandoned by a local recovery was
    pausing the spouts."""
    core = spout.core
    assert core is not None
    if core.paused:
        out = core.resume()
        spout.send_output(out)
        spout.metrics.messages_out.inc(out.sent)
        if spout.back is not None:
            spout.send_backfill(spout.back.resume())


def replay(spout: SpoutShell, state: Replaying) -> None:
    """Replay to the instances restarting alone what this partition holds after the
    committed clock up to the live position, on their connections only, then feed them
    from the live stream (reported as ``replayed``): the backfill cursor's work, for
    them alone and without a round's budget."""
    from confluent_kafka import TopicPartition

    from hailstorm.kafka import consumer

    core = spout.core
    assert core is not None and spout.coord is not None
    spout.coord.replayed = ()  # Restarting may have passed unseen
    abandon_replay(spout, f"Replaying({state.epoch})")  # an earlier one's, ditto
    resume_abandoned(spout)
    targets = sorted(r for r in state.instances if r in spout.connections())
    if not targets:
        return
    if spout.back is not None:
        raise RuntimeError(f"a replay to {', '.join(targets)} while the backfill of "
                           f"{', '.join(sorted(spout.back_receivers))} is under way")
    pause_point("spout.before_replay")  # tests: a replay to an incarnation gone meanwhile
    for receiver in targets:
        _reconnect(spout, receiver, state.epoch)
    nodes = {parse_processor_id(r).name for r in targets}
    downstream = [n for n in spout.topology.downstream_of(spout.spec.name) if n.name in nodes]
    spout.replay = (state.epoch, tuple(targets))
    spout.back_receivers = frozenset(targets)
    spout.back_clock = None
    spout.pace = BackfillPace(REPLAY_BUDGET)
    back = SpoutCore(spout.spec, spout.partition[1], downstream,
                     quarantine_topic=spout.topology.dead_letter_topic)
    start = state.clock.get(spout.partition, NOTHING)
    kept = spout.kept_stream_times(start) if back.stream_times else None
    seek = back.start(state.clock, state.clock, kept)
    if seek == NOTHING + 1 and (spout.partition not in state.clock or kept is not None):
        seek = spout.log_start()  # as at a rewind: retention may have moved it
    spout.send_backfill(back.resume())
    log.info("replay to %s: reading from %d up to the live cursor at %d",
             ", ".join(targets), seek, core.position)
    if start >= core.position and (kept is None or kept[0] >= core.position):
        replayed(spout)  # nothing to replay: the live cursor feeds them from here
        return
    spout.back = back
    spout.back_consumer = consumer(spout.assignment.kafka)
    spout.back_consumer.assign([TopicPartition(*spout.partition, seek)])


def _reconnect(spout: SpoutShell, receiver: str, epoch: int) -> None:
    """Connect to ``receiver``'s incarnation that reported ready in ``epoch``. One that
    refuses already ended: another instance failed since, and the negotiator restarts
    this one again in a wider recovery (or, if nothing explains its end, everything).
    That is no failure of this spout: it goes on without the receiver, and this replay
    never reports reaching the live stream."""
    try:
        spout.reconnect(receiver, epoch)
    except DataPlaneError as exc:
        if not spout.went_on_without(exc):
            raise
        log.warning("replay of Replaying(%d) to %s: its incarnation is gone (%s); waiting "
                    "for the negotiator", epoch, receiver, exc)


def replayed(spout: SpoutShell) -> None:
    """The replay joined the live stream: say so (the negotiator starts a round once
    every replay did)."""
    assert spout.coord is not None and spout.core is not None and spout.replay is not None
    epoch, targets = spout.replay
    _end_replay(spout)
    lost = [t for t in targets if t in spout.detached]
    if lost:  # its new incarnation is gone too: the negotiator restarts everything
        log.warning("replay to %s ended without %s", ", ".join(targets), ", ".join(lost))
        return
    spout.coord.replayed = targets
    spout.flowing_reported = None
    spout.report_flowing(epoch)
    log.info("replay to %s joined the live stream at offset %d", ", ".join(targets),
             spout.core.position)
