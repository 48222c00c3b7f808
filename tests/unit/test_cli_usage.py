"""What the command line says of itself: every command's ``--help`` names it as it is typed
(``Usage: hailstorm dev up``, and ``hailstorm negotiator``, run by module name, too), and a
ZooKeeper that does not answer is one line, not a traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner
from kazoo.handlers.threading import KazooTimeoutError

from hailstorm.cli import main
from hailstorm.cli.group import _handle_errors
from hailstorm.negotiator.daemon import MODULE_NAME, usage_name


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The words of every command under ``group``, groups included."""
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from command_paths(command, (*prefix, name))


def test_every_usage_line_names_the_command_as_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # 'hailstorm negotiator' sets it
    paths = list(command_paths(main))
    assert ("negotiator",) in paths and ("dev", "up") in paths
    for path in paths:
        result = CliRunner().invoke(main, [*path, "--help"], prog_name="hailstorm")
        assert result.exit_code == 0, (path, result.output)
        usage = result.output.splitlines()[0]
        assert usage.startswith(f"Usage: hailstorm {' '.join(path)} "), usage


def test_the_negotiator_run_by_module_name_says_so() -> None:
    assert usage_name("/venv/lib/python3/site-packages/hailstorm/negotiator/__main__.py") \
        == MODULE_NAME == "python -m hailstorm.negotiator"
    assert usage_name("hailstorm negotiator") == "hailstorm negotiator"


def test_a_zookeeper_that_does_not_answer_is_one_line() -> None:
    @click.command()
    @_handle_errors
    def connect() -> None:
        raise KazooTimeoutError("Connection time-out")

    result = CliRunner().invoke(connect, [])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: cannot reach ZooKeeper (Connection time-out): is it "
                                     "running, and do --zk and $HAILSTORM_ZK name it?")
