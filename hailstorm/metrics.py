"""Metrics on ``prometheus_client``: one registry per processor or negotiator whose every
sample carries the same constant labels, served on ``/metrics`` by prometheus_client's
HTTP server from a daemon thread.

    metrics = ProcessorMetrics("wordcount", "bolt:counts:0")
    metrics.messages_in.inc(10)
    server = start_server(metrics.registry, "127.0.0.1")   # server.port
    render(metrics.registry)   # the text exposition format

:func:`parse` reads the text format back (prometheus_client's parser); ``hailstorm status``
uses it on what it scrapes. Counters show no ``_created`` series (they would only add noise
to every scrape).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, Summary
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from hailstorm.errors import ProtocolError

if TYPE_CHECKING:
    from hailstorm.bad_records import Fill

__all__ = ["SCRAPE_LIMIT", "Counter", "Gauge", "MetricsServer", "NegotiatorMetrics",
           "ProcessorMetrics", "Registry", "ScrapeRefused", "Summary", "parse", "parse_samples",
           "render", "scrape", "scrape_address", "start_server"]

log = logging.getLogger("hailstorm.metrics")
M = TypeVar("M", Counter, Gauge, Summary)

prometheus_client.disable_created_metrics()


class _ProcessFigures:
    """prometheus_client's :class:`~prometheus_client.ProcessCollector` (this process's CPU
    seconds, resident and virtual memory, open files, start time, read from ``/proc``), its
    samples carrying ``labels`` like every other sample of the registry."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self._process = ProcessCollector(registry=None)
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self._process.collect())
        except Exception:  # broad: prometheus_client reading /proc; a scrape never fails
            log.debug("reading this process's figures failed", exc_info=True)
            return
        for family in families:
            family.samples = [sample._replace(labels={**self._labels, **sample.labels})
                              for sample in family.samples]
            yield family


class Registry:
    """A prometheus_client registry whose metrics all carry ``labels``, the ``process_*``
    metrics of the process included."""

    def __init__(self, labels: Mapping[str, str] | None = None) -> None:
        self.labels = dict(labels or {})
        self.collector = CollectorRegistry(auto_describe=True)
        self.collector.register(_ProcessFigures(self.labels))

    def counter(self, name: str, help_text: str) -> Counter:
        """A counter; ``name`` ends in ``_total`` (as exposed)."""
        return self._bound(Counter(name, help_text, list(self.labels),
                                   registry=self.collector))

    def counter_by(self, name: str, help_text: str, label: str) -> Callable[[str], Counter]:
        """A counter with one more label: ``counter_by(...)(value)`` is its series for that
        value of ``label`` (created, at 0, on first use)."""
        family = Counter(name, help_text, [*self.labels, label], registry=self.collector)
        return lambda value: family.labels(**self.labels, **{label: value})

    def gauge(self, name: str, help_text: str) -> Gauge:
        return self._bound(Gauge(name, help_text, list(self.labels), registry=self.collector))

    def summary(self, name: str, help_text: str) -> Summary:
        """Observations: ``<name>_count`` and ``<name>_sum``."""
        return self._bound(Summary(name, help_text, list(self.labels),
                                   registry=self.collector))

    def _bound(self, metric: M) -> M:
        return metric.labels(**self.labels) if self.labels else metric


def read_at_scrape(gauge: Gauge, function: Callable[[], float | None]) -> None:
    """Let ``gauge`` show ``function()`` at every scrape; when it fails or returns None the
    gauge keeps its last value (a metric never raises into a scrape)."""
    last = [0.0]

    def read() -> float:
        try:
            value = function()
        # broad: any failure of function keeps the last value; a scrape never fails
        except Exception:
            value = None
        if value is not None:
            last[0] = float(value)
        return last[0]

    gauge.set_function(read)


def render(registry: Registry) -> str:
    """The whole registry in the Prometheus text exposition format."""
    return prometheus_client.generate_latest(registry.collector).decode()


def parse(text: str) -> dict[str, float]:
    """Samples of a text exposition by name (labels ignored, values of equal names summed).

    Raises :class:`ValueError` on text that is not the exposition format.
    """
    samples: dict[str, float] = {}
    for name, _labels, value in parse_samples(text):
        samples[name] = samples.get(name, 0.0) + value
    return samples


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a text exposition as ``(name, labels, value)``."""
    try:
        return [(sample.name, dict(sample.labels), float(sample.value))
                for family in text_string_to_metric_families(text)
                for sample in family.samples]
    except (ValueError, IndexError, KeyError) as exc:
        raise ValueError(f"not the Prometheus text format: {exc}") from None


SCRAPE_LIMIT = 8 * 1024 * 1024
"""Largest ``/metrics`` answer read; a processor's is a few kB."""

_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})\Z")


class ScrapeRefused(ProtocolError, ValueError):
    """An address or an answer that :func:`scrape` will not use."""


def scrape_address(host: object, port: object) -> tuple[str, int]:
    """``(host, port)`` of a metrics endpoint as read from ZooKeeper, checked: an IP
    address or a plain host name, and a TCP port. Whoever can write ZooKeeper must not
    point ``status`` at a URL of their choosing."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ScrapeRefused(f"metrics port {port!r} is not a TCP port")
    if not isinstance(host, str):
        raise ScrapeRefused(f"metrics host {host!r} is not a host")
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        if not _HOSTNAME.match(host):
            raise ScrapeRefused(f"metrics host {host!r} is neither an IP address nor a "
                                "host name") from None
        return host, port


def scrape(host: str, port: int, timeout: float = 2.0) -> dict[str, float]:
    """GET ``http://host:port/metrics`` and :func:`parse` it: no redirect is followed, an
    answer over :data:`SCRAPE_LIMIT` bytes is refused, and the whole exchange gets
    ``timeout`` seconds, however slowly the answer trickles in (the socket is shut down
    then)."""
    host, port = scrape_address(host, port)
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    started = time.monotonic()
    watchdog: threading.Timer | None = None
    try:
        connection.connect()
        sock = connection.sock
        watchdog = threading.Timer(max(0.0, timeout - (time.monotonic() - started)),
                                   _shut, (sock,))
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            if response.status != 200:
                raise ScrapeRefused(f"{host}:{port}/metrics answered {response.status}")
            body = response.read(SCRAPE_LIMIT + 1)
        except (OSError, http.client.HTTPException):
            if time.monotonic() - started >= timeout:
                raise ScrapeRefused(f"{host}:{port}/metrics did not answer within "
                                    f"{timeout:g} s") from None
            raise
        if time.monotonic() - started >= timeout:  # cut short by the watchdog
            raise ScrapeRefused(f"{host}:{port}/metrics did not answer within {timeout:g} s")
    finally:
        if watchdog is not None:
            watchdog.cancel()
        connection.close()
    if len(body) > SCRAPE_LIMIT:
        raise ScrapeRefused(f"{host}:{port}/metrics answered more than {SCRAPE_LIMIT} bytes")
    return parse(body.decode())


def _shut(sock: socket.socket) -> None:
    """End a scrape that ran out of time: its blocked reads return at once."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class MetricsServer:
    """prometheus_client's HTTP server for one registry, on a daemon thread."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.port = int(server.server_port)

    def stop(self, wait: bool = True) -> None:
        """Stop serving; without ``wait`` on a thread of its own: the server's loop looks
        for the stop only every 0.5 s, and a processor ending has better things to do."""
        server, self._server = self._server, None
        if server is None:
            return
        if not wait:
            threading.Thread(target=_stop, args=(server,), daemon=True).start()
            return
        _stop(server)


def _stop(server: Any) -> None:
    try:
        server.shutdown()
        server.server_close()
    except Exception:  # broad: shutdown path; a failure to stop is only logged
        log.debug("stopping the metrics server failed", exc_info=True)


def start_server(registry: Registry, host: str) -> MetricsServer | None:
    """Serve ``registry`` on ``host``, a free port; None (logged) when that fails."""
    try:
        server, thread = prometheus_client.start_http_server(0, addr=host,
                                                             registry=registry.collector)
    # broad: bind/thread/getaddrinfo errors alike: logged, no metrics server
    except Exception as exc:
        log.warning("no metrics server on %s: %s", host, exc)
        return None
    return MetricsServer(server, thread)


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
        self.bad_in_window = r.gauge(
            "hailstorm_bad_records_in_window",
            "Bad records among the last records of the node whose bad-record budget is the "
            "fullest (spouts, bolts; see on_error).")
        self.bad_window_records = r.gauge(
            "hailstorm_bad_records_window_records",
            "Records in that node's window (at most the budget's window).")
        self.bad_limit = r.gauge(
            "hailstorm_bad_records_limit",
            "Bad records that node's budget allows in a window: one more halts the topology.")
        self.rounds = r.counter_by(
            "hailstorm_spout_rounds_total",
            "Snapshot rounds a spout answered, by how: marked (a barrier in its streams, "
            "reading on) or paused (holding what it read until the clock; spouts).",
            "how")
        self.late = r.counter(
            "hailstorm_late_total",
            "Late tuples written to the late topic of the window bolt they came too late for "
            "(spouts).")
        self.windows_expired = r.counter(
            "hailstorm_windows_expired_total",
            "Closed windows a bolt routing late data dropped from its state (bolts).")
        self.keys_expired = r.counter(
            "hailstorm_keys_expired_total",
            "Keys a bolt routing late data dropped with their last closed window (bolts).")
        self.refused_connections = r.counter(
            "hailstorm_refused_connections_total",
            "Data-plane connections refused before a frame was read (no TLS certificate of "
            "the run's CA, a handshake too slow, too many at once).")
        self.refused_requests = r.counter_by(
            "hailstorm_refused_requests_total",
            "Authenticated data-plane connections refused before they became a peer, by "
            "kind: closed, stalled, oversized, garbled, malformed_query, "
            "unexpected_frame, foreign_hello, unanswerable_query, other (bolts and sinks).",
            "kind")
        self.live_queries = r.counter(
            "hailstorm_live_queries_total",
            "Live queries answered with values (bolts; a query answered with an error is a "
            "refused request).")
        self.waiting_since = r.gauge(
            "hailstorm_waiting_since_seconds",
            "Unix time since which the processor waits out an outage of a service it needs "
            "(a sink's database); 0 when it does not wait.")

    def batch(self, started: float, received: int, sent: int) -> None:
        """One batch processed since ``started`` (a ``time.perf_counter()`` value)."""
        try:
            self.batches.inc()
            self.messages_out.inc(sent)  # first: a scrape showing the input shows its output
            self.messages_in.inc(received)
            self.batch_seconds.observe(time.perf_counter() - started)
        except Exception:  # broad: prometheus_client; counting never fails the batch, logged
            log.debug("counting a batch failed", exc_info=True)

    def bad_records(self, fill: Fill) -> None:
        """How full the fullest bad-record window is (see :mod:`hailstorm.bad_records`)."""
        self.bad_in_window.set(fill.bad)
        self.bad_window_records.set(fill.records)
        self.bad_limit.set(fill.limit)

    def snapshot(self, epoch: int, seconds: float | None, size: int) -> None:
        try:
            if seconds is not None:
                self.snapshot_seconds.observe(seconds)
                self.snapshot_last_seconds.set(seconds)
            self.snapshot_bytes.observe(size)
            self.snapshot_last_bytes.set(size)
            self.snapshot_last_epoch.set(epoch)
        except Exception:  # broad: prometheus_client; counting never fails a round, logged
            log.debug("counting a snapshot failed", exc_info=True)


class NegotiatorMetrics:
    """What a negotiator counts."""

    def __init__(self, topology: str, identifier: str) -> None:
        r = self.registry = Registry({"topology": topology, "negotiator": identifier})
        self.rounds_committed = r.counter("hailstorm_negotiator_rounds_committed_total",
                                          "Snapshot rounds committed by this negotiator.")
        self.rounds_skipped = r.counter(
            "hailstorm_negotiator_rounds_skipped_total",
            "Snapshot rounds skipped by this negotiator: the spouts paused at the committed "
            "clock and nothing had changed since, so no snapshot was written.")
        self.recoveries = r.counter("hailstorm_negotiator_recoveries_total",
                                    "Recoveries (moves to Initialize but starts) written by "
                                    "this negotiator.")
        self.transitions = r.counter("hailstorm_negotiator_transitions_total",
                                     "Master state transitions written by this negotiator.")
        self.epoch = r.gauge("hailstorm_negotiator_epoch",
                             "Epoch of the last master state this negotiator wrote or read.")
        self.leader = r.gauge("hailstorm_negotiator_leader", "1 while this negotiator leads.")
        self.pause_seconds = r.summary(
            "hailstorm_negotiator_pause_seconds",
            "How long each snapshot round took to fix its clock: from writing SpoutsPaused "
            "to writing Flowing with the round's clock (the spouts stood paused that long "
            "only in a round that was no barrier).")
        self.pause_max_seconds = r.gauge(
            "hailstorm_negotiator_pause_max_seconds",
            "The longest such time this negotiator saw.")
        self.fallbacks = r.counter(
            "hailstorm_negotiator_fallbacks_total",
            "Recoveries that fell back to the previous committed round because a snapshot "
            "of the committed one was corrupt.")
        self._longest_pause = 0.0

    def pause(self, seconds: float) -> None:
        """A snapshot round took ``seconds`` to fix its clock."""
        self.pause_seconds.observe(seconds)
        self._longest_pause = max(self._longest_pause, seconds)
        self.pause_max_seconds.set(self._longest_pause)
