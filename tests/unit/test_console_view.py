"""The web console: what it draws from status documents, and its read-only server."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm.console.server import ConsoleServer, Sampler, allowed_hosts
from hailstorm.console.view import (
    NODE_WIDTH,
    ROUNDS_KEPT,
    History,
    instances_by_node,
    layers,
    layout,
    node_rates,
    phase_of,
)
from hailstorm.outages import Outage
from hailstorm.status import ZooKeeperUnavailable
from hailstorm.topology import graph_of, load_topology

GRAPH = {
    "nodes": [
        {"name": "lines", "kind": "spout", "parallelism": None, "caption": ["topic words"]},
        {"name": "counts", "kind": "bolt", "parallelism": 2, "caption": ["per_key(Count)"]},
        {"name": "word_counts", "kind": "sink", "parallelism": 1, "caption": ["table"]},
    ],
    "edges": [{"source": "lines", "target": "counts", "routing": "key"},
              {"source": "counts", "target": "word_counts", "routing": "all"}],
    "dead_letter_topics": ["wordcount.dead-letter"],
}
IDS = ["spout:lines:words:0", "spout:lines:words:1", "bolt:counts:0", "bolt:counts:1",
       "sink:word_counts:0"]


def processor(pid: str, **fields: Any) -> dict[str, Any]:
    role = pid.split(":", 1)[0]
    return {"id": pid, "role": role, "registered": True, "error": None, "state": "flowing",
            "in_per_s": None, "out_per_s": None, "quarantined": 0} | fields


def doc(time: float, **fields: Any) -> dict[str, Any]:
    return {"time": time, "master": {"state": "Flowing", "epoch": 4}, "graph": GRAPH,
            "processors": [processor(p) for p in IDS], "partitions": [], "snapshots": [],
            "recoveries": [], "committed": None, "committed_previous": None} | fields


@pytest.mark.parametrize(("master", "fields", "phase"), [
    ("Flowing", {}, "flowing"),
    ("Flowing", {"registered": False}, "dead"),
    ("Flowing", {"error": "boom"}, "dead"),
    ("Initialize", {"error": "boom"}, "dead"),
    ("Initialize", {"registered": False}, "recovering"),
    ("Initialize", {}, "recovering"),
    ("SpoutsRewind", {}, "recovering"),
    ("NegotiatorDisconnected", {}, "recovering"),
    ("SpoutsPaused", {}, "paused"),
    ("Flowing", {"state": "paused"}, "paused"),
    ("Stopped", {"registered": False}, "stopped"),
    ("Stopped", {}, "stopped"),
    ("Stopped", {"error": "connection closed while leaving"}, "stopped"),
])
def test_phase_of_a_spout(master: str, fields: dict[str, Any], phase: str) -> None:
    assert phase_of(processor("spout:lines:words:0", **fields), {"state": master}) == phase


def test_a_spout_that_marked_a_barrier_round_is_drawn_flowing() -> None:
    spout = processor("spout:lines:words:0", state="paused")
    assert phase_of(spout, {"state": "SpoutsPaused", "barrier": True}) == "flowing"
    assert phase_of(spout, {"state": "SpoutsPaused", "barrier": False}) == "paused"


def test_a_stopped_topology_is_drawn_stopped_not_recovering() -> None:
    history = History()
    rows = [processor(p, registered=False, out_per_s=None) for p in IDS]
    history.add(doc(1.0, processors=rows) | {"master": {"state": "Stopped"}})
    view = history.view(dead_letters=[])
    assert view["master_phase"] == "stopped"
    assert set(view["phases"].values()) == {"stopped"}
    assert view["phase_counts"]["stopped"] == len(IDS)
    assert view["phase_counts"]["recovering"] == view["phase_counts"]["dead"] == 0


def test_bolts_are_not_paused_with_the_spouts() -> None:
    assert phase_of(processor("bolt:counts:0"), {"state": "SpoutsPaused"}) == "flowing"
    assert phase_of(processor("bolt:counts:0"), None) == "recovering"


def test_the_word_count_graph_is_laid_out_left_to_right() -> None:
    graph = graph_of(load_topology("topologies/wordcount.py"))
    assert [n["name"] for n in graph["nodes"]] == ["lines", "counts", "word_counts"]
    drawn = layout(graph, instances_by_node(processor(p) for p in IDS))
    nodes = {n["name"]: n for n in drawn["nodes"]}
    assert nodes["lines"]["x"] < nodes["counts"]["x"] < nodes["word_counts"]["x"]
    assert [i["id"] for i in nodes["counts"]["instances"]] == ["bolt:counts:0", "bolt:counts:1"]
    assert nodes["counts"]["parallelism"] == 2 and nodes["counts"]["caption"] == ["per_key(Count)"]
    first, second = nodes["counts"]["instances"]
    assert first["y"] == second["y"] and second["x"] > first["x"]
    edge = drawn["edges"][0]
    assert (edge["source"], edge["target"], edge["routing"]) == ("lines", "counts", "key")
    assert edge["from"][0] == nodes["lines"]["x"] + NODE_WIDTH
    assert edge["to"][0] == nodes["counts"]["x"]
    assert drawn["width"] >= nodes["word_counts"]["x"] + NODE_WIDTH


def test_a_node_sits_one_column_right_of_its_furthest_input() -> None:
    nodes = [{"name": n} for n in "abcd"]
    edges = [{"source": "a", "target": "b"}, {"source": "b", "target": "c"},
             {"source": "a", "target": "c"}, {"source": "a", "target": "d"},
             {"source": "x", "target": "d"}]  # an unknown node is ignored
    assert layers(nodes, edges) == {"a": 0, "b": 1, "c": 2, "d": 1}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n),
    st.lists(st.integers(0, 20), min_size=n, max_size=n))))
def test_layouts_of_any_dag_keep_nodes_apart_and_edges_rightwards(
        case: tuple[int, list[tuple[int, int]], list[int]]) -> None:
    n, pairs, counts = case
    names = [f"n{i}" for i in range(n)]
    edges = [{"source": names[a], "target": names[b]} for a, b in pairs if a < b]
    graph = {"nodes": [{"name": x} for x in names], "edges": edges}
    drawn = layout(graph, {x: [f"bolt:{x}:{k}" for k in range(c)]
                           for x, c in zip(names, counts, strict=True)})
    boxes = {node["name"]: node for node in drawn["nodes"]}
    assert set(boxes) == set(names)
    for a in drawn["nodes"]:
        assert a["x"] + a["w"] <= drawn["width"] and a["y"] + a["h"] <= drawn["height"]
        for i in a["instances"]:
            assert a["x"] <= i["x"] and i["x"] + i["size"] <= a["x"] + a["w"]
            assert a["y"] <= i["y"] and i["y"] + i["size"] <= a["y"] + a["h"]
        for b in drawn["nodes"]:
            if a is not b and a["x"] == b["x"]:
                assert a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"]
    for edge in drawn["edges"]:
        assert boxes[edge["source"]]["x"] < boxes[edge["target"]]["x"]


def test_node_rates_sum_the_instances() -> None:
    rows = [processor("spout:lines:words:0", out_per_s=10.0),
            processor("spout:lines:words:1", out_per_s=5.5),
            processor("bolt:counts:0"), processor("nonsense")]
    assert node_rates(rows) == {"lines": 15.5, "counts": None}


def test_history_keeps_a_window_of_series_and_the_rounds_seen() -> None:
    history = History(window=10.0)
    for t in range(0, 30, 2):
        rows = [processor(p, in_per_s=float(t)) for p in IDS]
        history.add(doc(float(t), processors=rows,
                        partitions=[{"partition": "words:0", "lag": t * 10}]))
    series = history.series()
    assert series["times"] == [-10.0, -8.0, -6.0, -4.0, -2.0, 0.0]
    assert series["lag"]["words:0"] == [180, 200, 220, 240, 260, 280]
    assert series["in"]["bolt:counts:0"] == [18.0, 20.0, 22.0, 24.0, 26.0, 28.0]

    def entry(epoch: int, size: int | None = None) -> dict[str, Any]:
        return {"epoch": epoch, "committed_at": 100.0 + epoch, "clock": {"words:0": epoch},
                "snapshot_s": 0.1, "pause_s": 0.05, "size_bytes": size}

    history.add(doc(40.0, committed=entry(7), committed_previous=entry(5, 300)))
    history.add(doc(41.0, committed=entry(7, 700), committed_previous=entry(5, 999)))
    rounds = history.view()["rounds"]
    assert [(r["epoch"], r["size_bytes"], r["offsets"]) for r in rounds] == [
        (5, 300, 6), (7, 700, 8)]
    for epoch in range(9, 9 + 2 * ROUNDS_KEPT, 2):
        history.add(doc(50.0 + epoch, committed=entry(epoch)))
    assert len(history.rounds) == ROUNDS_KEPT and min(history.rounds) > 7


def test_the_view_colours_instances_and_labels_edges() -> None:
    history = History()
    rows = [processor(p, out_per_s=3.0) for p in IDS]
    rows[2] |= {"registered": False, "out_per_s": None}
    rows[4] |= {"quarantined": 2}
    history.add(doc(1.0, processors=rows))
    view = history.view(dead_letters=[{"node": "lines", "error": "bad"}])
    assert view["phases"]["bolt:counts:0"] == "dead"
    assert view["phase_counts"] == {"flowing": 4, "paused": 0, "recovering": 0, "stopped": 0,
                                   "dead": 1}
    squares = {i["id"]: i["phase"] for n in view["layout"]["nodes"] for i in n["instances"]}
    assert squares == view["phases"]
    assert {(e["source"], e["rate"]) for e in view["layout"]["edges"]} == {
        ("lines", 6.0), ("counts", 3.0)}
    assert view["dead_letters"] == {"topics": ["wordcount.dead-letter"],
                                    "by_processor": {"sink:word_counts:0": 2}, "total": 2,
                                    "over_half_budget": {},
                                    "latest": [{"node": "lines", "error": "bad"}]}


def test_without_a_published_graph_the_nodes_come_from_the_processors() -> None:
    history = History()
    history.add(doc(1.0, graph=None))
    nodes = history.view()["layout"]["nodes"]
    assert [n["name"] for n in nodes] == ["lines", "counts", "word_counts"]
    assert history.view()["layout"]["edges"] == []


def test_an_empty_history_has_an_empty_view() -> None:
    view = History().view()
    assert view["layout"]["nodes"] == [] and view["series"]["times"] == []


# --------------------------------------------------------------------------- server


@pytest.fixture
def server() -> Iterator[ConsoleServer]:
    served = ConsoleServer(lambda: {"status": {"state": "Flowing"}, "view": {}}).start()
    try:
        yield served
    finally:
        served.stop()


def request(server: ConsoleServer, method: str, path: str, host: str | None = None,
            ) -> tuple[int, dict[str, str], bytes]:
    _, _, rest = server.url.partition("://")
    address, port = rest.rstrip("/").rsplit(":", 1)
    connection = http.client.HTTPConnection(address, int(port), timeout=5)
    try:
        headers = {} if host is None else {"Host": host}
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_the_server_serves_the_page_and_the_documents(server: ConsoleServer) -> None:
    status, headers, body = request(server, "GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<svg id="dag"' in body and b"console.js" in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    for path in ("/console.js", "/console.css"):
        assert request(server, "GET", path)[0] == 200
    status, headers, body = request(server, "GET", "/api/console?t=1")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"status": {"state": "Flowing"}, "view": {}}
    assert json.loads(request(server, "GET", "/api/status")[2]) == {"state": "Flowing"}
    assert request(server, "HEAD", "/api/status")[2] == b""
    assert request(server, "GET", "/../etc/passwd")[0] == 404


def test_the_server_only_reads(server: ConsoleServer) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = request(server, method, "/api/console")
        assert status == 405 and headers["Allow"] == "GET, HEAD"


def test_a_loopback_server_answers_only_loopback_host_names(server: ConsoleServer) -> None:
    port = server.url.rstrip("/").rsplit(":", 1)[1]
    assert request(server, "GET", "/", host=f"localhost:{port}")[0] == 200
    assert request(server, "GET", "/", host=f"evil.example:{port}")[0] == 421
    assert allowed_hosts("0.0.0.0", 80) is None
    assert allowed_hosts("10.0.0.5", 80) == {"10.0.0.5", "10.0.0.5:80"}


class _ZooKeeperDown:
    """A collector whose ZooKeeper is down (what :meth:`Collector.read` raises then)."""

    def read(self, topology: str) -> Any:
        raise ZooKeeperUnavailable(Outage("ZooKeeper at zk:2181", 1_795_000_000.0, 1, "lost"))


def test_the_console_says_it_waits_for_zookeeper_over_what_it_last_read() -> None:
    sampler = Sampler(_ZooKeeperDown(), "wc", 0.05, kafka=None)  # type: ignore[arg-type]
    sampler.history.add({"time": 1_795_000_000.0 - 60, "processors": []})
    sampler.start()
    try:
        for _ in range(200):
            if sampler.document()["problems"]:
                break
            sampler.stopping.wait(0.01)
    finally:
        sampler.stop()
        sampler.join(5)
    assert sampler.document()["problems"] == [
        "waiting for ZooKeeper at zk:2181, unavailable since 2026-11-18T11:06:40Z: what is "
        "shown was read at 2026-11-18T11:05:40Z"]


def test_a_local_recovery_shows_only_its_instances_recovering() -> None:
    master = {"state": "Restarting", "instances": ["bolt:counts:1"]}
    assert phase_of({"id": "bolt:counts:1", "registered": True}, master) == "recovering"
    assert phase_of({"id": "bolt:counts:0", "registered": True}, master) == "flowing"
    assert phase_of({"id": "bolt:counts:1", "registered": True},
                    {**master, "state": "Replaying"}) == "recovering"
