"""Metrics on prometheus_client: constant labels, the text rendering and its parser, gauges
read at scrape time, and the /metrics server."""

from __future__ import annotations

import math
import urllib.request

import pytest

from hailstorm.metrics import (
    NegotiatorMetrics,
    ProcessorMetrics,
    Registry,
    parse,
    parse_samples,
    read_at_scrape,
    render,
    scrape,
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
    assert parse_samples(text) == [
        ("hailstorm_messages_in_total", labels, 5.0),
        ("hailstorm_state_keys", labels, 7.0),
        ("hailstorm_batch_seconds_count", labels, 2.0),
        ("hailstorm_batch_seconds_sum", labels, 0.75),
    ]


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
            assert parse(resp.read().decode()) == {"served_total": 2.0}
        assert scrape("127.0.0.1", server.port) == {"served_total": 2.0}
    finally:
        server.stop()


def test_a_server_that_cannot_bind_is_none() -> None:
    assert start_server(Registry(), "203.0.113.7") is None  # not an address of this host
