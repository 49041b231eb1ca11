"""`POST /api/v1/profiles` by run id: a run without an identity cannot be told a request, and says so."""

from __future__ import annotations

import time

import httpx

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
