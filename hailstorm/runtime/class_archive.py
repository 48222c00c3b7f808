"""A class-data-sharing archive of the Spark driver JVM's classes (HotSpot dynamic CDS).

A driver's JVM loads and verifies thousands of Spark's classes from its jars before the
first task runs; mapping them from an archive took a word count's start to ``Flowing`` from
about 10.5 s to 5.7 s on a 2-core machine, on every start and restart of a topology.

The archive is the JVM's own format, kept in ``<cache>/jvm`` (:func:`hailstorm.config.cache_dir`)
under a name keyed by the JDK build and the driver's class path (:func:`archive_key`).
Without one, a driver asks its JVM to write one when it exits (``-XX:ArchiveClassesAtExit``)
into a file of its own; only after that JVM exited cleanly is the file renamed into place
(:meth:`ClassArchive.keep`), so no driver ever maps a partial archive, and two first drivers
at once each write their own and the last rename wins. Writing costs that first run about
5 s more at start and 8 s more at stop. Later drivers map it (``-XX:SharedArchiveFile``).
A JVM that cannot use an archive says nothing and starts without it: the driver looks at
what its JVM mapped (:meth:`ClassArchive.check_mapped`) and removes an archive it did not,
so that the next run writes a new one.

An archive is code the driver's JVM runs: it is used only where nobody else could have
written it (:func:`private_directory`). Classes from a non-empty directory on the class
path (a ``conf/`` directory of a Spark distribution) cannot be archived: then there is no
archive. A killed driver leaves its JVM to write a file nobody keeps; such files are
removed an hour later, and archives unused for 30 days when another is written.
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
#: An archive no driver mapped for this long is removed when another one is written.
UNUSED_AFTER = 30 * 86400.0
#: What Spark's launcher puts on the driver's class path besides its jars and
#: ``spark.driver.extraClassPath`` (directories: classes in them cannot be archived).
CLASS_PATH_VARS = ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")

FileStat = tuple[str, int, int]
"""``(path, size, mtime_ns)`` of one file the JVM's archive depends on."""


def archive_key(java_home: str, java_release: bytes, files: Iterable[FileStat]) -> str:
    """A name for the archive of one JDK build (its home, its ``release`` file) and the
    files it depends on (the JVM's own, every jar on the class path): any of them
    changing names another archive."""
    digest = hashlib.sha256()
    for part in (java_home.encode(), java_release,
                 *(f"{n}\0{s}\0{m}".encode() for n, s, m in sorted(files))):
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


def spark_home() -> Path:
    """The Spark the driver runs (``$SPARK_HOME``, else pyspark's)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def class_path(home: Path, extra_class_path: str = "") -> list[str]:
    """The driver JVM's class path as Spark's launcher builds it (``extra_class_path``:
    ``spark.driver.extraClassPath``): its ``conf`` directory, its jars, the variables'."""
    conf = os.environ.get("SPARK_CONF_DIR") or str(home / "conf")
    entries = [*extra_class_path.split(os.pathsep), conf, str(home / "jars" / "*")]
    for var in CLASS_PATH_VARS:
        entries.extend(os.environ.get(var, "").split(os.pathsep))
    return [e for e in entries if e]


def class_path_files(entries: Iterable[str]) -> list[FileStat]:
    """What the archive depends on in ``entries`` (``dir/*``: every jar in it); raises
    :class:`ArchiveUnsupported` for a non-empty directory."""
    found: list[FileStat] = []
    for entry in entries:
        path = Path(entry)
        if path.name == "*":
            candidates = sorted(p for p in path.parent.glob("*") if p.suffix.lower() == ".jar")
        elif path.is_dir():
            if any(path.iterdir()):
                raise ArchiveUnsupported(f"{path} is a non-empty directory on the class path")
            continue
        else:
            candidates = [path]
        for candidate in candidates:
            with contextlib.suppress(FileNotFoundError):  # the launcher skips it too
                info = candidate.stat()
                found.append((str(candidate), info.st_size, info.st_mtime_ns))
    return found


def jvm_files(home: Path) -> list[FileStat]:
    """The JDK's own files an archive is checked against (its VM and base archive)."""
    found = []
    for path in sorted(home.glob("lib/server/*")):
        if path.suffix in (".so", ".jsa"):
            info = path.stat()
            found.append((str(path), info.st_size, info.st_mtime_ns))
    return found


class ArchiveUnsupported(Exception):
    """This driver cannot have an archive (the message says why)."""


def private_directory(path: Path) -> bool:
    """True when ``path`` is a directory of this user that nobody else can write to, nor
    replace: every directory above it is this user's or root's and, unless sticky, not
    writable by others either."""
    uid = os.geteuid()
    try:
        info = path.lstat()
        if not (stat.S_ISDIR(info.st_mode) and info.st_uid == uid
                and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            return False
        for parent in path.parents:
            info = parent.lstat()
            if info.st_uid not in (uid, 0) or stat.S_ISLNK(info.st_mode):
                return False
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
                return False
    except OSError:
        return False
    return True


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

    def check_mapped(self, jvm_pid: int | None) -> bool:
        """Whether the driver's JVM maps the archive it was given (True when writing or
        when it cannot be told); an archive it did not map is removed, for the next run
        to write a new one."""
        if self.writing is not None or jvm_pid is None:
            return True
        try:
            maps = Path(f"/proc/{jvm_pid}/maps").read_text()
        except OSError:
            return True
        if str(self.path) in maps:
            return True
        log.warning("the driver's JVM did not map the class archive %s (another JDK build "
                    "or class path?): removed it; the next run writes a new one", self.path)
        self.path.unlink(missing_ok=True)
        return False

    def keep(self, jvm_exit_code: int | None) -> bool:
        """After the driver's JVM exited: rename what it wrote into place (True) when it
        exited cleanly (code 0), else remove it."""
        if self.writing is None or not self.writing.exists():
            return False
        if jvm_exit_code != 0:
            self.writing.unlink(missing_ok=True)
            log.warning("the driver's JVM exited with %s: no class archive kept",
                        jvm_exit_code)
            return False
        os.replace(self.writing, self.path)
        log.info("wrote the driver's class archive %s: later starts map it", self.path)
        remove_unused(self.path.parent)
        return True


def plan_archive(extra_class_path: str = "",
                 directory: Path | None = None) -> ClassArchive | None:
    """The archive for this JDK and this driver class path (``extra_class_path``:
    ``spark.driver.extraClassPath``), in ``directory`` (default ``<cache>/jvm``); None (and
    why, in the log) when the driver cannot have one."""
    try:
        home = java_home()
        if home is None:
            raise ArchiveUnsupported("no java found")
        directory = (directory or cache_dir() / "jvm").absolute()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory = directory.resolve()
        if not private_directory(directory):
            raise ArchiveUnsupported(
                f"{directory} and the directories above it must be writable by this user "
                "alone (the archive is code the JVM runs)")
        if any(c.isspace() or c in "\"'\\" for c in str(directory)):
            raise ArchiveUnsupported(f"{directory} has a space or quote (Spark splits "
                                     "Java options on spaces)")
        release = home / "release"
        key = archive_key(
            str(home), release.read_bytes() if release.exists() else b"",
            [*jvm_files(home), *class_path_files(class_path(spark_home(), extra_class_path))])
    except (ArchiveUnsupported, OSError) as exc:
        log.info("no class archive for the driver's JVM: %s", exc)
        return None
    remove_abandoned(directory)
    path = directory / f"{PREFIX}{key}{SUFFIX}"
    try:
        info = path.lstat()
    except FileNotFoundError:
        writing = directory / f"{PREFIX}{key}.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"
        log.info("no class archive for this JDK and class path yet: the driver's JVM "
                 "writes one when it stops (once; this start and stop take seconds longer)")
        return ClassArchive(path, writing)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        log.info("no class archive for the driver's JVM: %s is not a file of this user", path)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # in use: not removed by remove_unused
    return ClassArchive(path)


def remove_abandoned(directory: Path, now: float | None = None) -> list[Path]:
    """Remove the partial archives in ``directory`` older than :data:`ABANDONED_AFTER`
    (written by the JVM of a driver that was killed); returns them."""
    return _remove_older(directory.glob(f"{PREFIX}*{PARTIAL}"), ABANDONED_AFTER, now)


def remove_unused(directory: Path, now: float | None = None) -> list[Path]:
    """Remove the archives in ``directory`` no driver mapped for :data:`UNUSED_AFTER`
    (another JDK or Spark since); returns them."""
    return _remove_older(directory.glob(f"{PREFIX}*{SUFFIX}"), UNUSED_AFTER, now)


def _remove_older(paths: Iterable[Path], age: float, now: float | None) -> list[Path]:
    now = time.time() if now is None else now
    removed = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            if now - path.stat().st_mtime > age:
                path.unlink()
                removed.append(path)
    return removed
