"""Exactly-once database sinks: tables kept up to date from a topology's sink tuples.

* :class:`SinkWriter` — one sink instance's writer: buffers rows with their origins and
  applies them with the sink's progress in one transaction, fenced by epoch and
  compare-and-set (see ``docs/sinks.md``);
* :func:`redact` — a database URL without its password, for logs and messages;
* :class:`RetryPolicy` — how long a writer keeps trying a database that is down;
* errors: :class:`FencedError`, :class:`SchemaMismatchError`,
  :class:`DatabaseUnavailableError`, :class:`SinkConfigError` (all :class:`SinkError`).

Modules: :mod:`~hailstorm.sinks.sql` (SQL per dialect and shape checks, pure),
:mod:`~hailstorm.sinks.buffer` (what a commit applies, pure), :mod:`~hailstorm.sinks.urls`,
:mod:`~hailstorm.sinks.db` (connections, introspection, retries),
:mod:`~hailstorm.sinks.writer`.
"""

from hailstorm.sinks.buffer import RowBuffer, Selection
from hailstorm.sinks.db import Database, RetryPolicy, is_transient, with_retries
from hailstorm.sinks.errors import (
    DatabaseUnavailableError,
    FencedError,
    SchemaMismatchError,
    SinkConfigError,
    SinkError,
)
from hailstorm.sinks.sql import PROGRESS_TABLE, TableShape, shape_of
from hailstorm.sinks.urls import parse_url, redact, scrub
from hailstorm.sinks.writer import SinkWriter, ensure_table

__all__ = [
    "PROGRESS_TABLE",
    "Database",
    "DatabaseUnavailableError",
    "FencedError",
    "RetryPolicy",
    "RowBuffer",
    "SchemaMismatchError",
    "Selection",
    "SinkConfigError",
    "SinkError",
    "SinkWriter",
    "TableShape",
    "ensure_table",
    "is_transient",
    "parse_url",
    "redact",
    "scrub",
    "shape_of",
    "with_retries",
]
