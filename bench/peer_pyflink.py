"""One benchmark job on PyFlink's Table API, run by the Python of its venv (:mod:`peer_envs`).

    <pyflink venv>/bin/python bench/peer_pyflink.py JOB REQUEST_JSON OUT_JSON

The Kafka SQL connector (from Maven Central) reads the whole topic from its earliest
offsets and ends at the latest offsets there were when the job started
(``scan.bounded.mode``, with partition discovery off: a bounded source that keeps
discovering partitions never ends); the job runs in streaming mode with exactly-once
checkpoints every second (the hashmap state backend, checkpoints on the local disk),
parallelism 2, in Flink's local mini-cluster. Word splitting is SQL (``REGEXP_EXTRACT_ALL`` over the
lowercased line with the topology's pattern in Java's Unicode mode, unnested), the JSON is
decoded by the connector's ``json`` format: no Python function runs per record, Flink's
fastest way for these jobs. The running result per key is read from the job's changelog
(``collect``); the time runs from submitting the job to the changelog's end (the JVM's
start excluded). See :mod:`peer_runs` for the request and the answer.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from pyflink.common import Configuration, RowKind
from pyflink.table import EnvironmentSettings, TableEnvironment


def _environment(request: dict[str, Any]) -> TableEnvironment:
    config = Configuration()
    config.set_string("pipeline.jars", Path(request["connector_jar"]).as_uri())
    config.set_string("parallelism.default", str(request["threads"]))
    config.set_string("execution.checkpointing.interval", "1s")
    config.set_string("execution.checkpointing.mode", "EXACTLY_ONCE")
    config.set_string("state.backend.type", "hashmap")
    config.set_string("execution.checkpointing.dir",
                      Path(request["work_dir"], "checkpoints").as_uri())
    settings = EnvironmentSettings.new_instance().in_streaming_mode() \
        .with_configuration(config).build()
    return TableEnvironment.create(settings)


def _source(name: str, columns: str, value_format: str, request: dict[str, Any]) -> str:
    return f"""
        CREATE TABLE {name} ({columns}) WITH (
            'connector' = 'kafka',
            'topic' = '{request["topic"]}',
            'properties.bootstrap.servers' = '{request["bootstrap"]}',
            'properties.group.id' = 'hailstorm-bench-pyflink',
            'scan.startup.mode' = 'earliest-offset',
            'scan.bounded.mode' = 'latest-offset',
            'scan.topic-partition-discovery.interval' = '0',
            'format' = '{value_format}'
        )"""


def word_count(env: TableEnvironment, request: dict[str, Any]) -> Any:
    """Running count per word, split in SQL by the topology's word pattern."""
    env.execute_sql(_source("lines", "line STRING", "raw", request))
    pattern = "(?U)" + request["word_pattern"]
    return env.sql_query(f"""
        SELECT word, COUNT(*) AS total
        FROM lines CROSS JOIN UNNEST(REGEXP_EXTRACT_ALL(LOWER(line), '({pattern})', 1))
            AS words (word)
        GROUP BY word""")


def user_totals(env: TableEnvironment, request: dict[str, Any]) -> Any:
    """Per-user (sum of amounts, count of events), decoded by the connector's JSON format."""
    env.execute_sql(_source("events", "`user` STRING, amount BIGINT, country STRING", "json",
                            request))
    return env.sql_query("""
        SELECT `user`, SUM(amount) AS spent, COUNT(*) AS events
        FROM events GROUP BY `user`""")


JOBS = {"word_count": word_count, "user_totals": user_totals}


def main(argv: list[str]) -> None:
    job, request_file, out = argv
    request = json.loads(Path(request_file).read_text())
    env = _environment(request)
    table = JOBS[job](env, request)
    latest: dict[str, Any] = {}
    started = time.time()
    with table.execute().collect() as changes:
        for row in changes:
            if row.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
                values = list(row)
                latest[values[0]] = values[1] if len(values) == 2 else values[1:]
    ended = time.time()
    Path(out).write_text(json.dumps({"seconds": ended - started,
                                     "result": sorted(latest.items())}))


if __name__ == "__main__":
    main(sys.argv[1:])
