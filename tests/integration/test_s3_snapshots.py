"""Snapshots on object storage: the store through s3fs against a real S3-API server.

S3Proxy (fetched from Maven Central by :mod:`hailstorm.dev.s3proxy`) serves the S3 API on
127.0.0.1; hailstorm reaches it through s3fs/botocore exactly as it would reach Amazon S3.
The store must keep its promises there (write-once round files verified after upload,
checksums, garbage collection), an upload cut short by a kill must leave nothing visible,
and the word count must recover exactly from snapshots kept only in S3.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hailstorm import kafka
from hailstorm.dev.harness import (
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    produce,
    wordcount_lines,
)
from hailstorm.dev.s3proxy import S3Server
from hailstorm.model import run_model
from hailstorm.monoids import Count, per_key
from hailstorm.snapshots import (
    FsspecSnapshotStore,
    SnapshotCorruptError,
    SnapshotExistsError,
    open_store,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BUCKET = "hailstorm"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3proxy")) as server:
        server.make_bucket(BUCKET)
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The AWS_* variables in this process (and the processes it starts)."""
    env = s3.client_env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _store() -> FsspecSnapshotStore:
    store = open_store(f"s3://{BUCKET}/t-{uuid.uuid4().hex[:8]}")
    assert isinstance(store, FsspecSnapshotStore)
    return store


def test_the_store_keeps_its_promises_on_s3(s3_env: dict[str, str]) -> None:
    store = _store()
    monoid = per_key(Count())

    def put(state: dict[str, int], epoch: int, instance: int = 0) -> object:
        return store.put(topology="wordcount", bolt="counts", instance=instance, parallelism=2,
                         epoch=epoch, clock={("words", 0): epoch}, monoid=monoid, state=state)

    for epoch in (1, 2, 3):
        put({"a": epoch, "c": 1}, epoch, 0)
        put({"b": epoch}, epoch, 1)
    assert put({"c": 1, "a": 3}, 3, 0) == store.latest_round("wordcount", "counts")[0]
    with pytest.raises(SnapshotExistsError, match="never overwritten"):
        put({"a": 4}, 3, 0)
    round3 = store.latest_round("wordcount", "counts")
    assert [r.uri for r in round3] == [
        f"s3://{BUCKET}/{store.base.split('/', 1)[1]}/wordcount/counts/{i}/epoch-000000000003.avro"
        for i in (0, 1)]
    assert store.load_for_instance(round3, monoid, 0, 1) == (
        {("words", 0): 3}, {"a": 3, "b": 3, "c": 1})
    assert sorted(store.forget_rounds("wordcount", 3, {3, 2})) == [
        "wordcount/counts/0/epoch-000000000001.avro", "wordcount/counts/1/epoch-000000000001.avro"]
    assert [r.epoch for r in store.list("wordcount")] == [2, 3, 2, 3]

    # hailstorm snapshots reads the listing from S3 too.
    listing = subprocess.run(
        [sys.executable, "-m", "hailstorm", "snapshots", "wordcount", "--snapshots", store.url],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert "counts" in listing.stdout and store.url in listing.stdout

    # A flipped byte in the object is found before anything is decoded.
    path = f"{store.base}/{round3[1].key}"
    data = bytearray(store.fs.cat_file(path))
    data[len(data) // 2] ^= 0x01
    store.fs.pipe_file(path, bytes(data))
    with pytest.raises(SnapshotCorruptError):
        store.load(round3[1].key, monoid)


def test_an_upload_cut_short_by_a_kill_leaves_nothing(s3_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    store = _store()
    script = (
        "import hashlib\n"
        "from hailstorm.monoids import Count, per_key\n"
        "from hailstorm.snapshots import open_store\n"
        f"store = open_store({store.url!r})\n"
        "state = {hashlib.sha256(str(i).encode()).hexdigest(): i for i in range(300_000)}\n"
        "store.put(topology='wordcount', bolt='counts', instance=0, parallelism=1, epoch=7,\n"
        "          clock={('words', 0): 7}, monoid=per_key(Count()), state=state)\n")
    env = dict(os.environ, HAILSTORM_FAILPOINTS="snapshots.upload",
               HAILSTORM_FAILPOINTS_DIR=str(tmp_path / "failpoints"))
    died = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    # SIGKILLed by the failpoint after the first 5 MiB part went up (a multipart upload)
    assert died.returncode == -9, died.stderr
    assert (tmp_path / "failpoints" / "snapshots.upload").exists()
    assert store.list("wordcount") == []
    assert not store.fs.exists(f"{store.base}/wordcount/counts/0/epoch-000000000007.avro")
    ref = store.put(topology="wordcount", bolt="counts", instance=0, parallelism=1, epoch=7,
                    clock={("words", 0): 7}, monoid=per_key(Count()), state={"a": 1})
    assert store.load(ref, per_key(Count())) == ({("words", 0): 7}, {"a": 1})


def test_word_count_recovers_exactly_from_snapshots_in_s3(
    s3_env: dict[str, str], stack_env: dict[str, str], tmp_path: Path,
) -> None:
    local = StackAddresses.from_env(stack_env)
    snapshots = f"s3://{BUCKET}/run-{uuid.uuid4().hex[:8]}"
    stack = StackAddresses(local.zk, local.kafka, snapshots, local.database)
    topic = "words"
    kafka.recreate_topic(stack.kafka, topic, 4)
    partitions = kafka.partitions_of(stack.kafka, topic)
    produced = Produced(topic)
    lines = wordcount_lines(12000, seed=31)
    with TopologyRun(stack, REPO / "topologies" / "wordcount.py",
                     log_dir=tmp_path / "logs") as run:
        assert run.env["HAILSTORM_SNAPSHOTS"] == snapshots
        run.start()
        run.wait_flowing(300)
        produce(stack.kafka, produced, lines[:6000], partitions)
        run.wait_committed({(topic, p): o for p, o in produced.last_offsets().items()}, 300)
        killed = run.kill_processor(role="bolt", rng=random.Random(2))
        produce(stack.kafka, produced, lines[6000:], partitions)
        run.require_recovery(killed, 240)
        committed = run.wait_committed(
            {(topic, p): o for p, o in produced.last_offsets().items()}, 300)
        bolts = {p: ref for p, ref in committed.snapshots.items() if p.startswith("bolt:")}
        assert len(bolts) == 2 and all(ref.startswith(f"{snapshots}/") for ref in
                                       bolts.values()), json.dumps(committed.snapshots)
        states = run.committed_bolt_states(committed)
        tables = run.sink_tables()
        run.check_recoveries()
    model = run_model(run.topology, produced.model_messages())
    comparison = compare_with_model(model, states, tables)
    assert comparison.ok, comparison.first()

    # hailstorm query reads the committed round from S3 (the topology is stopped now).
    expected = model.bolt_state("counts")
    words = sorted(expected, key=lambda w: -expected[w])[:3]
    query = subprocess.run(
        [sys.executable, "-m", "hailstorm", "query", str(REPO / "topologies" / "wordcount.py"),
         "counts", *words, "--name", run.name, "--snapshots", snapshots, "--zk", stack.zk],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert query.returncode == 0, query.stderr
    answers = [json.loads(line) for line in query.stdout.splitlines()]
    assert {a["key"]: a["value"] for a in answers} == {w: expected[w] for w in words}
    assert len({a["epoch"] for a in answers}) == 1  # one round (rounds went on after the
    assert answers[0]["epoch"] >= committed.epoch  # wait above, with no new data)
