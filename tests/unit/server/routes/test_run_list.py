"""The runs list for a team (issue 49 item 16): `GET /api/v1/runs` filtered by project, status, tag and a search,
sorted, with a summary metric's latest value and config columns; `rl-insight runs list` over it; and the "no such
run" error pointing at it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import RunningServer, start_server


def send(url: str, project: str, experiment: str, *, tags: list[str], score: float, lr: float, t0: float,
         finish: bool = False) -> None:
    body = {"v": 1, "client": {"id": f"{project}-{experiment}", "project": project, "experiment_name": experiment,
                               "run": {"config": {"actor.lr": lr, "data.batch": 64}, "tags": tags}},
            "series": [{"k": "g", "n": n, "l": {"project": project, "experiment_name": experiment}}
                       for n in ("critic/score/mean", "training/global_step")],
            "samples": [[0, t0, 1, score - 1.0], [0, t0 + 1, 2, score], [1, t0 + 1, 2, 2.0]]}
    if finish:
        body["final"] = True
    r = httpx.post(url + "/api/v1/ingest", json=body)
    assert r.status_code == 200 and r.json()["accepted"] == 3, r.text


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RunningServer]:
    s = start_server(tmp_path)
    now = time.time()
    send(s.url, "grpo", "qwen-7b-a", tags=["7b", "baseline"], score=0.61, lr=1e-6, t0=now - 30)
    send(s.url, "grpo", "qwen-7b-b", tags=["7b"], score=0.74, lr=3e-6, t0=now - 20)
    send(s.url, "dapo", "llama-8b", tags=["8b", "baseline"], score=0.55, lr=2e-6, t0=now - 10)
    s.app.state.st.writer.flush(10)
    yield s
    s.stop()


def names(url: str, **params: str) -> list[str]:
    r = httpx.get(url + "/api/v1/runs", params=params)
    assert r.status_code == 200, r.text
    return [x["experiment_name"] for x in r.json()["runs"]]


def test_filters_search_and_sort(srv: RunningServer) -> None:
    assert names(srv.url) == ["llama-8b", "qwen-7b-b", "qwen-7b-a"]  # newest activity first
    assert names(srv.url, project="grpo") == ["qwen-7b-b", "qwen-7b-a"]
    assert names(srv.url, tag="baseline") == ["llama-8b", "qwen-7b-a"]
    assert names(srv.url, q="QWEN") == ["qwen-7b-b", "qwen-7b-a"]  # case-insensitive, project/experiment or tags
    assert names(srv.url, q="8b") == ["llama-8b"]
    assert names(srv.url, status="live") == ["llama-8b", "qwen-7b-b", "qwen-7b-a"]
    assert names(srv.url, status="lost") == []
    assert names(srv.url, sort="name", order="asc") == ["llama-8b", "qwen-7b-a", "qwen-7b-b"]
    assert names(srv.url, sort="first_seen", order="asc", limit="2") == ["qwen-7b-a", "qwen-7b-b"]


def test_a_summary_metric_and_config_columns(srv: RunningServer) -> None:
    r = httpx.get(srv.url + "/api/v1/runs", params={"metric": "critic/score/mean", "sort": "metric",
                                                     "config": "actor.lr,missing.key"}).json()["runs"]
    assert [(x["experiment_name"], x["metric"]) for x in r] == [("qwen-7b-b", 0.74), ("qwen-7b-a", 0.61),
                                                                  ("llama-8b", 0.55)]  # the latest value, sorted
    assert r[0]["config_values"] == {"actor.lr": 3e-6, "missing.key": None}
    bad = httpx.get(srv.url + "/api/v1/runs", params={"sort": "metric"})
    assert bad.status_code == 422 and "metric=NAME" in bad.json()["detail"]
    assert httpx.get(srv.url + "/api/v1/runs", params={"status": "sleeping"}).status_code == 422


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rl_insight", *args], capture_output=True, text=True, timeout=60,
                          env={**__import__("os").environ, "COLUMNS": "200"})


def test_the_cli_lists_them_and_the_no_such_run_error_points_there(srv: RunningServer) -> None:
    out = _cli("runs", "list", "--server-url", srv.url, "--tag", "baseline", "--metric", "critic/score/mean",
               "--config-keys", "actor.lr")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "RUN", "STATUS", "TAGS"] and "CRITIC/SCORE/MEAN" in lines[0]
    assert [ln.split()[1] for ln in lines[1:]] == ["dapo/llama-8b", "grpo/qwen-7b-a"]
    assert "0.55" in lines[1] and "2e-06" in lines[1] and "8b,baseline" in lines[1]
    as_json = json.loads(_cli("runs", "list", "--server-url", srv.url, "--status", "live", "--json").stdout)
    assert len(as_json) == 3
    assert "no run listed logs" not in out.stderr
    typo = _cli("runs", "list", "--server-url", srv.url, "--metric", "critic/scor/mean")  # (issue 64: silent before)
    assert typo.returncode == 0 and "no run listed logs 'critic/scor/mean'" in typo.stderr
    assert "stalled, hung" in _cli("runs", "list", "--help").stdout
    empty = _cli("runs", "list", "--server-url", srv.url, "--project", "none")
    assert empty.returncode == 0 and "no runs on" in empty.stdout and "project=none" in empty.stdout
    missing = _cli("stacks", "--run", "grpo/nope", "--server-url", srv.url)
    assert missing.returncode != 0 and "rl-insight runs list" in missing.stderr
