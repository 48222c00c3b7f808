"""ZooKeeper closed by default off loopback: which deployments are off loopback, the refusal
(or, with the flag, the warning) at start, which ACLs count as written under
authentication, and ``hailstorm run``/``negotiator`` refusing before touching anything."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from kazoo.security import ACL, ANYONE_ID_UNSAFE, Id, Permissions, make_digest_acl

from hailstorm.cli import main
from hailstorm.config import ConfigError
from hailstorm.exposure import (
    ALLOW_OPEN_FLAG,
    is_loopback,
    off_loopback,
    open_zookeeper_refusal,
    spark_master_host,
    written_under_authentication,
    zookeeper_hosts,
)
from hailstorm.metrics import ScrapeRefused, scrape
from hailstorm.negotiator.daemon import negotiator_command
from hailstorm.zookeeper import ZK_AUTH_VAR, refuse_open_zookeeper


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True), ("10.0.0.1", False), ("0.0.0.0", False),
    ("::", False), ("zk1.example.com", False), ("localhost.example.com", False),
    ("auto", False), ("", False),
])
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@given(st.integers(min_value=0, max_value=2**24 - 1))
def test_every_address_of_127_8_is_loopback(low: int) -> None:
    assert is_loopback(str(ipaddress.IPv4Address((127 << 24) | low)))


@given(st.ip_addresses(v=4).filter(lambda a: not a.is_loopback),
       st.integers(min_value=1, max_value=65535))
def test_an_open_zookeeper_off_loopback_is_refused(address: ipaddress.IPv4Address,
                                                  port: int) -> None:
    zk = f"127.0.0.1:2181,{address}:{port}/chroot"
    refusal, warning = open_zookeeper_refusal(zk, authenticated=False, allow_open=False)
    assert refusal is not None and warning is None
    assert f"ZooKeeper {address}" in refusal and ZK_AUTH_VAR in refusal


def test_connection_strings_and_spark_masters() -> None:
    assert zookeeper_hosts("a:1,[::1]:2,10.0.0.2:3/app") == ["a", "::1", "10.0.0.2"]
    assert zookeeper_hosts("zk") == ["zk"]
    assert [spark_master_host(m) for m in (None, "local", "local[*]", "local-cluster[2,1,512]",
                                           "spark://127.0.0.1:7077", "spark://a:1,b:2",
                                           "yarn")] == [None, None, None, None, "127.0.0.1",
                                                        "a", "yarn"]


def test_what_is_off_loopback_is_named() -> None:
    assert off_loopback("127.0.0.1:2181") == []
    assert off_loopback("localhost:2181", "127.0.0.1", "local[4]") == []
    assert off_loopback("127.0.0.1:2181", "auto") == ["processors listening on auto"]
    assert off_loopback("127.0.0.1:2181", "10.1.1.1") == ["processors listening on 10.1.1.1"]
    assert off_loopback("127.0.0.1:2181", master="spark://10.2.2.2:7077") == [
        "Spark master 10.2.2.2"]
    assert off_loopback("zk1:2181", "auto", "spark://m:7077") == [
        "ZooKeeper zk1", "processors listening on auto", "Spark master m"]


def test_authentication_or_the_flag_lets_it_start() -> None:
    zk = "10.0.0.1:2181"
    assert open_zookeeper_refusal(zk, authenticated=True, allow_open=False) == (None, None)
    assert open_zookeeper_refusal("127.0.0.1:2181", authenticated=False,
                                  allow_open=False) == (None, None)
    refusal, warning = open_zookeeper_refusal(zk, authenticated=False, allow_open=True)
    assert refusal is None and warning is not None and ALLOW_OPEN_FLAG in warning
    refusal, _ = open_zookeeper_refusal("127.0.0.1:2181", authenticated=False,
                                        allow_open=False, processor_host="auto")
    assert refusal is not None and "processors listening on auto" in refusal
    assert ALLOW_OPEN_FLAG in refusal and "\n" not in refusal


def test_the_shell_reads_the_credentials_and_warns(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(ZK_AUTH_VAR, raising=False)
    with pytest.raises(ConfigError, match="ZooKeeper is open"):
        refuse_open_zookeeper("10.0.0.1:2181", allow_open=False)
    with caplog.at_level(logging.WARNING, logger="hailstorm.zookeeper"):
        refuse_open_zookeeper("10.0.0.1:2181", allow_open=True)
    assert "running anyway" in caplog.text
    monkeypatch.setenv(ZK_AUTH_VAR, "owner:secret")
    refuse_open_zookeeper("10.0.0.1:2181", allow_open=False)  # authenticated: no refusal


def test_which_acls_are_written_under_authentication() -> None:
    owner = make_digest_acl("owner", "pw", all=True)
    reader = make_digest_acl("reader", "pw", read=True)
    assert written_under_authentication([owner, reader])
    assert written_under_authentication([ACL(Permissions.ALL, Id("x509", "CN=hailstorm"))])
    assert not written_under_authentication([ACL(Permissions.ALL, ANYONE_ID_UNSAFE)])
    assert not written_under_authentication([owner, ACL(Permissions.WRITE, ANYONE_ID_UNSAFE)])
    assert not written_under_authentication([owner, ACL(Permissions.CREATE,
                                                        Id("ip", "10.0.0.0/8"))])
    assert written_under_authentication([owner, ACL(Permissions.READ, ANYONE_ID_UNSAFE)])
    assert not written_under_authentication([reader])  # nobody may change it: not written
    assert not written_under_authentication([])


def test_run_and_negotiator_refuse_an_open_zookeeper_off_loopback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused at start with the reason, before any connection (10.255.255.1 is never
    reached: the check runs first)."""
    monkeypatch.delenv(ZK_AUTH_VAR, raising=False)
    runner = CliRunner()
    result = runner.invoke(main, ["run", "topologies/wordcount.py", "--zk",
                                  "10.255.255.1:2181", "--kafka", "127.0.0.1:1"])
    assert result.exit_code == 1, result.output
    assert "ZooKeeper is open" in result.output and "ZooKeeper 10.255.255.1" in result.output
    result = runner.invoke(main, ["run", "topologies/wordcount.py", "--zk", "127.0.0.1:1",
                                  "--kafka", "127.0.0.1:1", "--host", "auto"])
    assert result.exit_code == 1 and "processors listening on auto" in result.output
    result = runner.invoke(negotiator_command, ["--name", "wc", "--zk", "10.255.255.1:2181"])
    assert result.exit_code == 1 and "ZooKeeper is open" in result.output, result.output


def _trickling_server(stop: threading.Event) -> tuple[socket.socket, threading.Thread]:
    """A /metrics endpoint that answers one byte every 0.2 s, for ever."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(4096)
            for byte in b"HTTP/1.0 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"#" * 100000:
                if stop.wait(0.2):
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_a_trickling_metrics_endpoint_is_cut_off_at_the_time_limit() -> None:
    stop = threading.Event()
    listener, thread = _trickling_server(stop)
    started = time.monotonic()
    try:
        with pytest.raises(ScrapeRefused, match="did not answer within 1 s"):
            scrape("127.0.0.1", listener.getsockname()[1], timeout=1.0)
        assert time.monotonic() - started < 3.0
    finally:
        stop.set()
        thread.join(5)
        listener.close()
