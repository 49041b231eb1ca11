"""The rows the run store's writer is handed (runstore/rows.py): a SampleRow crosses to the writer process pickled
as its constructor's arguments (its __reduce__), and every field must arrive, one added later included."""

from __future__ import annotations

import pickle
from dataclasses import fields

from rl_insight.server.runstore.rows import SampleRow


def test_a_sample_row_arrives_whole() -> None:
    row = SampleRow("proj", "exp", "actor/loss", "gauge", '{"rank":"3"}', 12.0, 1.7e9, -0.25)
    back = pickle.loads(pickle.dumps(row, pickle.HIGHEST_PROTOCOL))
    assert back == row and type(back) is SampleRow
    assert all(getattr(back, f.name) == getattr(row, f.name) for f in fields(SampleRow))
    step_less = SampleRow("p", "e", "n", "counter", "{}", None, 1.0, 2.0)
    assert pickle.loads(pickle.dumps(step_less)) == step_less
