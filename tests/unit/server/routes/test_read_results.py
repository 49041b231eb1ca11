"""The read routes' answers are typed (server/runstore/results.py): /openapi.json documents every field they return,
and what they return is what the type says, field for field (a key the query added and the type forgot fails
here)."""

from __future__ import annotations

import time
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import httpx
import pytest
from typing_extensions import is_typeddict

from rl_insight.semantics import panels as catalogue
from rl_insight.server.prometheus import answers as prometheus
from rl_insight.server.prometheus import targets as scrape
from rl_insight.server.rooms.alerting import notifications
from rl_insight.server.rooms.profiles import records as profiles
from rl_insight.server.rooms.stacks import records as stacks
from rl_insight.server.rooms.stacks.feature import stacks_of
from rl_insight.server.routes import health, spans
from rl_insight.server.routes.session import SessionAnswer
from rl_insight.server.runstore import results
from rl_insight.server.runstore.steps import answers
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
    "/api/v1/runs/{run_id}/verdict": stacks.VerdictAnswer,
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
    assert set(runs[0]) == _keys(results.RunListed) - {"lost", "why", "config"}  # the optional columns asked for
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
    stacks_of(run.app.state.st).tick(time.time() + 5)  # past its deadline: completed with who answered (nobody)
    snapshots = httpx.get(run.url + "/api/v1/runs/1/stacks").json()
    _fits(snapshots, stacks.SnapshotList)
    _fits(snapshots["snapshots"][0], stacks.SnapshotListed)
    one = httpx.get(run.url + f"/api/v1/runs/1/stacks/{snap.json()['id']}", params={"reports": "true"}).json()
    _fits(one, stacks.SnapshotView)
    assert one["state"] == "complete" and one["missing"] and "summary" in one and one["reports"] == {}
    verdict = httpx.get(run.url + "/api/v1/runs/1/verdict").json()
    _conforms(verdict, stacks.VerdictAnswer)
    assert verdict["snapshot"]["id"] == snap.json()["id"] and verdict["verdict"]["class"] == "unknown"


def _conforms(value: Any, kind: Any, where: str = "answer") -> None:
    """`value` is what `kind` says, all the way down: a typed dict's keys (every required one there, none it does not
    name), and each value's type through lists, maps, unions and literals."""
    origin, args = get_origin(kind), get_args(kind)
    if kind is Any:
        return
    if is_typeddict(kind):
        assert isinstance(value, dict), (where, value)
        hints = get_type_hints(kind)
        assert set(value) <= set(hints), (where, set(value) - set(hints))
        assert kind.__required_keys__ <= set(value), (where, kind.__required_keys__ - set(value))
        for k, v in value.items():
            _conforms(v, hints[k], f"{where}.{k}")
    elif origin in (Union, UnionType):
        errors = []
        for option in args:
            try:
                return _conforms(value, option, where)
            except AssertionError as e:
                errors.append(e)
        raise AssertionError(where, value, kind, errors)
    elif origin is Literal:
        assert value in args, (where, value, args)
    elif origin is list:
        assert isinstance(value, list), (where, value)
        for i, v in enumerate(value):
            _conforms(v, args[0], f"{where}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), (where, value)
        for k, v in value.items():
            assert isinstance(k, str), (where, k)
            _conforms(v, args[1], f"{where}[{k!r}]")
    elif kind is type(None):
        assert value is None, (where, value)
    elif kind is float:
        assert type(value) in (int, float), (where, value)  # JSON: an integral number may come back an int
    else:
        assert type(value) is kind, (where, value, kind)


ANALYSES = {  # path -> the answer's type: the routes a run's steps feed
    "/api/v1/runs/{run_id}/insights": answers.Insights,
    "/api/v1/runs/{run_id}/critical-path": answers.CriticalPath,
    "/api/v1/runs/{run_id}/explain": answers.Explanation,
    "/api/v1/runs/diff": answers.RunsDiff,
    "/api/v1/runs/{run_id}/moe": results.Moe,
    "/api/v1/runs/{run_id}/ledger": answers.Ledger,
}
SERVICES = {  # the server's own, Prometheus' (not configured in process) and the in-memory sink's
    "/healthz": health.Health,
    "/api/v1/services": health.Services,
    "/api/v1/metric-families": prometheus.MetricFamilies,
    "/api/v1/runs/{run_id}/panels": prometheus.PanelSections,
    "/api/v1/runs/{run_id}/panels/{section_id}": prometheus.SectionData,
    "/api/v1/runs/{run_id}/alerts": prometheus.AlertList,
    "/api/v1/alerts": prometheus.AlertList,
    "/api/v1/experiments": prometheus.ExperimentList,
    "/api/v1/experiments/targets": prometheus.ExperimentTargets,
    "/api/v1/spans/open": spans.OpenSpans,
    "/api/v1/spans/recent": spans.RecentSpans,
    "/api/v1/alerting": notifications.NotificationStatus,
}
ROUTES.update(ANALYSES)
ROUTES.update(SERVICES)


def _steps_of_a_run(url: str, project: str, experiment: str, slow_lane: str | None = None,
                    headers: dict[str, str] | None = None) -> None:
    """Five steps of a sync schedule: two replicas generate, one rank trains; `slow_lane` generates twice as long;
    step 6 is open on the trainer (a state still running), and MoE load is logged at each step."""
    t0 = time.time_ns() - 60 * 10**9
    lanes = {"project": project, "experiment_name": experiment}
    series = [{"k": "g", "n": "training/global_step", "l": lanes},
              {"k": "g", "n": "rollout/moe/max_vio/layer_0", "l": lanes},
              {"k": "g", "n": "rollout/moe/load/layer_0/expert_1", "l": lanes}]
    samples, items, starts = [], [], []
    for step in range(1, 7):
        a = t0 + (step - 1) * 5 * 10**9
        samples += [[0, a / 1e9, step, step], [1, a / 1e9, step, 0.1 * step], [2, a / 1e9, step, 0.4]]
        if step == 6:
            starts.append({"id": f"{step:016x}", "name": "train_batch", "lane": "rank_0", "kind": "state",
                           "start_ns": a, "attributes": lanes})
            break
        for i, lane in enumerate(("replica_0", "replica_1")):
            gen = 2 * 10**9 if lane == slow_lane else 10**9
            items.append({"id": f"{step:08x}{i:08x}", "name": "generate_sequences", "lane": lane, "kind": "state",
                          "start_ns": a, "end_ns": a + gen, "attributes": lanes})
        items.append({"id": f"{step:08x}{9:08x}", "name": "train_batch", "lane": "rank_0", "kind": "state",
                      "start_ns": a + 2 * 10**9 + 10**8, "end_ns": a + 4 * 10**9, "attributes": lanes})
    body = {"v": 1, "client": {"id": f"steps-{experiment}", "project": project, "experiment_name": experiment},
            "series": series, "samples": samples, "span_starts": starts, "spans": items}
    r = httpx.post(url + "/api/v1/ingest", json=body, headers=headers)
    assert r.status_code == 200 and r.json()["accepted"] == len(samples) + len(starts) + len(items), r.text


def test_the_analyses_answer_what_their_types_say_all_the_way_down(run: Any) -> None:
    _steps_of_a_run(run.url, "q", "base")
    _steps_of_a_run(run.url, "q", "slow", slow_lane="replica_1")
    run.app.state.st.writer.flush(10)
    ids = {r["experiment_name"]: r["id"] for r in httpx.get(run.url + "/api/v1/runs").json()["runs"]}
    a, b = ids["base"], ids["slow"]
    get = lambda path, **params: httpx.get(run.url + path, params=params)  # noqa: E731
    answers_by_path = {
        "/api/v1/runs/{run_id}/insights": get(f"/api/v1/runs/{b}/insights", window_s=600),
        "/api/v1/runs/{run_id}/critical-path": get(f"/api/v1/runs/{b}/critical-path", stage="train_batch"),
        "/api/v1/runs/{run_id}/explain": get(f"/api/v1/runs/{b}/explain", stage="train_batch"),
        "/api/v1/runs/diff": get("/api/v1/runs/diff", a=a, b=b),
        "/api/v1/runs/{run_id}/moe": get(f"/api/v1/runs/{b}/moe"),
        "/api/v1/runs/{run_id}/ledger": get(f"/api/v1/runs/{b}/ledger"),
    }
    for path, answer in answers_by_path.items():
        assert answer.status_code == 200, (path, answer.text)
        _conforms(answer.json(), ROUTES[path], path)
    insights = answers_by_path["/api/v1/runs/{run_id}/insights"].json()
    assert insights["steps"] and insights["long_tail"] and insights["long_tail"][0]["slowest_lane"] == "replica_1"
    assert insights["rollout_wait"] and set(insights["lanes"]) == {"replica_0", "replica_1", "rank_0"}
    path = answers_by_path["/api/v1/runs/{run_id}/critical-path"].json()
    assert path["elements"] and {"stage", "stage_s"} <= set(path["what_if"])  # the optional what-ifs asked for
    diff = answers_by_path["/api/v1/runs/diff"].json()
    assert diff["aligned_steps"] >= 3 and diff["lanes"] and "generation_delta_s" in diff["lanes"][0]
    moe = answers_by_path["/api/v1/runs/{run_id}/moe"].json()
    assert moe["layers"] == [0] and moe["experts"]["hot"] == {"layer": 0, "expert": 1, "share": 0.4,
                                                               "times_fair": 0.8}
    nothing_in_common = get("/api/v1/runs/diff", a=a, b=b, a_steps="1-2", b_steps="90-99").json()
    _conforms(nothing_in_common, answers.RunsDiff, "diff without common steps")  # the medians are left out
    reads = {  # the run store's reads of the same runs, all the way down too
        "/api/v1/runs": get("/api/v1/runs", metric="training/global_step", config="x"),
        "/api/v1/runs/{run_id}": get(f"/api/v1/runs/{b}", config="true"),
        "/api/v1/runs/{run_id}/metrics": get(f"/api/v1/runs/{b}/metrics"),
        "/api/v1/runs/{run_id}/series": get(f"/api/v1/runs/{b}/series", name="training_global_step"),
        "/api/v1/series": get("/api/v1/series", name="training_global_step", runs=f"{a},{b}"),
        "/api/v1/runs/{run_id}/lanes": get(f"/api/v1/runs/{b}/lanes", counts="true"),
        "/api/v1/runs/{run_id}/spans": get(f"/api/v1/runs/{b}/spans"),
        "/api/v1/runs/{run_id}/spans/{span_id}": get(f"/api/v1/runs/{b}/spans/{6:016x}"),
    }
    for path, answer in reads.items():
        assert answer.status_code == 200, (path, answer.text)
        _conforms(answer.json(), ROUTES[path], path)


def test_the_services_answer_what_their_types_say_all_the_way_down(run: Any) -> None:
    _steps_of_a_run(run.url, "q", "base")
    rid = httpx.get(run.url + "/api/v1/runs", params={"project": "q"}).json()["runs"][0]["id"]
    registered = httpx.post(run.url + "/api/v1/prometheus/targets", json={
        "project": "q", "experiment_name": "base", "targets": ["127.0.0.1:9100"], "job_name": "node"})
    assert registered.status_code == 200, registered.text
    section = next(iter(catalogue.BY_ID))
    paths = {
        "/healthz": "/healthz", "/api/v1/services": "/api/v1/services",
        "/api/v1/metric-families": "/api/v1/metric-families",
        "/api/v1/runs/{run_id}/panels": f"/api/v1/runs/{rid}/panels",
        "/api/v1/runs/{run_id}/panels/{section_id}": f"/api/v1/runs/{rid}/panels/{section}",
        "/api/v1/runs/{run_id}/alerts": f"/api/v1/runs/{rid}/alerts", "/api/v1/alerts": "/api/v1/alerts",
        "/api/v1/experiments": "/api/v1/experiments",
        "/api/v1/experiments/targets": "/api/v1/experiments/targets?project=q&experiment_name=base",
        "/api/v1/spans/open": "/api/v1/spans/open", "/api/v1/spans/recent": "/api/v1/spans/recent",
        "/api/v1/alerting": "/api/v1/alerting",
    }
    for route, url in paths.items():
        answer = httpx.get(run.url + url)
        assert answer.status_code == 200, (url, answer.text)
        _conforms(answer.json(), ROUTES[route], url)
    healthz = httpx.get(run.url + "/healthz").json()
    assert {"store", "insights"} <= set(healthz) and healthz["store"]["checkpoints"] is not None
    assert httpx.get(run.url + "/api/v1/spans/open").json()["total"] == 1  # step 6's train_batch
    listed = httpx.get(run.url + "/api/v1/experiments").json()["experiments"]
    assert [(e["experiment_name"], e["run_id"], e["target_count"]) for e in listed] == [("base", rid, 1)]
    no_prometheus = httpx.get(run.url + f"/api/v1/runs/{rid}/panels/{section}").json()
    assert no_prometheus["prometheus"]["state"] == "not_configured" and no_prometheus["panels"] == []


def test_the_conformance_check_catches_what_it_is_for() -> None:
    good = {"run_id": 1, "steps": 2, "median_step_s": None, "what_if": {"tail": {"median_s": 0.5, "total_s": 1}},
            "biggest": "tail", "path_stages": {}, "path_lanes": {}, "pending_steps": 0, "biggest_text": None}
    _conforms(good, answers.Explanation)
    for bad in ({k: v for k, v in good.items() if k != "biggest"},  # a required key missing
                {**good, "surprise": 1},  # a key the type does not name
                {**good, "what_if": {"tail": {"median_s": "0.5", "total_s": 1}}},  # a nested value of the wrong type
                {**good, "steps": 2.0}):  # an int field that came back a float
        with pytest.raises(AssertionError):
            _conforms(bad, answers.Explanation)
