"""The dev stack's recorded state: which services a stack has and what it exports. Pure."""

from __future__ import annotations

from hailstorm.devstack import (
    SPARK_MASTER,
    SPARK_MASTER_VAR,
    ServiceRecord,
    StackState,
    spark_worker_name,
)


def _record(name: str, port: int) -> ServiceRecord:
    return ServiceRecord(name=name, port=port, pid=1, log=f"{name}.log", marker=name)


def test_a_stack_with_spark_workers_lists_and_exports_its_cluster() -> None:
    state = StackState(state_dir="/tmp/x", database_password="pw", spark_workers=2,
                       spark_cores=4)
    assert state.service_names() == ["zookeeper", "kafka-1", "postgres", SPARK_MASTER,
                                     spark_worker_name(1), spark_worker_name(2)]
    assert state.spark_master_url is None
    state.services[SPARK_MASTER] = _record(SPARK_MASTER, 7077)
    assert state.spark_master_url == "spark://127.0.0.1:7077"
    again = StackState.from_json(state.to_json())
    assert (again.spark_workers, again.spark_cores) == (2, 4)
    assert again.spark_master_url == state.spark_master_url


def test_a_stack_without_spark_exports_no_master() -> None:
    state = StackState(state_dir="/tmp/x", database_password="pw")
    assert SPARK_MASTER not in state.service_names()
    old = StackState.from_json('{"state_dir": "/tmp/x", "services": {}}')  # before Spark
    assert old.spark_workers == 0 and old.spark_master_url is None
    state.services["zookeeper"] = _record("zookeeper", 2181)
    state.services["postgres"] = _record("postgres", 5432)
    assert SPARK_MASTER_VAR not in _env_without_kafka(state)


def _env_without_kafka(state: StackState) -> dict[str, str]:
    from hailstorm.devstack import KafkaClusterState
    from hailstorm.kafka_broker import NodePorts

    state.kafka = KafkaClusterState("id", "plaintext", {1: NodePorts(client=9092, controller=9093)})
    return state.env()
