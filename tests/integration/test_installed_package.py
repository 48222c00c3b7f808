"""hailstorm as a user gets it: the wheel built from this checkout, installed into a fresh
virtualenv outside the repository, with nothing of the checkout on the path. ``hailstorm
init`` makes a project whose test passes there, and ``hailstorm show`` finds both that
project's topology and the examples the wheel ships (``hailstorm/examples``, a copy of
``topologies/``). The virtualenv borrows the test environment's dependencies through a
``.pth`` line instead of downloading them (no network)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "hailstorm", "topologies")


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300,
        ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout, check=False)
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


def wheel_builder() -> list[str]:
    """A Python that can build a wheel without downloading anything (setuptools and wheel
    installed): this one, else Debian's python3; fails naming what is missing."""
    for python in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run([python, "-c", "import setuptools, wheel"], capture_output=True,
                               check=False) if Path(python).exists() else None
        if probe is not None and probe.returncode == 0:
            return [python, "setup.py", "-q", "bdist_wheel"]
    pytest.fail("no Python here has setuptools and wheel to build the wheel offline "
                "(apt-get install python3-wheel)")


def test_the_wheel_installs_and_makes_a_project_that_works(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(origin, source / name)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    run([*wheel_builder(), "-d", str(tmp_path / "dist")], source, clean)
    (wheel,) = (tmp_path / "dist").glob("hailstorm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "hailstorm/examples/wordcount.py" in names
    assert "hailstorm/negotiator/machine.py" in names
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"hailstorm"}, f"nothing generic at the top of site-packages: {tops}"

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, clean)
    python = venv / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                   "['purelib'])"], tmp_path, clean).stdout.strip()
    # Dependencies from the test environment; its editable hailstorm is not on this path
    # (a plain directory line runs none of that directory's .pth files).
    Path(purelib, "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)], tmp_path, clean)
    located = run([str(python), "-c", "import hailstorm; print(hailstorm.__file__)"],
                  tmp_path, clean).stdout.strip()
    assert located.startswith(purelib), located

    hailstorm = str(venv / "bin" / "hailstorm")
    work = tmp_path / "work"
    work.mkdir()
    run([hailstorm, "init", "clicks"], work, clean)
    project = work / "clicks"
    tests = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], project, clean)
    assert "1 passed" in tests.stdout
    shown = run([hailstorm, "show", "clicks.py"], project, clean).stdout
    assert "topology clicks  (clicks.py)" in shown and "late:" in shown
    example = run([hailstorm, "show", "topologies/wordcount.py"], work, clean).stdout
    assert example.startswith("topology wordcount  (topologies/wordcount.py)")
