"""``python -m hailstorm``: the same as the ``hailstorm`` command."""

from hailstorm.cli import main

main()
