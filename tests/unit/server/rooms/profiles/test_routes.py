"""`POST /api/v1/profiles` by run id: a run without an identity cannot be told a request, and says so (and lists
none)."""

from __future__ import annotations

import time

import httpx

from rl_insight.server.rooms.profiles.book import PASSED_GRACE_S
from tests.conftest import RunningServer


def _ingest(srv: RunningServer, client: dict) -> None:
    batch = {"v": 1, "client": {"id": client["id"], "pid": 1, "host": "h", **client.get("run", {})},
             "series": [{"k": "g", "n": "training/global_step", "l": {}}], "samples": [[0, time.time(), 3, 3.0]]}
    assert httpx.post(srv.url + "/api/v1/ingest", json=batch).status_code == 200


def test_a_run_without_identity_is_a_conflict_and_a_named_run_is_profiled(server: RunningServer) -> None:
    _ingest(server, {"id": "anon"})  # no project / experiment_name: stored under the empty identity
    _ingest(server, {"id": "named", "run": {"project": "p", "experiment_name": "e"}})
    listed = httpx.get(server.url + "/api/v1/runs").json()["runs"]
    runs = {(r["project"], r["experiment_name"]): r["id"] for r in listed}
    anon = httpx.post(server.url + "/api/v1/profiles", json={"run_id": runs[("", "")], "steps": "next"})
    assert anon.status_code == 409 and "no project and experiment_name" in anon.json()["detail"]
    assert "init(project=" in anon.json()["hint"]
    named = httpx.post(server.url + "/api/v1/profiles", json={"run_id": runs[("p", "e")], "steps": "next"})
    assert named.status_code == 201 and named.json()["request"]["project"] == "p"
    # listing by run id: the anonymous run has no requests (200, as documented; the fuzz found a 409 here),
    # the named one lists its own and not the other run's
    anon_list = httpx.get(server.url + "/api/v1/profiles", params={"run_id": runs[("", "")]})
    assert anon_list.status_code == 200 and anon_list.json() == {"profiles": [], "count": 0}
    named_list = httpx.get(server.url + "/api/v1/profiles", params={"run_id": runs[("p", "e")]}).json()
    assert named_list["count"] == 1 and named_list["profiles"][0]["id"] == named.json()["request"]["id"]


def _with_lanes(srv: RunningServer, cid: str, lanes: list[str], rank: int | None = None,
                step: tuple[int, float] | None = (3, 0.0)) -> None:
    """A live process of run p/e that has states open on `lanes` (and a rank when it knows one), and logged
    `step` = (step, seconds ago)."""
    now = time.time_ns()
    client = {"id": cid, "pid": 7, "host": "h", "project": "p", "experiment_name": "e",
              **({"rank": rank} if rank is not None else {})}
    starts = [{"id": f"{i + 1:016x}", "trace_id": "1" * 32, "name": "train_batch", "lane": lane, "kind": "state",
               "start_ns": now, "attributes": {}} for i, lane in enumerate(lanes)]
    batch = {"v": 1, "client": client, "series": [{"k": "g", "n": "training/global_step", "l": {}}],
             "samples": [[0, time.time() - step[1], step[0], float(step[0])]] if step else [], "span_starts": starts}
    assert httpx.post(srv.url + "/api/v1/ingest", json=batch).status_code == 200


def test_a_request_nobody_can_take_is_refused_at_once(server: RunningServer) -> None:
    unknown = httpx.post(server.url + "/api/v1/profiles", json={"project": "nope", "experiment_name": "none",
                                                               "steps": "5"})
    assert unknown.status_code == 404 and "no run nope/none" in unknown.json()["detail"]
    assert "--before-start" in unknown.json()["hint"]
    waiting = httpx.post(server.url + "/api/v1/profiles", json={"project": "nope", "experiment_name": "none",
                                                               "steps": "5", "wait_for_run": True})
    assert waiting.status_code == 201  # the job is about to start: kept for it
    _with_lanes(server, "threads", ["rank_0", "rank_1", "replica_0"])  # the demo's shape: lanes, no rank
    by_rank = httpx.post(server.url + "/api/v1/profiles", json={"project": "p", "experiment_name": "e", "steps": "9",
                                                               "ranks": [1]})
    assert by_rank.status_code == 409
    said = by_rank.json()["detail"]
    assert "no live process of run p/e matches ranks 1; it has 1 live process, none reports a rank, lanes " \
           "rank_0-1, replica_0" in said and "choose them with --lanes (rank_1)" in said
    by_lane = httpx.post(server.url + "/api/v1/profiles", json={"project": "p", "experiment_name": "e", "steps": "9",
                                                               "lanes": ["rank_1"]})
    assert by_lane.status_code == 201


def test_a_pending_request_is_over_once_its_step_ended(server: RunningServer) -> None:
    _with_lanes(server, "r1", ["rank_1"], rank=1, step=(1, 60))
    first = httpx.post(server.url + "/api/v1/profiles", json={"project": "p", "experiment_name": "e", "steps": "4",
                                                             "ranks": [1]}).json()
    late = httpx.post(server.url + "/api/v1/profiles", json={"project": "p", "experiment_name": "e", "steps": "6",
                                                            "ranks": [1]}).json()
    assert first["state"] == late["state"] == "pending"
    _with_lanes(server, "r1", ["rank_1"], rank=1, step=(4, PASSED_GRACE_S + 1))  # step 4 ended that long ago
    _with_lanes(server, "r1", ["rank_1"], rank=1, step=(6, 1))  # and step 6 a second ago
    batch = {"v": 1, "client": {"id": "r1", "pid": 7, "host": "h", "project": "p", "experiment_name": "e"}}
    reply = httpx.post(server.url + "/api/v1/ingest", json=batch).json()
    # step 4 ended a heartbeat and more ago and nobody took it: over; step 6 just ended: a process that armed it may
    # not have said so yet
    assert [r["id"] for r in reply["profile"]] == [late["id"]]
    req = first
    got = httpx.get(server.url + f"/api/v1/profiles/{req['id']}").json()
    assert got["state"] == "expired" and got["passed"]["message"].startswith("step 4 ended (the run is at step 4)")


def test_profiled_steps_are_marked_in_the_insights(server: RunningServer) -> None:
    _with_lanes(server, "r1", ["rank_1"], rank=1)
    rid = httpx.post(server.url + "/api/v1/profiles", json={"project": "p", "experiment_name": "e", "steps": "5",
                                                           "ranks": [1]}).json()["id"]
    now = time.time_ns()
    assert httpx.post(server.url + f"/api/v1/profiles/{rid}/status", json={
        "state": "uploading", "process": {"host": "h", "pid": 7, "rank": 1},
        "window": {"start_ns": now - 10**9, "end_ns": now, "steps": [5]}}).status_code == 200
    run_id = next(r["id"] for r in httpx.get(server.url + "/api/v1/runs").json()["runs"] if r["project"] == "p")
    insights = httpx.get(server.url + f"/api/v1/runs/{run_id}/insights").json()
    assert insights["profiled_steps"] == [5]
