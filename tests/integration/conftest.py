"""Database fixtures shared by the sink, export and end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["postgresql", "sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The session's real PostgreSQL, or a SQLite file of the test's own."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return f"sqlite:///{tmp_path / 'test.db'}"
