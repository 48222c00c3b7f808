"""The web console (``hailstorm ui``): a read-only page showing a running topology.

:mod:`~hailstorm.console.view` computes what the page draws from status documents (pure);
:mod:`~hailstorm.console.server` samples them and serves the page; ``static/`` holds the
page itself (plain HTML, SVG and script, no third-party code).
"""
