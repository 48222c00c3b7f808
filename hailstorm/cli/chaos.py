"""``hailstorm chaos``: a topology under injected faults on an embedded stack (or the
``HAILSTORM_*`` one), checked against the reference model by
:func:`hailstorm.dev.harness.run_chaos`."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import click

from hailstorm import config
from hailstorm.cli.group import _handle_errors, console, fail, main, out
from hailstorm.dev.services import DevStack

DEFAULT_PHASES = "Flowing,SpoutsPaused,RoundPending,Initialize,SpoutsRewind"
"""Every master state a fault can be timed for (the harness's ``MASTER_PHASES``, which a
unit test holds this to; the harness is imported only when the command runs)."""


def _interrupted(_signum: int, _frame: object) -> NoReturn:
    raise KeyboardInterrupt


def _listed(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    """The comma-separated names of ``text``, each one of ``known`` (else a clear error)."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        fail(f"unknown {what}(s) {', '.join(unknown) or '(none)'}; known: {', '.join(known)}")
    return names


@main.command("chaos")
@click.argument("topology_ref", metavar="TOPOLOGY")
@click.option("--messages", type=click.IntRange(min=1), default=200000, show_default=True,
              help="Messages to produce (the topology's workload generator).")
@click.option("--kills", type=click.IntRange(min=0), default=5, show_default=True,
              help="Faults to inject, one after another, each after the last recovery.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seeds the workload, the fault plan and the victims.")
@click.option("--workload",
              help="The topology's workload generator (default: its first; wordcount and "
                   "wordstream: zipf for realistic text over 50,000 words, uniform for 80 "
                   "equally likely words; user_totals and top_spenders: zipf for JSON "
                   "events of 2,000,000 users; pageviews: zipf for Avro page views, some "
                   "late; enriched_views: zipf for JSON views, clicks and profiles on its "
                   "three topics).")
@click.option("--kinds",
              help="Fault kinds to draw from, of processor (kill -9 of a processor's process: "
                   "its Spark task restarts it), task (kill -9 of a processor's Spark task: "
                   "Spark resubmits the stage), negotiator, zk-session, zombie "
                   "(a sink stopped until its replacement committed, then resumed), stall (a "
                   "bolt stopped for a few seconds, no restart), pair (two processors' "
                   "processes killed at the same moment) and broker (default: every kind but "
                   "pair and broker; every kind is used once when --kills allows; a kind "
                   "named n times is used n times).")
@click.option("--phases", default=DEFAULT_PHASES, show_default=True,
              help="Master states to time faults for (each used once when --kills allows; "
                   "RoundPending: a round's clock is out, the bolts and sinks saving it; "
                   "Initialize and SpoutsRewind first kill a processor to start a recovery "
                   "to hit: two faults at once). Broker faults always hit a flowing topology.")
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1),
              help="Messages per second the background producer writes (default: spread "
                   "over about 10 s per fault, 20 s with broker faults, 1000..20000/s, so "
                   "faults hit flowing data).")
@click.option("--spacing", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Mean seconds between a recovery and the next fault.")
@click.option("--brokers", type=click.IntRange(min=1),
              help="Kafka nodes of the embedded stack (default: 3 when --kinds has broker, "
                   "else 1); broker faults need at least 3.")
@click.option("--database", type=click.Choice(["postgresql", "sqlite"]), default="postgresql",
              show_default=True,
              help="Where the sinks write: a new database on the stack's PostgreSQL (with "
                   "--use-env, the server of $HAILSTORM_DATABASE_URL), or a SQLite file "
                   "beside the logs.")
@click.option("--use-env", is_flag=True,
              help="Use the HAILSTORM_* stack instead of an embedded one of its own (broker "
                   "faults: a 'hailstorm dev up --brokers 3' stack, named by --state-dir).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory of the embedded stack (default: a temporary one); with "
                   f"--use-env, of the dev stack whose Kafka nodes broker faults kill "
                   f"(default: {config.DEFAULT_STATE_DIR}).")
@click.option("--may-miss", "may_miss",
              help="Fault kinds allowed to be ineffective (to hit a topology with nothing "
                   "uncommitted, or to leave out some evidence that they happened: the "
                   "victim gone, a recovery naming it, an expired session, a fenced zombie) "
                   "without failing the run; the report names them (default: none, every "
                   "fault must bite).")
@click.option("--deploy", "deploys", multiple=True, metavar="MODULE",
              help="A changed version of TOPOLOGY (same topology name) to deploy mid-run, "
                   "as an operator does: the driver stopped (a drain), then 'hailstorm run "
                   "MODULE' under the same name, the negotiators running on; at a seeded "
                   "place among the faults (repeatable: deployed in this order). Bolts it "
                   "adds with start='latest' (and the new sinks they feed) are compared "
                   "with the model over the messages after the committed clock it started "
                   "from, every other node with the model over all of them.")
@click.option("--timeout", type=click.FloatRange(min=1), default=240.0, show_default=True,
              metavar="SECONDS",
              help="How long to wait for the topology to flow, for each recovery and for the "
                   "final commit (more on a loaded machine).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON to this file.")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the driver's and the negotiators' logs go (created if missing); by "
                   "default a new directory under the system's temporary one. Either is "
                   "kept and named at the end.")
@click.option("--victims", default="spout,bolt,sink", show_default=True, metavar="ROLES",
              help="The roles the processor, task, zk-session and pair faults draw their "
                   "processors from (zombies are sinks, stalls bolts).")
@click.option("--local-recovery", is_flag=True,
              help="Run the topology with 'hailstorm run --local-recovery': a failed bolt "
                   "fed by spouts and feeding sinks restarts alone (each fault's line says "
                   "which processors restarted).")
@click.option("--standby", is_flag=True,
              help="With --local-recovery, also --standby: a warm standby holding each such "
                   "bolt instance's committed state becomes its next incarnation.")
@_handle_errors
def chaos(topology_ref: str, messages: int, kills: int, seed: int, workload: str | None,
          kinds: str | None, phases: str, partitions: int, rate: float | None, spacing: float,
          brokers: int | None, database: str, use_env: bool, state_dir: Path | None,
          may_miss: str | None, deploys: tuple[str, ...], timeout: float,
          json_path: Path | None, log_dir: Path | None, victims: str, local_recovery: bool,
          standby: bool) -> None:
    """Run TOPOLOGY under injected faults and check it against the reference model.

    Produces a known workload, SIGKILLs processors and the negotiator leader, expires
    ZooKeeper sessions, makes zombies of sinks (stopped until their replacement committed,
    then resumed), stalls bolts and, with the broker kind, SIGKILLs the Kafka node leading
    the most source partitions and starts it again a few seconds later (--kills of them, at
    random with --seed; and a mid-run deploy of each --deploy module), each timed for a
    master state (--phases), waits until everything is committed, compares every bolt's
    committed state, every sink table (by default in a new PostgreSQL database), every
    topic sink's output, every dead letter and late record (as a read_committed consumer
    sees them) and every rejected row with run_model and the independent oracle and prints
    the report. Exits 1 when anything was lost, duplicated or wrong, a fault never
    recovered, a fault did not bite (it hit an idle topology, or left no evidence that it
    happened; see --may-miss), the topology restarted without a fault to explain it, or
    restarted more or less often than the plan of faults implies.

    Broker faults need a Kafka cluster of at least 3 nodes: the embedded stack then starts
    3 (--brokers), and --use-env refuses a smaller cluster.
    """
    import os
    import shutil
    import tempfile

    from confluent_kafka import KafkaException

    from hailstorm.dev.harness import (
        DEFAULT_FAULT_KINDS,
        FAULT_KINDS,
        MASTER_PHASES,
        MIN_KAFKA_NODES,
        SQLITE,
        VICTIM_ROLES,
        WORKLOADS,
        BrokerControl,
        ChaosSchedule,
        HarnessError,
        StackAddresses,
        broker_fault_problem,
        kafka_nodes,
        run_chaos,
    )
    from hailstorm.sinks.urls import is_postgres_url
    from hailstorm.topology import load_topology

    if standby and not local_recovery:
        raise click.UsageError("--standby serves --local-recovery")
    chosen = _listed(kinds or ",".join(DEFAULT_FAULT_KINDS), FAULT_KINDS, "fault kind")
    excused = _listed(may_miss, FAULT_KINDS, "fault kind") if may_miss is not None else ()
    timed = _listed(phases, MASTER_PHASES, "master state")
    roles = _listed(victims, VICTIM_ROLES, "role")
    topology = load_topology(topology_ref)
    generators = WORKLOADS.get(topology.name)
    if generators is None:
        fail(f"no workload generator for topology {topology.name!r}; "
             f"known: {', '.join(sorted(WORKLOADS))}")
    workload = workload or next(iter(generators))
    if workload not in generators:
        fail(f"no workload {workload!r} for topology {topology.name!r}; "
             f"known: {', '.join(generators)}")
    generate = generators[workload]
    for module in deploys:
        deployed = load_topology(module)
        if deployed.name != topology.name:
            fail(f"--deploy {module}: its topology is {deployed.name!r}, not {topology.name!r} "
                 "(a deploy changes the topology it replaces)")
    schedule = ChaosSchedule(kinds=chosen, count=kills, spacing=spacing,  # type: ignore[arg-type]
                             seed=seed, phases=timed, deploys=deploys)  # type: ignore[arg-type]
    broker_faults = "broker" in chosen
    if rate is None:
        # A broker fault lasts until the node is back (restarting a JVM): allow for longer.
        per_fault = 20.0 if broker_faults else 10.0
        rate = min(20000.0, max(1000.0, messages / (per_fault * kills + 10.0)))
    if use_env and brokers is not None:
        fail("--brokers sizes the embedded stack; with --use-env the cluster is the one "
             "$HAILSTORM_KAFKA names")
    nodes = brokers if brokers is not None else (MIN_KAFKA_NODES if broker_faults else 1)
    if broker_faults and not use_env:
        problem = broker_fault_problem(nodes)
        if problem:
            fail(problem)
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    logs = log_dir or Path(tempfile.mkdtemp(prefix="hailstorm-chaos-logs-"))
    signal.signal(signal.SIGTERM, _interrupted)  # a plain kill stops what it started too
    stack: DevStack | None = None
    temporary: Path | None = None
    with console.status("preparing") as status:
        def progress(message: str) -> None:
            console.log(message)
            status.update(message)

        try:
            control: BrokerControl | None = None
            if use_env:
                settings = config.Settings.from_env()
                addresses = StackAddresses(settings.require_zk(), settings.require_kafka(),
                                           settings.snapshot_location(), settings.database_url)
                if database == "postgresql" and not is_postgres_url(settings.database_url):
                    fail("--database postgresql with --use-env needs $HAILSTORM_DATABASE_URL "
                         "to name a PostgreSQL server (or pass --database sqlite)")
                if broker_faults:
                    try:
                        problem = broker_fault_problem(kafka_nodes(addresses.kafka))
                    except KafkaException as exc:
                        fail(f"Kafka at {addresses.kafka} did not answer: {exc}")
                    if problem:
                        fail(problem)
                    dev_stack = DevStack(state_dir or Path(config.DEFAULT_STATE_DIR))
                    running = dev_stack.load()
                    if running is None or running.kafka is None \
                            or running.kafka_bootstrap != addresses.kafka:
                        fail(f"broker faults kill nodes of the dev stack that runs "
                             f"$HAILSTORM_KAFKA ({addresses.kafka}), and there is none under "
                             f"{dev_stack.state_dir}: pass its --state-dir")
                    control = dev_stack
            else:
                if state_dir is None:
                    temporary = Path(tempfile.mkdtemp(prefix="hailstorm-chaos-"))
                    os.chmod(temporary, 0o755)  # the 'postgres' user must reach its data dir
                root = state_dir or temporary
                assert root is not None
                stack = DevStack(root, startup_timeout=90, progress=progress,
                                 kafka_brokers=nodes)
                addresses = StackAddresses.from_env(stack.up().env())
                control = stack
            progress(f"generating {messages} messages ({workload} workload)")
            values = generate(messages, seed)
            report = run_chaos(addresses, topology_ref, values, schedule, log_dir=logs,
                               partitions=partitions, rate=rate, progress=progress,
                               timeout=timeout,
                               brokers=control,
                               database=SQLITE if database == "sqlite" else None,
                               may_miss=excused, local_recovery=local_recovery,
                               standby=standby, victims=roles)
        except HarnessError as exc:
            fail(f"{exc} (logs in {logs})")
        finally:
            if stack is not None:
                stack.down(wipe=stack.created)
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
    out.print(report.to_text(), markup=False)
    out.print(f"logs: {logs}", markup=False)
    if json_path is not None:
        json_path.write_text(report.to_json() + "\n")
    sys.exit(0 if report.ok else 1)
