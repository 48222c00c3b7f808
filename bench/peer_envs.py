"""The peers' own virtualenvs, made by the benchmarks on first use and cached.

Pathway, Quix Streams and PyFlink each pin dependencies of their own (PyFlink alone brings
a JVM distribution of several hundred MB), so none of them is in hailstorm's dependencies or
its ``bench`` extra: each lives in a venv of its own under ``~/.cache/hailstorm/peers/NAME``
(``HAILSTORM_PEERS_DIR`` elsewhere), made with the machine's ``python3 -m venv`` and PyPI.
A venv is remade when its pinned requirements change. PyFlink's Kafka SQL connector is
fetched from Maven Central with the machine's Maven (``mvn dependency:copy``, which checks
Maven Central's checksums) into the same cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Peer:
    """A peer engine: its name in reports and the pip requirements of its venv."""

    label: str
    requirements: tuple[str, ...]


PEERS: dict[str, Peer] = {
    "pathway": Peer("Pathway 0.33", ("pathway==0.33.0",)),
    "quix": Peer("Quix Streams 3.28", ("quixstreams==3.28.1",)),
    "pyflink": Peer("PyFlink 2.2", ("apache-flink==2.2.1", "confluent-kafka==2.16.1")),
}

FLINK_KAFKA_CONNECTOR = "org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2"
"""The Kafka SQL connector of Flink 2.2 (a fat jar: the Kafka client inside)."""


class PeerUnavailable(Exception):
    """A peer's venv or artifact could not be made; the message says why."""


def peers_dir() -> Path:
    default = Path.home() / ".cache" / "hailstorm" / "peers"
    return Path(os.environ.get("HAILSTORM_PEERS_DIR", default))


def peer_python(name: str) -> Path:
    """The Python of ``name``'s venv, made (with a progress line) if missing or stale."""
    peer = PEERS[name]
    venv = peers_dir() / name
    python = venv / "bin" / "python"
    marker = venv / "hailstorm-requirements"
    wanted = hashlib.sha256("\n".join(peer.requirements).encode()).hexdigest()
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"bench: installing {peer.label} into {venv} (first run: a few minutes)",
          file=sys.stderr, flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    run_step([sys.base_prefix + "/bin/python3", "-m", "venv", str(venv)], f"making {venv}")
    run_step([str(python), "-m", "pip", "install", "--quiet", *peer.requirements],
         f"pip install {' '.join(peer.requirements)}")
    marker.write_text(wanted)
    return python


def flink_kafka_connector() -> Path:
    """The Kafka SQL connector jar for PyFlink, fetched with Maven on first use."""
    _group, artifact, version = FLINK_KAFKA_CONNECTOR.split(":")
    jar = peers_dir() / "jars" / f"{artifact}-{version}.jar"
    if jar.exists():
        return jar
    if shutil.which("mvn") is None:
        raise PeerUnavailable("mvn not found: PyFlink's Kafka connector comes from Maven Central")
    print(f"bench: fetching {FLINK_KAFKA_CONNECTOR} from Maven Central", file=sys.stderr,
          flush=True)
    run_step(["mvn", "-q", "-B", "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy",
          f"-Dartifact={FLINK_KAFKA_CONNECTOR}", f"-DoutputDirectory={jar.parent}"],
         f"fetching {FLINK_KAFKA_CONNECTOR}")
    if not jar.exists():
        raise PeerUnavailable(f"Maven fetched {FLINK_KAFKA_CONNECTOR} but {jar} is missing")
    return jar


def run_step(argv: list[str], what: str) -> None:
    """Run one set-up command (a venv, a pip install, a Maven fetch); PeerUnavailable with
    its last lines when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PeerUnavailable(f"{what} failed ({done.returncode}): {' | '.join(tail)}")
