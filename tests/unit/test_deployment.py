"""docker-compose.yml and the Dockerfile only reference things that exist in the project.

No Docker engine runs here, so this checks the file statically; the opt-in ``--docker`` test
in tests/integration/test_docker_stack.py brings the stack up where an engine exists.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import click
import pytest
import yaml

from hailstorm import config
from hailstorm.cli import main as cli_main
from hailstorm.dev.kafka_broker import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict = COMPOSE["services"]
KNOWN_VARIABLES = {config.ZK_VAR, config.KAFKA_VAR, config.DATABASE_VAR, config.SNAPSHOTS_VAR}
PATH_LIKE = re.compile(r"^[\w./-]+\.py$")


def test_every_component_of_the_deployment_is_there() -> None:
    images = {name: spec.get("image", "") for name, spec in SERVICES.items()}
    assert images["kafka"] == f"apache/kafka:{KAFKA_VERSION}"  # the dev stack's release
    assert images["zookeeper"].startswith("zookeeper:3.9")
    assert images["postgres"].startswith("postgres:15")
    assert {"spark-master", "spark-worker", "negotiator"} <= set(SERVICES)


def test_depends_on_and_volumes_reference_defined_things() -> None:
    volumes = set(COMPOSE.get("volumes") or {})
    for name, spec in SERVICES.items():
        depends = spec.get("depends_on") or []
        for dependency in depends if isinstance(depends, list) else depends.keys():
            assert dependency in SERVICES, f"{name} depends on unknown service {dependency}"
        for mount in spec.get("volumes", []):
            source = mount.split(":", 1)[0]
            assert source.startswith((".", "/")) or source in volumes, f"{name}: volume {source}"


def test_built_images_come_from_the_repo_dockerfile() -> None:
    built = [spec for spec in SERVICES.values() if "build" in spec]
    assert built, "the hailstorm image must be built from this repo"
    for spec in built:
        context = ROOT / (
            spec["build"] if isinstance(spec["build"], str) else spec["build"]["context"]
        )
        assert (context / "Dockerfile").exists()
    dockerfile = (ROOT / "Dockerfile").read_text()
    for source in re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, flags=re.M):
        for item in source.split():
            assert (ROOT / item).exists(), f"Dockerfile copies missing {item}"
    # Services using the project's image must use the tag that is built.
    tags = {spec.get("image") for spec in built}
    for name, spec in SERVICES.items():
        if spec.get("image", "").startswith("hailstorm"):
            assert spec["image"] in tags, f"{name} uses an image nothing builds"


def test_environment_uses_only_variables_hailstorm_reads() -> None:
    for name, spec in SERVICES.items():
        for variable in spec.get("environment") or {}:
            if variable.startswith("HAILSTORM_"):
                assert variable in KNOWN_VARIABLES, f"{name}: hailstorm never reads {variable}"
    hailstorm_services = [
        s for s in SERVICES.values() if s.get("image", "").startswith("hailstorm")
    ]
    for spec in hailstorm_services:
        assert set(spec["environment"]) >= KNOWN_VARIABLES, "every hailstorm service gets all four"


def _check_hailstorm_command(argv: list[str]) -> None:
    group: click.Command = cli_main
    rest = list(argv)
    while isinstance(group, click.Group) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        command = group.get_command(click.Context(group), name)
        assert command is not None, f"'hailstorm {' '.join(argv)}': no command {name!r}"
        group = command
    assert not isinstance(group, click.Group), f"'hailstorm {' '.join(argv)}' names a group"
    for arg in rest:
        if PATH_LIKE.match(arg):
            assert (ROOT / arg).exists(), f"{arg} does not exist in the repo"


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_commands_exist(service: str) -> None:
    command = SERVICES[service].get("command")
    if command is None:
        return
    argv = command if isinstance(command, list) else command.split()
    program = argv[0]
    if program == "hailstorm":
        _check_hailstorm_command(argv[1:])
    elif program == "python" and argv[1] == "-m":
        assert importlib.util.find_spec(argv[2]) is not None, f"no module {argv[2]}"
        for arg in argv[3:]:
            if PATH_LIKE.match(arg):
                assert (ROOT / arg).exists(), f"{arg} does not exist in the repo"
    elif program == "spark-class":
        # Shipped by the pyspark wheel the image installs.
        assert (
            shutil.which("spark-class") or Path(importlib.util.find_spec("pyspark").origin).parent
        )
        assert argv[1].startswith("org.apache.spark.deploy.")
    else:
        pytest.fail(f"{service} runs {program!r}, which the project does not provide")
