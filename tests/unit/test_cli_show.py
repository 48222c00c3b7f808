"""``hailstorm show``: the command a user runs to look at a topology."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pydot
import pytest

ROOT = Path(__file__).resolve().parents[2]


def hailstorm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hailstorm", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("ref", ["topologies/wordcount.py", "topologies.wordcount"])
def test_show_prints_the_dag(ref: str) -> None:
    result = hailstorm("show", ref)
    assert result.returncode == 0, result.stderr
    for text in (
        "spout lines",
        "bolt counts",
        "per_key(Count)",
        "sink word_counts",
    ):
        assert text in result.stdout
    assert re.search(r"parallelism: +2\n", result.stdout)  # labels are padded to align
    assert re.search(r"preaggregate: +spouts combine", result.stdout)


def test_show_dot_is_valid_graphviz(tmp_path: Path) -> None:
    result = hailstorm("show", "topologies/wordcount.py", "--dot")
    assert result.returncode == 0, result.stderr
    (graph,) = pydot.graph_from_dot_data(result.stdout)
    nodes = {n.get_name().strip('"') for n in graph.get_nodes()} - {"node", "edge"}
    assert nodes == {"lines", "counts", "word_counts"}
    edges = {(e.get_source().strip('"'), e.get_destination().strip('"')) for e in graph.get_edges()}
    assert edges == {("lines", "counts"), ("counts", "word_counts")}
    if shutil.which("dot"):  # Graphviz itself, where installed
        rendered = subprocess.run(
            ["dot", "-Tsvg"], input=result.stdout, capture_output=True, text=True, check=False
        )
        assert rendered.returncode == 0, rendered.stderr


def test_show_bad_topology_is_one_clear_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(
        "from hailstorm import Topology, Count\n"
        "topology = Topology('broken')\n"
        "topology.bolt('b', inputs=['nowhere'], state=Count(), lift=lambda t: 1)\n"
    )
    result = hailstorm("show", str(broken))
    assert result.returncode == 1
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "nowhere" in result.stderr and "Fix:" in result.stderr


def test_show_masks_database_passwords(tmp_path: Path) -> None:
    module = tmp_path / "secret_sink.py"
    module.write_text(
        "from hailstorm import Count, Table, Topology\n"
        "topology = Topology('secret')\n"
        "lines = topology.spout('lines', topic='t')\n"
        "counts = topology.bolt('counts', inputs=[lines], state=Count(), lift=Count.lift,\n"
        "                       emit=lambda t, n: [(n,)])\n"
        "topology.sink('out', inputs=[counts], target=Table('out', {'n': 'bigint'},\n"
        "    mode='append', url='postgresql://app:s3cr3t-pw@db:5432/prod'))\n")
    for extra in ((), ("--dot",)):
        result = hailstorm("show", str(module), *extra)
        assert result.returncode == 0, result.stderr
        assert "s3cr3t-pw" not in result.stdout + result.stderr
        assert ("app:***@db:5432/prod" in result.stdout) == (not extra)  # DOT: no URL at all
