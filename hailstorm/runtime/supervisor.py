"""A processor's Spark task as the supervisor of its instance's incarnations.

:func:`supervise` forks a process per incarnation and starts the next one when it ends, as
:class:`~hailstorm.runtime.supervision.Supervision` decides (the rules are in
:mod:`hailstorm.runtime.supervision`). An incarnation tells its task how it ended over a
pipe (one JSON line, after a ``progress`` line once a round of its run committed); one that
died without a word was killed. Each incarnation dies with its task (``PR_SET_PDEATHSIG``):
when Spark kills a task, its processor goes with it, as when the task ran the processor
itself. With a standby (a bolt's, ``--standby``: :mod:`hailstorm.runtime.standby`), a
second process forked beside each incarnation holds the instance's committed state, and
the task promotes it to the next incarnation instead of forking a fresh one.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hailstorm.halt import TopologyHalt, halt_reason
from hailstorm.runtime.assignment import Assignment
from hailstorm.runtime.causes import ProcessorFailed
from hailstorm.runtime.supervision import (
    Ended,
    Escalate,
    Finish,
    Outcome,
    Supervision,
    replace_stopped,
)

if TYPE_CHECKING:
    from hailstorm.runtime.standby import Promoted

__all__ = ["Body", "Channel", "Incarnation", "Promotion", "StandBy", "Standby", "read_promotion",
           "supervise"]

log = logging.getLogger("hailstorm.supervisor")

PROGRESS = b"progress\n"
POLL = 0.1
"""How often the task looks at an incarnation that is stopped, or at stopped ones it left."""
_PR_SET_PDEATHSIG = 1


class Channel:
    """An incarnation's end of the pipe to its task."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def progress(self) -> None:
        """Say that a round of the run this incarnation joined committed (the shell says it
        once: :attr:`~hailstorm.runtime.processor.Shell.on_progress`)."""
        self._write(PROGRESS)

    def finish(self, outcome: Outcome) -> None:
        self._write(outcome.to_json().encode() + b"\n")

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # a task that left this incarnation reads no more
            os.write(self.fd, data)


Body = Callable[[Assignment, Channel, Any], Outcome]
"""Runs one incarnation in its own process, with what a standby held (None: nothing), and
says how it ended."""

StandBy = Callable[[Assignment, int], "Promoted"]
"""Keeps a bolt instance's state warm until promoted through the pipe it reads
(:func:`~hailstorm.runtime.standby.stand_by`; :class:`EOFError`: the task closed it)."""


@dataclass(frozen=True)
class Promotion:
    """The task's word to its standby: become the next incarnation."""

    replaces: int | None
    """The pid of the incarnation it replaces (None: one whose ``living`` node went with its
    session)."""


def read_promotion(promote: int, wait: float | None = None) -> Promotion | None:
    """What the task said on a standby's pipe ``promote`` within ``wait`` s (None: until
    it says something): a :class:`Promotion`, else None. Raises :class:`EOFError` when the
    task closed the pipe (it ends the standby)."""
    ready, _, _ = select.select([promote], [], [], wait)
    if not ready:
        return None
    line = os.read(promote, 64)
    if not line:
        raise EOFError("the task closed the standby's pipe")
    text = line.strip()
    return Promotion(int(text) if text else None)


def _fork(run: Callable[[], None], keep: tuple[int, ...], close: tuple[int, ...]) -> int:
    """Fork a process that dies with this task and runs ``run`` (never returning into
    Spark's worker loop: it exits 0 when ``run`` returns, 1 when it raised); the child
    closes ``close`` and this process closes ``keep`` (the child's ends of the pipes)."""
    task = os.getpid()
    pid = os.fork()
    if pid == 0:
        for fd in close:
            os.close(fd)
        code = 1
        try:
            _die_with(task)
            run()
            code = 0
        except BaseException:  # broad: last resort of a forked process: the task sees
            log.exception("the incarnation failed outside its processor")  # KILLED
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)
    for fd in keep:
        os.close(fd)
    return pid


class Incarnation:
    """One forked process running an incarnation of the instance."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid
        self.pipe = pipe
        self._said = b""
        os.set_blocking(pipe, False)

    @classmethod
    def start(cls, assignment: Assignment, body: Body) -> Incarnation:
        read, write = os.pipe()

        def run() -> None:
            channel = Channel(write)
            channel.finish(body(assignment, channel, None))

        return cls(_fork(run, keep=(write,), close=(read,)), read)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.pipe, 65536):
                self._said += chunk

    @property
    def progressed(self) -> bool:
        self._drain()
        return PROGRESS in self._said

    def outcome(self, status: int) -> Outcome:
        """How it ended, from its wait status and what it said."""
        progressed = self.progressed
        os.close(self.pipe)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            return Outcome(Ended.KILLED, f"killed by {name}", progressed)
        last = self._said.replace(PROGRESS, b"").strip().rsplit(b"\n", 1)[-1]
        return Outcome.from_json(last.decode(errors="replace"), progressed)

    def wait(self, session_timeout: float, left: list[Incarnation]) -> Outcome:
        """Wait until it ends, or has been stopped past its session (then it joins
        ``left``: stopped incarnations the task left alone, reaped when they end)."""
        stopped_since: float | None = None
        while True:
            polling = stopped_since is not None or bool(left)
            flags = os.WUNTRACED | os.WCONTINUED | (os.WNOHANG if polling else 0)
            _reap(left)
            pid, status = os.waitpid(self.pid, flags)
            if pid == 0:
                stopped = 0.0 if stopped_since is None else time.monotonic() - stopped_since
                if replace_stopped(stopped, session_timeout):
                    left.append(self)
                    return Outcome(Ended.LOST, f"stopped for {stopped:.1f} s, longer than "
                                   "its ZooKeeper session", self.progressed)
                time.sleep(POLL)
            elif os.WIFSTOPPED(status):
                stopped_since = time.monotonic()
            elif os.WIFCONTINUED(status):
                stopped_since = None
            else:
                return self.outcome(status)


    def end(self) -> None:
        """SIGKILL it if it still runs, and reap it."""
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


class Standby:
    """A process forked to stand by (:mod:`hailstorm.runtime.standby`): it keeps the
    instance's committed state warm until :meth:`promote` makes it the next incarnation."""

    def __init__(self, pid: int, promote: int, pipe: int) -> None:
        self.pid = pid
        self._promote = promote
        self._pipe = pipe

    @classmethod
    def start(cls, assignment: Assignment, body: Body, stand: StandBy) -> Standby:
        promote_read, promote_write = os.pipe()
        read, write = os.pipe()

        def run() -> None:
            try:
                warm, promotion = stand(assignment, promote_read)
            except EOFError:
                return  # the task ends it
            except Exception:  # broad: it waits all the same, to start without its state
                log.exception("the standby of %s failed", assignment.processor)
                try:
                    waited = read_promotion(promote_read)
                except EOFError:
                    return
                assert waited is not None
                warm, promotion = None, waited
            channel = Channel(write)
            channel.finish(body(replace(assignment, replaces=promotion.replaces), channel,
                                warm))

        pid = _fork(run, keep=(promote_read, write), close=(promote_write, read))
        return cls(pid, promote_write, read)

    @property
    def standing(self) -> bool:
        """Whether it still runs (it ends only with the task, or when it crashed)."""
        with contextlib.suppress(ChildProcessError):
            pid, _status = os.waitpid(self.pid, os.WNOHANG)
            return pid == 0
        return False

    def promote(self, replaces: int | None) -> Incarnation | None:
        """Make it the next incarnation (replacing the one of pid ``replaces``); None when
        it no longer stands by."""
        if not self.standing:
            self._close()
            return None
        try:
            os.write(self._promote, f"{replaces or ''}\n".encode())
        except OSError:
            self.end()
            return None
        os.close(self._promote)
        log.info("promoted the standby (pid %d) to the next incarnation", self.pid)
        return Incarnation(self.pid, self._pipe)

    def _close(self) -> None:
        for fd in (self._promote, self._pipe):
            with contextlib.suppress(OSError):
                os.close(fd)

    def end(self) -> None:
        """SIGKILL it if it still runs, and reap it."""
        self._close()
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def _reap(left: list[Incarnation]) -> None:
    """Collect the stopped incarnations the task left once they ended (they find their
    session lost when they resume)."""
    for incarnation in list(left):
        with contextlib.suppress(ChildProcessError):
            pid, status = os.waitpid(incarnation.pid, os.WNOHANG)
            if pid == 0 or not (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
                continue
            log.info("the incarnation (pid %d) left behind while stopped ended: %s",
                     incarnation.pid, incarnation.outcome(status).ended.value)
        left.remove(incarnation)


def _die_with(task: int) -> None:
    """Make this process die with the task that forked it (Linux), as a processor run by
    the task itself would; exit at once if the task is already gone."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != task:
        os._exit(1)


def supervise(assignment: Assignment, body: Body, stand: StandBy | None = None) -> None:
    """Run incarnations of ``assignment``'s instance until the policy finishes (return) or
    escalates (raise :class:`~hailstorm.runtime.causes.ProcessorFailed`). With ``stand``,
    a standby beside each incarnation becomes the next one."""
    supervision = Supervision()
    left: list[Incarnation] = []
    standby: list[Standby] = []
    try:
        _supervise(assignment, body, supervision, left, stand, standby)
    finally:  # the task ends: so do the stopped incarnations it left, any running one,
        for incarnation in left:  # and its standby
            incarnation.end()
        for spare in standby:
            spare.end()


def _supervise(assignment: Assignment, body: Body, supervision: Supervision,
               left: list[Incarnation], stand: StandBy | None, standby: list[Standby]
               ) -> None:
    replaces: int | None = None
    while True:
        incarnation = None
        if standby:
            incarnation = standby.pop().promote(replaces)
        if incarnation is None:
            incarnation = Incarnation.start(replace(assignment, replaces=replaces), body)
        try:
            if stand is not None:
                standby.append(Standby.start(assignment, body, stand))
        except OSError as exc:  # no standby this time: the next incarnation reads its state
            log.warning("could not fork a standby: %s", exc)
        try:
            outcome = incarnation.wait(assignment.session_timeout, left)
        except BaseException:
            incarnation.end()
            raise
        action = supervision.after(outcome)
        if isinstance(action, Finish):
            return
        if isinstance(action, Escalate):
            reason = halt_reason(action.cause)
            if reason is not None:  # whole, in the traceback Spark carries to the driver
                halt = TopologyHalt(reason)
                raise ProcessorFailed(assignment.processor, halt) from halt
            raise ProcessorFailed(assignment.processor, action.cause)
        log.warning("incarnation pid %d %s; starting the next one in this task%s (restart "
                    "%d in a row, %d in all)", incarnation.pid, action.reason,
                    f" in {action.delay:.1f} s" if action.delay else "",
                    supervision.in_a_row, supervision.restarts)
        # A dead predecessor's node is taken over at once; a stopped one's session expired.
        replaces = None if outcome.ended is Ended.LOST else incarnation.pid
        time.sleep(action.delay)
