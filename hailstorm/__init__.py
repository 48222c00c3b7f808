"""Hailstorm: exactly-once stateful stream processing over Apache Kafka.

Define a topology in a plain Python module::

    from hailstorm import Count, Table, Topology, itself, per_key

    topology = Topology("wordcount")
    lines = topology.spout("lines", topic="words", decoder="text", explode=str.split)
    counts = topology.bolt("counts", inputs=[lines], key=itself, state=per_key(Count()),
                           lift=Count.lift, emit=lambda w, n: [(w, n)])
    topology.sink("word_counts", inputs=[counts],
                  target=Table("word_counts", columns={"word": "text", "count": "bigint"},
                               key=["word"], mode="upsert"))

See ``docs/writing-topologies.md``.
"""

from hailstorm.decoders import Avro, DecodeError
from hailstorm.errors import (
    ConfigurationError,
    DefinitionError,
    HailstormError,
    HaltError,
    ProtocolError,
    RecordError,
    ServiceError,
)
from hailstorm.model import (
    DeadLetter,
    Message,
    ModelResult,
    RecordHalt,
    RejectedRow,
    messages,
    run_model,
)
from hailstorm.monoids import (
    Count,
    CountMinSketch,
    HyperLogLog,
    KeyedMap,
    Last,
    Max,
    Mean,
    Min,
    Monoid,
    Record,
    SetUnion,
    SlidingWindow,
    Sum,
    TopK,
    Ttl,
    TumblingWindow,
    WindowValue,
    per_key,
)
from hailstorm.routing import itself, route
from hailstorm.topic import Topic
from hailstorm.topology import (
    BoltSpec,
    Collect,
    Quarantine,
    RecordFailed,
    SinkSpec,
    SinkTarget,
    SpoutSpec,
    Table,
    Topology,
    TopologyError,
    by_key,
    load_topology,
    render_dot,
    render_text,
)

__all__ = [
    "Avro",
    "BoltSpec",
    "Collect",
    "ConfigurationError",
    "Count",
    "CountMinSketch",
    "DeadLetter",
    "DecodeError",
    "DefinitionError",
    "HailstormError",
    "HaltError",
    "HyperLogLog",
    "KeyedMap",
    "Last",
    "Max",
    "Mean",
    "Message",
    "Min",
    "ModelResult",
    "Monoid",
    "ProtocolError",
    "Quarantine",
    "Record",
    "RecordError",
    "RecordFailed",
    "RecordHalt",
    "RejectedRow",
    "ServiceError",
    "SetUnion",
    "SinkSpec",
    "SinkTarget",
    "SlidingWindow",
    "SpoutSpec",
    "Sum",
    "Table",
    "TopK",
    "Topic",
    "Topology",
    "TopologyError",
    "Ttl",
    "TumblingWindow",
    "WindowValue",
    "by_key",
    "itself",
    "load_topology",
    "messages",
    "per_key",
    "render_dot",
    "render_text",
    "route",
    "run_model",
]
