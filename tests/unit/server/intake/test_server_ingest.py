"""POST /api/v1/ingest and GET /metrics over real HTTP: validation, idempotency, limits, auth."""

from __future__ import annotations

import gzip
import json
import time

import httpx
import pytest

from rl_insight._version import __version__ as rl_insight_version
from rl_insight.protocol import SeriesDef
from rl_insight.semantics.names import InvalidNameError, sanitize_label_name, sanitize_metric_name
from rl_insight.server.live.metric_store import MetricStore
from tests.conftest import start_server, wait_until


def batch(series, samples, client="c1", **extra):
    return {"v": 1, "client": {"id": client, "pid": 1, "host": "h"}, "series": series, "samples": samples, **extra}


def post(server, body, headers=None, raw=None):
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(server.url + "/api/v1/ingest", content=content,
                      headers={"Content-Type": "application/json", **(headers or {})}, timeout=10)


def exposition(server) -> str:
    return httpx.get(server.url + "/metrics").text


G = {"k": "g", "n": "val-core/openai/gsm8k/acc/mean@1", "l": {"project": "p", "experiment_name": "e"}}


@pytest.mark.parametrize("raw,expected", [
    ("val-core/openai/gsm8k/acc/mean@1", "val_core_openai_gsm8k_acc_mean_1"),
    ("timing_s/gen", "timing_s_gen"),
    ("9lives", "_9lives"),
    ("ok:name_1", "ok:name_1"),
    ("héllo world", "h_llo_world"),
])
def test_metric_name_sanitization(raw, expected) -> None:
    assert sanitize_metric_name(raw) == expected


def test_label_name_sanitization_and_reserved() -> None:
    assert sanitize_label_name("replica-id") == "replica_id"
    assert sanitize_label_name("0rank") == "_0rank"
    for bad in ("__name__", "", "__x"):
        with pytest.raises(InvalidNameError):
            sanitize_label_name(bad)


def test_gauge_exposed_with_prefix_and_sanitized_name(server) -> None:
    r = post(server, batch([G], [[0, time.time(), 3, 0.75]]))
    assert r.status_code == 200 and r.json()["accepted"] == 1
    assert 'rl_insight_monitor_val_core_openai_gsm8k_acc_mean_1{experiment_name="e",project="p"} 0.75' in exposition(
        server
    )


def test_older_gauge_sample_never_overwrites_newer(server) -> None:
    now = time.time()
    post(server, batch([G], [[0, now, 2, 2.0], [0, now - 10, 1, 1.0]]))
    assert 'acc_mean_1{experiment_name="e",project="p"} 2.0' in exposition(server)


def test_resent_counter_batch_is_idempotent_and_clients_are_summed(server) -> None:
    c = {"k": "c", "n": "tokens_total", "l": {"project": "p"}}
    b1 = batch([c], [[0, time.time(), None, 30.0]], client="a")
    for _ in range(3):  # the same cumulative batch applied three times
        assert post(server, b1).status_code == 200
    post(server, batch([c], [[0, time.time(), None, 12.0]], client="b"))
    post(server, batch([c], [[0, time.time(), None, 25.0]], client="a"))  # an older total arriving late
    text = exposition(server)
    assert 'rl_insight_monitor_tokens_total{project="p"} 42.0' in text
    assert "rl_insight_monitor_tokens_total_total" not in text


def test_histogram_exposition(server) -> None:
    h = {"k": "h", "n": "lat", "l": {}, "b": [0.1, 1.0]}
    post(server, batch([h], [[0, time.time(), None, [0.55, 2, [1, 2, 2]]]], client="a"))
    post(server, batch([h], [[0, time.time(), None, [5.0, 1, [0, 0, 1]]]], client="b"))
    text = exposition(server)
    assert 'rl_insight_monitor_lat_bucket{le="0.1"} 1.0' in text
    assert 'rl_insight_monitor_lat_bucket{le="+Inf"} 3.0' in text
    assert "rl_insight_monitor_lat_count 3.0" in text and "rl_insight_monitor_lat_sum 5.55" in text


def test_partial_batch_reports_invalid_items_by_index(server) -> None:
    series = [G, {"k": "g", "n": "", "l": {}}, {"k": "g", "n": "ok", "l": {"__bad": "x"}}]
    samples = [
        [0, time.time(), 1, 1.0],        # ok
        [1, time.time(), 1, 1.0],        # empty metric name
        [2, time.time(), 1, 1.0],        # reserved label name
        [0, "yesterday", 1, 1.0],        # bad timestamp
        [7, time.time(), 1, 1.0],        # unknown series index
        [0, time.time(), 1, "high"],     # non-numeric gauge value
        "nonsense",
    ]
    spans = [{"id": "a1", "name": "gen", "start_ns": 10, "end_ns": 5}]
    r = post(server, batch(series, samples, spans=spans))
    assert r.status_code == 200
    body = r.json()
    assert (body["accepted"], body["rejected"]) == (1, 7)
    reasons = {(e["section"], e["index"]): e["reason"] for e in body["errors"]}
    assert reasons == {("samples", 1): "invalid_metric_name", ("samples", 2): "invalid_label_name",
                       ("samples", 3): "invalid_value", ("samples", 4): "invalid_sample",
                       ("samples", 5): "invalid_value", ("samples", 6): "invalid_sample", ("spans", 0): "invalid_span"}
    text = exposition(server)
    assert 'rl_insight_server_ingest_items_rejected_total{reason="invalid_sample"} 2.0' in text


def test_all_invalid_is_422_and_keeps_stored_data(server) -> None:
    post(server, batch([G], [[0, time.time(), 1, 5.0]]))
    r = post(server, batch([G], [[0, time.time(), 1, None]]))
    assert r.status_code == 422 and r.json()["rejected"] == 1
    assert 'acc_mean_1{experiment_name="e",project="p"} 5.0' in exposition(server)


def test_type_conflict_and_negative_counter_rejected(server) -> None:
    post(server, batch([{"k": "g", "n": "x", "l": {}}], [[0, time.time(), None, 1.0]]))
    r = post(server, batch([{"k": "c", "n": "x", "l": {}}, {"k": "c", "n": "y", "l": {}}],
                           [[0, time.time(), None, 1.0], [1, time.time(), None, -3.0]]))
    reasons = sorted(e["reason"] for e in r.json()["errors"])
    assert reasons == ["out_of_range", "type_conflict"]


@pytest.mark.parametrize("raw,headers,status,needle", [
    (b"{not json", {}, 400, "not valid JSON"),
    (b"\x1f\x8b garbage", {"Content-Encoding": "gzip"}, 400, "not valid gzip"),
    (b"[]", {}, 422, "JSON object"),
    (json.dumps({"v": 99, "client": {"id": "x"}}).encode(), {}, 422, "protocol version"),
    (json.dumps({"v": 1, "samples": []}).encode(), {}, 422, "client"),
    (json.dumps({"v": 1, "client": {"id": "x"}, "samples": {}}).encode(), {}, 422, "'samples' must be a list"),
    (b"x", {"Content-Encoding": "br"}, 400, "Content-Encoding"),
])
def test_malformed_bodies_get_clear_errors(server, raw, headers, status, needle) -> None:
    r = post(server, None, headers=headers, raw=raw)
    assert r.status_code == status
    assert needle in r.json()["detail"]


def test_oversized_body_is_413(tmp_path) -> None:
    srv = start_server(tmp_path, max_body_bytes=10_000)
    try:
        r = post(srv, batch([G], [[0, time.time(), 1, 1.0]] * 1000))
        assert r.status_code == 413 and "limit of 10000 bytes" in r.json()["detail"]
        # a gzip bomb: tiny on the wire, huge once inflated
        bomb = gzip.compress(b"[" + b" " * 5_000_000 + b"]")
        r = post(srv, None, headers={"Content-Encoding": "gzip"}, raw=bomb)
        assert r.status_code == 413 and "decompressed" in r.json()["detail"]
    finally:
        srv.stop()


def test_a_small_body_that_inflates_past_the_inline_bound_is_still_taken(server) -> None:
    """Small bodies are handled on the event loop only while they stay small once gunzip'd; one that inflates past
    that (but within the limit) takes the thread-pool way and is stored like any other."""
    from rl_insight.server.routes.ingest import INLINE_BYTES, INLINE_DECODED_BYTES

    body = json.dumps(batch([G], [[0, time.time(), 1, 1.0]]))
    raw = gzip.compress((body[:-1] + " " * (INLINE_DECODED_BYTES * 2) + "}").encode())
    assert len(raw) <= INLINE_BYTES
    r = post(server, None, headers={"Content-Encoding": "gzip"}, raw=raw)
    assert r.status_code == 200 and r.json()["accepted"] == 1


def test_token_required_for_writes_only(token_server) -> None:
    body = batch([G], [[0, time.time(), 1, 1.0]])
    assert post(token_server, body).status_code == 401
    assert post(token_server, body, headers={"Authorization": "Bearer nope"}).status_code == 401
    r = post(token_server, body, headers={"Authorization": "Bearer s3cret-token"})
    assert r.status_code == 200
    assert httpx.get(token_server.url + "/metrics").status_code == 200
    assert httpx.get(token_server.url + "/healthz").json()["status"] == "ok"
    r = httpx.post(token_server.url + "/api/v1/prometheus/targets", json={"targets": ["a:1"]})
    assert r.status_code == 401


def test_series_cap_counts_rejections(tmp_path) -> None:
    srv = start_server(tmp_path, max_series_per_metric=3)
    try:
        series = [{"k": "g", "n": "m", "l": {"i": str(i)}} for i in range(5)]
        r = post(srv, batch(series, [[i, time.time(), None, 1.0] for i in range(5)]))
        assert r.json()["accepted"] == 3
        assert {e["reason"] for e in r.json()["errors"]} == {"series_cap"}
        assert 'rl_insight_server_ingest_items_rejected_total{reason="series_cap"} 2.0' in exposition(srv)
    finally:
        srv.stop()


def test_stale_series_leave_exposition() -> None:
    store = MetricStore(series_ttl_s=0.2)
    ref = store.resolve(SeriesDef("gauge", "old", {}, "", None, None))
    store.apply(ref, "c", time.time(), 1.0)
    assert [m.name for m in store.snapshot()] == ["rl_insight_monitor_old"]
    time.sleep(0.3)
    assert store.snapshot() == []


def test_services_endpoint_has_upstream_fields(server) -> None:
    body = httpx.get(server.url + "/api/v1/services").json()
    assert body["status"] == "ok"
    assert {"otlp_port", "prometheus_port", "grafana_port"} <= set(body)
    assert body["prometheus_port"] is None  # not configured in this test server
    assert body["services"]["ingest"] == {"url": server.url, "state": "running", "version": rl_insight_version}


def _ack_waits(text: str) -> float:
    line = next((x for x in text.splitlines() if x.startswith("rl_insight_server_ingest_ack_wait_seconds_count")), "")
    return float(line.rsplit(" ", 1)[1]) if line else 0.0


def test_how_long_each_answer_waited_for_its_commit_is_on_metrics(server) -> None:
    assert server.app.state.st.writer is not None  # (answers wait for the run store's commit only where there is one)
    before = _ack_waits(exposition(server))
    for i in range(3):
        assert post(server, batch([G], [[0, time.time(), i, 0.5]])).status_code == 200
    text = exposition(server)
    assert _ack_waits(text) == before + 3
    slowest = 'rl_insight_server_ingest_ack_wait_seconds_bucket{le="10.0"}'
    assert float(next(x for x in text.splitlines() if x.startswith(slowest)).rsplit(" ", 1)[1]) == before + 3


def test_metrics_bounds_refuse_what_metrics_shows_never_what_the_run_store_keeps(tmp_path) -> None:
    """Past /metrics' own bounds (metrics per client, series per metric) a sample is refused on /metrics and reported
    so, as ever; the run store keeps it all the same: every family and series whole, and queryable."""
    srv = start_server(tmp_path, max_families_per_client=3, max_series_per_metric=2)
    try:
        run = {"project": "p", "experiment_name": "capped"}
        series = ([{"k": "g", "n": f"fam_{i}", "l": run} for i in range(2)]
                  + [{"k": "c", "n": "wide_total", "l": {**run, "i": str(i)}} for i in range(4)]
                  + [{"k": "g", "n": f"late_{i}", "l": run} for i in range(3)])
        now = time.time()
        samples = [[s, now + step, step, float(10 * s + step)] for step in (1, 2) for s in range(len(series))]
        r = post(srv, batch(series, samples))
        body = r.json()
        # /metrics: two gauges and two of the counter's series fit; the third family's other two series and the three
        # later families do not (as before)
        assert body["accepted"] == 8, body
        assert {e["reason"] for e in body["errors"]} == {"series_cap", "family_cap"}
        text = exposition(srv)
        assert "late_0" not in text and 'i="3"' not in text

        def stored() -> dict | None:
            runs = httpx.get(srv.url + "/api/v1/runs").json()["runs"]
            run_id = next((x["id"] for x in runs if x["experiment_name"] == "capped"), None)
            if run_id is None:
                return None
            listed = httpx.get(srv.url + f"/api/v1/runs/{run_id}/metrics").json()["metrics"]
            return {"id": run_id, "metrics": listed} if len(listed) == len(series) else None

        found = wait_until(stored, what="every series of the capped batch in the run store")
        by_name: dict[str, list[dict]] = {}
        for m in found["metrics"]:
            by_name.setdefault(m["name"], []).append(m)
        assert sorted(by_name) == ["fam_0", "fam_1", "late_0", "late_1", "late_2", "wide"]
        assert len(by_name["wide"]) == 4 and all(m["samples"] == 2 for m in found["metrics"])
        late = httpx.get(srv.url + f"/api/v1/runs/{found['id']}/series", params={"name": "late_2"}).json()
        points = [p for s in late["series"] for p in s["points"]]
        assert [p[1] for p in points] == [81.0, 82.0]  # (series 8: 10 * 8 + step)
    finally:
        srv.stop()
