"""``hailstorm export``: a bolt's snapshot round into a table, in one transaction.

Snapshots of wordcount's ``counts`` bolt (per_key(Count), 2 instances) are written with
DirectorySnapshotStore; the export runs on a real local Spark (one context per module)
into the real PostgreSQL and SQLite. No ZooKeeper needed, except to show that a committed
round wins over the latest one.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from databases import query
from kazoo.client import KazooClient

from hailstorm import Count, Mean, Record, Sum, load_topology, per_key
from hailstorm.cli import main
from hailstorm.export import ExportError, ExportListener, export_bolt
from hailstorm.protocol.layout import CommittedRecord, TopologyPaths
from hailstorm.routing import route
from hailstorm.runtime.spark_stage import SparkOptions, build_context
from hailstorm.sinks import SchemaMismatchError
from hailstorm.snapshots import DirectorySnapshotStore
from hailstorm.topology import BoltSpec, Topology

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = str(ROOT / "topologies" / "wordcount.py")

ROUND_3 = {f"w{i:05d}": i % 17 + 1 for i in range(3000)}
ROUND_5 = {f"w{i:05d}": 2 * i + 1 for i in range(1000, 21000)}
"""Round 5 drops 1000 keys of round 3, changes the others and adds new ones."""


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    options = SparkOptions(
        master="local[2]",
        app_name="hailstorm-export-test",
        jvm_options="",  # as `hailstorm export` runs it
        extra_conf=(("spark.ui.showConsoleProgress", "false"),),
    )
    context = build_context(options, 2)
    yield context
    context.stop()


@pytest.fixture(scope="module")
def topology() -> Topology:
    return load_topology(WORDCOUNT)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, topology: Topology) -> DirectorySnapshotStore:
    """Rounds 3 and 5 of wordcount/counts, 2 instances each, keys routed as at run time;
    round 7 is incomplete (instance 1 missing) and must never be picked."""
    store = DirectorySnapshotStore(tmp_path_factory.mktemp("snapshots"))
    bolt = topology.node("counts")
    assert isinstance(bolt, BoltSpec)
    for epoch, counts in ((3, ROUND_3), (5, ROUND_5), (7, {"late": 1})):
        for instance in range(2) if epoch != 7 else range(1):
            store.put(
                topology="wordcount", bolt="counts", instance=instance, parallelism=2,
                epoch=epoch, clock={("words", 0): 10 * epoch, ("words", 1): epoch},
                monoid=bolt.state,
                state={k: v for k, v in counts.items() if route(k, 2) == instance},
            )  # fmt: skip
    return store




def content(url: str, table: str) -> dict[str, int]:
    return dict(query(url, f'SELECT "key", "value" FROM "{table}"'))


def stats(url: str, table: str) -> tuple[int, int]:
    [(count, total)] = query(url, f'SELECT count(*), coalesce(sum("value"), 0) FROM "{table}"')
    return int(count), int(total)


def export_record(url: str, table: str) -> tuple[Any, ...]:
    [row] = query(
        url,
        'SELECT "topology", "bolt", "epoch", "clock", "exported_at" FROM "hailstorm_exports" '
        f"WHERE \"table_name\" = '{table}'",
    )
    return row


class Recorder(ExportListener):
    def __init__(self) -> None:
        self.phases: list[str] = []
        self.progress: list[tuple[int, int | None]] = []

    def phase(self, text: str) -> None:
        self.phases.append(text)

    def rows(self, done: int, total: int | None) -> None:
        self.progress.append((done, total))


def test_export_is_exact_idempotent_and_replaced_atomically(
    db_url: str, spark: Any, topology: Topology, store: DirectorySnapshotStore
) -> None:
    table = unique("counts")

    def run(epoch: int | None, **kw: Any) -> Any:
        return export_bolt(
            topology=topology, bolt="counts", url=db_url, table=table, store=store,
            session=spark, epoch=epoch, chunk_rows=2000, **kw,
        )  # fmt: skip

    recorder = Recorder()
    first = run(3, listener=recorder)
    assert (first.status, first.epoch, first.rows, first.source) == ("exported", 3, 3000, "--epoch")
    assert content(db_url, table) == ROUND_3
    assert recorder.progress[-1] == (3000, 3000)
    topology_name, bolt, epoch, clock, exported_at = export_record(db_url, table)
    assert (topology_name, bolt, epoch) == ("wordcount", "counts", 3)
    clock = clock if isinstance(clock, dict) else json.loads(clock)
    assert clock == {"words:0": 30, "words:1": 3}

    again = run(3)
    assert again.status == "already exported" and again.rows == 0
    assert content(db_url, table) == ROUND_3
    assert export_record(db_url, table)[4] == exported_at  # nothing was written

    old, new = stats(db_url, table), (len(ROUND_5), sum(ROUND_5.values()))
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def poll() -> None:  # another client, reading all along
        while not stop.is_set():
            seen.append(stats(db_url, table))

    inside: list[tuple[int, int]] = []
    poller = threading.Thread(target=poll)
    poller.start()
    try:
        latest = run(None, before_commit=lambda: inside.append(stats(db_url, table)))
    finally:
        stop.set()
        poller.join()
    assert (latest.status, latest.epoch, latest.previous_epoch) == ("exported", 5, 3)
    assert latest.source == "latest complete round"  # round 7 is incomplete
    assert inside == [old]  # written but not committed: invisible to other clients
    assert content(db_url, table) == ROUND_5  # replaced fully: round 3's extra keys are gone
    assert seen and set(seen) <= {old, new}, set(seen) - {old, new}
    assert export_record(db_url, table)[2] == 5

    with pytest.raises(ExportError, match="newer than round 3"):
        run(3)
    assert run(3, force=True).status == "exported"
    assert content(db_url, table) == ROUND_3


def test_export_refuses_a_table_of_another_shape(
    db_url: str, spark: Any, topology: Topology, store: DirectorySnapshotStore
) -> None:
    table = unique("taken")
    query(db_url, f'CREATE TABLE "{table}" ("key" text PRIMARY KEY, "value" text)')
    with pytest.raises(SchemaMismatchError, match="value"):
        export_bolt(
            topology=topology, bolt="counts", url=db_url, table=table, store=store,
            session=spark, epoch=3,
        )  # fmt: skip
    with pytest.raises(ExportError, match="no complete round 4"):
        export_bolt(
            topology=topology, bolt="counts", url=db_url, table=unique("t"), store=store,
            session=spark, epoch=4,
        )  # fmt: skip


def counting_topology(name: str) -> Topology:
    """A topology built in the test (no module: the export ships the monoid to Spark)."""
    topology = Topology(name)
    lines = topology.spout("lines", topic="words", decoder="text", explode=str.split)
    topology.bolt(
        "counts", inputs=[lines], key=lambda w: w, state=per_key(Count()),
        lift=lambda w: 1, parallelism=2,
    )  # fmt: skip
    return topology


def test_the_committed_round_in_zookeeper_wins(
    spark: Any, store: DirectorySnapshotStore, tmp_path: Path, zookeeper: Any
) -> None:
    topology = counting_topology(unique("committed"))
    bolt = topology.node("counts")
    assert isinstance(bolt, BoltSpec)
    refs = {}
    for epoch, counts in ((3, ROUND_3), (5, ROUND_5)):
        for instance in range(2):
            ref = store.put(
                topology=topology.name, bolt="counts", instance=instance, parallelism=2,
                epoch=epoch, clock={("words", 0): epoch}, monoid=bolt.state,
                state={k: v for k, v in counts.items() if route(k, 2) == instance},
            )  # fmt: skip
            if epoch == 3:
                refs[f"bolt:counts:{instance}"] = ref.uri
    record = CommittedRecord(3, {("words", 0): 3}, refs, 1.0)
    paths = TopologyPaths(topology.name)
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=15)
    try:
        client.ensure_path(paths.root)
        client.create(paths.committed, record.to_json())
        url = f"sqlite:///{tmp_path / 'zk.db'}"
        result = export_bolt(
            topology=topology, bolt="counts", url=url, table="counts", store=store,
            session=spark, zk=zookeeper.hosts,
        )  # fmt: skip
        assert (result.epoch, result.source) == (3, "committed in ZooKeeper")
        assert content(url, "counts") == ROUND_3
    finally:
        client.delete(paths.root, recursive=True)
        client.stop()
        client.close()


def test_records_tuple_keys_and_whole_states(
    db_url: str, spark: Any, store: DirectorySnapshotStore
) -> None:
    topology = Topology(unique("shapes"))
    views = topology.spout("views", topic="views", decoder="json")
    keyed = per_key(Record({"views": Count(), "latency": Mean()}), key_type=("string", "long"))
    topology.bolt(
        "pages",
        inputs=[views],
        key=lambda v: (v["page"], v["day"]),
        state=keyed,
        lift=lambda v: {"views": 1, "latency": (v["ms"], 1)},
        parallelism=2,
    )
    topology.bolt("total", inputs=[views], state=Sum(), lift=lambda v: v["ms"])
    pages = {("home", 1): {"views": 3, "latency": (30.0, 3)}, ("faq", 2): {"views": 1,
             "latency": (5.0, 1)}}  # fmt: skip
    for instance in range(2):
        store.put(
            topology=topology.name, bolt="pages", instance=instance, parallelism=2, epoch=1,
            clock={}, monoid=keyed,
            state={k: v for k, v in pages.items() if route(k, 2) == instance},
        )  # fmt: skip
    store.put(topology=topology.name, bolt="total", instance=0, parallelism=1, epoch=1,
              clock={}, monoid=Sum(), state=35)  # fmt: skip
    for bolt in ("pages", "total"):
        export_bolt(
            topology=topology, bolt=bolt, url=db_url, table=f"{topology.name}_{bolt}",
            store=store, session=spark,
        )  # fmt: skip
    rows = query(
        db_url,
        f'SELECT key_0, key_1, views, latency FROM "{topology.name}_pages" ORDER BY key_0',
    )
    assert rows == [("faq", 2, 1, "[5.0,1]"), ("home", 1, 3, "[30.0,3]")]
    assert query(db_url, f'SELECT * FROM "{topology.name}_total"') == [(35,)]


def test_the_commands(spark: Any, store: DirectorySnapshotStore, tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"HAILSTORM_ZK": None, "HAILSTORM_SNAPSHOTS": str(store.root)}
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    args = ["export", WORDCOUNT, "counts", "--to", url, "--table", "word_totals", "--epoch", "3"]
    result = runner.invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    assert "exported 3000 rows of wordcount/counts round 3" in result.output
    assert content(url, "word_totals") == ROUND_3
    result = runner.invoke(main, args, env=env)
    assert result.exit_code == 0 and "already exported" in result.output

    listing = runner.invoke(main, ["snapshots", "wordcount"], env=env)
    assert listing.exit_code == 0, listing.output
    assert listing.output.count("counts") == 5

    shown = runner.invoke(
        main, ["snapshots", WORDCOUNT, "--show", "counts", "--epoch", "3"], env=env
    )
    assert shown.exit_code == 0, shown.output
    rows = [json.loads(line) for line in shown.output.splitlines()]
    assert {r["key"]: r["value"] for r in rows} == ROUND_3
    latest = runner.invoke(main, ["snapshots", "wordcount", "--show", "counts"], env=env)
    assert [json.loads(line) for line in latest.output.splitlines()] == [
        {"key": "late", "value": 1}
    ]  # the latest round, raw records (no module given)

    missing = runner.invoke(main, ["export", WORDCOUNT, "nope", "--to", url], env=env)
    assert missing.exit_code == 1 and "no node 'nope'" in missing.output
