"""The one typed reader and writer of a topology's ZooKeeper records.

:class:`TopologyRecords` wraps a started kazoo client and the topology's
:class:`~hailstorm.protocol.layout.TopologyPaths`; processors (through
:class:`~hailstorm.coordination.Coordinator`), the driver, the negotiator's shell,
``hailstorm status``, ``hailstorm export`` and the chaos harness read and write the records
of :mod:`~hailstorm.protocol.layout` only through it. The rules, in this one place:

* a node that does not exist reads as ``None`` (a directory that does not exist lists as
  empty, a child that vanished between the listing and its read is left out);
* an unreadable record (:class:`~hailstorm.protocol.layout.LayoutError`) is told to
  ``on_unreadable(subject, error)`` and then reads as ``None``; without ``on_unreadable`` a
  single record (``master``, ``committed``, ``expected``) raises the error, while a listing
  (``living``, ``snapshots``, ``recoveries``, ``negotiators``) never fails for one bad child:
  it holds ``None`` for it (or leaves it out where the listing is of records only).
  ``subject`` names the node below the topology's root (``"master"``,
  ``"living/<id>"``, ``"snapshots/<name>/<instance>"``...);
* with a ``watch``, every read arms it (a node that does not exist is watched for its
  creation): the negotiator and processors are woken by any change of what they read;
* ``call(operation, *args, **kwargs)`` runs every kazoo operation (a processor retries them
  across connection losses); by default they run as they are.

Writes of persistent records are set-or-create (``expected``, ``stop``,
``snapshots/<name>/<instance>``).
The negotiator's transaction (master, committed and recovery records compare-and-set in one
ZooKeeper transaction) and the ephemeral nodes' creation stay with their owners: they are
about sessions and fencing, not about the records' shapes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, cast

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from hailstorm.protocol.acceptance import SinkAcceptance, acceptance_node
from hailstorm.protocol.known_nodes import KnownNodes, NodeData, Watch
from hailstorm.protocol.layout import (
    CommittedRecord,
    ExpectedRecord,
    LayoutError,
    MasterRecord,
    NegotiatorRecord,
    ProcessorReport,
    RecoveryRecord,
    SnapshotReport,
    StopRequest,
    TopologyPaths,
    decode,
    encode,
)

__all__ = ["Read", "TopologyRecords", "Unreadable", "ViewReads", "Watch"]

R = TypeVar("R")

Unreadable = Callable[[str, LayoutError], None]
"""Told the subject (node below the topology's root) and the error of an unreadable record."""

_GET_TRIES = 3
"""Reads of a watched node that vanishes and reappears in between before it counts as
absent (its watch fires anyway then)."""


@dataclass(frozen=True)
class Read(Generic[R]):
    """One record and the version of its node (for a compare-and-set write)."""

    record: R | None
    """The record (None: no node, or an unreadable record)."""
    version: int | None
    """The node's data version (None: no node)."""


@dataclass(frozen=True)
class ViewReads:
    """Everything a negotiator reads at a wake-up (:meth:`TopologyRecords.read_view`)."""

    master: Read[MasterRecord]
    committed: Read[CommittedRecord]
    expected: ExpectedRecord | None
    reports: dict[str, ProcessorReport | None]
    """As :meth:`TopologyRecords.reports` reads them."""
    snapshot_reports: dict[tuple[str, str], SnapshotReport | None]
    """As :meth:`TopologyRecords.snapshot_reports` reads them."""
    stop: StopRequest | None


_ABSENT: Any = object()
"""What :func:`_outcome` gives for a node that did not exist."""


def _outcome(result: Any) -> Any:
    """The value of a kazoo async ``result``; :data:`_ABSENT` for ``NoNodeError``."""
    try:
        return result.get()
    except NoNodeError:
        return _ABSENT


def _existing(found: Mapping[str, NodeData]) -> dict[str, tuple[bytes | None, ZnodeStat]]:
    """The nodes of ``found`` that exist (a child gone since its listing is left out)."""
    return {path: value for path, value in found.items() if value[1] is not None}


def _direct(operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return operation(*args, **kwargs)


class TopologyRecords:
    """The records of one topology on a started kazoo client (see the module docstring)."""

    def __init__(
        self,
        client: KazooClient,
        topology: str | TopologyPaths,
        *,
        call: Callable[..., Any] = _direct,
        on_unreadable: Unreadable | None = None,
    ) -> None:
        self.client = client
        self.paths = topology if isinstance(topology, TopologyPaths) else TopologyPaths(topology)
        self._call = call
        self._on_unreadable = on_unreadable
        self._known: KnownNodes | None = None
        """What :meth:`read_view` read, kept until its watch fires."""
        self._listed: dict[str, tuple[bytes, Any]] = {}
        """Each listed node's last bytes and what they parsed to: a listing re-reads every
        node (the negotiator's, at each wake-up), and most did not change since."""

    # -- nodes ----------------------------------------------------------------------------

    def _get(self, path: str, watch: Watch | None) -> tuple[bytes | None, ZnodeStat | None]:
        """Data and stat of ``path`` (None, None when absent); with ``watch`` armed either
        way."""
        client, call = self.client, self._call
        if watch is None:
            try:
                data, stat = call(client.get, path)
            except NoNodeError:
                return None, None
            return data, stat
        for _ in range(_GET_TRIES):
            try:
                data, stat = call(client.get, path, watch=watch)
                return data, stat
            except NoNodeError:
                if call(client.exists, path, watch=watch) is None:
                    return None, None
        return None, None

    def _get_many(self, paths: list[str], watch: Watch | None
                  ) -> dict[str, tuple[bytes | None, ZnodeStat]]:
        """Data and stat of each of ``paths`` that exists (with ``watch`` armed on each
        either way), asked all at once: one round trip's wait for many nodes, not one
        each (the negotiator reads every instance's report at each wake-up)."""
        client = self.client

        def ask() -> dict[str, Any]:
            pending = {path: client.get_async(path, watch=watch) for path in paths}
            return {path: _outcome(result) for path, result in pending.items()}

        return _existing(self._settled(self._call(ask), watch))

    def _settled(self, found: dict[str, Any], watch: Watch | None) -> dict[str, NodeData]:
        """``found`` (path -> an asynchronous read's outcome) with each node absent when
        asked (:data:`_ABSENT`: gone since its listing, or not created yet) read again as
        one read does, which watches it for its creation (``(None, None)`` if still
        absent)."""
        return {path: self._get(path, watch) if result is _ABSENT else result
                for path, result in found.items()}

    def _children(self, path: str, watch: Watch | None = None) -> list[str]:
        """The children of ``path``, sorted ([] when absent; watched for its creation)."""
        try:
            if watch is None:
                return sorted(self._call(self.client.get_children, path))
            return sorted(self._call(self.client.get_children, path, watch=watch))
        except NoNodeError:
            if watch is not None:
                self._call(self.client.exists, path, watch=watch)
            return []

    def _parse(self, subject: str, raw: bytes | None, parse: Callable[[bytes], R],
               *, listing: bool = False) -> R | None:
        data = raw or b""
        if listing:
            seen = self._listed.get(subject)
            if seen is not None and seen[0] == data:
                return seen[1]
        try:
            record = parse(data)
        except LayoutError as exc:
            if self._on_unreadable is not None:
                self._on_unreadable(subject, exc)
            elif not listing:
                raise
            return None
        if listing:
            self._listed[subject] = (data, record)
        return record

    def _read(self, subject: str, parse: Callable[[bytes], R],
              watch: Watch | None) -> Read[R]:
        return self._read_of(subject, self._get(f"{self.paths.root}/{subject}", watch), parse)

    def _read_of(self, subject: str, got: tuple[bytes | None, ZnodeStat | None],
                 parse: Callable[[bytes], R]) -> Read[R]:
        raw, stat = got
        if stat is None:
            return Read(None, None)
        return Read(self._parse(subject, raw, parse), stat.version)

    def _put(self, path: str, data: bytes) -> None:
        """Set ``path`` to ``data``, creating it (and its parents) when absent."""
        call, client = self._call, self.client
        try:
            call(client.set, path, data)
        except NoNodeError:
            try:
                call(client.create, path, data, makepath=True)
            except NodeExistsError:
                call(client.set, path, data)

    # -- single records -------------------------------------------------------------------

    def read_master(self, watch: Watch | None = None) -> Read[MasterRecord]:
        """The ``master`` record and its node's version."""
        return self._read("master", MasterRecord.from_json, watch)

    def parse_master(self, data: bytes | None) -> MasterRecord | None:
        """The ``master`` record of a node's ``data`` read elsewhere (None: no node), as
        :meth:`master` would give it."""
        return None if data is None else self._parse("master", data, MasterRecord.from_json)

    def read_committed(self, watch: Watch | None = None) -> Read[CommittedRecord]:
        """The ``committed`` record and its node's version."""
        return self._read("committed", CommittedRecord.from_json, watch)

    def master(self, watch: Watch | None = None) -> MasterRecord | None:
        """The ``master`` record (None: no negotiator has written one)."""
        return self.read_master(watch).record

    def committed(self, watch: Watch | None = None) -> CommittedRecord | None:
        """The ``committed`` record (None: no round committed yet)."""
        return self.read_committed(watch).record

    def expected(self, watch: Watch | None = None) -> ExpectedRecord | None:
        """The ``expected`` record (None: no driver has written one)."""
        return self._read("expected", ExpectedRecord.from_json, watch).record

    def stop_request(self, watch: Watch | None = None) -> StopRequest | None:
        """The ``stop`` request (None: nobody asked, or a run started since)."""
        return self._read("stop", StopRequest.from_json, watch).record

    # -- listings -------------------------------------------------------------------------

    def reports(self, watch: Watch | None = None) -> dict[str, ProcessorReport | None]:
        """Every ``living/<id>`` node's report by node name (None: unreadable)."""
        living = self.paths.living
        names = self._children(living, watch)
        return self._reports_of(names, self._get_many([f"{living}/{name}" for name in names],
                                                      watch))

    def _reports_of(self, names: list[str], found: Mapping[str, tuple[bytes | None, Any]]
                    ) -> dict[str, ProcessorReport | None]:
        living = self.paths.living
        return {name: self._parse(f"living/{name}", found[path][0], ProcessorReport.from_json,
                                  listing=True)
                for name in names if (path := f"{living}/{name}") in found}

    def snapshot_reports(
        self, watch: Watch | None = None
    ) -> dict[tuple[str, str], SnapshotReport | None]:
        """Every ``snapshots/<name>/<instance>`` node's report by ``(name, instance)`` as the
        nodes are named (None: unreadable)."""
        root = self.paths.snapshots
        nodes = [(name, instance) for name in self._children(root, watch)
                 for instance in self._children(f"{root}/{name}", watch)]
        return self._snapshot_reports_of(nodes, self._get_many(
            [f"{root}/{name}/{instance}" for name, instance in nodes], watch))

    def _snapshot_reports_of(self, nodes: list[tuple[str, str]],
                             found: Mapping[str, tuple[bytes | None, Any]]
                             ) -> dict[tuple[str, str], SnapshotReport | None]:
        root = self.paths.snapshots
        return {(name, instance): self._parse(f"snapshots/{name}/{instance}", found[path][0],
                                              SnapshotReport.from_json, listing=True)
                for name, instance in nodes if (path := f"{root}/{name}/{instance}") in found}

    def read_view(self, watch: Watch) -> ViewReads:
        """What a negotiator's wake-up reads: the ``master``, ``committed``, ``expected``
        and ``stop`` records, every ``living`` report and every ``snapshots`` report, each
        read as its own method reads it and with ``watch`` armed on all of it.

        After a ``sync``, only what changed since the last call is asked for: every node read
        is kept (:class:`~hailstorm.protocol.known_nodes.KnownNodes`) until its watch fires,
        which is exactly as fresh as reading it again. What is asked goes three round trips
        at a time (records and listings; reports and the snapshot directories; snapshot
        reports), not one after another. Every call must pass the same ``watch``: it is
        called on any change of what was read, as a watch armed by the read would be."""
        known = self._known
        if known is None:
            known = self._known = KnownNodes(self.client, watch)
        root, living, snapshots = self.paths.root, self.paths.living, self.paths.snapshots
        self._call(self.client.sync, root)
        known.settle()  # every change before the sync now reads as changed
        subjects = ("master", "committed", "expected", "stop")
        reads, listed = self._read_known(known, [f"{root}/{s}" for s in subjects],
                                         [living, snapshots])
        names, bolts = listed[living], listed[snapshots]
        found, instances = self._read_known(known, [f"{living}/{name}" for name in names],
                                            [f"{snapshots}/{bolt}" for bolt in bolts])
        nodes = [(bolt, instance) for bolt in bolts
                 for instance in instances[f"{snapshots}/{bolt}"]]
        snapshot_found, _ = self._read_known(
            known, [f"{snapshots}/{bolt}/{instance}" for bolt, instance in nodes], [])
        return ViewReads(
            self._read_of("master", reads[f"{root}/master"], MasterRecord.from_json),
            self._read_of("committed", reads[f"{root}/committed"], CommittedRecord.from_json),
            self._read_of("expected", reads[f"{root}/expected"], ExpectedRecord.from_json
                          ).record,
            self._reports_of(names, _existing(found)),
            self._snapshot_reports_of(nodes, _existing(snapshot_found)),
            self._read_of("stop", reads[f"{root}/stop"], StopRequest.from_json).record,
        )

    def _read_known(self, known: KnownNodes, paths: list[str], directories: list[str]
                    ) -> tuple[dict[str, NodeData], dict[str, list[str]]]:
        """The data of each of ``paths`` and the sorted children of each of
        ``directories``, as :meth:`_get` and :meth:`_children` read them with
        ``known.changed`` armed; what ``known`` holds is not asked again, the rest is asked
        all at once (one round trip's wait) and kept."""
        watch, client = known.changed, self.client
        data = {path: known.data(path) for path in paths}
        children = {path: known.children(path) for path in directories}
        ask_data = [path for path, value in data.items() if value is None]
        ask_children = [path for path, names in children.items() if names is None]
        if not ask_data and not ask_children:
            return cast(dict[str, NodeData], data), cast(dict[str, list[str]], children)
        tokens = {path: known.token(path) for path in [*ask_data, *ask_children]}

        def ask() -> tuple[dict[str, Any], dict[str, Any]]:
            gets = {path: client.get_async(path, watch=watch) for path in ask_data}
            lists = {path: client.get_children_async(path, watch=watch)
                     for path in ask_children}
            return ({path: _outcome(r) for path, r in gets.items()},
                    {path: _outcome(r) for path, r in lists.items()})

        got, listed = self._call(ask)
        for path, value in self._settled(got, watch).items():
            known.keep_data(path, tokens[path], value)
            data[path] = value
        for path, result in listed.items():
            names = self._children(path, watch) if result is _ABSENT else sorted(result)
            known.keep_children(path, tokens[path], names)
            children[path] = names
        return cast(dict[str, NodeData], data), cast(dict[str, list[str]], children)

    def _records(self, directory: str, names: list[str],
                 parse: Callable[[bytes], R]) -> list[R]:
        records = []
        for name in names:
            raw, stat = self._get(f"{self.paths.root}/{directory}/{name}", None)
            if stat is not None:
                record = self._parse(f"{directory}/{name}", raw, parse, listing=True)
                if record is not None:
                    records.append(record)
        return records

    def recoveries(self, last: int | None = None) -> list[RecoveryRecord]:
        """The recovery records (the ``last`` ones when given), oldest first."""
        names = self._children(self.paths.recoveries)
        return self._records("recoveries", names if last is None else names[-last:],
                             RecoveryRecord.from_json)

    def negotiators(self) -> list[NegotiatorRecord]:
        """The records of the negotiators running now, by node name."""
        return self._records("negotiators", self._children(self.paths.negotiators),
                             NegotiatorRecord.from_json)

    # -- writes ---------------------------------------------------------------------------

    def write_expected(self, record: ExpectedRecord) -> None:
        """Set (or create) ``expected``."""
        self._put(self.paths.expected, record.to_json())

    def start_attempt(self, attempt: str) -> None:
        """Name the driver's new stage attempt in ``expected`` (written already): from now
        on only reports of ``attempt`` count (:data:`~hailstorm.protocol.layout.ATTEMPT_INFO`)."""
        record = self.expected()
        if record is None:
            raise LayoutError("no expected record to start a stage attempt in")
        self.write_expected(replace(record, attempt=attempt))

    def request_stop(self, request: StopRequest) -> None:
        """Set (or create) ``stop``: the negotiator drains the topology and stops it."""
        self._put(self.paths.stop, request.to_json())

    def clear_stop(self) -> None:
        """Delete ``stop`` (a new run starts); absent is fine."""
        with contextlib.suppress(NoNodeError):
            self._call(self.client.delete, self.paths.stop)

    def write_snapshot_report(self, report: SnapshotReport) -> None:
        """Set (or create) ``snapshots/<name>/<instance>``."""
        self._put(self.paths.snapshot_node(report.processor), report.to_json())

    def sink_acceptance(self, sink: str) -> SinkAcceptance | None:
        """The operator's acceptance of ``sink`` behind the committed clock (None: none)."""
        raw, stat = self._get(acceptance_node(self.paths, sink), None)
        if stat is None:
            return None
        return self._parse(f"sink-acceptances/{sink}", raw, SinkAcceptance.from_json)

    def write_sink_acceptance(self, acceptance: SinkAcceptance) -> None:
        """Set (or create) ``sink-acceptances/<sink>``."""
        self._put(acceptance_node(self.paths, acceptance.sink), acceptance.to_json())

    def write_stream_times(self, spout: str, position: int, times: Mapping[str, Any]) -> None:
        """Keep a spout's stream times through ``position`` (the same position always has
        the same times: an existing node stays)."""
        with contextlib.suppress(NodeExistsError):
            self._call(self.client.create, self.paths.stream_times_node(spout, position),
                       encode({"position": position, "times": dict(times)}), makepath=True)

    def stream_times_at_or_below(
        self, spout: str, position: int
    ) -> tuple[int, dict[str, Any]] | None:
        """The spout's kept stream times at the greatest position ``<= position``, as
        ``(position, {bolt: time})``; None when none is kept."""
        below = [int(c) for c in self._children(self.paths.stream_times_node(spout))
                 if c.isdigit() and int(c) <= position]
        for at in sorted(below, reverse=True):
            raw, _stat = self._get(self.paths.stream_times_node(spout, at), None)
            if raw is None:
                continue
            data = decode(raw)
            times = data.get("times")
            if data.get("position") == at and isinstance(times, dict):
                return at, {str(k): v for k, v in times.items()}
        return None

    def trim_stream_times(self, spout: str, below: int) -> None:
        """Drop the spout's stream times kept at positions below ``below``, except the
        greatest of them (a rewind there re-reads from it instead of the log start)."""
        old = sorted(int(c) for c in self._children(self.paths.stream_times_node(spout))
                     if c.isdigit() and int(c) < below)
        for at in old[:-1]:
            with contextlib.suppress(NoNodeError):
                self._call(self.client.delete, self.paths.stream_times_node(spout, at))

    def write_report(self, report: ProcessorReport) -> ZnodeStat:
        """Set the processor's existing ``living/<id>`` node (its owner created it); the
        node's stat after the write (``ephemeralOwner``: whose node it is)."""
        stat: ZnodeStat = self._call(self.client.set, self.paths.living_node(report.processor),
                                     report.to_json())
        return stat
