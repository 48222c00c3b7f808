"""``hailstorm status TOPOLOGY``: one view of a running topology.

Reads ZooKeeper (master state, committed record, expected processors, their reports, the
bolts' snapshot reports, the negotiators), Kafka (each source partition's watermarks), the
snapshot store (size of each bolt's last snapshot) and every processor's ``/metrics``.

The pieces:

* :func:`collect` does the I/O and returns the raw :class:`Inputs`;
* :func:`assemble` (pure) turns inputs into the status document (the ``--json`` output);
* :func:`rates` (pure) derives messages/s from two scrapes;
* :func:`render` (pure) draws the document with rich.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hailstorm.protocol.clock import Partition, clock_to_json, partition_key
from hailstorm.protocol.layout import (
    CommittedRecord,
    ExpectedRecord,
    LayoutError,
    MasterRecord,
    NegotiatorRecord,
    ProcessorReport,
    RecoveryRecord,
    SnapshotReport,
    TopologyPaths,
    parse_processor_id,
)
from hailstorm.protocol.records import TopologyRecords
from hailstorm.zookeeper import zk_client

LAG_NOTE = ("lag: offsets from what spouts read (and what is committed) to the log end "
            "(read_committed: the last stable offset); a transaction's commit marker counts as "
            "one offset; a log end below what was read is marked '!': records were lost")

RECOVERIES_SHOWN = 20
"""How many of the latest recovery records a status document holds."""

Scrape = Mapping[str, float]
"""Metric samples of one processor by name (labels dropped)."""


@dataclass
class Inputs:
    """Everything :func:`assemble` looks at (what :func:`collect` read)."""

    topology: str
    now: float
    master: MasterRecord | None = None
    committed: CommittedRecord | None = None
    expected: ExpectedRecord | None = None
    reports: dict[str, ProcessorReport] = field(default_factory=dict)
    snapshots: dict[str, SnapshotReport] = field(default_factory=dict)
    negotiators: list[NegotiatorRecord] = field(default_factory=list)
    recoveries: list[RecoveryRecord] = field(default_factory=list)
    """The latest moves to Initialize (starts and recoveries), oldest first."""
    log_ends: dict[Partition, int] | None = None
    """High watermark (next offset to be written) per source partition; None: unknown."""
    scrapes: dict[str, Scrape | None] = field(default_factory=dict)
    """Processor id (or ``negotiator:<id>``) -> its metrics (None: not reachable)."""
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    """Processor id -> ``{"in": msg/s, "out": msg/s}``."""
    snapshot_sizes: dict[str, int | None] = field(default_factory=dict)
    """Snapshot ref -> its size in bytes (None: unknown)."""
    problems: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- pure


def rates(first: Scrape | None, second: Scrape | None, seconds: float) -> dict[str, float]:
    """Messages in and out per second between two scrapes of one processor (counters that
    went backwards, e.g. a restarted processor, count from zero)."""
    if first is None or second is None or seconds <= 0:
        return {}
    out: dict[str, float] = {}
    for key, metric in (("in", "hailstorm_messages_in_total"),
                        ("out", "hailstorm_messages_out_total")):
        if metric in second:
            before = first.get(metric, 0.0)
            after = second[metric]
            delta = after - before if after >= before else after
            out[key] = delta / seconds
    return out


def _age(now: float, then: float | None) -> float | None:
    return None if not then else round(max(0.0, now - then), 3)


def _state_label(master: MasterRecord | None) -> str:
    if master is None:
        return "NegotiatorDisconnected"
    name = type(master.state).__name__
    clock = getattr(master.state, "clock", None)
    return f"{name}(C)" if name == "Flowing" and clock is not None else name


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def assemble(inputs: Inputs) -> dict[str, Any]:
    """The status document (plain JSON data) from what was read."""
    now = inputs.now
    master = inputs.master
    committed = inputs.committed
    doc: dict[str, Any] = {"topology": inputs.topology, "time": now}

    if master is None:
        doc["master"] = None
    else:
        clock = getattr(master.state, "clock", None)
        doc["master"] = {
            "state": type(master.state).__name__,
            "label": _state_label(master),
            "epoch": master.state.epoch,
            "clock": None if clock is None else clock_to_json(clock),
            "entered_at": master.entered_at,
            "age_s": _age(now, master.entered_at),
            "leader": master.leader,
            "reason": master.reason,
        }
    doc["state"] = _state_label(master)
    doc["epoch"] = None if master is None else master.state.epoch
    doc["leader"] = None if master is None else master.leader

    negotiators = []
    for record in sorted(inputs.negotiators, key=lambda r: r.identifier):
        scraped = inputs.scrapes.get(f"negotiator:{record.identifier}")
        negotiators.append({
            "id": record.identifier, "host": record.host, "metrics": record.metrics,
            "leader": record.leader,
            "rounds_committed": _int((scraped or {}).get(
                "hailstorm_negotiator_rounds_committed_total")),
            "recoveries": _int((scraped or {}).get("hailstorm_negotiator_recoveries_total")),
            "epoch": _int((scraped or {}).get("hailstorm_negotiator_epoch")),
        })
    doc["negotiators"] = negotiators

    sizes = inputs.snapshot_sizes
    doc["committed"] = None if committed is None else _round_entry(committed, now, sizes)
    doc["committed_previous"] = None if committed is None or committed.previous is None \
        else _round_entry(committed.previous, now, sizes)

    # ---- partitions
    partitions: set[Partition] = set()
    if inputs.expected is not None:
        partitions |= inputs.expected.partitions
    if committed is not None:
        partitions |= set(committed.clock)
    positions: dict[Partition, int] = {}
    for report in inputs.reports.values():
        for p, offset in (report.position or {}).items():
            positions[p] = max(offset, positions.get(p, -1))
            partitions.add(p)
    rows = []
    lost: list[str] = []
    for p in sorted(partitions):
        done = None if committed is None else committed.clock.get(p, -1)
        position = positions.get(p)
        end = None if inputs.log_ends is None else inputs.log_ends.get(p)
        furthest = max(x for x in (done, position, -1) if x is not None)
        # A log end below what was already read: the topic lost records (truncated or
        # re-created); the lag is unknown rather than a made-up 0.
        below = end is not None and end < furthest + 1
        if below:
            lost.append(f"{partition_key(p)}: the log ends at {end}, below offset "
                            f"{furthest} the topology already read: records were lost")
        known = end is not None and not below
        rows.append({
            "partition": partition_key(p),
            "committed": done,
            "position": position,
            "log_end": end,
            "log_end_below_read": below,
            "lag": end - (furthest + 1) if known and end is not None else None,
            "committed_lag": end - (done + 1) if known and end is not None and done is not None
            else None,
        })
    doc["partitions"] = rows
    doc["lag_note"] = LAG_NOTE

    # ---- processors
    ids = set(inputs.reports)
    if inputs.expected is not None:
        ids |= set(inputs.expected.processors)
    processors = []
    for pid in sorted(ids, key=_processor_order):
        found = inputs.reports.get(pid)
        info = dict(found.info) if found is not None else {}
        scraped = inputs.scrapes.get(pid)
        rate = inputs.rates.get(pid, {})
        host = info.get("host")
        port = info.get("port")
        processors.append({
            "id": pid,
            "role": _role(pid),
            "expected": inputs.expected is None or pid in inputs.expected.processors,
            "registered": found is not None,
            "state": None if found is None else str(found.state),
            "epoch": None if found is None else found.epoch,
            "error": None if found is None else found.error,
            "host": host,
            "port": port,
            "address": None if host is None else (f"{host}:{port}" if port else str(host)),
            "pid": info.get("pid"),
            "metrics_port": info.get("metrics"),
            "metrics_ok": scraped is not None,
            "messages_in": _int((scraped or {}).get("hailstorm_messages_in_total")),
            "messages_out": _int((scraped or {}).get("hailstorm_messages_out_total")),
            "batches": _int((scraped or {}).get("hailstorm_batches_total")),
            "in_per_s": _round(rate.get("in")),
            "out_per_s": _round(rate.get("out")),
            "state_keys": _int((scraped or {}).get("hailstorm_state_keys"))
            if _role(pid) == "bolt" else None,
            "rows_committed": _int((scraped or {}).get("hailstorm_rows_committed_total"))
            if _role(pid) == "sink" else None,
            "quarantined": _int((scraped or {}).get("hailstorm_quarantined_total")),
        })
    doc["processors"] = processors

    # ---- snapshots
    snapshots = []
    for pid, snap in sorted(inputs.snapshots.items(), key=lambda kv: _processor_order(kv[0])):
        scraped = inputs.scrapes.get(pid) or {}
        same_round = scraped.get("hailstorm_snapshot_last_epoch") == snap.epoch
        duration = scraped.get("hailstorm_snapshot_last_seconds") if same_round else None
        snapshots.append({
            "processor": pid,
            "epoch": snap.epoch,
            "clock": clock_to_json(snap.clock),
            "ref": snap.ref,
            "committed": committed is not None and committed.snapshots.get(pid) == snap.ref,
            "size_bytes": inputs.snapshot_sizes.get(snap.ref),
            "duration_s": None if duration is None else round(duration, 4),
        })
    doc["snapshots"] = snapshots
    doc["recoveries"] = [
        {"epoch": r.epoch, "at": r.at, "age_s": _age(now, r.at), "previous": r.previous,
         "reason": r.reason, "start": r.is_start}
        for r in inputs.recoveries
    ]
    doc["graph"] = None if inputs.expected is None else inputs.expected.graph
    doc["problems"] = [*inputs.problems, *lost]
    return doc


def is_store_ref(ref: str) -> bool:
    """Whether a snapshot ref names a file of the snapshot store (a sink's ref names the
    table its rounds are committed in)."""
    return "://" in ref


def _round_size(committed: CommittedRecord, sizes: Mapping[str, int | None]) -> int | None:
    """Bytes of a round's snapshot files (None unless every one's size is known)."""
    known = [sizes.get(ref) for ref in committed.snapshots.values() if is_store_ref(ref)]
    if not known or any(size is None for size in known):
        return None
    return sum(size for size in known if size is not None)


def _round_entry(committed: CommittedRecord, now: float,
                 sizes: Mapping[str, int | None]) -> dict[str, Any]:
    return {
        "epoch": committed.epoch,
        "clock": clock_to_json(committed.clock),
        "committed_at": committed.committed_at,
        "age_s": _age(now, committed.committed_at),
        "snapshot_s": None if committed.snapshot_s is None else round(committed.snapshot_s, 4),
        "pause_s": None if committed.pause_s is None else round(committed.pause_s, 4),
        "snapshots": dict(sorted(committed.snapshots.items())),
        "size_bytes": _round_size(committed, sizes),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _role(pid: str) -> str:
    try:
        return str(parse_processor_id(pid).role)
    except LayoutError:
        return "?"


def _processor_order(pid: str) -> tuple[int, str]:
    order = {"spout": 0, "bolt": 1, "sink": 2}
    return order.get(_role(pid), 3), pid


# --------------------------------------------------------------------------- rendering


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}{suffix}"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value}{suffix}"


def render(doc: Mapping[str, Any]) -> Any:
    """A rich renderable of the status document."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    master = doc.get("master")
    head = Text()
    head.append(f"{doc['topology']}  ", style="bold")
    colour = "green" if doc["state"] == "Flowing" else (
        "yellow" if doc["state"] in ("Flowing(C)", "SpoutsPaused") else "red")
    head.append(doc["state"], style=f"bold {colour}")
    if master is not None:
        head.append(f"  epoch {master['epoch']}  for {_fmt(master['age_s'], ' s')}"
                    f"  leader {master['leader'] or '-'}")
    parts.append(head)
    if master is not None and master.get("reason"):
        parts.append(Text(f"  {master['reason']}", style="dim"))
    committed = doc.get("committed")
    if committed is None:
        parts.append(Text("committed: nothing yet"))
    else:
        parts.append(Text(f"committed: round {committed['epoch']}, "
                          f"{_fmt(committed['age_s'], ' s')} ago"))
    for neg in doc.get("negotiators", []):
        parts.append(Text(
            f"negotiator {neg['id']} {'(leader) ' if neg['leader'] else ''}"
            f"metrics {neg['host']}:{neg['metrics'] or '-'}  rounds committed "
            f"{_fmt(neg['rounds_committed'])}  recoveries {_fmt(neg['recoveries'])}",
            style="dim"))

    table = Table("partition", "committed", "position", "log end", "lag", title_justify="left",
                  title="partitions", caption=doc.get("lag_note"), caption_justify="left")
    for row in doc["partitions"]:
        end = _fmt(row["log_end"]) + ("!" if row.get("log_end_below_read") else "")
        table.add_row(row["partition"], _fmt(row["committed"]), _fmt(row["position"]), end,
                      _fmt(row["lag"]))
    parts.append(table)

    procs = Table("processor", "state", "address", "pid", "in", "out", "in/s", "out/s",
                  "keys/rows", "bad", title="processors", title_justify="left",
                  caption="bad: records quarantined (dead letters, <table>_rejected rows)",
                  caption_justify="left")
    for p in doc["processors"]:
        state = p["state"] or "missing"
        if p["error"]:
            state = f"[red]error[/]: {p['error']}"
        elif not p["registered"]:
            state = "[red]missing[/]"
        extra = p["state_keys"] if p["role"] == "bolt" else p["rows_committed"]
        procs.add_row(p["id"], state, p["address"] or "-", str(p["pid"] or "-"),
                      _fmt(p["messages_in"]), _fmt(p["messages_out"]), _fmt(p["in_per_s"]),
                      _fmt(p["out_per_s"]), _fmt(extra), _fmt(p.get("quarantined")))
    parts.append(procs)

    if doc["snapshots"]:
        snaps = Table("bolt / sink", "round", "committed", "size", "duration", "ref",
                      title="last snapshots", title_justify="left")
        for s in doc["snapshots"]:
            snaps.add_row(s["processor"], str(s["epoch"]), "yes" if s["committed"] else "no",
                          _fmt(s["size_bytes"], " B"), _fmt(s["duration_s"], " s"), s["ref"])
        parts.append(snaps)
    recoveries = [r for r in doc.get("recoveries", []) if not r["start"]]
    if recoveries:
        last = recoveries[-1]
        parts.append(Text(f"last recovery: round {last['epoch']}, "
                          f"{_fmt(last['age_s'], ' s')} ago: {last['reason']}", style="dim"))
    for problem in doc.get("problems", []):
        parts.append(Text(f"warning: {problem}", style="yellow"))
    return Group(*parts)


# --------------------------------------------------------------------------- I/O


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


class Collector:
    """Reads the live inputs of one topology; keeps its clients open across refreshes."""

    def __init__(self, zk: str, kafka: str | None, snapshots: str | Path | None,
                 timeout: float = 10.0) -> None:

        self.zk = zk_client(zk, timeout)
        self.zk.start(timeout=timeout)
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

    def known(self, name: str) -> bool:
        return self.zk.exists(TopologyPaths(name).root) is not None

    def read(self, topology: str) -> Inputs:
        """ZooKeeper, Kafka and the snapshot store (no metrics yet)."""
        inputs = Inputs(topology, time.time())
        problems = inputs.problems

        def unreadable(subject: str, exc: LayoutError) -> None:
            problems.append(f"unreadable {subject}: {exc}")

        records = TopologyRecords(self.zk, topology, on_unreadable=unreadable)
        inputs.master = records.master()
        inputs.committed = records.committed()
        inputs.expected = records.expected()
        for report in records.reports().values():
            if report is not None:
                inputs.reports[report.processor] = report
        for snap in records.snapshot_reports().values():
            if snap is not None:
                inputs.snapshots[snap.processor] = snap
        inputs.recoveries = records.recoveries(last=RECOVERIES_SHOWN)
        inputs.negotiators = records.negotiators()

        partitions = set(inputs.expected.partitions) if inputs.expected is not None else set()
        if self.kafka and partitions:
            try:
                inputs.log_ends = self._log_ends(partitions)
            except Exception as exc:
                problems.append(f"Kafka watermarks unavailable: {exc}")
        refs = {snap.ref for snap in inputs.snapshots.values()}
        for record in (inputs.committed, inputs.committed and inputs.committed.previous):
            if record:
                refs |= set(record.snapshots.values())
        inputs.snapshot_sizes = self._snapshot_sizes(sorted(refs), problems)
        return inputs

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
        host, port = report.info.get("host"), report.info.get("metrics")
        if host and port:
            targets[pid] = (str(host), int(port))
    for record in inputs.negotiators:
        if record.metrics:
            targets[f"negotiator:{record.identifier}"] = (record.host, record.metrics)

    def one(address: tuple[str, int]) -> Scrape | None:
        try:
            return scrape(address[0], address[1], timeout)
        except Exception:
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


def open_collector(zk: str, kafka: str | None, snapshots: str | None, ref: str | None,
                   name: str | None) -> tuple[Collector, str]:
    """A :class:`Collector` and the ZooKeeper name of the topology ``ref``/``name`` names.
    Raises :class:`ValueError` for an unreachable ZooKeeper or an unknown topology."""
    from hailstorm.topology import TopologyError

    try:
        collector = Collector(zk, kafka, snapshots, timeout=5.0)
    except Exception as exc:
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
        doc, previous = status(collector, topology, sample=0.0)
        if as_json:  # one JSON document per line
            while True:
                print(json.dumps(doc, sort_keys=True), flush=True)
                time.sleep(watch)
                doc, previous = status(collector, topology, previous=previous)
        from rich.live import Live

        with Live(render(doc), console=out, refresh_per_second=4) as live:
            while True:
                time.sleep(watch)
                doc, previous = status(collector, topology, previous=previous)
                live.update(render(doc))
    except KeyboardInterrupt:
        return
    finally:
        collector.close()
