"""The ``hailstorm`` command line: the click group :func:`main` (the console script
``hailstorm`` and ``python -m hailstorm`` run it), with its commands in modules by group.

* :mod:`~hailstorm.cli.group` - the group itself, the consoles, one-line errors and the
  shared ``--state-dir`` option;
* :mod:`~hailstorm.cli.dev` - ``hailstorm dev up|down|status|env``;
* :mod:`~hailstorm.cli.running` - ``init``, ``run``, ``stop``, ``negotiator``, ``demo`` and
  ``secret``;
* :mod:`~hailstorm.cli.inspecting` - ``show``, ``status``, ``ui``, ``snapshots``, ``query``
  and ``export``;
* :mod:`~hailstorm.cli.sinks` - ``sink accept`` and ``sink rebuild``;
* :mod:`~hailstorm.cli.chaos` - ``chaos``;
* :mod:`~hailstorm.cli.upgrading` - ``plan``.

Importing this package registers every command on :func:`main` (each module adds its own).
"""

from hailstorm.cli import (  # noqa: F401  (they register the commands)
    chaos,
    dev,
    inspecting,
    running,
    sinks,
    upgrading,
)
from hailstorm.cli.group import main

__all__ = ["main"]
