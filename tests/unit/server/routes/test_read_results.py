"""The read routes' answers are typed (server/runstore/results.py): /openapi.json documents every field they return,
and what they return is what the type says, field for field (a key the query added and the type forgot fails
here)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, get_type_hints

import httpx
import pytest

from rl_insight.server.control.profiles import records as profiles
from rl_insight.server.control.stacks import records as stacks
from rl_insight.server.prometheus import targets as scrape
from rl_insight.server.routes.session import SessionAnswer
from rl_insight.server.runstore import results
from tests.conftest import start_server

ROUTES = {  # path -> the answer's type
    "/api/v1/runs": results.RunList,
    "/api/v1/runs/{run_id}": results.Run,
    "/api/v1/runs/{run_id}/metrics": results.MetricList,
    "/api/v1/runs/{run_id}/series": results.Series,
    "/api/v1/series": results.Comparison,
    "/api/v1/runs/{run_id}/lanes": results.LaneList,
    "/api/v1/runs/{run_id}/spans/{span_id}": results.SpanDetail,
    "/api/v1/runs/{run_id}/spans": results.SpanWindow,
    "/api/v1/runs/{run_id}/trajectories/steps": results.TrajectorySteps,
    "/api/v1/runs/{run_id}/trajectories": results.TrajectoryPage,
    "/api/v1/runs/{run_id}/trajectories/stats": results.TrajectoryStats,
    "/api/v1/runs/{run_id}/trajectories/{traj_id}": results.TrajectoryDetail,
    "/api/v1/session": SessionAnswer,
    "/api/v1/targets": scrape.TargetList,
    "/api/v1/runs/{run_id}/targets": scrape.RunTargets,
    "/api/v1/profiles": profiles.ProfileList,
    "/api/v1/profiles/{profile_id}": profiles.ProfileView,
    "/api/v1/runs/{run_id}/stacks": stacks.SnapshotList,
    "/api/v1/runs/{run_id}/stacks/{snapshot_id}": stacks.SnapshotView,
}


def _schema(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _keys(kind: Any) -> set[str]:
    return set(get_type_hints(kind))


def test_every_typed_read_route_documents_its_answer(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    try:
        spec = httpx.get(srv.url + "/openapi.json").json()
    finally:
        srv.stop()
    for path, kind in ROUTES.items():
        answer = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        documented = _schema(spec, answer)
        assert set(documented["properties"]) == _keys(kind), path
        required = set(documented.get("required", []))
        assert required == getattr(kind, "__required_keys__"), path  # NotRequired keys are optional


@pytest.fixture
def run(tmp_path: Path) -> Any:
    srv = start_server(tmp_path)
    now = time.time()
    lanes = {"project": "p", "experiment_name": "e"}
    body = {"v": 1, "client": {"id": "c1", "project": "p", "experiment_name": "e",
                               "run": {"config": {"actor.lr": 1e-6}, "tags": ["t"]}},
            "series": [{"k": "g", "n": "critic/score/mean", "l": lanes}],
            "samples": [[0, now - 2, 1, 0.5], [0, now - 1, 2, 0.75]],
            "spans": [{"id": "00000000000000aa", "trace_id": "0" * 32, "parent_id": None, "name": "gen",
                       "lane": "rollout/replica_0", "kind": "state", "start_ns": time.time_ns() - 10**9,
                       "end_ns": time.time_ns(), "attributes": lanes}]}
    assert httpx.post(srv.url + "/api/v1/ingest", json=body).json()["accepted"] == 3
    srv.app.state.st.writer.flush(10)
    yield srv
    srv.stop()


def test_the_answers_keep_every_field_their_queries_wrote(run: Any) -> None:
    get = lambda path, **params: httpx.get(run.url + path, params=params).json()  # noqa: E731
    runs = get("/api/v1/runs", metric="critic/score/mean", config="actor.lr")["runs"]
    assert set(runs[0]) == _keys(results.RunListed) - {"lost", "config"}  # the optional columns asked for are there
    assert runs[0]["metric"] == 0.75 and runs[0]["config_values"] == {"actor.lr": 1e-6} and not runs[0]["archived"]
    rid = runs[0]["id"]
    one = get(f"/api/v1/runs/{rid}")
    assert one["config"] == {"actor.lr": 1e-6} and one["tags"] == ["t"] and one["last_step"] == 2
    assert set(get(f"/api/v1/runs/{rid}/metrics")["metrics"][0]) == _keys(results.Metric)
    series = get(f"/api/v1/runs/{rid}/series", name="critic_score_mean")["series"][0]
    assert series["points"] == [[1, 0.5], [2, 0.75]] and series["total"] == 2
    assert get(f"/api/v1/runs/{rid}/lanes", counts="true")["lanes"][0] == {
        "lane": "rollout/replica_0", "spans": 1, "first_ns": pytest.approx(time.time_ns(), abs=60 * 10**9),
        "last_ns": pytest.approx(time.time_ns(), abs=60 * 10**9), "open": 0}
    window = get(f"/api/v1/runs/{rid}/spans")
    assert set(window) == _keys(results.SpanWindow) - {"left_out"} and window["columns"][0] == "lane"
    assert len(window["spans"]) == 1 and len(window["spans"][0]) == len(window["columns"])
    assert get(f"/api/v1/runs/{rid}/trajectories/steps") == {"steps": [], "without_step": False}
    assert set(get(f"/api/v1/runs/{rid}/trajectories", step="1")) == _keys(results.TrajectoryPage)
    assert set(get(f"/api/v1/runs/{rid}/trajectories/stats", step="1")) == _keys(results.TrajectoryStats)
    assert set(get("/api/v1/session")) == _keys(SessionAnswer)
    registered = httpx.post(run.url + "/api/v1/prometheus/targets", json={
        "project": "p", "experiment_name": "e", "targets": ["127.0.0.1:9100"], "job_name": "node"})
    assert registered.status_code == 200, registered.text
    listed = get("/api/v1/targets")
    assert set(listed) == _keys(scrape.TargetList) and set(listed["targets"][0]) == _keys(scrape.TargetAnswer)
    mine = get(f"/api/v1/runs/{rid}/targets")
    assert set(mine) == _keys(scrape.RunTargets) and set(mine["targets"][0]) == _keys(scrape.TargetHealth)
    span = get(f"/api/v1/runs/{rid}/spans/00000000000000aa")
    assert set(span) == _keys(results.SpanDetail) and span["open"] is False


def _fits(answer: dict[str, Any], kind: Any) -> None:
    """Every key the answer has, its type names; every key the type requires, the answer has."""
    assert set(answer) <= _keys(kind), set(answer) - _keys(kind)
    assert kind.__required_keys__ <= set(answer), kind.__required_keys__ - set(answer)


def test_the_control_books_answer_what_their_records_say(run: Any) -> None:
    asked = httpx.post(run.url + "/api/v1/profiles", json={"project": "p", "experiment_name": "e", "steps": "5"})
    assert asked.status_code == 201, asked.text
    listed = httpx.get(run.url + "/api/v1/profiles").json()
    _fits(listed, profiles.ProfileList)
    _fits(listed["profiles"][0], profiles.ProfileView)
    _fits(httpx.get(run.url + f"/api/v1/profiles/{asked.json()['id']}").json(), profiles.ProfileView)
    snap = httpx.post(run.url + "/api/v1/runs/1/stacks", json={"deadline_s": 1})
    assert snap.status_code == 201, snap.text
    run.app.state.st.stacks.tick(time.time() + 5)  # past its deadline: completed with who answered (nobody)
    snapshots = httpx.get(run.url + "/api/v1/runs/1/stacks").json()
    _fits(snapshots, stacks.SnapshotList)
    _fits(snapshots["snapshots"][0], stacks.SnapshotListed)
    one = httpx.get(run.url + f"/api/v1/runs/1/stacks/{snap.json()['id']}", params={"reports": "true"}).json()
    _fits(one, stacks.SnapshotView)
    assert one["state"] == "complete" and one["missing"] and "summary" in one and one["reports"] == {}
