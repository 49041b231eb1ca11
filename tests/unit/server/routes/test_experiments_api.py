"""/api/v1/experiments over real HTTP: an experiment's discovery state (upstream's active / archived) next to its
run's own status, so a finished job no longer reads as "active" alone — in the API and in `experiments list`."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

import rl_insight
from tests.conftest import wait_until
from tests.unit.server.routes.test_runs_api import emit_run, wait_for_run


@pytest.mark.socket  # (the job's client and the CLI's child process speak to a real port)
def test_an_experiment_row_carries_its_runs_status(server, monkeypatch, tmp_path) -> None:
    emit_run(server.url, project="proj", experiment="exp", monkeypatch=monkeypatch)
    run = wait_for_run(server.url)
    for target, experiment in (("10.0.0.9:9400", "exp"), ("10.0.0.9:9401", "no-run")):
        body = {"targets": [target], "job_name": "dcgm", "project": "proj", "experiment_name": experiment}
        assert httpx.post(server.url + "/api/v1/prometheus/targets", json=body).status_code == 200
    rows = {e["experiment_name"]: e for e in httpx.get(server.url + "/api/v1/experiments").json()["experiments"]}
    assert (rows["exp"]["state"], rows["exp"]["run_status"], rows["exp"]["run_id"]) == ("active", "live", run["id"])
    assert (rows["no-run"]["run_status"], rows["no-run"]["run_id"]) == (None, None)  # targets, but no run reported
    rl_insight.finish()
    wait_until(lambda: {e["experiment_name"]: e for e in httpx.get(server.url + "/api/v1/experiments").json()[
        "experiments"]}["exp"]["run_status"] == "finished", what="finished in the experiments list")
    # the CLI's table says both: the job finished, its targets are still discovered
    r = subprocess.run([sys.executable, "-m", "rl_insight", "server", "experiments", "list", "--server-url", server.url,
                        "--home", str(tmp_path / "h")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    head, *lines = [line.split() for line in r.stdout.splitlines() if line.strip()]
    assert head == ["PROJECT", "EXPERIMENT", "RUN", "STATE", "TARGETS"]
    assert ["proj", "exp", "finished", "active", "1"] in lines and ["proj", "no-run", "–", "active", "1"] in lines
