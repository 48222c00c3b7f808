"""Decoders turn the bytes of a Kafka message value into a Python value.

A spout names its decoder: ``"bytes"`` (the value unchanged), ``"text"`` (strict UTF-8),
``"json"``, ``Avro(schema)`` (schemaless Avro, fastavro) or any callable
``bytes -> value``. Every failure surfaces as :class:`DecodeError`, which carries the
original exception; the runtime (and the reference model) send such messages to the
dead-letter topic instead of stopping.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastavro import parse_schema, schemaless_reader

from hailstorm.errors import RecordError

__all__ = [
    "Avro",
    "BytesDecoder",
    "CallableDecoder",
    "DecodeError",
    "Decoder",
    "DecoderSpec",
    "JsonDecoder",
    "TextDecoder",
    "decode_many",
    "resolve_decoder",
]


class DecodeError(RecordError):
    """A message value could not be turned into tuples.

    ``stage`` is ``"decode"`` (the decoder failed) or ``"explode"`` (the spout's explode
    function failed on the decoded value); ``original`` is the underlying exception.
    """

    def __init__(self, message: str, original: BaseException | None = None, stage: str = "decode"):
        super().__init__(message)
        self.original = original
        self.stage = stage


class Decoder:
    """Base class of decoders: :meth:`decode` maps raw bytes to a value."""

    #: Name shown by ``hailstorm show``.
    name: str = "decoder"

    def decode(self, raw: bytes | None) -> Any:
        """Decode one message value, raising :class:`DecodeError` on any failure."""
        if raw is None:
            raise DecodeError(f"{self.name} decoder: message has no value (tombstone)")
        try:
            return self._decode(raw)
        except DecodeError:
            raise
        except Exception as exc:  # broad: _decode may be a user's subclass; wrapped in DecodeError
            raise DecodeError(f"{self.name} decoder: {type(exc).__name__}: {exc}", exc) from exc

    def _decode(self, raw: bytes) -> Any:
        raise NotImplementedError

    def decode_all(self, raws: Sequence[bytes]) -> list[Any]:
        """Decode a batch of values (none a tombstone), raising on the first failure with
        whatever the decoding raised (:meth:`decode` tells the failures apart)."""
        values = list(map(self._decode, raws))
        if len(values) != len(raws):  # a StopIteration, which ends map: no silent loss
            raise RuntimeError(f"decoder {self.name!r} raised StopIteration")
        return values

    def describe(self) -> str:
        """Human description for ``hailstorm show``."""
        return self.name


class BytesDecoder(Decoder):
    """Pass the value through as ``bytes``."""

    name = "bytes"

    def _decode(self, raw: bytes) -> bytes:
        return bytes(raw)


class TextDecoder(Decoder):
    """Strict UTF-8 text."""

    name = "text"

    def _decode(self, raw: bytes) -> str:
        return bytes(raw).decode("utf-8")

    def decode_all(self, raws: Sequence[bytes]) -> list[Any]:
        return [raw.decode("utf-8") for raw in raws]


_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""A ``bytes.translate`` table: every digit becomes ``0``, every other byte a space."""
_LONG_NUMBER = b"0" * 19
"""A run of 19 digits, after :data:`_DIGITS_ONLY`. orjson reads an integer past 64 bits as a
float where the standard library keeps it exact; every integer of fewer digits is in range,
so a document with such a run (rare: an id, a long fraction) is read by the standard
library."""


class JsonDecoder(Decoder):
    """A JSON document, read as :func:`json.loads` reads it, by orjson where that gives the
    same value (several times faster): orjson refuses what only the standard library
    accepts (``NaN``, ``Infinity``, numbers past the float range, lone surrogates, UTF-16
    and UTF-32, a byte order mark), and those documents, like the ones with a
    :data:`_LONG_NUMBER`, are read by :func:`json.loads`."""

    name = "json"

    def _decode(self, raw: bytes) -> Any:
        if _LONG_NUMBER not in bytes(raw).translate(_DIGITS_ONLY):
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                pass
        return json.loads(raw)

    def decode_all(self, raws: Sequence[bytes]) -> list[Any]:
        if _LONG_NUMBER not in b"\n".join(raws).translate(_DIGITS_ONLY):
            try:
                return list(map(orjson.loads, raws))
            except orjson.JSONDecodeError:
                pass  # one document orjson refuses: each on its own
        return super().decode_all(raws)


@dataclass(frozen=True, eq=False)
class Avro(Decoder):
    """Schemaless Avro with a fixed writer ``schema`` (a dict or its JSON text).

    The whole value must be consumed: trailing bytes mean the writer used another schema.
    """

    schema: Mapping[str, Any] | str
    _parsed: Any = field(init=False, repr=False)

    name = "avro"

    def __post_init__(self) -> None:
        schema = json.loads(self.schema) if isinstance(self.schema, str) else dict(self.schema)
        object.__setattr__(self, "_parsed", parse_schema(schema))

    def _decode(self, raw: bytes) -> Any:
        buffer = io.BytesIO(raw)
        value = schemaless_reader(buffer, self._parsed, None)
        if buffer.tell() != len(raw):
            raise ValueError(
                f"{len(raw) - buffer.tell()} trailing bytes after the record "
                "(was it written with another schema?)"
            )
        return value

    def describe(self) -> str:
        schema = self._parsed
        if isinstance(schema, Mapping) and "name" in schema:
            return f"avro({schema['name']})"
        return "avro"


@dataclass(frozen=True, eq=False)
class CallableDecoder(Decoder):
    """A user function ``bytes -> value``; any exception it raises is a decode failure."""

    function: Callable[[bytes], Any]

    name = "callable"

    def _decode(self, raw: bytes) -> Any:
        return self.function(raw)

    def describe(self) -> str:
        return getattr(self.function, "__qualname__", None) or repr(self.function)


DecoderSpec = str | Decoder | Callable[[bytes], Any]
"""What ``topology.spout(decoder=...)`` accepts."""

_BUILTIN: dict[str, Decoder] = {
    "bytes": BytesDecoder(),
    "text": TextDecoder(),
    "json": JsonDecoder(),
}


def resolve_decoder(spec: DecoderSpec) -> Decoder:
    """Turn a spout's ``decoder=`` argument into a :class:`Decoder`.

    Raises ``ValueError`` for an unknown name and ``TypeError`` for anything else.
    """
    if isinstance(spec, Decoder):
        return spec
    if isinstance(spec, str):
        try:
            return _BUILTIN[spec]
        except KeyError:
            raise ValueError(
                f"unknown decoder {spec!r}; use one of 'bytes', 'text', 'json', "
                "Avro(schema) or a function bytes -> value"
            ) from None
    if callable(spec):
        return CallableDecoder(spec)
    raise TypeError(
        f"decoder must be 'bytes', 'text', 'json', Avro(schema) or a function, got {spec!r}"
    )


def decode_many(decoder: Decoder, values: Iterable[bytes | None]) -> list[Any]:
    """Decode a batch; each failed value is replaced by its :class:`DecodeError`."""
    decoded: list[Any] = []
    for raw in values:
        try:
            decoded.append(decoder.decode(raw))
        except DecodeError as exc:
            decoded.append(exc)
    return decoded
