"""What a bolt holds back while it drains the frames waiting in its queue.

A bolt's main thread takes every frame that waits (a few at half load, up to
:data:`~hailstorm.runtime.inbound.QUEUE_FRAMES`) before it looks at ZooKeeper again, and
each frame used to leave it as a DATA frame and a WATERMARK of its own: at 17,000 messages
a second on two cores, a bolt drained 3-4 frames a step and the sink read 500-680 frames
a second, each paying its receiver's and its sender's fixed cost. While it drains, a bolt
now joins the batches it emits into one and keeps only the latest watermark it forwards,
and sends them when the drain ends (or once :data:`HOLD_TUPLES` tuples are held), the
batch first. That is what sending them one by one gives a receiver, in fewer frames:

* a batch emitted after a watermark goes out before it: data may always come sooner
  than a watermark says (a watermark only promises what was sent by then);
* a later watermark covers every earlier one (a bolt forwards its low water mark only
  when it rises), so the earlier ones say nothing a receiver needs;
* a CLOCK marker keeps its place: the shell sends what is held before it
  (:class:`~hailstorm.processors.ForwardClock`), since tuples on either side of it belong
  to different rounds.

Routing the joined batch sends each receiver the concatenation, in order, of what each
batch would have sent it (and an upsert table's latest row per key over the whole of it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hailstorm.processors.actions import Batch, Marks

__all__ = ["HOLD_TUPLES", "HeldOutput"]

HOLD_TUPLES = 10_000
"""Tuples held at most before they are sent (behind a backlog a frame holds thousands:
joining its batches saves nothing and delays the first)."""


@dataclass(slots=True)
class HeldOutput:
    """The output a bolt holds while it drains its queue (see the module)."""

    batch: Batch | None = None
    """The batches emitted meanwhile, joined in order (the first one itself until a second
    joins it: a batch held alone is never copied)."""
    watermark: Marks | None = None
    """The latest watermark forwarded meanwhile (on the wire's partition numbers)."""
    _joined: bool = field(default=False, init=False, repr=False)

    def hold(self, batch: Batch) -> bool:
        """Join ``batch`` (a plain :class:`Batch`, left unchanged) to what is held; True
        when that holds :data:`HOLD_TUPLES` or more (send it now)."""
        if type(batch) is not Batch:
            raise TypeError(f"only plain batches are held, not {type(batch).__name__}")
        held = self.batch
        if held is None:
            self.batch = held = batch
        else:
            if not self._joined:  # the first batch is the caller's: join into a copy
                self.batch = held = Batch(list(held.partitions), list(held.offsets),
                                          list(held.tuples))
                self._joined = True
            held.partitions.extend(batch.partitions)
            held.offsets.extend(batch.offsets)
            held.tuples.extend(batch.tuples)
        return len(held) >= HOLD_TUPLES

    def hold_watermark(self, watermark: Marks) -> None:
        """Keep ``watermark`` in the place of any held before it (it covers them)."""
        self.watermark = watermark

    def take(self) -> tuple[Batch | None, Marks | None]:
        """What is held, to send in this order (batch, then watermark); nothing is held
        after."""
        held = self.batch, self.watermark
        self.batch = self.watermark = None
        self._joined = False
        return held
