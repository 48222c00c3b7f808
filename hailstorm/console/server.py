"""``hailstorm ui``: the web console's server (stdlib HTTP, read-only).

A :class:`Sampler` thread takes a status document every interval
(:func:`hailstorm.status.status`: ZooKeeper, Kafka, the snapshot store, every processor's
``/metrics``) into a :class:`~hailstorm.console.view.History`, and every few seconds reads
the latest dead letters' headers (:class:`DeadLetterTail`). The HTTP server answers:

* ``/``, ``/console.js``, ``/console.css``: the page (plain HTML, SVG and script shipped in
  the package; nothing is fetched from elsewhere);
* ``/api/console``: ``{"status": <the status --json document>, "view": <what the page
  draws>, "problems": [...]}``;
* ``/api/status``: the status document alone (the ``hailstorm status --json`` shape).

It only reads: every method but GET and HEAD is refused. It binds to loopback unless told
otherwise, and then answers only requests whose ``Host`` names that address (a page of
another site cannot reach it through a rebound DNS name).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from hailstorm.console.view import DEAD_LETTERS_KEPT, History
from hailstorm.status import Collector, ZooKeeperUnavailable, status, zookeeper_wait

log = logging.getLogger("hailstorm.console")

DEAD_LETTER_REFRESH = 5.0
"""Seconds between two reads of the dead-letter topics' tails."""

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _static(name: str) -> bytes:
    return resources.files("hailstorm.console").joinpath("static", name).read_bytes()


class DeadLetterTail:
    """The latest dead letters of some topics: their key and ``hailstorm.*`` headers (the
    values, a poison record's bytes, are never read)."""

    def __init__(self, kafka: str, topics: list[str], keep: int = DEAD_LETTERS_KEPT) -> None:
        self.kafka = kafka
        self.topics = topics
        self.keep = keep
        self._consumer: Any = None

    def read(self) -> list[dict[str, Any]]:
        """Up to ``keep`` dead letters, oldest first (by their write time)."""
        from confluent_kafka import TopicPartition

        from hailstorm.kafka import consumer, partitions_of, read_range

        if self._consumer is None:
            self._consumer = consumer(self.kafka)
        letters: list[dict[str, Any]] = []
        for topic in self.topics:
            try:
                numbers = partitions_of(self.kafka, topic, timeout=5.0)
            except Exception:  # no dead letter yet: the topic is made with the first one
                continue
            for number in numbers:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, number), timeout=5.0, cached=False)
                if high <= low:
                    continue
                for record in read_range(self.kafka, topic, number,
                                         max(low, high - self.keep), high - 1, timeout=5.0):
                    headers = {k: v.decode("utf-8", "replace")
                               for k, v in (record.headers or {}).items()
                               if k.startswith("hailstorm.")}
                    letters.append({
                        "topic": topic, "partition": number, "offset": record.offset,
                        "timestamp": None if record.timestamp is None
                        else record.timestamp / 1000.0,
                        "source": (record.key or b"").decode("utf-8", "replace"),
                        "node": headers.get("hailstorm.node"),
                        "stage": headers.get("hailstorm.stage"),
                        "error": headers.get("hailstorm.error"),
                    })
        letters.sort(key=lambda d: (d["timestamp"] or 0.0, d["topic"], d["partition"],
                                    d["offset"]))
        return letters[-self.keep:]

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class Sampler(threading.Thread):
    """Feeds a :class:`History` from a :class:`Collector` every ``interval`` seconds."""

    def __init__(self, collector: Collector, topology: str, interval: float,
                 kafka: str | None) -> None:
        super().__init__(name="console-sampler", daemon=True)
        self.collector = collector
        self.topology = topology
        self.interval = interval
        self.kafka = kafka
        self.history = History()
        self.dead_letters: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._tail: DeadLetterTail | None = None
        self._tail_read = 0.0

    def run(self) -> None:
        previous = None
        while not self.stopping.is_set():
            started = time.monotonic()
            problems: list[str] = []
            try:
                doc, previous = status(self.collector, self.topology, sample=0.0,
                                       previous=previous)
                with self.lock:
                    self.history.add(doc)
            except ZooKeeperUnavailable as exc:  # shown at the top, over what was seen
                latest = self.history.latest
                read_at = None if latest is None else float(latest["time"])
                problems.append(zookeeper_wait(exc.outage, read_at))
            except Exception as exc:  # keep serving what was seen; say why it is stale
                problems.append(f"sampling failed: {exc or type(exc).__name__}")
            problems += self._refresh_dead_letters()
            with self.lock:
                self.problems = problems
            self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))
        if self._tail is not None:
            self._tail.close()

    def _refresh_dead_letters(self) -> list[str]:
        if not self.kafka or time.monotonic() - self._tail_read < DEAD_LETTER_REFRESH:
            return []
        with self.lock:
            latest = self.history.latest or {}
        topics = list((latest.get("graph") or {}).get("dead_letter_topics") or [])
        if not topics:
            return []
        self._tail_read = time.monotonic()
        if self._tail is None or self._tail.topics != topics:
            self._tail = DeadLetterTail(self.kafka, topics)
        try:
            letters = self._tail.read()
        except Exception as exc:  # broad: confluent_kafka raises untyped errors; shown as a problem
            return [f"dead letters unavailable: {exc or type(exc).__name__}"]
        with self.lock:
            self.dead_letters = letters
        return []

    def document(self) -> dict[str, Any]:
        """What ``/api/console`` serves."""
        with self.lock:
            return {"topology": self.topology, "interval": self.interval,
                    "status": self.history.latest,
                    "view": self.history.view(self.dead_letters),
                    "problems": list(self.problems)}

    def stop(self) -> None:
        self.stopping.set()


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The ``Host`` header values the server answers (None: any, when bound to every
    interface on purpose)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {host, f"[{host}]" if ":" in host else host}
    if host in ("127.0.0.1", "::1", "localhost"):
        names |= set(LOOPBACK_NAMES)
    return frozenset({*names, *(f"{n}:{port}" for n in names)})


def handler_for(document: Callable[[], Mapping[str, Any]],
                hosts: Callable[[], frozenset[str] | None]) -> type[BaseHTTPRequestHandler]:
    """A request handler serving the page and ``document()``."""

    class ConsoleHandler(BaseHTTPRequestHandler):
        server_version = "hailstorm-ui"
        sys_version = ""

        def do_GET(self) -> None:
            self._answer(send_body=True)

        def do_HEAD(self) -> None:
            self._answer(send_body=False)

        def _refuse_method(self) -> None:
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET and HEAD only\n",
                       "text/plain; charset=utf-8", extra={"Allow": "GET, HEAD"})

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

        def _answer(self, send_body: bool) -> None:
            allowed = hosts()
            if allowed is not None and self.headers.get("Host", "") not in allowed:
                self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unknown Host\n",
                           "text/plain; charset=utf-8", send_body)
                return
            path = self.path.split("?", 1)[0]
            if path in STATIC:
                name, kind = STATIC[path]
                self._send(HTTPStatus.OK, _static(name), kind, send_body)
            elif path in ("/api/console", "/api/status"):
                doc = document()
                body = doc if path == "/api/console" else doc.get("status")
                self._send(HTTPStatus.OK, json.dumps(body, sort_keys=True).encode(),
                           "application/json", send_body)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8",
                           send_body)

        def _send(self, code: HTTPStatus, body: bytes, kind: str, send_body: bool = True,
                  extra: Mapping[str, str] | None = None) -> None:
            self.send_response(code)
            for name, value in {**SECURITY_HEADERS, **(extra or {}),
                                "Content-Type": kind,
                                "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return ConsoleHandler


class ConsoleServer:
    """The HTTP server of one console; :attr:`url` is where it answers."""

    def __init__(self, document: Callable[[], Mapping[str, Any]], host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self._hosts: frozenset[str] | None = None
        self.httpd = ThreadingHTTPServer((host, port), handler_for(document, lambda: self._hosts))
        self.httpd.daemon_threads = True
        bound_port = int(self.httpd.server_address[1])
        self._hosts = allowed_hosts(host, bound_port)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound_port}/"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.25)

    def start(self) -> ConsoleServer:
        threading.Thread(target=self.serve_forever, name="console-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def run_console(zk: str, kafka: str | None, snapshots: str | None, ref: str | None,
                name: str | None, *, host: str, port: int, interval: float,
                announce: Callable[[str], None]) -> None:
    """The ``hailstorm ui`` command body: serve until interrupted. Raises
    :class:`ValueError` for an unreachable ZooKeeper or an unknown topology."""
    from hailstorm.status import open_collector

    collector, topology = open_collector(zk, kafka, snapshots, ref, name)
    sampler = Sampler(collector, topology, interval, kafka)
    try:
        server = ConsoleServer(sampler.document, host, port)
    except OSError as exc:
        collector.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sampler.start()
    announce(f"hailstorm ui: {topology} at {server.url} (read-only; Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        sampler.stop()
        sampler.join(timeout=5)
        server.stop()
        collector.close()
