"""``hailstorm query --live``: the word count's running ``counts`` instances answer for the
keys they own, over their mutual-TLS data-plane ports, with the clock their values are
at; before and after the owner of a key is SIGKILLed, the answers equal the model's state
at that clock. A query without the run's secret, or with another one, gets nothing. And a
client that misbehaves in every way it can (issue 40), once each and then 1,000 times in a
loop, never restarts the topology: each connection is refused (or answered), counted by
kind on the instance it reached, and told why."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from deployments import WORDCOUNT, deployed

from hailstorm import kafka
from hailstorm.auth import (
    QUERY_IDENTITY,
    SECRET_FILE_VAR,
    RunSecret,
    greet_peer,
    write_secret_file,
)
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce, wordcount_lines
from hailstorm.metrics import parse_samples
from hailstorm.model import run_model
from hailstorm.protocol.clock import clock_to_json
from hailstorm.protocol.wire import (
    MAX_REQUEST_SIZE,
    Answer,
    DataBatch,
    Frame,
    FrameError,
    FrameKind,
    FrameReader,
    Hello,
    Query,
    encode_frame,
    encode_frames,
    recv_frames,
)
from hailstorm.query import QueryError, query_live
from hailstorm.routing import route
from hailstorm.runtime.clients import REQUEST_TIMEOUT

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPIC = "words"
ABSENT = "zzzabsentword"


def _secret_file(path: Path) -> Path:
    write_secret_file(path)
    return path


def _query_live(run: TopologyRun, keys: list[str], secret: Path | None
                ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in run.env.items() if k != SECRET_FILE_VAR}
    if secret is not None:
        env[SECRET_FILE_VAR] = str(secret)
    return subprocess.run(
        [sys.executable, "-m", "hailstorm", "query", str(WORDCOUNT), "counts", *keys,
         "--live", "--name", run.name],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def _answers(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in map(json.loads, result.stdout.splitlines())}


def _check_against_model(run: TopologyRun, produced: Produced, keys: list[str],
                         secret: Path) -> dict[str, dict[str, Any]]:
    """Ask for ``keys`` (and one absent word) once a round includes everything produced;
    every value is the model's, exactly at a clock that includes everything produced."""
    committed = run.wait_committed(produced.clock(), 240)
    model = run_model(run.topology, produced.model_messages()).bolt_state("counts")
    result = _query_live(run, [*keys, ABSENT], secret)
    assert result.returncode == 1, result.stderr  # the absent word
    answers = _answers(result)
    assert ABSENT in answers, (result.stdout, result.stderr)
    assert answers[ABSENT]["found"] is False and answers[ABSENT]["value"] is None
    everything = clock_to_json(produced.clock())
    for key in keys:
        row = answers[key]
        assert row["found"] and row["value"] == model[key], (key, row, model.get(key))
        assert row["processor"] == f"bolt:counts:{route(key, 2)}"
        assert row["exact"] and row["epoch"] >= committed.epoch, row
        assert all(row["clock"].get(p, -1) >= o for p, o in everything.items()), row
        assert row["absorbed"] == {p: o for p, o in everything.items()
                                   if p in row["absorbed"]}, row
    return answers


def test_live_values_equal_the_model_before_and_after_the_owner_is_killed(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    kafka.recreate_topic(stack.kafka, TOPIC, 4)
    partitions = kafka.partitions_of(stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    lines = wordcount_lines(6000, seed=47)
    secret = _secret_file(tmp_path / "run.secret")
    with deployed(stack, WORDCOUNT, tmp_path / "logs") as run:
        run.env[SECRET_FILE_VAR] = str(secret)
        run.start()
        run.wait_flowing(240)
        produce(stack.kafka, produced, lines[:3000], partitions)
        words = Counter(w for line in lines[:3000] for w in line.decode().lower().split())
        keys = [w for w, _ in words.most_common(6) if w.isalpha()]
        first = _check_against_model(run, produced, keys, secret)
        _misbehave(run, RunSecret.from_file(secret), keys)

        # Not for strangers: no secret, or another run's.
        missing = _query_live(run, keys, None)
        assert missing.returncode == 1 and "secret" in missing.stderr, missing.stderr
        other = _query_live(run, keys, _secret_file(tmp_path / "other.secret"))
        assert other.returncode == 1 and "did not accept the secret" in other.stderr, \
            other.stderr

        owner = f"bolt:counts:{route(keys[0], 2)}"
        pid = int(run.processors()[owner].info["pid"])
        run.kill_processor(pid)
        produce(stack.kafka, produced, lines[3000:], partitions)
        run.wait_flowing(240)
        second = _check_against_model(run, produced, keys, secret)
        assert second[keys[0]]["epoch"] > first[keys[0]]["epoch"]
        run.check_recoveries()
    assert os.stat(secret).st_mode & 0o077 == 0


# ------------------------------------------------------------------ misbehaving clients

Act = Callable[[socket.socket], None]


def _raw(sock: socket.socket, kind: FrameKind, payload: bytes) -> None:
    sock.sendall(struct.pack(">IB", len(payload), kind) + payload)


def _misbehaviours(run: TopologyRun, target: str, key: str) -> list[tuple[str, str, Act]]:
    """``(name, the kind it is counted as, what the client does after its handshake)`` for
    ``target``: every way a client can go wrong, and one good query."""
    instance = int(target.rsplit(":", 1)[1])
    good = Query("counts", instance, [key])
    master = run.master()
    epoch = 0 if master is None else master.state.epoch
    upstream = "bolt:counts:0" if target.startswith("sink:") else "spout:lines:words:0"

    def query(frame: Frame) -> Act:
        return lambda s: s.sendall(encode_frames([frame]))

    return [
        ("close after the handshake", "closed", lambda s: s.shutdown(socket.SHUT_WR)),
        ("half a frame, then close", "closed",
         lambda s: (s.sendall(encode_frame(good)[:9]), s.shutdown(socket.SHUT_WR))),
        ("garbage", "garbled", lambda s: s.sendall(b"\xfe" * 100)),
        ("an oversized request", "oversized",
         lambda s: s.sendall(struct.pack(">IB", MAX_REQUEST_SIZE + 1, FrameKind.QUERY))),
        ("a QUERY without a bolt", "malformed_query",
         lambda s: _raw(s, FrameKind.QUERY,
                        pickle.dumps({"instance": instance, "keys": [key]}))),
        ("a QUERY that is not a dict", "malformed_query",
         lambda s: _raw(s, FrameKind.QUERY, pickle.dumps(["counts"]))),
        ("DATA before HELLO", "unexpected_frame",
         query(DataBatch.of([0], [1], [("forged", 1)]))),
        ("a HELLO of another epoch", "foreign_hello",
         query(Hello(upstream, epoch + 1000, target))),
        ("a HELLO of no upstream", "foreign_hello",
         query(Hello("spout:nosuch:words:0", epoch, target))),
        ("an unknown bolt", "unanswerable_query", query(Query("nosuch", instance, [key]))),
        ("a key of the wrong type", "unanswerable_query",
         query(Query("counts", instance, [(1, [2])]))),
        ("a good query", "unanswerable_query" if target.startswith("sink:") else "answered",
         query(good)),  # a sink holds no state to query
    ]


def _connect(address: tuple[str, int], target: str, secret: RunSecret,
             act: Act) -> dict[str, Any] | None:
    """One client connection: the real TLS handshake, ``act``, then the ANSWER (None: none
    came) once the instance closed the connection (so it has counted it)."""
    with socket.create_connection(address, timeout=30) as plain, \
            greet_peer(plain, secret, QUERY_IDENTITY, target, 30) as sock:
        sock.settimeout(30)
        act(sock)
        try:
            frames = recv_frames(sock, FrameReader())
            while sock.recv(4096):  # until the instance closes it
                pass
        except (OSError, FrameError):
            return None
        return frames[0].fields if frames and isinstance(frames[0], Answer) else None


def _counted(run: TopologyRun, ident: str) -> Counter[str]:
    """What ``ident``'s /metrics counted: refusals by kind, and ``answered`` queries."""
    info = run.processors()[ident].info
    url = f"http://{info['host']}:{info['metrics']}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    counted: Counter[str] = Counter()
    for name, labels, value in parse_samples(text):
        if name == "hailstorm_refused_requests_total":
            counted[labels["kind"]] += int(value)
        elif name == "hailstorm_live_queries_total":
            counted["answered"] += int(value)
    return counted


def _misbehave(run: TopologyRun, secret: RunSecret, keys: list[str]) -> None:
    """Every misbehaviour once against each ``counts`` instance and the sink, then 1,000
    connections cycling through them from 4 clients at once, with clients stalling
    meanwhile: no processor restarts, every connection is counted by kind where it went, and
    the client hears why."""
    processors = run.processors()
    recoveries = len(run.recoveries())
    pids = {ident: report.info["pid"] for ident, report in processors.items()}
    targets = sorted(i for i in processors if i.startswith(("bolt:counts:", "sink:")))
    key_of = {t: next((k for k in keys if f"bolt:counts:{route(k, 2)}" == t), keys[0])
              for t in targets}
    address = {t: (str(processors[t].info["host"]), int(processors[t].info["port"]))
               for t in targets}
    before = {t: _counted(run, t) for t in targets}
    sent: dict[str, Counter[str]] = {t: Counter() for t in targets}
    started = time.monotonic()

    stallers = []  # silent after the handshake, on every target at once, meanwhile
    for target in targets:
        for _ in range(2):
            def stall(where: tuple[str, int] = address[target], who: str = target) -> None:
                _connect(where, who, secret, lambda s: None)

            stallers.append(threading.Thread(target=stall))
            sent[target]["stalled"] += 1
    for thread in stallers:
        thread.start()

    # Each way once, with what the client is told.
    for target in targets:
        for name, kind, act in _misbehaviours(run, target, key_of[target]):
            answer = _connect(address[target], target, secret, act)
            sent[target][kind] += 1
            if kind == "answered":
                assert answer is not None and answer["values"], (target, answer)
            elif kind != "closed":
                assert answer is not None and answer.get("error"), (target, name, answer)
                if kind != "unanswerable_query":
                    assert f"refused the request: {kind}" in answer["error"], answer

    # A key of the wrong type through the query client (what `hailstorm query` prints).
    with pytest.raises(QueryError, match="42 is not a key of bolt 'counts'"):
        query_live(run.stack.zk, run.name, run.topology.node("counts"), [42], secret)
    sent[f"bolt:counts:{route(42, 2)}"]["unanswerable_query"] += 1

    # 1,000 more, cycling through targets and ways, from 4 clients at once.
    ways = {t: _misbehaviours(run, t, key_of[t]) for t in targets}
    loop = list(zip(range(1000), itertools.cycle(targets), strict=False))

    def client(part: list[tuple[int, str]]) -> None:
        for n, target in part:
            _name, kind, act = ways[target][n // len(targets) % len(ways[target])]
            _connect(address[target], target, secret, act)
            with counting:
                sent[target][kind] += 1

    counting = threading.Lock()
    loop_started = time.monotonic()
    with ThreadPoolExecutor(4) as clients:
        list(clients.map(client, [loop[i::4] for i in range(4)]))
    loop_seconds = time.monotonic() - loop_started
    for thread in stallers:
        thread.join(REQUEST_TIMEOUT + 30)
    print(f"1,000 misbehaving connections in {loop_seconds:.1f} s; "
          f"all in {time.monotonic() - started:.1f} s")

    assert len(run.recoveries()) == recoveries, run.recoveries()[recoveries:]
    now = run.processors()
    assert {ident: now[ident].info["pid"] for ident in pids} == pids  # nobody restarted
    for target in targets:
        counted = _counted(run, target)
        counted.subtract(before[target])
        assert +counted == +sent[target], (target, dict(counted), dict(sent[target]))
    assert sum(sum(c.values()) for c in sent.values()) >= 1000 + 12 * len(targets)
    refusal_lines = [line for line in run.log("driver").splitlines()
                     if "refused a data-plane client" in line]
    assert refusal_lines and len(refusal_lines) <= 2 * 8 * len(targets), len(refusal_lines)
