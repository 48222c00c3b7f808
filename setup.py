"""The metadata is in pyproject.toml; this only ships the example topologies: the wheel's
``hailstorm/examples/`` is a copy of the repository's ``topologies/`` (their one
definition), so ``hailstorm demo``, ``show`` and ``chaos`` find them in a plain install."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

EXAMPLES = Path(__file__).resolve().parent / "topologies"


class BuildWithExamples(build_py):
    """build_py, plus ``topologies/*.py`` copied to ``hailstorm/examples/``."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "hailstorm" / "examples"
        target.mkdir(parents=True, exist_ok=True)
        for module in sorted(EXAMPLES.glob("*.py")):
            shutil.copyfile(module, target / module.name)


setup(cmdclass={"build_py": BuildWithExamples})
