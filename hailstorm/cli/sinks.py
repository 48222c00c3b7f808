"""``hailstorm sink accept|rebuild``: the ways forward for a sink behind the committed clock
(docs/sinks.md, "A sink behind the committed clock")."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from hailstorm import config
from hailstorm.cli.group import _handle_errors, fail, main, out

if TYPE_CHECKING:
    from hailstorm.topology import Topology


@main.group("sink")
def sink_group() -> None:
    """Ways forward for a sink whose stored progress is behind the committed clock."""


def _load(topology_ref: str, sink: str) -> Topology:
    """The topology module, checked to have a sink named ``sink``."""
    from hailstorm.topology import SinkSpec, TopologyError, load_topology

    try:
        topology = load_topology(topology_ref)
        spec = topology.node(sink)
    except TopologyError as exc:
        fail(str(exc))
    except KeyError as exc:
        fail(str(exc.args[0]))
    if not isinstance(spec, SinkSpec):
        fail(f"{sink!r} is a {spec.kind}, not a sink")
    return topology


@sink_group.command("accept")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.argument("sink")
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@config.zk_option()
@_handle_errors
def accept_command(topology_ref: str, sink: str, name: str | None, zk: str | None) -> None:
    """Let SINK go on below the committed clock: the rows at or below it that its table
    (or topic) lacks stay missing.

    Records the acceptance of the current committed round in ZooKeeper
    (sink-acceptances/SINK); the next run of the topology goes on from the committed clock.
    A later committed round needs no acceptance.
    """
    from hailstorm.export import ExportError, read_committed
    from hailstorm.protocol.acceptance import SinkAcceptance
    from hailstorm.protocol.clock import clock_to_json
    from hailstorm.protocol.records import TopologyRecords
    from hailstorm.zookeeper import zk_client

    topology = _load(topology_ref, sink)
    hosts = config.Settings.from_env(zk=zk).zk
    if not hosts:
        fail(f"no ZooKeeper: pass --zk or set ${config.ZK_VAR}")
    name = name or topology.name
    try:
        committed = read_committed(hosts, name)
    except ExportError as exc:
        fail(str(exc))
    if committed is None:
        fail(f"nothing is committed for {name}: a sink cannot be behind, there is nothing "
             "to accept")
    acceptance = SinkAcceptance(sink, committed.epoch, dict(committed.clock), time.time())
    client = zk_client(hosts, 5.0)
    client.start(timeout=5.0)
    try:
        TopologyRecords(client, name).write_sink_acceptance(acceptance)
    finally:
        client.stop()
        client.close()
    out.print(f"accepted: sink {sink} of {name} goes on from the committed clock of "
              f"round {committed.epoch} {clock_to_json(committed.clock)}; rows at or below it "
              "that its table or topic lacks stay missing")


@sink_group.command("rebuild")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.argument("sink")
@click.option(
    "--to", "url", metavar="URL",
    help=f"The sink's database when its Table names none (default: ${config.DATABASE_VAR}, "
         f"else {config.DEFAULT_DATABASE_URL}).",
)
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@config.snapshots_option()
@config.zk_option()
@_handle_errors
def rebuild_command(topology_ref: str, sink: str, url: str | None, name: str | None,
                    snapshot_dir: str | None, zk: str | None) -> None:
    """Rebuild SINK's table from the committed round, with its progress, in one transaction.

    For an upsert table fed by one bolt keyed by the tuple itself (key=itself): every key's
    row is emit(key, value) with the key's committed value. Run it while the topology is
    stopped; the next run goes on from the committed clock.
    """
    from hailstorm.export import ExportError, rebuild_sink
    from hailstorm.sinks import SinkError
    from hailstorm.snapshots import SnapshotError, open_store
    from hailstorm.topology import Table

    topology = _load(topology_ref, sink)
    settings = config.Settings.from_env(zk=zk, snapshots=snapshot_dir, database_url=url)
    if not settings.zk:
        fail(f"no ZooKeeper: pass --zk or set ${config.ZK_VAR}")
    target = topology.node(sink).target  # type: ignore[union-attr]
    database = (target.url if isinstance(target, Table) else None) or settings.database()
    try:
        result = rebuild_sink(topology=topology, sink=sink, url=database, zk=settings.zk,
                              store=open_store(settings.snapshot_location()), name=name)
    except (SinkError, SnapshotError, ExportError) as exc:
        fail(str(exc))
    out.print(result.describe(database))
