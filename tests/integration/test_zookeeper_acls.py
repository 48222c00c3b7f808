"""With HAILSTORM_ZK_AUTH set, every node of a running topology is its owner's: a client
without the credentials can neither read nor write the master state, the committed record
or snapshot refs, a read-only identity can read but not write, and the topology itself
(processors, negotiators, driver, harness: all authenticated) runs exactly as without."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployments import WORDCOUNT, deployed
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from hailstorm import kafka
from hailstorm.dev.harness import (
    Produced,
    StackAddresses,
    TopologyRun,
    compare_with_model,
    produce,
    wait_for,
    wordcount_lines,
)
from hailstorm.model import run_model
from hailstorm.protocol.layout import (
    NegotiatorRecord,
    ProcessorReport,
    ProcessorState,
    TopologyPaths,
)
from hailstorm.status import Collector, scrape_all
from hailstorm.zookeeper import ZK_AUTH_VAR, ZK_READER_VAR

pytestmark = pytest.mark.integration

TOPIC = "words"


@pytest.fixture()
def run(stack_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[TopologyRun]:
    monkeypatch.setenv(ZK_AUTH_VAR, f"hailstorm:{uuid.uuid4().hex}")
    monkeypatch.setenv(ZK_READER_VAR, "watcher:watching")
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], TOPIC, 2)
    with deployed(StackAddresses.from_env(stack_env), WORDCOUNT, tmp_path / "logs") as run:
        yield run


def _client(zk: str, auth: str | None) -> KazooClient:
    client = KazooClient(hosts=zk, auth_data=[("digest", auth)] if auth else None)
    client.start(timeout=20)
    return client


def test_only_the_owner_writes_and_the_reader_reads(run: TopologyRun) -> None:
    partitions = kafka.partitions_of(run.stack.kafka, TOPIC)
    produced = Produced(TOPIC)
    produce(run.stack.kafka, produced, wordcount_lines(5_000, seed=8), partitions)
    run.start()
    wait_for("a first commit", run.committed, 240, run.alive)
    paths = run.paths
    stranger = _client(run.stack.zk, None)
    reader = _client(run.stack.zk, "watcher:watching")
    try:
        for path in (paths.master, paths.committed, paths.expected):
            with pytest.raises(NoAuthError):
                stranger.get(path)
            with pytest.raises(NoAuthError):
                stranger.set(path, b"{}")
            assert reader.get(path)[0]  # the read-only identity reads
            with pytest.raises(NoAuthError):
                reader.set(path, b"{}")
        snapshot = paths.snapshot_node("bolt:counts:0")
        for client in (stranger, reader):  # no forged snapshot ref
            with pytest.raises(NoAuthError):
                client.set(snapshot, b'{"ref": "file:///etc/passwd"}')
        living = reader.get_children(paths.living)
        assert living  # ephemeral nodes are protected too
        with pytest.raises(NoAuthError):
            stranger.delete(f"{paths.living}/{living[0]}")
        # Off loopback, status fetches metrics from addresses written under authentication:
        # every processor's and negotiator's here.
        collector = Collector(run.stack.zk, None, None)
        collector.local = False
        try:
            inputs = collector.read(run.name)
        finally:
            collector.close()
        assert inputs.reports and not inputs.unscraped
        scraped = scrape_all(inputs)
        assert scraped and all(values is not None for values in scraped.values()), scraped
    finally:
        for client in (stranger, reader):
            client.stop()
            client.close()

    produce(run.stack.kafka, produced, wordcount_lines(5_000, seed=9), partitions)
    target = {(TOPIC, p): o for p, o in produced.last_offsets().items()}
    committed = run.wait_committed(target, 240)
    produced.fill_before(run.stack.kafka, committed.clock)
    model = run_model(run.topology, produced.model_messages())
    comparison = compare_with_model(model, run.committed_bolt_states(committed),
                                    run.sink_tables())
    assert comparison.ok, comparison.first(5)
    run.check_recoveries()


def test_a_squatted_open_node_stops_the_driver(stack_env: dict[str, str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone created the topology's nodes first, open to all: the authenticated driver
    refuses to run on them instead of trusting nodes anyone may change."""
    monkeypatch.setenv(ZK_AUTH_VAR, f"hailstorm:{uuid.uuid4().hex}")  # not the other test's
    kafka.recreate_topic(stack_env["HAILSTORM_KAFKA"], TOPIC, 2)
    stack = StackAddresses.from_env(stack_env)
    with deployed(stack, WORDCOUNT, tmp_path / "logs", negotiators=1) as run:
        squatter = _client(stack.zk, None)
        try:
            squatter.create(run.paths.living, makepath=True)  # world:anyone, ALL
        finally:
            squatter.stop()
            squatter.close()
        run.start()
        wait_for("the driver to stop", lambda: run.procs["driver"].poll() is not None, 120)
        assert run.procs["driver"].returncode == 1
        assert "may be changed by anyone" in run.log("driver")


def test_status_fetches_no_metrics_from_open_nodes_off_loopback(
        stack_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A processor's and a negotiator's node written by someone unauthenticated: off
    loopback, status names them as not fetched and never connects to what they name; on
    loopback (everything on this machine) it fetches them."""
    monkeypatch.delenv(ZK_AUTH_VAR, raising=False)
    paths = TopologyPaths(f"forged_{uuid.uuid4().hex[:8]}")
    trap = socket.create_server(("127.0.0.1", 0))
    trap.settimeout(0.5)
    port = trap.getsockname()[1]
    forger = _client(stack_env["HAILSTORM_ZK"], None)
    collector = Collector(stack_env["HAILSTORM_ZK"], None, None)
    try:
        report = ProcessorReport("bolt:counts:0", ProcessorState.READY, 1,
                                 info={"host": "127.0.0.1", "metrics": port})
        forger.create(paths.living_node("bolt:counts:0"), report.to_json(), makepath=True)
        forger.create(paths.negotiator_node("n1"),
                      NegotiatorRecord("n1", "127.0.0.1", port, True).to_json(), makepath=True)
        collector.local = False
        inputs = collector.read(paths.topology)
        assert inputs.unscraped == {"bolt:counts:0", "negotiator:n1"}
        assert any("not written under authentication" in p for p in inputs.problems)
        assert scrape_all(inputs) == {}
        with pytest.raises(TimeoutError):
            trap.accept()  # nobody came
        collector.local = True
        inputs = collector.read(paths.topology)
        assert not inputs.unscraped
        assert set(scrape_all(inputs, timeout=0.5)) == {"bolt:counts:0", "negotiator:n1"}
        trap.accept()[0].close()  # on loopback it did come
    finally:
        collector.close()
        with contextlib.suppress(NoAuthError):  # /hailstorm may let anyone create only
            forger.delete(paths.root, recursive=True)
        forger.stop()
        forger.close()
        trap.close()
