"""Topology declaration, validation messages, loading and rendering."""

from __future__ import annotations

import pickle
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pydot
import pytest

from hailstorm import (
    Avro,
    Collect,
    Count,
    Mean,
    Sum,
    Table,
    Topology,
    TopologyError,
    TumblingWindow,
    by_key,
    load_topology,
    per_key,
    render_dot,
    render_text,
)
from hailstorm.topology import BoltSpec, SinkSpec, SpoutSpec

HEADER = """\
from hailstorm import (Collect, Count, Sum, Table, Topology, TumblingWindow, per_key)
topology = Topology("demo")
"""
SPOUT = 'src = topology.spout("src", topic="events", decoder="text")\n'
GOOD_BOLT = (
    'b = topology.bolt("b", inputs=[src], key=lambda t: t, state=per_key(Count()), '
    "lift=lambda t: 1, emit=lambda t, n: [(t, n)])\n"
)


def load_error(tmp_path: Path, body: str) -> str:
    """Load a module made of HEADER + body; return the TopologyError message."""
    module = tmp_path / "bad_topology.py"
    module.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(TopologyError) as caught:
        load_topology(str(module))
    message = str(caught.value)
    assert message.startswith(f"{module}: "), message  # names the module
    assert "Fix: " in message, message  # and the fix
    return message


# --------------------------------------------------------------------------- validation


def test_unknown_input_name(tmp_path: Path) -> None:
    message = load_error(
        tmp_path,
        SPOUT + 'topology.sink("out", inputs=["cuonts"], target=Collect())\n',
    )
    assert "sink 'out'" in message
    assert "input 'cuonts' is not a node of this topology (known: src)" in message
    assert "fix the spelling" in message


def test_cycle_reports_the_path(tmp_path: Path) -> None:
    message = load_error(
        tmp_path,
        SPOUT
        + 'for name, inputs in [("a", ["src", "c"]), ("b", ["a"]), ("c", ["b"])]:\n'
        + "    topology.bolt(name, inputs=inputs, state=Count(), lift=lambda t: 1,\n"
        + "                  emit=lambda t, n: [t])\n",
    )
    assert "bolt 'a'" in message
    assert "cycle: a -> b -> c -> a" in message
    assert "remove one of these inputs" in message


def test_duplicate_names(tmp_path: Path) -> None:
    message = load_error(tmp_path, SPOUT + 'topology.sink("src", inputs=[src], target=Collect())\n')
    assert "sink 'src': the name 'src' is already used by a spout" in message
    assert "different name" in message


@pytest.mark.parametrize("parallelism", [0, -1, 1.5, True])
def test_parallelism_below_one(tmp_path: Path, parallelism: object) -> None:
    message = load_error(
        tmp_path,
        SPOUT + f"topology.bolt('b', inputs=[src], key=lambda t: t, state=per_key(Count()), "
        f"lift=lambda t: 1, parallelism={parallelism!r})\n",
    )
    assert "bolt 'b'" in message
    assert f"parallelism must be an integer >= 1, got {parallelism!r}" in message
    assert "parallelism=1" in message


def test_parallelism_without_key(tmp_path: Path) -> None:
    message = load_error(
        tmp_path,
        SPOUT + "topology.bolt('b', inputs=[src], state=Count(), lift=lambda t: 1, "
        "parallelism=3)\n",
    )
    assert "bolt 'b'" in message
    assert "parallelism=3 needs a key function" in message
    assert "pass key=lambda t: ..., or use parallelism=1" in message


def test_keyed_state_without_key(tmp_path: Path) -> None:
    message = load_error(
        tmp_path, SPOUT + "topology.bolt('b', inputs=[src], state=per_key(Count()), lift=len)\n"
    )
    assert "bolt 'b': state per_key(Count) is keyed" in message
    assert "pass key=lambda t: ..." in message


@pytest.mark.parametrize("kind", ["bolt", "sink"])
def test_no_inputs(tmp_path: Path, kind: str) -> None:
    call = (
        "topology.bolt('x', inputs=[], state=Count(), lift=lambda t: 1)"
        if kind == "bolt"
        else "topology.sink('x', inputs=[], target=Collect())"
    )
    message = load_error(tmp_path, SPOUT + call + "\n")
    assert f"{kind} 'x': a {kind} needs at least one input" in message
    assert "pass inputs=[...]" in message


def test_input_listed_twice(tmp_path: Path) -> None:
    message = load_error(
        tmp_path, SPOUT + "topology.sink('x', inputs=[src, 'src'], target=Collect())\n"
    )
    assert "sink 'x': input 'src' is listed twice" in message
    assert "list each input once" in message


def test_sink_as_input(tmp_path: Path) -> None:
    message = load_error(
        tmp_path,
        SPOUT
        + "out = topology.sink('out', inputs=[src], target=Collect())\n"
        + "topology.sink('again', inputs=[out], target=Collect())\n",
    )
    assert "sink 'again': input 'out' is a sink, and sinks emit nothing" in message


def test_bolt_without_emit_feeding_others(tmp_path: Path) -> None:
    message = load_error(
        tmp_path,
        SPOUT
        + "b = topology.bolt('b', inputs=[src], state=Count(), lift=lambda t: 1)\n"
        + "topology.sink('out', inputs=[b], target=Collect())\n",
    )
    assert "bolt 'b': 'out' read(s) this bolt, but it has no emit function" in message
    assert "pass emit=lambda t, value: [...]" in message


def test_unused_spout_is_fine(tmp_path: Path) -> None:
    module = tmp_path / "fine.py"
    module.write_text(HEADER + SPOUT + 'topology.spout("unused", topic="other")\n' + GOOD_BOLT)
    topology = load_topology(str(module))
    assert [s.name for s in topology.spouts] == ["src", "unused"]
    assert topology.downstream_of("unused") == []


@pytest.mark.parametrize(
    ("body", "node", "name"),
    [
        ('Topology("Word-Count")', "topology name", "'Word-Count'"),
        ('topology.spout("Lines", topic="t")', "spout 'Lines'", "'Lines'"),
        ('topology.spout("1st", topic="t")', "spout '1st'", "'1st'"),
        ('topology.spout("a" * 64, topic="t")', "spout 'aaaa", "'aaaa"),
        (
            'topology.sink("s", inputs=[src], target=Table("my table", columns={"a": "text"}, '
            'mode="append"))',
            "table 'my table'",
            "'my table'",
        ),
        (
            'topology.sink("s", inputs=[src], target=Table("t", columns={"A": "text"}, '
            'mode="append"))',
            "table 't'",
            "column 'A'",
        ),
        # '$' matches before a trailing newline: the patterns end in '\Z' (issue 45)
        ('Topology("counts\\n")', "topology name", "'counts\\n'"),
        ('topology.spout("lines\\n", topic="t")', "spout 'lines\\n'", "'lines\\n'"),
        (
            'topology.sink("s", inputs=[src], target=Table("counts\\n", columns={"a": "text"}, '
            'mode="append"))',
            "table 'counts\\n'",
            "'counts\\n'",
        ),
        (
            'topology.sink("s", inputs=[src], target=Table("t", columns={"a\\n": "text"}, '
            'mode="append"))',
            "table 't'",
            "column 'a\\n'",
        ),
    ],
)
def test_unsafe_names(tmp_path: Path, body: str, node: str, name: str) -> None:
    message = load_error(tmp_path, SPOUT + body + "\n")
    assert node in message
    assert name in message
    assert "is not a valid name" in message
    # Each kind of name says only what is true of it: tables and columns are SQL
    # identifiers, never ZooKeeper nodes; topologies and nodes are ZooKeeper nodes.
    sql = node.startswith("table ")
    assert ("because it becomes an unquoted SQL identifier" in message) == sql
    assert ("ZooKeeper" in message) != sql
    assert "rename it, e.g." in message


@pytest.mark.parametrize("topic", ["", ".", "..", "bad topic", "x" * 250, "a/b", "words\n"])
def test_invalid_topic_names(tmp_path: Path, topic: str) -> None:
    message = load_error(tmp_path, f"topology.spout('s', topic={topic!r})\n")
    assert f"spout 's': topic {topic!r} is not a valid Kafka topic name" in message


def test_invalid_dead_letter_topic(tmp_path: Path) -> None:
    message = load_error(tmp_path, "topology.spout('s', topic='t', dead_letter='no way')\n")
    assert "spout 's': dead-letter topic 'no way' is not a valid Kafka topic name" in message


def test_state_not_a_monoid(tmp_path: Path) -> None:
    message = load_error(tmp_path, SPOUT + "topology.bolt('b', inputs=[src], state=0, lift=len)\n")
    assert "bolt 'b': state must be a Monoid" in message
    assert "pass state=" in message


@pytest.mark.parametrize("argument", ["lift", "key", "emit", "event_time"])
def test_functions_must_be_callable(tmp_path: Path, argument: str) -> None:
    arguments = {"lift": "len", "key": "None", "emit": "None", "event_time": "None"}
    arguments[argument] = "42"
    call = ", ".join(f"{k}={v}" for k, v in arguments.items())
    message = load_error(
        tmp_path, SPOUT + f"topology.bolt('b', inputs=[src], state=Count(), {call})\n"
    )
    assert f"bolt 'b': {argument} must be a function, got 42" in message
    assert f"pass {argument}=" in message


def test_emit_by_key_needs_keyed_state_and_a_function() -> None:
    topology = Topology("t")
    words = topology.spout("words", topic="w", decoder="text", explode=str.split)
    refused = r"emit=by_key\(\.\.\.\) reads a tuple's key, and this bolt's state has no keys"
    with pytest.raises(TopologyError, match=refused):
        topology.bolt("total", inputs=[words], state=Count(), lift=Count.lift,
                      emit=by_key(lambda key, n: [n]))
    with pytest.raises(TypeError, match=r"by_key takes a function of \(key, value\), not 3"):
        by_key(3)  # type: ignore[arg-type]
    counts = topology.bolt("counts", inputs=[words], key=lambda w: w.lower(),
                           state=per_key(Count()), lift=Count.lift,
                           emit=by_key(lambda word, n: [(word, n)]))
    assert counts.emits_by_key
    assert "emit:        by_key(lambda word, n: [(word, n)])" in render_text(topology)


def test_lift_is_required(tmp_path: Path) -> None:
    message = load_error(
        tmp_path, SPOUT + "topology.bolt('b', inputs=[src], state=Count(), lift=None)\n"
    )
    assert "bolt 'b': lift is required" in message


def test_window_state_needs_event_time(tmp_path: Path) -> None:
    message = load_error(
        tmp_path,
        SPOUT + "topology.bolt('b', inputs=[src], key=len, "
        "state=per_key(TumblingWindow(60, Count())), lift=lambda t: 1, late='drop')\n",
    )
    assert "bolt 'b': state per_key(tumbling(60s, Count)) keeps event time" in message
    assert "pass event_time=lambda t: ..." in message


def test_event_time_without_window(tmp_path: Path) -> None:
    message = load_error(
        tmp_path,
        SPOUT + "topology.bolt('b', inputs=[src], state=Count(), lift=len, event_time=len)\n",
    )
    assert "bolt 'b': event_time is only used by window or ttl state" in message


def test_unknown_decoder(tmp_path: Path) -> None:
    message = load_error(tmp_path, "topology.spout('s', topic='t', decoder='yaml')\n")
    assert "spout 's': unknown decoder 'yaml'" in message


def test_sink_target_type(tmp_path: Path) -> None:
    message = load_error(
        tmp_path, SPOUT + "topology.sink('out', inputs=[src], target='word_counts')\n"
    )
    assert "sink 'out': target must be a SinkTarget" in message


@pytest.mark.parametrize(
    ("table", "problem", "fix"),
    [
        (
            'Table("t", columns={"a": "text"}, key=["b"])',
            "key column 'b' is not among the columns (a)",
            "add 'b' to columns",
        ),
        (
            'Table("t", columns={"w": "text", "n": "text"}, key=["w"], mode="merge")',
            "merge mode adds non-key columns together, but 'n' has type 'text'",
            "make every non-key column numeric",
        ),
        ('Table("t", columns={"a": "text"})', "upsert mode needs key columns", 'pass key=["..."]'),
        (
            'Table("t", columns={"a": "text"}, key=["a"], mode="replace")',
            "mode 'replace' is not one of upsert, merge, append",
            'use mode="upsert"',
        ),
        (
            'Table("t", columns={"a": "txet"}, key=["a"])',
            "column 'a' has unsupported type 'txet'",
            "use one of",
        ),
        (
            'Table("t", columns={"a": "text"}, key=["a"], mode="append")',
            "append mode writes every tuple as a new row",
            "drop key=",
        ),
        ('Table("t", columns={})', "columns must be a non-empty dict", "pass columns="),
    ],
)
def test_table_validation(tmp_path: Path, table: str, problem: str, fix: str) -> None:
    message = load_error(tmp_path, SPOUT + f"topology.sink('out', inputs=[src], target={table})\n")
    assert "table 't'" in message
    assert problem in message
    assert fix in message


def test_table_accepts_parametrised_numeric_types() -> None:
    table = Table(
        "prices",
        columns={"item": "varchar(40)", "total": "numeric(12, 2)", "n": "Double Precision"},
        key="item",
        mode="merge",
    )
    assert table.key == ("item",)
    assert table.value_columns == ("total", "n")


def test_error_without_module_and_pickling() -> None:
    with pytest.raises(TopologyError) as caught:
        Topology("demo").spout("s", topic="t", decoder=3)  # type: ignore[arg-type]
    error = caught.value
    assert str(error).startswith("topology 'demo', spout 's': decoder must be")
    assert (error.node, error.topology, error.module) == ("spout 's'", "demo", None)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_input_from_another_topology() -> None:
    other = Topology("other").spout("src", topic="t")
    topology = Topology("mine")
    topology.spout("src", topic="t")
    with pytest.raises(TopologyError, match="belongs to another topology"):
        topology.sink("out", inputs=[other], target=Collect())


# --------------------------------------------------------------------------- loading


def test_load_by_path_and_by_dotted_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "mytops"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "counting.py").write_text(HEADER + SPOUT + GOOD_BOLT)
    by_path = load_topology(str(package / "counting.py"))
    assert by_path.name == "demo"
    assert by_path.source == str(package / "counting.py")
    assert by_path.module_file == str(package / "counting.py")

    monkeypatch.syspath_prepend(str(tmp_path))
    by_name = load_topology("mytops.counting")
    assert by_name.source == "mytops.counting"
    assert by_name.module_file == str(package / "counting.py")
    assert [n.name for n in by_name.nodes] == ["src", "b"]


def test_load_the_examples_by_both_refs(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    monkeypatch.syspath_prepend(str(repo))
    assert load_topology("topologies/wordcount.py").name == "wordcount"
    assert load_topology("topologies.wordcount").name == "wordcount"


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as caught:
        load_topology(str(tmp_path / "nope.py"))
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'nope.py'}: no such file")
    assert "Fix: check the path" in message


def test_load_missing_module() -> None:
    with pytest.raises(TopologyError) as caught:
        load_topology("topologies.nope")
    message = str(caught.value)
    assert message.startswith("topologies.nope: no module named 'topologies.nope'")
    assert "PYTHONPATH" in message


def test_load_module_without_topology(tmp_path: Path) -> None:
    module = tmp_path / "empty.py"
    module.write_text("from hailstorm import Topology\nwc = Topology('wc')\n")
    with pytest.raises(TopologyError) as caught:
        load_topology(str(module))
    assert str(caught.value) == (
        f"{module}: the module defines no `topology`. "
        "Fix: add `topology = wc` at the end of the module."
    )


def test_load_wrong_type(tmp_path: Path) -> None:
    module = tmp_path / "wrong.py"
    module.write_text("topology = {'name': 'wc'}\n")
    with pytest.raises(TopologyError, match=r"`topology` is a dict, not a hailstorm Topology"):
        load_topology(str(module))


def test_load_import_error_keeps_original(tmp_path: Path) -> None:
    module = tmp_path / "broken.py"
    module.write_text("import os\n\nvalue = 1 / 0\n")
    with pytest.raises(TopologyError) as caught:
        load_topology(str(module))
    message = str(caught.value)
    assert message.startswith(
        f"{module}: importing the module failed at line 3: ZeroDivisionError: division by zero"
    )
    assert isinstance(caught.value.__cause__, ZeroDivisionError)


def test_load_missing_dependency_is_an_import_error(tmp_path: Path) -> None:
    module = tmp_path / "needs.py"
    module.write_text("import no_such_dependency_xyz\n")
    with pytest.raises(TopologyError, match="ModuleNotFoundError: No module named 'no_such_dep"):
        load_topology(str(module))


# --------------------------------------------------------------------------- introspection


def build_diamond() -> Topology:
    topology = Topology("diamond", dead_letter="bad-messages")
    clicks = topology.spout("clicks", topic="clicks", decoder="json")
    views = topology.spout("views", topic="views", decoder=Avro({"type": "string"}))
    per_page = topology.bolt(
        "per_page",
        inputs=[clicks, views],
        key=lambda t: t,
        state=per_key(Count()),
        lift=lambda t: 1,
        emit=lambda t, n: [(t, n)],
        parallelism=3,
    )
    total = topology.bolt(
        "total", inputs=["per_page"], state=Sum(), lift=lambda t: 1, emit=lambda t, s: [s]
    )
    topology.sink("everything", inputs=[per_page, total], target=Collect())
    return topology


def test_introspection() -> None:
    topology = build_diamond()
    assert [n.name for n in topology.nodes] == [
        "clicks",
        "views",
        "per_page",
        "total",
        "everything",
    ]
    assert [s.name for s in topology.spouts] == ["clicks", "views"]
    assert [b.name for b in topology.bolts] == ["per_page", "total"]
    assert [s.name for s in topology.sinks] == ["everything"]
    assert topology.source_topics == ["clicks", "views"]
    assert topology.dead_letter_topics == ["bad-messages"]
    assert [n.name for n in topology.inputs_of("per_page")] == ["clicks", "views"]
    assert [n.name for n in topology.downstream_of("per_page")] == ["total", "everything"]
    assert [(e.source, e.target, e.routing) for e in topology.edges] == [
        ("clicks", "per_page", "key"),
        ("views", "per_page", "key"),
        ("per_page", "total", "all"),
        ("per_page", "everything", "all"),
        ("total", "everything", "all"),
    ]
    node = topology.node("per_page")
    assert isinstance(node, BoltSpec) and node.keyed and node.parallelism == 3
    assert isinstance(topology.node("clicks"), SpoutSpec)
    assert isinstance(topology.node("everything"), SinkSpec)
    with pytest.raises(KeyError, match="no node 'nope'"):
        topology.node("nope")


def test_topological_order_with_forward_reference() -> None:
    topology = Topology("forward")
    topology.sink("out", inputs=["b"], target=Collect())
    src = topology.spout("src", topic="t")
    topology.bolt("b", inputs=[src], state=Count(), lift=lambda t: 1, emit=lambda t, n: [n])
    assert [n.name for n in topology.nodes] == ["src", "b", "out"]


def test_render_text_wordcount() -> None:
    repo = Path(__file__).resolve().parents[2]
    topology = load_topology(str(repo / "topologies" / "wordcount.py"))
    text = render_text(topology)
    assert text.splitlines()[0] == f"topology wordcount  ({repo / 'topologies' / 'wordcount.py'})"
    for line in [
        "  source topics: words",
        "  dead letters:  wordcount.dead-letter",
        "spout lines",
        "  topic:        words (one instance per partition)",
        "  decoder:      text",
        "  explode:      words_of",
        "bolt counts",
        "  parallelism:  2",
        "  inputs:       lines (routed by key)",
        "  state:        per_key(Count)",
        "  key:          itself",
        "  lift:         Count.lift",
        "  emit:         lambda word, count: [(word, count)]",
        "  preaggregate: spouts combine contributions per key and batch",
        "sink word_counts",
        "  inputs: counts",
        "  target: table word_counts(word text, count bigint) upsert on (word)",
    ]:
        assert line in text.splitlines(), line


def test_render_text_windows_and_mean() -> None:
    topology = Topology("w")
    src = topology.spout("src", topic="t", decoder="json")
    topology.bolt(
        "avg",
        inputs=[src],
        state=TumblingWindow(60, Mean()),
        lift=lambda t: Mean.lift(t["v"]),
        event_time=lambda t: t["ts"],
        late="drop",
    )
    text = render_text(topology)
    assert "  state:       tumbling(60s, Mean)" in text
    assert '  event time:  lambda t: t["ts"]' in text
    assert "  emit:        -" in text


def parse_dot(text: str) -> Any:
    with warnings.catch_warnings():  # pydot's parser uses deprecated pyparsing names
        warnings.simplefilter("ignore", DeprecationWarning)
        graphs = pydot.graph_from_dot_data(text)
    assert graphs is not None and len(graphs) == 1, text
    return graphs[0]


def test_render_dot_parses_with_pydot() -> None:
    topology = build_diamond()
    graph = parse_dot(render_dot(topology))
    nodes = {
        n.get_name().strip('"'): n
        for n in graph.get_nodes()
        if n.get_name() not in ("node", "edge")
    }
    assert set(nodes) == {"clicks", "views", "per_page", "total", "everything"}
    assert nodes["clicks"].get_shape() == "cds"
    assert nodes["per_page"].get_shape() == "box"
    assert nodes["everything"].get_shape() == "cylinder"
    assert "x3" in nodes["per_page"].get_label()
    edges = {
        (e.get_source().strip('"'), e.get_destination().strip('"'), e.get_label().strip('"'))
        for e in graph.get_edges()
    }
    assert edges == {
        ("clicks", "per_page", "key"),
        ("views", "per_page", "key"),
        ("per_page", "total", "all"),
        ("per_page", "everything", "all"),
        ("total", "everything", "all"),
    }


def test_render_dot_escapes_quotes() -> None:
    topology = Topology("q")
    src = topology.spout("src", topic="t")
    topology.sink(
        "out",
        inputs=[src],
        target=Table("t", columns={"a": "text"}, mode="append", url='sqlite:///x"y.db'),
    )
    graph = parse_dot(render_dot(topology))
    assert len(graph.get_edges()) == 1
