"""Outages of the services a processor needs (a database, Kafka, ZooKeeper). Pure.

An outage is waited out, not failed on: the processor keeps trying with backoff
(:class:`RetryPolicy`), says what it waits for and since when (:class:`Outage`, shown by
``hailstorm status`` and the console as "waiting for ..."), and goes on by itself once the
service answers. What counts as an outage, as opposed to an error waiting cannot cure
(refused credentials, a fenced writer, lost offsets), is decided next to each client:
:func:`hailstorm.sinks.db.is_transient`, :func:`hailstorm.kafka.is_kafka_outage`.
:class:`OutageWatch` follows one service through failures and successes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["WAIT_OUT", "Outage", "OutageWatch", "RetryPolicy", "Waits", "through_outages", "utc"]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying a service that is down or refuses for now.

    Attempt ``n`` (1-based) that fails transiently waits
    ``min(max_delay, initial_delay * multiplier ** (n - 1))`` before the next one; after
    ``attempts`` failures the error is raised.
    """

    attempts: int | None = 8
    """None: never give up (a processor waits out an outage of any length)."""
    initial_delay: float = 0.25
    max_delay: float = 10.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("attempts must be >= 1 (or None: never give up)")
        if self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("delays must be >= 0 and multiplier >= 1")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt``."""
        exponent = min(attempt - 1, 64)  # a wait of days is still a float
        return float(min(self.max_delay, self.initial_delay * self.multiplier ** exponent))

    def gives_up(self, attempt: int) -> bool:
        """True when failed attempt ``attempt`` is the last one."""
        return self.attempts is not None and attempt >= self.attempts


WAIT_OUT = RetryPolicy(attempts=None, initial_delay=0.25, max_delay=10.0)
"""What the runtime's processors do with an outage: wait it out, trying again every 10 s at
most."""


@dataclass(frozen=True)
class Outage:
    """A service that fails every attempt: since when (``time.time()``), how many attempts
    failed, and the last error (no secrets in it)."""

    what: str
    """"the database at <redacted URL>", "Kafka at <bootstrap>", "ZooKeeper at <hosts>"."""
    since: float
    attempts: int
    error: str

    def describe(self) -> str:
        """What ``status`` shows after "waiting for": "<what>, unavailable since
        T" (T in UTC)."""
        return f"{self.what}, unavailable since {utc(self.since)}"


def utc(at: float) -> str:
    """``at`` (``time.time()``) as an ISO 8601 UTC timestamp to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


class OutageWatch:
    """One service followed through its failures and answers: :meth:`failed` starts or
    extends the outage, :meth:`answered` ends it. Each returns what changed (for the
    report), so a caller reports the start and the end once each."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.outage: Outage | None = None

    def failed(self, now: float, error: str) -> Outage:
        """An attempt failed at ``now`` (``time.time()``): the outage, started or extended."""
        previous = self.outage
        since = now if previous is None else previous.since
        attempts = 1 if previous is None else previous.attempts + 1
        self.outage = Outage(self.what, since, attempts, error)
        return self.outage

    def answered(self) -> Outage | None:
        """The service answered: the outage that ended (None: there was none)."""
        ended, self.outage = self.outage, None
        return ended

    @property
    def waiting(self) -> bool:
        return self.outage is not None


class Waits:
    """The outages one processor waits out at once, each held by the part of it that waits
    (its table writer, its dead-letter writer, its Kafka consumer): a service answering
    again ends only the waits of the parts that needed it."""

    def __init__(self) -> None:
        self._by_waiter: dict[str, Outage] = {}

    def update(self, waiter: str, outage: Outage | None) -> None:
        """``waiter`` waits out ``outage`` (None: no longer)."""
        if outage is None:
            self._by_waiter.pop(waiter, None)
        else:
            self._by_waiter[waiter] = outage

    def _services(self) -> list[Outage]:
        """The earliest outage of each service waited for, in the order they began."""
        earliest: dict[str, Outage] = {}
        for outage in self._by_waiter.values():
            if outage.what not in earliest or outage.since < earliest[outage.what].since:
                earliest[outage.what] = outage
        return sorted(earliest.values(), key=lambda o: (o.since, o.what))

    def describe(self) -> str | None:
        """What follows "waiting for": each service's :meth:`Outage.describe`, joined by
        "; " (None: nothing is waited for)."""
        services = self._services()
        return "; ".join(o.describe() for o in services) if services else None

    def since(self) -> float:
        """When the oldest wait began (``time.time()``; 0.0: nothing is waited for)."""
        services = self._services()
        return services[0].since if services else 0.0


def through_outages(
    op: Callable[[], T],
    watch: OutageWatch,
    *,
    is_outage: Callable[[Exception], bool],
    policy: RetryPolicy = WAIT_OUT,
    on_failed: Callable[[Outage, float], None] = lambda _outage, _delay: None,
    on_answered: Callable[[Outage], None] = lambda _outage: None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> T:
    """``op()``, tried again after ``policy.delay`` while it fails with an outage
    (``is_outage``), until ``policy`` gives up (never, by default). ``on_failed`` is told of
    each failed attempt (the outage so far and the delay before the next), ``on_answered``
    of the outage that ended once ``op`` succeeds. Other errors propagate at once. The
    waiting itself is ``sleep`` (a test passes its own, and its own ``clock``)."""
    attempt = 0
    while True:
        try:
            result = op()
        except Exception as exc:  # broad: op is any call; is_outage decides, the rest is re-raised
            attempt += 1
            if not is_outage(exc) or policy.gives_up(attempt):
                raise
            delay = policy.delay(attempt)
            on_failed(watch.failed(clock(), " ".join(str(exc).split()) or type(exc).__name__),
                      delay)
            sleep(delay)
            continue
        ended = watch.answered()
        if ended is not None:
            on_answered(ended)
        return result
