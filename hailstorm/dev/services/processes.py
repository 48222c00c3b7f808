"""Process bookkeeping for the dev stack: is a recorded pid still ours and alive, stopping
one (by pid, its command line checked first so a recycled pid is never signalled), free
ports, waiting for a service to be ready, the Java the services run on, and
:class:`StackProcesses`: the state file and spawning, shared by every service.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from hailstorm.dev.kafka_broker import Progress
from hailstorm.dev.services.state import (
    LOOPBACK,
    STATE_FILE,
    DevStackError,
    Host,
    ServiceRecord,
    StackState,
    restart_port,
)

# --------------------------------------------------------------------------- processes


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from the third (the state) on, so that
    ``fields[i]`` is field ``i + 3`` of proc(5) (the command name before them may hold
    spaces); None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """True when ``pid`` runs (not a zombie) and its command line contains ``marker``."""
    fields = stat_fields(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return marker is None or marker in cmdline


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child (no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop_pid(
    pid: int, marker: str | None, sig: int = signal.SIGTERM, timeout: float = 15.0
) -> None:
    """Stop one process we started: ``sig``, then SIGKILL after ``timeout`` seconds.

    Returns once the process has ended. A dying process loses its command line before it
    is gone (a JVM unmaps gigabytes first), so after the signal the wait is on the pid
    alone; the marker only guards the signals against a reused pid.
    """
    if not pid_alive(pid, marker):
        _reap(pid)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    if pid_alive(pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and pid_alive(pid):
        _reap(pid)
        time.sleep(0.05)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """True when a server could listen on ``port`` on 127.0.0.1 right now (as servers do,
    with SO_REUSEADDR: connections of a stopped one in TIME_WAIT do not hold it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def ensure_port_free(service: str, port: int, flag: str) -> None:
    """Raise a clear error when a configured port is already taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise DevStackError(
                f"{service}: port {port} on {LOOPBACK} is already in use; "
                f"stop what holds it or pass {flag} 0 to pick a free port"
            ) from None


def listens(port: int, host: str = LOOPBACK) -> bool:
    """True when something accepts connections on ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def _wait_until(
    service: str,
    check: Callable[[], bool],
    running: Callable[[], bool],
    log: Path,
    timeout: float,
) -> None:
    """Poll ``check`` until it passes; error if ``running`` turns false or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running():
            raise DevStackError(f"{service} exited during start-up; see {log} ({log_tail(log)})")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise DevStackError(f"{service} was not ready after {timeout:.0f}s; see {log} "
                        f"({log_tail(log)})")


def await_ready(
    record: ServiceRecord,
    check: Callable[[], bool],
    running: Callable[[], bool],
    timeout: float,
) -> ServiceRecord:
    """Wait for a service we just started; stop it (by pid) if it never becomes ready."""
    try:
        _wait_until(record.name, check, running, Path(record.log), timeout)
    except BaseException:  # broad: also on Ctrl-C; the service is killed, re-raised
        stop_pid(record.pid, None, sig=signal.SIGKILL, timeout=5)
        raise
    return record


# --------------------------------------------------------------------------- binaries


_STACK_FRAME = re.compile(r"at [\w$.<>/-]+\(.*\)|\.\.\. \d+ more")
"""A line of a Java stack trace below its exception (``at pkg.Class.method(File.java:1)``,
``... 3 more``)."""
_NAMES_FAILURE = re.compile(r"error|exception|fatal", re.IGNORECASE)


def failure_line(output: str) -> str:
    """The line of a failed tool's output that names the failure: its last line naming an
    error, an exception or a fatal condition (in a Java trace, the last ``Caused by:``, the
    root cause), else its last line that is not a stack frame, or ``"no output"``."""
    lines = [line.strip() for line in output.splitlines()]
    named = [line for line in lines if line and not _STACK_FRAME.fullmatch(line)]
    failures = [line for line in named if _NAMES_FAILURE.search(line)]
    return (failures or named or ["no output"])[-1]


def java_binary() -> str:
    """The machine's ``java``, or a clear error."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise DevStackError(
            "java not found: ZooKeeper and Kafka need Java 17+ "
            "(apt-get install openjdk-17-jre-headless)"
        )
    return found


def pyspark_jars() -> Path:
    """The ``jars/`` directory inside the installed pyspark (it ships ZooKeeper)."""
    try:
        import pyspark
    except ImportError:
        raise DevStackError("pyspark is not installed: pip install 'pyspark>=4'") from None
    jars = Path(pyspark.__file__).parent / "jars"
    if not glob.glob(str(jars / "zookeeper-[0-9]*.jar")):
        raise DevStackError(
            f"no ZooKeeper jar under {jars}: reinstall pyspark (pip install 'pyspark>=4')"
        )
    return jars


# ------------------------------------------------------------------ the state file, spawning


class StackProcesses:
    """What starting any service takes: the state directory and its state file, the
    configured ports, spawning a process that logs under ``logs/``. The service mixins
    (:mod:`.zookeeper_server`, :mod:`.kafka_cluster`, :mod:`.postgres`, :mod:`.spark_cluster`)
    build on it; :class:`~hailstorm.dev.services.stack.DevStack` sets these attributes."""

    state_dir: Path
    ports: dict[str, int]
    kafka_brokers: int
    kafka_security: str
    spark_workers: int
    spark_cores: int
    startup_timeout: float
    progress: Progress

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    def load(self) -> StackState | None:
        """The recorded stack, or None when ``up`` never ran here."""
        try:
            return StackState.from_json(self.state_file.read_text())
        except FileNotFoundError:
            return None

    def _save(self, state: StackState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(state.to_json())
        tmp.replace(self.state_file)

    def _port(self, name: str, flag: str, recorded: int | None = None) -> int:
        """The configured port, else ``recorded`` (the port the service had) when it is
        free, else a free one."""
        configured = self.ports[name]
        if configured:
            ensure_port_free(name, configured, flag)
            return configured
        chosen = restart_port(recorded, configured, recorded is not None
                              and port_is_free(recorded))
        if chosen is None:
            chosen = free_port()
            if recorded:
                self.progress(f"{name}: port {recorded} is taken now; using {chosen}")
        return chosen

    def _spawn(
        self,
        name: str,
        host: Host,
        argv: list[str],
        port: int,
        marker: str,
        env: dict[str, str] | None = None,
    ) -> tuple[ServiceRecord, subprocess.Popen[bytes]]:
        log = self.state_dir / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                host.command(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                start_new_session=True,
                env=env,
            )
        record = ServiceRecord(name=name, port=port, pid=process.pid, log=str(log), marker=marker)
        return record, process
