"""``hailstorm dev up --secure`` without starting anything: the stack's CA and certificates,
ZooKeeper's TLS-only listener, PostgreSQL's TLS-only ``pg_hba.conf``, what ``dev env``
exports (no password but ZooKeeper's digest credentials), and the ZooKeeper clients' TLS
settings read from ``$HAILSTORM_ZK_TLS``."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest

from hailstorm.config import ConfigError
from hailstorm.dev.kafka_broker import NodePorts
from hailstorm.dev.services import KafkaClusterState, ServiceRecord, StackState
from hailstorm.dev.services.postgres import secure_hba
from hailstorm.dev.services.tls import make_stack_tls
from hailstorm.dev.services.zookeeper_server import client_context, secure_listener
from hailstorm.zookeeper import ZK_TLS_VAR, zk_client, zk_tls


def _secure_state(tmp_path: Path) -> StackState:
    state = StackState(state_dir=str(tmp_path), database_password="db-secret", secure=True,
                       zk_password="zk-secret")
    state.kafka = KafkaClusterState("id", "sasl_ssl", {1: NodePorts(9092, 9093, 9094)},
                                    password="kafka-secret")
    for name, port in (("zookeeper", 2181), ("kafka-1", 9092), ("postgres", 5432)):
        state.services[name] = ServiceRecord(name, port, 1, f"{name}.log", name)
    return state


def test_the_stack_ca_signs_a_server_and_a_client_certificate_in_private_files(
        tmp_path: Path) -> None:
    tls = make_stack_tls(tmp_path / "tls", ["127.0.0.1"])
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    for path in (tmp_path / "tls").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    before = tls.ca_cert.read_bytes()
    assert make_stack_tls(tmp_path / "tls", ["127.0.0.1"]).ca_cert.read_bytes() == before

    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(tls.server_cert), str(tls.server_key))
    server.load_verify_locations(str(tls.ca_cert))
    server.verify_mode = ssl.CERT_REQUIRED
    left, right = socket.socketpair()
    seen: list[object] = []

    def serve() -> None:
        with server.wrap_socket(right, server_side=True) as conn:
            seen.append(conn.getpeercert())

    thread = threading.Thread(target=serve)
    thread.start()
    with client_context(tls).wrap_socket(left, server_hostname="127.0.0.1") as conn:
        assert conn.version() == "TLSv1.3"  # the name 127.0.0.1 checked against the SAN
    thread.join(10)
    assert seen and seen[0], "the server saw the client's certificate"


def test_zookeeper_listens_on_its_secure_port_only(tmp_path: Path) -> None:
    tls = make_stack_tls(tmp_path / "tls", ["127.0.0.1"])
    lines = secure_listener(tls, 2281, "127.0.0.1")
    assert "secureClientPort=2281" in lines and "ssl.clientAuth=need" in lines
    assert not [line for line in lines if line.startswith("clientPort")]
    assert f"ssl.trustStore.location={tls.ca_cert}" in lines


def test_postgresql_takes_tcp_clients_over_tls_only() -> None:
    hba = secure_hba(samenet=False).splitlines()
    assert "hostssl all all 127.0.0.1/32 scram-sha-256" in hba
    assert not [line for line in hba if line.startswith("host ")]  # no plaintext entry
    assert "hostnossl all all 0.0.0.0/0 reject" in hba
    assert "hostssl all all samenet scram-sha-256" in secure_hba(samenet=True)


def test_a_secure_stack_exports_no_password_but_zookeepers(tmp_path: Path) -> None:
    state = _secure_state(tmp_path)
    env = state.env()
    url = env["HAILSTORM_DATABASE_URL"]
    assert url == (f"postgresql://hailstorm@127.0.0.1:5432/hailstorm?sslmode=verify-full"
                   f"&sslrootcert={tmp_path / 'tls' / 'ca.pem'}")
    assert env["PGPASSFILE"] == str(tmp_path / "pgpass")
    assert env[ZK_TLS_VAR] == str(tmp_path / "tls")
    assert env["HAILSTORM_ZK_AUTH"] == "hailstorm:zk-secret"
    assert env["HAILSTORM_SECRET_FILE"] == str(tmp_path / "tls" / "run-secret.pem")
    assert env["HAILSTORM_KAFKA_CONFIG"] == str(tmp_path / "kafka-client.properties")
    exported = "\n".join(v for k, v in env.items() if k != "HAILSTORM_ZK_AUTH")
    assert "db-secret" not in exported and "kafka-secret" not in exported
    assert "sslmode=verify-full" in state.database_url("postgres")  # the stack's own use
    again = StackState.from_json(state.to_json())
    assert (again.secure, again.zk_password) == (True, "zk-secret")


def test_zookeeper_clients_speak_tls_when_told(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ZK_TLS_VAR, raising=False)
    assert zk_tls() == {}
    tls = make_stack_tls(tmp_path / "tls", ["127.0.0.1"])
    monkeypatch.setenv(ZK_TLS_VAR, str(tls.directory))
    options = zk_tls()
    assert options["use_ssl"] and options["verify_certs"] and options["check_hostname"]
    assert (options["ca"], options["certfile"], options["keyfile"]) == (
        str(tls.ca_cert), str(tls.client_cert), str(tls.client_key))
    client = zk_client("127.0.0.1:1")  # not started: nothing is connected
    assert client.use_ssl and client.ca == str(tls.ca_cert)
    monkeypatch.setenv(ZK_TLS_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"ca\.pem"):
        zk_tls()
