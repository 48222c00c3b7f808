"""Reading test databases the way another client would."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg

from hailstorm.sinks import parse_url


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Run ``sql`` on a fresh connection of its own (another client than the writer)."""
    parsed = parse_url(url)
    if parsed.kind == "postgresql":
        with psycopg.connect(url) as conn:
            cursor = conn.execute(sql)
            return list(cursor.fetchall()) if cursor.description else []
    lite = sqlite3.connect(parsed.target)
    try:
        with lite:
            result = lite.execute(sql)
            return list(result.fetchall()) if result.description else []
    finally:
        lite.close()
