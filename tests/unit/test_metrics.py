"""Metrics on prometheus_client: constant labels, the text rendering and its parser, gauges
read at scrape time, and the /metrics server."""

from __future__ import annotations

import math
import socket
import threading
import time
import urllib.request
from pathlib import Path

import prometheus_client
import pytest

from hailstorm.metrics import (
    SCRAPE_LIMIT,
    NegotiatorMetrics,
    ProcessorMetrics,
    Registry,
    ScrapeRefused,
    parse,
    parse_samples,
    read_at_scrape,
    render,
    scrape,
    scrape_address,
    start_server,
)


def test_every_sample_carries_the_registry_labels() -> None:
    labels = {"topology": "wc", "processor": 'bolt:"x"\\1\nz'}
    r = Registry(labels)
    c = r.counter("hailstorm_messages_in_total", "Tuples received.")
    r.gauge("hailstorm_state_keys", "Keys.").set(7)
    s = r.summary("hailstorm_batch_seconds", "Per batch.")
    c.inc(3)
    c.inc(2)
    s.observe(0.5)
    s.observe(0.25)
    text = render(r)
    assert "# TYPE hailstorm_messages_in_total counter" in text
    assert "_created" not in text
    samples = parse_samples(text)
    assert [s for s in samples if s[0].startswith("hailstorm_")] == [
        ("hailstorm_messages_in_total", labels, 5.0),
        ("hailstorm_state_keys", labels, 7.0),
        ("hailstorm_batch_seconds_count", labels, 2.0),
        ("hailstorm_batch_seconds_sum", labels, 0.75),
    ]
    assert all(sample_labels == labels for _name, sample_labels, _value in samples)


def test_a_process_collector_failing_leaves_out_its_figures_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: object) -> list[object]:
        raise UnboundLocalError("no 'Max open files' line in /proc/self/limits")

    monkeypatch.setattr(prometheus_client.ProcessCollector, "collect", fail)
    r = Registry({"processor": "p"})  # registering collects once: it must not raise
    r.counter("served_total", "s").inc()
    assert parse(render(r)) == {"served_total": 1.0}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_registry_shows_its_process_cpu_and_memory() -> None:
    r = Registry({"processor": "bolt:b:0"})
    before = parse(render(r))
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:  # burn CPU this process is charged for
        pass
    after = parse(render(r))
    assert after["process_cpu_seconds_total"] > before["process_cpu_seconds_total"]
    assert after["process_resident_memory_bytes"] > 0
    assert after["process_open_fds"] >= 1


def test_parse_sums_equal_names_and_refuses_garbage() -> None:
    assert parse('a 1 1700000000\nb{l="v"} +Inf\nb{l="w"} 2\n') == {"a": 1.0, "b": math.inf}
    with pytest.raises(ValueError):
        parse("not a sample line at all {")


def test_a_gauge_read_at_scrape_keeps_its_last_value_when_the_function_fails() -> None:
    box: dict[str, float | None] = {"v": 1}
    r = Registry()
    read_at_scrape(r.gauge("keys", "k"), lambda: box["v"])
    assert parse(render(r))["keys"] == 1
    box["v"] = 42
    assert parse(render(r))["keys"] == 42
    box["v"] = None
    assert parse(render(r))["keys"] == 42
    read_at_scrape(r.gauge("broken", "b"), lambda: 1 / 0)
    assert parse(render(r))["broken"] == 0


def test_processor_and_negotiator_metrics() -> None:
    m = ProcessorMetrics("wc", "bolt:counts:0")
    m.batch(0.0, received=10, sent=4)
    m.snapshot(3, 0.02, 1234)
    m.rows_committed.inc(5)
    values = parse(render(m.registry))
    assert values["hailstorm_messages_in_total"] == 10
    assert values["hailstorm_messages_out_total"] == 4
    assert values["hailstorm_batches_total"] == 1
    assert values["hailstorm_batch_seconds_count"] == 1
    assert values["hailstorm_snapshot_last_bytes"] == 1234
    assert values["hailstorm_snapshot_last_epoch"] == 3
    assert values["hailstorm_rows_committed_total"] == 5
    n = NegotiatorMetrics("wc", "neg-1")
    n.rounds_committed.inc()
    n.pause(0.3)
    n.pause(0.1)
    negotiator = parse(render(n.registry))
    assert negotiator["hailstorm_negotiator_rounds_committed_total"] == 1
    assert negotiator["hailstorm_negotiator_pause_seconds_count"] == 2
    assert negotiator["hailstorm_negotiator_pause_max_seconds"] == 0.3


def test_server_serves_metrics_on_a_free_port() -> None:
    r = Registry({"processor": "p"})
    r.counter("served_total", "s").inc(2)
    server = start_server(r, "127.0.0.1")
    assert server is not None
    try:
        assert server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics",
                                    timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            assert parse(resp.read().decode())["served_total"] == 2.0
        assert scrape("127.0.0.1", server.port)["served_total"] == 2.0
    finally:
        server.stop()


def test_a_server_that_cannot_bind_is_none() -> None:
    assert start_server(Registry(), "203.0.113.7") is None  # not an address of this host


@pytest.mark.parametrize(("host", "port"), [
    ("evil.example/x?", 80), ("user@host", 80), ("", 80), ("host\n", 80), ("10.0.0.1", 0),
    ("10.0.0.1", 70000), ("10.0.0.1", "80"), (None, 80), ("10.0.0.1", True)])
def test_scrape_refuses_addresses_that_are_not_a_host_and_a_port(host: object,
                                                                 port: object) -> None:
    """Addresses come from ZooKeeper: whoever could write them must not choose the URL."""
    with pytest.raises(ScrapeRefused):
        scrape_address(host, port)


@pytest.mark.parametrize(("host", "port"), [("127.0.0.1", 9), ("::1", 443), ("node-3.dc", 80)])
def test_scrape_takes_ip_addresses_and_host_names(host: str, port: int) -> None:
    assert scrape_address(host, port) == (host, port)


def _serve_once(answer: bytes) -> tuple[int, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_scrape_follows_no_redirect() -> None:
    port, thread = _serve_once(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/x\r\n"
                               b"Content-Length: 0\r\n\r\n")
    with pytest.raises(ScrapeRefused, match="302"):
        scrape("127.0.0.1", port)
    thread.join(5)


def test_scrape_refuses_an_answer_over_the_limit() -> None:
    size = SCRAPE_LIMIT + 10
    port, thread = _serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size
                               + b"#" * size)
    with pytest.raises(ScrapeRefused, match="more than"):
        scrape("127.0.0.1", port)
    thread.join(5)
