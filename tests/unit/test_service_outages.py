"""Outages of Kafka (and any service) waited out, not failed on (issue 40). Pure: what an
outage is, the backoff, the watch that reports its start and end once each, and the topic
writer's patient transactional calls against a call that stands in for librdkafka's."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.kafka import KafkaAuthError, KafkaUnreachable, is_kafka_outage, waiting_out
from hailstorm.outages import WAIT_OUT, Outage, OutageWatch, RetryPolicy, Waits, through_outages
from hailstorm.sinks.topic import TopicWriter
from hailstorm.topic import Topic

DOWN = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")


@pytest.mark.parametrize("code", [
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
    KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
    KafkaError.NOT_ENOUGH_REPLICAS])
def test_brokers_that_do_not_answer_are_an_outage(code: int) -> None:
    error = KafkaError(code, "x")
    assert is_kafka_outage(error) and is_kafka_outage(KafkaException(error))


@pytest.mark.parametrize("code", [
    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.OFFSET_OUT_OF_RANGE, KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._PARTITION_EOF])
def test_what_waiting_cannot_cure_is_no_outage(code: int) -> None:
    assert not is_kafka_outage(KafkaError(code, "x"))


def test_a_fatal_error_and_other_exceptions_are_no_outage() -> None:
    assert not is_kafka_outage(KafkaError(KafkaError._TIMED_OUT, "x", fatal=True))
    assert not is_kafka_outage(KafkaAuthError("refused"))
    assert not is_kafka_outage(ValueError("no"))
    assert not is_kafka_outage(KafkaException())
    assert not is_kafka_outage(None)
    assert is_kafka_outage(KafkaUnreachable("Kafka at h:1 did not answer in 10s"))


def test_the_backoff_grows_to_its_ceiling_and_waiting_out_never_gives_up() -> None:
    assert [WAIT_OUT.delay(n) for n in (1, 2, 3, 6, 7, 1000)] == [
        0.25, 0.5, 1.0, 8.0, 10.0, 10.0]
    assert not any(WAIT_OUT.gives_up(n) for n in (1, 8, 10**6))
    assert RetryPolicy(attempts=3).gives_up(3) and not RetryPolicy(attempts=3).gives_up(2)


@settings(deadline=None)  # a loaded machine must not fail a pure test on time
@given(st.lists(st.one_of(st.floats(0, 1e6), st.none()), max_size=40))
def test_a_watch_reports_since_the_first_failure_after_the_last_answer(
        events: list[float | None]) -> None:
    """``None`` is an answer, a number a failure at that time."""
    watch = OutageWatch("Kafka at h:1")
    since = None
    attempts = 0
    for event in events:
        if event is None:
            ended = watch.answered()
            assert (ended is None) == (since is None)
            since, attempts = None, 0
        else:
            since = event if since is None else since
            attempts += 1
            outage = watch.failed(event, "down")
            assert (outage.since, outage.attempts) == (since, attempts)
        assert watch.waiting == (since is not None)


def test_an_outage_is_described_as_waiting_for_what_since_when() -> None:
    outage = OutageWatch("Kafka at 127.0.0.1:9092").failed(1_795_000_000.0, "down")
    assert outage.describe() == \
        "Kafka at 127.0.0.1:9092, unavailable since 2026-11-18T11:06:40Z"



def test_one_service_answering_again_ends_only_the_waits_that_needed_it() -> None:
    """A sink whose database and whose dead-letter topic's Kafka are both out waits until
    both answer: Kafka coming back first leaves the database's wait (once, one slot held
    both, and the negotiator's deadlines ran on a sink still waiting for its database)."""
    db = Outage("the database at postgresql://h/db", 1_795_000_000.0, 3, "refused")
    kafka = Outage("Kafka at 127.0.0.1:9092", 1_795_000_060.0, 1, "all brokers down")
    waits = Waits()
    assert (waits.describe(), waits.since()) == (None, 0.0)
    waits.update("writer", db)
    waits.update("dead letters", kafka)
    assert waits.describe() == (
        "the database at postgresql://h/db, unavailable since 2026-11-18T11:06:40Z; "
        "Kafka at 127.0.0.1:9092, unavailable since 2026-11-18T11:07:40Z")
    assert waits.since() == db.since
    waits.update("dead letters", None)
    assert waits.describe() == db.describe() and waits.since() == db.since
    waits.update("writer", None)
    assert (waits.describe(), waits.since()) == (None, 0.0)


def test_two_parts_waiting_for_one_service_show_it_once_from_its_first_failure() -> None:
    earlier = Outage("Kafka at k:9092", 100.0, 5, "down")
    later = Outage("Kafka at k:9092", 130.0, 1, "down")
    waits = Waits()
    waits.update("writer", later)
    waits.update("dead letters", earlier)
    assert waits.describe() == earlier.describe() and waits.since() == 100.0
    waits.update("dead letters", None)
    assert waits.describe() == later.describe()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_through_outages_waits_with_backoff_and_tells_the_start_and_the_end() -> None:
    clock = Clock()
    results = iter([KafkaUnreachable("no answer")] * 9 + ["metadata"])

    def op() -> str:
        result = next(results)
        if isinstance(result, Exception):
            raise result
        return result

    told: list[tuple[int, float, float]] = []
    ended = []
    assert through_outages(op, OutageWatch("Kafka at h:1"), is_outage=is_kafka_outage,
                           on_failed=lambda o, d: told.append((o.attempts, o.since, d)),
                           on_answered=ended.append, sleep=clock.sleep,
                           clock=lambda: clock.now) == "metadata"
    assert [a for a, _s, _d in told] == list(range(1, 10))
    assert {s for _a, s, _d in told} == {1000.0}, "one outage, since its first failure"
    assert clock.slept == [WAIT_OUT.delay(n) for n in range(1, 10)]
    assert len(ended) == 1 and ended[0].attempts == 9


def test_through_outages_raises_other_errors_at_once_and_gives_up_when_bounded() -> None:
    clock = Clock()

    def refused() -> None:
        raise KafkaAuthError("Kafka at h:1 refused hailstorm")

    with pytest.raises(KafkaAuthError):
        through_outages(refused, OutageWatch("k"), is_outage=is_kafka_outage,
                        sleep=clock.sleep)
    assert clock.slept == []

    def down() -> None:
        raise KafkaUnreachable("no answer")

    with pytest.raises(KafkaUnreachable):
        through_outages(down, OutageWatch("k"), is_outage=is_kafka_outage,
                        policy=RetryPolicy(attempts=3, initial_delay=0), sleep=clock.sleep)
    assert clock.slept == [0, 0]


def _writer(retry: RetryPolicy, told: list[object]) -> TopicWriter:
    """A writer that is never opened: only its retry logic runs, against fake calls."""
    return TopicWriter("127.0.0.1:1", Topic("out", key=lambda t: t, value=lambda t: t),
                       "t/sink:out:0", 1, progress="t.out.progress", dead_letter_topic="dl",
                       io_timeout=0.2, retry=retry, on_outage=told.append)


def test_a_commit_whose_outcome_is_unknown_is_asked_again_for_as_long_as_kafka_is_out() -> None:
    """librdkafka's commit_transaction times out retriably while the brokers are down; the
    writer calls it again (never aborts a commit that may have happened), past its
    io_timeout, telling its processor that it waits, then that the wait is over."""
    told: list[object] = []
    writer = _writer(RetryPolicy(attempts=None, initial_delay=0, max_delay=0), told)
    calls: list[float] = []

    def commit(timeout: float) -> None:
        calls.append(timeout)
        if len(calls) <= 30:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out",
                                            retriable=True))

    writer._patiently(commit, "committing")
    assert len(calls) == 31 and all(0 < t <= 0.2 for t in calls)
    outages, end = told[:-1], told[-1]
    assert end is None and len(outages) == 30
    assert {o.since for o in outages} == {outages[0].since}  # type: ignore[attr-defined]
    assert "Kafka at 127.0.0.1:1" in outages[0].describe()  # type: ignore[attr-defined]


def test_a_writer_that_does_not_wait_gives_up_after_its_timeout_and_never_waits_on_abortable(
        ) -> None:
    told: list[object] = []
    writer = _writer(RetryPolicy(attempts=8, initial_delay=0.01, max_delay=0.01), told)

    def commit(_timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))

    with pytest.raises(KafkaException):
        writer._patiently(commit, "committing")
    waiting = _writer(WAIT_OUT, told)

    def abortable(_timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "x", retriable=True,
                                        txn_requires_abort=True))

    with pytest.raises(KafkaException):  # the caller aborts and tries the transaction anew
        waiting._patiently(abortable, "committing")


def test_waiting_out_reports_the_outage_to_the_processor_and_its_end() -> None:
    """What a spout's log-start lookup and a bolt's do while Kafka is out (waits of 0.25 and
    0.5 s here): the processor is told at each failed attempt, then that it is over."""
    answers = iter([KafkaException(DOWN), KafkaException(DOWN), (0, 42)])

    def lookup() -> tuple[int, int]:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    told: list[object] = []
    assert waiting_out(lookup, "127.0.0.1:9", told.append) == (0, 42)
    assert [getattr(o, "attempts", None) for o in told] == [1, 2, None]
    assert told[0].describe().startswith(  # type: ignore[attr-defined]
        "Kafka at 127.0.0.1:9, unavailable since ")
