"""A processor's Spark task restarting its instance in place: the pure policy
(:mod:`hailstorm.runtime.supervision`) and the forking supervisor around it
(:mod:`hailstorm.runtime.supervisor`), with stand-in bodies instead of processors."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.halt import TopologyHalt, halt_reason
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.causes import ProcessorFailed
from hailstorm.runtime.supervision import (
    LOCAL_RESTARTS,
    RESTART_DELAYS,
    Ended,
    Escalate,
    Finish,
    Outcome,
    Restart,
    Supervision,
    replace_stopped,
)
from hailstorm.runtime.supervisor import Body, Channel, Promotion, read_promotion, supervise

RESTARTING = (Ended.RESTARTED, Ended.FAILED, Ended.KILLED, Ended.LOST)


def test_a_stop_or_another_attempt_ends_the_task_cleanly() -> None:
    for ended in (Ended.STOPPED, Ended.SUPERSEDED):
        assert Supervision().after(Outcome(ended)) == Finish()


def test_a_halt_fails_the_task_with_the_halt() -> None:
    action = Supervision().after(Outcome(Ended.HALTED, "TopologyHalt: [halt] offsets gone"))
    assert action == Escalate("TopologyHalt: [halt] offsets gone")


def test_the_first_restart_is_immediate_and_later_ones_back_off() -> None:
    supervision = Supervision()
    delays = [supervision.after(Outcome(Ended.KILLED, "killed by SIGKILL"))
              for _ in range(LOCAL_RESTARTS)]
    assert [a.delay for a in delays if isinstance(a, Restart)] == list(RESTART_DELAYS)
    assert delays[0] == Restart(0.0, "killed (killed by SIGKILL)")


def test_restarts_without_a_committed_round_are_left_to_spark() -> None:
    supervision = Supervision()
    for _ in range(LOCAL_RESTARTS):
        assert isinstance(supervision.after(Outcome(Ended.FAILED, "OSError: boom")), Restart)
    action = supervision.after(Outcome(Ended.FAILED, "OSError: boom"))
    assert isinstance(action, Escalate)
    assert action.cause.startswith("OSError: boom (4 incarnations in a row")


@given(st.lists(st.tuples(st.sampled_from(RESTARTING), st.booleans()), max_size=40))
def test_an_incarnation_that_saw_a_commit_resets_the_count(
        history: list[tuple[Ended, bool]]) -> None:
    """Restart while fewer than LOCAL_RESTARTS incarnations in a row ended without their run
    a round committed; escalate exactly when one more would exceed it."""
    supervision = Supervision()
    in_a_row = 0
    for ended, progressed in history:
        action = supervision.after(Outcome(ended, "E: x", progressed))
        in_a_row = 0 if progressed else in_a_row
        if in_a_row >= LOCAL_RESTARTS:
            assert isinstance(action, Escalate)
            return
        assert isinstance(action, Restart)
        assert action.delay == RESTART_DELAYS[min(in_a_row, len(RESTART_DELAYS) - 1)]
        in_a_row += 1


def test_an_outcome_survives_the_pipe_and_garbage_is_a_kill() -> None:
    outcome = Outcome(Ended.FAILED, "DataPlaneError: bolt:a:0 closed its connection")
    assert Outcome.from_json(outcome.to_json(), True) == replace(outcome, progressed=True)
    assert Outcome.from_json('{"ended": "fail', False).ended is Ended.KILLED
    assert Outcome.from_json('{"ended": "nonsense"}', False).ended is Ended.KILLED


def test_only_a_stop_longer_than_the_session_is_replaced() -> None:
    assert not replace_stopped(6.0, 6.0)
    assert not replace_stopped(8.9, 6.0)
    assert replace_stopped(9.1, 6.0)


# -- the supervisor, forking stand-ins -------------------------------------------------------

ASSIGNMENT = Assignment("topology.py", "t", "bolt:counts:0", "zk", "kafka", "/snapshots",
                        session_timeout=0.2)


def _script(*outcomes: Outcome | str) -> tuple[Body, Callable[[], list[int | None]]]:
    """A body that plays ``outcomes`` in turn (``"kill"``: SIGKILL itself; ``"stop"``:
    SIGSTOP itself, then end as told by the next one), counting incarnations in a file."""
    counter = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"supervise-{os.getpid()}-"
                           f"{time.monotonic_ns()}")

    def body(assignment: Assignment, channel: Channel, warm: Any) -> Outcome:
        with open(counter, "a") as out:
            out.write(f"{assignment.replaces}\n")
        if warm is not None:
            with open(f"{counter}.warm", "a") as out:
                out.write(f"{warm}\n")
        with open(counter) as done:
            turn = len(done.readlines()) - 1
        step = outcomes[turn]
        if step == "kill":
            channel.progress()
            os.kill(os.getpid(), signal.SIGKILL)
        if step == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
            return Outcome(Ended.RESTARTED, "RestartRequired: resumed")
        assert isinstance(step, Outcome)
        return step

    def read() -> list[int | None]:
        with open(counter) as done:
            lines = [line.strip() for line in done]
        os.unlink(counter)
        return [None if v == "None" else int(v) for v in lines]

    read.warm = lambda: _lines(f"{counter}.warm")  # type: ignore[attr-defined]

    return body, read


def test_the_task_restarts_a_killed_or_failed_incarnation_in_place() -> None:
    body, read = _script("kill", Outcome(Ended.FAILED, "OSError: boom", True),
                              Outcome(Ended.STOPPED))
    supervise(ASSIGNMENT, body)
    replaces = read()
    assert len(replaces) == 3
    assert replaces[0] is None  # the first incarnation replaces nobody
    assert all(isinstance(pid, int) and pid > 0 for pid in replaces[1:])
    assert len(set(replaces[1:])) == 2  # each took over from the one before


def _lines(path: str) -> list[str]:
    try:
        with open(path) as done:
            lines = [line.strip() for line in done]
    except FileNotFoundError:
        return []
    os.unlink(path)
    return lines


def _stand_in(assignment: Assignment, promote: int) -> Any:
    """A standby that holds ``warm <its pid>`` until promoted (or ends with the pipe)."""
    return f"warm {os.getpid()}", read_promotion(promote)


def test_a_standby_becomes_the_next_incarnation_with_what_it_held() -> None:
    """Beside each incarnation a standby is forked; when the incarnation ends, the
    standby is promoted (it replaces that incarnation), and a new one stands by; the last
    is ended with the task."""
    body, read = _script("kill", Outcome(Ended.FAILED, "OSError: boom", True),
                         Outcome(Ended.STOPPED))
    supervise(ASSIGNMENT, body, _stand_in)
    replaces, warm = read(), read.warm()  # type: ignore[attr-defined]
    assert replaces[0] is None and all(isinstance(p, int) for p in replaces[1:])
    assert len(warm) == 2 and all(w.startswith("warm ") for w in warm)
    # The promoted standby ran the second incarnation: the third replaces its pid.
    assert int(warm[0].split()[1]) == replaces[2]
    with pytest.raises(ChildProcessError):  # the last standby ended with the task
        os.waitpid(-1, os.WNOHANG)


def test_a_standby_with_nothing_held_or_failed_starts_as_a_fresh_incarnation() -> None:
    """Holding nothing (the run has no use for its state) or failed, a standby waits all
    the same and, promoted, runs the next incarnation without state."""
    def failing(_a: Assignment, _promote: int) -> Any:
        raise OSError("ZooKeeper is out")

    for stand in (lambda _a, promote: (None, read_promotion(promote)), failing):
        body, read = _script("kill", Outcome(Ended.STOPPED))
        supervise(ASSIGNMENT, body, stand)
        replaces = read()
        assert len(replaces) == 2 and isinstance(replaces[1], int)
        assert read.warm() == []  # type: ignore[attr-defined]
        with pytest.raises(ChildProcessError):  # its own standby ended with the task
            os.waitpid(-1, os.WNOHANG)


def test_a_promotion_says_whom_it_replaces_and_a_closed_pipe_ends_the_standby() -> None:
    read_end, write_end = os.pipe()
    try:
        assert read_promotion(read_end, 0.01) is None
        os.write(write_end, b"4711\n")
        assert read_promotion(read_end, 0.01) == Promotion(4711)
        os.write(write_end, b"\n")
        assert read_promotion(read_end) == Promotion(None)
        os.close(write_end)
        with pytest.raises(EOFError):
            read_promotion(read_end)
    finally:
        os.close(read_end)


def test_the_task_fails_with_a_halt_and_after_too_many_restarts() -> None:
    reason = "the sink is behind: " + "x" * 2000  # longer than a cause: kept whole
    body, read = _script(Outcome(Ended.HALTED, f"TopologyHalt: [halt] {reason}"))
    with pytest.raises(ProcessorFailed, match=r"\[halt\] the sink is behind") as failed:
        supervise(ASSIGNMENT, body)
    read()
    halt = failed.value.__cause__
    assert isinstance(halt, TopologyHalt) and halt.reason == reason
    assert halt_reason("".join(traceback.format_exception(failed.value))) == reason
    fails = [Outcome(Ended.FAILED, "OSError: boom")] * (LOCAL_RESTARTS + 1)
    body, read = _script(*fails)
    with pytest.raises(ProcessorFailed, match="bolt:counts:0: OSError: boom"):
        supervise(replace(ASSIGNMENT), body)
    assert len(read()) == LOCAL_RESTARTS + 1


def test_a_stopped_incarnation_is_replaced_after_its_session_and_ends_with_the_task() -> None:
    """Stopped past 1.5 session timeouts: the next incarnation starts (replacing nobody:
    the stopped one's session expired); the stopped one is left alone while the task runs
    (it would find its session lost if it resumed) and killed and reaped when it ends."""
    body, read = _script("stop", Outcome(Ended.STOPPED))
    stopped: list[int] = []

    def resume_later() -> None:  # the stopped one is the supervisor's child: find it
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not stopped:
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        with open(f"/proc/{entry}/stat") as stat:
                            fields = stat.read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if fields[0] == "T" and int(fields[1]) == os.getpid():
                        stopped.append(int(entry))
            time.sleep(0.05)

    watcher = threading.Thread(target=resume_later)
    watcher.start()
    started = time.monotonic()
    supervise(ASSIGNMENT, body)
    watcher.join()
    assert time.monotonic() - started >= 0.3  # waited out 1.5 sessions
    assert read() == [None, None]
    assert stopped
    with pytest.raises(ProcessLookupError):  # the task ended: it took the left one along
        os.kill(stopped[0], 0)
