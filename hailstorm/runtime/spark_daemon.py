"""Spark's Python daemon (``spark.python.daemon.module``), with what every processor task
imports loaded before it forks the task's worker.

Spark starts one daemon per executor and forks a Python worker from it for every task.
``pyspark.daemon`` imports little, so each forked processor imported hailstorm's runtime,
confluent-kafka, kazoo, psycopg and fastavro itself: about a second of CPU per task, at
every start of the stage and at every restart after a failure. Imported here once, before
any fork, the workers inherit them. None of these modules starts a thread when imported
(a forked worker would not have it).

Two more costs came before every task's own code, together about a second of a 7-task
stage's start (:func:`prepare_for_forks`): the worker imported pyspark's worker module
after the fork, from Spark's ``pyspark.zip``, whose modules have no compiled bytecode; and
pyspark's worker adds Spark's files directory to ``sys.path`` and calls
``importlib.invalidate_caches()``, which makes every ``zipimporter`` Python cached read its
whole archive's directory again (one per package imported from ``pyspark.zip``).
"""

from __future__ import annotations

import importlib
import sys
import zipimport
from collections.abc import Sequence

from pyspark.daemon import manager

import hailstorm.runtime.task  # noqa: F401  (what every task imports; inherited by forks)

__all__ = ["forget_zip_importers", "prepare_for_forks", "worker_module"]


def worker_module(argv: Sequence[str]) -> str:
    """The module a forked worker runs, chosen as ``pyspark.daemon`` chooses it: the
    daemon's first argument when it names a pyspark module, else ``pyspark.worker``."""
    return argv[1] if len(argv) > 1 and argv[1].startswith("pyspark") else "pyspark.worker"


def forget_zip_importers() -> int:
    """Drop every ``zipimporter`` from ``sys.path_importer_cache`` (returns how many), so
    that ``importlib.invalidate_caches()`` in a forked worker reads no archive again. An
    import that needs one later gets a new importer built from the archive directory
    Python keeps (``zipimport._zip_directory_cache``), without reading the archive."""
    cached = [path for path, finder in sys.path_importer_cache.items()
              if isinstance(finder, zipimport.zipimporter)]
    for path in cached:
        del sys.path_importer_cache[path]
    return len(cached)


def prepare_for_forks(argv: Sequence[str]) -> None:
    """Import the workers' module (``pyspark.worker`` starts no thread either), then
    forget the zip importers, so each forked worker starts its task at once."""
    importlib.import_module(worker_module(argv))
    forget_zip_importers()


if __name__ == "__main__":
    prepare_for_forks(sys.argv)
    manager()
