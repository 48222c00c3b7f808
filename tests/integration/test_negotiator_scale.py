"""The negotiator daemon against the session's ZooKeeper with 200 stand-in processors
(:mod:`hailstorm.dev.standins`): rounds commit every instance's save at the round's clock, a
crashed instance is named in the recovery, and the topology commits again once its new
incarnation joined. Correctness only: ``bench/negotiator_scale.py`` runs 1,000 and times it
(docs/deployment.md)."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from hailstorm.dev.standins import (
    StandInFleet,
    decide_recovery,
    negotiator_process,
    wait_commits,
    write_expected,
)
from hailstorm.protocol.clock import dominates
from hailstorm.protocol.layout import expected_processor_ids
from hailstorm.protocol.states import Initialize

pytestmark = pytest.mark.integration

PARTITIONS = [("events", p) for p in range(60)]
EXPECTED = expected_processor_ids({"src": PARTITIONS}, {"agg": 100}, {"out": 40})
SAVERS = [p for p in EXPECTED if not p.startswith("spout:")]


def test_two_hundred_stand_ins_commit_recover_and_commit_again(zookeeper: Any,
                                                               tmp_path: Path) -> None:
    hosts = str(zookeeper.hosts)
    name = f"scale_{uuid.uuid4().hex[:8]}"
    write_expected(hosts, name, EXPECTED, [("src", "agg"), ("agg", "out")])
    assert len(EXPECTED) == 200
    with StandInFleet(hosts, name, EXPECTED) as fleet:
        negotiator = negotiator_process(hosts, name, tmp_path / "negotiator.log",
                                        snapshot_interval=0.5)
        try:
            first, second = wait_commits(fleet.records, 2, 0, 300)
            for committed in (first, second):
                assert sorted(committed.snapshots) == sorted(SAVERS)
                assert set(committed.clock) == set(PARTITIONS)
            assert dominates(second.clock, first.clock) and second.clock != first.clock

            victim = "bolt:agg:37"
            _, record = decide_recovery(fleet, victim, 300)
            assert record.reason.startswith(f"{victim} lost")
            assert record.scope == (f"global: local recovery is off; {victim} can restart "
                                    "alone (their inputs replay from Kafka, their sinks keep "
                                    "what they promised)")
            fleet.restart(victim)
            again, = wait_commits(fleet.records, 1, record.epoch, 300)
            assert sorted(again.snapshots) == sorted(SAVERS)
            assert dominates(again.clock, second.clock)
            master = fleet.records.master()
            assert master is not None and not isinstance(master.state, Initialize)
            assert [r.epoch for r in fleet.records.recoveries()][-1] == record.epoch
        finally:
            negotiator.send_signal(signal.SIGTERM)
            negotiator.wait(30)
    log = (tmp_path / "negotiator.log").read_text()
    assert f"Initialize: {victim} lost (living node gone)" in log
