"""ZooKeeper credentials and ACLs from the environment (hailstorm.zookeeper)."""

from __future__ import annotations

import pytest
from kazoo.security import make_digest_acl

from hailstorm.config import ConfigError
from hailstorm.zookeeper import ZK_AUTH_VAR, ZK_READER_VAR, zk_acl, zk_client, zk_credentials


def test_without_credentials_nodes_stay_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ZK_AUTH_VAR, raising=False)
    assert zk_credentials() is None and zk_acl() is None
    client = zk_client("127.0.0.1:1")
    assert client.auth_data == set() and client.default_acl is None


def test_owner_gets_everything_and_the_reader_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ZK_AUTH_VAR, "owner:pa:ss")  # a password may hold colons
    monkeypatch.setenv(ZK_READER_VAR, "watcher:w")
    assert zk_credentials() == ("owner", "pa:ss")
    assert zk_acl() == [make_digest_acl("owner", "pa:ss", all=True),
                        make_digest_acl("watcher", "w", read=True)]
    client = zk_client("127.0.0.1:1")
    assert client.auth_data == {("digest", "owner:pa:ss")}
    assert client.default_acl == zk_acl()
    monkeypatch.delenv(ZK_READER_VAR)
    assert zk_acl() == [make_digest_acl("owner", "pa:ss", all=True)]


@pytest.mark.parametrize("bad", ["nocolon", ":password", "user:"])
def test_malformed_credentials_are_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                 bad: str) -> None:
    monkeypatch.setenv(ZK_AUTH_VAR, bad)
    with pytest.raises(ConfigError, match="user:password"):
        zk_credentials()


@pytest.mark.parametrize("auth", [None, "owner:secret"])
def test_a_client_tries_to_reconnect_at_least_once_a_second(
        monkeypatch: pytest.MonkeyPatch, auth: str | None) -> None:
    """A ZooKeeper that was down restores each session with its timeout from its start: a
    client backing off to kazoo's minute would come back too late and lose its session
    (issue 40)."""
    if auth is None:
        monkeypatch.delenv(ZK_AUTH_VAR, raising=False)
    else:
        monkeypatch.setenv(ZK_AUTH_VAR, auth)
    retry = zk_client("127.0.0.1:1", timeout=6)._conn_retry
    assert retry is not None and retry.max_tries == -1 and retry.max_delay <= 1.0
