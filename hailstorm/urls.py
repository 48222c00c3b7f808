"""URLs with credentials in them: how to print them without the password.

The one redaction rule for every URL hailstorm prints (sink databases in logs, errors and
``describe()``, table targets of a topology): :func:`redact` masks the password of a URL,
:func:`scrub` masks a URL's password wherever it appears in a text (e.g. a driver's error
message). A leaf module: :mod:`hailstorm.topology` and :mod:`hailstorm.sinks` both import it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "redact", "scrub"]

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
