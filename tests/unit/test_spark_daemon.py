"""``hailstorm.runtime.spark_daemon``: the process Spark forks every task's Python worker from.

Spark reads the daemon's port from its stdout and closes its stdin to stop it; a thread
started while the processor runtime is imported would be missing in every forked worker.
Both run in fresh interpreters (no Spark, no JVM).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hailstorm.runtime.spark_daemon import installed_first

WORKER_START = """
import os, sys, tempfile, zipimport
import hailstorm.runtime.spark_daemon as daemon
case = sys.argv[1]
if case == "installed":
    sys.path[:] = daemon.installed_first(sys.path)
import pyspark.daemon
if case != "control":
    daemon.prepare_for_forks(["daemon", "pyspark.worker"])
origin = "zip" if "pyspark.zip" in sys.modules["pyspark"].__file__ else "installed"
reads = []
read_directory = zipimport._read_directory
zipimport._read_directory = lambda archive: reads.append(archive) or read_directory(archive)
modules = set(sys.modules)
# What pyspark's worker does after the fork, before the task: the worker module imported,
# Spark's files directory put on sys.path and the import caches invalidated.
from pyspark.worker import main
from pyspark.worker_util import setup_spark_files
setup_spark_files(tempfile.mkdtemp(), [])
print(origin, len(reads), len(set(sys.modules) - modules), len(os.listdir("/proc/self/task")))
"""


def _spark_python_path() -> str:
    """Spark's own Python path, as it gives its daemon: pyspark.zip and py4j's zip first."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    archives = sorted((Path(spec.origin).parent / "python" / "lib").glob("*.zip"))
    if not any(a.name == "pyspark.zip" for a in archives):
        pytest.skip("this pyspark has no pyspark.zip")
    return os.pathsep.join([*map(str, archives), os.environ.get("PYTHONPATH", "")])


def _worker_start(case: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": _spark_python_path()}
    result = subprocess.run([sys.executable, "-c", WORKER_START, case], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_daemon_imports_the_installed_pyspark_of_spark_s_version_not_its_zip() -> None:
    origin, reads, new_modules, threads = _worker_start("installed")
    assert origin == "installed"  # compiled bytecode, not the zip's sources
    assert (reads, new_modules, threads) == ("0", "0", "1")


def test_with_spark_s_zip_a_forked_worker_reads_no_archive_and_imports_nothing() -> None:
    """Spark's pyspark of another version than the installed one stays in its zip: the
    daemon imported the workers' module and forgot its zip importers before forking, so a
    worker neither imports it again nor reads an archive's directory again."""
    origin, reads, new_modules, threads = _worker_start("zipped")
    assert origin == "zip"
    assert (reads, new_modules) == ("0", "0")
    assert threads == "1"  # nothing started a thread that a forked worker would lack


def test_without_the_preparation_every_worker_did_both() -> None:
    origin, reads, new_modules, _threads = _worker_start("control")
    assert origin == "zip" and int(reads) > 0 and int(new_modules) > 0


VERSION = b"__version__: str = '4.3.0'\n"


def _reader(files: dict[tuple[str, str], bytes]) -> Callable[[str, str], bytes | None]:
    return lambda entry, member: files.get((entry, member))


def test_spark_s_archives_go_last_only_behind_the_same_installed_version() -> None:
    path = ["/work", "/spark/python/lib/pyspark.zip", "/spark/python/lib/py4j-0.10.9.9-src.zip",
            "/app/deps.zip", "/venv/site-packages"]
    same = {("/spark/python/lib/pyspark.zip", "pyspark/version.py"): VERSION,
            ("/venv/site-packages", "pyspark/version.py"): VERSION,
            ("/spark/python/lib/py4j-0.10.9.9-src.zip", "py4j/version.py"): b"0.10.9.9",
            ("/venv/site-packages", "py4j/version.py"): b"0.10.9.9"}
    assert installed_first(path, _reader(same)) == [
        "/work", "/app/deps.zip", "/venv/site-packages",
        "/spark/python/lib/pyspark.zip", "/spark/python/lib/py4j-0.10.9.9-src.zip"]
    other = {**same, ("/venv/site-packages", "pyspark/version.py"): b"'4.2.1'"}
    assert installed_first(path, _reader(other)) == [
        "/work", "/spark/python/lib/pyspark.zip", "/app/deps.zip", "/venv/site-packages",
        "/spark/python/lib/py4j-0.10.9.9-src.zip"]
    assert installed_first(path, _reader({})) == path  # nothing installed: Spark's own


def test_importing_the_processor_runtime_starts_no_thread() -> None:
    code = ("import os, threading, hailstorm.runtime.task; "
            "print(threading.active_count(), len(os.listdir('/proc/self/task')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1"]  # Python threads, OS threads


def test_the_daemon_writes_only_its_port_and_stops_when_its_stdin_closes() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON_UNIX_DOMAIN_ENABLED", "SPARK_PREFER_IPV6")}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "hailstorm.runtime.spark_daemon", "pyspark.worker"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert daemon.stdout is not None and daemon.stdin is not None
        port = int.from_bytes(daemon.stdout.read(4), "big", signed=True)
        assert 0 < port < 65536
        with socket.socket() as probe:  # it listens where it said
            assert probe.connect_ex(("127.0.0.1", port)) == 0
        daemon.stdin.close()
        daemon.wait(timeout=60)  # it ends (with status 1, as pyspark.daemon does)
        assert daemon.stdout.read() == b""  # nothing after the port (the worker it forked
        # for the probe fails on the missing secret, on stderr)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
