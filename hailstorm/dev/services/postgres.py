"""The dev stack's PostgreSQL: a private cluster made with the machine's ``initdb``/``pg_ctl``;
when running as root they run as the ``postgres`` user, because initdb refuses root.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hailstorm.dev.services.processes import (
    StackProcesses,
    await_ready,
    failure_line,
    pid_alive,
    stop_pid,
)
from hailstorm.dev.services.state import (
    DATABASE,
    DATABASE_USER,
    LOCAL,
    LOOPBACK,
    TLS_DIR,
    DevStackError,
    Host,
    ServiceRecord,
    StackState,
    StartAction,
)
from hailstorm.dev.services.tls import make_stack_tls


class PostgresServer(StackProcesses):
    """Starts, stops and restarts the stack's PostgreSQL."""

    def stop_postgres(self) -> int:
        """Stop the stack's PostgreSQL by its pid (a fast shutdown: clients are cut off); its
        data stays. Returns the pid that was stopped."""
        state = self.load()
        record = state.services.get("postgres") if state else None
        if record is None or not pid_alive(record.pid, record.marker):
            raise DevStackError(f"PostgreSQL does not run under {self.state_dir}")
        stop_pid(record.pid, record.marker, sig=signal.SIGINT, timeout=30)
        return record.pid

    def restart_postgres(self) -> ServiceRecord:
        """Start the stack's stopped PostgreSQL again on its data (the same port when it is
        free) and wait until it serves."""
        state = self.load()
        if state is None or "postgres" not in state.services:
            raise DevStackError(f"no PostgreSQL under {self.state_dir}")
        record = state.services["postgres"]
        if pid_alive(record.pid, record.marker):
            return record
        record = self._start_postgres(state, StartAction.RESTART)
        self._save(state)
        return record

    def _start_postgres(self, state: StackState, action: StartAction) -> ServiceRecord:
        """Make the cluster (``CREATE``) or start it again on its data (``RESTART``, on the
        port it had when that is free)."""
        bin_dir = postgres_bin_dir()
        previous = state.services.get("postgres")
        port = self._port("postgres", "--postgres-port",
                          recorded=previous.port if previous else None)
        host = state.host("postgres")
        run_as = _postgres_runner(self.state_dir, host)
        base = self.state_dir / "postgres"
        data = base / "data"
        log = self.state_dir / "logs" / "postgres.log"
        run_as.own(log, create=True)
        if action is StartAction.RESTART:
            if not (data / "PG_VERSION").exists():
                raise DevStackError(
                    f"postgres: {data} holds no database cluster (an earlier start failed "
                    "half-way?): 'hailstorm dev reset' deletes it and starts afresh")
            _clear_stale_locks(data, self.startup_timeout)
        else:
            try:
                self._initdb(state, bin_dir, run_as, base, log)
            # broad: also on Ctrl-C; the half-made cluster is deleted, re-raised
            except BaseException:
                shutil.rmtree(base, ignore_errors=True)  # made in this call: nothing else
                raise
        return self._pg_ctl_start(state, bin_dir, run_as, host, port, data, log)

    def _initdb(self, state: StackState, bin_dir: Path, run_as: _Runner, base: Path,
                log: Path) -> None:
        """A new database cluster under ``base/data`` (``base`` must not exist)."""
        data = base / "data"
        host = state.host("postgres")
        base.mkdir(mode=0o700)
        run_as.own(base)
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
                    # Text compares by bytes (code points, as Python sorts), whatever the
                    # machine's locale: sink keys are looked up in their index without
                    # strcoll (12% of PostgreSQL's CPU in an upsert of 600k text keys).
                    "--locale=C",
                    "--no-instructions",
                ],
                log,
            )
        finally:
            password_file.unlink(missing_ok=True)
        if state.secure:  # TCP clients over TLS only, with the password
            (data / "pg_hba.conf").write_text(secure_hba(host.address != LOOPBACK))
            tls = make_stack_tls(self.state_dir / TLS_DIR, [host.address])
            for source, target in ((tls.server_cert, "server.crt"), (tls.server_key, "server.key")):
                copy = base / target  # PostgreSQL reads a key only its own user owns
                copy.write_bytes(source.read_bytes())
                copy.chmod(0o600)
                run_as.own(copy)
        elif host.address != LOOPBACK:  # initdb lets loopback clients in only
            with open(data / "pg_hba.conf", "a") as hba:
                hba.write("host all all samenet scram-sha-256\n")

    def _pg_ctl_start(self, state: StackState, bin_dir: Path, run_as: _Runner, host: Host,
                      port: int, data: Path, log: Path) -> ServiceRecord:
        base = data.parent
        # shared_buffers holds a sink table of a few million rows and its key index: at
        # 64MB the backends wrote out evicted pages themselves (620k buffers in a 3M-event
        # per-user totals run, 16k at 256MB). Pages are taken as they are used.
        options = (
            f"-p {port} -k {base} -c listen_addresses={host.address} "
            "-c fsync=on -c max_connections=200 -c shared_buffers=256MB"
        )
        if state.secure:
            options += (f" -c ssl=on -c ssl_cert_file={base / 'server.crt'} -c "
                        f"ssl_key_file={base / 'server.key'} -c ssl_min_protocol_version=TLSv1.3")
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
        state.services["postgres"] = record
        url = state.database_url("postgres")
        return await_ready(
            record,
            lambda: _create_database(url),
            lambda: pid_alive(pid, str(data)),
            self.startup_timeout,
        )


def secure_hba(samenet: bool) -> str:
    """``pg_hba.conf`` of a secure stack: the local socket (the postgres user's tools) as
    initdb made it, and TCP only over TLS with a SCRAM password (no ``host`` line: a
    plaintext connection is refused)."""
    lines = ["local all all trust",
             "hostssl all all 127.0.0.1/32 scram-sha-256",
             "hostnossl all all 0.0.0.0/0 reject",
             "hostnossl all all ::/0 reject"]
    if samenet:
        lines.insert(2, "hostssl all all samenet scram-sha-256")
    return "\n".join(lines) + "\n"


def _clear_stale_locks(data: Path, timeout: float) -> None:
    """Remove the lock files (``postmaster.pid``, the socket's) of a postmaster that was
    killed. PostgreSQL refuses to start while the pid they name exists, and a killed
    postmaster (reparented to pid 1) may stay a zombie for a while; a live one is waited
    for, bounded."""
    deadline = time.monotonic() + timeout
    for lock in [data / "postmaster.pid", *data.parent.glob(".s.PGSQL.*.lock")]:
        while True:
            try:
                pid = int(lock.read_text().splitlines()[0])
            except (FileNotFoundError, IndexError, ValueError):
                break
            if not pid_alive(pid):  # gone or a zombie: nothing holds the data directory
                lock.unlink(missing_ok=True)
                break
            if time.monotonic() > deadline:
                raise DevStackError(f"postgres: pid {pid} still holds {data} after "
                                    f"{timeout:.0f}s; stop it first")
            time.sleep(0.2)


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
    host: Host = LOCAL

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
            self.host.command(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            check=False,
        )
        with open(log, "a") as out:
            out.write(result.stdout + result.stderr)
        if result.returncode != 0:
            raise DevStackError(f"postgres: {tool} failed "
                                f"({failure_line(result.stderr or result.stdout)}); see {log}")


def _postgres_runner(state_dir: Path, host: Host) -> _Runner:
    if os.geteuid() != 0:
        return _Runner(None, host)
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
    return _Runner(user, host)
