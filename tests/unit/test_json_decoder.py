"""The "json" decoder reads every document exactly as the standard library does (orjson
where that gives the same value). Pure, property-tested against :func:`json.loads`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hailstorm.decoders import DecodeError, JsonDecoder

JSON = JsonDecoder()

scalars = (st.none() | st.booleans() | st.integers()
           | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(st.characters(codec="utf-8")) | st.text())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                      max_leaves=12)


def outcome(read: Any, raw: bytes) -> str:
    """What reading ``raw`` gives, comparable across readers (NaN included): the value's
    repr, or the kind of failure."""
    try:
        return "value " + repr(read(raw))
    except Exception:  # either reader's error: compared as "failed"
        return "failed"


def documents(value: Any, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@given(values, st.booleans())
def test_every_document_reads_as_the_standard_library_reads_it(value: Any,
                                                                ascii_only: bool) -> None:
    raw = documents(value, ascii_only)
    expected = outcome(json.loads, raw)
    assert outcome(JSON.decode, raw) == expected
    assert outcome(lambda r: JSON.decode_all([r])[0], raw) == expected


@given(st.lists(st.binary(max_size=40) | values.map(lambda v: documents(v, False)),
                min_size=1, max_size=6))
def test_a_batch_reads_as_its_documents_one_by_one(raws: list[bytes]) -> None:
    """Any bytes at all: the batch gives every value or fails; a failing batch has a
    document the standard library refuses too."""
    one_by_one = [outcome(json.loads, raw) for raw in raws]
    batch = outcome(JSON.decode_all, raws)
    if "failed" in one_by_one:
        assert batch == "failed"
    else:
        assert batch == "value " + repr([json.loads(raw) for raw in raws])


@pytest.mark.parametrize("raw", [
    b"18446744073709551616", b"-9223372036854775809", b'{"id": 123456789012345678901}',
    b"NaN", b"[1e400]", b'"\\ud800"', b"\xef\xbb\xbf{}", '{"\u00e9": 1}'.encode("utf-16"),
    b'{"a": 1, "a": 2}', b"0.12345678901234567890123",
])
def test_what_orjson_reads_otherwise_or_refuses(raw: bytes) -> None:
    assert repr(JSON.decode(raw)) == repr(json.loads(raw))
    assert repr(JSON.decode_all([b"{}", raw])) == repr([{}, json.loads(raw)])


def test_a_broken_document_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="json decoder"):
        JSON.decode(b'{"user": ')
    with pytest.raises(ValueError):
        JSON.decode_all([b"{}", b"\xff"])
