"""Rows handed to the run store's writer process are pickled as their constructors' arguments (rows.SampleRow and
protocol.SpanRecord define __reduce__): every field must arrive, including one added later."""

from __future__ import annotations

import pickle
from dataclasses import fields

from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore.rows import SampleRow


def test_a_sample_row_arrives_whole() -> None:
    row = SampleRow("proj", "exp", "actor/loss", "gauge", '{"rank":"3"}', 12.0, 1.7e9, -0.25)
    back = pickle.loads(pickle.dumps(row, pickle.HIGHEST_PROTOCOL))
    assert back == row and type(back) is SampleRow
    assert all(getattr(back, f.name) == getattr(row, f.name) for f in fields(SampleRow))
    step_less = SampleRow("p", "e", "n", "counter", "{}", None, 1.0, 2.0)
    assert pickle.loads(pickle.dumps(step_less)) == step_less


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
