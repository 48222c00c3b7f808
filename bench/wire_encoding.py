"""Benchmark: how to encode the tuples of a DATA frame.

Run ``.venv/bin/python bench/wire_encoding.py [--tuples N] [--repeat R]``. Prints one JSON
line of figures, then a human summary. For each candidate encoding of a list of tuples
(pickle protocol 5 and 4, marshal, json) and each workload it reports encode and decode
throughput (MB/s of encoded bytes, tuples/s), the encode+decode round trip in tuples/s,
bytes per tuple, and whether the round trip is exact (equal values *and* equal types, so a
tuple coming back as a list or a bytearray as bytes counts as a failure). It also times whole
DATA frames through :mod:`hailstorm.protocol.wire` (packed origin columns + the chosen encoding +
:class:`~hailstorm.protocol.wire.FrameReader`), to show the frame overhead over the bare encoding,
and through a socket pair, sender and receiver threads, plain (``SOCK``) and with the data
plane's mutual TLS 1.3 (``SOCK+TLS``, :mod:`hailstorm.auth`); those two rows are encode, send,
receive and decode of 50 frames, per tuple. Last, the milliseconds of that mutual TLS
handshake itself (once per connection), and of a live query's whole connection over TCP
loopback (``--connections``: these two only).

The chosen encoding must be exact on every workload; among exact ones it is the fastest round
trip (geometric mean of tuples/s over all workloads).
"""

from __future__ import annotations

import argparse
import collections
import decimal
import json
import marshal
import math
import pickle
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hailstorm.auth import RunSecret, accept_peer, greet_peer
from hailstorm.protocol import wire

Codec = tuple[Callable[[list[Any]], bytes], Callable[[bytes], Any]]

CANDIDATES: dict[str, Codec] = {
    "pickle5": (lambda v: pickle.dumps(v, protocol=5), pickle.loads),
    "pickle4": (lambda v: pickle.dumps(v, protocol=4), pickle.loads),
    "marshal": (lambda v: marshal.dumps(v, 4), marshal.loads),
    "json": (lambda v: json.dumps(v, separators=(",", ":")).encode(), json.loads),
}

CHOSEN = "pickle5"
"""What hailstorm.protocol.wire uses (checked against the module below)."""


def _words(rng: random.Random, n: int) -> list[str]:
    return [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 10))) for _ in range(n)
    ]


def workload_wordcount(n: int, rng: random.Random) -> list[Any]:
    """``(word, count)`` pairs: the typical keyed-aggregation stream."""
    words = _words(rng, 2000)
    return [(rng.choice(words), rng.randint(1, 1000)) for _ in range(n)]


def workload_events(n: int, rng: random.Random) -> list[Any]:
    """Flat event tuples mixing str, int, float, bool and None."""
    words = _words(rng, 500)
    return [
        (rng.choice(words), rng.randrange(10**12), rng.random(), i % 3 == 0, None) for i in range(n)
    ]


def workload_nested(n: int, rng: random.Random) -> list[Any]:
    """Nested values: dicts, lists, tuples inside tuples, bytes, big ints."""
    words = _words(rng, 500)
    out: list[Any] = []
    for i in range(n):
        r = i % 4
        if r == 0:
            out.append({"user": rng.choice(words), "n": i, "tags": [rng.choice(words), "x"]})
        elif r == 1:
            out.append((rng.choice(words), (i, -i), [1.5, None]))
        elif r == 2:
            out.append((b"\x00\x01" + rng.randbytes(6), 2**70 + i, {"k": (1, 2)}))
        else:
            out.append(((rng.choice(words), i % 7), {1, 2, 3} if i % 8 == 3 else frozenset()))
    return out


Point = collections.namedtuple("Point", "x y")


def workload_exotic(n: int, rng: random.Random) -> list[Any]:
    """Values json and marshal cannot carry exactly (bytearray, namedtuple, Decimal...)."""
    return [
        (bytearray(rng.randbytes(4)), Point(i, -i), decimal.Decimal(i) / 4, b"raw")
        for i in range(n)
    ]


def workload_bytes_like(n: int, rng: random.Random) -> list[Any]:
    """Mutable byte buffers next to bytes (marshal silently turns bytearray into bytes)."""
    return [(bytearray(rng.randbytes(8)), rng.randbytes(8), i) for i in range(n)]


WORKLOADS = {
    "wordcount": workload_wordcount,
    "events": workload_events,
    "nested": workload_nested,
    "bytes_like": workload_bytes_like,
    "exotic": workload_exotic,
}


def _same(a: Any, b: Any) -> bool:
    """Equal values with equal types, recursively."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    return bool(a == b)


def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure_codec(name: str, values: list[Any], repeat: int) -> dict[str, Any]:
    dumps, loads = CANDIDATES[name]
    try:
        blob = dumps(values)
        exact = _same(loads(blob), values)
    except (TypeError, ValueError) as e:
        return {"exact": False, "error": f"{type(e).__name__}: {e}"}
    n = len(values)
    enc = _best(lambda: dumps(values), repeat)
    dec = _best(lambda: loads(blob), repeat)
    mb = len(blob) / 1e6
    return {
        "exact": exact,
        "bytes_per_tuple": round(len(blob) / n, 2),
        "encode_mb_s": round(mb / enc, 1),
        "decode_mb_s": round(mb / dec, 1),
        "encode_tuples_s": round(n / enc),
        "decode_tuples_s": round(n / dec),
        "roundtrip_tuples_s": round(n / (enc + dec)),
        "roundtrip_us_per_10k": round((enc + dec) / n * 1e4 * 1e6, 1),
    }


def measure_frame(values: list[Any], repeat: int) -> dict[str, Any]:
    """Whole DATA frames through hailstorm.protocol.wire: encode_frames + FrameReader.feed."""
    n = len(values)
    batch = wire.DataBatch.of([i % 8 for i in range(n)], range(n), values)
    data = wire.encode_frames([batch])
    decoded = wire.FrameReader().feed(data)
    assert decoded == [batch], "frame round trip failed"
    enc = _best(lambda: wire.encode_frames([batch]), repeat)
    dec = _best(lambda: wire.FrameReader().feed(data), repeat)
    return {
        "bytes_per_tuple": round(len(data) / n, 2),
        "encode_mb_s": round(len(data) / 1e6 / enc, 1),
        "decode_mb_s": round(len(data) / 1e6 / dec, 1),
        "roundtrip_tuples_s": round(n / (enc + dec)),
        "roundtrip_us_per_10k": round((enc + dec) / n * 1e4 * 1e6, 1),
    }


SOCKET_FRAMES = 50
HANDSHAKES = 50


def tls_pair(a: socket.socket, b: socket.socket, secret: RunSecret) -> tuple[Any, Any]:
    """The data plane's mutual TLS 1.3 handshake over the connected pair ``a``, ``b`` (the
    listener's side on another thread, as in a processor): the two TLS streams."""
    box: list[Any] = []
    helper = threading.Thread(target=lambda: box.append(accept_peer(b, secret, "bolt:b:0", 10)))
    helper.start()
    sender = greet_peer(a, secret, "spout:s:t:0", "bolt:b:0", 10)
    helper.join()
    return sender, box[0]


def measure_handshake(count: int = HANDSHAKES) -> dict[str, float]:
    """Milliseconds of one data-plane connection's mutual TLS 1.3 handshake (certificates
    minted and checked both ways, ECDSA P-256) over a socket pair: best and median of
    ``count``."""
    secret = RunSecret.generate()
    times = []
    for _ in range(count):
        a, b = socket.socketpair()
        started = time.perf_counter()
        sender, receiver = tls_pair(a, b, secret)
        times.append((time.perf_counter() - started) * 1e3)
        sender.close()
        receiver.close()
    times.sort()
    return {"best_ms": round(times[0], 2), "median_ms": round(times[len(times) // 2], 2)}


def measure_query_round_trip(count: int = HANDSHAKES) -> dict[str, float]:
    """Milliseconds of one live query's connection over TCP loopback, as ``hailstorm query
    --live`` makes it: connect, the mutual TLS handshake, a small request, the answer, the
    listener's close (best and median of ``count``). Small writes cross at once only with
    ``TCP_NODELAY`` on the connecting side; without it this took about 40 ms more."""
    secret = RunSecret.generate()
    listener = socket.create_server(("127.0.0.1", 0))
    address = listener.getsockname()

    def answer_one() -> None:
        sock, _ = listener.accept()
        with accept_peer(sock, secret, "bolt:b:0", 10) as tls:
            tls.recv(4096)
            tls.sendall(b"answer" * 20)

    times = []
    for _ in range(count):
        server = threading.Thread(target=answer_one)
        server.start()
        started = time.perf_counter()
        with greet_peer(socket.create_connection(address), secret, "query", "bolt:b:0",
                        10) as tls:
            tls.sendall(b"query" * 20)
            while tls.recv(4096):
                pass
        times.append((time.perf_counter() - started) * 1e3)
        server.join()
    listener.close()
    times.sort()
    return {"best_ms": round(times[0], 2), "median_ms": round(times[len(times) // 2], 2)}


def measure_socket(values: list[Any], repeat: int, tls: bool) -> dict[str, Any]:
    """``SOCKET_FRAMES`` DATA frames encoded, sent over a socket pair, received and decoded
    by another thread, as between processors; with ``tls`` over the data plane's mutual
    TLS 1.3 (the handshake is not timed)."""
    n = len(values)
    batch = wire.DataBatch.of([i % 8 for i in range(n)], range(n), values)
    secret = RunSecret.generate()

    def once() -> float:
        a, b = socket.socketpair()
        sender, receiver = tls_pair(a, b, secret) if tls else (a, b)
        got: list[int] = []

        def receive() -> None:
            reader, count = wire.FrameReader(), 0
            while count < SOCKET_FRAMES:
                count += len(wire.recv_frames(receiver, reader))
            got.append(count)

        thread = threading.Thread(target=receive)
        started = time.perf_counter()
        thread.start()
        for _ in range(SOCKET_FRAMES):
            wire.send_frames(sender, [batch])
        thread.join()
        elapsed = time.perf_counter() - started
        assert got == [SOCKET_FRAMES]
        sender.close()
        receiver.close()
        return elapsed

    best = min(once() for _ in range(max(1, repeat // 4)))
    size = len(wire.encode_frames([batch]))
    return {
        "bytes_per_tuple": round(size / n, 2),
        "encode_mb_s": round(size * SOCKET_FRAMES / 1e6 / best, 1),
        "decode_mb_s": round(size * SOCKET_FRAMES / 1e6 / best, 1),
        "roundtrip_tuples_s": round(n * SOCKET_FRAMES / best),
        "roundtrip_us_per_10k": round(best / (n * SOCKET_FRAMES) * 1e4 * 1e6, 1),
    }


def _print_connections(handshake: dict[str, float], query: dict[str, float]) -> None:
    print(f"data-plane TLS handshake (mutual, TLS 1.3, ECDSA P-256), {HANDSHAKES} of them: "
          f"best {handshake['best_ms']} ms, median {handshake['median_ms']} ms")
    print(f"a live query's connection over TCP loopback (connect, handshake, request, "
          f"answer), {HANDSHAKES} of them: best {query['best_ms']} ms, median "
          f"{query['median_ms']} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=10_000, help="tuples per batch")
    parser.add_argument("--repeat", type=int, default=20, help="timing repetitions (best of)")
    parser.add_argument("--connections", action="store_true",
                        help="time the TLS handshake and a live query's connection only")
    args = parser.parse_args()
    rng = random.Random(42)
    if args.connections:
        handshake, query = measure_handshake(), measure_query_round_trip()
        print(json.dumps({"bench": "wire_encoding", "tls_handshake": handshake,
                          "query_round_trip": query}, sort_keys=True))
        _print_connections(handshake, query)
        return

    results: dict[str, dict[str, Any]] = {name: {} for name in CANDIDATES}
    frames: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    secured: dict[str, Any] = {}
    for workload, make in WORKLOADS.items():
        values = make(args.tuples, rng)
        for name in CANDIDATES:
            results[name][workload] = measure_codec(name, values, args.repeat)
        frames[workload] = measure_frame(values, args.repeat)
        plain[workload] = measure_socket(values, args.repeat, tls=False)
        secured[workload] = measure_socket(values, args.repeat, tls=True)

    handshake, query = measure_handshake(), measure_query_round_trip()

    exact_everywhere = [n for n in CANDIDATES if all(r["exact"] for r in results[n].values())]
    encodable_by_all = [
        w for w in WORKLOADS if all("error" not in results[n][w] for n in CANDIDATES)
    ]

    def speed(name: str, workloads: list[str]) -> float:
        """Geometric mean of the round-trip tuples/s of ``name`` over ``workloads``."""
        rates = [results[name][w]["roundtrip_tuples_s"] for w in workloads]
        return math.prod(rates) ** (1 / len(rates))

    # Among encodings exact on every workload, the fastest over all workloads.
    everything = list(WORKLOADS)
    fastest_exact = (
        max(exact_everywhere, key=lambda n: speed(n, everything)) if exact_everywhere else None
    )
    # Ignoring exactness, the fastest over the workloads every candidate can encode at all.
    fastest_any = max(CANDIDATES, key=lambda n: speed(n, encodable_by_all))
    summary = {
        "bench": "wire_encoding",
        "python": sys.version.split()[0],
        "tuples_per_batch": args.tuples,
        "candidates": results,
        "data_frame": frames,
        "data_frame_socket": plain,
        "data_frame_socket_tls": secured,
        "tls_handshake": handshake,
        "query_round_trip": query,
        "exact_everywhere": exact_everywhere,
        "fastest_exact": fastest_exact,
        "fastest_any": fastest_any,
        "chosen": CHOSEN,
    }
    print(json.dumps(summary, sort_keys=True))

    print()
    print(f"{args.tuples} tuples per batch, best of {args.repeat}; round trip = encode + decode")
    header = f"{'workload':<10} {'encoding':<8} {'exact':<6} {'B/tuple':>8} {'enc MB/s':>9} "
    header += f"{'dec MB/s':>9} {'Mtuples/s':>10} {'us/10k':>8}"
    print(header)
    for workload in WORKLOADS:
        for name in CANDIDATES:
            r = results[name][workload]
            if "error" in r:
                print(f"{workload:<10} {name:<8} {'no':<6} {r['error'][:60]}")
                continue
            print(
                f"{workload:<10} {name:<8} {'yes' if r['exact'] else 'NO':<6} "
                f"{r['bytes_per_tuple']:>8} {r['encode_mb_s']:>9} {r['decode_mb_s']:>9} "
                f"{r['roundtrip_tuples_s'] / 1e6:>10.2f} {r['roundtrip_us_per_10k']:>8}"
            )
        for label, f in (("FRAME", frames[workload]), ("SOCK", plain[workload]),
                         ("SOCK+TLS", secured[workload])):
            print(
                f"{workload:<10} {label:<8} {'yes':<6} {f['bytes_per_tuple']:>8} "
                f"{f['encode_mb_s']:>9} {f['decode_mb_s']:>9} "
                f"{f['roundtrip_tuples_s'] / 1e6:>10.2f} {f['roundtrip_us_per_10k']:>8}"
            )
    print()
    _print_connections(handshake, query)
    print(f"exact on every workload: {', '.join(exact_everywhere) or 'none'}")
    print(f"fastest exact: {fastest_exact}; fastest overall (ignoring exactness): {fastest_any}")
    if fastest_exact == CHOSEN:
        print(f"chosen: {CHOSEN} (the fastest encoding that round-trips every value exactly)")
    else:
        print(f"chosen: {CHOSEN}; fastest exact was {fastest_exact} (see module docstring)")
    if fastest_any != CHOSEN:
        print(
            f"{fastest_any} is faster but not exact: "
            + "; ".join(
                f"{w}: {results[fastest_any][w].get('error', 'values change type')}"
                for w in WORKLOADS
                if not results[fastest_any][w]["exact"]
            )
        )


if __name__ == "__main__":
    main()
