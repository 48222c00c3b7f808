"""``python -m hailstorm.cli``: the same as the ``hailstorm`` command."""

from hailstorm.cli import main

main()
