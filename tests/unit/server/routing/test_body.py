"""Request bodies (server/routing/body.py): JSON is read by msgspec first and by json.loads where msgspec refuses, and
the answer must be json.loads' in every case: the same values, the same refusals."""

from __future__ import annotations

import gzip
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight.errors import MalformedBodyError, PayloadTooLargeError
from rl_insight.server.routing.body import decode_body
from tests.lanes import examples

LIMIT = 1 << 20


def stdlib(raw: bytes) -> Any:
    """What json.loads makes of `raw`, or the error class decode_body maps its refusal to."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return MalformedBodyError


def ours(raw: bytes) -> Any:
    try:
        return decode_body(raw, None, LIMIT)
    except MalformedBodyError:
        return MalformedBodyError


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down; NaN equals NaN, -0.0 is not 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


EDGES = [
    b'{"v":1,"samples":[[0,1.5,null,2]]}', b"NaN", b"[NaN, Infinity, -Infinity]", b"1e400", b"-1e400", b"2e308",
    b"123456789012345678901234567890", b"-99999999999999999999", b'"\\ud800"', b'"\xed\xa0\x80"', b'"\xff"',
    b'{"a":1,"a":2}', b"[" * 50_000 + b"]" * 50_000, b"-0.0", b"-0", b"4.9e-324", b"2.2250738585072011e-308",
    b"\xef\xbb\xbf[1]", '["é"]'.encode("utf-16"), b'"a\x00b"', b'"\\u0000"', b"[1,]", b"01", b"", b"   ",
    b'"\\ud83d\\ude00"', b"[1] x", b'{"a" 1}',
]


@pytest.mark.parametrize("raw", EDGES, ids=range(len(EDGES)))
def test_each_edge_reads_as_json_loads_reads_it(raw: bytes) -> None:
    assert same(ours(raw), stdlib(raw)), raw[:40]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=examples(400), deadline=None)
@given(JSON, st.booleans())
def test_any_json_text_reads_as_json_loads_reads_it(value: Any, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert same(ours(raw), stdlib(raw))


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_are_read_or_refused_as_json_loads_does(raw: bytes) -> None:
    assert same(ours(raw), stdlib(raw))


def test_gzip_bodies_and_their_bounds_are_unchanged() -> None:
    body = json.dumps({"v": 1, "samples": [[0, 1.0, None, 2.0]] * 100}).encode()
    assert decode_body(gzip.compress(body), "gzip", LIMIT) == json.loads(body)
    with pytest.raises(PayloadTooLargeError):
        decode_body(gzip.compress(body), "gzip", len(body) - 1)
    with pytest.raises(MalformedBodyError, match="not valid JSON"):
        decode_body(gzip.compress(b"{nope"), "gzip", LIMIT)
    with pytest.raises(MalformedBodyError, match="nested too deeply"):
        decode_body(b"[" * 100_000 + b"]" * 100_000, None, LIMIT)
