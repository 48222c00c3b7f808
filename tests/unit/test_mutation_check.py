"""scripts/mutation_check.py stays meaningful: every mutation's text is in the code once, so
no mutant silently stops applying when the code it breaks moves or changes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutation_check",
                                               REPO / "scripts" / "mutation_check.py")
assert _spec is not None and _spec.loader is not None
mutation_check = importlib.util.module_from_spec(_spec)
sys.modules["mutation_check"] = mutation_check  # dataclasses look their module up
_spec.loader.exec_module(mutation_check)


@pytest.mark.parametrize("mutation", mutation_check.MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_applies_exactly_once(mutation: object) -> None:
    for edit in mutation.edits:  # type: ignore[attr-defined]
        found = (REPO / edit.path).read_text().count(edit.old)
        assert found == 1, f"{edit.path}: the text to change is there {found} times"


def test_every_mutation_is_checked_by_chaos_or_by_unit_tests_that_exist() -> None:
    for mutation in mutation_check.MUTATIONS:
        if mutation.check == "chaos":
            continue
        path, _, name = mutation_check.UNIT_CHECKS[mutation.check].partition("::")
        assert (REPO / path).is_file() and (not name or f"def {name}(" in
                                            (REPO / path).read_text()), mutation.name


def test_the_harness_itself_is_among_the_mutants() -> None:
    names = {m.name for m in mutation_check.MUTATIONS}
    assert {"none", "none-oracle", "fault-does-nothing"} <= names


def test_a_side_output_mutant_runs_a_topology_that_writes_late_records() -> None:
    """The late-record mutant is caught only by reading the late topic back: its topology
    must route late data to a topic."""
    from hailstorm.dev.harness.side_outputs import side_output_topics
    from hailstorm.topology import load_topology

    mutant = next(m for m in mutation_check.MUTATIONS if m.name == "late-record-twice")
    topology = load_topology(str(REPO / mutant.topology))
    assert any(b.late_topic for b in topology.bolts)
    assert "pageviews.late" in side_output_topics(topology)
