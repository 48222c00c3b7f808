"""What can go wrong in a sink, as exceptions the runtime shell can tell apart."""

from __future__ import annotations

from hailstorm.errors import ConfigurationError, ServiceError

__all__ = [
    "DatabaseUnavailableError",
    "FencedError",
    "SchemaMismatchError",
    "SinkConfigError",
    "SinkError",
]


class SinkError(ServiceError, RuntimeError):
    """Base class of every sink error. Messages never contain database passwords."""


class SinkConfigError(ConfigurationError, SinkError):
    """The sink cannot be set up as described (unsupported URL, bad option...)."""


class SchemaMismatchError(SinkError):
    """An existing table does not have the shape the sink needs; nothing was altered.

    ``differences`` lists each problem as one short sentence.
    """

    def __init__(self, message: str, table: str, differences: list[str]) -> None:
        super().__init__(message)
        self.table = table
        self.differences = differences


class FencedError(SinkError):
    """The progress compare-and-set failed: the whole transaction was rolled back.

    ``superseded`` is True when a writer of a newer epoch owns the sink: this writer is a
    zombie and must stop. Otherwise another writer of the same epoch moved the progress:
    call :meth:`~hailstorm.sinks.SinkWriter.progress` to re-sync, then go on (rows the other
    writer applied are skipped).
    """

    def __init__(self, message: str, *, superseded: bool, epoch: int, stored_epoch: int) -> None:
        super().__init__(message)
        self.superseded = superseded
        self.epoch = epoch
        self.stored_epoch = stored_epoch


class DatabaseUnavailableError(SinkError):
    """The database stayed unreachable (or kept refusing writes) through every retry."""
