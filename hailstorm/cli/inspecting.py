"""The ``hailstorm`` command line."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from hailstorm import config
from hailstorm.auth import SECRET_FILE_VAR
from hailstorm.devstack import DEFAULT_SPARK_CORES, SPARK_MASTER_VAR, DevStack, DevStackError
from hailstorm.halt import TopologyHalted
from hailstorm.kafka import KafkaAuthError, KafkaConfigError, KafkaUnreachable
from hailstorm.runtime.spark_stage import NotEnoughSlots, RestartsExhausted

console = Console(stderr=True, highlight=False)
out = Console(highlight=False, soft_wrap=True)


class CommandError(click.ClickException):
    """A command's expected failure: click prints one clear line (never wrapped), exit 1."""

    def show(self, file: Any = None) -> None:
        click.echo(click.style("error:", fg="red", bold=True) + f" {self.format_message()}",
                   err=True, file=file)


def fail(message: str) -> NoReturn:
    """Stop the command with :class:`CommandError`."""
    raise CommandError(message)


def _handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the project's expected errors into one-line messages instead of tracebacks."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (DevStackError, config.ConfigError, KafkaConfigError, KafkaAuthError,
                KafkaUnreachable, TopologyHalted, RestartsExhausted, NotEnoughSlots) as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail("interrupted")

    return wrapper


state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(config.DEFAULT_STATE_DIR),
    show_default=True,
    help="Directory holding the dev stack's data, logs and pids.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hailstorm")
def main() -> None:
    """Exactly-once stateful stream processing over Kafka, on Spark."""


# --------------------------------------------------------------------------- dev stack


@main.group()
def dev() -> None:
    """The embedded dev stack: ZooKeeper, Apache Kafka and PostgreSQL (and a Spark
    standalone cluster with --spark-workers) on 127.0.0.1."""


@dev.command("up")
@state_dir_option
@click.option("--zk-port", type=int, default=0, show_default=True, help="0 picks a free port.")
@click.option("--kafka-port", type=int, default=0, show_default=True, help="0 picks a free port.")
@click.option(
    "--postgres-port", type=int, default=0, show_default=True, help="0 picks a free port."
)
@click.option("--brokers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Kafka nodes (each a broker and a KRaft controller); 3 gives topics "
              "replication factor 3 and min.insync.replicas=2.")
@click.option("--kafka-security", type=click.Choice(["plaintext", "sasl_ssl"]),
              default="plaintext", show_default=True,
              help="sasl_ssl: clients connect with SCRAM-SHA-256 over TLS (a CA the stack "
              "makes); 'dev env' then exports HAILSTORM_KAFKA_CONFIG.")
@click.option("--spark-workers", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N",
              help="Also start a Spark standalone master and N workers (pyspark's own "
              "classes); 'dev env' then exports HAILSTORM_SPARK_MASTER, which 'hailstorm run' "
              "uses.")
@click.option("--spark-cores", type=click.IntRange(min=1), default=DEFAULT_SPARK_CORES,
              show_default=True, metavar="N",
              help="Task slots each Spark worker offers (a processor instance takes one).")
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds each service may take to become ready.",
)
@_handle_errors
def dev_up(
    state_dir: Path, zk_port: int, kafka_port: int, postgres_port: int, brokers: int,
    kafka_security: str, spark_workers: int, spark_cores: int, timeout: float
) -> None:
    """Start the stack (idempotent: running services are left alone).

    The first run fetches Apache Kafka from Maven Central (cached in ~/.cache/hailstorm).
    """
    stack = DevStack(
        state_dir,
        zk_port=zk_port,
        kafka_port=kafka_port,
        postgres_port=postgres_port,
        kafka_brokers=brokers,
        kafka_security=kafka_security,
        spark_workers=spark_workers,
        spark_cores=spark_cores,
        startup_timeout=timeout,
        progress=lambda message: console.print(f"[dim]·[/] {message}"),
    )
    state = stack.up()
    console.print(f"[green]dev stack up[/] under {stack.state_dir}")
    console.print(f'  load its addresses with: eval "$(hailstorm dev env --state-dir {state_dir})"')
    _ = state


@dev.command("down")
@state_dir_option
@_handle_errors
def dev_down(state_dir: Path) -> None:
    """Stop exactly the processes 'dev up' started, by pid, and remove their data."""
    stack = DevStack(state_dir, progress=lambda message: console.print(f"[dim]·[/] {message}"))
    stopped = stack.down()
    console.print("[green]dev stack down[/]" if stopped else "nothing was running")


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
    _KAFKA_CONFIG for a sasl_ssl stack, _SPARK_MASTER for one with Spark workers)."""
    for name, value in DevStack(state_dir).env().items():
        click.echo(f"export {name}={_shell_quote(value)}")


def _shell_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


# --------------------------------------------------------------------------- demo


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
    from hailstorm.demo import run_demo

    ok = run_demo(state_dir, lines=lines, keep_running=keep_running, console=out,
                  output=output)
    sys.exit(0 if ok else 1)


# --------------------------------------------------------------------------- topologies


@main.command()
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.option(
    "--dot", is_flag=True, help="Write Graphviz DOT instead of text (pipe to 'dot -Tpng')."
)
@_handle_errors
def show(topology_ref: str, dot: bool) -> None:
    """Print a topology's DAG: nodes, parallelism, inputs and monoids.

    TOPOLOGY is a module path (topologies/wordcount.py) or a dotted name (topologies.wordcount).
    """
    from hailstorm.topology import TopologyError, load_topology, render_dot, render_text

    try:
        topology = load_topology(topology_ref)
    except TopologyError as exc:
        fail(str(exc))
    click.echo(render_dot(topology) if dot else render_text(topology), nl=not dot)


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
              "'hailstorm status'); 'auto' serves on every interface, 'none' serves nothing. "
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
@_handle_errors
def run(topology_ref: str, master: str | None, zk: str | None, kafka: str | None,
        kafka_config: str | None, snapshot_dir: str | None, database: str | None,
        name: str | None, host: str, metrics_host: str, partition_check_interval: float,
        log_level: str, max_restarts: int, spark_conf: tuple[tuple[str, str], ...],
        slot_wait: float) -> None:
    """Run TOPOLOGY's processors as one Spark barrier stage (until Ctrl-C).

    Writes the expected processor ids to ZooKeeper first; run 'hailstorm negotiator
    TOPOLOGY' alongside to drive them.
    """
    import logging

    from hailstorm.runtime.driver import Driver, RunOptions
    from hailstorm.runtime.spark_stage import SparkOptions, install_signal_handlers
    from hailstorm.topology import TopologyError

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    settings = config.Settings.from_env(
        zk=zk, kafka=kafka, snapshots=snapshot_dir, database_url=database, kafka_config=kafka_config
    )
    options = RunOptions(
        topology_ref=topology_ref, zk=settings.require_zk(), kafka=settings.require_kafka(),
        kafka_config=settings.kafka_config,
        snapshots=settings.snapshot_location(), name=name, host=host,
        metrics_host=metrics_host, log_level=log_level,
        database_url=_absolute_sqlite(settings.database()),
        spark=SparkOptions(master=master, extra_conf=spark_conf,
                           max_attempts=max_restarts or None, slot_wait=slot_wait),
        partition_check_interval=partition_check_interval,
    )
    try:
        driver = Driver(options)
    except (TopologyError, ValueError) as exc:  # ValueError: a bad $HAILSTORM_SECRET_FILE
        fail(str(exc))
    try:
        driver.prepare()
    except LookupError as exc:  # a source topic that does not exist
        fail(str(exc))
    install_signal_handlers(driver)
    failures = driver.run()
    console.print(f"stopped ({failures} failed stage attempts)")


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


NEGOTIATOR_MODULE = "negotiator"
"""The daemon ``hailstorm negotiator`` runs, by module name: ``python -m negotiator``."""


@main.command("negotiator", add_help_option=False,
              context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def negotiator_command(args: tuple[str, ...]) -> None:
    """Run the negotiator daemon of a topology.

    The same command as `python -m negotiator`; `hailstorm negotiator --help` lists its
    options."""
    # The negotiator package depends on hailstorm (its protocol), never the reverse: the
    # daemon is run by module name in this process, as `python -m negotiator` runs it.
    import runpy

    sys.argv = [NEGOTIATOR_MODULE, *args]
    runpy.run_module(NEGOTIATOR_MODULE, run_name="__main__", alter_sys=True)


@main.command("status")
@click.argument("topology_ref", metavar="TOPOLOGY", required=False)
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@config.zk_option()
@config.kafka_option()
@config.kafka_config_option()
@config.snapshots_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--watch", type=click.FloatRange(min=0.2), is_flag=False, flag_value=2.0,
              default=None, metavar="[SECONDS]", help="Refresh live every SECONDS (2).")
@click.option("--sample", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Seconds between the two metric scrapes the rates come from.")
@_handle_errors
def status_command(topology_ref: str | None, name: str | None, zk: str | None,
                   kafka: str | None, kafka_config: str | None, snapshot_dir: str | None,
                   as_json: bool,
                   watch: float | None, sample: float) -> None:
    """Master state, committed round, lag, processors and snapshots of a running TOPOLOGY
    (a module path, dotted name or bare topology name)."""
    from hailstorm.status import run_status

    settings = config.Settings.from_env(zk=zk, kafka=kafka, snapshots=snapshot_dir,
                                        kafka_config=kafka_config)
    if settings.kafka:
        settings.require_kafka()  # checks and exports the client properties file
    try:
        run_status(settings.require_zk(), settings.kafka, settings.snapshots, topology_ref,
                   name, as_json=as_json, watch=watch, sample=sample, out=out)
    except ValueError as exc:
        fail(str(exc))


@main.command("ui")
@click.argument("topology_ref", metavar="TOPOLOGY", required=False)
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on. Anything but loopback shows the topology to whoever "
                   "reaches it (the console only reads, but it shows names, addresses and "
                   "dead-letter errors).")
@click.option("--port", type=click.IntRange(0, 65535), default=8642, show_default=True,
              help="Port to serve on (0: a free one; the URL is printed).")
@click.option("--interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True,
              help="Seconds between two samples of the topology.")
@config.zk_option()
@config.kafka_option()
@config.kafka_config_option()
@config.snapshots_option()
@_handle_errors
def ui_command(topology_ref: str | None, name: str | None, host: str, port: int,
               interval: float, zk: str | None, kafka: str | None, kafka_config: str | None,
               snapshot_dir: str | None) -> None:
    """A web console for a running TOPOLOGY (a module path, dotted name or bare topology
    name): the graph with live rates and instance phases, lag, snapshot rounds,
    recoveries and dead letters. Read-only; serves until Ctrl-C."""
    from hailstorm.console.server import run_console

    settings = config.Settings.from_env(zk=zk, kafka=kafka, snapshots=snapshot_dir,
                                        kafka_config=kafka_config)
    if settings.kafka:
        settings.require_kafka()
    try:
        run_console(settings.require_zk(), settings.kafka, settings.snapshots, topology_ref,
                    name, host=host, port=port, interval=interval,
                    announce=lambda line: click.echo(line, err=True))
    except ValueError as exc:
        fail(str(exc))


# --------------------------------------------------------------------------- snapshots, export


def _topology_arg(ref: str, store: Any) -> tuple[str, Any]:
    """TOPOLOGY as ``(name, loaded topology or None)``: a bare name that has snapshots in the
    store is used as is (no import); anything else is loaded as a module."""
    from hailstorm.topology import NAME_PATTERN, TopologyError, load_topology

    bare = bool(NAME_PATTERN.match(ref))
    if bare and store.has_topology(ref):
        return ref, None
    try:
        topology = load_topology(ref)
    except TopologyError as exc:
        if bare:
            fail(f"no snapshots of topology {ref!r} under {store.location}, and {ref!r} is not "
                 "an importable topology module either")
        fail(str(exc))
    return topology.name, topology


def _committed_or_none(zk: str | None, name: str) -> Any:
    """The committed record from ZooKeeper when configured and reachable, else None."""
    if not zk:
        return None
    from hailstorm.export import ExportError, read_committed

    try:
        return read_committed(zk, name)
    except ExportError as exc:
        console.print(f"[yellow]warning:[/] {exc}; ignoring ZooKeeper")
        return None


@main.command("snapshots")
@click.argument("topology_ref", metavar="TOPOLOGY")
@config.snapshots_option()
@config.zk_option()
@click.option("--show", "show_bolt", metavar="BOLT", help="Print BOLT's snapshot as JSON lines.")
@click.option(
    "--epoch", type=int, help="With --show: this round (default: committed, else latest)."
)
@click.option("--instance", type=int, help="With --show: only this instance's file.")
@_handle_errors
def snapshots_command(topology_ref: str, snapshot_dir: str | None, zk: str | None,
                      show_bolt: str | None, epoch: int | None, instance: int | None) -> None:
    """List TOPOLOGY's snapshots, or print one bolt's snapshot (--show BOLT) as JSON lines.

    TOPOLOGY is a module (decoded values) or just the topology's name (raw Avro records).
    """
    import json

    from hailstorm.protocol.clock import clock_to_json
    from hailstorm.snapshots import SnapshotError, open_store
    from hailstorm.topology import BoltSpec

    settings = config.Settings.from_env(zk=zk, snapshots=snapshot_dir)
    store = open_store(settings.snapshot_location())
    name, topology = _topology_arg(topology_ref, store)
    committed = _committed_or_none(settings.zk, name)
    try:
        refs = store.list(name)
    except (OSError, ValueError, SnapshotError) as exc:
        fail(f"cannot list the snapshots of {name} under {store.location}: {exc}")
    if show_bolt is None:
        if not refs:
            fail(f"no snapshots of topology {name!r} under {store.location}")
        live = committed.live_refs() if committed is not None else frozenset()
        table = Table(title=f"snapshots of {name} in {store.location}")
        for column in ("bolt", "inst", "epoch", "records", "bytes", "created (UTC)", "live"):
            table.add_column(column, no_wrap=True)
        table.add_column("clock", overflow="fold")
        for ref in refs:
            mark = "yes" if ref.uri in live or ref.key in live else ""
            clock = " ".join(f"{p}={o}" for p, o in clock_to_json(ref.clock).items()) or "{}"
            table.add_row(ref.bolt, str(ref.instance), str(ref.epoch), str(ref.records),
                          str(ref.size_bytes), ref.created[:16].replace("T", " "), mark, clock)
        out.print(table)
        return
    chosen = [r for r in refs if r.bolt == show_bolt]
    if not chosen:
        fail(f"no snapshots of bolt {show_bolt!r} of {name} under {store.location}")
    if epoch is None and committed is not None and any(
        p.startswith(f"bolt:{show_bolt}:") for p in committed.snapshots
    ):
        epoch = committed.epoch
    if epoch is None:
        epoch = max(r.epoch for r in chosen)
    chosen = [r for r in chosen if r.epoch == epoch
              and (instance is None or r.instance == instance)]
    if not chosen:
        fail(f"no snapshot of {name}/{show_bolt} round {epoch}"
             + ("" if instance is None else f" instance {instance}"))
    monoid = None
    if topology is not None:
        spec = topology.node(show_bolt) if show_bolt in {n.name for n in topology.nodes} else None
        monoid = spec.state if isinstance(spec, BoltSpec) else None
    try:
        for ref in chosen:
            for row in store.to_json_rows(ref, monoid):
                click.echo(json.dumps(row, separators=(",", ":")))
    except SnapshotError as exc:
        fail(str(exc))


@main.command("query")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.argument("bolt")
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@click.option("--epoch", type=int, help="Round to read (default: committed, else latest).")
@click.option("--live/--committed", default=False, show_default=True,
              help="Ask the running instances (needs the run's "
                   f"${SECRET_FILE_VAR} and ZooKeeper), or read the committed round.")
@config.snapshots_option()
@config.zk_option()
@_handle_errors
def query_command(topology_ref: str, bolt: str, keys: tuple[str, ...], name: str | None,
                  epoch: int | None, live: bool, snapshot_dir: str | None,
                  zk: str | None) -> None:
    """Print BOLT's value of each KEY (all keys without any) in the committed round.

    One JSON object per line: key, value (null when the round has no such key), found,
    and the round's epoch and clock, which the values are exactly at. The committed round
    comes from ZooKeeper when one is given (--zk, $HAILSTORM_ZK), else the latest complete
    round of the snapshot store is read; the topology may be running, stopped or gone, and
    Spark is not needed. A KEY is JSON when it parses to a key the state can hold ('42',
    '["fr", 3]'), else text. Exits 1 when a KEY is not in the round.

    With --live each KEY is asked of the running instance that owns it (authenticated with
    the run's secret file, so the run must have been started with one). Each line then also
    names the processor, and clock is its low water mark (every record up to it is in the
    value), absorbed the highest offsets that may be in it, and exact whether the value is
    exactly the state at clock.
    """
    from hailstorm.export import ExportError
    from hailstorm.query import parse_key, query_committed
    from hailstorm.snapshots import SnapshotError, open_store
    from hailstorm.topology import BoltSpec, TopologyError, load_topology

    settings = config.Settings.from_env(zk=zk, snapshots=snapshot_dir)
    try:
        topology = load_topology(topology_ref)
        spec = topology.node(bolt)
    except (TopologyError, KeyError) as exc:
        fail(str(exc))
    if not isinstance(spec, BoltSpec):
        fail(f"{bolt!r} is a {spec.kind} of {topology.name}, not a bolt")
    wanted = [parse_key(k, spec) for k in keys] if keys else None
    if live:
        _query_live(settings, name or topology.name, spec, wanted, epoch)
        return
    store = open_store(settings.snapshot_location())
    try:
        result = query_committed(store, name or topology.name, spec, wanted, zk=settings.zk,
                                 epoch=epoch)
    except (ExportError, SnapshotError, OSError) as exc:
        fail(str(exc))
    for line in result.to_json_lines():
        click.echo(line)
    if result.missing:
        sys.exit(1)


def _query_live(settings: config.Settings, topology: str, spec: Any, keys: list[Any] | None,
                epoch: int | None) -> None:
    from hailstorm.auth import RunSecret
    from hailstorm.query import QueryError, query_live

    if epoch is not None:
        fail("--live reads the running round: it takes no --epoch")
    if not settings.zk:
        fail(f"--live finds the instances through ZooKeeper: give --zk or ${config.ZK_VAR}")
    try:
        secret = RunSecret.from_env()
    except ValueError as exc:
        fail(str(exc))
    if secret is None:
        fail(f"--live authenticates with the run's secret: start the run with "
             f"${SECRET_FILE_VAR} set and give the query the same file")
    try:
        result = query_live(settings.zk, topology, spec, keys, secret)
    except QueryError as exc:
        fail(str(exc))
    for line in result.to_json_lines():
        click.echo(line)
    if result.missing:
        sys.exit(1)


@main.command("export")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.argument("bolt")
@click.option(
    "--to", "url", metavar="URL",
    help=f"Database (default: ${config.DATABASE_VAR}, else {config.DEFAULT_DATABASE_URL}).",
)
@click.option("--table", "table_name", metavar="NAME", help="Table to fill (default: BOLT).")
@click.option("--epoch", type=int, help="Round to export (default: committed, else latest).")
@config.snapshots_option()
@config.zk_option()
@click.option("--master", metavar="URL", help="Spark master (default: local[2]).")
@click.option("--force", is_flag=True,
              help="Replace a table holding a newer round or another bolt's export.")
@_handle_errors
def export_command(topology_ref: str, bolt: str, url: str | None, table_name: str | None,
                   epoch: int | None, snapshot_dir: str | None, zk: str | None,
                   master: str | None, force: bool) -> None:
    """Write BOLT's snapshot (one row per key) into a table, in one transaction.

    Reads round --epoch, else the committed round (ZooKeeper), else the latest complete
    round; one Spark task per instance file. Running it again for the same round changes
    nothing; a newer round replaces the table's content atomically.
    """
    from hailstorm.export import RichExportListener, export_bolt
    from hailstorm.runtime.spark_stage import SparkOptions, build_session
    from hailstorm.sinks import SinkError, scrub
    from hailstorm.snapshots import SnapshotError, open_store
    from hailstorm.topology import TopologyError, load_topology

    settings = config.Settings.from_env(zk=zk, snapshots=snapshot_dir, database_url=url)
    target = settings.database()
    try:
        topology = load_topology(topology_ref)
    except TopologyError as exc:
        fail(str(exc))
    store = open_store(settings.snapshot_location())
    sessions: list[Any] = []

    def session() -> Any:
        """Spark starts only when rows must be read; stopped after unless pre-existing."""
        from pyspark.sql import SparkSession

        owned = SparkSession.getActiveSession() is None
        options = SparkOptions(
            master=master, app_name="hailstorm-export",
            extra_conf=(("spark.ui.showConsoleProgress", "false"),),
        )
        spark = build_session(options, 2)
        if owned:
            sessions.append(spark)
        return spark

    try:
        with RichExportListener(console) as listener:
            result = export_bolt(
                topology=topology, bolt=bolt, url=target, table=table_name or bolt,
                store=store, session=session, epoch=epoch, zk=settings.zk, force=force,
                listener=listener,
            )
        for spark in sessions:
            spark.stop()
    except (SinkError, SnapshotError, TopologyError) as exc:
        fail(str(exc))
    except Exception as exc:  # Spark and driver errors: one line, never the password
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        fail(f"export failed: {scrub(first, target)}")
    out.print(result.describe(target))



# --------------------------------------------------------------------------- chaos


def _interrupted(_signum: int, _frame: object) -> NoReturn:
    raise KeyboardInterrupt


def _listed(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    """The comma-separated names of ``text``, each one of ``known`` (else a clear error)."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        fail(f"unknown {what}(s) {', '.join(unknown) or '(none)'}; known: {', '.join(known)}")
    return names


@main.command("chaos")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.option("--messages", type=click.IntRange(min=1), default=200000, show_default=True,
              help="Messages to produce (the topology's workload generator).")
@click.option("--kills", type=click.IntRange(min=0), default=5, show_default=True,
              help="Faults to inject, one after another, each after the last recovery.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seeds the workload, the fault plan and the victims.")
@click.option("--workload",
              help="The topology's workload generator (default: its first; wordcount and "
                   "wordstream: zipf for realistic text over 50,000 words, uniform for 80 "
                   "equally likely words; user_totals: zipf for JSON events of 2,000,000 "
                   "users).")
@click.option("--kinds",
              help="Fault kinds to draw from, of processor, negotiator, zk-session, zombie "
                   "(a sink stopped until its replacement committed, then resumed), stall (a "
                   "bolt stopped for a few seconds, no restart) and broker (default: every "
                   "kind but broker; every kind is used once when --kills allows).")
@click.option("--phases", default="Flowing,SpoutsPaused,Initialize,SpoutsRewind",
              show_default=True,
              help="Master states to time faults for (each used once when --kills allows; "
                   "Initialize and SpoutsRewind first kill a processor to start a recovery "
                   "to hit: two faults at once). Broker faults always hit a flowing topology.")
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1),
              help="Messages per second the background producer writes (default: spread "
                   "over about 10 s per fault, 20 s with broker faults, 1000..20000/s, so "
                   "faults hit flowing data).")
@click.option("--spacing", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Mean seconds between a recovery and the next fault.")
@click.option("--brokers", type=click.IntRange(min=1),
              help="Kafka nodes of the embedded stack (default: 3 when --kinds has broker, "
                   "else 1); broker faults need at least 3.")
@click.option("--database", type=click.Choice(["postgresql", "sqlite"]), default="postgresql",
              show_default=True,
              help="Where the sinks write: a new database on the stack's PostgreSQL (with "
                   "--use-env, the server of $HAILSTORM_DATABASE_URL), or a SQLite file "
                   "beside the logs.")
@click.option("--use-env", is_flag=True,
              help="Use the HAILSTORM_* stack instead of an embedded one of its own (broker "
                   "faults: a 'hailstorm dev up --brokers 3' stack, named by --state-dir).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory of the embedded stack (default: a temporary one); with "
                   f"--use-env, of the dev stack whose Kafka nodes broker faults kill "
                   f"(default: {config.DEFAULT_STATE_DIR}).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON to this file.")
@_handle_errors
def chaos(topology_ref: str, messages: int, kills: int, seed: int, workload: str | None,
          kinds: str | None, phases: str, partitions: int, rate: float | None, spacing: float,
          brokers: int | None, database: str, use_env: bool, state_dir: Path | None,
          json_path: Path | None) -> None:
    """Run TOPOLOGY under injected faults and check it against the reference model.

    Produces a known workload, SIGKILLs processors and the negotiator leader, expires
    ZooKeeper sessions, makes zombies of sinks (stopped until their replacement committed,
    then resumed), stalls bolts and, with the broker kind, SIGKILLs the Kafka node leading the most
    source partitions and starts it again a few seconds later (--kills of them, at random
    with --seed), each timed for a master state (--phases), waits until everything is
    committed, compares every bolt's committed state, every sink table (by default in a
    new PostgreSQL database) and every topic sink's output (as a read_committed consumer
    sees it) with run_model and prints the report. Exits 1 when anything was lost,
    duplicated or wrong, a fault never recovered, or the topology restarted without a
    fault to explain it.

    Broker faults need a Kafka cluster of at least 3 nodes: the embedded stack then starts
    3 (--brokers), and --use-env refuses a smaller cluster.
    """
    import os
    import shutil
    import tempfile

    from confluent_kafka import KafkaException

    from hailstorm.harness import (
        DEFAULT_FAULT_KINDS,
        FAULT_KINDS,
        MASTER_PHASES,
        MIN_KAFKA_NODES,
        SQLITE,
        WORKLOADS,
        BrokerControl,
        ChaosSchedule,
        HarnessError,
        StackAddresses,
        broker_fault_problem,
        kafka_nodes,
        run_chaos,
    )
    from hailstorm.sinks.urls import is_postgres_url
    from hailstorm.topology import load_topology

    chosen = _listed(kinds or ",".join(DEFAULT_FAULT_KINDS), FAULT_KINDS, "fault kind")
    timed = _listed(phases, MASTER_PHASES, "master state")
    topology = load_topology(topology_ref)
    generators = WORKLOADS.get(topology.name)
    if generators is None:
        fail(f"no workload generator for topology {topology.name!r}; "
             f"known: {', '.join(sorted(WORKLOADS))}")
    workload = workload or next(iter(generators))
    if workload not in generators:
        fail(f"no workload {workload!r} for topology {topology.name!r}; "
             f"known: {', '.join(generators)}")
    generate = generators[workload]
    schedule = ChaosSchedule(kinds=chosen, count=kills, spacing=spacing,  # type: ignore[arg-type]
                             seed=seed, phases=timed)  # type: ignore[arg-type]
    broker_faults = "broker" in chosen
    if rate is None:
        # A broker fault lasts until the node is back (restarting a JVM): allow for longer.
        per_fault = 20.0 if broker_faults else 10.0
        rate = min(20000.0, max(1000.0, messages / (per_fault * kills + 10.0)))
    if use_env and brokers is not None:
        fail("--brokers sizes the embedded stack; with --use-env the cluster is the one "
             "$HAILSTORM_KAFKA names")
    nodes = brokers if brokers is not None else (MIN_KAFKA_NODES if broker_faults else 1)
    if broker_faults and not use_env:
        problem = broker_fault_problem(nodes)
        if problem:
            fail(problem)
    logs = Path(tempfile.mkdtemp(prefix="hailstorm-chaos-logs-"))
    signal.signal(signal.SIGTERM, _interrupted)  # a plain kill stops what it started too
    stack: DevStack | None = None
    temporary: Path | None = None
    with console.status("preparing") as status:
        def progress(message: str) -> None:
            console.log(message)
            status.update(message)

        try:
            control: BrokerControl | None = None
            if use_env:
                settings = config.Settings.from_env()
                addresses = StackAddresses(settings.require_zk(), settings.require_kafka(),
                                           settings.snapshot_location(), settings.database_url)
                if database == "postgresql" and not is_postgres_url(settings.database_url):
                    fail("--database postgresql with --use-env needs $HAILSTORM_DATABASE_URL "
                         "to name a PostgreSQL server (or pass --database sqlite)")
                if broker_faults:
                    try:
                        problem = broker_fault_problem(kafka_nodes(addresses.kafka))
                    except KafkaException as exc:
                        fail(f"Kafka at {addresses.kafka} did not answer: {exc}")
                    if problem:
                        fail(problem)
                    dev_stack = DevStack(state_dir or Path(config.DEFAULT_STATE_DIR))
                    running = dev_stack.load()
                    if running is None or running.kafka is None \
                            or running.kafka_bootstrap != addresses.kafka:
                        fail(f"broker faults kill nodes of the dev stack that runs "
                             f"$HAILSTORM_KAFKA ({addresses.kafka}), and there is none under "
                             f"{dev_stack.state_dir}: pass its --state-dir")
                    control = dev_stack
            else:
                if state_dir is None:
                    temporary = Path(tempfile.mkdtemp(prefix="hailstorm-chaos-"))
                    os.chmod(temporary, 0o755)  # the 'postgres' user must reach its data dir
                root = state_dir or temporary
                assert root is not None
                stack = DevStack(root, startup_timeout=90, progress=progress,
                                 kafka_brokers=nodes)
                addresses = StackAddresses.from_env(stack.up().env())
                control = stack
            progress(f"generating {messages} messages ({workload} workload)")
            values = generate(messages, seed)
            report = run_chaos(addresses, topology_ref, values, schedule, log_dir=logs,
                               partitions=partitions, rate=rate, progress=progress,
                               brokers=control,
                               database=SQLITE if database == "sqlite" else None)
        except HarnessError as exc:
            fail(f"{exc} (logs in {logs})")
        finally:
            if stack is not None:
                stack.down()
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
    out.print(report.to_text(), markup=False)
    out.print(f"logs: {logs}", markup=False)
    if json_path is not None:
        json_path.write_text(report.to_json() + "\n")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
