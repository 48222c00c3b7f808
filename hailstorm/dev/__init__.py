"""Development tooling: what starts services on a laptop and proves the runtime, kept apart
from the runtime a user deploys.

* :mod:`~hailstorm.dev.services`: the embedded dev stack (ZooKeeper, Apache Kafka,
  PostgreSQL, a Spark standalone cluster), ``hailstorm dev``;
* :mod:`~hailstorm.dev.harness`: the kill-test harness behind ``hailstorm chaos`` and the
  runtime tests;
* :mod:`~hailstorm.dev.demo`: ``hailstorm demo``;
* :mod:`~hailstorm.dev.workloads`: generated data shaped like production;
* :mod:`~hailstorm.dev.kafka_broker`, :mod:`~hailstorm.dev.s3proxy`: the Apache Kafka and
  S3Proxy artifacts from Maven Central;
* :mod:`~hailstorm.dev.netns`: test hosts in network namespaces.

Nothing in the runtime imports this package; it imports the runtime.
"""
