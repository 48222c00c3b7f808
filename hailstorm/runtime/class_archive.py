"""A class-data-sharing archive of the Spark driver JVM's classes (HotSpot dynamic CDS).

A driver's JVM loads and verifies thousands of Spark's classes from its jars before the
first task runs; mapping them from an archive took a word count's start to ``Flowing`` from
about 10.5 s to 5.7 s on a 2-core machine, on every start and restart of a topology.

The archive is the JVM's own format, kept in ``<cache>/jvm`` (:func:`hailstorm.config.cache_dir`)
under a name keyed by the JDK build and Spark's jars (:func:`archive_key`). Without one, a
driver asks its JVM to write one when it exits (``-XX:ArchiveClassesAtExit``) into a file of
its own; only after that JVM exited cleanly is the file renamed into place
(:meth:`ClassArchive.keep`), so no driver ever maps a partial archive, and two first drivers
at once each write their own and the last rename wins. Writing costs that first run about 5 s
more at start and 8 s more at stop. Later drivers map it (``-XX:SharedArchiveFile``); a JVM
that cannot use it (another JDK build, changed jars) says so on stderr and starts without it.

An archive is code the driver's JVM runs: one in a directory that is not the user's own or
that others can write to is never used (:func:`private_directory`). A killed driver leaves its
JVM to write a file nobody keeps; such files are removed an hour later.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hailstorm.config import cache_dir

log = logging.getLogger("hailstorm.run")

PREFIX = "spark-driver-"
SUFFIX = ".jsa"
PARTIAL = ".partial"
#: A file a JVM was writing that is older than this was abandoned (a dump takes seconds).
ABANDONED_AFTER = 3600.0


def archive_key(java_home: str, java_release: bytes, jars: Iterable[tuple[str, int, int]],
                class_path: str = "") -> str:
    """A name for the archive of one JDK build and one set of Spark jars (``(name, size,
    mtime_ns)`` each) and extra class path: any of them changing names another archive."""
    digest = hashlib.sha256()
    for part in (java_home.encode(), java_release, class_path.encode(),
                 *(f"{n}\0{s}\0{m}".encode() for n, s, m in sorted(jars))):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:20]


def java_home() -> Path | None:
    """The JDK ``spark-submit`` starts the driver with: ``$JAVA_HOME``, else ``java`` on PATH."""
    configured = os.environ.get("JAVA_HOME")
    if configured and Path(configured, "bin", "java").exists():
        return Path(configured).resolve()
    found = shutil.which("java")
    return Path(found).resolve().parents[1] if found else None


def spark_jars() -> Path:
    """The ``jars/`` directory of the Spark the driver runs (``$SPARK_HOME``, else pyspark's)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()) / "jars"


def _jar_stats(jars: Path) -> list[tuple[str, int, int]]:
    found = []
    for entry in os.scandir(jars):
        info = entry.stat()
        found.append((entry.name, info.st_size, info.st_mtime_ns))
    return found


def private_directory(path: Path) -> bool:
    """True when ``path`` is a real directory owned by this user that nobody else can write."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


@dataclass(frozen=True)
class ClassArchive:
    """This install's archive (``path``), and the file this driver's JVM writes it to when
    there is none yet (``writing``)."""

    path: Path
    writing: Path | None = None

    def java_options(self) -> str:
        """The driver JVM's options: map the archive, or write one at exit (without a
        warning for each of the ~150 classes CDS cannot archive)."""
        if self.writing is None:
            return f"-XX:SharedArchiveFile={self.path}"
        return f"-Xlog:cds*=error -XX:ArchiveClassesAtExit={self.writing}"

    def keep(self, jvm_exit_code: int | None) -> bool:
        """After the driver's JVM exited: rename what it wrote into place (True) when it
        exited cleanly (code 0), else remove it."""
        if self.writing is None or not self.writing.exists():
            return False
        if jvm_exit_code != 0:
            self.writing.unlink(missing_ok=True)
            return False
        os.replace(self.writing, self.path)
        log.info("wrote the driver's class archive %s: later starts map it", self.path)
        return True


def plan_archive(class_path: str = "", directory: Path | None = None) -> ClassArchive | None:
    """The archive for this JDK and these Spark jars (``class_path``: the driver's extra
    class path), in ``directory`` (default ``<cache>/jvm``); None (and why, in the log)
    when there is no JDK or the directory is not private."""
    home = java_home()
    if home is None:
        return None
    directory = directory or cache_dir() / "jvm"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        release = home / "release"
        key = archive_key(str(home), release.read_bytes() if release.exists() else b"",
                          _jar_stats(spark_jars()), class_path)
    except OSError as exc:
        log.warning("no class archive for the driver's JVM: %s", exc)
        return None
    if not private_directory(directory):
        log.warning("no class archive for the driver's JVM: %s must be a directory of this "
                    "user that nobody else can write to", directory)
        return None
    remove_abandoned(directory)
    path = directory / f"{PREFIX}{key}{SUFFIX}"
    if path.exists():
        return ClassArchive(path)
    writing = directory / f"{PREFIX}{key}.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"
    log.info("no class archive for this JDK and these Spark jars yet: the driver's JVM "
             "writes one when it stops (once; this start and stop take seconds longer)")
    return ClassArchive(path, writing)


def remove_abandoned(directory: Path, now: float | None = None) -> list[Path]:
    """Remove the partial archives in ``directory`` older than :data:`ABANDONED_AFTER`
    (written by the JVM of a driver that was killed); returns them."""
    now = time.time() if now is None else now
    removed = []
    for path in directory.glob(f"{PREFIX}*{PARTIAL}"):
        with contextlib.suppress(FileNotFoundError):
            if now - path.stat().st_mtime > ABANDONED_AFTER:
                path.unlink()
                removed.append(path)
    return removed
