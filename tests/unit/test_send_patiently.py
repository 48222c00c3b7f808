"""A send blocked by a receiver that does not read (issue 40): while the topology waits out
an outage it keeps waiting and delivers every byte once; otherwise it gives up at its
timeout. Real sockets (a socketpair), no peer process."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from hailstorm.protocol.wire import DataBatch
from hailstorm.runtime.data_plane import DataPlaneError, Outbound, send_patiently

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


@pytest.mark.parametrize("stalled", [False, True])
def test_a_broken_or_stalled_connection_names_the_receiver(stalled: bool) -> None:
    """What a processor reports as its ``lost_peer``: the receiver, whether its end closed
    (a SIGKILLed worker) or it took nothing for the timeout (a stalled one)."""
    sender, receiver = socket.socketpair()
    out = Outbound.__new__(Outbound)  # the connection without its TLS handshake
    out.receiver, out.timeout, out.patience, out.sock = "bolt:c:1", 0.2, lambda: False, sender
    sender.settimeout(0.2)
    if not stalled:
        receiver.close()
    try:
        with pytest.raises(DataPlaneError) as failure:
            for _ in range(100):  # a stalled receiver's buffers fill first
                out.send([DataBatch.of([0], [1], [PAYLOAD[:100_000]])])
        assert failure.value.peer == "bolt:c:1"
        assert "bolt:c:1" in str(failure.value)
    finally:
        sender.close()
        receiver.close()
