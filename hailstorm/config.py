"""Where the services are: the ``HAILSTORM_*`` environment variables, overridable by flags.

``hailstorm dev env`` prints these for the embedded stack; on a real cluster set them to the
cluster's addresses and every command works unchanged.

This module also owns reading the Kafka client properties file (:func:`read_properties`):
``--kafka-config`` checks it here, and :mod:`hailstorm.kafka` builds every client's settings
from it (``kafka`` imports ``config``, never the other way round).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from hailstorm.errors import ConfigurationError

ZK_VAR = "HAILSTORM_ZK"
KAFKA_VAR = "HAILSTORM_KAFKA"
KAFKA_CONFIG_VAR = "HAILSTORM_KAFKA_CONFIG"
DATABASE_VAR = "HAILSTORM_DATABASE_URL"
SNAPSHOTS_VAR = "HAILSTORM_SNAPSHOTS"
CACHE_VAR = "HAILSTORM_CACHE"

DEFAULT_STATE_DIR = ".hailstorm"
DEFAULT_DATABASE_URL = "sqlite:///hailstorm.db"


def cache_dir() -> Path:
    """Where downloaded artifacts and the driver's class archive are kept (``$HAILSTORM_CACHE``,
    else ``~/.cache/hailstorm``; never inside the repository)."""
    configured = os.environ.get(CACHE_VAR)
    if configured:
        return Path(configured).expanduser().absolute()
    return Path.home() / ".cache" / "hailstorm"


class ConfigError(ConfigurationError, RuntimeError):
    """A required address is not configured."""


class KafkaConfigError(ConfigurationError, ValueError):
    """The Kafka client properties file is missing or malformed."""


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java-style properties file (``name=value``, ``#``/``!`` comments) as a dict."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise KafkaConfigError(f"cannot read Kafka client properties {path}: "
                               f"{exc.strerror or exc}") from None
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        name, sep, value = (line.partition("=") if "=" in line else line.partition(":"))
        if not sep or not name.strip():
            raise KafkaConfigError(f"{path}:{number}: expected name=value")
        properties[name.strip()] = value.strip()
    if "bootstrap.servers" in properties:
        raise KafkaConfigError(
            f"{path}: bootstrap.servers belongs in --kafka / $HAILSTORM_KAFKA, not in the "
            "client properties file")
    return properties


@dataclass(frozen=True)
class Settings:
    """Addresses of the services a command talks to (None where not configured)."""

    zk: str | None = None
    kafka: str | None = None
    database_url: str | None = None
    snapshots: str | None = None
    kafka_config: str | None = None
    """A librdkafka properties file every Kafka client reads (security, SASL, TLS...)."""

    @classmethod
    def from_env(cls, **overrides: str | None) -> Settings:
        """Read the environment; non-None ``overrides`` (from flags) win."""
        values = {
            "zk": os.environ.get(ZK_VAR),
            "kafka": os.environ.get(KAFKA_VAR),
            "database_url": os.environ.get(DATABASE_VAR),
            "snapshots": os.environ.get(SNAPSHOTS_VAR),
            "kafka_config": os.environ.get(KAFKA_CONFIG_VAR),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def require_zk(self) -> str:
        return _require(self.zk, ZK_VAR, "--zk")

    def require_kafka(self) -> str:
        """The bootstrap servers; also checks the client properties file and exports its
        absolute path as ``$HAILSTORM_KAFKA_CONFIG``, so every Kafka client of this process
        and of the processes it starts reads it."""
        bootstrap = _require(self.kafka, KAFKA_VAR, "--kafka")
        if self.kafka_config:
            path = str(Path(self.kafka_config).absolute())
            try:
                read_properties(path)
            except KafkaConfigError as exc:
                raise ConfigError(str(exc)) from None
            os.environ[KAFKA_CONFIG_VAR] = path
        return bootstrap

    def database(self) -> str:
        """The sink database URL; SQLite in the working directory when unset."""
        return self.database_url or DEFAULT_DATABASE_URL

    def snapshot_location(self) -> str:
        """Where snapshots live: a directory, or an fsspec URL such as ``s3://bucket/prefix``
        (see :func:`hailstorm.snapshots.open_store`); under the dev state directory when
        unset."""
        return self.snapshots or str(Path(DEFAULT_STATE_DIR) / "snapshots")


def _require(value: str | None, var: str, flag: str) -> str:
    if not value:
        raise ConfigError(
            f"{var} is not set: pass {flag}, or run 'eval \"$(hailstorm dev env)\"' "
            "after 'hailstorm dev up'"
        )
    return value


# --------------------------------------------------------------------------- options

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def zk_option() -> Decorator:
    """``--zk HOSTS``, else ``$HAILSTORM_ZK``."""
    return click.option("--zk", envvar=ZK_VAR, show_envvar=True, metavar="HOSTS",
                        help="ZooKeeper connection string (host:port,...[/chroot]).")


def allow_open_zookeeper_option() -> Decorator:
    """``--allow-open-zookeeper``: run off loopback without ZooKeeper authentication."""
    return click.option(
        "--allow-open-zookeeper", is_flag=True,
        help="Run even though ZooKeeper, the processors or the Spark master are off loopback "
             "and $HAILSTORM_ZK_AUTH is unset (a warning): whoever reaches ZooKeeper can then "
             "forge the master state.")


def kafka_option() -> Decorator:
    """``--kafka BOOTSTRAP``, else ``$HAILSTORM_KAFKA``."""
    return click.option("--kafka", envvar=KAFKA_VAR, show_envvar=True, metavar="BOOTSTRAP",
                        help="Kafka bootstrap servers (host:port,...).")


def kafka_config_option() -> Decorator:
    """``--kafka-config FILE``, else ``$HAILSTORM_KAFKA_CONFIG``."""
    return click.option(
        "--kafka-config", metavar="FILE", envvar=KAFKA_CONFIG_VAR, show_envvar=True,
        type=click.Path(exists=True, dir_okay=False),
        help="librdkafka properties (name=value lines: security.protocol, sasl.*, ssl.*, ...) "
        "for every Kafka client; keep secrets here, never on the command line.")


def snapshots_option(
    help: str = "Snapshot store: a directory or a URL such as s3://bucket/prefix.",
) -> Decorator:
    """``--snapshots DIR|URL`` (parameter ``snapshot_dir``), else ``$HAILSTORM_SNAPSHOTS``."""
    return click.option("--snapshots", "snapshot_dir", envvar=SNAPSHOTS_VAR, show_envvar=True,
                        metavar="DIR|URL", help=help)

