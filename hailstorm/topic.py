"""A Kafka topic as a sink target: what each sink tuple becomes on the topic. Pure.

::

    Topic("word-totals", key=lambda t: t[0], value=lambda t: {"word": t[0], "count": t[1]})

A sink writing a :class:`Topic` writes its records and its progress in one Kafka
transaction (:class:`~hailstorm.sinks.topic.TopicWriter`), so a ``read_committed``
consumer sees each record exactly once (``docs/sinks.md``). This module only describes
and encodes records; it does no I/O.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import fastavro
import orjson
from fastavro.types import Schema

from hailstorm.topology import (
    RowError,
    SinkTarget,
    TopologyError,
    check_topic_name,
    function_name,
)

__all__ = ["ENCODERS", "PARTITIONERS", "Headers", "Topic", "TopicMode", "TopicRecord",
           "encode_key"]

Encoder = Literal["json", "avro", "bytes"]
ENCODERS: tuple[str, ...] = ("json", "avro", "bytes")
TopicMode = Literal["upsert", "append"]
_MODES: tuple[str, ...] = ("upsert", "append")
PARTITIONERS: tuple[str, ...] = ("murmur2", "crc32")
"""Named partitioners: ``murmur2`` is Kafka's Java default (a keyed record lands where
Kafka Streams and other Java clients put it); ``crc32`` is librdkafka's default."""

Headers = tuple[tuple[str, bytes], ...]
TopicRecord = tuple[bytes | None, bytes | None, int | None, Headers | None]
"""An encoded record: ``(key, value, partition, headers)`` (partition None: the
partitioner's; headers None: only those the writer adds)."""


def encode_key(key: Any) -> bytes | None:
    """A record key as bytes: ``bytes`` as they are, ``str`` as UTF-8, None as no key,
    anything else as compact JSON (so ``("a", 1)`` and ``["a", 1]`` are the same key)."""
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    return _json(key)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False,
                              ensure_ascii=False)
"""The definition of canonical JSON: sorted keys, no spaces, no NaN, UTF-8."""
_FLAT = frozenset({str, int, bool, type(None)})
"""Types whose JSON orjson writes exactly as :data:`_CANONICAL` does (exactly these types:
an ``Enum`` or a float is written otherwise, or refused by one and not the other); an
integer past 64 bits orjson refuses."""


def _json(value: Any) -> bytes:
    """Canonical JSON (:data:`_CANONICAL`: the same value, the same bytes). A value of
    :data:`_FLAT` types, or a dict, list or tuple of them (a record's usual value), is
    written by orjson, several times faster, which gives those the same bytes; anything
    else, or what orjson refuses, by the standard library."""
    kind = type(value)
    if kind is dict:
        flat = all(type(item) in _FLAT for item in value.values())
    elif kind is list or kind is tuple:
        flat = all(type(item) in _FLAT for item in value)
    else:
        flat = kind in _FLAT
    if flat:
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a key that is no str, an int past 64 bits
            pass
    return _CANONICAL.encode(value).encode("utf-8")


@dataclass(frozen=True, eq=False)
class Topic(SinkTarget):
    """A Kafka topic a sink writes exactly once (validated description, no I/O).

    ``mode``:

    * ``"upsert"``: the topic is a changelog keyed by ``key``: each transaction holds the
      newest value of every key it touches (compaction-friendly; use with bolts that emit
      running totals). The newest record per key equals the model's table.
    * ``"append"``: every sink tuple becomes one record (``key`` optional, for
      partitioning); records carry their origin in headers.

    ``key`` and ``value`` turn a sink tuple into the record's key and value (default
    value: the tuple itself). ``encoder`` encodes the value: ``"json"`` (canonical
    JSON), ``"avro"`` (schemaless Avro with ``schema``, fastavro) or ``"bytes"`` (the
    value must be bytes). Keys are encoded by :func:`encode_key`. ``partitioner`` is
    ``"murmur2"`` (Kafka's Java default), ``"crc32"`` or a function of the sink tuple
    returning a partition number. ``partitions``: how many the topic gets if the sink
    creates it.
    """

    name: str
    key: Callable[[Any], Any] | None = None
    value: Callable[[Any], Any] | None = None
    encoder: Encoder = "json"
    schema: Mapping[str, Any] | None = None
    mode: TopicMode = "upsert"
    partitioner: str | Callable[[Any], int] = "murmur2"
    partitions: int = 1
    parsed_schema: Schema | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        node = f"topic {self.name!r}"
        check_topic_name(self.name, "topic", node, None)
        if self.mode not in _MODES:
            raise TopologyError(
                f"mode {self.mode!r} is not one of {', '.join(_MODES)}",
                fix='use mode="upsert" for running totals (the newest value per key), '
                '"append" for one record per tuple',
                node=node,
            )
        for label, function in (("key", self.key), ("value", self.value)):
            if function is not None and not callable(function):
                raise TopologyError(f"{label} must be a function of the sink tuple, got "
                                    f"{function!r}", fix=f"pass {label}=lambda t: ...", node=node)
        if self.mode == "upsert" and self.key is None:
            raise TopologyError(
                "upsert mode needs key= to tell which records replace each other",
                fix='pass key=lambda t: t[0], or use mode="append"', node=node)
        if self.encoder not in ENCODERS:
            raise TopologyError(f"encoder {self.encoder!r} is not one of {', '.join(ENCODERS)}",
                                fix='use encoder="json", "avro" (with schema=...) or "bytes"',
                                node=node)
        if self.encoder == "avro":
            if not isinstance(self.schema, Mapping):  # (also tells mypy it is one)
                raise TopologyError("the avro encoder needs schema= (an Avro schema as a dict)",
                                    fix='pass schema={"type": "record", "name": ..., '
                                    '"fields": [...]}', node=node)
            try:
                parsed = fastavro.parse_schema(dict(self.schema))
            except Exception as exc:  # broad: fastavro schema parsing raises untyped errors
                raise TopologyError(f"the Avro schema is not valid: {exc}",
                                    fix="correct the schema (see the Avro specification)",
                                    node=node) from exc
            object.__setattr__(self, "parsed_schema", parsed)
        elif self.schema is not None:
            raise TopologyError(f"schema= is used by the avro encoder only, not {self.encoder!r}",
                                fix='drop schema=..., or use encoder="avro"', node=node)
        if not callable(self.partitioner) and self.partitioner not in PARTITIONERS:
            raise TopologyError(
                f"partitioner {self.partitioner!r} is not one of {', '.join(PARTITIONERS)} "
                "or a function", fix='use partitioner="murmur2" (Kafka\'s Java default)',
                node=node)
        if not isinstance(self.partitions, int) or isinstance(self.partitions, bool) \
                or self.partitions < 1:
            raise TopologyError(f"partitions must be an int >= 1, not {self.partitions!r}",
                                fix="pass partitions=4 (used when the sink creates the topic)",
                                node=node)

    def record_of(self, t: Any) -> TopicRecord:
        """The encoded record of sink tuple ``t``; raises :class:`RowError` when a function
        fails or the value cannot be encoded."""
        try:
            key = encode_key(self.key(t)) if self.key is not None else None
        except Exception as exc:  # broad: the user's key may raise anything; a RowError
            raise RowError(f"topic {self.name!r}: the key failed: {_error(exc)}") from exc
        if key is None and self.mode == "upsert":
            raise RowError(f"topic {self.name!r}: the key of {t!r:.80} is None; an upsert "
                           "record needs a key")
        try:
            value = self.value(t) if self.value is not None else t
        except Exception as exc:  # broad: the user's value may raise anything; a RowError
            raise RowError(f"topic {self.name!r}: the value failed: {_error(exc)}") from exc
        partition = None
        if callable(self.partitioner):
            try:
                partition = self.partitioner(t)
            except Exception as exc:  # broad: the user's partitioner may raise anything; a RowError
                raise RowError(f"topic {self.name!r}: the partitioner failed: "
                               f"{_error(exc)}") from exc
            if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
                raise RowError(f"topic {self.name!r}: the partitioner returned {partition!r}, "
                               "not a partition number")
        return key, self.encode_value(value), partition, None

    def encode_value(self, value: Any) -> bytes:
        """``value`` in the topic's encoding (raises :class:`RowError`)."""
        try:
            if self.encoder == "json":
                return _json(value)
            if self.encoder == "bytes":
                if not isinstance(value, bytes | bytearray):
                    raise TypeError(f"the bytes encoder needs bytes, got {type(value).__name__}")
                return bytes(value)
            out = io.BytesIO()
            fastavro.schemaless_writer(out, self._schema(), value, strict=True)
            return out.getvalue()
        except Exception as exc:  # broad: json/fastavro of a user value: any error; a RowError
            raise RowError(f"topic {self.name!r}: cannot encode {value!r:.80} as "
                           f"{self.encoder}: {_error(exc)}") from exc

    def decode_value(self, raw: bytes) -> Any:
        """The value of a record of this topic (for readers, tests and ``run_model``)."""
        if self.encoder == "json":
            return json.loads(raw)
        if self.encoder == "bytes":
            return raw
        return fastavro.schemaless_reader(io.BytesIO(raw), self._schema(), None)

    def _schema(self) -> Schema:
        assert self.parsed_schema is not None, "only the avro encoder has a schema"
        return self.parsed_schema

    @property
    def latest_per_key(self) -> bool:
        return self.mode == "upsert"

    def describe(self) -> str:
        text = f"topic {self.name} {self.mode} ({self.encoder})"
        if self.key is not None:
            text += f" keyed by {function_name(self.key)}"
        return text


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
