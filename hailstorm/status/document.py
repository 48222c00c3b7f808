"""The status document of ``hailstorm status`` (pure): the raw :class:`Inputs` that
:mod:`.collect` reads, :func:`assemble` turning them into the document (the ``--json``
output), :func:`waiting_for_zookeeper` (the document while ZooKeeper cannot be read), and
:func:`rates` deriving messages/s from two scrapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hailstorm.outages import Outage, utc
from hailstorm.protocol.catchup import committed_low_water_mark
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
    Stopped,
    parse_processor_id,
    processor_label,
)

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
    unscraped: set[str] = field(default_factory=set)
    """Processor ids (``negotiator:<id>``) whose metrics address is not fetched: it was
    read from a node not written under authentication, ZooKeeper being off loopback."""


# --------------------------------------------------------------------------- pure


def rates(first: Scrape | None, second: Scrape | None, seconds: float) -> dict[str, float]:
    """Messages in and out per second between two scrapes of one processor, and ``cpu``:
    the CPU seconds its process used per second (1.0: a whole core). The counters of a
    processor that restarted in between (another process start time, or a counter that
    went backwards) count from zero."""
    if first is None or second is None or seconds <= 0:
        return {}
    started = "process_start_time_seconds"
    restarted = started in first and started in second and first[started] != second[started]
    out: dict[str, float] = {}
    for key, metric in (("in", "hailstorm_messages_in_total"),
                        ("out", "hailstorm_messages_out_total"),
                        ("cpu", "process_cpu_seconds_total")):
        if metric in second:
            before = first.get(metric, 0.0)
            after = second[metric]
            delta = after - before if after >= before and not restarted else after
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
            "stopped_by": getattr(master.state, "by", None),
            "instances": list(getattr(master.state, "instances", ())),
            "barrier": getattr(master.state, "barrier", None),
        }
    doc["state"] = _state_label(master)
    doc["stopped"] = master is not None and isinstance(master.state, Stopped)
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
            "label": processor_label(pid),
            "role": _role(pid),
            "expected": inputs.expected is None or pid in inputs.expected.processors,
            "registered": found is not None,
            "state": None if found is None else str(found.state),
            "epoch": None if found is None else found.epoch,
            "error": None if found is None else found.error,
            "waiting": None if found is None else found.waiting,
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
            "cpu_percent": _round(None if "cpu" not in rate else 100 * rate["cpu"]),
            "memory_bytes": _int((scraped or {}).get("process_resident_memory_bytes")),
            "state_keys": _int((scraped or {}).get("hailstorm_state_keys"))
            if _role(pid) == "bolt" else None,
            "rows_committed": _int((scraped or {}).get("hailstorm_rows_committed_total"))
            if _role(pid) == "sink" else None,
            "quarantined": _int((scraped or {}).get("hailstorm_quarantined_total")),
            "bad_records": _bad_records(scraped),
            "late": _int((scraped or {}).get("hailstorm_late_total"))
            if _role(pid) == "spout" else None,
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
    doc["recovery_count"] = sum(1 for r in inputs.recoveries if not r.is_start)
    doc["graph"] = None if inputs.expected is None else inputs.expected.graph
    waits = [f"{p['id']} is waiting for {p['waiting']}; the topology waits with it"
             for p in processors if p["waiting"]]
    doc["problems"] = [*inputs.problems, *lost, *waits,
                       *filter(None, map(budget_problem, processors))]
    doc["waiting"] = None
    return doc


def waiting_for_zookeeper(last: Mapping[str, Any] | None, topology: str, outage: Outage,
                          now: float) -> dict[str, Any]:
    """The status document while ZooKeeper cannot be read (``outage``): the ``last``
    document read, as it was then (its ``time``), or an empty one when none was; with
    ``waiting`` (ZooKeeper, since when) and that wait first among its problems."""
    doc = dict(last) if last is not None else assemble(Inputs(topology, now))
    doc["waiting"] = outage.describe()
    doc["problems"] = [zookeeper_wait(outage, None if last is None else float(last["time"])),
                       *doc["problems"]]
    return doc


def zookeeper_wait(outage: Outage, read_at: float | None) -> str:
    """The problem of a status view while ZooKeeper cannot be read: what it waits for, and
    when what it shows was read (``read_at``; None: nothing was)."""
    shown = "nothing read yet" if read_at is None else f"what is shown was read at {utc(read_at)}"
    return f"waiting for {outage.describe()}: {shown}"


BUDGET_WARNING = 0.5
"""The part of its bad-record budget a processor may use before ``status`` names it."""


def _bad_records(scraped: Scrape | None) -> dict[str, int] | None:
    """The fullest bad-record window of a processor (None: no bad record counted)."""
    scraped = scraped or {}
    limit = scraped.get("hailstorm_bad_records_limit")
    if limit is None or not scraped.get("hailstorm_bad_records_window_records"):
        return None
    return {"bad": int(scraped.get("hailstorm_bad_records_in_window", 0)),
            "records": int(scraped.get("hailstorm_bad_records_window_records", 0)),
            "limit": int(limit)}


def budget_problem(processor: Mapping[str, Any]) -> str | None:
    """A processor row's problem when its fullest bad-record window used more than
    :data:`BUDGET_WARNING` of the budget (one bad record more than it allows halts the
    topology; see :mod:`hailstorm.bad_records`)."""
    window = processor.get("bad_records")
    if not window or not window["limit"] or window["bad"] <= BUDGET_WARNING * window["limit"]:
        return None
    bad, records, limit = window["bad"], window["records"], window["limit"]
    return (f"{processor['id']}: {bad:,} of its last {records:,} records were bad "
            f"({bad / max(records, 1):.2%}), {bad / limit:.0%} of its budget for bad "
            f"records ({limit:,} per window; one more than that halts the topology): see "
            "the dead-letter topic")


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
        "confirmed_at": committed.confirmed_at,
        "confirmed_age_s": _age(now, committed.confirmed_at),
        "snapshot_s": None if committed.snapshot_s is None else round(committed.snapshot_s, 4),
        "pause_s": None if committed.pause_s is None else round(committed.pause_s, 4),
        "snapshots": dict(sorted(committed.snapshots.items())),
        "size_bytes": _round_size(committed, sizes),
        "catching_up": {node: clock_to_json(clock)
                        for node, clock in sorted(committed.clocks.items())},
        "low_water_mark": clock_to_json(committed_low_water_mark(committed.clock,
                                                                 committed.clocks)),
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
