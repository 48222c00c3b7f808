"""The ``hailstorm`` click group (:func:`main`) and what its commands share: the consoles
they print to, one-line errors (:func:`fail`, and ``_handle_errors`` for the project's
expected exceptions) and the dev stack's ``--state-dir`` option."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from kazoo.handlers.threading import KazooTimeoutError
from rich.console import Console

from hailstorm import config
from hailstorm.dev.services import DevStackError
from hailstorm.halt import TopologyHalted
from hailstorm.kafka import KafkaAuthError, KafkaConfigError, KafkaUnreachable
from hailstorm.runtime.spark_stage import NotEnoughSlots, RestartsExhausted

console = Console(stderr=True, highlight=False)


out = Console(highlight=False, soft_wrap=True)


class CommandError(click.ClickException):
    """A command's expected failure: click prints one clear line (never wrapped), exit 1."""

    def show(self, file: Any = None) -> None:
        click.echo(click.style("error:", fg="red", bold=True) + f" {self.format_message()}",
                   err=True, file=file)


def fail(message: str) -> NoReturn:
    """Stop the command with :class:`CommandError`."""
    raise CommandError(message)


def _handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the project's expected errors into one-line messages instead of tracebacks."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (DevStackError, config.ConfigError, KafkaConfigError, KafkaAuthError,
                KafkaUnreachable, TopologyHalted, RestartsExhausted, NotEnoughSlots) as exc:
            fail(str(exc))
        except KazooTimeoutError as exc:
            fail(f"cannot reach ZooKeeper ({exc}): is it running, and do --zk and "
                 f"${config.ZK_VAR} name it?")
        except KeyboardInterrupt:
            fail("interrupted")

    return wrapper


state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(config.DEFAULT_STATE_DIR),
    show_default=True,
    help="Directory holding the dev stack's data, logs and pids.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hailstorm")
def main() -> None:
    """Exactly-once stateful stream processing over Kafka, on Spark."""
