"""pyspark's accumulator server, shut down without waiting and without a traceback.

The server is pure Python (pyspark's own, no JVM): a socket plays the JVM's connection,
which the server's request handler polls until the JVM goes away.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from pyspark.accumulators import _start_update_server

from hailstorm.dev.harness import wait_for
from hailstorm.runtime.spark_stage import shut_down_quietly

TOKEN = "secret-token"


def _connected_server() -> tuple[object, socket.socket]:
    """A running accumulator server and a connection that authenticated and sent one
    (empty) update, as the JVM's does: its handler then polls that connection."""
    server = _start_update_server(TOKEN, False)
    host, port = server.server_address  # type: ignore[attr-defined]
    jvm = socket.create_connection((host, port))
    jvm.sendall(TOKEN.encode() + struct.pack("!i", 0))
    assert jvm.recv(1) == b"\x01"  # the handler acknowledged the update
    # Back in its poll (a second's timeout) before the test goes on: it then reads the
    # connection's end whatever it is told meanwhile, as it does when the JVM exits.
    time.sleep(0.2)
    return server, jvm


def _closed(server: object) -> bool:
    """The server's listening socket closed (within 10 s)."""
    return bool(wait_for("the accumulator server to close",
                         lambda: server.socket.fileno() == -1,  # type: ignore[attr-defined]
                         10, poll=0.05))


def test_the_server_shuts_down_without_a_traceback_when_the_jvm_leaves(
        capsys: pytest.CaptureFixture[str]) -> None:
    server, jvm = _connected_server()
    shut_down_quietly(server)
    jvm.close()  # the JVM exits right after the context stopped
    assert _closed(server)
    assert "Traceback" not in capsys.readouterr().err


def test_a_plain_shutdown_would_print_the_handlers_eof(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The control: what the quiet shutdown keeps out of every driver's output."""
    server, jvm = _connected_server()
    server.server_shutdown = True  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.shutdown, daemon=True)  # type: ignore[attr-defined]
    thread.start()
    jvm.close()
    thread.join(10)
    assert _closed(server)
    assert "EOFError" in capsys.readouterr().err
