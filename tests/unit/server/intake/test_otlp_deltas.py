"""The OTLP delta totals (intake/otlp_deltas.py): a window is added once however often it is resent, a run's bound
costs only that run, idle runs make room for new ones, and a point refused by validation keeps nothing."""

from __future__ import annotations

import json

import pytest

from rl_insight.server.intake.otlp_deltas import DeltaRefused, DeltaTotals
from rl_insight.server.intake.otlp_metrics import OtlpMetrics

LABELS = (("worker", "w0"),)


def _key(name: str = "tokens", labels: tuple = LABELS) -> tuple:
    return ("otlp-r", name, "c", (), labels)


def test_a_resent_window_is_added_once_and_answers_its_first_total() -> None:
    d = DeltaTotals()
    run = ("p", "e")
    assert d.add(run, _key(), (0, 10), 5.0) == 5.0
    assert d.add(run, _key(), (10, 20), 5.0) == 10.0  # answered 503 after it was applied
    assert d.add(run, _key(), (10, 20), 5.0) == 10.0  # the exporter's retry: not added again
    assert d.add(run, _key(), (20, 30), 5.0) == 15.0
    assert d.add(run, _key(), (0, 10), 5.0) == 5.0  # an older resend repeats its own first answer
    assert d.add(run, _key(), (0, 0), 1.0) == 16.0  # a point without a window says nothing: always added


def test_histograms_add_per_bucket_and_new_bounds_start_over() -> None:
    d = DeltaTotals()
    key = ("otlp-r", "lat", "h", (1.0,), ())
    assert d.add(("p", "e"), key, (0, 1), [1.5, 2, [1, 1]]) == [1.5, 2, [1, 1]]
    assert d.add(("p", "e"), key, (1, 2), [0.5, 1, [1, 0]]) == [2.0, 3, [2, 1]]


def test_a_full_run_refuses_only_its_own_new_series_and_never_clears_another_run() -> None:
    d = DeltaTotals(max_series_per_run=10)
    victim, flood = ("team", "victim"), ("x", "flood")
    assert d.add(victim, _key("c"), (0, 1), 15.0) == 15.0
    for i in range(10):
        d.add(flood, _key(f"s{i}"), (0, 1), 1.0)
    with pytest.raises(DeltaRefused) as err:
        d.add(flood, _key("one_more"), (0, 1), 1.0)
    assert err.value.reason == "delta_run_full"
    assert d.add(flood, _key("s3"), (1, 2), 1.0) == 2.0  # the flood's existing series still count
    assert d.add(victim, _key("c"), (1, 2), 5.0) == 20.0  # the victim's total is intact: no reset
    assert d.add(victim, _key("new"), (0, 1), 1.0) == 1.0  # and it may still add series


def test_a_run_is_bounded_by_bytes_too() -> None:
    d = DeltaTotals(max_bytes_per_run=20_000)
    long_labels = (("a", "v" * 2000), ("b", "w" * 2000))
    added = 0
    with pytest.raises(DeltaRefused):
        for i in range(100):
            d.add(("p", "e"), _key(f"s{i}", long_labels), (0, 1), 1.0)
            added += 1
    assert 3 <= added < 10 and d.stats()["bytes"] <= 20_000


def test_the_whole_ledger_makes_room_by_forgetting_idle_runs_only() -> None:
    now = [0.0]
    d = DeltaTotals(max_bytes=10_000, idle_s=60, clock=lambda: now[0])
    for i in range(5):
        d.add(("p", "old"), _key(f"s{i}"), (0, 1), 1.0)
    with pytest.raises(DeltaRefused) as err:  # full, and nothing idle: refused, not cleared
        for i in range(100):
            d.add(("p", "busy"), _key(f"s{i}"), (0, 1), 1.0)
    assert err.value.reason == "delta_totals_full"
    assert d.add(("p", "old"), _key("s0"), (1, 2), 1.0) == 2.0
    now[0] = 30.0
    d.add(("p", "busy"), _key("s0"), (1, 2), 1.0)  # busy is in use now; old was last used at 0
    now[0] = 80.0
    assert d.add(("p", "new"), _key("x"), (0, 1), 1.0) == 1.0  # old (idle 80 s) made room; busy (50 s) kept
    assert d.add(("p", "busy"), _key("s0"), (2, 3), 1.0) == 3.0


def _delta_request(n_points: int, label_chars: int) -> bytes:
    attrs = [{"key": f"k{i}", "value": {"stringValue": "v" * label_chars}} for i in range(10)]
    return json.dumps({"resourceMetrics": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "p/e"}}]}, "scopeMetrics": [{"metrics": [
            {"name": "c", "sum": {"isMonotonic": True, "aggregationTemporality": 1, "dataPoints": [
                {"startTimeUnixNano": "1", "timeUnixNano": "2", "asDouble": 1.0,
                 "attributes": [*attrs, {"key": "i", "value": {"intValue": str(i)}}]}
                for i in range(n_points)]}}]}]}]}).encode()


def test_points_refused_by_validation_keep_nothing_in_the_totals() -> None:
    conv = OtlpMetrics()
    msg = conv.decode(_delta_request(200, 2000), "application/json")  # 10 labels of 2,000 characters: over 8,192
    batches, counts = conv.to_batches(msg)
    assert counts["too_long"] == 200 and not any(b["samples"] for b in batches)
    assert conv.deltas.stats() == {"runs": 0, "series": 0, "bytes": 0}
    msg = conv.decode(_delta_request(3, 10), "application/json")  # acceptable labels: kept
    batches, counts = conv.to_batches(msg)
    assert not counts and conv.deltas.stats()["series"] == 3
