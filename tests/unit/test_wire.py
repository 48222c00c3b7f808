"""The frame format: round trips, incremental reading, limits and corruption."""

from __future__ import annotations

import collections
import math
import pickle
import pickletools
import socket
import struct
import threading
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.protocol import wire
from hailstorm.protocol.wire import (
    Answer,
    Bye,
    ClockMarker,
    DataBatch,
    Frame,
    FrameError,
    FrameKind,
    FrameReader,
    FrameTooLargeError,
    Hello,
    PartitionTable,
    Query,
    Watermark,
    decode_frame,
    encode_frame,
    encode_frames,
    recv_frames,
    send_frames,
)

Point = collections.namedtuple("Point", "x y")

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
)
hashables = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6
)
values = st.recursive(
    scalars | st.binary().map(bytearray),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(hashables, inner, max_size=4)
        | st.frozensets(hashables, max_size=3)
    ),
    max_leaves=12,
)


def same(a: Any, b: Any) -> bool:
    """Equal values of identical types, recursively (a tuple is not a list, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def roundtrip(frame: Frame) -> Frame:
    [decoded] = FrameReader().feed(encode_frame(frame))
    return decoded


batches = st.lists(st.tuples(INT32, INT64, values), max_size=30).map(
    lambda rows: DataBatch.of((r[0] for r in rows), (r[1] for r in rows), (r[2] for r in rows))
)
marks = st.dictionaries(INT32, INT64, max_size=20)
frames = (
    st.builds(Hello, st.text(max_size=40), INT64, st.text(max_size=40))
    | batches
    | st.builds(Watermark, INT64, marks)
    | st.builds(ClockMarker, INT64, marks, st.booleans())
    | st.just(Bye())
)


# --------------------------------------------------------------------------- round trips


@given(st.text(), INT64, st.text())
def test_hello_round_trip(sender: str, epoch: int, receiver: str) -> None:
    assert roundtrip(Hello(sender, epoch, receiver)) == Hello(sender, epoch, receiver)


@given(batches)
def test_data_round_trip_keeps_values_and_types(batch: DataBatch) -> None:
    decoded = roundtrip(batch)
    assert isinstance(decoded, DataBatch)
    assert decoded.partitions == batch.partitions and decoded.offsets == batch.offsets
    assert isinstance(decoded.partitions, array) and decoded.partitions.typecode == "i"
    assert isinstance(decoded.offsets, array) and decoded.offsets.typecode == "q"
    assert same(decoded.tuples, batch.tuples)


@given(st.lists(st.lists(values, max_size=4).map(tuple), max_size=30))
def test_a_batch_of_tuples_is_pickled_without_the_memo_and_arrives_the_same(
        tuples: list[tuple[Any, ...]]) -> None:
    """Rows (a list of plain tuples) skip the pickler's memo, which costs most of a row's
    encoding; any other list keeps it (dicts share their field names)."""
    decoded = roundtrip(DataBatch.of([0] * len(tuples), range(len(tuples)), tuples))
    assert isinstance(decoded, DataBatch) and same(decoded.tuples, tuples)
    opcodes = {op.name for op, _arg, _pos in pickletools.genops(wire._pickled_tuples(tuples))}
    assert not opcodes & {"MEMOIZE", "BINPUT", "LONG_BINPUT"}


def test_a_value_written_twice_in_a_row_arrives_as_two_equal_values() -> None:
    shared = {"field": [1, 2]}
    decoded = roundtrip(DataBatch.of([0], [0], [(shared, shared)]))
    assert isinstance(decoded, DataBatch)
    [(first, second)] = decoded.tuples
    assert first == second == shared and first is not second


def test_rows_sharing_a_large_value_keep_it_shared_past_the_checked_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past a size, the memo's pickle is made too and the smaller sent: rows that share
    one large value would otherwise repeat it, up to the frame size limit."""
    monkeypatch.setattr(wire, "_FAST_PICKLE_CHECKED", 10_000)
    large = b"x" * 5_000
    decoded = roundtrip(DataBatch.of([0] * 20, range(20), [(n, large) for n in range(20)]))
    assert isinstance(decoded, DataBatch)
    assert [n for n, _ in decoded.tuples] == list(range(20))
    assert all(value is decoded.tuples[0][1] == large for _, value in decoded.tuples)
    distinct = [(n, bytes([n]) * 5_000) for n in range(20)]  # nothing shared: fast mode
    assert len(wire._pickled_tuples(distinct)) < len(pickle.dumps(distinct, protocol=5))


def test_a_cyclic_row_is_pickled_with_the_memo() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    decoded = roundtrip(DataBatch.of([0], [0], [("k", cycle)]))
    assert isinstance(decoded, DataBatch)
    [(key, arrived)] = decoded.tuples
    assert key == "k" and arrived[0] == 1 and arrived[1] is arrived


@given(INT64, marks)
def test_watermark_and_clock_round_trip(epoch: int, offsets: dict[int, int]) -> None:
    assert roundtrip(Watermark(epoch, offsets)) == Watermark(epoch, offsets)
    assert roundtrip(ClockMarker(epoch, offsets)) == ClockMarker(epoch, offsets)
    part = ClockMarker(epoch, offsets, partial=True)
    assert roundtrip(part) == part


def test_bye_round_trip() -> None:
    assert encode_frame(Bye()) == struct.pack(">IB", 0, FrameKind.BYE)
    assert roundtrip(Bye()) == Bye()


def test_query_and_answer_round_trip() -> None:
    assert roundtrip(Query("counts", 1, ["storm", ("fr", 3)])) == \
        Query("counts", 1, ["storm", ("fr", 3)])
    assert roundtrip(Query("total", 0)) == Query("total", 0, None)
    fields = {"epoch": 4, "values": {"storm": 3}, "through": {("w", 0): 9}, "missing": []}
    assert roundtrip(Answer(fields)) == Answer(fields)


def test_a_query_that_is_not_a_dict_is_a_corrupted_frame() -> None:
    payload = pickle.dumps(["not", "a", "dict"])
    with pytest.raises(FrameError, match="corrupted QUERY frame"):
        wire.decode_frame(FrameKind.QUERY, payload)


@pytest.mark.parametrize("request_", [
    {"instance": 0, "keys": ["storm"]},
    {"bolt": "counts", "keys": None},
    {"bolt": ["counts"], "instance": 0},
    {"bolt": "counts", "instance": "0"},
    {"bolt": "counts", "instance": True},
    {"bolt": "counts", "instance": 0, "keys": "storm"},
    {"bolt": "counts", "instance": 0, "keys": {"storm": 1}},
])
def test_a_malformed_query_is_a_corrupted_query_frame(request_: dict[str, Any]) -> None:
    """Missing or ill-typed fields are a FrameError naming QUERY (never a KeyError or a
    TypeError escaping the decoder)."""
    with pytest.raises(FrameError, match="corrupted QUERY frame") as caught:
        FrameReader().feed(_with_payload(FrameKind.QUERY, pickle.dumps(request_)))
    assert caught.value.frame_kind is FrameKind.QUERY


def test_exotic_values_survive_exactly() -> None:
    tuples = [
        (1, "a"),
        [1, "a"],
        (True, 1, 1.0, -0.0, float("nan"), float("inf")),
        (b"raw", bytearray(b"mutable"), None),
        {"nested": ({"deep": [(), ((),)]},), 2: {3}},
        Point(1, 2),
        10**40,
        frozenset({("x", 1)}),
        "ünïcødé \U0001f600",
    ]
    decoded = roundtrip(DataBatch.of([0] * len(tuples), range(len(tuples)), tuples))
    assert isinstance(decoded, DataBatch)
    assert same(decoded.tuples, tuples)
    assert type(decoded.tuples[5]) is Point


def test_batch_from_lists_and_rows() -> None:
    batch = DataBatch([2, 0], [10, -1], [("a", 1), ("b", 2)])
    decoded = roundtrip(batch)
    assert isinstance(decoded, DataBatch)
    assert list(decoded.rows()) == [(2, 10, ("a", 1)), (0, -1, ("b", 2))]
    assert len(decoded) == 2


def test_batch_columns_must_agree() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        DataBatch([0], [1, 2], ["x"])


def test_columns_are_little_endian_on_the_wire() -> None:
    data = encode_frame(Watermark(7, {1: 258}))
    assert data == (
        struct.pack(">IB", 12 + 4 + 8, FrameKind.WATERMARK)
        + struct.pack(">qI", 7, 1)
        + struct.pack("<i", 1)
        + struct.pack("<q", 258)
    )


def test_byte_swapped_host_writes_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a big-endian host columns are swapped on the way out and back in."""
    batch = DataBatch.of([1, 2], [3, 4], ["a", "b"])
    monkeypatch.setattr(wire, "_SWAP", True)
    swapped = encode_frame(batch)
    decoded = FrameReader().feed(swapped)
    monkeypatch.setattr(wire, "_SWAP", False)
    assert decoded == [batch]
    assert swapped != encode_frame(batch)  # here native order is little-endian already


# --------------------------------------------------------------------------- reader


@settings(max_examples=60)
@given(st.lists(frames, min_size=1, max_size=8), st.data())
def test_reader_handles_any_split(stream: list[Frame], data: st.DataObject) -> None:
    raw = encode_frames(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=10)))
    reader = FrameReader()
    decoded: list[Frame] = []
    for start, stop in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        decoded += reader.feed(raw[start:stop])
    reader.close()
    assert reader.buffered == 0
    assert len(decoded) == len(stream)
    for got, sent in zip(decoded, stream, strict=True):
        if isinstance(sent, DataBatch):
            assert isinstance(got, DataBatch)
            assert got.partitions == sent.partitions and got.offsets == sent.offsets
            assert same(got.tuples, sent.tuples)
        else:
            assert got == sent


def test_reader_byte_by_byte_and_many_per_read() -> None:
    stream: list[Frame] = [
        Hello("spout:s:0", 3, "bolt:b:1"),
        DataBatch.of([0, 1], [5, 6], [("x", 1), ("y", 2)]),
        Watermark(3, {0: 5, 1: 6}),
        ClockMarker(3, {0: 4}),
        Bye(),
    ]
    raw = encode_frames(stream)
    reader = FrameReader()
    one_by_one: list[Frame] = []
    for i in range(len(raw)):
        one_by_one += reader.feed(raw[i : i + 1])
    assert one_by_one == stream
    assert FrameReader().feed(raw) == stream


# --------------------------------------------------------------------------- limits and errors


def test_oversize_frame_refused_when_encoding() -> None:
    batch = DataBatch.of([0], [0], [b"x" * 2000])
    with pytest.raises(FrameTooLargeError, match="over the 1000-byte limit"):
        encode_frame(batch, max_frame_size=1000)


def test_oversize_frame_refused_as_soon_as_its_header_arrives() -> None:
    header = struct.pack(">IB", wire.MAX_FRAME_SIZE + 1, FrameKind.DATA)
    reader = FrameReader()
    with pytest.raises(FrameTooLargeError, match="limit"):
        reader.feed(header)  # no payload was sent: it must not wait for 64 MiB
    small = FrameReader(max_frame_size=10)
    with pytest.raises(FrameTooLargeError):
        small.feed(encode_frame(Hello("a-long-sender-id", 1, "receiver")))


def test_a_first_frame_has_a_limit_of_its_own() -> None:
    """``max_first_frame_size`` bounds the first frame only: a request is small, the DATA
    after a HELLO (in the same read or later) may be as large as any frame."""
    hello = encode_frame(Hello("spout:s:0", 1, "bolt:b:0"))
    big = encode_frame(DataBatch.of([0], [0], [b"x" * 500]))
    reader = FrameReader(max_first_frame_size=100)
    assert [type(f) for f in reader.feed(hello + big + big)] == [Hello, DataBatch, DataBatch]
    with pytest.raises(FrameTooLargeError, match="100-byte limit of a first frame"):
        FrameReader(max_first_frame_size=100).feed(big[:wire.HEADER_SIZE])
    with pytest.raises(FrameTooLargeError, match=f"{wire.MAX_REQUEST_SIZE}-byte limit"):
        FrameReader(max_first_frame_size=wire.MAX_REQUEST_SIZE).feed(
            struct.pack(">IB", wire.MAX_REQUEST_SIZE + 1, FrameKind.QUERY))


def test_unknown_kind_is_an_error_and_the_reader_stays_failed() -> None:
    reader = FrameReader()
    with pytest.raises(FrameError, match="unknown frame kind 99"):
        reader.feed(struct.pack(">IB", 0, 99))
    with pytest.raises(FrameError, match="already failed"):
        reader.feed(encode_frame(Bye()))
    with pytest.raises(FrameError, match="unknown frame kind"):
        decode_frame(0, b"")


def _with_payload(kind: FrameKind, payload: bytes) -> bytes:
    return struct.pack(">IB", len(payload), kind) + payload


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        (FrameKind.BYE, b"x", "BYE frame with a payload"),
        (FrameKind.HELLO, b"\x00\x01", "corrupted HELLO"),
        (FrameKind.HELLO, struct.pack(">qHH", 1, 5, 0) + b"abc", "id lengths"),
        (FrameKind.HELLO, struct.pack(">qHH", 1, 2, 0) + b"\xff\xfe", "corrupted HELLO"),
        (FrameKind.WATERMARK, struct.pack(">qI", 1, 1000) + b"\x00" * 12, "shorter"),
        (FrameKind.CLOCK, struct.pack(">qI", 1, 0) + b"\x00", "trailing bytes"),
        (FrameKind.CLOCK, struct.pack(">qI", 1, 2) + b"\x00" * 8 + b"\x01" * 16, "duplicate"),
        (FrameKind.DATA, struct.pack(">IB", 1, 9), "unknown tuple codec 9"),
        (FrameKind.DATA, struct.pack(">IB", 1, 1) + b"\x00" * 12 + b"garbage", "undecodable"),
        (
            FrameKind.DATA,
            struct.pack(">IB", 2, 1) + b"\x00" * 24 + pickle.dumps(["one"], protocol=5),
            "list of 2 tuples",
        ),
        (
            FrameKind.DATA,
            struct.pack(">IB", 1, 1) + b"\x00" * 12 + pickle.dumps(("t",), protocol=5),
            "list of 1 tuples",
        ),
    ],
)
def test_corrupted_payloads_are_errors(kind: FrameKind, payload: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        FrameReader().feed(_with_payload(kind, payload))


def test_truncated_data_frame_is_an_error() -> None:
    raw = bytearray(encode_frame(DataBatch.of([0, 0], [1, 2], ["a", "b"])))
    raw[0:4] = struct.pack(">I", len(raw) - wire.HEADER_SIZE - 3)  # drop the pickle's tail
    with pytest.raises(FrameError, match="corrupted DATA"):
        FrameReader().feed(bytes(raw[:-3]))


def test_stream_ending_inside_a_frame_is_an_error() -> None:
    reader = FrameReader()
    assert reader.feed(encode_frame(Hello("a", 1, "b"))[:-1]) == []
    with pytest.raises(wire.StreamEndedError, match="ended inside a frame"):
        reader.close()


def test_a_sender_gone_inside_a_frame_is_a_broken_connection_named_after_it() -> None:
    """A sender killed while it sent a frame closes its end inside that frame: the
    receiver's reader names the sender as the peer whose connection broke (so a receiver
    goes on without one that restarts alone), as after a reset."""
    from types import SimpleNamespace

    from hailstorm.runtime.data_plane import DataPlaneError
    from hailstorm.runtime.inbound import InboundShell

    left, right = socket.socketpair()
    with left, right:
        left.sendall(encode_frame(Hello("bolt:counts:0", 1, "sink:s:0"))[:-1])
        left.close()
        receiver = SimpleNamespace(deliver=lambda sender, frame: None)
        with pytest.raises(DataPlaneError, match="connection broke: stream ended") as caught:
            InboundShell._frames_of(receiver, right, FrameReader(), "bolt:counts:0", [])  # type: ignore[arg-type]
    assert caught.value.peer == "bolt:counts:0"


# --------------------------------------------------------------------------- partitions


def test_partition_table_is_order_independent() -> None:
    parts = [("words", 1), ("clicks", 0), ("words", 0)]
    table = PartitionTable(parts)
    assert table == PartitionTable(reversed(parts))
    assert table.partitions == (("clicks", 0), ("words", 0), ("words", 1))
    assert [table.index(p) for p in parts] == [2, 0, 1]
    assert table.partition(1) == ("words", 0)
    assert ("words", 1) in table and ("words", 9) not in table
    assert len(table) == 3 and list(table) == list(table.partitions)
    clock = {("words", 1): 41, ("clicks", 0): -1}
    assert table.to_wire(clock) == {2: 41, 0: -1}
    assert table.from_wire(table.to_wire(clock)) == clock


def test_partition_table_unknowns() -> None:
    table = PartitionTable([("t", 0)])
    with pytest.raises(KeyError, match="not in the partition table"):
        table.index(("t", 1))
    with pytest.raises(KeyError, match="out of range"):
        table.partition(1)


# --------------------------------------------------------------------------- sockets


def test_socketpair_round_trip() -> None:
    big = DataBatch.of(
        [i % 3 for i in range(20_000)], range(20_000), [(f"w{i}", i) for i in range(20_000)]
    )
    stream: list[Frame] = [
        Hello("spout:s:0", 1, "bolt:b:0"),
        ClockMarker(1, {0: 9}),
        big,
        Watermark(1, {0: 19_999, 1: 19_998, 2: 19_997}),
        Bye(),
    ]
    left, right = socket.socketpair()
    sent: list[int] = []

    def send() -> None:
        with left:
            sent.append(send_frames(left, stream[:2]))
            sent.append(send_frames(left, stream[2:]))

    sender = threading.Thread(target=send)
    sender.start()
    received: list[Frame] = []
    reader = FrameReader()
    with right:
        right.settimeout(10)
        while frames := recv_frames(right, reader):
            received += frames
    sender.join()
    assert received == stream
    assert sum(sent) == len(encode_frames(stream))


def test_peer_closing_mid_frame_is_an_error() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(encode_frame(Bye()) + encode_frame(Hello("a", 1, "b"))[:-2])
        left.close()
        reader = FrameReader()
        assert recv_frames(right, reader) == [Bye()]
        with pytest.raises(FrameError, match="ended inside a frame"):
            recv_frames(right, reader)
