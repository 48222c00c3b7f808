"""The processor shells' master-state handling and wiring, without any service."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hailstorm.processors import Router
from hailstorm.processors.sink_core import covers
from hailstorm.protocol.layout import (
    Flowing,
    Initialize,
    Replaying,
    Restarting,
    SpoutsPaused,
    SpoutsRewind,
)
from hailstorm.protocol.wire import PartitionTable
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.data_plane import listen_address, route_address
from hailstorm.runtime.inbound import InboundShell
from hailstorm.runtime.processor import RestartRequired, Shell
from hailstorm.topology import load_topology

PARTS = [("words", 0), ("words", 1)]
WORDCOUNT = str(Path(__file__).resolve().parents[2] / "topologies" / "wordcount.py")


class Recorder(Shell):
    def __init__(self, processor: str) -> None:
        topology = load_topology(WORDCOUNT)
        super().__init__(Assignment(WORDCOUNT, "wc", processor, "zk", "kafka", "/tmp/none"),
                         topology)
        self.table = PartitionTable(PARTS)
        self.calls: list[Any] = []

    def on_initialize(self, epoch: int) -> None:
        self.calls.append(("init", epoch))

    def on_state(self, state: Any) -> None:
        self.calls.append(state)


def test_joins_the_first_initialize_and_answers_each_state_once() -> None:
    shell = Recorder("spout:lines:words:0")
    clock = {p: 4 for p in PARTS}
    shell._on_master(Flowing(3, None))  # left over from a previous run: ignored
    shell._on_master(Initialize(4))
    shell._on_master(Initialize(4))
    shell._on_master(SpoutsRewind(4, {p: -1 for p in PARTS}))
    shell._on_master(Flowing(4, None))
    shell._on_master(Flowing(4, None))
    shell._on_master(SpoutsPaused(5))
    shell._on_master(Flowing(5, clock))
    shell._on_master(Flowing(5, clock))
    shell._on_master(Flowing(5, None))  # after the commit
    assert shell.joined == 4 and shell.joined_event.is_set()
    assert shell.calls == [("init", 4), SpoutsRewind(4, {p: -1 for p in PARTS}),
                           Flowing(4, None), SpoutsPaused(5), Flowing(5, clock),
                           Flowing(5, None)]


def test_a_newer_run_ends_the_incarnation() -> None:
    shell = Recorder("bolt:counts:0")
    shell._on_master(Initialize(4))
    with pytest.raises(RestartRequired, match=r"Initialize\(6\)"):
        shell._on_master(Initialize(6))
    other = Recorder("bolt:counts:0")
    other._on_master(Initialize(4))
    with pytest.raises(RestartRequired, match=r"SpoutsRewind\(7\)"):
        other._on_master(SpoutsRewind(7, {}))


def test_an_instance_restarting_alone_joins_the_run_of_the_others() -> None:
    """A local recovery: the failed instance's next incarnation joins the run of
    ``Initialize(run)`` at ``Restarting`` (ready in its epoch), its predecessor ends, and
    the other instances go on, answering each state once."""
    k = {p: 9 for p in PARTS}
    fresh = Recorder("bolt:counts:1")
    fresh._on_master(Replaying(6, 4, ("bolt:counts:1",), k))  # too late to join: waits
    fresh._on_master(Restarting(6, 4, ("bolt:counts:1",), k))
    fresh._on_master(Restarting(6, 4, ("bolt:counts:1",), k))
    fresh._on_master(Replaying(6, 4, ("bolt:counts:1",), k))
    assert (fresh.joined, fresh.rejoined) == (4, 6) and fresh.joined_event.is_set()
    assert fresh.calls == [("init", 6), Replaying(6, 4, ("bolt:counts:1",), k)]
    with pytest.raises(RestartRequired, match=r"Restarting\(8\) restarts this instance"):
        fresh._on_master(Restarting(8, 4, ("bolt:counts:1",), k))  # failed again later
    old = Recorder("bolt:counts:1")
    old._on_master(Initialize(4))
    with pytest.raises(RestartRequired, match="alone"):
        old._on_master(Restarting(6, 4, ("bolt:counts:1",), k))
    other = Recorder("bolt:counts:0")
    other._on_master(Initialize(4))
    other._on_master(Restarting(6, 4, ("bolt:counts:1",), k))
    other._on_master(Replaying(6, 4, ("bolt:counts:1",), k))
    assert other.calls == [("init", 4), Restarting(6, 4, ("bolt:counts:1",), k),
                           Replaying(6, 4, ("bolt:counts:1",), k)]


def test_more_instances_joining_a_local_recovery_are_answered_again() -> None:
    k = {p: 9 for p in PARTS}
    spout = Recorder("spout:lines:words:0")
    spout._on_master(Initialize(4))
    spout._on_master(Restarting(6, 4, ("bolt:counts:1",), k))
    spout._on_master(Restarting(6, 4, ("bolt:counts:0", "bolt:counts:1"), k))
    assert spout.calls[1:] == [Restarting(6, 4, ("bolt:counts:1",), k),
                               Restarting(6, 4, ("bolt:counts:0", "bolt:counts:1"), k)]
    first = Recorder("bolt:counts:1")  # restarting alone since the first: goes on
    first._on_master(Restarting(6, 4, ("bolt:counts:1",), k))
    first._on_master(Restarting(6, 4, ("bolt:counts:0", "bolt:counts:1"), k))
    assert first.rejoined == 6


class Receiver(InboundShell):
    def __init__(self) -> None:
        topology = load_topology(WORDCOUNT)
        super().__init__(Assignment(WORDCOUNT, "wc", "sink:word_counts:0", "zk", "kafka",
                                    "/tmp/none"), topology)
        self.alone = frozenset({"counts"})


def test_a_new_incarnations_connection_waits_for_its_predecessors_to_end() -> None:
    """The sink shuts the old incarnation's connection (a stopped process's too) and
    hears the new one only once the old one's reader handed on everything it had."""
    shell = Receiver()
    old_near, old_far = socket.socketpair()
    new_near, new_far = socket.socketpair()
    events: list[str] = []
    started = threading.Event()

    def old_reader() -> None:
        with shell._one_connection_of("bolt:counts:1", old_near):
            started.set()
            assert old_near.recv(1) == b""  # woken by the shutdown, not by its peer
            time.sleep(0.1)
            events.append("old gone")

    def new_reader() -> None:
        with shell._one_connection_of("bolt:counts:1", new_near):
            events.append("new served")

    first = threading.Thread(target=old_reader)
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=new_reader)
    second.start()
    first.join(5)
    second.join(5)
    assert events == ["old gone", "new served"]
    assert shell._connections == {}
    for sock in (old_near, old_far, new_near, new_far):
        sock.close()


def test_only_peers_that_restart_alone_are_gone_on_without() -> None:
    shell = Recorder("spout:lines:words:0")
    assert not shell.goes_on_without("bolt:counts:1")  # local recovery off
    shell.alone = frozenset({"counts"})
    assert shell.goes_on_without("bolt:counts:1")
    assert not shell.goes_on_without("sink:word_counts:0")
    assert not shell.goes_on_without(None) and not shell.goes_on_without("nonsense")


def test_wiring_of_wordcount() -> None:
    spout = Recorder("spout:lines:words:1")
    spout.router = Router(spout.topology.downstream_of("lines"))
    assert spout.downstream_ids == {("counts", 0): "bolt:counts:0",
                                    ("counts", 1): "bolt:counts:1"}
    bolt = Recorder("bolt:counts:1")
    assert bolt.upstream_ids() == ["spout:lines:words:0", "spout:lines:words:1"]
    bolt.router = Router(bolt.topology.downstream_of("counts"))
    assert bolt.downstream_ids == {("word_counts", 0): "sink:word_counts:0"}
    sink = Recorder("sink:word_counts:0")
    assert sink.upstream_ids() == ["bolt:counts:0", "bolt:counts:1"]


def test_a_sink_round_needs_only_the_partitions_its_upstreams_carry() -> None:
    """A sink fed by one spout of a two-topic topology: the round clock names the other
    topic's partitions too, which no row of this sink can come from."""
    clicks, views = ("clicks", 0), ("views", 0)
    clock = {clicks: 10, views: 1999}
    carried = {clicks: 12}  # the low water mark: only clicks:0 has an upstream
    assert covers({clicks: 10}, clock, carried)
    assert not covers({clicks: 9}, clock, carried)
    assert not covers({}, clock, carried)
    # A partition some upstream carries is never skipped, even when nothing came from it.
    assert not covers({clicks: 10}, clock, {clicks: 12, views: 1500})


@pytest.mark.parametrize("zk", ["127.0.0.1:2181", "127.0.0.1:2181,10.9.9.9:2181/hailstorm",
                                "localhost", "[::1]:2181"])
def test_auto_host_is_the_address_on_the_way_to_zookeeper(zk: str) -> None:
    expected = "::1" if "::1" in zk else "127.0.0.1"
    assert listen_address("auto", zk) == route_address(zk) == expected


def test_a_given_host_is_used_as_it_is() -> None:
    assert listen_address("10.1.2.3", "127.0.0.1:2181") == "10.1.2.3"


def test_an_assignments_repr_shows_no_database_password() -> None:
    """Spark prints a failed task's arguments: the database URL may carry a password."""
    assignment = Assignment(WORDCOUNT, "wc", "sink:s:0", "zk", "kafka", "/tmp/none",
                            database_url="postgresql://app:s3cret@db:5432/app")
    assert "s3cret" not in repr(assignment)
    assert "s3cret" not in str(assignment)
