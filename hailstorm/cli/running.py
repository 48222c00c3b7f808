"""Running a topology: ``hailstorm run`` (its processors as one Spark barrier stage),
``hailstorm stop`` (drains it to the ``Stopped`` state), ``hailstorm negotiator`` (the
daemon, run by module name), ``hailstorm demo`` (word count end to end on a stack of its
own) and ``hailstorm secret`` (a run CA for ``$HAILSTORM_SECRET_FILE``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from hailstorm import config
from hailstorm.cli.group import _handle_errors, console, fail, main, out
from hailstorm.config import allow_open_zookeeper_option
from hailstorm.dev.services import SPARK_MASTER_VAR


@main.command()
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(config.DEFAULT_STATE_DIR) / "demo",
    show_default=True,
    help="Where the demo's own stack keeps its data (it is brought down afterwards).",
)
@click.option(
    "--lines", type=click.IntRange(min=2), default=200000, show_default=True,
    help="Lines of text to produce.",
)
@click.option("--keep-running", is_flag=True, help="Leave the stack up afterwards.")
@click.option("--to", "output", type=click.Choice(["postgresql", "kafka"]),
              default="postgresql", show_default=True,
              help="Where the word counts go: the word_counts table (topologies/wordcount.py), "
                   "or the word-totals topic in Kafka transactions (topologies/wordstream.py).")
@_handle_errors
def demo(state_dir: Path, lines: int, keep_running: bool, output: str) -> None:
    """Word count end to end on an embedded stack of its own, with a crash in the middle.

    Starts ZooKeeper, Apache Kafka and PostgreSQL, runs topologies/wordcount.py on Spark
    with two negotiators, kills a bolt half-way, and checks the word_counts table in
    PostgreSQL against the reference model (--to kafka: topologies/wordstream.py, and the
    newest record per word on the word-totals topic, read as a read_committed consumer).
    Exits 1 if they differ.
    """
    from hailstorm.dev.demo import run_demo

    ok = run_demo(state_dir, lines=lines, keep_running=keep_running, console=out,
                  output=output)
    sys.exit(0 if ok else 1)


@main.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@_handle_errors
def init_command(directory: Path) -> None:
    """Make a project of your own in DIRECTORY: a topology module, its test with run_model,
    a producer of sample data and a README with the commands (writes only new files)."""
    from hailstorm.project import write_project

    try:
        written = write_project(directory)
    except FileExistsError as exc:
        fail(str(exc))
    for path in written:
        out.print(f"wrote {path}")
    out.print(f"next: cd {directory} && pip install pytest && pytest (see README.md)")


@main.command()
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.option("--master", metavar="URL", envvar=SPARK_MASTER_VAR,
              help=f"Spark master (default: ${SPARK_MASTER_VAR}, which 'hailstorm dev up "
              "--spark-workers N' exports, else local[N], N = processors).")
@config.zk_option()
@config.kafka_option()
@config.kafka_config_option()
@config.snapshots_option()
@click.option(
    "--database", metavar="URL",
    help=f"Sink database (default: ${config.DATABASE_VAR}, else {config.DEFAULT_DATABASE_URL}).",
)
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address processors listen on for each other's data; 'auto': the address "
              "each executor's host reaches ZooKeeper from (clusters).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="Address processors serve /metrics on (a free port each, shown by "
              "'hailstorm status'); 'auto' serves on the address each executor's host "
              "reaches ZooKeeper from (as --host auto does), 'none' serves nothing. "
              "The endpoints are not authenticated.")
@click.option("--partition-check-interval", type=click.FloatRange(min=0), default=10.0,
              show_default=True, metavar="SECONDS",
              help="How often to look for partitions added to a source topic; new ones are "
              "picked up by restarting the stage with a spout more (0: never look).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--max-restarts", type=click.IntRange(min=0), default=10, show_default=True,
              metavar="N",
              help="Stop with the reason after N consecutive failed stage attempts without a "
              "committed round in between (a poison record, a broken deployment); 0: never "
              "give up.")
@click.option("--conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              callback=lambda _ctx, _param, items: _spark_conf(items),
              help="A Spark setting, as for spark-submit (repeatable).")
@click.option("--slot-wait", type=click.FloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS",
              help="On a cluster, how long to wait for a task slot per processor instance "
              "(executors registering, a lost worker coming back) before stopping with the "
              "numbers.")
@click.option("--class-archive/--no-class-archive", default=True, show_default=True,
              help="Map the Spark driver JVM's classes from an archive in the cache directory "
              "($HAILSTORM_CACHE, else ~/.cache/hailstorm): starts take seconds less. The "
              "first run of a JDK and Spark install writes it when it stops.")
@click.option("--allow-drop", multiple=True, metavar="NODE",
              help="Let this run drop NODE, a node of the deployed topology the new one "
              "lacks, and delete its state (repeatable; see 'hailstorm plan').")
@allow_open_zookeeper_option()
@click.option("--rebuild", multiple=True, metavar="SINK",
              help="Let this run rebuild SINK's table from the committed state, replacing "
              "it (a changed table definition; repeatable; see 'hailstorm plan').")
@click.option("--local-recovery/--no-local-recovery", default=False, show_default=True,
              envvar="HAILSTORM_LOCAL_RECOVERY",
              help="Restart a failed instance alone where it can (a bolt fed by spouts and "
              "feeding sinks): the others keep running and their state; the spouts replay "
              "to it. Other failures restart every processor (docs/deployment.md). "
              "$HAILSTORM_LOCAL_RECOVERY=1 turns it on too.")
@click.option("--standby/--no-standby", default=False, show_default=True,
              envvar="HAILSTORM_STANDBY",
              help="With --local-recovery: keep a warm standby beside each bolt instance that "
              "restarts alone, holding its committed state (as much memory again, and each "
              "round's delta read once more), so that its next incarnation starts without "
              "reading its state. $HAILSTORM_STANDBY=1 turns it on too.")
@_handle_errors
def run(topology_ref: str, master: str | None, zk: str | None, kafka: str | None,
        kafka_config: str | None, snapshot_dir: str | None, database: str | None,
        name: str | None, host: str, metrics_host: str, partition_check_interval: float,
        log_level: str, max_restarts: int, spark_conf: tuple[tuple[str, str], ...],
        slot_wait: float, class_archive: bool, allow_drop: tuple[str, ...],
        allow_open_zookeeper: bool, rebuild: tuple[str, ...], local_recovery: bool,
        standby: bool) -> None:
    """Run TOPOLOGY's processors as one Spark barrier stage (until stopped).

    'hailstorm stop TOPOLOGY', Ctrl-C or SIGTERM drain it: a last round commits what was
    read and the master records Stopped; a second Ctrl-C exits at once.

    Off loopback (ZooKeeper, --host or the Spark master), refuses to start unless
    $HAILSTORM_ZK_AUTH is set or --allow-open-zookeeper is passed.

    Plans the upgrade from what is deployed under the name first (as 'hailstorm plan'
    prints it) and stops at once if the plan refuses a node; then writes the expected
    processor ids to ZooKeeper. Run 'hailstorm negotiator TOPOLOGY' alongside to drive them.
    """
    import logging

    from hailstorm.export import ExportError
    from hailstorm.runtime.driver import Driver, RunOptions
    from hailstorm.runtime.spark_stage import SparkOptions, install_signal_handlers
    from hailstorm.sinks import SinkError
    from hailstorm.snapshots import SnapshotError
    from hailstorm.topology import TopologyError
    from hailstorm.upgrade.plan import UpgradeRefused
    from hailstorm.zookeeper import refuse_open_zookeeper

    if standby and not local_recovery:
        raise click.UsageError("--standby serves --local-recovery: a standby takes over only "
                               "from an instance that restarts alone")
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("kazoo", "py4j"):  # third parties: their warnings only
        logging.getLogger(chatty).setLevel(logging.WARNING)
    settings = config.Settings.from_env(
        zk=zk, kafka=kafka, snapshots=snapshot_dir, database_url=database, kafka_config=kafka_config
    )
    refuse_open_zookeeper(settings.require_zk(), allow_open=allow_open_zookeeper,
                          processor_host=host, master=master)
    options = RunOptions(
        topology_ref=topology_ref, zk=settings.require_zk(), kafka=settings.require_kafka(),
        kafka_config=settings.kafka_config,
        snapshots=settings.snapshot_location(), name=name, host=host,
        metrics_host=metrics_host, log_level=log_level,
        database_url=_absolute_sqlite(settings.database()),
        spark=SparkOptions(master=master, extra_conf=spark_conf,
                           max_attempts=max_restarts or None, slot_wait=slot_wait),
        partition_check_interval=partition_check_interval, class_archive=class_archive,
        allow_drop=allow_drop, rebuild=rebuild, local_recovery=local_recovery,
        standby=standby,
    )
    try:
        driver = Driver(options)
    except (TopologyError, ValueError) as exc:  # ValueError: a bad $HAILSTORM_SECRET_FILE
        fail(str(exc))
    try:
        try:
            driver.prepare()
        except (LookupError, UpgradeRefused, SinkError, ExportError, SnapshotError) as exc:
            fail(str(exc))  # a missing topic; a refused upgrade; a table it cannot rebuild
        install_signal_handlers(driver)
        failures = driver.run()
    finally:
        driver.finish()
    console.print(f"stopped ({failures} failed stage attempts)")


@main.command("stop")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@config.zk_option()
@click.option("--timeout", type=click.FloatRange(min=0), default=120.0, show_default=True,
              metavar="SECONDS", help="How long to wait for the topology to stop.")
@_handle_errors
def stop_command(topology_ref: str, name: str | None, zk: str | None, timeout: float) -> None:
    """Stop TOPOLOGY cleanly: a last round commits what was read, its processors leave and
    the master records Stopped (the next 'hailstorm run' starts from there)."""
    import getpass
    import socket
    import time

    from hailstorm.protocol.layout import Stopped, StopRequest
    from hailstorm.protocol.records import TopologyRecords
    from hailstorm.protocol.states import label
    from hailstorm.status.collect import resolve_name
    from hailstorm.topology import TopologyError
    from hailstorm.zookeeper import zk_client

    settings = config.Settings.from_env(zk=zk)
    client = zk_client(settings.require_zk())
    client.start(timeout=20)
    try:
        records_of = lambda n: TopologyRecords(client, n)  # noqa: E731
        try:
            topology = resolve_name(topology_ref, name,
                                    lambda n: records_of(n).master() is not None)
        except TopologyError as exc:
            fail(str(exc))
        records = records_of(topology)
        if records.master() is None:
            fail(f"{topology}: no master record in ZooKeeper: never run (nothing to stop)")
        by = f"hailstorm stop ({getpass.getuser()}@{socket.gethostname()})"
        records.request_stop(StopRequest(by, time.time()))
        console.print(f"{topology}: stop requested; waiting for the last round")
        deadline = time.monotonic() + timeout
        while True:
            master = records.master()
            if master is not None and isinstance(master.state, Stopped):
                out.print(f"{topology}: {label(master.state)} (epoch {master.state.epoch}, "
                          f"by {master.state.by})")
                return
            if time.monotonic() >= deadline:
                now = "no master" if master is None else label(master.state)
                fail(f"{topology}: not stopped after {timeout:.0f}s (master: {now}); is a "
                     f"negotiator running? The request stands until the next 'hailstorm run'")
            time.sleep(0.2)
    finally:
        client.stop()
        client.close()


def _spark_conf(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``("spark.a=1", ...)`` -> ``(("spark.a", "1"), ...)``."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--conf")
        pairs.append((key.strip(), value))
    return tuple(pairs)


def _absolute_sqlite(url: str) -> str:
    """SQLite paths made absolute: Spark executors do not share the driver's directory."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url[len(prefix):].startswith("/"):
        return prefix + str(Path(url[len(prefix):]).resolve())
    return url


NEGOTIATOR_MODULE = "hailstorm.negotiator"
"""The daemon ``hailstorm negotiator`` runs, by module name: ``python -m hailstorm.negotiator``."""


@main.command("negotiator", add_help_option=False,
              context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def negotiator_command(args: tuple[str, ...]) -> None:
    """Run the negotiator daemon of a topology.

    The same command as `python -m hailstorm.negotiator`; `hailstorm negotiator --help` lists its
    options."""
    # The negotiator package depends on hailstorm (its protocol), never the reverse: the
    # daemon is run by module name in this process, as `python -m hailstorm.negotiator` runs it.
    import runpy

    # argv[0] names the command in its usage line (the daemon's usage_name); kept as set.
    sys.argv = ["hailstorm negotiator", *args]
    runpy.run_module(NEGOTIATOR_MODULE, run_name="__main__", alter_sys=False)


@main.command("secret")
@click.argument("path", type=click.Path(dir_okay=False))
@_handle_errors
def secret_command(path: str) -> None:
    """Write a new run CA (certificate and key, PEM) to PATH, mode 0600, for
    $HAILSTORM_SECRET_FILE: every processor and live query of a run started with it mints its
    TLS certificate from it. An existing file is never overwritten."""
    from hailstorm.auth import write_secret_file

    try:
        write_secret_file(path)
    except OSError as exc:
        fail(f"cannot write the secret file {path}: {exc.strerror}")
    click.echo(f"wrote a new run CA to {path} (mode 0600)")
