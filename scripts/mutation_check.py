"""Does the chaos harness catch a broken runtime? Break one thing at a time and see.

Each mutation is applied to a copy of the committed tree (``git archive HEAD``, or with
``--working-tree`` the working tree's files; this checkout is never touched), and
``hailstorm chaos`` runs from that copy on its own embedded stack. A control run without
any mutation must pass; every mutation must make the run end with a report that fails
(something lost, duplicated or wrong against either oracle, the two models disagreeing, a
fault that never recovered, or an unexplained restart). A run that fails without a report
(a crash) counts as neither: the script says so and fails. The results are recorded in
docs/chaos.md.

Mutations of code the reference model runs itself (the router, the lateness judge) are
checked at unit level instead (``check="oracle"``): ``tests/unit/test_oracle.py`` runs in
the mutated copy, where :func:`hailstorm.run_model` goes through the mutant and the
independent oracle does not, so the two must disagree on some example or random topology
(a control run of the same tests must pass). A race too narrow for a chaos run to hit in
minutes is checked by the whole-data-plane simulation of the pure cores instead
(``check="simulation"``, ``tests/unit/test_bolt_core.py``), which tries interleavings no
real run is timed to.

    .venv/bin/python scripts/mutation_check.py [--only NAME ...] [--messages N]

A mutation whose text no longer matches the code exactly once is an error: rewrite it
rather than let the check pass vacuously.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Edit:
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    edits: tuple[Edit, ...]
    chaos_args: tuple[str, ...]
    """Fault kinds (and more) that give the bug a chance to show."""
    topology: str = "topologies/wordcount.py"
    check: str = "chaos"
    """``"chaos"``: a ``hailstorm chaos`` run must fail; ``"oracle"``: the oracle's unit
    tests must (run_model goes through the mutant, the oracle does not);
    ``"simulation"``: the simulation of spouts and bolts against the model must."""


UNIT_CHECKS = {
    "oracle": "tests/unit/test_oracle.py",
    "simulation": "tests/unit/test_bolt_core.py::test_every_snapshot_equals_the_model_at_its_clock",
}
"""The unit tests each check other than ``"chaos"`` runs in the mutated copy."""


#: The A/B split's rule "a tuple goes to A when offset <= C[p]" is written out in three
#: places (the per-tuple loops inline it for speed); the mutation changes all three.
_AT_THE_CLOCK_TO_B = (
    Edit("hailstorm/processors/segments.py",
         "            if offset <= r.label.get(partition, r.beyond):\n                return i",
         "            if offset < r.label.get(partition, r.beyond):\n                return i"),
    *(Edit("hailstorm/processors/bolt_core.py", old, new) for old, new in [
        ("                i = 0 if o <= first_label_get(p, beyond) else 1",
         "                i = 0 if o < first_label_get(p, beyond) else 1"),
        ("                    groups[0 if o <= first_label_get(p, beyond) else 1].append(t)",
         "                    groups[0 if o < first_label_get(p, beyond) else 1].append(t)"),
    ]),
)

#: A tuple at the clock absorbed into A and into B. Pre-aggregated word count absorbs
#: whole frames without a per-tuple loop when they fall into one segment; while a round is
#: pending the mutation sends every frame through the loop, where the tuple is doubled.
_AT_THE_CLOCK_TO_BOTH = (
    Edit("hailstorm/processors/segments.py",
         "        if self.segment_of(p, high) != segment:\n            return None",
         "        if self.segment_of(p, high) != segment or self.pending:\n"
         "            return None"),
    *(Edit("hailstorm/processors/bolt_core.py", old, new) for old, new in [
        ("                    groups[0 if o <= first_label_get(p, beyond) else 1].append(t)",
         "                    groups[0 if o <= first_label_get(p, beyond) else 1].append(t)\n"
         "                    if o == first_label_get(p, beyond):\n"
         "                        groups[1].append(t)"),
    ]),
)

MUTATIONS = (
    Mutation(
        "none", "control: the code as it is", (),
        ("--kinds", "processor,zombie,stall,zk-session,negotiator", "--kills", "5"),
    ),
    Mutation("none-oracle", "control: the oracle's unit tests on the code as it is", (), (),
             check="oracle"),
    Mutation(
        "router-two-instances",
        "a key's second tuple goes to the next instance (the router splits a key over two)",
        (Edit("hailstorm/routing.py", "            return memo[key]\n",
              "            return (memo[key] + 1) % self.parallelism\n"),),
        (), check="oracle",
    ),
    Mutation(
        "lateness-off-by-one",
        "a tuple is late only once its window closed strictly before the stream time",
        (Edit("hailstorm/lateness.py", "                if closing <= now:",
              "                if closing < now:"),),
        (), check="oracle",
    ),
    Mutation(
        "batch-doubles-a-key",
        "a spout's pre-aggregation counts the first key of each chunk it stages twice",
        (Edit("hailstorm/engine/combining.py",
              "                groups.values.update(keys)  #",
              "                groups.values.update(keys + keys[:1])  #"),),
        ("--kinds", "processor", "--phases", "Flowing"),
    ),
    Mutation(
        "batch-drops-a-key",
        "a spout's pre-aggregation leaves the first key of each chunk it stages out",
        (Edit("hailstorm/engine/combining.py",
              "                groups.values.update(keys)  #",
              "                groups.values.update(keys[1:])  #"),),
        ("--kinds", "processor", "--phases", "Flowing"),
    ),
    Mutation(
        "compaction-watermark",
        "a compacting bolt forwards the watermark before the rows it held back",
        (Edit("hailstorm/processors/bolt_core.py",
              "            if outgoing is not None:\n"
              "                actions.append(ForwardWatermark(outgoing))\n"
              "        return actions\n\n    @property",
              "            if outgoing is not None:\n"
              "                actions.insert(0, ForwardWatermark(outgoing))\n"
              "        return actions\n\n    @property"),),
        ("--kinds", "processor,stall", "--phases", "Flowing", "--kills", "6"),
    ),
    Mutation(
        "sink-fencing",
        "the sink writer no longer fences: no epoch check, no compare-and-set of progress",
        (Edit("hailstorm/sinks/writer.py",
              "                if newest > self.epoch:\n"
              "                    raise self._superseded(newest)\n"
              "                if not same_clock(stored, expected):",
              "                if False:\n"
              "                    raise self._superseded(newest)\n"
              "                if False:"),),
        ("--kinds", "zombie"),
    ),
    Mutation(
        "tuple-at-clock-to-both",
        "a tuple at the round's clock is absorbed into A and into B",
        _AT_THE_CLOCK_TO_BOTH,
        ("--kinds", "stall", "--phases", "Flowing", "--kills", "6"),
    ),
    Mutation(
        "tuple-at-clock-to-b",
        "a tuple at the round's clock goes to B instead of A (the boundary off by one)",
        _AT_THE_CLOCK_TO_B,
        ("--kinds", "stall", "--phases", "Flowing", "--kills", "6"),
    ),
    Mutation(
        "barrier-unknown-to-b",
        "in a barrier round, a partition whose part has not arrived yet sends its tuples to "
        "B (they belong below the round)",
        (Edit("hailstorm/processors/segments.py",
              "                r.beyond = UNKNOWN\n",
              "                r.beyond = NOTHING\n"),),
        (), check="simulation",
    ),
    Mutation(
        "barrier-part-kept",
        "a bolt keeps a barrier round's parts to itself: the bolt after it learns the round "
        "from the whole clock only, after tuples beyond it",
        (Edit("hailstorm/processors/bolt_core.py",
              "        return [ForwardClock(epoch, learned, partial), *self._write_covered()]",
              "        return [*([] if partial else [ForwardClock(epoch, learned)]),\n"
              "                *self._write_covered()]"),),
        ("--kinds", "processor", "--phases", "Flowing"),
        "topologies/top_spenders.py",
    ),
    Mutation(
        "snapshot-reload",
        "a restarted bolt forgets to reload its snapshot (starts empty, claims the round)",
        (Edit("hailstorm/runtime/bolt.py",
              "        _clock, state = self.store.load_for_instance(\n"
              "            refs, self.spec.state, self.id.instance, self.spec.parallelism,\n"
              "            migrate=upgrade.migrate if upgrade else None)",
              "        state = self.spec.state.empty()"),),
        ("--kinds", "processor", "--phases", "Flowing"),
    ),
    Mutation(
        "fault-does-nothing",
        "the harness itself: a processor kill that silently kills nothing",
        (Edit("hailstorm/dev/harness/run.py",
              "            os.kill(victim, signal.SIGKILL)\n",
              "            pass  # the mutant: no signal is sent\n"),),
        ("--kinds", "processor", "--phases", "Flowing"),
    ),
    Mutation(
        "late-record-twice",
        "a spout routes every late tuple to its bolt's late topic twice",
        (Edit("hailstorm/quarantine.py",
              "                self._writer(letter.topic).add([(m.origin, letter)])\n"
              "                continue\n",
              "                self._writer(letter.topic).add([(m.origin, letter)] * 2)\n"
              "                continue\n"),),
        ("--kinds", "processor", "--phases", "Flowing"),
        "topologies/pageviews.py",
    ),
    Mutation(
        "topic-progress",
        "a topic sink ignores its stored progress and writes again what it already wrote",
        (Edit("hailstorm/sinks/topic.py",
              "        self._view = dict(stored)\n        self._buffer.resync(stored)\n",
              "        self._view = dict(stored)\n        self._buffer.resync({})\n"),),
        ("--kinds", "processor", "--phases", "Flowing"),
        "topologies/wordstream.py",
    ),
    Mutation(
        "topic-fencing",
        "a topic sink's transactional id changes with the epoch, so a zombie is not fenced",
        (Edit("hailstorm/sinks/topic.py",
              '"transactional.id": transactional_id(self.sink_id),',
              '"transactional.id": f"{transactional_id(self.sink_id)}:{self.epoch}",'),),
        ("--kinds", "zombie"),
        "topologies/wordstream.py",
    ),
)


def mutated_copy(mutation: Mutation, root: Path, working_tree: bool = False) -> Path:
    """The committed tree (HEAD; or the working tree's files, untracked ones included),
    copied under ``root`` with ``mutation`` applied."""
    copy = root / mutation.name
    copy.mkdir(parents=True)
    if working_tree:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=REPO, check=True,
                                capture_output=True).stdout.decode().split("\0")
        names = [n for n in listed if n and (REPO / n).is_file()]
        archive = subprocess.run(["tar", "-c", "--null", "-T", "-"], cwd=REPO, check=True,
                                 input="\0".join(names).encode(), capture_output=True).stdout
    else:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, check=True,
                                 capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
    for edit in mutation.edits:
        path = copy / edit.path
        text = path.read_text()
        found = text.count(edit.old)
        if found != 1:
            raise SystemExit(f"mutation {mutation.name}: {edit.path} has the text to change "
                             f"{found} times, not once; update the mutation")
        path.write_text(text.replace(edit.old, edit.new))
    return copy


def run(mutation: Mutation, root: Path, messages: int, kills: int, seed: int,
        working_tree: bool) -> tuple[int, str]:
    copy = mutated_copy(mutation, root, working_tree)
    env = dict(os.environ, PYTHONPATH=str(copy), PYSPARK_PYTHON=sys.executable)
    if mutation.check in UNIT_CHECKS:
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
             UNIT_CHECKS[mutation.check]], cwd=copy, env=env, capture_output=True, text=True,
            timeout=1800)
        return tests.returncode, tests.stdout + tests.stderr
    result = subprocess.run(
        [sys.executable, "-m", "hailstorm", "chaos", mutation.topology,
         "--messages", str(messages), "--kills", str(kills), "--seed", str(seed),
         "--rate", "1500", *mutation.chaos_args],
        cwd=copy, env=env, capture_output=True, text=True, timeout=1800)
    return result.returncode, result.stdout + result.stderr


def verdict(output: str) -> str:
    """The report's lines that say what went wrong (or right)."""
    keep = ("result:", "by hand:", "oracle:", "BUG:", "  lost:", "  duplicated:",
            "  wrong:", "zombies:", "restarts:", "never", "error:", "Error:", "FAILED ",
            "E       assert", "E         Left contains", "E         At index")
    lines = [line.strip() for line in output.splitlines()
             if line.startswith(keep) or any(k in line for k in ("never recovered",))]
    return "\n".join(lines[:8]) or output.strip()[-800:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="mutation names (default: all)")
    parser.add_argument("--messages", type=int, default=60_000)
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--working-tree", action="store_true",
                        help="mutate the working tree's files instead of HEAD's (to try a "
                        "change before committing it)")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="hailstorm-mutants-") as tmp:
        for mutation in chosen:
            print(f"== {mutation.name}: {mutation.what}", flush=True)
            started = time.monotonic()
            code, output = run(mutation, Path(tmp), args.messages, args.kills, args.seed,
                               args.working_tree)
            if mutation.check in UNIT_CHECKS:  # pytest's summary line, a failed test in it
                reported = re.search(r"^=* ?\d+ (passed|failed)", output, re.M) is not None
            else:
                reported = "\nresult: " in output
            caught = code != 0 and reported
            expected = not mutation.name.startswith("none")
            ok = caught == expected and (code == 0 or reported)
            failures += not ok
            outcome = ("caught" if caught else "passed" if code == 0 else
                       "crashed without a report") + ("" if ok else "  <-- WRONG")
            print(re.sub(r"^", "   ", verdict(output), flags=re.M))
            kept = Path(tempfile.gettempdir()) / f"hailstorm-mutant-{mutation.name}.log"
            kept.write_text(output)
            print(f"   full output: {kept}")
            print(f"   exit {code}: {outcome} ({time.monotonic() - started:.0f} s)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
