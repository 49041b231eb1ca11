"""/api/v1/runs… over real HTTP with the real client: listing, series, spans, insights, exports, auth, restarts."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest

import rl_insight
from rl_insight.server.rooms.stacks import verdict_classes
from tests.conftest import RunningServer, start_server, wait_until

SERVER_ON_A_PORT = "the rl_insight client sends through the stdlib, not httpx"  # (tests/lanes.py)



def emit_run(
    url: str, steps: int = 5, project: str = "proj", experiment: str = "exp", monkeypatch=None, token: str = ""
) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    if token:
        monkeypatch.setenv("RL_INSIGHT_TOKEN", token)
    rl_insight.init(project=project, experiment_name=experiment)

    async def generate(r: int) -> None:
        with rl_insight.trace_state("vllm_generate", state_lane_id=f"replica_{r}"):
            await asyncio.sleep(0.01 * (1 + r))

    for step in range(1, steps + 1):
        async def rollout() -> None:
            await asyncio.gather(*(generate(r) for r in range(3)))
        # on a thread of its own: on a pytest-xdist worker an earlier module may leave an event loop set on the main
        # thread (asyncio.run then refuses to start; seen twice in CI with test_experiments_api)
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, rollout()).result()
        with rl_insight.trace_state("train_batch", state_lane_id="rank_0"):
            with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
                time.sleep(0.01)
        rl_insight.metric_gauge("training/global_step", step)
        rl_insight.metric_gauge("critic/score/mean", step / 10, role="actor")
        rl_insight.metric_count("tokens", 100)
    assert rl_insight.flush(10)


def wait_for_run(url: str, headers: dict | None = None) -> dict:
    def ready():
        runs = httpx.get(url + "/api/v1/runs", headers=headers or {}).json()["runs"]
        return runs[0] if runs and runs[0]["last_step"] == 5 else None
    return wait_until(ready, what="run in the store")


def test_runs_metrics_series_spans_insights(server, monkeypatch) -> None:
    emit_run(server.url, monkeypatch=monkeypatch)
    run = wait_for_run(server.url)
    assert (run["project"], run["experiment_name"], run["status"]) == ("proj", "exp", "live")
    rid = run["id"]
    listed = httpx.get(f"{server.url}/api/v1/runs/{rid}/metrics").json()["metrics"]
    names = {m["name"] for m in listed}
    assert {"training_global_step", "critic_score_mean", "tokens"} <= names  # sanitized, as on /metrics
    # and as the job logged them, for the UI's titles and legends (a name logged as stored says itself)
    logged = {m["name"]: m["logged"] for m in listed}
    assert logged["critic_score_mean"] == "critic/score/mean"
    assert logged["training_global_step"] == "training/global_step"
    assert logged["tokens"] == "tokens"
    s = httpx.get(f"{server.url}/api/v1/runs/{rid}/series", params={"name": "critic_score_mean"}).json()["series"][0]
    assert s["labels"] == {"role": "actor"} and [p[0] for p in s["points"]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert s["points"][-1][1] == pytest.approx(0.5)
    tokens = httpx.get(f"{server.url}/api/v1/runs/{rid}/series", params={"name": "tokens", "x": "time"}).json()[
        "series"
    ][0]
    assert tokens["points"][-1][1] == 500.0  # counters are stored as the server-side total

    sp = httpx.get(f"{server.url}/api/v1/runs/{rid}/spans").json()
    assert sp["lanes"] == ["rank_0", "replica_0", "replica_1", "replica_2"]
    assert {row[2] for row in sp["spans"]} == {"vllm_generate", "train_batch", "actor_update"}
    lanes = httpx.get(f"{server.url}/api/v1/runs/{rid}/lanes").json()["lanes"]
    assert [x["lane"] for x in lanes] == sp["lanes"]
    counted = httpx.get(f"{server.url}/api/v1/runs/{rid}/lanes", params={"counts": True}).json()["lanes"]
    assert [x["lane"] for x in counted] == sp["lanes"] and all(x["spans"] >= 5 for x in counted)

    ins = httpx.get(f"{server.url}/api/v1/runs/{rid}/insights", params={"window_s": 60}).json()
    assert set(ins["lanes"]) == set(sp["lanes"])
    assert ins["overlap"]["overlap_ratio"] == 0.0  # synchronous: generation and training never overlap
    assert ins["long_tail"] and ins["long_tail"][-1]["slowest_lane"] == "replica_2"
    assert {st["step"] for st in ins["steps"]} >= {2, 3, 4, 5}

    rl_insight.finish()
    wait_until(
        lambda: httpx.get(f"{server.url}/api/v1/runs/{rid}").json()["status"] == "finished", what="finished status"
    )


def test_compare_csv_and_perfetto_export(server, monkeypatch) -> None:
    emit_run(server.url, experiment="a", monkeypatch=monkeypatch)
    rl_insight.finish()
    emit_run(server.url, experiment="b", monkeypatch=monkeypatch)
    wait_until(lambda: len(httpx.get(server.url + "/api/v1/runs").json()["runs"]) == 2, what="two runs")
    ids = sorted(r["id"] for r in httpx.get(server.url + "/api/v1/runs").json()["runs"])
    cmp = httpx.get(
        server.url + "/api/v1/series", params={"name": "critic_score_mean", "runs": ",".join(map(str, ids))}
    ).json()
    assert [r["run_id"] for r in cmp["runs"]] == ids
    csv_text = httpx.get(f"{server.url}/api/v1/runs/{ids[0]}/export.csv", params={"names": "critic_score_mean"}).text
    assert csv_text.splitlines()[0] == "name,labels,step,timestamp,value,logged_name" and \
        len(csv_text.splitlines()) == 6
    assert csv_text.splitlines()[1].endswith(",critic/score/mean")  # as logged, as the UI shows it
    trace = httpx.get(f"{server.url}/api/v1/runs/{ids[0]}/trace.json")
    assert "attachment" in trace.headers["content-disposition"]
    events = trace.json()["traceEvents"]
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {
        "steps",  # the run's steps as a track of their own
        "rank_0",
        "replica_0",
        "replica_1",
        "replica_2",
    }
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    last_end = max(e["ts"] + e["dur"] for e in steps)
    assert [e["name"] for e in steps][:2] == ["step 1", "step 2"]
    assert all("step" in e["args"] for e in events if e["ph"] == "X" and e["cat"] == "state" and e["ts"] < last_end)
    whole = httpx.get(f"{server.url}/api/v1/runs/{ids[0]}/export.csv").text.splitlines()
    insight = [line for line in whole if line.startswith("rl_insight/")]
    assert insight and all(line.split(",")[2].isdigit() for line in insight), whole[-3:]  # per step, whole numbers


@pytest.mark.parametrize(
    "path,params,status,needle",
    [
        ("/api/v1/runs/999", {}, 404, "no run with id 999"),
        ("/api/v1/runs/999/metrics", {}, 404, "no run"),
        ("/api/v1/runs/1/series", {"name": "nope"}, 404, "no metric"),
        (
            "/api/v1/runs/1/series",
            {"name": "critic_score_mean", "points": 0},
            422,
            "points: Input should be greater than or equal to 2",
        ),
        (
            "/api/v1/runs/1/series",
            {"name": "critic_score_mean", "points": 10**9},
            422,
            "points: Input should be less than or equal to 20000",
        ),
        ("/api/v1/runs/1/series", {"name": "critic_score_mean", "from": 5, "to": 1}, 422, "empty window"),
        ("/api/v1/runs/1/series", {"name": "critic_score_mean", "x": "sideways"}, 422, None),
        ("/api/v1/runs/1/spans", {"from_ns": 10, "to_ns": 5}, 422, "empty window"),
        ("/api/v1/runs/1/spans", {"from_ns": 0, "to_ns": 5, "resolution_ns": -1}, 422, "resolution_ns"),
        ("/api/v1/runs/1/spans/nope", {}, 404, "no span"),
        ("/api/v1/runs/1/insights", {"from_ns": 10, "to_ns": 5}, 422, "empty window"),
        ("/api/v1/series", {"name": "x", "runs": "1,a"}, 422, "runs: expected 1 to 20 comma-separated run ids"),
        (
            "/api/v1/series",
            {"name": "x", "runs": ",".join(str(i) for i in range(30))},
            422,
            "expected 1 to 20 comma-separated run ids",
        ),
    ],
)
def test_bad_parameters_are_4xx_with_a_message(server, monkeypatch, path, params, status, needle) -> None:
    emit_run(server.url, monkeypatch=monkeypatch)
    wait_for_run(server.url)
    r = httpx.get(server.url + path, params=params)
    assert r.status_code == status, r.text
    if needle:
        assert needle in r.json()["detail"]


def test_token_protects_run_data_and_the_ui_session_cookie_works(token_server, monkeypatch) -> None:
    url = token_server.url
    emit_run(url, monkeypatch=monkeypatch, token="s3cret-token")
    assert httpx.get(url + "/api/v1/runs").status_code == 401
    assert httpx.get(url + "/api/v1/session").json() == {
        "auth_required": True,
        "authenticated": False,
        "who": None,
        "role": None,
        "projects": None,
        "prometheus_url": None,
        "grafana_url": None,
        "version": rl_insight.__version__,
        "verdict_classes": verdict_classes.as_json(),  # (open: the UI reads them before signing in; issue 65)
    }
    assert httpx.post(url + "/api/v1/login", json={"token": "wrong"}).status_code == 401
    with httpx.Client(base_url=url) as c:
        r = c.post("/api/v1/login", json={"token": "s3cret-token"})
        assert r.status_code == 200 and "httponly" in r.headers["set-cookie"].lower()
        assert c.get("/api/v1/session").json()["authenticated"] is True
        assert c.get("/api/v1/session").json()["role"] == "admin"  # the server's own token is the admin token
        assert c.get("/api/v1/runs").status_code == 200
    assert httpx.get(url + "/api/v1/runs", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    assert httpx.get(url + "/").status_code == 200  # the page itself holds no data


@pytest.fixture
def default_server(tmp_path) -> Iterator[RunningServer]:
    """A server as `server start` runs one: its store's writer and its insight rounds in child processes."""
    srv = start_server(tmp_path, store_writer="process", insights_worker="process")
    yield srv
    srv.stop()


@pytest.mark.external
def test_insight_metrics_on_prometheus_exposition(default_server, monkeypatch) -> None:
    server = default_server
    emit_run(server.url, monkeypatch=monkeypatch)
    wait_for_run(server.url)

    long_tail = 'rl_insight_insight_rollout_long_tail_ratio{experiment_name="exp",project="proj",slowest_lane="'

    def exposition() -> str | None:
        # the last step's spans may reach the store just after its step metric: until they have, that step's slowest
        # lane can be another one (seen once in CI), so wait for the one the run's last step makes the slowest
        server.app.state.st.insight.refresh()
        text = httpx.get(server.url + "/metrics").text
        return text if long_tail + 'replica_2"}' in text else None

    text = wait_until(exposition, what="the long-tail insight on /metrics naming replica_2")
    assert 'rl_insight_insight_lane_utilization{experiment_name="exp",lane="replica_0",project="proj"}' in text
    assert 'rl_insight_insight_rollout_training_overlap_ratio{experiment_name="exp",project="proj"} 0.0' in text
    assert text.count(long_tail) == 1  # one slowest lane, not the one from before the step was whole as well
    assert "rl_insight_server_store_items_written_total" in text
    insights = httpx.get(server.url + "/healthz").json()["insights"]  # computed in a process of their own
    assert insights["worker"] == "process" and insights["rounds"] >= 1 and insights["last_error"] is None


def test_run_metrics_and_spans_survive_a_server_restart(tmp_path, monkeypatch) -> None:
    srv = start_server(tmp_path)
    port = srv.config.port
    try:
        emit_run(srv.url, monkeypatch=monkeypatch)
        wait_for_run(srv.url)
        rl_insight.finish()
    finally:
        srv.stop()
    srv = start_server(tmp_path, port=port)
    try:
        run = httpx.get(srv.url + "/api/v1/runs").json()["runs"][0]
        assert run["experiment_name"] == "exp" and run["last_step"] == 5
        pts = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/series", params={"name": "training_global_step"}).json()
        assert [p[1] for p in pts["series"][0]["points"]] == [1.0, 2.0, 3.0, 4.0, 5.0]
        spans = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/spans").json()["spans"]
        assert len(spans) >= 5 * 3
        assert json.loads(httpx.get(srv.url + "/healthz").text)["store"]["degraded"] is False
        # the timeline summary catches up in the writer's upkeep and says so
        summary = wait_until(lambda: (lambda x: x if x["behind"] is False else None)(
            httpx.get(srv.url + "/healthz").json()["store"]["timeline_summary"]), what="the summary caught up")
        assert summary["failures"] == 0
        # the WAL's checkpoints run beside the commits (runstore/backend/checkpoints.py), reported from the writer's
        # process
        ck = wait_until(lambda: (lambda x: x if x["passes"] else None)(
            httpx.get(srv.url + "/healthz").json()["store"]["checkpoints"]), what="a checkpoint pass")
        assert ck["failures"] == 0 and ck["last_error"] is None
    finally:
        srv.stop()


def test_spans_px_merges_the_runs_own_window_to_the_views_width_in_one_answer(server, monkeypatch) -> None:
    emit_run(server.url, steps=5, monkeypatch=monkeypatch)
    rid = wait_for_run(server.url)["id"]
    full = httpx.get(f"{server.url}/api/v1/runs/{rid}/spans").json()
    merged = httpx.get(f"{server.url}/api/v1/runs/{rid}/spans", params={"px": 4}).json()
    # the same window the server chose, merged to about one item per pixel per lane and depth
    assert (merged["from_ns"], merged["lanes"]) == (full["from_ns"], full["lanes"])
    assert merged["resolution_ns"] == (merged["to_ns"] - merged["from_ns"]) // 4 > 0
    per_lane: dict[tuple[int, int], int] = {}
    for lane, depth, *_ in merged["spans"]:
        per_lane[(lane, depth)] = per_lane.get((lane, depth), 0) + 1
    assert len(merged["spans"]) < len(full["spans"]) and max(per_lane.values()) <= 2 * 4
    assert any(row[5] > 1 for row in merged["spans"])  # merged rows carry their count
    # an explicit resolution wins over px
    exact = httpx.get(f"{server.url}/api/v1/runs/{rid}/spans", params={"px": 4, "resolution_ns": 1}).json()
    assert exact["resolution_ns"] == 1
    assert httpx.get(f"{server.url}/api/v1/runs/{rid}/spans", params={"px": -1}).status_code == 422
