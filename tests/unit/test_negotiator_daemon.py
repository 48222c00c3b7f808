"""The negotiator command line (no ZooKeeper needed for these)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hailstorm.negotiator.daemon import main, negotiator_command, topology_name


def test_help_lists_the_options() -> None:
    result = CliRunner().invoke(negotiator_command, ["--help"])
    assert result.exit_code == 0
    for option in ("--zk", "--snapshot-interval", "--timeout", "--snapshot-timeout",
                   "--session-timeout", "--name"):
        assert option in result.output


def test_zookeeper_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAILSTORM_ZK", raising=False)
    result = CliRunner().invoke(negotiator_command, ["--name", "wordcount"])
    assert result.exit_code == 2 and "HAILSTORM_ZK" in result.output


def test_topology_or_name_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAILSTORM_ZK", "127.0.0.1:1")
    result = CliRunner().invoke(negotiator_command, [])
    assert result.exit_code == 2 and "TOPOLOGY" in result.output


def test_bad_numbers_are_refused() -> None:
    assert main(["--zk", "127.0.0.1:1", "--name", "x", "--timeout", "0"]) == 2


def test_topology_name_comes_from_the_module() -> None:
    assert topology_name("topologies/wordcount.py") == "wordcount"
    assert topology_name("topologies.wordcount") == "wordcount"


def test_unloadable_topology_is_a_usage_error() -> None:
    result = CliRunner().invoke(negotiator_command, ["--zk", "127.0.0.1:1", "no/such.py"])
    assert result.exit_code == 2 and "Error" in result.output
