"""The driver's class archive: its name, when it is mapped or written, and what is kept."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hailstorm.runtime import class_archive
from hailstorm.runtime.class_archive import (
    ABANDONED_AFTER,
    ClassArchive,
    archive_key,
    plan_archive,
    remove_abandoned,
)

JARS = [("spark-core.jar", 100, 1), ("scala-library.jar", 200, 2)]


def test_the_key_names_one_jdk_build_one_set_of_jars_and_one_class_path() -> None:
    key = archive_key("/jdk", b'JAVA_VERSION="17.0.15"', JARS)
    assert key == archive_key("/jdk", b'JAVA_VERSION="17.0.15"', list(reversed(JARS)))
    others = {
        archive_key("/other-jdk", b'JAVA_VERSION="17.0.15"', JARS),
        archive_key("/jdk", b'JAVA_VERSION="17.0.16"', JARS),
        archive_key("/jdk", b'JAVA_VERSION="17.0.15"', [*JARS, ("extra.jar", 1, 1)]),
        archive_key("/jdk", b'JAVA_VERSION="17.0.15"', [JARS[0], ("scala-library.jar", 201, 2)]),
        archive_key("/jdk", b'JAVA_VERSION="17.0.15"', [JARS[0], ("scala-library.jar", 200, 3)]),
        archive_key("/jdk", b'JAVA_VERSION="17.0.15"', JARS, class_path="/opt/extra.jar"),
        # parts are length-prefixed: moving a byte from one part to the next is another key
        archive_key("/jd", b'kJAVA_VERSION="17.0.15"', JARS),
    }
    assert key not in others and len(others) == 7


def test_the_first_driver_writes_the_archive_and_later_ones_map_it(tmp_path: Path) -> None:
    first = plan_archive(directory=tmp_path / "jvm")
    assert first is not None and first.writing is not None
    assert (tmp_path / "jvm").stat().st_mode & 0o777 == 0o700
    assert first.java_options().endswith(f"-XX:ArchiveClassesAtExit={first.writing}")
    assert first.writing.parent == first.path.parent
    # a second driver starting meanwhile writes a file of its own
    second = plan_archive(directory=tmp_path / "jvm")
    assert second is not None and second.writing not in (None, first.writing)
    assert second.path == first.path

    first.writing.write_bytes(b"archive")  # what the JVM wrote when it exited
    assert first.keep(0)
    assert first.path.read_bytes() == b"archive" and not first.writing.exists()

    later = plan_archive(directory=tmp_path / "jvm")
    assert later == ClassArchive(first.path)
    assert later.java_options() == f"-XX:SharedArchiveFile={first.path}"
    assert not later.keep(0)  # nothing to keep: it only mapped


@pytest.mark.parametrize("exit_code", [1, 143, None])
def test_what_a_jvm_that_did_not_exit_cleanly_wrote_is_removed(tmp_path: Path,
                                                               exit_code: int | None) -> None:
    plan = plan_archive(directory=tmp_path)
    assert plan is not None and plan.writing is not None
    plan.writing.write_bytes(b"half an archive")
    assert not plan.keep(exit_code)
    assert list(tmp_path.iterdir()) == []


def test_a_jvm_that_wrote_nothing_keeps_nothing(tmp_path: Path) -> None:
    plan = plan_archive(directory=tmp_path)
    assert plan is not None
    assert not plan.keep(0)  # killed before its exit, or its options were overridden
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_directory_others_can_write_is_never_used(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "jvm"
    directory.mkdir()
    directory.chmod(mode)
    assert plan_archive(directory=directory) is None


def test_a_symlinked_directory_is_never_used(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "jvm").symlink_to(real)
    assert plan_archive(directory=tmp_path / "jvm") is None


def test_without_a_jdk_there_is_no_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert plan_archive(directory=tmp_path / "jvm") is None


def test_java_home_follows_the_java_spark_submit_runs(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "bin" / "java").write_text("")
    monkeypatch.setenv("JAVA_HOME", str(jdk))
    assert class_archive.java_home() == jdk.resolve()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(jdk / "bin"))
    (jdk / "bin" / "java").chmod(0o755)
    assert class_archive.java_home() == jdk.resolve()


def test_partial_archives_left_by_killed_drivers_are_removed_an_hour_later(
        tmp_path: Path) -> None:
    now = time.time()
    old = tmp_path / "spark-driver-abc.123-00000000.partial"
    fresh = tmp_path / "spark-driver-abc.456-11111111.partial"
    kept = tmp_path / "spark-driver-abc.jsa"
    for path in (old, fresh, kept):
        path.write_bytes(b"x")
        os.utime(path, (now - ABANDONED_AFTER - 1,) * 2 if path != fresh else (now, now))
    assert remove_abandoned(tmp_path, now=now) == [old]
    assert sorted(tmp_path.iterdir()) == sorted([fresh, kept])
