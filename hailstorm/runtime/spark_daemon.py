"""Spark's Python daemon (``spark.python.daemon.module``), with what every processor task
imports loaded before it forks the task's worker.

Spark starts one daemon per executor and forks a Python worker from it for every task.
``pyspark.daemon`` imports little, so each forked processor imported hailstorm's runtime,
confluent-kafka, kazoo, psycopg and fastavro itself: about a second of CPU per task, at
every start of the stage and at every restart after a failure. Imported here once, before
any fork, the workers inherit them. None of these modules starts a thread when imported
(a forked worker would not have it).
"""

from __future__ import annotations

from pyspark.daemon import manager

import hailstorm.runtime.task  # noqa: F401  (what every task imports; inherited by forks)

if __name__ == "__main__":
    manager()
