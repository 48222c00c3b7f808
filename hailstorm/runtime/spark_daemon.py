"""Spark's Python daemon (``spark.python.daemon.module``), with what every processor task
imports loaded before it forks the task's worker.

Spark starts one daemon per executor and forks a Python worker from it for every task.
``pyspark.daemon`` imports little, so each forked processor imported hailstorm's runtime,
confluent-kafka, kazoo, psycopg and fastavro itself: about a second of CPU per task, at
every start of the stage and at every restart after a failure. Imported here once, before
any fork, the workers inherit them. None of these modules starts a thread when imported
(a forked worker would not have it).

Spark puts its own ``pyspark.zip`` and py4j's zip first on the daemon's ``sys.path``.
Their modules have no compiled bytecode, so importing pyspark from them took the daemon
0.7-1.2 s (0.12 s from an installed pyspark), on the way to every stage's first task:
where the same version is installed (:func:`installed_first`), the daemon imports that.

Two more costs came before every task's own code, together about a second of a 7-task
stage's start (:func:`prepare_for_forks`): the worker imported pyspark's worker module
after the fork; and pyspark's worker adds Spark's files directory to ``sys.path`` and
calls ``importlib.invalidate_caches()``, which makes every ``zipimporter`` Python cached
read its whole archive's directory again (one per package imported from a zip).
"""

from __future__ import annotations

import fnmatch
import importlib
import os
import sys
import zipfile
import zipimport
from collections.abc import Callable, Sequence

import hailstorm.runtime.task  # noqa: F401  (what every task imports; inherited by forks)

__all__ = ["forget_zip_importers", "installed_first", "prepare_for_forks", "worker_module"]

SPARK_ARCHIVES = (("pyspark", "pyspark.zip"), ("py4j", "py4j-*-src.zip"))
"""The packages Spark ships as archives for its Python workers, with their file names."""


def read_member(entry: str, member: str) -> bytes | None:
    """The bytes of ``member`` (a ``/`` path) under the ``sys.path`` entry ``entry``, a
    directory or a zip archive; None when it has none."""
    try:
        if os.path.isdir(entry):
            with open(os.path.join(entry, *member.split("/")), "rb") as file:
                return file.read()
        with zipfile.ZipFile(entry) as archive:
            return archive.read(member)
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def installed_first(path: Sequence[str],
                    read: Callable[[str, str], bytes | None] = read_member) -> list[str]:
    """``path`` with Spark's archives of pyspark and py4j moved to its end where a
    directory of ``path`` holds the same version of the package (its ``version.py``, byte
    for byte): the installed package then imports from compiled bytecode. An archive of
    another version stays where Spark put it (its workers must match the JVM)."""
    moved = []
    for entry in path:
        name = os.path.basename(entry)
        for package, pattern in SPARK_ARCHIVES:
            if not fnmatch.fnmatch(name, pattern):
                continue
            shipped = read(entry, f"{package}/version.py")
            if shipped is not None and any(
                    read(other, f"{package}/version.py") == shipped
                    for other in path if other != entry and not other.endswith(".zip")):
                moved.append(entry)
    return [entry for entry in path if entry not in moved] + moved


def worker_module(argv: Sequence[str]) -> str:
    """The module a forked worker runs, chosen as ``pyspark.daemon`` chooses it: the
    daemon's first argument when it names a pyspark module, else ``pyspark.worker``."""
    return argv[1] if len(argv) > 1 and argv[1].startswith("pyspark") else "pyspark.worker"


def forget_zip_importers() -> int:
    """Drop every ``zipimporter`` from ``sys.path_importer_cache`` and every archive
    directory zipimport read (``zipimport._zip_directory_cache``); returns how many
    importers. ``importlib.invalidate_caches()`` in a forked worker then reads no archive
    again, and a worker that imports a module not imported yet from an archive reads that
    archive's directory afresh (one changed on disk since the daemon started included).
    Modules imported already keep their loaders, which hold their own directories."""
    cached = [path for path, finder in sys.path_importer_cache.items()
              if isinstance(finder, zipimport.zipimporter)]
    for path in cached:
        del sys.path_importer_cache[path]
    zipimport._zip_directory_cache.clear()  # type: ignore[attr-defined]
    return len(cached)


def prepare_for_forks(argv: Sequence[str]) -> None:
    """Import the workers' module, then forget the zip importers, so each forked worker
    starts its task at once. ``pyspark.worker`` starts no thread (pyspark imports pandas
    and pyarrow, which do, only when a task needs them); a worker module that does is
    named on stderr (stdout carries the daemon's port to Spark), since a forked worker
    would lack that thread."""
    module = worker_module(argv)
    importlib.import_module(module)
    threads = _thread_count()
    if threads > 1:
        print(f"hailstorm.runtime.spark_daemon: importing {module} started {threads - 1} "
              "thread(s), which the workers forked from this daemon will not have",
              file=sys.stderr)
    forget_zip_importers()


def _thread_count() -> int:
    """The threads of this process (the OS's count: native ones too), 1 where unknown."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def main() -> None:
    """Run the daemon: pyspark from the installed package where it can, the workers'
    module imported, then ``pyspark.daemon``'s loop."""
    sys.path[:] = installed_first(sys.path)
    from pyspark.daemon import manager

    prepare_for_forks(sys.argv)
    manager()


if __name__ == "__main__":
    main()
