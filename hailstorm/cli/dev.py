"""``hailstorm dev``: the embedded dev stack (``up``, ``down``, ``reset``, ``status``, ``env``) of
:class:`hailstorm.dev.services.DevStack`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click
from rich.table import Table

from hailstorm.cli.group import _handle_errors, console, main, out, state_dir_option
from hailstorm.dev.services import DEFAULT_SPARK_CORES, DevStack


@main.group()
def dev() -> None:
    """The embedded dev stack: ZooKeeper, Apache Kafka and PostgreSQL (and a Spark
    standalone cluster with --spark-workers) on 127.0.0.1."""


def _up_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of ``dev up`` (and ``dev reset``, which ends with an ``up``)."""
    options = [
        state_dir_option,
        click.option("--zk-port", type=int, default=0, show_default=True,
                     help="0 picks a free port (a restart keeps the port it had)."),
        click.option("--kafka-port", type=int, default=0, show_default=True,
                     help="0 picks a free port."),
        click.option("--postgres-port", type=int, default=0, show_default=True,
                     help="0 picks a free port (a restart keeps the port it had)."),
        click.option("--brokers", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Kafka nodes (each a broker and a KRaft controller); 3 gives topics "
                     "replication factor 3 and min.insync.replicas=2."),
        click.option("--kafka-security", type=click.Choice(["plaintext", "sasl_ssl"]),
                     default="plaintext", show_default=True,
                     help="sasl_ssl: clients connect with SCRAM-SHA-256 over TLS (a CA the "
                     "stack makes); 'dev env' then exports HAILSTORM_KAFKA_CONFIG."),
        click.option("--secure", is_flag=True,
                     help="Every service speaks TLS only, with a CA the stack makes, and asks "
                     "for a password: ZooKeeper (client certificate and digest ACLs), Kafka "
                     "(SCRAM over TLS; implies --kafka-security sasl_ssl), PostgreSQL "
                     "(sslmode=verify-full); 'dev env' exports what every client needs."),
        click.option("--spark-workers", type=click.IntRange(min=0), default=0,
                     show_default=True, metavar="N",
                     help="Also start a Spark standalone master and N workers (pyspark's own "
                     "classes); 'dev env' then exports HAILSTORM_SPARK_MASTER, which "
                     "'hailstorm run' uses."),
        click.option("--spark-cores", type=click.IntRange(min=1), default=DEFAULT_SPARK_CORES,
                     show_default=True, metavar="N",
                     help="Task slots each Spark worker offers (a processor instance takes "
                     "one)."),
        click.option("--timeout", type=float, default=60.0, show_default=True,
                     help="Seconds each service may take to become ready."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _progress(message: str) -> None:
    console.print(f"[dim]·[/] {message}")


def _bring_up(state_dir: Path, zk_port: int, kafka_port: int, postgres_port: int,
              brokers: int, kafka_security: str, secure: bool, spark_workers: int,
              spark_cores: int, timeout: float) -> None:
    stack = DevStack(
        state_dir,
        zk_port=zk_port,
        kafka_port=kafka_port,
        postgres_port=postgres_port,
        kafka_brokers=brokers,
        kafka_security=kafka_security,
        secure=secure,
        spark_workers=spark_workers,
        spark_cores=spark_cores,
        startup_timeout=timeout,
        progress=_progress,
    )
    stack.up()
    console.print(f"[green]dev stack up[/] under {stack.state_dir}")
    console.print(f'  load its addresses with: eval "$(hailstorm dev env --state-dir {state_dir})"')


@dev.command("up")
@_up_options
@_handle_errors
def dev_up(
    state_dir: Path, zk_port: int, kafka_port: int, postgres_port: int, brokers: int,
    kafka_security: str, secure: bool, spark_workers: int, spark_cores: int, timeout: float
) -> None:
    """Start the stack (idempotent: running services are left alone; a stopped one starts
    again on its data, on the port it had when that is free). Nothing is deleted.

    The first run fetches Apache Kafka from Maven Central (cached in ~/.cache/hailstorm).
    """
    _bring_up(state_dir, zk_port, kafka_port, postgres_port, brokers, kafka_security, secure,
              spark_workers, spark_cores, timeout)


@dev.command("reset")
@_up_options
@_handle_errors
def dev_reset(
    state_dir: Path, zk_port: int, kafka_port: int, postgres_port: int, brokers: int,
    kafka_security: str, secure: bool, spark_workers: int, spark_cores: int, timeout: float
) -> None:
    """Stop the stack, DELETE its data (ZooKeeper, Kafka, PostgreSQL, snapshots) and start a
    new, empty one."""
    stopped = DevStack(state_dir, progress=_progress).down(wipe=True)
    console.print(f"[yellow]dev stack wiped[/] ({len(stopped)} service(s) were running)")
    _bring_up(state_dir, zk_port, kafka_port, postgres_port, brokers, kafka_security, secure,
              spark_workers, spark_cores, timeout)


@dev.command("down")
@state_dir_option
@click.option("--wipe", is_flag=True,
              help="Also DELETE the services' data, the snapshots and the state file.")
@_handle_errors
def dev_down(state_dir: Path, wipe: bool) -> None:
    """Stop exactly the processes 'dev up' started, by pid. Their data stays (the next 'dev
    up' starts them again on it) unless --wipe."""
    stack = DevStack(state_dir, progress=_progress)
    stopped = stack.down(wipe=wipe)
    console.print(("[green]dev stack down[/]" if stopped else "nothing was running")
                  + (" and its data deleted" if wipe else "; its data is kept"))


@dev.command("status")
@state_dir_option
@_handle_errors
def dev_status(state_dir: Path) -> None:
    """Show each service's port, pid and whether it runs (exit 1 if any is down)."""
    rows = DevStack(state_dir).status()
    table = Table("service", "port", "pid", "state", "log")
    for row in rows:
        table.add_row(
            row.name,
            str(row.port or "-"),
            str(row.pid or "-"),
            "[green]running[/]" if row.running else "[red]stopped[/]",
            row.log or "-",
        )
    out.print(table)
    if not all(row.running for row in rows):
        sys.exit(1)


@dev.command("env")
@state_dir_option
@_handle_errors
def dev_env(state_dir: Path) -> None:
    """Print 'export' lines for HAILSTORM_ZK, _KAFKA, _DATABASE_URL and _SNAPSHOTS (and
    _KAFKA_CONFIG for a sasl_ssl stack, _SPARK_MASTER for one with Spark workers; a --secure
    stack's _ZK_TLS, _ZK_AUTH, _SECRET_FILE and PGPASSFILE, its database URL without the
    password)."""
    for name, value in DevStack(state_dir).env().items():
        click.echo(f"export {name}={_shell_quote(value)}")


def _shell_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)
