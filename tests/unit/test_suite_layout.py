"""The suite's own layout: pytest imports test modules by basename (the test folders are not
packages), so two test files of one name make collection fail for the whole suite."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, k in names.items() if k > 1], (
        f"test modules sharing a name: {sorted(n for n, k in names.items() if k > 1)}")
