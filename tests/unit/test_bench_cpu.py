"""The benchmarks' CPU per role: readings of ``process_cpu_seconds_total`` turned into
seconds and microseconds per item of the run (``bench/common.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from common import (
    cpu_by_role,
    cpu_figures,
    machine_cpu,
    machine_used,
    process_cpu,
    processor_cpu,
)


def test_cpu_by_role_sums_the_instances_read_twice(capsys: pytest.CaptureFixture[str]) -> None:
    before = {"spout:events:0": (1.0, 10.0), "spout:events:1": (2.0, 10.0),
              "bolt:totals:0": (0.5, 10.0), "sink:out:0": (0.25, 10.0)}
    after = {"spout:events:0": (3.5, 10.0), "spout:events:1": (2.5, 10.0),
             "bolt:totals:0": (4.5, 10.0), "sink:out:0": (1.25, 10.0)}
    assert cpu_by_role(before, after) == {"spout": 3.0, "bolt": 4.0, "sink": 1.0}
    assert capsys.readouterr().err == ""


def test_a_processor_started_again_counts_from_its_start_and_is_named(
        capsys: pytest.CaptureFixture[str]) -> None:
    before = {"bolt:b:0": (5.0, 10.0), "bolt:b:1": (1.0, 10.0), "sink:s:0": (2.0, 10.0)}
    after = {"bolt:b:0": (6.0, 42.0),  # a new process with more CPU than the old one had
             "bolt:b:1": (0.5, 10.0),  # its counter went back: a restart too
             "spout:new:0": (0.75, 50.0)}  # read only at the end; sink:s:0 only at the start
    assert cpu_by_role(before, after) == {"spout": 0.75, "bolt": 6.5, "sink": 0.0}
    err = capsys.readouterr().err
    assert "['sink:s:0']" in err and "['bolt:b:0', 'bolt:b:1', 'spout:new:0']" in err


def test_cpu_figures_per_item_and_the_line() -> None:
    figures, line = cpu_figures({"spout": 13.5, "bolt": 15.0, "sink": 4.0}, 1_000_000, "event")
    assert figures == {
        "cpu_s_spouts": 13.5, "cpu_s_bolts": 15.0, "cpu_s_sinks": 4.0,
        "cpu_us_per_event_spouts": 13.5, "cpu_us_per_event_bolts": 15.0,
        "cpu_us_per_event_sinks": 4.0,
    }
    assert "spouts 13.5 us, bolts 15.0 us, sinks 4.0 us per event (32.5 in all" in line


def test_cpu_figures_with_the_whole_machine_name_the_rest_and_the_time_stolen() -> None:
    figures, line = cpu_figures({"spout": 4.0, "bolt": 5.0, "sink": 2.0}, 1_000_000, "event",
                                {"machine": 19.5, "stolen": 0.25})
    assert figures["cpu_s_machine"] == 19.5 and figures["cpu_s_stolen"] == 0.25
    assert figures["cpu_us_per_event_machine"] == 19.5
    assert figures["cpu_us_per_event_others"] == 8.5  # 19.5 - (4 + 5 + 2)
    assert "(11.0 in all: the processors' own);" in line
    assert "the whole machine 19.5 us per event: 8.5 for the rest" in line
    assert "0.25 s stolen" in line


def test_machine_cpu_counts_this_process_s_work() -> None:
    before = machine_cpu()
    spent = time.process_time() + 0.1
    while time.process_time() < spent:  # busy: the machine's busy time grows with it
        pass
    used = machine_used(before, machine_cpu())
    assert used["machine"] >= 0.05 and used["stolen"] >= 0.0


def test_process_cpu_reads_a_process_s_own_time_and_start() -> None:
    first = process_cpu(os.getpid())
    assert first is not None
    spent = time.process_time() + 0.05
    while time.process_time() < spent:  # busy: the kernel counts ticks of this process
        pass
    second = process_cpu(os.getpid())
    assert second is not None and second[1] == first[1] and second[0] > first[0]


def test_process_cpu_of_a_process_gone_is_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_cpu(child.pid) is None


def test_processor_cpu_reads_the_roles_it_counts_from_their_pids() -> None:
    def report(pid: int | None) -> SimpleNamespace:
        return SimpleNamespace(info={} if pid is None else {"pid": pid})

    reports = {"spout:lines:0": report(os.getpid()), "bolt:counts:0": report(None),
               "negotiator:0": report(os.getpid())}
    run = SimpleNamespace(processors=lambda: reports)
    read = processor_cpu(run)
    assert list(read) == ["spout:lines:0"]  # no pid, no figure; a negotiator is no role
    assert read["spout:lines:0"][1] == process_cpu(os.getpid())[1]  # type: ignore[index]
