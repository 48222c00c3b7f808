"""The driver's class archive: its name, when it is mapped or written, and what is kept."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import pytest

from hailstorm.runtime import class_archive
from hailstorm.runtime.class_archive import (
    ABANDONED_AFTER,
    UNUSED_AFTER,
    ArchiveUnsupported,
    ClassArchive,
    archive_key,
    class_path,
    class_path_files,
    plan_archive,
    private_directory,
    remove_abandoned,
    remove_unused,
)

FILES = [("/spark/jars/spark-core.jar", 100, 1), ("/spark/jars/scala-library.jar", 200, 2)]
RELEASE = b'JAVA_VERSION="17.0.15"'


def test_the_key_names_one_jdk_build_and_the_files_the_archive_depends_on() -> None:
    key = archive_key("/jdk", RELEASE, FILES)
    assert key == archive_key("/jdk", RELEASE, list(reversed(FILES)))
    library = "/spark/jars/scala-library.jar"
    others = {
        archive_key("/other-jdk", RELEASE, FILES),
        archive_key("/jdk", b'JAVA_VERSION="17.0.16"', FILES),
        archive_key("/jdk", RELEASE, [*FILES, ("/opt/extra.jar", 1, 1)]),
        archive_key("/jdk", RELEASE, [FILES[0], (library, 201, 2)]),
        archive_key("/jdk", RELEASE, [FILES[0], (library, 200, 3)]),
        archive_key("/jdk", RELEASE, [FILES[0], ("/other/jars/scala-library.jar", 200, 2)]),
        # parts are length-prefixed: moving a byte from one part to the next is another key
        archive_key("/jd", b"k" + RELEASE, FILES),
    }
    assert key not in others and len(others) == 7


def test_the_class_path_is_the_launchers_and_directories_on_it_must_be_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spark = tmp_path / "spark"
    (spark / "jars").mkdir(parents=True)
    for name in ("a.jar", "b.JAR", "notes.txt"):
        (spark / "jars" / name).write_bytes(b"x" * len(name))
    extra = tmp_path / "extra.jar"
    extra.write_bytes(b"extra")
    for var in ("SPARK_CONF_DIR", *class_archive.CLASS_PATH_VARS):
        monkeypatch.delenv(var, raising=False)
    entries = class_path(spark, f"{extra}{os.pathsep}{tmp_path / 'missing.jar'}")
    assert entries == [str(extra), str(tmp_path / "missing.jar"), str(spark / "conf"),
                       str(spark / "jars" / "*")]
    files = class_path_files(entries)
    assert [Path(name).name for name, _size, _mtime in files] == ["extra.jar", "a.jar", "b.JAR"]
    assert [size for _name, size, _mtime in files] == [5, 5, 5]

    (spark / "conf").mkdir()  # empty: nothing to archive from it, nothing in the way
    assert class_path_files(class_path(spark)) == files[1:]
    (spark / "conf" / "spark-defaults.conf.template").write_text("")
    with pytest.raises(ArchiveUnsupported, match="non-empty directory"):
        class_path_files(class_path(spark))
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HADOOP_CONF_DIR", str(spark / "conf"))
    with pytest.raises(ArchiveUnsupported, match="non-empty directory"):
        class_path_files(class_path(spark))


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


def test_a_symlinked_directory_is_judged_and_used_where_it_leads(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (tmp_path / "jvm").symlink_to(private)
    plan = plan_archive(directory=tmp_path / "jvm")
    assert plan is not None and plan.path.parent == private.resolve()
    shared = tmp_path / "shared"
    (shared / "jvm").mkdir(parents=True, mode=0o700)
    shared.chmod(0o777)
    (tmp_path / "other").symlink_to(shared / "jvm")
    assert plan_archive(directory=tmp_path / "other") is None


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


def test_archives_no_driver_mapped_for_a_month_go_when_another_is_written(
        tmp_path: Path) -> None:
    now = time.time()
    old, recent = tmp_path / "spark-driver-old.jsa", tmp_path / "spark-driver-new.jsa"
    for path, age in ((old, UNUSED_AFTER + 1), (recent, UNUSED_AFTER - 3600)):
        path.write_bytes(b"x")
        os.utime(path, (now - age,) * 2)
    assert remove_unused(tmp_path, now=now) == [old]
    assert list(tmp_path.iterdir()) == [recent]


def test_mapping_an_archive_marks_it_used(tmp_path: Path) -> None:
    first = plan_archive(directory=tmp_path)
    assert first is not None and first.writing is not None
    first.path.write_bytes(b"archive")
    os.utime(first.path, (1.0, 1.0))
    assert plan_archive(directory=tmp_path) == ClassArchive(first.path)
    assert first.path.stat().st_mtime > time.time() - 60


def test_a_directory_someone_else_could_replace_is_never_used(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert not private_directory(shared / "jvm")  # does not exist
    (shared / "jvm").mkdir(mode=0o700)
    assert not private_directory(shared / "jvm")
    assert plan_archive(directory=shared / "jvm") is None
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot rename what is ours
    assert private_directory(shared / "jvm")


def test_a_directory_with_a_space_is_not_used(tmp_path: Path) -> None:
    assert plan_archive(directory=tmp_path / "with space") is None


def test_an_archive_that_is_not_a_plain_file_is_not_mapped(tmp_path: Path) -> None:
    first = plan_archive(directory=tmp_path)
    assert first is not None
    (tmp_path / "elsewhere.jsa").write_bytes(b"archive")
    first.path.symlink_to(tmp_path / "elsewhere.jsa")
    assert plan_archive(directory=tmp_path) is None


def test_an_archive_the_jvm_did_not_map_is_removed(tmp_path: Path) -> None:
    archive = tmp_path / "spark-driver-abc.jsa"
    archive.write_bytes(b"archive" * 1000)
    plan = ClassArchive(archive)
    with archive.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ):
        assert plan.check_mapped(os.getpid())  # this process maps it now
    assert archive.exists()
    assert not plan.check_mapped(os.getpid())
    assert not archive.exists()
    assert ClassArchive(archive, writing=tmp_path / "x.partial").check_mapped(os.getpid())
    assert ClassArchive(archive).check_mapped(None)
