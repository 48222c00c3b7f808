"""Loading a topology: every problem in one error, each right about its kind of name; and
no window or ttl bolt without a decision about late data (issue 44)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm import Count, Table, Topology, TumblingWindow, per_key
from hailstorm.engine import execution_of
from hailstorm.lateness import late_table
from hailstorm.monoids import SlidingWindow
from hailstorm.topology import NAME_PATTERN, TopologyError, load_topology, render_text
from hailstorm.topology.errors import NAME_USES, suggest_name

HEADER = "from hailstorm import *\nfrom hailstorm.lateness import late_table\n"

THREE_MISTAKES = '''
topology = Topology("clicks")
clicks = topology.spout("clicks", topic="clicks", decoder="json")
per_minute = topology.bolt(
    "per_minute", inputs=[clicks], key=lambda c: c["page"],
    state=per_key(TumblingWindow(60, Count())), event_time=lambda c: c["ts"],
    lift=lambda c: 1, emit=lambda c, windows: [(c["page"], c["user"])])
topology.sink("views", inputs=[per_minute], target=Table(
    "page_views", columns={"page": "text", "userId": "text"}, key=["page"]))
topology.bolt("totals", inputs=[clicks], key=lambda c: c["user"], state=per_key(Count()),
              lift=lambda c: 1, parallelism=0)
'''


def load(tmp_path: Path, body: str) -> TopologyError:
    module = tmp_path / "clicks.py"
    module.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(TopologyError) as caught:
        load_topology(str(module))
    return caught.value


def test_three_mistakes_are_reported_in_one_error_each_with_where_what_and_fix(
    tmp_path: Path,
) -> None:
    error = load(tmp_path, THREE_MISTAKES)
    message = str(error)
    lines = message.splitlines()
    assert lines[0] == f"{tmp_path / 'clicks.py'}: 3 problems:"
    assert len(error.problems) == 3 and len(lines) == 4
    late, column, parallelism = lines[1:]
    assert late.startswith("  1. topology 'clicks', bolt 'per_minute': state "
                           "per_key(tumbling(60s, Count)) keeps windows")
    assert 'late="drop"' in late and "Fix: " in late
    assert column.startswith("  2. table 'page_views': column 'userId' is not a valid name")
    assert column.endswith("because it becomes an unquoted SQL identifier. Fix: rename it, "
                           "e.g. 'user_id'.")
    assert "ZooKeeper" not in column and "Kafka" not in column
    assert parallelism == ("  3. topology 'clicks', bolt 'totals': parallelism must be an "
                           "integer >= 1, got 0. Fix: use parallelism=1 (one instance) or "
                           "more.")
    assert [p.node for p in error.problems] == ["bolt 'per_minute'", "table 'page_views'",
                                                "bolt 'totals'"]


def test_one_problem_reads_as_before(tmp_path: Path) -> None:
    error = load(tmp_path, THREE_MISTAKES.replace(', parallelism=0', '').replace(
        '"userId"', '"user_id"').replace('lift=lambda c: 1, emit', 'late="drop", '
                                        'lift=lambda c: 1, emit').replace(
        "Topology(\"clicks\")", "Topology(\"Clicks\")"))
    assert error.problems == [error]
    assert str(error).startswith(f"{tmp_path / 'clicks.py'}: topology name 'Clicks' is not a "
                                 "valid name")
    assert "Fix: rename it, e.g. 'clicks'." in str(error)


def test_a_problem_that_stops_the_module_is_reported_with_those_before(tmp_path: Path) -> None:
    error = load(tmp_path, THREE_MISTAKES + 'Table("t", columns={"a": "blob"})\nnot_reached\n')
    assert len(error.problems) == 4
    assert "column 'a' has unsupported type 'blob'" in str(error.problems[3])


def test_outside_loading_a_declaration_raises_at_once() -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t")
    with pytest.raises(TopologyError, match="parallelism"):
        topology.bolt("b", inputs=[src], state=Count(), lift=lambda t: 1, parallelism=0)
    with pytest.raises(TopologyError, match="'userId'"):
        Table("t", columns={"userId": "text"})


@pytest.mark.parametrize(("name", "suggestion"), [
    ("userId", "user_id"), ("PageViews", "page_views"), ("HTTPServer", "http_server"),
    ("page views", "page_views"), ("2fa", "_2fa"), ("", "name"), ("user_id2", "user_id2"),
])
def test_suggested_names(name: str, suggestion: str) -> None:
    assert suggest_name(name) == suggestion


@given(st.text(max_size=80))
def test_a_suggested_name_is_always_valid(name: str) -> None:
    assert NAME_PATTERN.match(suggest_name(name))


def test_each_kind_of_name_says_only_what_is_true_of_it() -> None:
    assert "ZooKeeper" not in NAME_USES["column"] + NAME_USES["table name"]
    assert "SQL" not in NAME_USES["spout name"] + NAME_USES["bolt name"]
    for what in ("topology name", "spout name", "bolt name", "sink name"):
        assert "ZooKeeper" in NAME_USES[what]


# --------------------------------------------------------------------------- late data


def windows_bolt(late: object = None, *, state: object = None) -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t", decoder="json")
    kwargs = {} if late is None else {"late": late}
    topology.bolt("w", inputs=[src], key=lambda e: e["k"],
                  state=state or per_key(TumblingWindow(60, Count())),  # type: ignore[arg-type]
                  event_time=lambda e: e["t"], lift=lambda e: 1, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", [
    per_key(TumblingWindow(60, Count())), TumblingWindow(60, Count()),
    per_key(SlidingWindow(60, 10, Count())), per_key(Count(), ttl=60)])
def test_window_and_ttl_bolts_without_a_late_decision_are_refused(state: object) -> None:
    with pytest.raises(TopologyError) as caught:
        windows_bolt(state=state)
    message = str(caught.value)
    assert "it needs late= to say what happens to late tuples" in message
    assert 'late="<topology>.late"' in message and 'late="drop"' in message


@pytest.mark.parametrize("late", ["drop", "t.late", late_table("w_late")])
def test_each_decision_is_accepted_by_a_window_bolt(late: object) -> None:
    windows_bolt(late)


def test_drop_is_a_decision_not_a_topic_and_show_says_so() -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t", decoder="json")
    bolt = topology.bolt("w", inputs=[src], key=lambda e: e["k"],
                         state=per_key(TumblingWindow(60, Count())),
                         event_time=lambda e: e["t"], lift=lambda e: 1, late="drop")
    assert bolt.late is None and bolt.late_topic is None
    assert '  late:        dropped (late="drop")' in render_text(topology).splitlines()


def test_ttl_state_cannot_drop_and_state_without_windows_has_no_late_data() -> None:
    with pytest.raises(TopologyError, match="cannot drop late tuples"):
        windows_bolt("drop", state=per_key(Count(), ttl=60))
    topology = Topology("t")
    src = topology.spout("src", topic="t", decoder="json")
    with pytest.raises(TopologyError, match="no tuple is ever late"):
        topology.bolt("c", inputs=[src], key=lambda e: e, state=per_key(Count()),
                      lift=lambda e: 1, late="drop")
    with pytest.raises(TopologyError, match='a Table or "drop"'):
        windows_bolt(42)


def test_every_example_topology_decides_about_late_data() -> None:
    repo = Path(__file__).resolve().parents[2]
    for path in sorted((repo / "topologies").glob("*.py")):
        if path.name == "__init__.py":
            continue
        topology = load_topology(str(path))
        for bolt in topology.bolts:
            assert bolt.window is None or "late:" in render_text(topology), path


# --------------------------------------------------------------------------- window emit, units


def test_a_window_bolt_emits_a_typed_value_that_is_still_the_tuple() -> None:
    from hailstorm import WindowValue

    topology = Topology("t")
    src = topology.spout("src", topic="t")
    seen: list[object] = []
    bolt = topology.bolt("b", inputs=[src], key=lambda t: t[0],
                         state=per_key(TumblingWindow(60, Count())), lift=lambda t: 1,
                         event_time=lambda t: t[1], late="drop",
                         emit=lambda t, windows: seen.append(windows) or [
                             (t[0], windows.get(60), windows[1].get(60))])
    state = bolt.state.empty()
    for t in (("p", 61), ("p", 70)):
        state, outputs, _ = execution_of(bolt).process(state, t)
    assert outputs == [("p", 2, 2)]
    value = seen[-1]
    assert isinstance(value, WindowValue)
    assert value == (70, {60: 2}) and value.newest_event_time == 70 and value.windows == {60: 2}
    unkeyed = topology.bolt("u", inputs=[src], state=TumblingWindow(60, Count()),
                            lift=lambda t: 1, event_time=lambda t: t[1], late="drop",
                            emit=lambda t, windows: [windows])
    assert isinstance(execution_of(unkeyed).value_for_emit(None, [(61, {60: 1})]), WindowValue)


@pytest.mark.parametrize("unit", ["ms", "s", "min", "us"])
def test_show_prints_windows_in_their_declared_unit(unit: str) -> None:
    topology = Topology("t")
    src = topology.spout("src", topic="t")
    topology.bolt("b", inputs=[src], key=lambda t: t[0], lift=lambda t: 1,
                  state=per_key(SlidingWindow(60_000, 10_000, Count(), unit=unit)),
                  event_time=lambda t: t[1], late="drop")
    assert (f"  state:       per_key(sliding(60000{unit} every 10000{unit}, Count))"
            in render_text(topology).splitlines())


def test_an_unknown_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="unit must be one of ns, us, ms, s, min, h, d"):
        TumblingWindow(60, Count(), unit="sec")
