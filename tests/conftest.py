"""Session fixtures: real embedded stacks (ZooKeeper, Apache Kafka, PostgreSQL).

``dev_stack`` (one Kafka node) serves most tests; ``kafka_cluster_stack`` (three Kafka nodes,
replication factor 3, ``min.insync.replicas=2``) starts only for the tests that ask for it.
Services listen on 127.0.0.1 on free ports, keep their data in a temporary directory, and
are stopped by pid when the session ends, whether the tests passed or not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from hailstorm.dev.services import DevStack, StackState

# Property tests assert what happens, never how long an example takes: Hypothesis's default
# 200 ms deadline per example fails at random on a loaded 2-core machine.
settings.register_profile("hailstorm", deadline=None)
settings.load_profile("hailstorm")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--docker",
        action="store_true",
        default=False,
        help="run tests that need a Docker engine (docker-compose deployment stack)",
    )


# What a failed integration test's logs say, attached to its report: CI keeps only the
# output, and a failure that does not recur on a rerun must be explained by it.
_LOG_TAIL_LINES = 40
_LOG_LINE_CHARS = 300


def _log_digest(path: Path) -> str:
    """The lines of one run log that explain a failure: a negotiator's state moves and
    errors, the last lines of anything else."""
    lines = path.read_text(errors="replace").splitlines()
    if path.name.startswith("negotiator"):
        lines = [line for line in lines
                 if "negotiator: epoch" in line or " ERROR " in line or " WARNING " in line]
    return "\n".join(line[:_LOG_LINE_CHARS] for line in lines[-_LOG_TAIL_LINES:])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None]:
    report: pytest.TestReport = yield
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if report.failed and call.when == "call" and isinstance(tmp_path, Path):
        for log in sorted(tmp_path.rglob("*.log"))[:12]:
            report.sections.append((f"log {log.relative_to(tmp_path)}", _log_digest(log)))
    return report  # type: ignore[return-value]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--docker"):
        return
    skip = pytest.mark.skip(reason="needs a Docker engine: run with --docker")
    for item in items:
        if "docker" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class ZooKeeper:
    """Connection string of the session's ZooKeeper."""

    hosts: str


@contextlib.contextmanager
def embedded_stack(prefix: str, **options: Any) -> Iterator[DevStack]:
    """A dev stack of its own in a temporary directory, always brought down afterwards."""
    # mkdtemp under /tmp (world-traversable) so the 'postgres' user can reach its data dir.
    state_dir = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(state_dir, 0o755)
    stack = DevStack(state_dir, startup_timeout=90, **options)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def dev_stack() -> Iterator[StackState]:
    """The whole embedded stack, up once for the test session."""
    with embedded_stack("hailstorm-test-") as stack:
        state = stack.load()
        assert state is not None
        yield state


@pytest.fixture(scope="module")
def secured_stack() -> Iterator[StackState]:
    """A stack whose Kafka clients must use SASL_SSL (SCRAM-SHA-256, a CA it made); one
    module uses it, so it stops after that module instead of idling through the session."""
    with embedded_stack("hailstorm-sasl-", kafka_security="sasl_ssl") as stack:
        state = stack.load()
        assert state is not None
        yield state


@pytest.fixture(scope="module")
def kafka_cluster_stack() -> Iterator[DevStack]:
    """A stack with a three-node Kafka cluster (the broker-failure tests kill its nodes);
    stopped after their module: three idle brokers took CPU from every later test."""
    with embedded_stack("hailstorm-cluster-", kafka_brokers=3) as stack:
        yield stack


@pytest.fixture(scope="module")
def spark_cluster_stack() -> Iterator[DevStack]:
    """A stack with a Spark standalone master and three workers of four task slots each."""
    with embedded_stack("hailstorm-spark-", spark_workers=3, spark_cores=4) as stack:
        yield stack


@pytest.fixture(scope="session")
def stack_env(dev_stack: StackState) -> dict[str, str]:
    """The ``HAILSTORM_*`` variables of the session stack."""
    return dev_stack.env()


@pytest.fixture(scope="session")
def zookeeper(stack_env: dict[str, str]) -> ZooKeeper:
    return ZooKeeper(hosts=stack_env["HAILSTORM_ZK"])


@pytest.fixture(scope="session")
def kafka_bootstrap(stack_env: dict[str, str]) -> str:
    return stack_env["HAILSTORM_KAFKA"]


@pytest.fixture(scope="session")
def postgres_url(stack_env: dict[str, str]) -> str:
    return stack_env["HAILSTORM_DATABASE_URL"]
