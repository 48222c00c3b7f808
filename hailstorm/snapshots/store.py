"""The snapshot store's shared logic, whatever holds the files: storing a round's state
(:meth:`SnapshotStore.put`), loading it back through delta chains, re-sharding and reading
snapshots as JSON rows (:func:`jsonable`); garbage collection that keeps every file a kept
round builds on is its base's, :mod:`.collection`. Subclasses (:mod:`.directory`,
:mod:`.object_store`) only move bytes; the file format is :mod:`.format`'s.

Re-sharding: state is keyed by *key*, not by instance index.
:meth:`SnapshotStore.load_for_instance` rebuilds the state of instance ``i`` of ``n`` from
all the files of a round, keeping the keys ``route(key, n) == i``; the parallelism of a bolt
can change between runs.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import time
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from itertools import islice
from typing import IO, Any

import fastavro

from hailstorm.monoids import KeyedMap, Monoid
from hailstorm.protocol.clock import Clock
from hailstorm.routing import route as default_route
from hailstorm.snapshots.as_json import jsonable
from hailstorm.snapshots.collection import SnapshotCollection
from hailstorm.snapshots.evolution import evolved_reader
from hailstorm.snapshots.format import (
    SnapshotCorruptError,
    SnapshotError,
    SnapshotMismatchError,
    SnapshotRef,
    SnapshotRefRefused,
    _Header,
    _read_header,
    _verify,
    snapshot_key,
    snapshot_key_problem,
    write_snapshot,
)
from hailstorm.snapshots.layouts import (
    COLUMN_LAYOUTS,
    KEY_COLUMNS_KEY,
    LAYOUT_WHOLE,
    VALUE_COLUMN_LAYOUTS,
    ValueColumnsReader,
    keys_of_column,
    layout_schema,
    same_kind_of_layout,
    written_schema,
)

_CHUNK_KEYS = 4096  # keys converted from Avro per monoid call when loading

RouteFunction = Callable[[Any, int], int]

Migrate = Callable[[Any], Any]
"""A bolt's ``migrate=``: an old value, as its writer's schema decodes it -> the new state."""


def _converter(ref: SnapshotRef, monoid: Monoid[Any], migrate: Migrate | None) -> Migrate | None:
    """``migrate`` when ``ref`` holds state of another monoid than ``monoid``, else None."""
    return migrate if migrate is not None and ref.monoid != monoid.describe() else None


def _merge_into(monoid: Monoid[Any], state: dict[Any, Any], part: dict[Any, Any]) -> Any:
    """``state`` absorbing ``part`` (both owned by the caller); fast path for new keys."""
    if state.keys().isdisjoint(part):
        state.update(part)
        return state
    return monoid.absorb(state, part)


def _check_distinct(ref: SnapshotRef, state: dict[Any, Any]) -> None:
    """A full keyed snapshot names each key once: its records went into ``state`` with
    ``dict.update``, so a key named twice shows as fewer keys than records (corrupt)."""
    if len(state) != ref.records:
        raise SnapshotCorruptError(ref.uri, f"{ref.records} records, but {len(state)} "
                                   "distinct keys")


def refs_still_there(locators: Iterable[Any],
                     read: Callable[[Any], SnapshotRef]) -> list[SnapshotRef]:
    """``read`` of every listed file, sorted by bolt, instance and epoch, but for those
    deleted between the listing and the read: the negotiator's garbage collection runs
    beside a listing (``hailstorm snapshots``, a running topology)."""
    refs = []
    for locator in locators:
        try:
            refs.append(read(locator))
        except FileNotFoundError:
            continue
    return sorted(refs, key=lambda r: (r.bolt, r.instance, r.epoch))


class SnapshotStore(SnapshotCollection):
    """Where bolts keep their snapshots. Subclasses provide storage; the format is shared.

    Methods taking a snapshot accept a :class:`SnapshotRef` or its key/URI string (as
    recorded in ZooKeeper).
    """

    def put(
        self,
        *,
        topology: str,
        bolt: str,
        instance: int,
        parallelism: int,
        epoch: int,
        clock: Clock,
        monoid: Monoid[Any],
        state: Any,
        base: SnapshotRef | None = None,
    ) -> SnapshotRef:
        """Durably and atomically store ``state`` as the snapshot of this round; with
        ``base`` (an earlier snapshot of the same instance in this store) as a delta
        holding only the keys whose values changed since ``base``."""
        started = time.perf_counter()
        key = snapshot_key(topology, bolt, instance, epoch)
        if base is not None and (
            (base.topology, base.bolt, base.instance, base.parallelism)
            != (topology, bolt, instance, parallelism) or base.epoch >= epoch
        ):
            raise ValueError(f"{base.uri} cannot be the base of {key}: it is of another bolt "
                             "instance or parallelism, or not of an earlier round")

        def write(raw: IO[bytes]) -> str:
            return write_snapshot(raw, topology=topology, bolt=bolt, instance=instance,
                                  parallelism=parallelism, epoch=epoch, clock=clock,
                                  monoid=monoid, state=state,
                                  base=None if base is None else base.key)[1]

        ref = self._store(key, write)
        return replace(ref, duration_s=time.perf_counter() - started)

    @abstractmethod
    def _store(self, key: str, write: Callable[[IO[bytes]], str]) -> SnapshotRef:
        """Make the file ``write`` writes (to an empty seekable stream; it returns the
        checksum) the snapshot at ``key``, durably and atomically, never overwriting
        other content; return its ref."""

    @abstractmethod
    def open(self, ref: SnapshotRef) -> IO[bytes]:
        """The snapshot's bytes as a seekable binary stream (the caller closes it)."""

    @abstractmethod
    def resolve(self, location: str) -> SnapshotRef:
        """The snapshot at ``location`` (a key or URI of this store), from its header."""

    @abstractmethod
    def list(self, topology: str) -> list[SnapshotRef]:
        """Every snapshot of ``topology``, sorted by (bolt, instance, epoch)."""

    def delete(self, ref: SnapshotRef | str) -> None:
        """Remove one snapshot (no error if already gone); anything but a snapshot file of
        the store (:func:`~.format.snapshot_key_problem`) is :class:`SnapshotRefRefused`."""
        location = ref.uri if isinstance(ref, SnapshotRef) else ref
        key = self._store_key(location)
        self.owned_key(key, key.split("/", 1)[0])
        self._remove([self._locator(key)])

    def owned_key(self, location: str, topology: str,
                  epochs: Collection[int] | None = None) -> str:
        """The key of the snapshot file ``location`` (a ref: a key or URI of this store)
        names, checked to be inside the store, of a snapshot's shape, of ``topology`` (and
        of one of ``epochs``, when given); else :class:`SnapshotRefRefused`."""
        key = self._store_key(location)
        problem = snapshot_key_problem(key, topology, epochs)
        if problem is not None:
            raise SnapshotRefRefused(f"snapshot ref {location!r}: {problem}: refused")
        return key

    @abstractmethod
    def _store_key(self, location: str) -> str:
        """The store-relative key ``location`` (a key or URI) names;
        :class:`SnapshotRefRefused` for anything outside the store."""

    @abstractmethod
    def _locator(self, key: str) -> Any:
        """What :meth:`_remove` takes for the file at ``key``."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is (a directory or a URL), for messages."""

    # -- built on the primitives -------------------------------------------------------

    def has_topology(self, topology: str) -> bool:
        """True when some snapshot file of ``topology`` is in the store."""
        return next(iter(self._files(topology)), None) is not None

    def _ref(self, ref: SnapshotRef | str) -> SnapshotRef:
        return ref if isinstance(ref, SnapshotRef) else self.resolve(ref)

    @contextlib.contextmanager
    def _verified(self, ref: SnapshotRef) -> Iterator[tuple[IO[bytes], _Header]]:
        with self.open(ref) as fo:
            header = _read_header(fo, ref.uri)
            _verify(fo, ref.uri, header)
            fo.seek(0)
            yield fo, header

    def verify(self, ref: SnapshotRef | str) -> SnapshotRef:
        """Check the checksum of a snapshot; raises :class:`SnapshotCorruptError`."""
        ref = self._ref(ref)
        with self._verified(ref):
            return ref

    def _record_chunks(self, ref: SnapshotRef, monoid: Monoid[Any] | None,
                       migrate: Migrate | None = None, size: int = _CHUNK_KEYS,
                       *, raw: bool = False) -> Iterator[builtins.list[Any]]:
        """Verified raw Avro records of ``ref``, ``size`` at a time (checked against
        ``monoid`` when given: state of another type reads with ``monoid``'s schema when
        Avro schema resolution carries it, as written when ``migrate`` will convert it).
        Taken in chunks by ``islice``: no Python step per record (a reload's bulk). The
        records of the column layouts are counted by :meth:`_columns`, and those of
        ``per_key_field_columns`` and ``per_key_nested_columns`` come as
        ``per_key_columns`` records; with ``raw``, those of a ``per_key_nested_columns``
        file read as written (nothing to resolve or convert) as ``{keys, column}``
        (:class:`ValueColumnsReader`)."""
        with self._verified(ref) as (fo, header):
            entry = None
            if monoid is not None:
                entry = evolved_reader(ref, header, monoid, converting=migrate is not None)
            key_columns = header.meta.get(KEY_COLUMNS_KEY) == "1"
            reader = fields = None
            keys_read = None
            if ref.layout in VALUE_COLUMN_LAYOUTS:  # read as written, resolved by entries
                fields = ValueColumnsReader(written_schema(ref.layout, header.meta), entry,
                                            ref.layout, raw=raw and migrate is None,
                                            key_columns=key_columns)
            else:
                if entry is not None:
                    reader = layout_schema(entry, ref.layout, key_columns)
                if key_columns:  # as a list of keys, of the schema they were read with
                    keys_read = entry or written_schema(ref.layout, header.meta)
            count = 0
            try:
                records: Iterator[Any] = iter(fastavro.reader(fo, reader_schema=reader))
                while chunk := list(islice(records, size)):
                    count += len(chunk)
                    if fields is not None:
                        chunk = list(map(fields.entries, chunk))
                    elif keys_read is not None:
                        chunk = [{**r, "keys": keys_of_column(keys_read, r["keys"])}
                                 for r in chunk]
                    yield chunk
            except Exception as e:  # broad: fastavro on corrupt records raises almost anything
                raise SnapshotCorruptError(ref.uri, f"unreadable records ({e})") from e
            if ref.layout not in COLUMN_LAYOUTS and count != ref.records:
                raise SnapshotCorruptError(ref.uri, f"{count} records, header says {ref.records}")

    def _records(self, ref: SnapshotRef, monoid: Monoid[Any] | None,
                 migrate: Migrate | None = None) -> Iterator[Any]:
        """The raw Avro records of ``ref`` (see :meth:`_record_chunks`) a record at a
        time; keyed state as ``{key, value}`` entries whatever its layout."""
        if ref.layout == LAYOUT_WHOLE:
            for chunk in self._record_chunks(ref, monoid, migrate):
                yield from chunk
            return
        for keys, values, _ in self._columns(ref, monoid, migrate):
            for key, value in zip(keys, values, strict=True):
                yield {"key": key, "value": value}

    def _columns(self, ref: SnapshotRef, monoid: Monoid[Any] | None,
                 migrate: Migrate | None = None, *, raw: bool = False
                 ) -> Iterator[tuple[Any, Any, bool]]:
        """The raw Avro keys and values of keyed ``ref``, a chunk at a time, in any
        keyed layout (see :meth:`_record_chunks`; ``ref.records`` counts the keys), and
        whether the values are one column (``raw``, where the file allows it) rather than
        a list of values."""
        if ref.layout not in COLUMN_LAYOUTS:
            for chunk in self._record_chunks(ref, monoid, migrate):
                yield [e["key"] for e in chunk], [e["value"] for e in chunk], False
            return
        keys = 0
        for chunk in self._record_chunks(ref, monoid, migrate, size=1, raw=raw):
            for record in chunk:
                if "column" in record:  # checked to hold a value for every key
                    keys += len(record["keys"])
                    yield record["keys"], record["column"], True
                    continue
                column, values = record["keys"], record["values"]
                if len(column) != len(values):
                    raise SnapshotCorruptError(ref.uri, f"a record of {len(column)} keys "
                                               f"and {len(values)} values")
                keys += len(column)
                yield column, values, False
        if keys != ref.records:
            raise SnapshotCorruptError(ref.uri, f"{keys} keys, header says {ref.records}")

    def writer_schema(self, ref: SnapshotRef | str) -> Any:
        """The Avro schema ``ref``'s records were written with (from its header); for
        keyed state, that of its ``{key, value}`` entries whatever the file's layout."""
        ref = self._ref(ref)
        with self.open(ref) as fo:
            return written_schema(ref.layout, _read_header(fo, ref.uri).meta)

    def _keyed_parts(self, ref: SnapshotRef, monoid: Monoid[Any],
                     migrate: Migrate | None = None) -> Iterator[dict[Any, Any]]:
        convert = _converter(ref, monoid, migrate)
        for keys, values, column in self._columns(ref, monoid, convert, raw=True):
            if not isinstance(monoid, KeyedMap):  # what reading checked: never raised
                raise SnapshotMismatchError(f"{ref.uri} holds keyed state, not "
                                            f"{monoid.describe()}")
            if column:  # the states of the values' column, built at once
                yield monoid.from_avro_nested_columns(keys, values)
                continue
            if convert is not None:
                values = [monoid.inner.to_avro(convert(v)) for v in values]
            yield monoid.from_avro_columns(keys, values)

    def chain(self, ref: SnapshotRef | str) -> builtins.list[SnapshotRef]:
        """``ref`` and the snapshots it builds on, newest first (one ref for a full
        snapshot). A missing base, or one that cannot be this delta's, is reported as
        :class:`SnapshotCorruptError` of ``ref`` itself."""
        head = self._ref(ref)
        refs = [head]
        while (base := refs[-1].base) is not None:
            newer = refs[-1]
            try:
                older = self.resolve(base)
            except (SnapshotError, OSError, ValueError) as e:
                raise SnapshotCorruptError(head.uri, f"its base {base} cannot be read: {e}") \
                    from e
            if (older.topology, older.bolt, older.instance, older.parallelism,
                    older.monoid) != (newer.topology, newer.bolt, newer.instance,
                                      newer.parallelism, newer.monoid) \
                    or not same_kind_of_layout(older.layout, newer.layout) \
                    or older.epoch >= newer.epoch:
                raise SnapshotCorruptError(head.uri, f"its base {older.uri} is not an earlier "
                                           "snapshot of the same bolt instance")
            refs.append(older)
        return refs

    def load(self, ref: SnapshotRef | str, monoid: Monoid[Any],
             migrate: Migrate | None = None) -> tuple[Clock, Any]:
        """``(clock, state)`` of one snapshot (a delta with the snapshots it builds on),
        after verifying the checksum of every file read. A damaged file anywhere in a
        delta's chain raises :class:`SnapshotCorruptError` naming ``ref``. State of another
        monoid is read with ``monoid``'s schema (Avro schema resolution), or converted by
        ``migrate`` (old value -> new: per key for keyed state); else
        :class:`SnapshotMismatchError`."""
        ref = self._ref(ref)
        if ref.layout == LAYOUT_WHOLE:
            convert = _converter(ref, monoid, migrate)
            [record] = list(self._records(ref, monoid, convert))
            if convert is not None:
                return ref.clock, convert(record["state"])
            return ref.clock, monoid.from_avro(record["state"])
        state: dict[Any, Any] = {}
        links = self.chain(ref)
        for link in reversed(links):
            try:
                for part in self._keyed_parts(link, monoid, migrate):
                    state.update(part)  # a delta: whole new values of the keys that changed
                if link is links[-1]:
                    _check_distinct(link, state)
            except SnapshotCorruptError as e:
                if link is ref:
                    raise
                raise SnapshotCorruptError(ref.uri, f"it builds on {link.uri}: {e}") from e
        return ref.clock, state

    def load_after(self, ref: SnapshotRef | str, monoid: Monoid[Any], held: SnapshotRef,
                   state: dict[Any, Any]) -> tuple[Clock, Any] | None:
        """``(clock, state)`` of ``ref`` built on ``state``, the keyed state of ``held``, an
        earlier link of ``ref``'s chain: only the deltas after ``held`` are read, into
        ``state`` (the caller's, updated in place; partly, when this raises: drop it). What
        a standby does at each committed round. None when ``ref`` does not build on
        ``held`` with ``monoid``'s keyed state (load it with :meth:`load`): a whole
        snapshot, or a differential one on the whole one ``held`` builds on (nothing in its
        file tells it from an incarnation's first delta on that whole one, after a
        recovery that fell back to it, which does not hold what ``held`` changed)."""
        ref = self._ref(ref)
        if ref.layout == LAYOUT_WHOLE or ref.monoid != monoid.describe():
            return None
        links = self.chain(ref)
        keys = [link.key for link in links]
        if held.key not in keys:
            return None
        for link in reversed(links[:keys.index(held.key)]):
            for part in self._keyed_parts(link, monoid):
                state.update(part)  # a delta: whole new values of the keys that changed
        return ref.clock, state

    def load_for_instance(
        self,
        refs: Sequence[SnapshotRef | str],
        monoid: Monoid[Any],
        instance: int,
        parallelism: int,
        route: RouteFunction = default_route,
        migrate: Migrate | None = None,
    ) -> tuple[Clock, Any]:
        """``(clock, state)`` of instance ``instance`` of ``parallelism`` from one round.

        ``refs`` are the files of every instance of one round of one bolt, written with any
        parallelism. Keyed state keeps the keys with ``route(key, parallelism) ==
        instance`` from every file (with unchanged parallelism only the instance's own file
        is read: it holds exactly those keys). Non-keyed state cannot be split: it loads
        unchanged when the parallelism is unchanged, and is combined into one when the new
        parallelism is 1.
        """
        if not 0 <= instance < parallelism:
            raise ValueError(f"instance {instance} is out of range for parallelism {parallelism}")
        # Checksums first: a flipped byte in a header's metadata must read as a corrupt
        # file (the negotiator falls back a round), not as a round that does not fit.
        round_refs = _check_round([self.verify(r) for r in refs])
        old_parallelism = round_refs[0].parallelism
        clock = round_refs[0].clock
        if parallelism == old_parallelism:
            return clock, self.load(round_refs[instance], monoid, migrate)[1]
        if round_refs[0].layout == LAYOUT_WHOLE:
            if parallelism != 1:
                raise SnapshotMismatchError(
                    f"{monoid.describe()} is not keyed: its state cannot be re-sharded from "
                    f"{old_parallelism} to {parallelism} instances (only to 1)"
                )
            states = [self.load(r, monoid, migrate)[1] for r in round_refs]
            return clock, monoid.combine_all(states)
        state: dict[Any, Any] = {}
        for ref in round_refs:
            if ref.base is None:
                whole: dict[Any, Any] = {}
                for part in self._keyed_parts(ref, monoid, migrate):
                    whole.update(part)
                _check_distinct(ref, whole)
            else:
                whole = self.load(ref, monoid, migrate)[1]
            mine = {k: v for k, v in whole.items() if route(k, parallelism) == instance}
            state = _merge_into(monoid, state, mine)
        return clock, state

    def to_json_rows(
        self, ref: SnapshotRef | str, monoid: Monoid[Any] | None = None,
        forget: Callable[[dict[Any, Any]], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The snapshot's contents as JSON-able rows, streamed after verification.

        Keyed state gives ``{"key": ..., "value": ...}`` per key, other state one
        ``{"state": ...}`` row. With ``monoid`` values are decoded states (tuples as lists,
        bytes as base64); without, the raw Avro records. ``forget`` (with ``monoid``) is
        applied to a delta's loaded keyed state first: the keys a delta records as dropped
        (:func:`hailstorm.lateness.forget_dropped`) are not shown.
        """
        ref = self._ref(ref)
        if monoid is None and ref.base is not None:
            latest: dict[str, Any] = {}  # a delta's records replace its bases' by key
            for link in reversed(self.chain(ref)):
                for record in self._records(link, None):
                    latest[json.dumps(jsonable(record["key"]), sort_keys=True)] = record
            for record in latest.values():
                yield jsonable(record)
        elif monoid is None:
            for record in self._records(ref, None):
                yield jsonable(record)
        elif ref.base is not None:
            state = self.load(ref, monoid)[1]
            if forget is not None:
                forget(state)
            for k, v in state.items():
                yield {"key": jsonable(k), "value": jsonable(v)}
        elif ref.layout == LAYOUT_WHOLE:
            for record in self._records(ref, monoid):
                yield {"state": jsonable(monoid.from_avro(record["state"]))}
        else:
            for part in self._keyed_parts(ref, monoid):
                for k, v in part.items():
                    yield {"key": jsonable(k), "value": jsonable(v)}

    def latest_round(self, topology: str, bolt: str) -> builtins.list[SnapshotRef]:
        """The snapshots of the newest epoch of ``bolt`` (by instance; empty if none)."""
        refs = [r for r in self.list(topology) if r.bolt == bolt]
        if not refs:
            return []
        newest = max(r.epoch for r in refs)
        return [r for r in refs if r.epoch == newest]


def _check_round(refs: list[SnapshotRef]) -> list[SnapshotRef]:
    """``refs`` sorted by instance, after checking they are exactly one complete round."""
    if not refs:
        raise SnapshotMismatchError("no snapshots given")
    first = refs[0]
    for ref in refs:
        same_round = (ref.topology, ref.bolt, ref.epoch, ref.parallelism) == (
            first.topology,
            first.bolt,
            first.epoch,
            first.parallelism,
        )
        if not same_round or ref.clock != first.clock:
            raise SnapshotMismatchError(
                f"{ref.uri} and {first.uri} are not snapshots of the same round of one bolt"
            )
    ordered = sorted(refs, key=lambda r: r.instance)
    instances = [r.instance for r in ordered]
    if instances != list(range(first.parallelism)):
        raise SnapshotMismatchError(
            f"round {first.epoch} of {first.topology}/{first.bolt} needs instances "
            f"0..{first.parallelism - 1}, got {instances}"
        )
    return ordered
