"""MoE expert load: verl's formulas (rollout/moe/*), the summary the page shows, and the run store's answer."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rl_insight.demo.trainer_metrics import moe_metrics
from rl_insight.semantics import moe
from rl_insight.semantics.names import sanitize_metric_name
from rl_insight.server.runstore.moe import moe_summary
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter


def test_verls_formulas() -> None:
    # the case verl's own test uses: layer 0 balanced, layer 1 all on one of two… here: counts [1, 1] and [4, 0]
    m = moe.load_balance_metrics([[1, 1], [4, 0]])
    assert (m["rollout/moe/max_vio/layer_0"], m["rollout/moe/min_vio/layer_0"], m["rollout/moe/avg_vio/layer_0"]) == (
        0.0, 0.0, 0.0)
    assert (m["rollout/moe/max_vio/layer_1"], m["rollout/moe/min_vio/layer_1"], m["rollout/moe/avg_vio/layer_1"]) == (
        1.0, -1.0, 1.0)
    assert m["rollout/moe/max_vio/max"] == 1.0 and m["rollout/moe/avg_vio/avg"] == 0.5
    assert m["rollout/moe/load/layer_1/expert_0"] == 1.0


def test_the_summary_names_the_hot_layer_and_expert_from_the_store(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    w = RunStoreWriter(path, flush_interval_s=0.01)
    rng = random.Random(1)
    rows = []
    for step in range(1, 21):
        for key, value in moe_metrics(step, rng).items():
            rows.append(SampleRow("p", "e", sanitize_metric_name(key.replace("/", "_")), "gauge", "{}", float(step),
                                  1.7e9 + step, value))
    w.put_samples(rows)
    assert w.flush()
    s = moe_summary(RunStoreReader(path).conn(), 1)
    assert s["layers"] == list(range(12)) and s["steps"] == [float(x) for x in range(1, 21)]
    # step 20: expert 5 gets 3.1x the others' load, so 16 x 3.1 / (15 + 3.1) = 2.74x its fair share (max_vio 1.74)
    assert s["latest"]["layer"] == 7 and s["latest"]["max_vio"] == pytest.approx(1.74, abs=0.2)
    assert s["experts"]["hot"]["layer"] == 7 and s["experts"]["hot"]["expert"] == 5 and s["experts"]["step"] == 20
    assert s["worst"]["layer"] == 7
    assert "layer 7 is the most imbalanced" in s["sentence"] and "the hottest expert is 5 of layer 7" in s["sentence"]
    earlier = moe_summary(RunStoreReader(path).conn(), 1, step=1.0)
    assert earlier["experts"]["step"] == 1.0 and earlier["experts"]["hot"]["share"] < s["experts"]["hot"]["share"]
    w.close()


def test_no_moe_metrics_says_how_to_get_them(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    w = RunStoreWriter(path, flush_interval_s=0.01)
    w.put_samples([SampleRow("p", "e", "x", "gauge", "{}", 1.0, 1.7e9, 1.0)])
    assert w.flush()
    s = moe_summary(RunStoreReader(path).conn(), 1)
    assert s["layers"] == [] and "moe_lb_metrics_interval" in s["sentence"]
    w.close()
