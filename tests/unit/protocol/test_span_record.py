"""SpanRecord (protocol/batch.py) is pickled as its constructor's arguments (its __reduce__) when the server hands
spans to its run store writer process: every slot must arrive, one added later included."""

from __future__ import annotations

import pickle

from rl_insight.protocol import SpanRecord


def test_a_span_record_arrives_whole_with_every_slot() -> None:
    values = {"id": "a" * 16, "trace_id": "b" * 32, "parent_id": "c" * 16, "name": "vllm_generate",
              "lane": "replica_0", "kind": "state", "start_ns": 1, "end_ns": 2**62, "attributes": {"project": "p"},
              "size": 321}
    assert set(values) == set(SpanRecord.__slots__), "a slot was added: give it a value here and in __reduce__"
    span = SpanRecord(**values)
    back = pickle.loads(pickle.dumps(span, pickle.HIGHEST_PROTOCOL))
    assert type(back) is SpanRecord
    assert {k: getattr(back, k) for k in SpanRecord.__slots__} == values
    start = SpanRecord("d" * 16, "e" * 32, None, "gen", None, "state", 5, None, {})
    back = pickle.loads(pickle.dumps(start))
    assert (back.parent_id, back.lane, back.end_ns, back.size) == (None, None, None, 0)
