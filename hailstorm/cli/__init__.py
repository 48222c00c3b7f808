"""The ``hailstorm`` command line (being split into modules by command group; for now all of
it is in :mod:`hailstorm.cli.inspecting`)."""

from hailstorm.cli.inspecting import main

__all__ = ["main"]
