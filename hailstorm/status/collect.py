"""The I/O of ``hailstorm status``: :class:`Collector` reads ZooKeeper, Kafka, the snapshot
store and every processor's ``/metrics`` (:func:`scrape_all`); :func:`status` samples twice
for rates; :class:`StatusWatch` keeps showing the last document, waiting, while ZooKeeper
is down; :func:`run_status` is the command.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kazoo.exceptions import ConnectionLoss, KazooException, SessionExpiredError
from kazoo.protocol.states import KazooState

from hailstorm.errors import ServiceError
from hailstorm.exposure import off_loopback, written_under_authentication
from hailstorm.outages import Outage, OutageWatch
from hailstorm.protocol.clock import Partition
from hailstorm.protocol.layout import (
    LayoutError,
    NegotiatorRecord,
    ProcessorReport,
    TopologyPaths,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.status.document import (
    RECOVERIES_SHOWN,
    Inputs,
    Scrape,
    assemble,
    is_store_ref,
    rates,
    waiting_for_zookeeper,
)
from hailstorm.status.render import render
from hailstorm.zookeeper import zk_client


def resolve_name(ref: str | None, name: str | None, known: Callable[[str], bool]) -> str:
    """The ZooKeeper name: ``--name``, else a bare name ZooKeeper knows, else the loaded
    topology module's name. Raises :class:`~hailstorm.topology.TopologyError`."""
    from hailstorm.topology import NAME_PATTERN, TopologyError, load_topology

    if name:
        return name
    if not ref:
        raise TopologyError("missing TOPOLOGY (a module path, dotted name or topology name) "
                            "or --name")
    if NAME_PATTERN.match(ref) and known(ref):
        return ref
    try:
        return load_topology(ref).name
    except TopologyError:
        if NAME_PATTERN.match(ref):
            raise TopologyError(f"no topology {ref!r} in ZooKeeper, and {ref!r} is not an "
                                "importable topology module either") from None
        raise


class ZooKeeperUnavailable(ServiceError):
    """ZooKeeper cannot be read now (:attr:`outage`: since when); the client reconnects by
    itself."""

    def __init__(self, outage: Outage) -> None:
        super().__init__(f"waiting for {outage.describe()}")
        self.outage = outage


class Collector:
    """Reads the live inputs of one topology; keeps its clients open across refreshes."""

    def __init__(self, zk: str, kafka: str | None, snapshots: str | Path | None,
                 timeout: float = 10.0) -> None:

        self.zk = zk_client(zk, timeout)
        self.zk.start(timeout=timeout)
        self.zookeeper = OutageWatch(f"ZooKeeper at {zk}")
        """Since when the connection is down: reads then fail at once
        (:class:`ZooKeeperUnavailable`) rather than wait in kazoo's queue."""
        self.zk.add_listener(self._on_state)
        self.local = not off_loopback(zk)
        """ZooKeeper on loopback: its nodes are trusted for metrics addresses as they are."""
        self.kafka = kafka
        self.snapshot_root = Path(snapshots) if snapshots else None
        self._consumer: Any = None
        self._sizes: dict[str, int | None] = {}

    def close(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.close()
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self.zookeeper.answered()
        elif not self.zookeeper.waiting:
            self.zookeeper.failed(time.time(), f"the connection is {state.lower()}")

    def known(self, name: str) -> bool:
        return self.zk.exists(TopologyPaths(name).root) is not None

    def read(self, topology: str) -> Inputs:
        """ZooKeeper, Kafka and the snapshot store (no metrics yet). Raises
        :class:`ZooKeeperUnavailable` while ZooKeeper is down."""
        outage = self.zookeeper.outage
        if outage is not None:
            raise ZooKeeperUnavailable(outage)
        try:
            return self._read(topology)
        except (ConnectionLoss, SessionExpiredError) as exc:
            # Only the connection listener starts and ends the watch's outage: this read may
            # have failed on a drop the client already reconnected from.
            raise ZooKeeperUnavailable(self.zookeeper.outage or Outage(
                self.zookeeper.what, time.time(), 1, repr(exc))) from None

    def _read(self, topology: str) -> Inputs:
        inputs = Inputs(topology, time.time())
        problems = inputs.problems

        def unreadable(subject: str, exc: LayoutError) -> None:
            problems.append(f"unreadable {subject}: {exc}")

        records = TopologyRecords(self.zk, topology, on_unreadable=unreadable)
        inputs.master = records.master()
        inputs.committed = records.committed()
        inputs.expected = records.expected()
        living = records.reports()
        for report in living.values():
            if report is not None:
                inputs.reports[report.processor] = report
        for snap in records.snapshot_reports().values():
            if snap is not None:
                inputs.snapshots[snap.processor] = snap
        inputs.recoveries = records.recoveries(last=RECOVERIES_SHOWN)
        inputs.negotiators = records.negotiators()
        inputs.unscraped = self._unauthenticated(TopologyPaths(topology), living,
                                                 inputs.negotiators)
        if inputs.unscraped:
            problems.append(
                f"metrics of {len(inputs.unscraped)} processors and negotiators not fetched: "
                "their ZooKeeper nodes are not written under authentication (set "
                "$HAILSTORM_ZK_AUTH where the topology runs)")

        partitions = set(inputs.expected.partitions) if inputs.expected is not None else set()
        if self.kafka and partitions:
            try:
                inputs.log_ends = self._log_ends(partitions)
            except Exception as exc:  # broad: confluent_kafka raises untyped errors; a problem
                problems.append(f"Kafka watermarks unavailable: {exc}")
        refs = {snap.ref for snap in inputs.snapshots.values()}
        for record in (inputs.committed, inputs.committed and inputs.committed.previous):
            if record:
                refs |= set(record.snapshots.values())
        inputs.snapshot_sizes = self._snapshot_sizes(sorted(refs), problems)
        return inputs

    def _unauthenticated(self, paths: TopologyPaths,
                         living: dict[str, ProcessorReport | None],
                         negotiators: list[NegotiatorRecord]) -> set[str]:
        """The metrics targets (processor ids, ``negotiator:<id>``) whose address was read
        from a node that someone unauthenticated may have written (none when ZooKeeper is
        on loopback): a node, or its directory, that an unauthenticated identity may change
        (:func:`~hailstorm.exposure.written_under_authentication`), or a record that names
        another node than its own."""
        if self.local:
            return set()
        nodes = [(paths.living, f"{paths.living}/{name}", report.processor,
                  report.processor == name)
                 for name, report in living.items() if report is not None]
        nodes += [(paths.negotiators, paths.negotiator_node(record.identifier),
                   f"negotiator:{record.identifier}", True) for record in negotiators]
        trusted: dict[str, bool] = {}

        def authenticated(path: str) -> bool:
            if path not in trusted:
                try:
                    trusted[path] = written_under_authentication(self.zk.get_acls(path)[0])
                except KazooException:
                    trusted[path] = False
            return trusted[path]

        return {target for directory, node, target, named in nodes
                if not (named and authenticated(directory) and authenticated(node))}

    def _log_ends(self, partitions: set[Partition]) -> dict[Partition, int]:
        from confluent_kafka import TopicPartition

        from hailstorm.kafka import consumer

        if self._consumer is None:
            self._consumer = consumer(self.kafka or "")
        ends: dict[Partition, int] = {}
        for topic, number in sorted(partitions):
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, number), timeout=5.0, cached=False)
            ends[(topic, number)] = int(high)
        return ends

    def _snapshot_sizes(self, refs: Iterable[str], problems: list[str],
                        ) -> dict[str, int | None]:
        if self.snapshot_root is None:
            return {}
        from hailstorm.snapshots import SnapshotError, open_store

        store = open_store(self.snapshot_root)
        sizes: dict[str, int | None] = {}
        for ref in refs:
            if not is_store_ref(ref):
                continue
            if ref not in self._sizes:
                try:
                    self._sizes[ref] = store.resolve(ref).size_bytes
                except (OSError, ValueError, SnapshotError) as exc:
                    problems.append(f"snapshot {ref}: {exc}")
                    continue
            sizes[ref] = self._sizes[ref]
        self._sizes = {ref: self._sizes[ref] for ref in sizes}  # forget superseded rounds
        return sizes


def scrape_all(inputs: Inputs, timeout: float = 2.0) -> dict[str, Scrape | None]:
    """Every processor's and negotiator's metrics (None where unreachable), in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    from hailstorm.metrics import scrape

    targets: dict[str, tuple[str, int]] = {}
    for pid, report in inputs.reports.items():
        if pid in inputs.unscraped:
            continue
        host = report.info.get("metrics_host") or report.info.get("host")
        port = report.info.get("metrics")
        if host and port:
            targets[pid] = (str(host), int(port))
    for record in inputs.negotiators:
        if record.metrics and f"negotiator:{record.identifier}" not in inputs.unscraped:
            targets[f"negotiator:{record.identifier}"] = (record.host, record.metrics)

    def one(address: tuple[str, int]) -> Scrape | None:
        try:
            return scrape(address[0], address[1], timeout)
        except Exception:  # broad: a probe: any failure means not reachable
            return None

    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
        results = dict(zip(targets, pool.map(one, targets.values()), strict=True))
    return results


def status(collector: Collector, topology: str, sample: float = 1.0,
           previous: tuple[float, dict[str, Scrape | None]] | None = None,
           ) -> tuple[dict[str, Any], tuple[float, dict[str, Scrape | None]]]:
    """One status document; rates from ``previous`` scrapes, or from a second scrape
    ``sample`` seconds later. Returns the document and this scrape (for the next call)."""
    if previous is None and sample > 0:
        first_inputs = collector.read(topology)
        previous = (time.monotonic(), scrape_all(first_inputs))
        time.sleep(sample)
    inputs = collector.read(topology)
    scraped = scrape_all(inputs)
    taken = time.monotonic()
    inputs.scrapes = scraped
    if previous is not None:
        then, before = previous
        for pid, now_values in scraped.items():
            inputs.rates[pid] = rates(before.get(pid), now_values, taken - then)
    return assemble(inputs), (taken, scraped)


class StatusWatch:
    """Successive status documents of one topology (``status --watch``): rates from the
    previous scrape; while ZooKeeper is down, the last document read, waiting for it
    (:func:`~hailstorm.status.document.waiting_for_zookeeper`)."""

    def __init__(self, collector: Collector, topology: str) -> None:
        self.collector = collector
        self.topology = topology
        self.last: dict[str, Any] | None = None
        self._previous: tuple[float, dict[str, Scrape | None]] | None = None

    def next(self) -> dict[str, Any]:
        try:
            doc, self._previous = status(self.collector, self.topology, sample=0.0,
                                         previous=self._previous)
        except ZooKeeperUnavailable as exc:
            return waiting_for_zookeeper(self.last, self.topology, exc.outage, time.time())
        self.last = doc
        return doc


def open_collector(zk: str, kafka: str | None, snapshots: str | None, ref: str | None,
                   name: str | None) -> tuple[Collector, str]:
    """A :class:`Collector` and the ZooKeeper name of the topology ``ref``/``name`` names.
    Raises :class:`ValueError` for an unreachable ZooKeeper or an unknown topology."""
    from hailstorm.topology import TopologyError

    try:
        collector = Collector(zk, kafka, snapshots, timeout=5.0)
    except Exception as exc:  # broad: kazoo's start raises untyped errors
        raise ValueError(f"cannot reach ZooKeeper at {zk}: {exc or type(exc).__name__}") \
            from None
    try:
        return collector, resolve_name(ref, name, collector.known)
    except TopologyError as exc:
        collector.close()
        raise ValueError(str(exc)) from None


def run_status(zk: str, kafka: str | None, snapshots: str | None, ref: str | None,
               name: str | None, *, as_json: bool, watch: float | None, sample: float,
               out: Any) -> None:
    """The ``hailstorm status`` command body (``out``: a rich Console). Raises
    :class:`ValueError` (a TopologyError) for an unknown topology."""
    import json

    collector, topology = open_collector(zk, kafka, snapshots, ref, name)
    try:
        if watch is None:
            doc, _ = status(collector, topology, sample)
            if as_json:
                print(json.dumps(doc, indent=2, sort_keys=True))
            else:
                out.print(render(doc))
            return
        watching = StatusWatch(collector, topology)
        doc = watching.next()
        if as_json:  # one JSON document per line
            while True:
                print(json.dumps(doc, sort_keys=True), flush=True)
                time.sleep(watch)
                doc = watching.next()
        from rich.live import Live

        with Live(render(doc), console=out, refresh_per_second=4) as live:
            while True:
                time.sleep(watch)
                live.update(render(watching.next()))
    except KeyboardInterrupt:
        return
    finally:
        collector.close()
