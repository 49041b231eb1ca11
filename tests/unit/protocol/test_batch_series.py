"""A client's series definitions, decoded once and remembered (protocol/batch.py: _series_of): what comes out is
what validating them afresh gives, batch after batch — a replaced character is counted every time, a bad definition
is refused every time with its reason, unhashable parts are refused as before, and the memory is bounded."""

from __future__ import annotations

import pytest

from rl_insight.protocol import ItemError, decode_batch
from rl_insight.protocol import batch as protocol_batch


def _batch(*series: object) -> dict:
    return {"v": 1, "client": {"id": "c1"}, "series": list(series)}


def _plain(entry: object) -> tuple:
    d = decode_batch(_batch(entry)).series[0]
    return (d.kind, d.name, d.labels, d.doc, d.bounds, d.ns) if not isinstance(d, ItemError) else (d.reason, str(d))


@pytest.mark.parametrize("entry", [
    {"k": "g", "n": "actor/loss", "l": {"rank": "0", "role": "actor"}},
    {"k": "c", "n": "tokens_total", "l": {"role": "actor", "rank": "0"}, "d": "tokens"},  # same labels, other order
    {"k": "h", "n": "latency_s", "b": [0.1, 1.0, 10.0]},
    {"k": "g", "n": "x", "l": {"n": 3, "flag": True, "none": None}},  # scalar label values become strings
    {"k": "g", "n": "   "},  # blank name: refused
    {"k": "h", "n": "h", "b": [1.0, 1.0]},  # not increasing: refused
    {"k": "g", "n": ["not", "a", "string"]},  # unhashable: refused, never cached
    {"k": "g", "n": "x", "l": {"a": {"nested": 1}}},  # unhashable label value: refused
    {"k": "g", "n": "x", "b": [[1]]},
])
def test_a_definition_decodes_the_same_every_time(entry: dict) -> None:
    fresh = protocol_batch._series(entry, protocol_batch.TextCleaner()) if _valid(entry) else None
    first, second, third = _plain(entry), _plain(entry), _plain(dict(entry))
    assert first == second == third
    if fresh is not None:
        assert first == (fresh.kind, fresh.name, fresh.labels, fresh.doc, fresh.bounds, fresh.ns)


def _valid(entry: dict) -> bool:
    try:
        protocol_batch._series(entry, protocol_batch.TextCleaner())
    except ItemError:
        return False
    return True


def test_a_replaced_character_is_counted_in_every_batch() -> None:
    entry = {"k": "g", "n": "loss\x00", "l": {"host": "node\udc80"}}
    for _ in range(3):
        b = decode_batch(_batch(entry))
        assert b.replaced == 2 and b.series[0].name == "loss\ufffd"  # type: ignore[union-attr]


def test_the_same_definition_is_one_object_and_the_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"k": "g", "n": "actor/loss", "l": {"rank": "0"}}
    assert decode_batch(_batch(entry)).series[0] is decode_batch(_batch(dict(entry))).series[0]
    monkeypatch.setattr(protocol_batch, "_SERIES_SEEN_MAX", 10)
    protocol_batch._SERIES_SEEN.clear()
    for i in range(25):  # ever-new label sets
        decode_batch(_batch({"k": "g", "n": "m", "l": {"trajectory": str(i)}}))
        assert len(protocol_batch._SERIES_SEEN) <= 10
