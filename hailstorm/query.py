"""Reading a bolt's state without stopping the topology: the committed round, or the live
instances, by key.

The committed round's snapshots are consistent at its clock (every bolt saved exactly the
records up to it), so they answer "what was the count of ``storm`` at clock C" while the
topology runs on, is stopped, or is gone; Spark is not needed::

    result = query_committed(store, "wordcount", bolt_spec, keys=["storm"], zk=zk)
    result.values    # {"storm": 72925}
    result.epoch, result.clock

A key is looked up in the one snapshot file of the instance that owns it (the bolt's
routing at the round's parallelism); without keys every key of the round is returned.

Live (:func:`query_live`): each key is asked of the running instance that owns it, over its
data-plane port after the same authentication as any peer (so the query needs the run's
secret: a run started with ``$HAILSTORM_SECRET_FILE``, and the same file). The instance
answers from its current state, between two batches, with two clocks: ``through``, its low
water mark (every record up to it is in the value), and ``absorbed`` (no record beyond it
is). When ``through`` covers ``absorbed`` the value is exactly the state at that clock;
otherwise some records between the two are in it and some are not yet.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hailstorm.auth import QUERY_IDENTITY, AuthError, RunSecret, greet_peer
from hailstorm.errors import HailstormError
from hailstorm.export import choose_round
from hailstorm.lateness import forget_dropped
from hailstorm.monoids import KeyedMap
from hailstorm.protocol.clock import Clock, clock_to_json, dominates, low_water_mark, merge_max
from hailstorm.protocol.wire import (
    MAX_REQUEST_SIZE,
    Answer,
    FrameError,
    FrameReader,
    FrameTooLargeError,
    Query,
    encode_frames,
    recv_frames,
)
from hailstorm.routing import route
from hailstorm.snapshots import SnapshotStore, jsonable
from hailstorm.topology import BoltSpec

__all__ = ["LiveAnswer", "LiveResult", "QueryError", "QueryResult", "parse_key",
           "query_committed", "query_live"]


class QueryError(HailstormError, RuntimeError):
    """A live query could not be answered (the message says why and what to do)."""


@dataclass(frozen=True)
class QueryResult:
    """A bolt's values at one round: ``values`` by key (``missing``: keys it does not
    hold); for non-keyed state, ``values`` is ``{None: state}``."""

    topology: str
    bolt: str
    epoch: int
    clock: Clock
    source: str
    """Why this round: ``committed in ZooKeeper``, ``latest complete round``, ``--epoch``."""
    values: dict[Any, Any] = field(default_factory=dict)
    missing: list[Any] = field(default_factory=list)
    asked: tuple[Any, ...] = ()
    """The keys in the order asked (the lines come in that order)."""

    def to_json_lines(self) -> list[str]:
        """One JSON object per key, in the order asked: ``key``, ``value`` (null when
        missing), ``found``, ``epoch``, ``clock``."""
        common = {"epoch": self.epoch, "clock": clock_to_json(self.clock)}
        return _in_order(_lines(self.values, self.missing, common, self.asked))


def _lines(values: Mapping[Any, Any], missing: Sequence[Any], common: Mapping[str, Any],
           asked: Sequence[Any]) -> list[tuple[int, str]]:
    """The JSON line of each of ``values`` and ``missing`` keys (with ``common``), each
    with its key's :func:`_asked_position`."""
    rows = [(k, {"key": jsonable(k), "value": jsonable(v), "found": True})
            for k, v in values.items()]
    rows += [(k, {"key": jsonable(k), "value": None, "found": False}) for k in missing]
    return [(_asked_position(key, asked),
             json.dumps({**row, **common}, separators=(",", ":"), ensure_ascii=False))
            for key, row in rows]


def _in_order(lines: list[tuple[int, str]]) -> list[str]:
    """``lines`` by position (stable: lines of keys not asked keep their order, last)."""
    return [line for _position, line in sorted(lines, key=lambda pair: pair[0])]


def _asked_position(key: Any, asked: Sequence[Any]) -> int:
    """Where ``key`` stands among the keys ``asked`` (``len(asked)`` when it does not)."""
    for position, wanted in enumerate(asked):
        if wanted == key:
            return position
    return len(asked)


def parse_key(text: str, bolt: BoltSpec) -> Any:
    """A key typed on the command line: JSON when it parses to a key the bolt's state can
    hold (``42``, ``["fr", 3]`` as a tuple), else the text itself."""
    state = bolt.state
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, list):
        value = tuple(value)
    check = getattr(state, "check_key", None) if isinstance(state, KeyedMap) else None
    if check is None:
        return value if not isinstance(value, dict) else text
    try:
        check(value)
    except (TypeError, ValueError):
        return text
    return value


def query_committed(store: SnapshotStore, topology: str, bolt: BoltSpec,
                    keys: Sequence[Any] | None = None, *, zk: str | None = None,
                    epoch: int | None = None) -> QueryResult:
    """``bolt``'s state in the committed round (or round ``epoch``, else the latest
    complete one), for ``keys`` or all of it."""
    chosen = choose_round(store, topology, bolt.name, epoch=epoch, zk=zk)
    refs = chosen.refs
    parallelism = refs[0].parallelism
    result = QueryResult(topology, bolt.name, chosen.epoch, dict(chosen.clock), chosen.source,
                         asked=tuple(keys or ()))
    if not isinstance(bolt.state, KeyedMap):
        states = [store.load(ref, bolt.state)[1] for ref in refs]
        whole = states[0] if len(states) == 1 else bolt.state.combine_all(states)
        result.values[None] = whole
        return result
    def load(ref: Any) -> dict[Any, Any]:
        state: dict[Any, Any] = store.load(ref, bolt.state)[1]
        if bolt.drops_keys:
            assert bolt.window is not None  # late data needs windows or a ttl
            forget_dropped(bolt.window, state)  # keys a delta records as dropped
        return state

    if keys is None:
        for ref in refs:
            result.values.update(load(ref))
        return result
    by_instance: dict[int, list[Any]] = {}
    for key in keys:
        by_instance.setdefault(route(key, parallelism), []).append(key)
    for instance, wanted in sorted(by_instance.items()):
        state = load(refs[instance])
        for key in wanted:
            if key in state:
                result.values[key] = state[key]
            else:
                result.missing.append(key)
    return result


@dataclass(frozen=True)
class LiveAnswer:
    """What one running bolt instance answered."""

    processor: str
    epoch: int
    """The latest round whose clock the instance knows."""
    through: Clock | None
    """Its low water mark: every record up to it is in the values (None: an upstream has
    not sent a watermark yet)."""
    absorbed: Clock
    """No record beyond it is in the values."""
    values: dict[Any, Any] = field(default_factory=dict)
    missing: list[Any] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """The values are exactly the state at :attr:`through`."""
        return self.through is not None and dominates(self.through, self.absorbed)


@dataclass(frozen=True)
class LiveResult:
    """A bolt's live values: one :class:`LiveAnswer` per instance asked."""

    topology: str
    bolt: str
    answers: list[LiveAnswer]
    asked: tuple[Any, ...] = ()
    """The keys in the order asked (the lines come in that order)."""

    @property
    def values(self) -> dict[Any, Any]:
        return {k: v for answer in self.answers for k, v in answer.values.items()}

    @property
    def missing(self) -> list[Any]:
        return [k for answer in self.answers for k in answer.missing]

    def to_json_lines(self) -> list[str]:
        """One JSON object per key, in the order asked: ``key``, ``value`` (null when
        missing), ``found``, ``processor``, ``epoch``, ``clock`` (the instance's low water
        mark), ``absorbed`` and ``exact``."""
        lines: list[tuple[int, str]] = []
        for answer in self.answers:
            common = {"processor": answer.processor, "epoch": answer.epoch,
                      "clock": None if answer.through is None else clock_to_json(answer.through),
                      "absorbed": clock_to_json(answer.absorbed), "exact": answer.exact}
            lines += _lines(answer.values, answer.missing, common, self.asked)
        return _in_order(lines)


def query_live(zk: str, topology: str, bolt: BoltSpec, keys: Sequence[Any] | None,
               secret: RunSecret, *, timeout: float = 10.0) -> LiveResult:
    """``bolt``'s current values of ``keys``, asked of the instances that own them in the
    running round (``keys`` None: the whole state of a bolt without keyed state).

    Raises :class:`QueryError` when the topology does not run, an owner is not serving
    (the topology is restarting: ask again), or an instance refuses the secret.
    """
    from hailstorm.status import Collector

    if keys is None and bolt.keyed:
        raise QueryError(f"bolt {bolt.name!r} keeps a state per key: name the keys to ask "
                         "for (the committed round, without --live, lists every key)")
    collector = Collector(zk, None, None, timeout=timeout)
    try:
        inputs = collector.read(topology)
    finally:
        collector.close()
    if inputs.master is None:
        raise QueryError(f"topology {topology!r} has no master state in ZooKeeper at {zk}: "
                         "it is not running")
    wanted: dict[int, list[Any] | None] = {}
    if keys is None:
        wanted = {i: None for i in range(bolt.parallelism)}
    else:
        for key in keys:
            instances = wanted.setdefault(route(key, bolt.parallelism), [])
            assert instances is not None
            instances.append(key)
    answers = []
    for instance, instance_keys in sorted(wanted.items()):
        processor = f"bolt:{bolt.name}:{instance}"
        report = inputs.reports.get(processor)
        if report is None or "port" not in report.info:
            raise QueryError(f"{processor} is not serving (the topology is starting or "
                             "recovering): ask again, or drop --live to read the committed "
                             "round")
        address = (str(report.info["host"]), int(report.info["port"]))
        fields = _ask(address, processor, secret, Query(bolt.name, instance, instance_keys),
                      timeout)
        if fields.get("error"):
            raise QueryError(f"{processor} at {address[0]}:{address[1]}: {fields['error']}")
        answers.append(LiveAnswer(processor, int(fields["epoch"]), fields["through"],
                                  fields["absorbed"], fields["values"], fields["missing"]))
    if keys is None and len(answers) > 1:  # unkeyed state: one partial state per instance
        whole = bolt.state.combine_all([a.values[None] for a in answers])
        first = answers[0]
        answers = [LiveAnswer(
            ",".join(a.processor for a in answers), first.epoch,
            _lowest([a.through for a in answers]),
            merge_max(*(a.absorbed for a in answers)), {None: whole})]
    return LiveResult(topology, bolt.name, answers, asked=tuple(keys or ()))


def _lowest(clocks: list[Clock | None]) -> Clock | None:
    """The low water mark of ``clocks`` over every partition any has (None if one is)."""
    present = [c for c in clocks if c is not None]
    if len(present) < len(clocks):
        return None
    return low_water_mark(present, set().union(*present))


def _ask(address: tuple[str, int], processor: str, secret: RunSecret, query: Query,
         timeout: float) -> dict[str, Any]:
    """Send ``query`` to ``processor`` at ``address`` over TLS; its ANSWER's fields."""
    where = f"{address[0]}:{address[1]}"
    try:
        with socket.create_connection(address, timeout=timeout) as plain, \
                greet_peer(plain, secret, QUERY_IDENTITY, processor, timeout) as sock:
            sock.settimeout(timeout)
            try:
                request = encode_frames([query], max_frame_size=MAX_REQUEST_SIZE)
            except FrameTooLargeError:
                raise QueryError(f"the query for {len(query.keys or ())} keys is over "
                                 f"{MAX_REQUEST_SIZE} bytes, more than an instance reads: ask "
                                 "for fewer keys at once") from None
            sock.sendall(request)
            reader = FrameReader()
            while True:
                frames = recv_frames(sock, reader)
                if not frames:
                    raise QueryError(f"{where} closed the connection without an answer")
                if isinstance(frames[0], Answer):
                    return frames[0].fields
                raise QueryError(f"{where} answered with a {type(frames[0]).__name__} frame")
    except AuthError as exc:
        raise QueryError(f"{where} did not accept the secret ({exc}): give the query the "
                         "run's $HAILSTORM_SECRET_FILE") from None
    except (OSError, FrameError) as exc:
        raise QueryError(f"asking {where}: {exc}") from None
