"""The Spark properties of a topology's context: heartbeats that give a cut-off host's
executor up in seconds on a cluster, none of them in ``local`` mode, the user's last. Pure."""

from __future__ import annotations

from hailstorm.runtime.spark_stage import (
    C1_ONLY,
    DRIVER_JAVA_OPTIONS,
    EXECUTOR_HEARTBEATS,
    SparkOptions,
    context_settings,
)

PYTHON = "/venv/bin/python"


def _settings(options: SparkOptions, master: str) -> dict[str, str]:
    return dict(context_settings(options, master, PYTHON, ["/repo", "", "/lib"], "-Xshare:auto"))


def _seconds(value: str) -> float:
    assert value.endswith("s") and not value.endswith("ms"), value
    return float(value[:-1])


def test_a_cluster_gives_a_silent_executor_up_within_seconds() -> None:
    settings = _settings(SparkOptions(), "spark://10.0.0.1:7077")
    for key, value in EXECUTOR_HEARTBEATS:
        assert settings[key] == value
    interval = _seconds(settings["spark.executor.heartbeatInterval"])
    timeout = _seconds(settings["spark.storage.blockManagerHeartbeatTimeoutMs"])
    check = _seconds(settings["spark.network.timeoutInterval"])
    # Spark's own rule (the interval below the timeout), with room for several lost ones.
    assert interval * 5 <= timeout and check <= timeout / 5
    assert timeout + check <= 30


def test_local_mode_keeps_spark_s_heartbeats_and_stays_on_loopback() -> None:
    settings = _settings(SparkOptions(), "local[7]")
    assert not {key for key, _ in EXECUTOR_HEARTBEATS} & settings.keys()
    assert settings["spark.driver.host"] == settings["spark.driver.bindAddress"] == "127.0.0.1"


def test_the_users_conf_comes_last_and_wins() -> None:
    options = SparkOptions(extra_conf=(("spark.storage.blockManagerHeartbeatTimeoutMs", "90s"),
                                       (DRIVER_JAVA_OPTIONS, "-Xmx2g")))
    settings = context_settings(options, "spark://h:7077", PYTHON, [])
    assert dict(settings)["spark.storage.blockManagerHeartbeatTimeoutMs"] == "90s"
    assert dict(settings)[DRIVER_JAVA_OPTIONS] == "-Xmx2g"


def test_workers_run_this_python_with_this_path_and_the_jvms_run_c1() -> None:
    settings = _settings(SparkOptions(), "local[2]")
    assert settings["spark.pyspark.python"] == settings["spark.executorEnv.PYSPARK_PYTHON"]
    assert settings["spark.executorEnv.PYTHONPATH"] == "/repo:/lib"
    assert settings["spark.executor.extraJavaOptions"] == C1_ONLY
    assert settings[DRIVER_JAVA_OPTIONS] == f"{C1_ONLY} -Xshare:auto"
    assert settings["spark.master"] == "local[2]" and settings["spark.task.maxFailures"] == "1"
