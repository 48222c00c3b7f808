"""``python -m hailstorm.negotiator TOPOLOGY`` (also ``hailstorm negotiator TOPOLOGY``): the daemon.

Run any number of these per topology; one leads, the others stand by. The daemon is
stateless: everything it needs (expected processors, master state, committed record,
processor reports) is in ZooKeeper under ``/hailstorm/<topology name>/``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Sequence
from types import FrameType

import click
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from hailstorm.config import (
    ZK_VAR,
    ConfigError,
    allow_open_zookeeper_option,
    snapshots_option,
    zk_option,
)
from hailstorm.metrics import NegotiatorMetrics, start_server
from hailstorm.negotiator.machine import Config, ForgetSnapshots
from hailstorm.negotiator.shell import Shell
from hailstorm.protocol.layout import NegotiatorRecord, TopologyPaths
from hailstorm.zookeeper import ensure_paths, refuse_open_zookeeper, zk_client

log = logging.getLogger("negotiator")

_SINK_REF = re.compile(r"(table|topic|sink):[^/\\]+\Z")
"""What a sink's round reports name (``table:<name>``...): not a file of the store."""


def topology_name(ref: str) -> str:
    """The ZooKeeper name of the topology ``ref`` (a module path or dotted name)."""
    from hailstorm.topology import TopologyError, load_topology

    try:
        return load_topology(ref).name
    except TopologyError as exc:
        raise click.UsageError(str(exc)) from None


class _Announcement:
    """This negotiator's ephemeral ``negotiators/<id>`` node (best effort: never fatal)."""

    def __init__(self, client: KazooClient, topology: str, identifier: str, host: str,
                 port: int | None) -> None:
        self.client = client
        self.node = TopologyPaths(topology).negotiator_node(identifier)
        self.identifier = identifier
        self.host = socket.gethostname() if host in ("0.0.0.0", "::", "none") else host
        self.port = port

    def write(self, leader: bool) -> None:
        data = NegotiatorRecord(self.identifier, self.host, self.port, leader).to_json()
        try:
            try:
                self.client.set(self.node, data)
            except NoNodeError:
                ensure_paths(self.client, [self.node.rsplit("/", 1)[0]])
                self.client.create(self.node, data, ephemeral=True)
        except KazooException as exc:
            log.warning("%s: could not write %s: %s", self.identifier, self.node, exc)


class SnapshotCollector:
    """Deletes the snapshots a commit made garbage once they are ``retention`` seconds old
    (never fatal: a failure is logged, and the next commit tries again, since every round
    at or below it is garbage then too)."""

    def __init__(self, topology: str, location: str, retention: float) -> None:
        from hailstorm.snapshots import open_store

        self.topology = topology
        self.store = open_store(location)
        self.retention = retention
        self._asked = (-1, 0.0)
        """The latest ``up_to_epoch`` asked for, and when it was first asked for."""
        self._collected = -1
        """Rounds at or below this are collected whole: nothing was held back for them."""

    def forget(self, action: ForgetSnapshots) -> None:
        """Delete what ``action`` made garbage; the refs it keeps are checked first (they
        were read from ZooKeeper): a bolt's ref that names anything but a snapshot of a
        kept round of this topology in the store deletes nothing.

        An idle topology asks again at every skipped round: once a retention has passed
        since the first time the same rounds were asked for (their garbage was written
        before that), a collection has deleted all of it, and the store is not listed
        again for them."""
        from hailstorm.snapshots import SnapshotRefRefused

        up_to = action.up_to_epoch
        if up_to <= self._collected:
            return
        if self._asked[0] != up_to:
            self._asked = (up_to, time.time())
        whole = time.time() - self.retention >= self._asked[1]
        bolt_refs = [ref for ref in action.keep if not _SINK_REF.match(ref)]
        try:
            removed = self.store.forget_rounds(self.topology, action.up_to_epoch,
                                               action.keep_epochs,
                                               time.time() - self.retention,
                                               keep_refs=bolt_refs)
        except SnapshotRefRefused as exc:
            log.error("not deleting snapshots of rounds <= %d: %s", action.up_to_epoch, exc)
            return
        except Exception as exc:  # a shared filesystem hiccup must not stop the negotiator
            log.warning("deleting snapshots of rounds <= %d failed: %s", action.up_to_epoch, exc)
            return
        if whole:
            self._collected = up_to
        if removed:
            log.info("deleted %d snapshot files of rounds <= %d (kept rounds %s)", len(removed),
                     action.up_to_epoch, ", ".join(map(str, sorted(action.keep_epochs))))


def _timeout(value: float | None, default: float) -> float:
    return default if value is None else value


@click.command("negotiator", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("topology", required=False)
@zk_option()
@click.option("--name", metavar="NAME",
              help="Use NAME as the topology's ZooKeeper name instead of importing TOPOLOGY.")
@click.option("--snapshot-interval", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True,
              help="Seconds from one snapshot round's start to the next's (up to half of it "
                   "more while the spouts read a backlog).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Default timeout (s) of every wait.")
@click.option("--initialize-timeout", type=click.FloatRange(min=0, min_open=True),
              help="Initialize: processors registered and ready (default: --timeout).")
@click.option("--rewind-timeout", type=click.FloatRange(min=0, min_open=True),
              help="SpoutsRewind: spouts rewound (default: --timeout).")
@click.option("--pause-timeout", type=click.FloatRange(min=0, min_open=True),
              help="SpoutsPaused: spouts paused (default: --timeout).")
@click.option("--snapshot-timeout", type=click.FloatRange(min=0, min_open=True),
              help="Flowing(C): every bolt saved its snapshot (default: --timeout).")
@click.option("--session-timeout", type=click.FloatRange(min=1), default=10.0,
              show_default=True,
              help="ZooKeeper session timeout (s): how fast a standby takes over.")
@click.option("--id", "identifier", metavar="ID",
              help="This negotiator's name in the election (default: host:pid).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@snapshots_option(help="The processors' snapshot store: after each commit the leader "
                       "deletes the snapshots no recovery can load any more. Without it, "
                       "nothing is deleted.")
@click.option("--snapshot-retention", type=click.FloatRange(min=0), default=60.0,
              show_default=True, metavar="SECONDS",
              help="Delete a garbage snapshot only once it is this old, so that readers of a "
                   "just superseded round (hailstorm export) can finish.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="Serve /metrics on HOST (a free port, written to "
                   "/hailstorm/<name>/negotiators/<id>); 'none' serves nothing.")
@allow_open_zookeeper_option()
def negotiator_command(
    topology: str | None, zk: str | None, name: str | None, snapshot_interval: float,
    timeout: float,
    initialize_timeout: float | None, rewind_timeout: float | None,
    pause_timeout: float | None, snapshot_timeout: float | None, session_timeout: float,
    identifier: str | None, log_level: str, snapshot_dir: str | None = None,
    snapshot_retention: float = 60.0, metrics_host: str = "127.0.0.1",
    allow_open_zookeeper: bool = False,
) -> None:
    """Drive the master state of TOPOLOGY (a module path or dotted name) in ZooKeeper.

    With --name, TOPOLOGY may be omitted (nothing is imported). A ZooKeeper off loopback
    is refused unless $HAILSTORM_ZK_AUTH is set or --allow-open-zookeeper is passed.

    The driver (`hailstorm run`) writes the expected processor ids to
    /hailstorm/<name>/expected; processors register under /hailstorm/<name>/living.
    """
    if not zk:
        raise click.UsageError(f"no ZooKeeper: pass --zk HOSTS or set {ZK_VAR}")
    if not topology and not name:
        raise click.UsageError("missing TOPOLOGY (a module path or dotted name) or --name")
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        refuse_open_zookeeper(zk, allow_open=allow_open_zookeeper)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    config = Config(
        snapshot_interval=snapshot_interval,
        initialize_timeout=_timeout(initialize_timeout, timeout),
        rewind_timeout=_timeout(rewind_timeout, timeout),
        pause_timeout=_timeout(pause_timeout, timeout),
        snapshot_timeout=_timeout(snapshot_timeout, timeout),
    )
    topo = name or topology_name(str(topology))
    identifier = identifier or f"{socket.gethostname()}:{os.getpid()}"
    client = zk_client(zk, session_timeout)
    try:
        client.start(timeout=max(15.0, session_timeout))
    except KazooTimeoutError as exc:
        client.close()
        raise click.ClickException(f"cannot reach ZooKeeper at {zk} ({exc}): is it running, "
                                   f"and do --zk and ${ZK_VAR} name it?") from None
    metrics = NegotiatorMetrics(topo, identifier)
    server = None if metrics_host == "none" else start_server(metrics.registry, metrics_host)
    announce = _Announcement(client, topo, identifier, metrics_host,
                             None if server is None else server.port)
    announce.write(False)
    collector = None if not snapshot_dir else SnapshotCollector(
        topo, snapshot_dir, snapshot_retention)
    if collector is None:
        log.info("%s: no snapshot directory (--snapshots): garbage snapshots stay", identifier)
    shell = Shell(client, topo, config, identifier, metrics=metrics,
                  on_leadership=announce.write,
                  on_forget=None if collector is None else collector.forget)

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: signal %d: stopping", identifier, signum)
        shell.stop()

    previous = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        log.info("%s: negotiator for topology %r on %s (%s)", identifier, topo, zk, config)
        shell.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.stop()
        client.stop()
        client.close()
        log.info("%s: stopped", identifier)


CLI_NAME = "hailstorm negotiator"
"""What ``hailstorm negotiator`` sets ``sys.argv[0]`` to before running this package."""
MODULE_NAME = "python -m hailstorm.negotiator"


def usage_name(argv0: str) -> str:
    """The command's name in its usage line: the one it was run by."""
    return CLI_NAME if argv0 == CLI_NAME else MODULE_NAME


def main(argv: Sequence[str] | None = None, prog_name: str | None = None) -> int:
    """Entry point of ``python -m hailstorm.negotiator`` and ``hailstorm negotiator``;
    returns the exit status. ``prog_name``: the usage line's name (default: by
    :func:`usage_name`)."""
    try:
        negotiator_command.main(args=list(argv) if argv is not None else None,
                                prog_name=prog_name or usage_name(sys.argv[0]),
                                standalone_mode=False)
    except click.exceptions.Abort:
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return 0
