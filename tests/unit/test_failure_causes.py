"""Which line the driver gives for a failed stage attempt: the processor and its cause,
never Spark's generic line (issue 40). Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hailstorm.halt import TopologyHalt, halt_reason
from hailstorm.runtime.causes import (
    ProcessorFailed,
    carried_cause,
    negotiator_cause,
    root_cause,
)
from hailstorm.sinks.errors import DatabaseUnavailableError

SPARK_HEAD = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover "
    "from a failed barrier ResultStage. Most recent failure reason: Stage failed because "
    "barrier task ResultTask(9, 2) finished unsuccessfully.\n"
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
    '  File "/x/pyspark/worker.py", line 1247, in main\n    process()\n'
)
JAVA_TAIL = ("\n\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator"
             ".handlePythonException(PythonRunner.scala:572)\n")
UNAVAILABLE = ("sink wc/sink:word_counts:0 (table word_counts): commit: the database at "
               "postgresql://hailstorm:***@127.0.0.1:5432/hailstorm, unavailable "
               "since 2026-11-27T05:40:00Z (8 attempts): OperationalError: connection refused")


def _spark_text(error: BaseException) -> str:
    return f"{SPARK_HEAD}{type(error).__module__}.{type(error).__name__}: {error}{JAVA_TAIL}"


def test_the_database_outage_is_named_not_the_barrier_task() -> None:
    failed = ProcessorFailed("sink:word_counts:0", DatabaseUnavailableError(UNAVAILABLE))
    line = root_cause(_spark_text(failed))
    assert line.startswith("sink:word_counts:0: DatabaseUnavailableError: sink wc/")
    assert ", unavailable since 2026-11-27T05:40:00Z" in line
    assert "ResultTask" not in line and "SparkException" not in line


def test_a_python_error_without_the_mark_is_still_found() -> None:
    text = _spark_text(ValueError("the snapshot of round 3 is of another state type"))
    assert root_cause(text) == "ValueError: the snapshot of round 3 is of another state type"


def test_a_consequence_gives_way_to_the_negotiators_witness() -> None:
    """Spark names the first task that failed: a bolt whose sink went away. The negotiator's
    restart reason names the sink's own failure."""
    bolt = ProcessorFailed("bolt:counts:1", ConnectionError(
        "sending to sink:word_counts:0 failed: [Errno 104] Connection reset by peer"))
    reason = f"sink:word_counts:0 failed: DatabaseUnavailableError: {UNAVAILABLE}"
    line = root_cause(_spark_text(bolt), reason)
    assert line.startswith("sink:word_counts:0: DatabaseUnavailableError:")


def test_a_consequence_alone_is_still_named_with_its_processor() -> None:
    restart = ProcessorFailed("bolt:counts:1", RuntimeError(
        "the topology restarted (Initialize(7), this incarnation joined Initialize(6))"))
    assert root_cause(_spark_text(restart), "snapshot round 6 abandoned after 60s").startswith(
        "bolt:counts:1: RuntimeError: the topology restarted")


def test_spark_alone_gives_its_own_line_without_the_leading_colon() -> None:
    spark_only = SPARK_HEAD.split("org.apache.spark.api.python.PythonException")[0]
    assert root_cause(spark_only).startswith("org.apache.spark.SparkException: Job aborted")


def test_an_executor_spark_gave_up_is_named_with_spark_s_reason() -> None:
    """A host cut off: the driver heard no heartbeat from its executor, so its tasks failed
    and the barrier stage with them; no processor failed and no traceback came back."""
    spark_only = SPARK_HEAD.split("org.apache.spark.api.python.PythonException")[0]
    text = (f"{spark_only}ExecutorLostFailure (executor 2 exited caused by one of the "
            "running tasks) Reason: Executor heartbeat timed out after 21223 ms\n"
            "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x)\n")
    reason = "bolt:counts:0, spout:lines:words:0 lost (living node gone)"
    assert root_cause(text, reason) == (
        "Spark lost executor 2: Executor heartbeat timed out after 21223 ms")


def test_a_lost_executor_is_named_whatever_the_cluster_s_wording() -> None:
    spark_only = SPARK_HEAD.split("org.apache.spark.api.python.PythonException")[0]
    worker = (f"{spark_only}ExecutorLostFailure (executor 0 exited unrelated to the running "
              "tasks) Reason: worker lost: 10.0.0.5:53105 got disassociated\n")
    assert root_cause(worker) == (
        "Spark lost executor 0: worker lost: 10.0.0.5:53105 got disassociated")
    # Kubernetes puts its pod's exit reason on the next line.
    pod = (f"{spark_only}ExecutorLostFailure (executor 3 exited caused by one of the running "
           "tasks) Reason: \nThe executor with id 3 exited with exit code 137(SIGKILL).\n")
    assert root_cause(pod) == (
        "Spark lost executor 3: The executor with id 3 exited with exit code 137(SIGKILL).")


def test_the_lost_executor_that_failed_the_stage_comes_before_an_earlier_processor_failure(
        ) -> None:
    """The negotiator's last restart reason may be older than the loss that failed this
    attempt (a processor restarted in place before): what Spark carries is this attempt's."""
    spark_only = SPARK_HEAD.split("org.apache.spark.api.python.PythonException")[0]
    text = (f"{spark_only}ExecutorLostFailure (executor 1 exited caused by one of the running "
            "tasks) Reason: Executor heartbeat timed out after 20100 ms\n")
    reason = "bolt:counts:0 failed: ValueError: a bad record"
    assert root_cause(text, reason).startswith("Spark lost executor 1: Executor heartbeat")


def test_a_halt_keeps_its_mark_through_the_name() -> None:
    failed = ProcessorFailed("spout:lines:lines:0", TopologyHalt("offsets 0-9 of lines:0 lost"))
    assert halt_reason(_spark_text(failed)) == "offsets 0-9 of lines:0 lost"


def test_the_negotiator_reason_is_read_only_when_it_names_a_failure() -> None:
    assert negotiator_cause("initialize of epoch 4 abandoned after 60s: x not ready") is None
    cause = negotiator_cause("bolt:counts:0 failed: SnapshotMismatchError: Counter, not Max")
    assert cause is not None and cause.processor == "bolt:counts:0"
    assert cause.text == "SnapshotMismatchError: Counter, not Max"


@given(st.text(max_size=300))
def test_any_text_gives_one_line(text: str) -> None:
    line = root_cause(text)
    assert "\n" not in line and len(line) <= 700
    assert carried_cause(text) is None or str(carried_cause(text))
