"""Database URLs: which driver they need, and how to print them without the password."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from hailstorm.sinks.errors import SinkConfigError

__all__ = ["DatabaseUrl", "parse_url", "redact", "scrub"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_KEY_VALUE_SECRET = re.compile(r"(?i)\b(password|passwd|pwd|sslpassword)=([^&\s]*)")
MASK = "***"


def _split_userinfo(url: str) -> tuple[str, str | None, str] | None:
    """``(head up to the user, password or None, rest from '@')`` of a ``scheme://`` URL."""
    match = _SCHEME.match(url)
    if not match:
        return None
    rest = url[match.end() :]
    stops = [i for i in (rest.find("?"), rest.find("#")) if i >= 0]
    end = min(stops) if stops else len(rest)
    at = rest.rfind("@", 0, end)  # the last '@': passwords may contain '@' and '/'
    if at < 0:
        return None
    userinfo = rest[:at]
    user, colon, password = userinfo.partition(":")
    head = url[: match.end()] + user
    return head, (password if colon else None), rest[at:]


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (userinfo, ``password=`` parameters).

    >>> redact("postgresql://app:s3cr%40t@db:5432/prod?sslmode=require")
    'postgresql://app:***@db:5432/prod?sslmode=require'
    >>> redact("sqlite:///hailstorm.db")
    'sqlite:///hailstorm.db'
    """
    text = str(url)
    parts = _split_userinfo(text)
    if parts is not None and parts[1] is not None:
        head, _, rest = parts
        text = f"{head}:{MASK}{rest}"
    return _KEY_VALUE_SECRET.sub(lambda m: f"{m.group(1)}={MASK}", text)


def _secrets(url: str) -> list[str]:
    found: list[str] = []
    parts = _split_userinfo(url)
    if parts is not None and parts[1]:
        found += [parts[1], unquote(parts[1])]
    for match in _KEY_VALUE_SECRET.finditer(url):
        if match.group(2):
            found += [match.group(2), unquote(match.group(2))]
    return sorted({s for s in found if s}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (e.g. a driver's error message) with ``url``'s password masked wherever it
    appears, and any URL in it redacted."""
    for secret in _secrets(url):
        text = text.replace(secret, MASK)
    text = re.sub(r"[A-Za-z][A-Za-z0-9+.-]*://\S+", lambda m: redact(m.group(0)), text)
    return _KEY_VALUE_SECRET.sub(lambda m: f"{m.group(1)}={MASK}", text)


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
