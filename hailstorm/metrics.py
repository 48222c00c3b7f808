"""Metrics: a tiny registry rendered in the Prometheus text exposition format, and a
background HTTP server that serves it on ``/metrics``.

No dependency: counters, gauges and summaries (count and sum, plus the last observed value
as a ``<name>_last`` gauge) are all a processor or the negotiator needs. Every update is
guarded: a metric can never raise into the code that counts (metrics must never crash a
processor).

    registry = Registry()
    messages = registry.counter("hailstorm_messages_in_total", "Tuples received.")
    messages.inc(10)
    server = MetricsServer(registry, "127.0.0.1").start()   # server.port
    registry.render()   # the text format

:func:`parse` reads the text format back (samples by name and labels); ``hailstorm status``
uses it on what it scrapes.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("hailstorm.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it (integers without a fraction)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labels: Mapping[str, str]) -> None:
        if not _NAME.match(name):
            raise ValueError(f"bad metric name {name!r}")
        for key in labels:
            if not _LABEL.match(key):
                raise ValueError(f"bad label name {key!r}")
        self.name = name
        self.help = help_text
        self.labels = dict(labels)
        self._lock = threading.Lock()

    def samples(self) -> list[tuple[str, float]]:
        raise NotImplementedError

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help.replace(chr(10), ' ')}",
                 f"# TYPE {self.name} {self.kind}"]
        labels = format_labels(self.labels)
        lines += [f"{name}{labels} {format_value(v)}" for name, v in self.samples()]
        return lines


class Counter(_Metric):
    """A monotonically increasing count."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Mapping[str, str]) -> None:
        super().__init__(name, help_text, labels)
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        try:
            if amount > 0:
                with self._lock:
                    self.value += amount
        except Exception:  # never raise into the counting code
            log.debug("counter %s: bad increment %r", self.name, amount, exc_info=True)

    def samples(self) -> list[tuple[str, float]]:
        return [(self.name, self.value)]


class Gauge(_Metric):
    """A value that goes up and down (set directly or computed at render time)."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, labels: Mapping[str, str],
                 function: Callable[[], float | None] | None = None) -> None:
        super().__init__(name, help_text, labels)
        self.value = 0.0
        self.function = function

    def set(self, value: float | None) -> None:
        try:
            if value is not None:
                self.value = float(value)
        except Exception:
            log.debug("gauge %s: bad value %r", self.name, value, exc_info=True)

    def samples(self) -> list[tuple[str, float]]:
        if self.function is not None:
            try:
                value = self.function()
            except Exception:
                value = None
            if value is not None:
                self.value = float(value)
        return [(self.name, self.value)]


class Summary(_Metric):
    """Observations: ``<name>_count`` and ``<name>_sum`` (a summary without quantiles)."""

    kind = "summary"

    def __init__(self, name: str, help_text: str, labels: Mapping[str, str]) -> None:
        super().__init__(name, help_text, labels)
        self.count = 0
        self.sum = 0.0
        self.last: float | None = None

    def observe(self, value: float) -> None:
        try:
            value = float(value)
            with self._lock:
                self.count += 1
                self.sum += value
                self.last = value
        except Exception:
            log.debug("summary %s: bad observation %r", self.name, value, exc_info=True)

    def samples(self) -> list[tuple[str, float]]:
        return [(f"{self.name}_count", self.count), (f"{self.name}_sum", self.sum)]


class Registry:
    """Metrics by name, in registration order; ``labels`` are added to every sample."""

    def __init__(self, labels: Mapping[str, str] | None = None) -> None:
        self.labels = dict(labels or {})
        self._metrics: dict[str, _Metric] = {}
        self._lock = threading.Lock()

    def _add(self, metric: _Metric) -> Any:
        with self._lock:
            existing = self._metrics.get(metric.name)
            if existing is not None:
                if type(existing) is not type(metric):
                    raise ValueError(f"{metric.name} is already a {existing.kind}")
                return existing
            self._metrics[metric.name] = metric
            return metric

    def counter(self, name: str, help_text: str) -> Counter:
        result: Counter = self._add(Counter(name, help_text, self.labels))
        return result

    def gauge(self, name: str, help_text: str,
              function: Callable[[], float | None] | None = None) -> Gauge:
        result: Gauge = self._add(Gauge(name, help_text, self.labels, function))
        return result

    def summary(self, name: str, help_text: str) -> Summary:
        result: Summary = self._add(Summary(name, help_text, self.labels))
        return result

    def render(self) -> str:
        """The whole registry in the Prometheus text exposition format (version 0.0.4)."""
        with self._lock:
            metrics = list(self._metrics.values())
        lines: list[str] = []
        for metric in metrics:
            lines += metric.render()
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- parsing

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse(text: str) -> dict[str, float]:
    """Samples of a text exposition by name (labels ignored, values of equal names summed).

    Raises :class:`ValueError` on a line that is neither a comment nor a sample.
    """
    samples: dict[str, float] = {}
    for name, _labels, value in parse_samples(text):
        samples[name] = samples.get(name, 0.0) + value
    return samples


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a text exposition as ``(name, labels, value)``."""
    result: list[tuple[str, dict[str, str], float]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"line {number} is not a sample: {line!r}")
        labels = {k: _unescape(v) for k, v in _LABEL_PAIR.findall(match["labels"] or "")}
        raw = match["value"]
        value = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(raw)
        result.append((match["name"], labels, float(raw) if value is None else value))
    return result


def scrape(host: str, port: int, timeout: float = 2.0) -> dict[str, float]:
    """GET ``http://host:port/metrics`` and :func:`parse` it."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as resp:
        return parse(resp.read().decode())


# --------------------------------------------------------------------------- serving


class MetricsServer:
    """Serves a registry on ``http://<host>:<port>/metrics`` from a daemon thread."""

    def __init__(self, registry: Registry, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics here")
                    return
                try:
                    body = registry.render().encode()
                except Exception as exc:  # pragma: no cover - render guards itself
                    self.send_error(500, f"{type(exc).__name__}")
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics: " + format, *args)

        server = ThreadingHTTPServer((self.host, self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server = self._server
        if server is not None:
            self._server = None
            try:
                server.shutdown()
                server.server_close()
            except Exception:
                log.debug("stopping the metrics server failed", exc_info=True)


# --------------------------------------------------------------------------- the metrics


class ProcessorMetrics:
    """What every processor counts (names documented in docs/operations.md)."""

    def __init__(self, topology: str, processor: str) -> None:
        r = self.registry = Registry({"topology": topology, "processor": processor})
        self.messages_in = r.counter("hailstorm_messages_in_total",
                                     "Tuples (or combined contributions) received (spouts: "
                                     "Kafka messages consumed).")
        self.messages_out = r.counter("hailstorm_messages_out_total",
                                      "Tuples sent downstream.")
        self.batches = r.counter("hailstorm_batches_total", "Batches processed.")
        self.batch_seconds = r.summary("hailstorm_batch_seconds",
                                       "Processing time per batch (seconds).")
        self.snapshot_seconds = r.summary("hailstorm_snapshot_seconds",
                                          "Time to write a snapshot durably (bolts).")
        self.snapshot_bytes = r.summary("hailstorm_snapshot_bytes",
                                        "Size of each snapshot written (bolts).")
        self.snapshot_last_seconds = r.gauge("hailstorm_snapshot_last_seconds",
                                             "Write time of the last snapshot (bolts).")
        self.snapshot_last_bytes = r.gauge("hailstorm_snapshot_last_bytes",
                                           "Size of the last snapshot (bolts).")
        self.snapshot_last_epoch = r.gauge("hailstorm_snapshot_last_epoch",
                                           "Round of the last snapshot (bolts).")
        self.state_keys = r.gauge("hailstorm_state_keys", "Distinct keys held (keyed bolts).")
        self.rows_committed = r.counter("hailstorm_rows_committed_total",
                                        "Rows committed to the sink's table or topic (sinks).")
        self.sink_commit_seconds = r.summary(
            "hailstorm_sink_commit_seconds",
            "Time of each sink commit: a database transaction, or a Kafka transaction from "
            "its first record to its commit (sinks).")
        self.quarantined = r.counter(
            "hailstorm_quarantined_total",
            "Records quarantined: written to the dead-letter topic (spouts, bolts) or to the "
            "table's <table>_rejected table (sinks).")
        self.refused_connections = r.counter(
            "hailstorm_refused_connections_total",
            "Data-plane connections refused before a frame was read (no proof of the run's "
            "secret, a handshake too slow, too many at once).")

    def batch(self, started: float, received: int, sent: int) -> None:
        """One batch processed since ``started`` (a ``time.perf_counter()`` value)."""
        try:
            self.batches.inc()
            self.messages_out.inc(sent)  # first: a scrape showing the input shows its output
            self.messages_in.inc(received)
            self.batch_seconds.observe(time.perf_counter() - started)
        except Exception:
            log.debug("counting a batch failed", exc_info=True)

    def snapshot(self, epoch: int, seconds: float | None, size: int) -> None:
        try:
            if seconds is not None:
                self.snapshot_seconds.observe(seconds)
                self.snapshot_last_seconds.set(seconds)
            self.snapshot_bytes.observe(size)
            self.snapshot_last_bytes.set(size)
            self.snapshot_last_epoch.set(epoch)
        except Exception:
            log.debug("counting a snapshot failed", exc_info=True)


class NegotiatorMetrics:
    """What a negotiator counts."""

    def __init__(self, topology: str, identifier: str) -> None:
        r = self.registry = Registry({"topology": topology, "negotiator": identifier})
        self.rounds_committed = r.counter("hailstorm_negotiator_rounds_committed_total",
                                          "Snapshot rounds committed by this negotiator.")
        self.recoveries = r.counter("hailstorm_negotiator_recoveries_total",
                                    "Transitions to Initialize written by this negotiator.")
        self.transitions = r.counter("hailstorm_negotiator_transitions_total",
                                     "Master state transitions written by this negotiator.")
        self.epoch = r.gauge("hailstorm_negotiator_epoch",
                             "Epoch of the last master state this negotiator wrote or read.")
        self.leader = r.gauge("hailstorm_negotiator_leader", "1 while this negotiator leads.")
        self.pause_seconds = r.summary(
            "hailstorm_negotiator_pause_seconds",
            "How long each snapshot round held the spouts paused: from writing SpoutsPaused "
            "to writing Flowing with the round's clock.")
        self.pause_max_seconds = r.gauge(
            "hailstorm_negotiator_pause_max_seconds",
            "The longest such pause this negotiator saw.")
        self.fallbacks = r.counter(
            "hailstorm_negotiator_fallbacks_total",
            "Recoveries that fell back to the previous committed round because a snapshot "
            "of the committed one was corrupt.")


def start_server(registry: Registry, host: str) -> MetricsServer | None:
    """Serve ``registry`` on ``host``, port 0; None (logged) when that fails."""
    try:
        return MetricsServer(registry, host, 0).start()
    except Exception as exc:
        log.warning("no metrics server on %s: %s", host, exc)
        return None
