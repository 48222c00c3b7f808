"""Sinks that follow a changed table, on the real stack (issue 41): a word count's table gains
a derived column. ``hailstorm plan`` refuses it without ``--rebuild`` (the sink's progress
would leave the new table without every word not counted since) and with it says the table
is rebuilt from the committed state; ``hailstorm run --rebuild`` replaces the table with one
holding every word of the committed round (re-sharded at the same time), and the words
produced afterwards follow. The table ends equal to counts made by hand for every word, not
only those touched after the deploy. And the rebuild's one transaction, on PostgreSQL and
SQLite: a table of the old definition is replaced, or left as it was when it must not
commit."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from pathlib import Path

import pytest
from databases import query
from deployments import hailstorm_plan

from hailstorm import kafka
from hailstorm.dev.harness import Produced, StackAddresses, TopologyRun, produce
from hailstorm.export.sink_rebuild import write_rebuilt
from hailstorm.sinks import SinkConfigError, SinkWriter
from hailstorm.topology import Table

pytestmark = pytest.mark.integration

WORDS = [f"w{'x' * (i % 7)}{i}" for i in range(300)]
"""Words of lengths 2 to 10."""

COUNTS = '''
from hailstorm import Count, Table, Topology, itself, per_key

topology = Topology("following")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
counts = topology.bolt("counts", inputs=[lines], key=itself, state=per_key(Count()),
                       lift=Count.lift, emit=lambda w, n: [(w, n)], parallelism={parallelism})
'''
TABLE = COUNTS + '''
topology.sink("word_counts", inputs=[counts], target=Table(
    "following_counts", columns={{"word": "text", "count": "bigint"}}, key=["word"]))
'''
WITH_LENGTH = COUNTS + '''
topology.sink("word_counts", inputs=[counts], target=Table(
    "following_counts", columns={{"word": "text", "count": "bigint", "length": "bigint"}},
    key=["word"], row=lambda t: {{"word": t[0], "count": t[1], "length": len(t[0])}}))
'''


def test_a_table_gaining_a_column_is_rebuilt_with_every_key(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    stack = StackAddresses.from_env(stack_env)
    topic = f"following-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(stack.kafka, topic, 2)
    partitions = kafka.partitions_of(stack.kafka, topic)
    rng = random.Random(41)
    produced = Produced(topic)
    everything = [" ".join(rng.choices(WORDS, k=4)) for _ in range(2000)]
    few = [" ".join(rng.choices(WORDS[:10], k=4)) for _ in range(500)]  # after the deploy
    old = tmp_path / "following_v1.py"
    old.write_text(TABLE.format(topic=topic, parallelism=2))
    new = tmp_path / "following_v2.py"
    new.write_text(WITH_LENGTH.format(topic=topic, parallelism=3))

    with TopologyRun(stack, old, log_dir=tmp_path / "v1", negotiators=1) as run:
        name, database = run.name, run.database
        produce(stack.kafka, produced, [line.encode() for line in everything], partitions)
        run.start()
        run.wait_committed(produced.clock(), 240)
    assert len(query(database, "SELECT word FROM following_counts")) == len(WORDS)

    code, output = hailstorm_plan(stack, new, name)
    assert code == 1, output
    assert ("sink word_counts: refuse: table following_counts changed (column length "
            "(bigint) added): its progress would leave the new table without every row not "
            "written since. Fix: pass --rebuild word_counts") in output
    code, output = hailstorm_plan(stack, new, name, "--rebuild", "word_counts")
    assert code == 0, output
    print(output)
    assert "bolt counts: reshard: per_key(Count) state carried, re-sharded from 2 to 3" in output
    assert ("sink word_counts: rebuild: table following_counts changed (column length "
            "(bigint) added): rebuilt from the committed state of counts: table "
            "following_counts replaces table following_counts, with every key's row from the "
            "committed round, and the sink's progress is set to the committed clock, in one "
            "transaction") in output

    with TopologyRun(stack, new, name=name, database=database, log_dir=tmp_path / "v2",
                     negotiators=1) as run:
        run.driver_options = ["--rebuild", "word_counts"]
        run.start()
        produce(stack.kafka, produced, [line.encode() for line in few], partitions)
        run.wait_committed(produced.clock(), 240)
        rebuilt = [line for line in run.log("driver").splitlines()
                   if "rebuilt table following_counts" in line]
        print(rebuilt)
        assert len(rebuilt) == 1, run.log("driver")[-3000:]

    counted = Counter(word for line in everything + few for word in line.split())
    table = {w: (c, n) for w, c, n in query(database, "SELECT word, count, length FROM "
                                                      "following_counts")}
    assert table == {w: (c, len(w)) for w, c in counted.items()}
    assert len(table) == len(WORDS)  # 290 words not touched since the deploy among them


LENGTH_TABLE = Table("rebuilt_counts", {"word": "text", "count": "bigint", "length": "bigint"},
                     key=["word"])


def test_the_rebuild_replaces_an_old_table_in_one_transaction(db_url: str) -> None:
    old = Table("rebuilt_counts", {"word": "text", "count": "bigint"}, key=["word"])
    sink_id = f"t_{uuid.uuid4().hex[:6]}/sink:word_counts:0"
    source = ("words", 0)
    with SinkWriter.open(db_url, old, sink_id, 3) as writer:
        writer.add([((source, 0), ("a", 1)), ((source, 1), ("b", 1))])
        writer.commit_through({source: 1})
    rows = [("a", 5, 1), ("b", 2, 1), ("cc", 7, 2)]

    def refuse() -> None:
        raise SinkConfigError("a round committed meanwhile")

    with pytest.raises(SinkConfigError):
        write_rebuilt(db_url, LENGTH_TABLE, sink_id, rows, {source: 9}, replace=True,
                      check=refuse)
    assert sorted(query(db_url, "SELECT * FROM rebuilt_counts")) == [("a", 1), ("b", 1)]
    write_rebuilt(db_url, LENGTH_TABLE, sink_id, rows, {source: 9}, replace=True)
    assert sorted(query(db_url, "SELECT word, count, length FROM rebuilt_counts")) == rows
    progress = query(db_url, "SELECT topic, partition, \"offset\", epoch FROM "
                             f"hailstorm_progress WHERE sink = '{sink_id}'")
    assert sorted(progress) == [("", -1, -1, 3), ("words", 0, 9, 3)]
    with SinkWriter.open(db_url, LENGTH_TABLE, sink_id, 4) as writer:  # the sink goes on
        assert writer.view == {source: 9}
