"""Profile on demand, end to end: a real server, 2 gloo ranks running a verl-shaped loop with real torch
(CPU), a request for one step on one rank -> exactly one trace, covering exactly that step, from that rank
only; analysed on arrival; the loop's step time outside the window unchanged."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, start_server, wait_until

pytest.importorskip("torch")
TOKEN = "profile-token"
ROOT = Path(__file__).resolve().parents[2]


def _job(url: str, experiment: str, world: int, steps: int, step_s: float, extra_env: dict | None = None) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_TOKEN": TOKEN, "JOB_PROJECT": "gloo", "JOB_EXPERIMENT": experiment,
               "PYTHONPATH": str(ROOT), **(extra_env or {}).get(rank, {})}
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.profile_job", str(steps), str(step_s)], env=env, cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def _wait(procs: list[subprocess.Popen], timeout: float = 240) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        outs.append(out + err)
    return outs


def _step_times(out: str) -> dict[int, float]:
    return {int(line.split()[1]): float(line.split()[2]) for line in out.splitlines() if line.startswith("step ")}


@pytest.fixture
def srv(tmp_path: Path):
    s = start_server(tmp_path, token=TOKEN)
    yield s
    s.stop()


def _api(srv) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)


def test_one_step_on_one_rank_yields_exactly_that_trace(srv, tmp_path: Path) -> None:
    api = _api(srv)
    r = api.post("/api/v1/profiles", json={"project": "gloo", "experiment_name": "one", "steps": "4", "ranks": [1],
                                           "activities": ["cpu"]})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    outs = _wait(_job(srv.url, "one", world=2, steps=7, step_s=0.25))
    assert all("done" in o for o in outs), outs

    prof = wait_until(lambda: (p := api.get(f"/api/v1/profiles/{rid}").json())["state"] == "done" and p, timeout=60,
                      what="the request to finish")
    procs = list(prof["processes"].values())
    assert [p["rank"] for p in procs] == [1]  # rank 0 never armed, never started a profiler
    assert procs[0]["state"] == "uploaded" and procs[0]["window"]["steps"] == [4]
    files = [n for n, f in prof["files"].items() if f["complete"]]
    assert len(files) == 1 and "_rank1" in files[0]

    raw = api.get(f"/api/v1/profiles/{rid}/files/{files[0]}").content
    trace = json.loads(gzip.decompress(raw))
    work = sorted({e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("work_step")})
    assert work == ["work_step4"]  # exactly step 4: the window opened after step 3 and closed at step 4
    assert trace["distributedInfo"]["rank"] == 1

    # analysed on arrival by the offline analysis: the events carry step 4, the report is served
    assert wait_until(lambda: api.get(f"/api/v1/profiles/{rid}").json()["analysis"]["state"] == "done", timeout=60,
                      what="analysis")
    analysis = api.get(f"/api/v1/profiles/{rid}").json()["analysis"]
    assert analysis["lanes"] == ["process/rank1"], analysis
    summary = api.get(f"/api/v1/profiles/{rid}/report/summary.json").json()
    assert [s["step"] for s in summary["steps"]] == [4]
    html = api.get(f"/api/v1/profiles/{rid}/report/timeline.html")
    assert html.status_code == 200 and "work_step4" in html.text
