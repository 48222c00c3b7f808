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
from pathlib import Path

import pytest

WORKER_START = """
import importlib, os, sys, tempfile, threading, zipimport
import hailstorm.runtime.spark_daemon as daemon
assert "pyspark.zip" in sys.modules["pyspark"].__file__  # as on an executor
if sys.argv[1] == "prepared":
    daemon.prepare_for_forks(["daemon", "pyspark.worker"])
reads = []
read_directory = zipimport._read_directory
zipimport._read_directory = lambda archive: reads.append(archive) or read_directory(archive)
# What pyspark's worker does after the fork, before the task: Spark's files directory
# on sys.path, the import caches invalidated, the worker module imported.
sys.path.insert(1, tempfile.mkdtemp())
importlib.invalidate_caches()
from pyspark.worker import main
print(len(reads), threading.active_count(), len(os.listdir("/proc/self/task")))
"""


def _spark_python_path() -> str:
    """Spark's own Python path, as it gives its daemon: pyspark.zip and py4j's zip."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    archives = sorted((Path(spec.origin).parent / "python" / "lib").glob("*.zip"))
    if not any(a.name == "pyspark.zip" for a in archives):
        pytest.skip("this pyspark has no pyspark.zip")
    return os.pathsep.join(str(a) for a in archives)


@pytest.mark.parametrize(("prepared", "reads"), [("prepared", "0"), ("control", None)])
def test_a_forked_worker_reads_no_zip_archive_again_before_its_task(
        prepared: str, reads: str | None) -> None:
    """The daemon imports the workers' module and forgets its zip importers before it
    forks; without that (the control), every worker read each archive again."""
    env = {**os.environ, "PYTHONPATH": _spark_python_path()}
    result = subprocess.run([sys.executable, "-c", WORKER_START, prepared], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    read, threads, os_threads = result.stdout.split()
    assert (threads, os_threads) == ("1", "1")  # nothing started a thread to lose in a fork
    if reads is None:
        assert int(read) > 0
    else:
        assert read == reads


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
