"""The live metric store's resolution of series definitions (server/live/metric_store.py): a definition seen before
resolves to the SeriesRef it had (MetricStore._known), but never past what resolving it afresh would refuse or
change: a full family, a family dropped and made again, another kind under the same name."""

from __future__ import annotations

from rl_insight.protocol import ItemError, SeriesDef
from rl_insight.server.live.metric_store import MetricStore


def gauge(name: str, **labels: str) -> SeriesDef:
    return SeriesDef("gauge", name, dict(labels), "", None, None)


def test_a_definition_seen_before_resolves_to_the_same_ref_and_updates_the_same_series() -> None:
    store = MetricStore()
    d = gauge("actor/loss", rank="0")
    first, = store.resolve_many([d], "c1", None)
    again, = store.resolve_many([d], "c1", None)
    assert again is first
    store.apply_many([(first, 1.0, 0.5)], "c1")
    store.apply_many([(again, 2.0, 0.25)], "c1")
    assert store.series_count() == 1
    other, = store.resolve_many([d], "c1", "myjob")  # another namespace is another family
    assert other is not first and other.family.name != first.family.name


def test_a_remembered_definition_is_refused_once_its_family_is_full() -> None:
    store = MetricStore(max_series_per_metric=2)
    late = gauge("actor/loss", rank="9")
    ref, = store.resolve_many([late], "c1", None)  # resolved (and remembered) before any sample made its series
    assert not isinstance(ref, ItemError)
    for rank in ("0", "1"):
        r, = store.resolve_many([gauge("actor/loss", rank=rank)], "c1", None)
        store.apply_many([(r, 1.0, 1.0)], "c1")
    refused, = store.resolve_many([late], "c1", None)
    assert isinstance(refused, ItemError) and refused.reason == "series_cap"


def test_a_remembered_definition_follows_its_family_when_it_was_dropped_and_made_again() -> None:
    store = MetricStore()
    d = gauge("actor/loss")
    ref, = store.resolve_many([d], "c1", None)
    store.apply_many([(ref, 1.0, 1.0)], "c1")
    assert store.forget_client("c1") == 1  # the family is gone from /metrics
    again, = store.resolve_many([d], "c2", None)
    assert not isinstance(again, ItemError) and again.family is not ref.family
    store.apply_many([(again, 2.0, 3.0)], "c2")
    assert store.series_count() == 1


def test_a_remembered_definition_is_refused_when_its_name_now_holds_another_kind() -> None:
    store = MetricStore()
    d = gauge("actor/steps")
    ref, = store.resolve_many([d], "c1", None)
    store.apply_many([(ref, 1.0, 1.0)], "c1")
    store.forget_client("c1")
    counter, = store.resolve_many([SeriesDef("counter", "actor/steps", {}, "", None, None)], "c2", None)
    store.apply_many([(counter, 1.0, 5.0)], "c2")
    conflict, = store.resolve_many([d], "c1", None)
    assert isinstance(conflict, ItemError) and conflict.reason == "type_conflict"


def test_a_name_another_family_already_writes_into_metrics_is_refused_naming_the_collision() -> None:
    store = MetricStore()
    counter, hist = (SeriesDef("counter", "tokens", {}, "", None, None),
                     SeriesDef("histogram", "lat", {}, "", (1.0,), None))
    for d in (counter, hist):
        ref, = store.resolve_many([d], "c1", None)
        assert not isinstance(ref, ItemError)
    for name, clash in (("tokens_total", "rl_insight_monitor_tokens_total"),
                        ("lat_count", "rl_insight_monitor_lat_count"), ("lat_bucket", "rl_insight_monitor_lat_bucket")):
        refused, = store.resolve_many([gauge(name)], "c2", None)
        assert isinstance(refused, ItemError) and refused.reason == "name_collision", refused
        assert clash in str(refused) and "rename one" in str(refused)
    # the other way round: a gauge first, then the counter whose exposition would repeat it
    ref, = store.resolve_many([gauge("steps_total")], "c1", None)
    refused, = store.resolve_many([SeriesDef("counter", "steps", {}, "", None, None)], "c2", None)
    assert isinstance(refused, ItemError) and refused.reason == "name_collision"


def test_metrics_stays_valid_exposition_whatever_names_clients_send(tmp_path) -> None:
    """Through our own ingest, into /metrics, checked by Prometheus's own promtool."""
    import shutil
    import subprocess
    import time

    import httpx
    import pytest

    from tests.conftest import start_server

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus package) is not installed")
    srv = start_server(tmp_path)
    try:
        now = time.time()
        body = {"v": 1, "client": {"id": "c1", "project": "p", "experiment_name": "e"},
                "series": [{"k": "c", "n": "tokens"}, {"k": "h", "n": "lat", "b": [1.0]},
                           {"k": "g", "n": "tokens_total"}, {"k": "g", "n": "lat_count"}],
                "samples": [[0, now, 1, 3.0], [1, now, 1, [0.5, 1, [1, 1]]], [2, now, 1, 9.0], [3, now, 1, 7.0]]}
        reply = httpx.post(srv.url + "/api/v1/ingest", json=body).json()
        assert reply["accepted"] == 2 and {e["reason"] for e in reply["errors"]} == {"name_collision"}, reply
        text = httpx.get(srv.url + "/metrics").text
        assert text.count("# HELP rl_insight_monitor_tokens_total ") == 1
        out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert "duplicate" not in (out.stdout + out.stderr).lower(), out.stdout + out.stderr
    finally:
        srv.stop()
