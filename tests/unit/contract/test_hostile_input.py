"""Regression tests for the defects found by hostile testing (issue "Contracts first, then hardening").

Each test names the defect it covers; each failed on the code before the protocol/router rework.
Everything goes through real HTTP against a real server on loopback.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import stat
import time
from pathlib import Path

import httpx
import pytest

import rl_insight
from rl_insight.errors import StoreError
from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend import sqlite as sqlite_backend
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.conftest import start_server, wait_until

SERVER_ON_A_PORT = "the rl_insight client sends through the stdlib, not httpx"  # (tests/lanes.py)

JSON = {"Content-Type": "application/json"}


def post_batch(url: str, body: dict | bytes, headers: dict | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url + "/api/v1/ingest", content=content, headers={**JSON, **(headers or {})}, timeout=10)


def batch(series: list, samples: list, client: str = "c1", **extra: object) -> dict:
    return {"v": 1, "client": {"id": client, "pid": 1, "host": "h"}, "series": series, "samples": samples, **extra}


def good_gauge(url: str, client: str = "good") -> None:
    r = post_batch(url, batch([{"k": "g", "n": "healthy_metric", "l": {"project": "p", "experiment_name": "ok"}}],
                              [[0, time.time(), 1, 1.5]], client=client))
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text


# ------------------------------------------------------------------ 1. lone surrogates
def test_1_surrogate_label_from_the_real_client_never_breaks_metrics_or_spans(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="e")
    shard = os.fsdecode(b"/data/shard-\xff.bin")  # a lone surrogate, as Python decodes undecodable file names
    rl_insight.metric_gauge("loader/bytes", 3.0, shard=shard)
    rl_insight.trace_span(name="read " + shard, start_time_ns=1_000, end_time_ns=2_000, attributes={"file": shard})
    with rl_insight.trace_state("rollout" + shard, state_lane_id="replica_0"):
        pass
    rl_insight.flush(5)
    good_gauge(server.url)
    m = httpx.get(server.url + "/metrics")
    assert m.status_code == 200
    assert (
        'rl_insight_monitor_loader_bytes{experiment_name="e",project="p",shard="/data/shard-\ufffd.bin"} 3.0' in m.text
    )
    assert "rl_insight_monitor_healthy_metric" in m.text
    assert "rl_insight_server_ingest_strings_replaced_total" in m.text
    recent = httpx.get(server.url + "/api/v1/spans/recent")
    assert recent.status_code == 200
    assert {"read /data/shard-\ufffd.bin", "rollout/data/shard-\ufffd.bin"} <= {
        s["name"] for s in recent.json()["spans"]
    }


# ------------------------------------------------------------------ 2. run-store writer poisoning
def test_2_one_unstorable_item_never_costs_other_items_or_later_writes(tmp_path: Path) -> None:
    w = RunStoreWriter(tmp_path / "rs.sqlite", flush_interval_s=10)  # one drain pass takes everything below
    try:
        good = [SampleRow("p", "a", "loss", "gauge", "{}", float(i), 1000.0 + i, 0.5) for i in range(5)]
        overflow = SampleRow("p", "bad", "loss", "gauge", "{}", 2**70, 1000.0, 1.0)  # int past SQLite's int64
        surrogate = SampleRow("p", "bad\udcff", "loss", "gauge", "{}", 1.0, 1000.0, 1.0)  # not encodable as UTF-8
        w.put_samples(good[:2] + [overflow])
        w.put_spans([], [SpanRecord("s1", "t", None, "gen", "replica_0", "state", 2**64, 2**64 + 5, {"project": "p"})])
        w.put_samples([surrogate] + good[2:])
        w.put_spans([], [SpanRecord("s2", "t", None, "gen", "replica_0", "state", 10, 20,
                                    {"project": "p", "experiment_name": "a"})])
        assert w.flush(10)
        assert w.stats.by_reason == {"invalid_item": 3}
        r = RunStoreReader(tmp_path / "rs.sqlite")
        runs = {(x["project"], x["experiment_name"]): x for x in q.list_runs(r.conn())}
        assert set(runs) == {("p", "a")}
        assert q.metric_names(r.conn(), runs[("p", "a")]["id"])[0]["samples"] == 5
        assert [s["id"] for s in q.spans_in(r.conn(), runs[("p", "a")]["id"], 0, 100)] == ["s2"]
        w.put_samples([SampleRow("p", "a", "loss", "gauge", "{}", 9.0, 2000.0, 0.1)])  # the next write still works
        assert w.flush(10)
        assert q.metric_names(r.conn(), runs[("p", "a")]["id"])[0]["samples"] == 6
        assert w.stats.degraded_since is None
    finally:
        w.close()


def test_2_out_of_range_numbers_are_refused_at_the_boundary_and_counted(server) -> None:
    series = [{"k": "g", "n": "x", "l": {"project": "p", "experiment_name": "e"}}]
    r = post_batch(
        server.url,
        batch(
            series,
            [[0, 2**63, 1, 1.0], [0, time.time(), 2**70, 1.0], [0, time.time(), 1, 2.0]],
            span_starts=[{"id": "a", "name": "n", "start_ns": 2**63}],
            spans=[{"id": "b", "name": "n", "start_ns": 1, "end_ns": 2**64}],
        ),
    )
    body = r.json()
    assert r.status_code == 200 and body["accepted"] == 1 and body["rejected"] == 4
    assert {e["reason"] for e in body["errors"]} == {"out_of_range"}
    server.app.state.st.writer.flush(10)
    assert server.app.state.st.writer.stats.by_reason == {}


# ------------------------------------------------------------------ 3. huge histogram count
def test_3_histogram_with_a_huge_count_is_refused_and_metrics_stay_up(server) -> None:
    h = {"k": "h", "n": "lat", "l": {}, "b": [1.0]}
    r = post_batch(
        server.url, json.dumps(batch([h], [[0, time.time(), None, [1.0, 10**400, [10**400, 10**400]]]])).encode()
    )
    assert r.status_code == 422 and r.json()["errors"][0]["reason"] == "out_of_range"
    good_gauge(server.url)
    assert httpx.get(server.url + "/metrics").status_code == 200
    assert httpx.get(server.url + "/metrics").status_code == 200  # and on every later scrape


# ------------------------------------------------------------------ 4. cross-site requests, DNS rebinding
def test_4_cross_site_writes_and_rebinding_are_refused_without_a_token(server) -> None:
    body = json.dumps(batch([{"k": "g", "n": "x", "l": {}}], [[0, time.time(), 1, 1.0]])).encode()
    # a <form> or fetch(no-cors) can send text/plain without a preflight
    r = httpx.post(server.url + "/api/v1/ingest", content=body, headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["hint"]
    r = httpx.post(server.url + "/api/v1/prometheus/targets", content=b'{"targets":["evil:1"]}',
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    r = httpx.post(server.url + "/api/v1/prometheus/targets", json={"targets": ["evil:1"]},
                   headers={"Origin": "http://attacker.example"})
    assert r.status_code == 403 and "cross-origin" in r.json()["detail"]
    r = httpx.delete(server.url + "/api/v1/targets", params={"job": "x"}, headers={"Origin": "http://localhost:9999"})
    assert r.status_code == 403
    r = httpx.request("OPTIONS", server.url + "/api/v1/ingest",
                      headers={"Origin": "http://attacker.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 405 and "access-control-allow-origin" not in r.headers
    # DNS rebinding: attacker.example resolves to 127.0.0.1, the browser sends its own Host
    r = httpx.get(server.url + "/api/v1/spans/open", headers={"Host": "attacker.example:80"})
    assert r.status_code == 403 and "not a name of this server" in r.json()["detail"]
    assert httpx.get(server.url + "/api/v1/targets").json()["count"] == 0  # nothing was registered
    # the server's own pages (same origin) and plain clients still work
    own = server.url.replace("127.0.0.1", "localhost")
    r = httpx.post(own + "/api/v1/ingest", content=body, headers={**JSON, "Origin": own})
    assert r.status_code == 200
    ui = httpx.get(server.url + "/")
    assert "frame-ancestors 'none'" in ui.headers["content-security-policy"]
    assert ui.headers["x-content-type-options"] == "nosniff"


# ------------------------------------------------------------------ 5. one bad run and the insights
def test_5_a_run_with_non_finite_steps_never_stops_other_runs_insights(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    try:
        st = srv.app.state.st
        now = time.time()
        st.writer.put_samples([SampleRow("p", "bad", "training_global_step", "gauge", "{}", 1.0, now, float("inf")),
                               SampleRow("p", "good", "training_global_step", "gauge", "{}", 1.0, now - 5, 1.0),
                               SampleRow("p", "good", "training_global_step", "gauge", "{}", 2.0, now, 2.0)])
        st.writer.put_spans(
            [],
            [
                SpanRecord(
                    "x",
                    "t",
                    None,
                    "vllm_generate",
                    "replica_0",
                    "state",
                    int((now - 4) * 1e9),
                    int((now - 1) * 1e9),
                    {"project": "p", "experiment_name": exp, "param_version": "inf"},
                )
                for exp in ("bad", "good")
            ][:1]
            + [
                SpanRecord(
                    "y",
                    "t",
                    None,
                    "vllm_generate",
                    "replica_0",
                    "state",
                    int((now - 4) * 1e9),
                    int((now - 1) * 1e9),
                    {"project": "p", "experiment_name": "good"},
                )
            ],
        )
        assert st.writer.flush(10)
        st.insight.refresh()
        text = httpx.get(srv.url + "/metrics").text
        assert 'rl_insight_insight_lane_utilization{experiment_name="good",lane="replica_0",project="p"}' in text
        runs = {r["experiment_name"]: r["id"] for r in httpx.get(srv.url + "/api/v1/runs").json()["runs"]}
        r = httpx.get(f"{srv.url}/api/v1/runs/{runs['bad']}/insights")
        assert r.status_code == 200, r.text
    finally:
        srv.stop()


# ------------------------------------------------------------------ 7. 500 instead of 4xx
@pytest.mark.parametrize("route", ["/api/v1/ingest", "/api/v1/prometheus/targets", "/api/v1/login"])
def test_7_deeply_nested_json_is_a_400(server, route: str) -> None:
    r = httpx.post(server.url + route, content=b"[" * 30_000 + b"]" * 30_000, headers=JSON)
    assert r.status_code == 400 and "nested too deeply" in r.json()["detail"]


def test_7_numbers_past_float_range_are_refused_items_not_500(server) -> None:
    raw = (b'{"v":1,"client":{"id":"c"},"series":[{"k":"g","n":"x","l":{}},{"k":"c","n":"y","l":{}}],'
           b'"samples":[[0,1e309,1,1.0],[0,1700000000,1,1e309],[1,1700000000,1,-1e309],[0,1700000000,1,2.5]]}')
    r = post_batch(server.url, raw)
    assert r.status_code == 200 and (r.json()["accepted"], r.json()["rejected"]) == (1, 3)
    assert {e["reason"] for e in r.json()["errors"]} == {"non_finite"}


@pytest.mark.parametrize("path,params", [
    ("/api/v1/runs/9223372036854775808", {}),
    ("/api/v1/runs/1/spans", {"from_ns": 2**64, "to_ns": 2**65}),
    ("/api/v1/runs/1/insights", {"from_ns": 0, "to_ns": 2**63}),
    ("/api/v1/series", {"name": "x", "runs": str(2**64)}),
])
def test_7_integers_past_int64_in_queries_are_422(server, path: str, params: dict) -> None:
    r = httpx.get(server.url + path, params=params)
    assert r.status_code == 422, r.text
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]


# ------------------------------------------------------------------ 8. memory bounded by size
def test_8_names_families_and_labels_are_bounded(tmp_path: Path) -> None:
    srv = start_server(tmp_path, max_families_per_client=50)
    try:
        long_name = {"k": "g", "n": "n" * 300, "l": {}}
        r = post_batch(srv.url, batch([long_name], [[0, time.time(), 1, 1.0]]))
        assert r.json()["errors"][0]["reason"] == "too_long"
        series = [{"k": "g", "n": f"flood_{i}", "l": {}} for i in range(80)]
        r = post_batch(srv.url, batch(series, [[i, time.time(), 1, 1.0] for i in range(80)], client="flooder"))
        body = r.json()
        assert body["accepted"] == 50 and {e["reason"] for e in body["errors"]} == {"family_cap"}
        good_gauge(srv.url)  # another client is not affected by the flooder's limit
        text = httpx.get(srv.url + "/metrics").text
        assert "rl_insight_monitor_healthy_metric" in text and "rl_insight_monitor_flood_79" not in text
        assert 'rl_insight_server_ingest_items_rejected_total{reason="family_cap"} 30.0' in text
    finally:
        srv.stop()


def test_8_open_spans_are_paged_and_bounded_by_bytes(server) -> None:
    starts = [{"id": f"s{i}", "name": "rollout", "lane": f"replica_{i}", "start_ns": 1 + i, "kind": "state",
               "attributes": {"blob": "x" * 4000}} for i in range(30)]
    assert post_batch(server.url, batch([], [], span_starts=starts)).json()["accepted"] == 30
    page = httpx.get(server.url + "/api/v1/spans/open", params={"limit": 10}).json()
    assert (page["count"], page["total"], page["next_offset"]) == (10, 30, 10)
    last = httpx.get(server.url + "/api/v1/spans/open", params={"offset": 20, "limit": 10}).json()
    assert [s["id"] for s in last["spans"]] == [f"s{i}" for i in range(20, 30)] and last["next_offset"] is None
    from rl_insight.server.live.spans import MemorySpanSink

    sink = MemorySpanSink(max_bytes=100_000)  # 50 kB for open states
    recs = [SpanRecord(f"o{i}", "t", None, "gen", "r", "state", i, None, {}, size=5_000) for i in range(30)]
    sink.put(recs, [])
    assert sink.open_count() == 10 and sink.evicted["open"] == 20


# ------------------------------------------------------------------ 9. read protection, file modes
def test_9_spans_and_targets_need_the_token_when_one_is_set(token_server) -> None:
    for path in ("/api/v1/spans/open", "/api/v1/spans/recent", "/api/v1/targets", "/api/v1/runs"):
        assert httpx.get(token_server.url + path).status_code == 401, path
        ok = httpx.get(token_server.url + path, headers={"Authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200, path
    assert httpx.get(token_server.url + "/metrics").status_code == 200
    assert httpx.get(token_server.url + "/healthz").status_code == 200


def test_9_run_store_is_private(server) -> None:
    store = server.config.store_file
    good_gauge(server.url)
    server.app.state.st.writer.flush(10)
    for f in (store, store.with_name(store.name + "-wal")):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE(store.parent.stat().st_mode) == 0o700


def test_9_a_store_or_home_in_a_shared_folder_leaves_that_folders_mode(tmp_path: Path) -> None:
    """A store at /tmp/runs.sqlite once made /tmp 0700 for every other user: only folders made here are tightened."""
    from rl_insight.services.home import Home

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    store = shared / "rs.sqlite"
    RunStoreWriter(store).close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE(store.stat().st_mode) == 0o600  # the data itself stays private
    RunStoreWriter(shared / "new" / "rs.sqlite").close()
    assert stat.S_IMODE((shared / "new").stat().st_mode) == 0o700  # made here: this user only
    h = Home(shared)
    h.ensure()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    for d in (h.data_dir, h.logs_dir, h.run_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


# ------------------------------------------------------------------ 10. start-up errors
def test_10_damaged_store_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rs.sqlite"
    w = RunStoreWriter(path)
    w.put_samples([SampleRow("p", "e", f"m{i}", "gauge", "{}", 1.0, 1.0, 1.0) for i in range(3000)])
    w.close()
    data = bytearray(path.read_bytes())
    page = 4096
    for off in range(3 * page, min(len(data), 12 * page)):
        data[off] = 0x5A  # scribble over b-tree pages, keep the header
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info:
        RunStoreWriter(path)
    assert str(path) in str(info.value) and ".recover" in str(info.value)


def test_10_read_only_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="permission denied|cannot be written"):
            RunStoreWriter(ro / "data" / "rs.sqlite")
    finally:
        ro.chmod(0o700)


def test_10_read_only_store_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "rs.sqlite"
    RunStoreWriter(path).close()
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions")
    path.chmod(0o400)
    with pytest.raises(StoreError, match="cannot be written|permission"):
        RunStoreWriter(path)


def test_10_large_store_is_checked_after_start_not_before(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "rs.sqlite"
    RunStoreWriter(path).close()
    calls = []
    real = sqlite_backend.quick_check
    monkeypatch.setattr(sqlite_backend, "QUICK_CHECK_MAX_BYTES", 0)
    monkeypatch.setattr(sqlite_backend, "quick_check", lambda c: calls.append(c) or time.sleep(0.3) or real(c))
    w = RunStoreWriter(path)
    try:
        assert w.integrity == "checking"  # the constructor returned before the check finished
        wait_until(lambda: w.integrity == "ok", what="background integrity check")
        assert len(calls) == 1  # (on opening, none: the file is over the bound)
    finally:
        w.close()


# ------------------------------------------------------------------ 11. client
def test_11_bad_url_turns_monitoring_off_with_one_clear_line(caplog) -> None:
    caplog.set_level(logging.ERROR, logger="rl_insight")
    rl_insight.init(config={"server": {"url": "ftp://nowhere:1"}})
    assert not rl_insight.is_enabled()
    rl_insight.metric_gauge("x", 1.0)  # still a silent no-op
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "ftp://nowhere:1" in lines[0] and "scheme 'ftp'" in lines[0]


def test_11_errors_name_the_url_and_route(server, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="rl_insight")
    rl_insight.init(config={"server": {"url": server.url + "/wrong-prefix"}})
    rl_insight.metric_gauge("x", 1.0)
    assert rl_insight.flush(5) is False
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert f"{server.url}/wrong-prefix/api/v1/ingest" in msg and "HTTP 404" in msg


def test_11_flush_marker_never_evicts_a_record(capture, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    monkeypatch.setenv("RL_INSIGHT_QUEUE_SIZE", "100")
    monkeypatch.setenv("RL_INSIGHT_FLUSH_INTERVAL", "5")  # the thread sleeps: the queue fills to its bound
    rl_insight.init()
    for i in range(100):
        rl_insight.metric_gauge("g", float(i), i=str(i))
    assert rl_insight.flush(5) is True  # the full queue plus a flush: no drop
    assert rl_insight.stats()["dropped"] == {}
    sent = sum(1 for b in capture.batches() for s in b["samples"] if b["series"][s[0]]["n"] == "g")
    assert sent == 100


# ------------------------------------------------------------------ 12. the contract
def test_12_openapi_documents_bodies_and_error_answers(server) -> None:
    spec = httpx.get(server.url + "/openapi.json").json()
    ingest = spec["paths"]["/api/v1/ingest"]["post"]
    body_schema = ingest["requestBody"]["content"]["application/json"]["schema"]
    assert {"client", "series", "samples", "spans"} <= set(body_schema["properties"])
    assert {"400", "401", "413", "415", "422"} <= set(ingest["responses"])
    targets = spec["paths"]["/api/v1/prometheus/targets"]["post"]
    assert "targets" in targets["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert spec["paths"]["/api/v1/runs/{run_id}"]["get"]["responses"]["404"]["content"]["application/json"][
        "schema"
    ] == {"$ref": "#/components/schemas/ErrorBody"}
    # a parameter error has the documented shape: {"detail": str, "hint"?, "errors"?}
    r = httpx.get(server.url + "/api/v1/runs/abc")
    assert (
        r.status_code == 422 and isinstance(r.json()["detail"], str) and r.json()["errors"][0]["loc"] == "path.run_id"
    )


def test_gzip_bomb_is_still_bounded(tmp_path: Path) -> None:
    srv = start_server(tmp_path, max_body_bytes=1_000_000)
    try:
        bomb = gzip.compress(b"{" + b" " * 50_000_000 + b"}")
        r = post_batch(srv.url, bomb, headers={"Content-Encoding": "gzip"})
        assert r.status_code == 413
    finally:
        srv.stop()


def test_10_data_dir_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    """Works as root too (where permission bits do not stop anything): the parent is a file."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StoreError) as info:
        RunStoreWriter(blocker / "data" / "rs.sqlite")
    assert "cannot create the run store" in str(info.value) and str(blocker / "data" / "rs.sqlite") in str(info.value)
    # the server process reports it in one line and exits, no traceback
    import subprocess
    import sys

    from rl_insight.server.config import ServerConfig
    from tests.conftest import free_port

    cfg = tmp_path / "server.json"
    cfg.write_text(ServerConfig(host="127.0.0.1", port=free_port(), data_dir=str(blocker / "data")).to_json())
    r = subprocess.run(
        [sys.executable, "-m", "rl_insight.server", "--config", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "cannot create" in r.stderr and "not-a-dir" in r.stderr


def test_9_home_logs_and_rotated_logs_are_private(tmp_path: Path) -> None:
    from rl_insight.services import process
    from rl_insight.services.home import Home

    h = Home(tmp_path / "home")
    h.ensure()
    for d in (h.root, h.data_dir, h.logs_dir, h.run_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    log = h.logs_dir / "ingest.log"
    f = process.open_log(log)
    f.write(b"x" * 100)
    f.close()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert process.rotate_if_large(log, limit=10)
    assert stat.S_IMODE((h.logs_dir / "ingest.log.1").stat().st_mode) == 0o600


def test_staleness_card_reads_verls_own_metric(tmp_path: Path) -> None:
    """(UI issue) verl's separate-async trainer logs its staleness; the insights use it when no param_version is
    given."""
    srv = start_server(tmp_path)
    try:
        now = time.time()
        rows = [
            SampleRow(
                "p",
                "async",
                "training_off_policy_trajectory_staleness_mean",
                "gauge",
                "{}",
                float(i),
                now - 10 + i,
                0.5 + i,
            )
            for i in range(3)
        ]
        rows.append(
            SampleRow("p", "async", "training_off_policy_trajectory_staleness_max", "gauge", "{}", 2.0, now - 8, 3.0)
        )
        srv.app.state.st.writer.put_samples(rows)
        srv.app.state.st.writer.flush(10)
        (run,) = httpx.get(srv.url + "/api/v1/runs").json()["runs"]
        st = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/insights").json()["staleness"]
        assert st == {"mean": 2.5, "max": 3.0, "samples": 3, "source": "verl"}
    finally:
        srv.stop()
