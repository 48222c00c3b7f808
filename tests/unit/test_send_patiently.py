"""A send blocked by a receiver that does not read (issue 40): while the topology waits out
an outage it keeps waiting and delivers every byte once; otherwise it gives up at its
timeout. Real sockets (a socketpair), no peer process."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from hailstorm.runtime.data_plane import send_patiently

PAYLOAD = bytes(range(256)) * 40_000  # 10 MB: far more than the socket buffers hold


def _drain(sock: socket.socket, after: float, into: bytearray) -> threading.Thread:
    def read() -> None:
        time.sleep(after)
        while chunk := sock.recv(1 << 16):
            into.extend(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_patient_send_outlasts_its_timeout_and_delivers_every_byte_once() -> None:
    sender, receiver = socket.socketpair()
    sender.settimeout(0.1)
    received = bytearray()
    asked: list[float] = []
    reader = _drain(receiver, after=0.6, into=received)  # several timeouts without reading

    def waiting_out_an_outage() -> bool:
        asked.append(time.monotonic())
        return True

    send_patiently(sender, PAYLOAD, waiting_out_an_outage)
    sender.close()
    reader.join(10)
    receiver.close()
    assert len(asked) >= 3
    assert bytes(received) == PAYLOAD


def test_an_impatient_send_gives_up_at_its_timeout() -> None:
    sender, receiver = socket.socketpair()
    sender.settimeout(0.1)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        send_patiently(sender, PAYLOAD, lambda: False)
    assert time.monotonic() - started < 5
    sender.close()
    receiver.close()
