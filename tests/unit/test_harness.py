"""The kill-test harness's pure parts: the model comparison, the fault plan, the report."""

from __future__ import annotations

import json
from typing import Any

from hailstorm import Count, Topology, per_key
from hailstorm.harness import BoltStates, ChaosReport, ChaosSchedule, compare_with_model
from hailstorm.model import ModelResult, messages, run_model


def _model() -> tuple[Topology, ModelResult]:
    topology = Topology("t")
    lines = topology.spout("lines", topic="w", decoder="text", explode=str.split)
    topology.bolt("counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                  lift=lambda w: 1, parallelism=2)
    return topology, run_model(topology, messages("w", ["a b a", "c a", "b"]))


def _states(model: ModelResult, merged: dict[str, Any]) -> dict[str, BoltStates]:
    instances = model.instance_states("counts")
    return {"counts": BoltStates("counts", {}, list(instances), merged, [{}, {}])}


def test_equal_states_compare_ok() -> None:
    _, model = _model()
    result = compare_with_model(model, _states(model, {"a": 3, "b": 2, "c": 1}))
    assert result.ok and (result.lost, result.duplicated, result.wrong) == (0, 0, 0)
    assert result.keys_compared == 3


def test_lower_is_lost_higher_is_duplicated_missing_is_lost() -> None:
    _, model = _model()
    result = compare_with_model(model, _states(model, {"a": 2, "b": 4, "d": 1}))
    assert (result.lost, result.duplicated, result.wrong) == (1 + 1, 2 + 1, 0)
    assert [(d.key, d.kind) for d in result.differences] == [
        ("a", "lost"), ("b", "duplicated"), ("c", "lost"), ("d", "duplicated")]
    assert not result.ok


def test_non_count_values_are_wrong() -> None:
    _, model = _model()
    result = compare_with_model(model, _states(model, {"a": "x", "b": 2, "c": 1}))
    assert (result.lost, result.duplicated, result.wrong) == (0, 0, 1)


def test_schedule_is_seeded_and_uses_every_kind() -> None:
    plan = ChaosSchedule(count=3, seed=1).plan()
    assert plan == ChaosSchedule(count=3, seed=1).plan()
    assert sorted(p.kind for p in plan) == ["negotiator", "processor", "zk-session"]
    assert all(1.0 <= p.delay <= 3.0 for p in plan)
    exact = ChaosSchedule(kinds=("processor",) * 4 + ("negotiator",), count=5, seed=3).plan()
    assert sorted(p.kind for p in exact) == ["negotiator"] + ["processor"] * 4


def test_report_renders_as_text_and_json() -> None:
    _, model = _model()
    comparison = compare_with_model(model, _states(model, {"a": 2, "b": 2, "c": 1}))
    report = ChaosReport("t", 3, 1, 0, [], comparison, 4, 1.5)
    assert "1 lost, 0 duplicated, 0 wrong" in report.to_text()
    assert "FAILED" in report.to_text()
    data = json.loads(report.to_json())
    assert (data["lost"], data["ok"], data["differences"][0]["key"]) == (1, False, "'a'")
