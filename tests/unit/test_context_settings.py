"""The Spark properties of a topology's context: heartbeats that give a cut-off host's
executor up in seconds on a cluster, none of them in ``local`` mode, the user's last. Pure."""

from __future__ import annotations

import os

import pytest

from hailstorm.runtime.spark_stage import (
    C1_ONLY,
    DRIVER_JAVA_OPTIONS,
    EXECUTOR_HEARTBEATS,
    HEARTBEAT_KEYS,
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
    # Spark requires the interval and the check to be at most the timeout; these leave
    # room for several heartbeats lost or late before a healthy executor is given up.
    assert interval * 5 <= timeout and check <= timeout / 5
    assert timeout + check <= 30


def test_local_mode_keeps_spark_s_heartbeats_and_stays_on_loopback() -> None:
    settings = _settings(SparkOptions(), "local[7]")
    assert not {key for key, _ in EXECUTOR_HEARTBEATS} & settings.keys()
    assert settings["spark.driver.host"] == settings["spark.driver.bindAddress"] == "127.0.0.1"


def test_the_users_conf_comes_last_and_wins() -> None:
    options = SparkOptions(extra_conf=(("spark.executor.cores", "4"),
                                       (DRIVER_JAVA_OPTIONS, "-Xmx2g")))
    settings = context_settings(options, "spark://h:7077", PYTHON, [])
    assert settings[-2:] == list(options.extra_conf)
    assert dict(settings)[DRIVER_JAVA_OPTIONS] == "-Xmx2g"


@pytest.mark.parametrize("key", sorted(HEARTBEAT_KEYS))
def test_a_user_who_sets_any_heartbeat_key_decides_them_all(key: str) -> None:
    """A user's heartbeat interval of 30 s against hailstorm's 20 s timeout would stop
    Spark from starting, and a user's ``spark.network.timeout`` would be overruled by the
    timeout hailstorm sets: whoever sets one of them gets none of hailstorm's."""
    options = SparkOptions(extra_conf=((key, "300s"),))
    settings = context_settings(options, "spark://h:7077", PYTHON, [])
    assert [k for k, _ in settings if k in HEARTBEAT_KEYS] == [key]


def test_an_export_keeps_spark_s_heartbeats() -> None:
    options = SparkOptions(jvm_options="", executor_heartbeats=False)
    settings = dict(context_settings(options, "spark://h:7077", PYTHON, []))
    assert not HEARTBEAT_KEYS & settings.keys()


def test_workers_run_this_python_with_this_path_and_the_jvms_run_c1() -> None:
    settings = _settings(SparkOptions(), "local[2]")
    assert settings["spark.pyspark.python"] == settings["spark.executorEnv.PYSPARK_PYTHON"]
    assert settings["spark.executorEnv.PYTHONPATH"] == os.pathsep.join(["/repo", "/lib"])
    assert settings["spark.executor.extraJavaOptions"] == C1_ONLY
    assert settings[DRIVER_JAVA_OPTIONS] == f"{C1_ONLY} -Xshare:auto"
    assert settings["spark.master"] == "local[2]" and settings["spark.task.maxFailures"] == "1"
