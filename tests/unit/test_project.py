"""``hailstorm init DIR``: a project of one's own whose test passes and whose topology loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from hailstorm.cli import main
from hailstorm.project import project_files, project_name
from hailstorm.topology import load_topology

REPO = Path(__file__).resolve().parents[2]


def test_init_makes_a_project_whose_test_passes_and_topology_loads(tmp_path: Path) -> None:
    project = tmp_path / "my-clicks"
    result = CliRunner().invoke(main, ["init", str(project)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in project.iterdir()) == [
        "README.md", "my_clicks.py", "produce.py", "test_my_clicks.py"]
    topology = load_topology(str(project / "my_clicks.py"))
    assert topology.name == "my_clicks" and topology.spouts[0].topic == "my_clicks.clicks"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=120,
                           check=False)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "1 passed" in tests.stdout
    readme = (project / "README.md").read_text()
    for command in ("pytest", "hailstorm negotiator my_clicks.py &",
                    "hailstorm run my_clicks.py", "python produce.py"):
        assert command in readme, command
    compile((project / "produce.py").read_text(), "produce.py", "exec")


def test_init_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("mine")
    result = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert result.exit_code == 1
    assert "README.md exists: hailstorm init writes only new files" in result.output
    assert (tmp_path / "README.md").read_text() == "mine"
    assert not (tmp_path / "produce.py").exists(), "nothing written"


def test_project_names_are_valid_names() -> None:
    assert project_name(Path("/x/My Clicks")) == "my_clicks"
    assert project_name(Path("/x/clicks")) == "clicks"
    assert "shop.py" in project_files("shop")
