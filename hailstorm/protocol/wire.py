"""The frame format processors exchange over TCP, plus small blocking socket helpers.

A connection carries a stream of frames. Every frame is a 5-byte header followed by its
payload::

    +----------------------------+------------+------------------------+
    | payload length: uint32 BE  | kind: u8   | payload (length bytes) |
    +----------------------------+------------+------------------------+

A payload larger than :data:`MAX_FRAME_SIZE` (64 MiB) is refused by both ends with
:class:`FrameTooLargeError`; senders split big batches instead. A connection's first frame
(HELLO or QUERY) may be at most :data:`MAX_REQUEST_SIZE` (1 MiB). The kinds:

==========  ==================================================================================
kind        payload
==========  ==================================================================================
HELLO       epoch int64 BE, two uint16 BE lengths, sender id, receiver id (UTF-8)
DATA        a columnar batch (below)
WATERMARK   epoch int64 BE, count uint32 BE, partition indices int32 LE[count],
            offsets int64 LE[count]
CLOCK       same layout as WATERMARK
CLOCK_PART  same layout: some parts of a barrier round's clock (each spout sends its
            partition's, and reads on)
BYE         empty
QUERY       one pickle of a dict: ``bolt`` (str), ``instance`` (int), ``keys`` (a list, or
            None for all)
ANSWER      one pickle of a dict: the instance's answer (:mod:`hailstorm.query`)
==========  ==================================================================================

QUERY opens a connection of its own instead of HELLO (``hailstorm query --live``, after the
same authentication as any peer); the bolt sends one ANSWER and closes it.

DATA: ``count uint32 BE, codec u8, partition indices int32 LE[count], origin offsets
int64 LE[count], tuples``. Partitions travel as small integers agreed through a
:class:`PartitionTable`; the two packed columns are copied straight from/to
:class:`array.array` with no per-tuple Python work. Codec 1: ``tuples`` is one pickle of
the list of tuples. Codec 2 (pre-aggregated contributions for a ``preaggregate`` bolt): one
pickle of ``(tuples, keys, values)``, three lists of ``count`` items.

Tuple encoding: the whole list of tuples is one ``pickle`` (protocol 5) blob. Measured with
``bench/wire_encoding.py`` (10k tuples per batch) against pickle 4, marshal and json:
marshal is ~1.4x faster on CPU but not exact (``bytearray``, ``memoryview`` and ``bytes``
subclasses silently come back as ``bytes``; namedtuples, enums, dataclasses, ``Decimal``,
``datetime`` are refused), json turns tuples into lists and refuses bytes. pickle is the
only candidate that round-trips every value user code may emit, and the most compact
(10.4 bytes per ``(word, count)`` tuple vs 12.7 for marshal); protocol 5 beats 4 on byte
buffers. A whole DATA frame of ``(word, count)`` tuples encodes+decodes at ~6.5 M tuples/s
(about 1.5 ms per 10k), a fraction of what processing them costs. A list of plain tuples
(rows, most tuples between bolts) is pickled without the memo (fast mode), which otherwise
records every tuple and string written, most of the cost for rows of distinct keys; it is
still one standard pickle, read the same way. The codec byte leaves room for another
encoding later.

Security: unpickling runs code chosen by whoever wrote the bytes, so no frame is read from
a peer that has not authenticated as a member of the run (:mod:`hailstorm.auth`: mutual
TLS 1.3 under the run's CA, completed before the first frame); TLS then protects every
frame's integrity and confidentiality. HELLO then names the sender within the run.

Integers in the packed columns are little-endian on the wire (byte-swapped on big-endian
hosts); header fields are big-endian.

Size: over 600 lines because it is one format: each frame's encoder sits next to its
decoder and the framing they share, and this docstring is the format's specification.
"""

from __future__ import annotations

import io
import pickle
import socket
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from hailstorm.errors import ProtocolError
from hailstorm.protocol.clock import Clock, Partition

__all__ = [
    "HEADER_SIZE",
    "MAX_FRAME_SIZE",
    "MAX_REQUEST_SIZE",
    "Answer",
    "Bye",
    "ClockMarker",
    "DataBatch",
    "Frame",
    "FrameError",
    "FrameKind",
    "FrameReader",
    "FrameTooLargeError",
    "Hello",
    "PartitionTable",
    "Query",
    "StreamEndedError",
    "Watermark",
    "decode_frame",
    "encode_frame",
    "encode_frames",
    "recv_frames",
    "send_frames",
]

MAX_FRAME_SIZE = 64 * 1024 * 1024
"""Largest accepted payload in bytes (the header is not counted)."""
MAX_REQUEST_SIZE = 1024 * 1024
"""Largest payload of a connection's first frame, its HELLO or QUERY, where a reader is
given it (``FrameReader(max_first_frame_size=...)``)."""

_HEADER = struct.Struct(">IB")
HEADER_SIZE = _HEADER.size
"""Bytes of a frame header: payload length (uint32 BE) and kind (u8)."""

_HELLO = struct.Struct(">qHH")
_MARKS = struct.Struct(">qI")
_DATA = struct.Struct(">IB")

_PICKLE_CODEC = 1
"""DATA codec byte: the tuple list is one pickle protocol 5 blob."""
_CONTRIBUTIONS_CODEC = 2
"""DATA codec byte: ``(tuples, keys, values)`` in one pickle protocol 5 blob."""
_PICKLE_PROTOCOL = 5
_FAST_PICKLE_CHECKED = MAX_FRAME_SIZE // 4
"""Bytes of a memo-less pickle of rows (:func:`_pickled_tuples`) past which the memo's is
made too, and the smaller sent (16 MiB: about 470,000 rows of ``(user, spent, events)``,
more than a flush holds)."""

_INDEX_TYPE = "i"  # int32
_OFFSET_TYPE = "q"  # int64
assert array(_INDEX_TYPE).itemsize == 4 and array(_OFFSET_TYPE).itemsize == 8
_SWAP = sys.byteorder != "little"

_RECV_CHUNK = 256 * 1024


class FrameKind(IntEnum):
    """The byte identifying a frame's kind."""

    HELLO = 1
    DATA = 2
    WATERMARK = 3
    CLOCK = 4
    BYE = 5
    QUERY = 6
    ANSWER = 7
    CLOCK_PART = 8


_KINDS = frozenset(int(k) for k in FrameKind)


class FrameError(ProtocolError, ValueError):
    """A byte stream is not a valid frame stream (unknown kind, corrupted payload...);
    ``frame_kind``: the kind of the frame whose payload did not decode, when known."""

    def __init__(self, message: str, frame_kind: FrameKind | None = None) -> None:
        super().__init__(message)
        self.frame_kind = frame_kind


class FrameTooLargeError(FrameError):
    """A frame payload exceeds the maximum frame size."""


class StreamEndedError(FrameError):
    """The peer closed its connection in the middle of a frame."""


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Hello:
    """First frame on a connection: who is talking to whom, in which epoch."""

    sender: str
    epoch: int
    receiver: str


@dataclass
class DataBatch:
    """A batch of tuples with their origins, stored as columns.

    ``partitions[i]`` (a :class:`PartitionTable` index) and ``offsets[i]`` are the origin of
    ``tuples[i]``. Decoded batches hold ``array('i')`` and ``array('q')`` columns; when
    building one, plain lists work too (:meth:`of` converts them).

    A batch of pre-aggregated contributions also has ``keys`` and ``values`` (both or
    neither; see :class:`hailstorm.processors.Contributions`).
    """

    partitions: Sequence[int]
    offsets: Sequence[int]
    tuples: list[Any]
    keys: list[Any] | None = None
    values: list[Any] | None = None

    def __post_init__(self) -> None:
        n = len(self.tuples)
        if len(self.partitions) != n or len(self.offsets) != n:
            raise ValueError(
                f"DataBatch columns differ in length: {len(self.partitions)} partitions, "
                f"{len(self.offsets)} offsets, {n} tuples"
            )
        if (self.keys is None) != (self.values is None):
            raise ValueError("a DataBatch of contributions needs both keys and values")
        if self.keys is not None and not len(self.keys) == len(self.values or ()) == n:
            raise ValueError(
                f"DataBatch columns differ in length: {n} tuples, {len(self.keys)} keys, "
                f"{len(self.values or ())} values"
            )

    @classmethod
    def of(
        cls,
        partitions: Iterable[int],
        offsets: Iterable[int],
        tuples: Iterable[Any],
        keys: Iterable[Any] | None = None,
        values: Iterable[Any] | None = None,
    ) -> DataBatch:
        """A batch whose columns are packed arrays (the cheapest form to encode)."""
        return cls(
            array(_INDEX_TYPE, partitions),
            array(_OFFSET_TYPE, offsets),
            list(tuples),
            None if keys is None else list(keys),
            None if values is None else list(values),
        )

    @property
    def contributions(self) -> bool:
        """True for pre-aggregated contributions (``keys`` and ``values`` are set)."""
        return self.values is not None

    def __len__(self) -> int:
        return len(self.tuples)

    def rows(self) -> Iterator[tuple[int, int, Any]]:
        """``(partition index, offset, tuple)`` for every tuple, in order."""
        return zip(self.partitions, self.offsets, self.tuples, strict=True)


@dataclass(frozen=True)
class Watermark:
    """The sender has sent every tuple it will ever send with origin ``offset <= W[p]``.

    ``watermark`` maps partition indices to offsets; a partition absent from it is one the
    sender never sends tuples of.
    """

    epoch: int
    watermark: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ClockMarker:
    """The snapshot clock of ``epoch`` (partition index -> last included offset), or with
    ``partial`` the parts of it the sender knows (CLOCK_PART).

    Ordered on the same connection as the data: every DATA frame after it may carry tuples
    beyond the clock (beyond its parts).
    """

    epoch: int
    clock: dict[int, int] = field(default_factory=dict)
    partial: bool = False


@dataclass(frozen=True)
class Bye:
    """Last frame on a connection: the sender closes it on purpose."""


@dataclass(frozen=True)
class Query:
    """A live query: the values of ``keys`` (None: all) held by a bolt instance."""

    bolt: str
    instance: int
    keys: list[Any] | None = None


@dataclass(frozen=True)
class Answer:
    """A bolt instance's answer to a :class:`Query` (fields: :mod:`hailstorm.query`)."""

    fields: dict[str, Any]


Frame = Hello | DataBatch | Watermark | ClockMarker | Bye | Query | Answer
"""Any decoded frame."""


# --------------------------------------------------------------------------- partitions


class PartitionTable:
    """Maps source partitions ``(topic, n)`` to the small integers used on the wire.

    Both ends build it from the same set of partitions (from the topology and the broker's
    metadata); partitions are sorted, so the order they are given in does not matter.
    """

    def __init__(self, partitions: Iterable[Partition]) -> None:
        ordered = sorted(set(partitions))
        self._partitions: tuple[Partition, ...] = tuple(ordered)
        self._index = {p: i for i, p in enumerate(ordered)}

    @property
    def partitions(self) -> tuple[Partition, ...]:
        """Partitions in index order."""
        return self._partitions

    def __len__(self) -> int:
        return len(self._partitions)

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._partitions)

    def __contains__(self, partition: object) -> bool:
        return partition in self._index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionTable) and self._partitions == other._partitions

    def __hash__(self) -> int:
        return hash(self._partitions)

    def __repr__(self) -> str:
        return f"PartitionTable({list(self._partitions)!r})"

    def index(self, partition: Partition) -> int:
        """The wire index of ``partition``."""
        try:
            return self._index[partition]
        except KeyError:
            raise KeyError(f"partition {partition!r} is not in the partition table") from None

    def partition(self, index: int) -> Partition:
        """The partition with wire index ``index``."""
        if not 0 <= index < len(self._partitions):
            raise KeyError(f"partition index {index} is out of range 0..{len(self) - 1}")
        return self._partitions[index]

    def to_wire(self, clock: Mapping[Partition, int]) -> dict[int, int]:
        """A clock or watermark keyed by partition -> the same keyed by wire index."""
        return {self.index(p): offset for p, offset in clock.items()}

    def from_wire(self, indexed: Mapping[int, int]) -> Clock:
        """Inverse of :meth:`to_wire`."""
        return {self.partition(i): offset for i, offset in indexed.items()}


# --------------------------------------------------------------------------- encoding


def _le(column: array[int]) -> array[int]:
    if _SWAP:
        column = array(column.typecode, column)
        column.byteswap()
    return column


def _column(values: Sequence[int], typecode: str) -> array[int]:
    if isinstance(values, array) and values.typecode == typecode:
        return _le(values)
    return _le(array(typecode, values))


def _marks_parts(epoch: int, marks: Mapping[int, int]) -> list[Any]:
    indices = sorted(marks)
    offsets = [marks[i] for i in indices]
    return [
        _MARKS.pack(epoch, len(indices)),
        _column(indices, _INDEX_TYPE),
        _column(offsets, _OFFSET_TYPE),
    ]


def _pickled_tuples(tuples: list[Any]) -> bytes:
    """``pickle.dumps(tuples)``; a list of ``tuple`` (rows, most tuples between bolts)
    without the pickler's memo (:attr:`pickle.Pickler.fast`), which otherwise records
    every tuple and string it writes: 0.07 us a ``(user, spent, events)`` row instead of
    0.45, and fewer bytes, as rows seldom share an object. A value written twice arrives
    as two equal objects, not one; a cyclic value (which fast mode refuses) and any other
    list are pickled with the memo, as dicts share their field names. A fast pickle over
    :data:`_FAST_PICKLE_CHECKED` bytes is pickled with the memo too, and the smaller kept:
    rows sharing a large value would otherwise repeat it past the frame size limit."""
    if set(map(type, tuples)) <= {tuple}:
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=_PICKLE_PROTOCOL)
        pickler.fast = True
        try:
            pickler.dump(tuples)
        except ValueError:  # a cycle: refused in fast mode, which the memo pickles
            pass
        else:
            fast = buffer.getvalue()
            if len(fast) <= _FAST_PICKLE_CHECKED:
                return fast
            memo = pickle.dumps(tuples, protocol=_PICKLE_PROTOCOL)
            return fast if len(fast) <= len(memo) else memo
    return pickle.dumps(tuples, protocol=_PICKLE_PROTOCOL)


def _payload_parts(frame: Frame) -> tuple[FrameKind, list[Any]]:
    """The kind of ``frame`` and the bytes-like pieces of its payload."""
    if isinstance(frame, DataBatch):
        tuples = frame.tuples if type(frame.tuples) is list else list(frame.tuples)
        if not len(frame.partitions) == len(frame.offsets) == len(tuples):
            raise ValueError("DataBatch columns differ in length")
        if frame.keys is None or frame.values is None:
            codec, blob = _PICKLE_CODEC, _pickled_tuples(tuples)
        else:
            keys, values = list(frame.keys), list(frame.values)
            if not len(keys) == len(values) == len(tuples):
                raise ValueError("DataBatch columns differ in length")
            codec = _CONTRIBUTIONS_CODEC
            blob = pickle.dumps((tuples, keys, values), protocol=_PICKLE_PROTOCOL)
        return FrameKind.DATA, [
            _DATA.pack(len(tuples), codec),
            _column(frame.partitions, _INDEX_TYPE),
            _column(frame.offsets, _OFFSET_TYPE),
            blob,
        ]
    if isinstance(frame, Watermark):
        return FrameKind.WATERMARK, _marks_parts(frame.epoch, frame.watermark)
    if isinstance(frame, ClockMarker):
        return FrameKind.CLOCK_PART if frame.partial else FrameKind.CLOCK, \
            _marks_parts(frame.epoch, frame.clock)
    if isinstance(frame, Hello):
        sender = frame.sender.encode("utf-8")
        receiver = frame.receiver.encode("utf-8")
        if len(sender) > 0xFFFF or len(receiver) > 0xFFFF:
            raise FrameError("HELLO processor ids must be at most 65535 bytes")
        return FrameKind.HELLO, [
            _HELLO.pack(frame.epoch, len(sender), len(receiver)),
            sender,
            receiver,
        ]
    if isinstance(frame, Bye):
        return FrameKind.BYE, []
    if isinstance(frame, Query):
        request = {"bolt": frame.bolt, "instance": frame.instance, "keys": frame.keys}
        return FrameKind.QUERY, [pickle.dumps(request, protocol=_PICKLE_PROTOCOL)]
    if isinstance(frame, Answer):
        return FrameKind.ANSWER, [pickle.dumps(frame.fields, protocol=_PICKLE_PROTOCOL)]
    raise TypeError(f"not a frame: {frame!r}")


def _frame_parts(frame: Frame, max_frame_size: int) -> list[Any]:
    kind, parts = _payload_parts(frame)
    length = sum(memoryview(p).nbytes for p in parts)
    if length > max_frame_size:
        raise FrameTooLargeError(
            f"{kind.name} frame payload is {length} bytes, over the {max_frame_size}-byte "
            "limit: send smaller batches"
        )
    parts.insert(0, _HEADER.pack(length, kind))
    return parts


def encode_frame(frame: Frame, *, max_frame_size: int = MAX_FRAME_SIZE) -> bytes:
    """The bytes of one frame, header included."""
    return b"".join(_frame_parts(frame, max_frame_size))


def encode_frames(frames: Iterable[Frame], *, max_frame_size: int = MAX_FRAME_SIZE) -> bytes:
    """The bytes of several frames, back to back."""
    parts: list[Any] = []
    for frame in frames:
        parts += _frame_parts(frame, max_frame_size)
    return b"".join(parts)


# --------------------------------------------------------------------------- decoding


def _read_column(payload: memoryview, start: int, count: int, typecode: str) -> array[int]:
    column = array(typecode)
    stop = start + count * column.itemsize
    if stop > len(payload):
        raise FrameError("payload is shorter than its columns")
    column.frombytes(payload[start:stop])
    if _SWAP:
        column.byteswap()
    return column


def _decode_marks(payload: memoryview) -> tuple[int, dict[int, int]]:
    epoch, count = _MARKS.unpack_from(payload, 0)
    start = _MARKS.size
    indices = _read_column(payload, start, count, _INDEX_TYPE)
    start += 4 * count
    offsets = _read_column(payload, start, count, _OFFSET_TYPE)
    if start + 8 * count != len(payload):
        raise FrameError("trailing bytes after the offsets")
    marks = dict(zip(indices, offsets, strict=True))
    if len(marks) != count:
        raise FrameError("duplicate partition index")
    return epoch, marks


def _decode_data(payload: memoryview) -> DataBatch:
    count, codec = _DATA.unpack_from(payload, 0)
    if codec not in (_PICKLE_CODEC, _CONTRIBUTIONS_CODEC):
        raise FrameError(f"unknown tuple codec {codec}")
    start = _DATA.size
    partitions = _read_column(payload, start, count, _INDEX_TYPE)
    start += 4 * count
    offsets = _read_column(payload, start, count, _OFFSET_TYPE)
    start += 8 * count
    try:
        blob = pickle.loads(payload[start:])
    except Exception as e:  # unpickling garbage can raise almost anything
        raise FrameError(f"undecodable tuples ({type(e).__name__}: {e})") from e
    if codec == _PICKLE_CODEC:
        if type(blob) is not list or len(blob) != count:
            raise FrameError(f"tuple blob does not hold a list of {count} tuples")
        return DataBatch(partitions, offsets, blob)
    if (type(blob) is not tuple or len(blob) != 3
            or any(type(c) is not list or len(c) != count for c in blob)):
        raise FrameError(f"contribution blob does not hold three lists of {count} items")
    tuples, keys, values = blob
    return DataBatch(partitions, offsets, tuples, keys, values)


def _decode_hello(payload: memoryview) -> Hello:
    epoch, sender_len, receiver_len = _HELLO.unpack_from(payload, 0)
    start = _HELLO.size
    if start + sender_len + receiver_len != len(payload):
        raise FrameError("id lengths do not match the payload length")
    sender = str(payload[start : start + sender_len], "utf-8")
    receiver = str(payload[start + sender_len :], "utf-8")
    return Hello(sender, epoch, receiver)


def _unpickle_dict(payload: memoryview) -> dict[str, Any]:
    try:
        value = pickle.loads(payload)
    except Exception as e:  # broad: unpickling garbage can raise almost anything
        raise FrameError(f"unreadable pickle: {e}") from e
    if not isinstance(value, dict):
        raise FrameError(f"a dict expected, got {type(value).__name__}")
    return value


def _decode_query(request: dict[str, Any]) -> Query:
    bolt, instance, keys = (request.get(f) for f in ("bolt", "instance", "keys"))
    if type(bolt) is not str or type(instance) is not int:
        raise FrameError("a QUERY names a bolt (str) and an instance (int), got "
                         f"{type(bolt).__name__} and {type(instance).__name__}")
    if keys is not None and type(keys) is not list:
        raise FrameError(f"a QUERY's keys are a list or None, got {type(keys).__name__}")
    return Query(bolt, instance, keys)


def decode_frame(kind: int, payload: bytes | bytearray | memoryview) -> Frame:
    """Decode the payload of one frame of ``kind``; raises :class:`FrameError` if invalid."""
    if kind not in _KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    name = FrameKind(kind).name
    with memoryview(payload) as view:
        try:
            if kind == FrameKind.DATA:
                return _decode_data(view)
            if kind == FrameKind.WATERMARK:
                return Watermark(*_decode_marks(view))
            if kind == FrameKind.CLOCK:
                return ClockMarker(*_decode_marks(view))
            if kind == FrameKind.CLOCK_PART:
                return ClockMarker(*_decode_marks(view), partial=True)
            if kind == FrameKind.HELLO:
                return _decode_hello(view)
            if kind == FrameKind.QUERY:
                return _decode_query(_unpickle_dict(view))
            if kind == FrameKind.ANSWER:
                return Answer(_unpickle_dict(view))
            if len(view):
                raise FrameError("BYE frame with a payload")
            return Bye()
        except (FrameError, struct.error, UnicodeDecodeError) as e:
            raise FrameError(f"corrupted {name} frame: {e}", FrameKind(kind)) from e


class FrameReader:
    """Turns a byte stream, fed in arbitrary pieces, into frames.

    ``feed`` accepts any split: a frame spread over many reads, many frames in one read.
    A header announcing an oversize payload or an unknown kind is rejected as soon as its
    5 bytes arrive. After an error the stream cannot be resynchronised: the reader keeps
    raising.
    """

    def __init__(self, *, max_frame_size: int = MAX_FRAME_SIZE,
                 max_first_frame_size: int | None = None) -> None:
        self._buffer = bytearray()
        self._max_frame_size = max_frame_size
        self._first_limit = max_first_frame_size  # None once the first frame is read
        self._error: FrameError | None = None
        self._recv_chunk: bytearray | None = None  # scratch buffer of recv_frames

    @property
    def buffered(self) -> int:
        """Bytes received that are not part of a returned frame yet."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add received bytes; return the frames they complete, in order."""
        if self._error is not None:
            raise FrameError(f"frame stream already failed: {self._error}")
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        pos = 0
        end = len(buffer)
        try:
            with memoryview(buffer) as view:
                while end - pos >= HEADER_SIZE:
                    length, kind = _HEADER.unpack_from(view, pos)
                    if kind not in _KINDS:
                        raise FrameError(f"unknown frame kind {kind}")
                    limit = self._first_limit or self._max_frame_size
                    if length > limit:
                        raise FrameTooLargeError(
                            f"incoming frame announces a {length}-byte payload, over the "
                            f"{limit}-byte limit"
                            + ("" if self._first_limit is None else " of a first frame"))
                    payload_end = pos + HEADER_SIZE + length
                    if payload_end > end:
                        break
                    frames.append(decode_frame(kind, view[pos + HEADER_SIZE : payload_end]))
                    self._first_limit = None
                    pos = payload_end
        except FrameError as e:
            self._error = e
            raise
        if pos:
            del buffer[:pos]
        return frames

    def close(self) -> None:
        """Declare the end of the stream; raises if it stopped in the middle of a frame."""
        if self._buffer and self._error is None:
            raise StreamEndedError(f"stream ended inside a frame ({len(self._buffer)} bytes "
                                   "pending)")


# --------------------------------------------------------------------------- sockets


def send_frames(
    sock: socket.socket, frames: Iterable[Frame], *, max_frame_size: int = MAX_FRAME_SIZE,
) -> int:
    """Send ``frames`` with one ``sendall``; returns the number of bytes sent."""
    data = encode_frames(frames, max_frame_size=max_frame_size)
    sock.sendall(data)
    return len(data)


def recv_frames(sock: socket.socket, reader: FrameReader) -> list[Frame]:
    """Block until at least one whole frame arrived; ``[]`` means the peer closed cleanly.

    ``reader`` keeps the bytes of a partly received frame between calls: use one reader per
    connection. Raises :class:`FrameError` if the peer closed in the middle of a frame.
    """
    if reader._recv_chunk is None:
        reader._recv_chunk = bytearray(_RECV_CHUNK)
    with memoryview(reader._recv_chunk) as view:
        while True:
            n = sock.recv_into(view)
            if n == 0:
                reader.close()
                return []
            frames = reader.feed(view[:n])
            if frames:
                return frames
