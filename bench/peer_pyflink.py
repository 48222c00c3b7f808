"""One benchmark job on PyFlink's Table API, run by the Python of its venv (:mod:`peer_envs`).

    <pyflink venv>/bin/python bench/peer_pyflink.py JOB REQUEST_JSON OUT_JSON

The Kafka SQL connector (from Maven Central) reads the whole topic from its earliest
offsets and ends at the latest offsets there were when the job started
(``scan.bounded.mode``, with partition discovery off: a bounded source that keeps
discovering partitions never ends); the job runs in streaming mode with exactly-once
checkpoints every second (the hashmap state backend, checkpoints on the local disk),
parallelism 2, in Flink's local mini-cluster, mini-batch aggregation on (a key's aggregate
updated once per batch of up to 50,000 records or 1 s: Flink's advice for throughput).
Word splitting is SQL (``REGEXP_EXTRACT_ALL`` over the lowercased line with the topology's
pattern in Java's Unicode mode, unnested), the JSON is decoded by the connector's ``json``
format: no Python function runs per record, Flink's fastest way for these jobs.

The job writes its running result into an upsert topic of its own, exactly once (Kafka
transactions committed at checkpoints), as hailstorm writes its table; the time runs from
submitting the job to its end (the JVM's start excluded). Afterwards, untimed, the script
reads that topic's committed records (the newest per key) as the result: collecting the
changelog into Python instead would pass every update through py4j one at a time, a cost
of the collection, not of Flink. See :mod:`peer_runs` for the request and the answer.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from pyflink.common import Configuration
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
    # Aggregates update once per key and mini-batch, not once per record (and combine
    # locally before the shuffle): Flink's own advice for throughput, and its changelog
    # then carries a key's update once per batch rather than once per record.
    config.set_string("table.exec.mini-batch.enabled", "true")
    config.set_string("table.exec.mini-batch.allow-latency", "1s")
    config.set_string("table.exec.mini-batch.size", "50000")
    settings = EnvironmentSettings.new_instance().in_streaming_mode() \
        .with_configuration(config).build()
    return TableEnvironment.create(settings)


def _kafka_table(name: str, columns: str, options: dict[str, str],
                 request: dict[str, Any]) -> str:
    """``CREATE TABLE`` of a table in the request's Kafka with connector ``options``."""
    settings = {**options, "properties.bootstrap.servers": request["bootstrap"]}
    listed = ",\n".join(f"'{k}' = '{v}'" for k, v in settings.items())
    return f"CREATE TABLE {name} ({columns}) WITH (\n{listed}\n)"


def _source(name: str, columns: str, value_format: str, request: dict[str, Any]) -> str:
    return _kafka_table(name, columns, {
        "connector": "kafka", "topic": request["topic"],
        "properties.group.id": "hailstorm-bench-pyflink",
        "scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset",
        "scan.topic-partition-discovery.interval": "0", "format": value_format,
    }, request)


def _events(env: TableEnvironment, request: dict[str, Any]) -> None:
    """The source table ``events`` of the keyed jobs, decoded by the connector's JSON."""
    env.execute_sql(_source("events", "`user` STRING, amount BIGINT, country STRING", "json",
                            request))


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
    _events(env, request)
    return env.sql_query("""
        SELECT `user`, SUM(amount) AS spent, COUNT(*) AS events
        FROM events GROUP BY `user`""")


def top_spenders(env: TableEnvironment, request: dict[str, Any]) -> Any:
    """The top ``request["top"]`` users per country by their running totals (ties by user
    id): a total per (country, user), then Flink's Top-N (``ROW_NUMBER`` over the country,
    kept while it is at most the top), whose changelog updates each rank's row."""
    _events(env, request)
    env.create_temporary_view("totals", env.sql_query("""
        SELECT country, `user`, SUM(amount) AS spent FROM events GROUP BY country, `user`"""))
    return env.sql_query(f"""
        SELECT country, rn, `user`, spent FROM (
            SELECT country, `user`, spent, ROW_NUMBER() OVER (
                PARTITION BY country ORDER BY spent DESC, `user` ASC) AS rn
            FROM totals)
        WHERE rn <= {int(request["top"])}""")


JOBS = {
    "word_count": (word_count, "word STRING, total BIGINT", ("word",)),
    "user_totals": (user_totals, "`user` STRING, spent BIGINT, events BIGINT", ("user",)),
    "top_spenders": (top_spenders, "country STRING, rn BIGINT, `user` STRING, spent BIGINT",
                     ("country", "rn")),
}
"""Each job's query, its result's columns and the columns that key them."""


def _result_sink(columns: str, key: tuple[str, ...], topic: str,
                 request: dict[str, Any]) -> str:
    keys = ", ".join(f"`{k}`" for k in key)
    return _kafka_table("job_result", f"{columns}, PRIMARY KEY ({keys}) NOT ENFORCED", {
        "connector": "upsert-kafka", "topic": topic,
        "properties.transaction.timeout.ms": "600000",
        "key.format": "json", "value.format": "json",
        "sink.delivery-guarantee": "exactly-once", "sink.transactional-id-prefix": topic,
    }, request)


def _committed(topic: str, request: dict[str, Any]) -> dict[str, Any]:
    """The newest committed value of every key of ``topic`` (its JSON key as text)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": request["bootstrap"],
                         "group.id": f"{topic}-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    partitions = [TopicPartition(topic, p, 0) for p in range(request["partitions"])]
    ends = {p.partition: consumer.get_watermark_offsets(p, timeout=30)[1] for p in partitions}
    consumer.assign(partitions)
    latest: dict[str, Any] = {}
    left = {p for p, end in ends.items() if end > 0}
    while left:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is not None:
                continue
            value = message.value()
            if value is None:
                latest.pop(message.key().decode(), None)
            else:
                latest[message.key().decode()] = json.loads(value)
            if message.offset() + 1 >= ends[message.partition()]:
                left.discard(message.partition())
        for p in list(left):  # transaction markers end a partition past its last record
            if consumer.position([TopicPartition(topic, p)])[0].offset >= ends[p]:
                left.discard(p)
    consumer.close()
    return latest


def _answer(job: str, rows: dict[str, Any]) -> list[list[Any]]:
    """The committed rows as the answer's ``[key, value]`` pairs (see :mod:`peer_runs`)."""
    if job == "word_count":
        return sorted([row["word"], row["total"]] for row in rows.values())
    if job == "user_totals":
        return sorted([row["user"], [row["spent"], row["events"]]] for row in rows.values())
    rankings: dict[str, list[tuple[int, str, int]]] = {}
    for row in rows.values():
        rankings.setdefault(row["country"], []).append((row["rn"], row["user"], row["spent"]))
    return sorted([country, [[user, spent] for _rank, user, spent in sorted(ranked)]]
                  for country, ranked in rankings.items())


def main(argv: list[str]) -> None:
    job, request_file, out = argv
    request = json.loads(Path(request_file).read_text())
    topic = f"hailstorm-bench-pyflink-{job}-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": request["bootstrap"]})
    for future in admin.create_topics([NewTopic(topic, request["partitions"], 1)]).values():
        future.result()
    env = _environment(request)
    query, columns, key = JOBS[job]
    env.execute_sql(_result_sink(columns, key, topic, request))
    table = query(env, request)
    started = time.time()
    table.execute_insert("job_result").wait()
    ended = time.time()
    result = _answer(job, _committed(topic, request))
    Path(out).write_text(json.dumps({"seconds": ended - started, "result": result}))


if __name__ == "__main__":
    main(sys.argv[1:])
