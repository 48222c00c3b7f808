"""The Prometheus text rendering, its parser, and the /metrics server."""

from __future__ import annotations

import math
import urllib.error
import urllib.request

import pytest

from hailstorm.metrics import (
    CONTENT_TYPE,
    MetricsServer,
    NegotiatorMetrics,
    ProcessorMetrics,
    Registry,
    format_value,
    parse,
    parse_samples,
    scrape,
)


def test_render_is_the_text_exposition_format() -> None:
    r = Registry({"topology": "wc", "processor": 'bolt:"x"\\1'})
    c = r.counter("hailstorm_messages_in_total", "Tuples received.")
    g = r.gauge("hailstorm_state_keys", "Keys.")
    s = r.summary("hailstorm_batch_seconds", "Per batch.")
    c.inc(3)
    c.inc(2)
    g.set(7)
    s.observe(0.5)
    s.observe(0.25)
    labels = '{processor="bolt:\\"x\\"\\\\1",topology="wc"}'
    assert r.render() == (
        "# HELP hailstorm_messages_in_total Tuples received.\n"
        "# TYPE hailstorm_messages_in_total counter\n"
        f"hailstorm_messages_in_total{labels} 5\n"
        "# HELP hailstorm_state_keys Keys.\n"
        "# TYPE hailstorm_state_keys gauge\n"
        f"hailstorm_state_keys{labels} 7\n"
        "# HELP hailstorm_batch_seconds Per batch.\n"
        "# TYPE hailstorm_batch_seconds summary\n"
        f"hailstorm_batch_seconds_count{labels} 2\n"
        f"hailstorm_batch_seconds_sum{labels} 0.75\n"
    )


def test_parse_reads_back_what_render_writes() -> None:
    r = Registry({"processor": 'a"b\nc'})
    r.counter("x_total", "x").inc(4)
    r.summary("lat", "l").observe(1.5)
    samples = parse_samples(r.render())
    assert samples == [("x_total", {"processor": 'a"b\nc'}, 4.0),
                       ("lat_count", {"processor": 'a"b\nc'}, 1.0),
                       ("lat_sum", {"processor": 'a"b\nc'}, 1.5)]
    assert parse(r.render()) == {"x_total": 4.0, "lat_count": 1.0, "lat_sum": 1.5}
    assert parse("a 1 1700000000\nb{l=\"v\"} +Inf\n")["b"] == math.inf
    with pytest.raises(ValueError):
        parse("not a sample line at all {")


def test_values_and_names() -> None:
    assert format_value(3.0) == "3"
    assert format_value(0.1) == "0.1"
    assert format_value(math.inf) == "+Inf"
    assert format_value(math.nan) == "NaN"
    with pytest.raises(ValueError):
        Registry().counter("bad-name", "x")
    with pytest.raises(ValueError):
        Registry({"bad-label": "x"}).counter("ok", "x")


def test_updates_never_raise() -> None:
    r = Registry()
    c = r.counter("c_total", "c")
    c.inc("nonsense")  # type: ignore[arg-type]
    c.inc(-1)  # counters never go down
    g = r.gauge("g", "g", function=lambda: 1 / 0)
    g.set("x")  # type: ignore[arg-type]
    r.summary("s", "s").observe("y")  # type: ignore[arg-type]
    assert parse(r.render()) == {"c_total": 0.0, "g": 0.0, "s_count": 0.0, "s_sum": 0.0}
    assert r.counter("c_total", "again") is c  # registering twice gives the same metric
    with pytest.raises(ValueError):
        r.gauge("c_total", "another kind")


def test_gauge_function_is_read_at_render_time() -> None:
    box = {"v": 1}
    r = Registry()
    r.gauge("keys", "k", function=lambda: box["v"])
    assert parse(r.render())["keys"] == 1
    box["v"] = 42
    assert parse(r.render())["keys"] == 42


def test_processor_and_negotiator_metrics() -> None:
    m = ProcessorMetrics("wc", "bolt:counts:0")
    m.batch(0.0, received=10, sent=4)
    m.snapshot(3, 0.02, 1234)
    m.rows_committed.inc(5)
    values = parse(m.registry.render())
    assert values["hailstorm_messages_in_total"] == 10
    assert values["hailstorm_messages_out_total"] == 4
    assert values["hailstorm_batches_total"] == 1
    assert values["hailstorm_batch_seconds_count"] == 1
    assert values["hailstorm_snapshot_last_bytes"] == 1234
    assert values["hailstorm_snapshot_last_epoch"] == 3
    assert values["hailstorm_rows_committed_total"] == 5
    n = NegotiatorMetrics("wc", "neg-1")
    n.rounds_committed.inc()
    assert parse(n.registry.render())["hailstorm_negotiator_rounds_committed_total"] == 1


def test_server_serves_metrics_on_a_free_port() -> None:
    r = Registry()
    r.counter("served_total", "s").inc(2)
    server = MetricsServer(r, "127.0.0.1").start()
    try:
        assert server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics",
                                    timeout=5) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            assert parse(resp.read().decode()) == {"served_total": 2.0}
        assert scrape("127.0.0.1", server.port) == {"served_total": 2.0}
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=5)
    finally:
        server.stop()
