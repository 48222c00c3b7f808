"""Pure pieces of the Kafka adapter: client properties, error kinds, the broker config."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from hailstorm import kafka
from hailstorm.dev.kafka_broker import ClusterLayout, NodePorts, TlsFiles, server_properties
from hailstorm.halt import TopologyHalt, halt_reason
from hailstorm.runtime.driver import grown_partitions

SECURED = """\
# a comment
! another comment
security.protocol=SASL_SSL
sasl.mechanisms = SCRAM-SHA-256
sasl.username=alice
sasl.password=s3cr3t=with=equals
ssl.ca.location=/etc/ca.pem
ssl.key.password: also-secret
"""


def test_properties_file_is_parsed_like_java_properties(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(SECURED)
    assert kafka.read_properties(path) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "s3cr3t=with=equals",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.key.password": "also-secret",
    }


@pytest.mark.parametrize("text, message", [
    ("just-a-name\n", "expected name=value"),
    ("=value\n", "expected name=value"),
    ("bootstrap.servers=x:9092\n", "belongs in --kafka"),
])
def test_malformed_properties_are_one_clear_error(tmp_path: Path, text: str,
                                                  message: str) -> None:
    path = tmp_path / "bad.properties"
    path.write_text(text)
    with pytest.raises(kafka.KafkaConfigError, match=message):
        kafka.read_properties(path)
    with pytest.raises(kafka.KafkaConfigError, match="cannot read"):
        kafka.read_properties(tmp_path / "missing.properties")


def test_settings_layer_defaults_file_then_call_site_and_spout_rules_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("linger.ms=5\nisolation.level=read_uncommitted\n"
                    "auto.offset.reset=earliest\nsasl.password=pw\n")
    monkeypatch.setenv(kafka.CONFIG_VAR, str(path))
    settings = kafka.client_settings("b:1", {"linger.ms": 20, "acks": "all"}, {"acks": "1"})
    assert settings["linger.ms"] == "5"  # the operator's file beats hailstorm's defaults
    assert settings["acks"] == "1"  # the call site beats both
    assert settings["bootstrap.servers"] == "b:1"
    # A spout's consumer can never be told to read aborted records or to jump on a gap.
    spout = kafka.consumer("b:1")
    spout.close()
    required = kafka.client_settings("b:1", None, kafka.SPOUT_REQUIRED)
    assert required["isolation.level"] == "read_committed"
    assert required["auto.offset.reset"] == "error"
    monkeypatch.delenv(kafka.CONFIG_VAR)
    assert "sasl.password" not in kafka.client_settings("b:1")


def test_a_consumer_refetches_soon_and_an_operator_may_say_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer whose queue was full looks again after 20 ms, not librdkafka's second
    (which capped one consumer at about 170,000 short messages a second); the properties
    file and the call site may change it, never a spout's rules."""
    settings = kafka.consumer_settings("b:1")
    assert settings["fetch.queue.backoff.ms"] == 20
    assert settings["fetch.min.bytes"] == kafka.FETCH_BATCHING["fetch.min.bytes"]
    path = tmp_path / "client.properties"
    path.write_text("fetch.queue.backoff.ms=500\nisolation.level=read_uncommitted\n")
    monkeypatch.setenv(kafka.CONFIG_VAR, str(path))
    settings = kafka.consumer_settings("b:1")
    assert settings["fetch.queue.backoff.ms"] == "500"
    assert settings["isolation.level"] == "read_committed"
    assert kafka.consumer_settings("b:1", **{"fetch.queue.backoff.ms": 5})[
        "fetch.queue.backoff.ms"] == 5


def test_redaction_masks_every_secret_and_keeps_the_rest() -> None:
    settings = {
        "sasl.password": "pw", "ssl.key.password": "pw", "ssl.keystore.password": "pw",
        "sasl.oauthbearer.client.secret": "pw", "sasl.jaas.config": "pw",
        "ssl.certificate.pem": "pem", "ssl.key.pem": "pem",
        "sasl.username": "alice", "ssl.ca.location": "/ca.pem", "ssl.key.location": "/k",
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
    }
    shown = kafka.redacted(settings)
    assert {k for k, v in shown.items() if v == "***"} == {
        "sasl.password", "ssl.key.password", "ssl.keystore.password",
        "sasl.oauthbearer.client.secret", "sasl.jaas.config", "ssl.certificate.pem",
        "ssl.key.pem"}
    assert {v for k, v in shown.items() if v != "***"} == {
        "alice", "/ca.pem", "/k", "SASL_SSL", "PLAIN"}


@pytest.mark.parametrize("code, kind", [
    (KafkaError._PARTITION_EOF, "eof"),
    (KafkaError._AUTO_OFFSET_RESET, "lost"),
    (KafkaError.OFFSET_OUT_OF_RANGE, "lost"),
    (KafkaError._AUTHENTICATION, "auth"),
    (KafkaError.SASL_AUTHENTICATION_FAILED, "auth"),
    (KafkaError._TRANSPORT, "transient"),
    (KafkaError._ALL_BROKERS_DOWN, "transient"),
    (KafkaError.NOT_LEADER_FOR_PARTITION, "transient"),
])
def test_consumer_error_kinds(code: int, kind: str) -> None:
    assert kafka.consumer_error_kind(KafkaError(code)) == kind


def test_a_fatal_client_error_is_fatal() -> None:
    assert kafka.consumer_error_kind(KafkaError(KafkaError._FENCED, fatal=True)) == "fatal"


def test_lost_offsets_message_names_everything() -> None:
    text = kafka.lost_offsets_message("words", 2, 1500, 2000, 2600)
    assert "'words' partition 2" in text and "offset 1500" in text
    assert "2000..2599" in text and "start 2000, end 2600" in text
    assert "docs/operations.md" in text
    assert "log is empty (start 0, end 0)" in kafka.lost_offsets_message("w", 0, 5, 0, 0)
    assert "unknown" in kafka.lost_offsets_message("w", 0, 5, None, None)


def test_a_halt_reason_survives_being_wrapped_in_a_spark_traceback() -> None:
    halt = TopologyHalt("Kafka topic 'words' partition 2: gone")
    wrapped = ("py4j.protocol.Py4JJavaError: An error occurred while calling o42.collect.\n"
               "Traceback (most recent call last):\n  File ...\n"
               f"hailstorm.halt.TopologyHalt: {halt}\n\n\tat org.apache.spark...")
    assert halt_reason(wrapped) == "Kafka topic 'words' partition 2: gone"
    assert halt_reason("ValueError: something else") is None


def test_grown_partitions_are_the_new_ones_only() -> None:
    running = {"lines": [("words", 0), ("words", 1)]}
    assert grown_partitions(running, running) == []
    grown = {"lines": [("words", 0), ("words", 1), ("words", 2), ("words", 3)]}
    assert grown_partitions(running, grown) == [("words", 2), ("words", 3)]


def _layout(nodes: int, security: str = "plaintext") -> ClusterLayout:
    ports = {n: NodePorts(client=9000 + n, controller=9100 + n,
                          internal=9200 + n if security != "plaintext" else None)
             for n in range(1, nodes + 1)}
    return ClusterLayout("127.0.0.1", ports, security)


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_one_node_config_is_a_single_voter_with_replication_one(tmp_path: Path) -> None:
    props = _props(server_properties(_layout(1), 1, tmp_path / "data"))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9101"
    assert props["listeners"] == "CLIENT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9101"
    assert props["default.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert props["log.dirs"] == str(tmp_path / "data")


def test_three_node_config_replicates_three_ways_with_two_in_sync(tmp_path: Path) -> None:
    layout = _layout(3)
    assert layout.bootstrap() == "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"
    props = _props(server_properties(layout, 2, tmp_path))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103")
    assert props["advertised.listeners"] == "CLIENT://127.0.0.1:9002"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["unclean.leader.election.enable"] == "false"


def test_secured_config_has_a_sasl_ssl_client_listener_no_plaintext_and_no_secret(
        tmp_path: Path) -> None:
    tls = TlsFiles(ca_cert=tmp_path / "ca.pem", server_pem=tmp_path / "broker.pem")
    text = server_properties(_layout(1, "sasl_ssl"), 1, tmp_path, tls)
    props = _props(text)
    assert props["listener.security.protocol.map"] == (
        "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL")
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256"
    assert props["ssl.keystore.location"] == str(tmp_path / "broker.pem")
    assert "password" not in text  # SCRAM users are added through the admin API
    with pytest.raises(ValueError, match="TLS"):
        server_properties(_layout(1, "sasl_ssl"), 1, tmp_path)


def test_librdkafka_lines_go_to_a_logger_and_its_retries_only_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert kafka.client_settings("b:1")["logger"] is kafka.CLIENT_LOG
    retry = ("GETPID", "rdkafka#producer-5", "[thrd:main]: Failed to acquire idempotence PID "
             "from broker 127.0.0.1:48333/1: Broker: Coordinator load in progress: retrying")
    refused = ("FAIL", "rdkafka#producer-1", "127.0.0.1:1/bootstrap: Connect to "
               "ipv4#127.0.0.1:1 failed: Connection refused")
    with caplog.at_level(logging.INFO, logger=kafka.CLIENT_LOG.name):
        for args in (retry, refused):  # how confluent-kafka hands librdkafka's lines over
            kafka.CLIENT_LOG.log(logging.WARNING, "%s [%s] %s", *args)
    assert [(r.levelname, r.args[0]) for r in caplog.records] == [("WARNING", "FAIL")]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=kafka.CLIENT_LOG.name):
        kafka.CLIENT_LOG.log(logging.WARNING, "%s [%s] %s", *retry)
    assert [(r.levelname, r.args[0]) for r in caplog.records] == [("DEBUG", "GETPID")]


def test_a_line_librdkafka_repeats_is_logged_once_an_interval_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker that is out: every client logs each reconnect. One line passes, the rest of
    the interval is summed up in one line naming the count (numbers do not make lines
    different); another kind of line passes at once."""
    now = [0.0]
    log = logging.getLogger("test.kafka.client.repeats")
    summed = kafka.RepeatsSummed(clock=lambda: now[0])
    log.addFilter(summed)
    try:
        with caplog.at_level(logging.INFO):
            for i in range(1000):  # ten a second for 100 s, from three clients
                now[0] = i * 0.1
                log.log(logging.ERROR, "%s [%s] %s", "FAIL", f"rdkafka#producer-{i % 3}",
                        f"127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: "
                        f"Connection refused (after {i % 7}ms in state CONNECT)")
            log.warning("a line of another kind")
    finally:
        log.removeFilter(summed)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[0] == ("ERROR", "FAIL [rdkafka#producer-0] 127.0.0.1:9/bootstrap: Connect to "
                        "ipv4#127.0.0.1:9 failed: Connection refused (after 0ms in state "
                        "CONNECT)")
    assert lines[1][0] == "ERROR" and lines[1][1].startswith(
        "kafka client: 599 more lines like this in 60 s; the latest: FAIL [rdkafka#producer-2]")
    assert lines[2:] == [("WARNING", "a line of another kind")]


def test_client_errors_are_logged_once_a_minute_per_code_and_summed_up(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka, "CLIENT_ERRORS", type(kafka.CLIENT_ERRORS)(interval=60.0))
    down = KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9092/1: Connection refused")
    with caplog.at_level(logging.WARNING, logger="hailstorm.kafka"):
        for second in range(0, 50, 5):  # an outage: ten in 50 s
            kafka.log_client_error(down, now=1000.0 + second)
        kafka.log_client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "all down"), now=1040)
        kafka.log_client_error(down, now=1070.0)  # the minute ended: nine more summed up
        kafka.log_client_error(down, now=2000.0)  # a later outage: said, not silent
    lines = [r.getMessage() for r in caplog.records if r.name == "hailstorm.kafka"]
    assert lines == [
        "kafka client: 127.0.0.1:9092/1: Connection refused",
        "kafka client: all down",
        "9 more lines like this in 70 s; the latest: kafka client: 127.0.0.1:9092/1: "
        "Connection refused",
        "1 more line like this in 930 s; the latest: kafka client: 127.0.0.1:9092/1: "
        "Connection refused",
    ], lines
