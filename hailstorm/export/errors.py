"""The error of ``hailstorm export`` (and of choosing a round to read)."""

from hailstorm.sinks.errors import SinkError


class ExportError(SinkError):
    """The export cannot run as asked (no such round, a table holding other data...)."""
