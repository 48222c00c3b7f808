"""A spout's execution: a Kafka message's value decoded and exploded into tuples, one at a
time (:func:`tuples_of`) or a batch at a time (:func:`tuples_of_many`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hailstorm.decoders import DecodeError
from hailstorm.engine.calls import as_output_list, drained, mapped
from hailstorm.topology import SpoutSpec

__all__ = ["tuples_of", "tuples_of_many"]


def tuples_of(spout: SpoutSpec[Any], raw: bytes | None) -> list[Any]:
    """Decode a message value and explode it into ``spout``'s tuples.

    Raises :class:`~hailstorm.decoders.DecodeError` when the decoder or the explode
    function fails, a generator explode included (the message belongs in the
    dead-letter topic). An explode function returning something that is not a
    collection of tuples is a bug in the topology and raises ``TypeError``.
    """
    value = spout.decoder.decode(raw)
    if spout.explode is None:
        return [value]
    try:
        exploded = drained(spout.explode(value))
    except Exception as exc:  # the user's explode may raise anything: the message is bad
        raise DecodeError(
            f"spout {spout.name!r}: explode failed: {type(exc).__name__}: {exc}",
            exc,
            stage="explode",
        ) from exc
    return as_output_list(exploded, f"spout {spout.name!r}: explode")


def tuples_of_many(
    spout: SpoutSpec[Any], raws: Sequence[bytes | None]
) -> list[list[Any] | DecodeError]:
    """:func:`tuples_of` for a batch: each failed message yields its DecodeError.

    The batch is decoded and exploded a batch at a time (no per-message Python of
    hailstorm's own); when anything fails, or an explode returns something other
    than a list, it is done again message by message, which tells the failures apart
    (so the decoder and explode must be deterministic, as replays need anyway)."""
    fast = _tuples_of_batch(spout, raws)
    if fast is not None:
        return list(fast)
    results: list[list[Any] | DecodeError] = []
    for raw in raws:
        try:
            results.append(tuples_of(spout, raw))
        except DecodeError as exc:
            results.append(exc)
    return results


def _tuples_of_batch(spout: SpoutSpec[Any], raws: Sequence[bytes | None]
                     ) -> list[list[Any]] | None:
    """Every message's tuples when nothing fails and every explode returns a list
    (else None: the caller takes them one by one)."""
    if None in raws:  # a tombstone: its DecodeError is for tuples_of to make
        return None
    try:
        values = spout.decoder.decode_all(raws)  # type: ignore[arg-type]
        if spout.explode is None:
            return [[value] for value in values]
        exploded = mapped(spout.explode, values)
    except Exception:  # a decoder or the user's explode failed on some message (any
        return None    # error): the message-by-message path names which, and why
    if not set(map(type, exploded)) <= {list}:
        return None
    return exploded  # type: ignore[return-value]  # every one a list
