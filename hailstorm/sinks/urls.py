"""Database URLs: which driver they need (:func:`parse_url`).

Printing them without the password is :mod:`hailstorm.urls`' (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from hailstorm.sinks.errors import SinkConfigError
from hailstorm.urls import redact, scrub

__all__ = ["DatabaseUrl", "parse_url", "redact", "scrub"]


@dataclass(frozen=True)
class DatabaseUrl:
    """A parsed sink URL: ``kind`` picks the driver, ``target`` is what it connects to."""

    url: str
    kind: Literal["postgresql", "sqlite"]
    target: str
    """The libpq URL for PostgreSQL; the file path (or ``:memory:``) for SQLite."""

    def __str__(self) -> str:
        return redact(self.url)


_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(url: str | None) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL."""
    return url is not None and url.strip().lower().startswith(_POSTGRES_SCHEMES)


def parse_url(url: str) -> DatabaseUrl:
    """Recognise ``postgresql://`` (or ``postgres://``) and ``sqlite:///path`` URLs.

    ``sqlite:///hailstorm.db`` is relative to the working directory,
    ``sqlite:////var/lib/x.db`` absolute.
    """
    text = str(url).strip()
    lower = text.lower()
    if lower.startswith(_POSTGRES_SCHEMES):
        return DatabaseUrl(text, "postgresql", text)
    if lower.startswith("sqlite:///"):
        path = text[len("sqlite:///") :]
        if not path:
            raise SinkConfigError(f"{redact(text)}: no file name after sqlite:///")
        return DatabaseUrl(text, "sqlite", unquote(path.split("?", 1)[0]))
    raise SinkConfigError(
        f"unsupported database URL {redact(text)!r}: use postgresql://user:password@host/db "
        "or sqlite:///path/to/file.db"
    )
