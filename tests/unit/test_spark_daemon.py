"""``hailstorm.runtime.spark_daemon``: the process Spark forks every task's Python worker from.

Spark reads the daemon's port from its stdout and closes its stdin to stop it; a thread
started while the processor runtime is imported would be missing in every forked worker.
Both run in fresh interpreters (no Spark, no JVM).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys


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
