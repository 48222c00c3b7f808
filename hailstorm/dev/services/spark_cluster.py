"""The dev stack's Spark standalone cluster, when asked for (``spark_workers``): a master
and workers from the installed pyspark (a Spark home), each worker offering
``spark_cores`` task slots.
"""

from __future__ import annotations

import os
from pathlib import Path

from hailstorm.dev.services.processes import (
    StackProcesses,
    await_ready,
    free_port,
    java_binary,
    listens,
    log_tail,
    pid_alive,
    pyspark_jars,
)
from hailstorm.dev.services.state import (
    SPARK_MASTER,
    Host,
    ServiceRecord,
    StackState,
    spark_worker_name,
)
from hailstorm.runtime.spark_stage import C1_ONLY


class SparkCluster(StackProcesses):
    """Starts the stack's Spark standalone master and workers (when asked for)."""

    def _up_spark(self, state: StackState) -> None:
        """Start the Spark master and workers that should run and do not (none unless
        asked for: ``spark_workers``)."""
        if self.spark_workers and not state.spark_workers:
            state.spark_workers, state.spark_cores = self.spark_workers, self.spark_cores
        if not state.spark_workers:
            return
        master = state.services.get(SPARK_MASTER)
        if master is None or not pid_alive(master.pid, master.marker):
            self.progress("starting the Spark master")
            state.services[SPARK_MASTER] = self._start_spark_master(state)
            self._save(state)
        url = state.spark_master_url
        assert url is not None
        for worker in range(1, state.spark_workers + 1):
            name = spark_worker_name(worker)
            record = state.services.get(name)
            if record is not None and pid_alive(record.pid, record.marker):
                continue
            self.progress(f"starting {name} ({state.spark_cores} task slots)")
            state.services[name] = self._start_spark_worker(state, worker, url)
            self._save(state)
        self.progress(f"Spark cluster ready at {url}: {state.spark_workers} workers, "
                      f"{state.spark_workers * state.spark_cores} task slots")

    def _spark_argv(self, main_class: str, *args: str) -> list[str]:
        # The master and workers only place executors: C1 alone starts them sooner.
        return [java_binary(), "-Xmx512m", C1_ONLY, "-cp", f"{pyspark_jars()}/*", main_class,
                *args]

    def _spark_env(self, host: Host) -> dict[str, str]:
        import pyspark

        home = str(Path(pyspark.__file__).parent)  # pip's pyspark is a Spark home (bin/, jars/)
        # Without a RELEASE file Spark's launcher looks for build directories to learn the
        # Scala version when a worker starts an executor: pyspark 4 is built for 2.13.
        # SPARK_LOCAL_IP: the executors a worker starts bind and advertise its address too
        # (they would resolve this machine's host name otherwise).
        return dict(os.environ, SPARK_HOME=home, SPARK_SCALA_VERSION="2.13",
                    SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(self.state_dir / "logs"),
                    SPARK_LOCAL_IP=host.address)

    def _start_spark_master(self, state: StackState) -> ServiceRecord:
        host = state.host(SPARK_MASTER)
        port, ui = free_port(), free_port()
        argv = self._spark_argv("org.apache.spark.deploy.master.Master", "--host", host.address,
                                "--port", str(port), "--webui-port", str(ui))
        record, process = self._spawn(SPARK_MASTER, host, argv, port,
                                      marker=f"--webui-port {ui}", env=self._spark_env(host))
        return await_ready(record, lambda: listens(port, host.address),
                            lambda: process.poll() is None, self.startup_timeout)

    def _start_spark_worker(self, state: StackState, worker: int, url: str) -> ServiceRecord:
        name = spark_worker_name(worker)
        host = state.host(name)
        work = self.state_dir / name
        work.mkdir(exist_ok=True)
        port, ui = free_port(), free_port()
        argv = self._spark_argv("org.apache.spark.deploy.worker.Worker", url,
                                "--host", host.address, "--port", str(port),
                                "--webui-port", str(ui), "--cores", str(state.spark_cores),
                                "--memory", "2g", "--work-dir", str(work))
        record, process = self._spawn(name, host, argv, port, marker=str(work),
                                      env=self._spark_env(host))
        log = Path(record.log)
        return await_ready(
            record, lambda: "Successfully registered with master" in log_tail(log, 200),
            lambda: process.poll() is None, self.startup_timeout)
