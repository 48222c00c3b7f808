"""Reading test databases the way another client would, and backing them up and restoring
them the way an operator would."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Sequence
from typing import Any

import psycopg

from hailstorm.dev.services import postgres_bin_dir
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


def _libpq_env(url: str) -> tuple[dict[str, str], str]:
    """The environment that points libpq tools at the PostgreSQL ``url`` (its password
    there rather than on a command line), and the database's name."""
    parts = psycopg.conninfo.conninfo_to_dict(url)
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD"}
    env = dict(os.environ, **{names[k]: str(v) for k, v in parts.items() if k in names})
    return env, str(parts["dbname"])


def backup(url: str, tables: Sequence[str]) -> bytes:
    """A ``pg_dump`` (custom format) of ``tables`` of the PostgreSQL database at ``url``, as
    an operator's nightly backup would take it."""
    env, dbname = _libpq_env(url)
    args = [str(postgres_bin_dir() / "pg_dump"), "--format=custom", f"--dbname={dbname}"]
    done = subprocess.run([*args, *(f"--table={t}" for t in tables)], env=env,
                          capture_output=True, timeout=120, check=True)
    return done.stdout


def restore(url: str, dump: bytes) -> None:
    """Restore a :func:`backup` over the database at ``url`` (``pg_restore --clean``: its
    tables are dropped and re-created as they were in the backup)."""
    env, dbname = _libpq_env(url)
    subprocess.run([str(postgres_bin_dir() / "pg_restore"), "--clean", "--if-exists",
                    "--exit-on-error", f"--dbname={dbname}"], input=dump, env=env,
                   capture_output=True, timeout=120, check=True)
