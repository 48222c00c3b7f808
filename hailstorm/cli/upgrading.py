"""Upgrading a running topology: ``hailstorm plan`` prints what ``hailstorm run`` of a
changed topology will do to each node (:mod:`hailstorm.upgrade`)."""

from __future__ import annotations

import sys

import click

from hailstorm import config
from hailstorm.cli.group import _handle_errors, fail, main


@main.command("plan")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.option("--name", metavar="NAME", help="ZooKeeper name of the topology (default: its own).")
@config.zk_option()
@config.snapshots_option()
@config.kafka_option()
@config.kafka_config_option()
@click.option("--allow-drop", multiple=True, metavar="NODE",
              help="Plan as 'hailstorm run --allow-drop NODE' would (repeatable).")
@click.option("--rebuild", multiple=True, metavar="SINK",
              help="Plan as 'hailstorm run --rebuild SINK' would (repeatable).")
@_handle_errors
def plan_command(topology_ref: str, name: str | None, zk: str | None,
                 snapshot_dir: str | None, kafka: str | None, kafka_config: str | None,
                 allow_drop: tuple[str, ...], rebuild: tuple[str, ...]) -> None:
    """Print, node by node, what 'hailstorm run TOPOLOGY' will do to the deployed topology
    of the same name: state carried, re-sharded, migrated or converted, built from the
    retained records (new, or a raised version), dropped; a sink's changed table rebuilt
    from the committed state; and what it refuses, with the fix.
    With --kafka, a bolt built from the retained records is checked against its inputs'
    log starts (records retention deleted). Exits 1 when the plan refuses a node."""
    from hailstorm.snapshots import open_store
    from hailstorm.topology import TopologyError, load_topology
    from hailstorm.upgrade.deployed import plan_for
    from hailstorm.zookeeper import zk_client

    try:
        topology = load_topology(topology_ref)
    except TopologyError as exc:
        fail(str(exc))
    settings = config.Settings.from_env(zk=zk, snapshots=snapshot_dir, kafka=kafka,
                                        kafka_config=kafka_config)
    bootstrap = settings.require_kafka() if settings.kafka else None
    client = zk_client(settings.require_zk())
    client.start(timeout=20)
    try:
        plan = plan_for(client, name or topology.name, open_store(settings.snapshot_location()),
                        topology, allow_drop, bootstrap, rebuild)
    finally:
        client.stop()
        client.close()
    for line in plan.lines():
        click.echo(line)
    if plan.refused:
        click.echo(f"refused: {len(plan.refused)} node(s); 'hailstorm run' stops before "
                   "starting anything", err=True)
        sys.exit(1)
