"""A new bolt catching up on its own clock while the others commit (docs/upgrading.md):
the topologies, the log of committed rounds and the plan's output shared by
``tests/integration/test_runtime_catch_up.py`` and ``bench/catch_up.py``."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from hailstorm.dev.harness.compare import Comparison
from hailstorm.dev.harness.deployment import Deployment
from hailstorm.dev.harness.stack import StackAddresses
from hailstorm.protocol.clock import Clock, clock_to_json

__all__ = ["CATCH_UP_BASE", "CATCH_UP_NEW", "CommittedRound", "RoundLog", "comparison_line",
           "plan_output"]

CATCH_UP_BASE = '''
from hailstorm import Count, Table, Topology, per_key

topology = Topology("catch_up")
lines = topology.spout("lines", topic="{topic}", decoder="text", explode=str.split)
counts = topology.bolt("counts", inputs=[lines], key=lambda w: w.lower(),
                       state=per_key(Count()), lift=lambda w: 1, parallelism=2)
'''
"""The deployed topology (``{topic}``): a word count without a sink."""

CATCH_UP_NEW = '''
cased = topology.bolt("cased", inputs=[lines], key=lambda w: w, state=per_key(Count()),
                      lift=lambda w: 1, emit=lambda w, n: [(w, n)], parallelism=2)
topology.sink("cased_counts", [cased],
              Table("{table}", columns={{"word": "text", "n": "bigint"}}, key=["word"],
                    mode="upsert"))
'''
"""What the upgrade adds to :data:`CATCH_UP_BASE`: a new bolt and its table (``{table}``)."""


@dataclass(frozen=True)
class CommittedRound:
    """One committed round as the log saw it."""

    epoch: int
    seen_at: float
    """``time.monotonic()`` when the log read it."""
    clock: Clock
    clocks: Mapping[str, Clock]


class RoundLog:
    """Every committed round of ``run``, read every 0.1 s on a thread from creation on
    (until the process ends: the thread is a daemon)."""

    def __init__(self, run: Deployment, poll: float = 0.1) -> None:
        self.run = run
        self.poll = poll
        self.rounds: list[CommittedRound] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._follow, name="round-log", daemon=True).start()

    def _follow(self) -> None:
        while True:
            try:
                record = self.run.committed()
            except Exception:  # the stack went away at the end of a test
                return
            with self._lock:
                if record is not None and (not self.rounds
                                           or record.epoch != self.rounds[-1].epoch):
                    self.rounds.append(CommittedRound(record.epoch, time.monotonic(),
                                                      dict(record.clock), dict(record.clocks)))
            time.sleep(self.poll)

    def catching_up(self, node: str) -> list[CommittedRound]:
        """The rounds committed while ``node`` had its own clock."""
        with self._lock:
            return [r for r in self.rounds if node in r.clocks]

    def joined(self) -> bool:
        """Some node caught up on its own clock and, in the last round, none does."""
        with self._lock:
            return any(r.clocks for r in self.rounds) and not self.rounds[-1].clocks

    def table(self, since: float) -> str:
        """One line per round: when (seconds after ``since``), the round's clock and each
        node's own."""
        with self._lock:
            rounds = list(self.rounds)
        lines = []
        for r in rounds:
            own = "; ".join(f"{n} at {clock_to_json(c)}" for n, c in sorted(r.clocks.items()))
            lines.append(f"round {r.epoch} at +{r.seen_at - since:.1f} s: "
                         f"{clock_to_json(r.clock)}" + (f"; {own}" if own else ""))
        return "\n".join(lines)


def plan_output(stack: StackAddresses, module: str, name: str) -> str:
    """``hailstorm plan MODULE --name NAME`` (with Kafka) in this process: its output,
    raising when it refused."""
    from click.testing import CliRunner

    from hailstorm.cli import main

    env = {"HAILSTORM_ZK": stack.zk, "HAILSTORM_SNAPSHOTS": str(stack.snapshots),
           "HAILSTORM_KAFKA": stack.kafka}
    result = CliRunner().invoke(main, ["plan", module, "--name", name], env=env)
    if result.exit_code != 0:
        raise AssertionError(f"hailstorm plan exited {result.exit_code}: {result.output}")
    return result.output


def comparison_line(comparison: Comparison) -> str:
    """``N keys: L lost, D duplicated, W wrong`` against the model (and the oracle's)."""
    return (f"{comparison.keys_compared} keys and rows against the model: {comparison.lost} "
            f"lost, {comparison.duplicated} duplicated, {comparison.wrong} wrong; "
            + "; ".join(comparison.oracle_lines()))
