"""Reading a bolt's committed state by key (``hailstorm query``). The snapshot store is a
directory here; ZooKeeper is not configured, so the latest complete round is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.auth import SECRET_FILE_VAR, RunSecret
from hailstorm.cli import main
from hailstorm.export.job import _read_instance_task
from hailstorm.query import (
    LiveAnswer,
    LiveResult,
    QueryError,
    QueryResult,
    parse_key,
    query_committed,
    query_live,
)
from hailstorm.routing import route
from hailstorm.snapshots import DirectorySnapshotStore
from hailstorm.topology import BoltSpec, load_topology

REPO = Path(__file__).resolve().parents[2]
CLOCK = {("words", 0): 9, ("words", 1): 4}


def _counts() -> BoltSpec:
    spec = load_topology(str(REPO / "topologies" / "wordcount.py")).node("counts")
    assert isinstance(spec, BoltSpec)
    return spec


def _save_round(store: DirectorySnapshotStore, counts: dict[str, int], epoch: int) -> None:
    bolt = _counts()
    parts: list[dict[str, int]] = [{}, {}]
    for word, n in counts.items():
        parts[route(word, 2)][word] = n
    for instance, part in enumerate(parts):
        store.put(topology="wordcount", bolt="counts", instance=instance, parallelism=2,
                  epoch=epoch, clock=CLOCK, monoid=bolt.state, state=part)


def test_keys_are_read_from_the_instance_that_owns_them(tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path)
    _save_round(store, {"storm": 3, "hail": 1}, epoch=2)
    _save_round(store, {"storm": 5, "hail": 2, "kafka": 7}, epoch=4)
    result = query_committed(store, "wordcount", _counts(), ["storm", "kafka", "nope"])
    assert (result.epoch, result.clock, result.source) == (4, CLOCK, "latest complete round")
    assert result.values == {"storm": 5, "kafka": 7} and result.missing == ["nope"]
    assert query_committed(store, "wordcount", _counts(), epoch=2).values == {
        "storm": 3, "hail": 1}
    lines = [json.loads(line) for line in result.to_json_lines()]
    assert [line["key"] for line in lines] == ["storm", "kafka", "nope"]  # as asked
    assert lines[-1] == {"key": "nope", "value": None, "found": False, "epoch": 4,
                         "clock": {"words:0": 9, "words:1": 4}}


@given(st.lists(st.sampled_from(["storm", "hail", "kafka", "nope", "gone", "user001"]),
                min_size=1, max_size=6, unique=True))
def test_keys_are_answered_in_the_order_asked(asked: list[str]) -> None:
    # Found or missing, on whichever instance: the lines follow the keys as typed.
    held = {"storm": 5, "hail": 2, "kafka": 7, "user001": 1}
    by_instance: list[LiveAnswer] = []
    for instance in (1, 0):
        mine = [k for k in asked if route(k, 2) == instance]
        by_instance.append(LiveAnswer(f"bolt:counts:{instance}", 3, None, {},
                                      {k: held[k] for k in mine if k in held},
                                      [k for k in mine if k not in held]))
    live = LiveResult("wordcount", "counts", by_instance, asked=tuple(asked))
    committed = QueryResult("wordcount", "counts", 4, CLOCK, "latest complete round",
                            {k: held[k] for k in reversed(asked) if k in held},
                            [k for k in asked if k not in held], asked=tuple(asked))
    for result in (live, committed):
        assert [json.loads(line)["key"] for line in result.to_json_lines()] == asked


def test_the_command_prints_json_lines_and_fails_on_a_missing_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HAILSTORM_ZK", raising=False)
    store = DirectorySnapshotStore(tmp_path)
    _save_round(store, {"storm": 5, "hail": 2}, epoch=3)
    topology = str(REPO / "topologies" / "wordcount.py")
    found = CliRunner().invoke(main, ["query", topology, "counts", "storm", "--snapshots",
                                      str(tmp_path)])
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)["value"] == 5
    everything = CliRunner().invoke(main, ["query", topology, "counts", "--snapshots",
                                           str(tmp_path)])
    assert sorted(json.loads(line)["key"] for line in everything.output.splitlines()) == [
        "hail", "storm"]
    missing = CliRunner().invoke(main, ["query", topology, "counts", "nope", "--snapshots",
                                        str(tmp_path)])
    assert missing.exit_code == 1 and '"found":false' in missing.output
    not_a_bolt = CliRunner().invoke(main, ["query", topology, "lines", "--snapshots",
                                           str(tmp_path)])
    assert not_a_bolt.exit_code != 0 and "not a bolt" in not_a_bolt.output


def test_keys_typed_on_the_command_line() -> None:
    words = _counts()
    assert parse_key("storm", words) == "storm"
    assert parse_key("42", words) == "42"  # the state's keys are strings
    trending = load_topology(str(REPO / "topologies" / "trending.py")).node("tag_counts")
    assert isinstance(trending, BoltSpec)
    assert parse_key('[60, "python"]', trending) == (60, "python")


def test_a_live_answer_is_exact_when_its_watermark_covers_what_it_absorbed() -> None:
    answer = LiveAnswer("bolt:counts:0", 3, {("words", 0): 9, ("words", 1): 4},
                        {("words", 0): 9, ("words", 1): 2}, {"storm": 3}, ["nope"])
    assert answer.exact
    assert not LiveAnswer("p", 3, None, {}, {}).exact  # an upstream is silent
    assert not LiveAnswer("p", 3, {("words", 0): 8}, {("words", 0): 9}).exact
    rows = [json.loads(line) for line in LiveResult("wordcount", "counts",
                                                    [answer]).to_json_lines()]
    assert rows == [
        {"key": "storm", "value": 3, "found": True, "processor": "bolt:counts:0", "epoch": 3,
         "clock": {"words:0": 9, "words:1": 4}, "absorbed": {"words:0": 9, "words:1": 2},
         "exact": True},
        {"key": "nope", "value": None, "found": False, "processor": "bolt:counts:0",
         "epoch": 3, "clock": {"words:0": 9, "words:1": 4},
         "absorbed": {"words:0": 9, "words:1": 2}, "exact": True},
    ]


def test_live_queries_need_zookeeper_and_the_run_secret(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    topology = str(REPO / "topologies" / "wordcount.py")
    monkeypatch.delenv("HAILSTORM_ZK", raising=False)
    monkeypatch.delenv(SECRET_FILE_VAR, raising=False)
    no_zk = CliRunner().invoke(main, ["query", topology, "counts", "storm", "--live"])
    assert no_zk.exit_code == 1 and "through ZooKeeper" in no_zk.output
    no_secret = CliRunner().invoke(main, ["query", topology, "counts", "storm", "--live",
                                          "--zk", "127.0.0.1:1"])
    assert no_secret.exit_code == 1 and f"${SECRET_FILE_VAR}" in no_secret.output
    epoch = CliRunner().invoke(main, ["query", topology, "counts", "--live", "--epoch", "2"])
    assert epoch.exit_code == 1 and "no --epoch" in epoch.output
    with pytest.raises(QueryError, match="name the keys"):
        query_live("127.0.0.1:1", "wordcount", _counts(), None, RunSecret.generate())


def test_a_ttl_key_dropped_since_the_base_snapshot_is_missing(tmp_path: Path) -> None:
    """A delta records a key the bolt dropped with no session; a query reads it as gone."""
    visits = load_topology(str(REPO / "topologies" / "visits.py")).node("visits")
    assert isinstance(visits, BoltSpec) and visits.parallelism == 2
    store = DirectorySnapshotStore(tmp_path)
    visit = {"views": 1, "first_ts": 5, "last_ts": 5}
    users = {"u1": (5, 5, visit), "u2": (5, 5, visit)}
    clock = {("user-views", 0): 3}
    for instance in (0, 1):
        mine = {u: s for u, s in users.items() if route(u, 2) == instance}
        base = store.put(topology="visits", bolt="visits", instance=instance, parallelism=2,
                         epoch=1, clock=clock, monoid=visits.state, state=mine)
        store.put(topology="visits", bolt="visits", instance=instance, parallelism=2,
                  epoch=2, clock=clock, monoid=visits.state, base=base,
                  state={u: () for u in mine if u == "u1"})
    result = query_committed(store, "visits", visits, ["u1", "u2"])
    assert result.epoch == 2 and result.values == {"u2": users["u2"]}
    assert result.missing == ["u1"]
    assert query_committed(store, "visits", visits).values == {"u2": users["u2"]}
    read = _read_instance_task(str(tmp_path), str(REPO / "topologies" / "visits.py"),
                               "visits", None, routes_late=True)  # what export reads
    latest = [r.key for r in store.list("visits") if r.epoch == 2]
    assert [row[0] for row in read(iter(latest))] == ["u2"]  # (key, value) rows
    shown = CliRunner().invoke(main, ["snapshots", str(REPO / "topologies" / "visits.py"),
                                      "--show", "visits", "--snapshots", str(tmp_path)],
                               env={"HAILSTORM_ZK": ""})
    assert shown.exit_code == 0, shown.output
    assert [json.loads(line)["key"] for line in shown.output.splitlines()] == ["u2"]
