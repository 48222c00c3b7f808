"""Looking at a topology: ``hailstorm show`` (its DAG), ``status`` and ``ui`` (a running
one), ``snapshots``, ``query`` (committed or live values) and ``export`` (a committed round
into a table)."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.table import Table

from hailstorm import config
from hailstorm.auth import SECRET_FILE_VAR
from hailstorm.cli.group import _handle_errors, console, fail, main, out


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

    TOPOLOGY is a module (decoded values; keys a bolt routing late data dropped are left
    out) or just the topology's name (raw Avro records).
    """
    import functools
    import json

    from hailstorm.lateness import forget_dropped
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
    forget = None
    if topology is not None:
        spec = topology.node(show_bolt) if show_bolt in {n.name for n in topology.nodes} else None
        if isinstance(spec, BoltSpec):
            monoid = spec.state
            if spec.drops_keys and spec.window is not None:
                forget = functools.partial(forget_dropped, spec.window)
    try:
        for ref in chosen:
            for row in store.to_json_rows(ref, monoid, forget):
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
    from hailstorm.runtime.spark_stage import SparkOptions, build_context
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
    contexts: list[Any] = []

    def context() -> Any:
        """Spark starts only when rows must be read; stopped after unless pre-existing."""
        from pyspark import SparkContext

        owned = getattr(SparkContext, "_active_spark_context", None) is None
        options = SparkOptions(master=master, app_name="hailstorm-export", jvm_options="",
                               executor_heartbeats=False)
        spark = build_context(options, 2)
        if owned:
            contexts.append(spark)
        return spark

    try:
        with RichExportListener(console) as listener:
            result = export_bolt(
                topology=topology, bolt=bolt, url=target, table=table_name or bolt,
                store=store, session=context, epoch=epoch, zk=settings.zk, force=force,
                listener=listener,
            )
        for spark in contexts:
            spark.stop()
    except (SinkError, SnapshotError, TopologyError) as exc:
        fail(str(exc))
    except Exception as exc:  # Spark and driver errors: one line, never the password
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        fail(f"export failed: {scrub(first, target)}")
    out.print(result.describe(target))
