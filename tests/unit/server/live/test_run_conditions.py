"""A stuck job is called what it is (server/live/run_conditions.py, issue 51 item 1): its processes' heartbeats keep
the run live (not `idle`), a lane far past its usual time makes it `stalled` with the reason, and a stall where
nobody moved between the server's own two snapshots makes it `hung` — with the real client, no click."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import rl_insight
from rl_insight.client import delivery
from rl_insight.server.intake import pipeline
from tests.conftest import start_server, wait_until


def _run(url: str, exp: str) -> dict[str, Any]:
    return next(r for r in httpx.get(url + "/api/v1/runs").json()["runs"] if r["experiment_name"] == exp)


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(pipeline, "HEARD_EVERY_S", 0.3)


def test_a_run_whose_processes_only_beat_stays_live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     fast: None) -> None:
    srv = start_server(tmp_path, live_window_s=1.5, stall_snapshots=False)
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        rl_insight.init(project="p", experiment_name="beats")
        with rl_insight.trace_state("train_batch", state_lane_id="rank_0"):
            rl_insight.flush(5)
            seen = set()
            for _ in range(12):  # 3.6 s of nothing but heartbeats: more than twice the live window
                time.sleep(0.3)
                seen.add(_run(srv.url, "beats")["status"])
            assert seen == {"live"}
        rl_insight.finish(5)
        assert wait_until(lambda: _run(srv.url, "beats")["status"] == "finished", timeout=10)
        # without a word, the run goes idle after the live window (a process that is gone does not beat)
        httpx.post(srv.url + "/api/v1/ingest", json={"v": 1, "client": {"id": "quiet", "project": "p",
                                                                       "experiment_name": "quiet"},
                                                    "series": [{"k": "g", "n": "x", "l": {"project": "p",
                                                                                          "experiment_name": "quiet"}}],
                                                    "samples": [[0, time.time(), 1, 1.0]]})
        assert wait_until(lambda: _run(srv.url, "quiet")["status"] == "idle", timeout=10)
    finally:
        srv.stop()


def test_a_run_stalled_by_hand_says_so_everywhere(tmp_path: Path) -> None:
    srv = start_server(tmp_path, stall_snapshots=False)
    try:
        body = {"v": 1, "client": {"id": "c", "project": "p", "experiment_name": "e"},
                "series": [{"k": "g", "n": "x", "l": {"project": "p", "experiment_name": "e"}}],
                "samples": [[0, time.time(), 1, 1.0]]}
        assert httpx.post(srv.url + "/api/v1/ingest", json=body).status_code == 200
        rid = _run(srv.url, "e")["id"]
        conditions = srv.app.state.st.conditions
        conditions.on_insights({("p", "e"): {"stalled": [{"lane": "rank_2", "state": "train_batch", "open_s": 226.0,
                                                          "usual_p95_s": 4.1}]}})
        one = httpx.get(f"{srv.url}/api/v1/runs/{rid}").json()
        assert one["status"] == "stalled"
        assert one["why"] == "rank_2 has been in train_batch for 226 s (usually 4.1 s at most)"
        assert [r["id"] for r in httpx.get(srv.url + "/api/v1/runs", params={"status": "stalled"}).json()["runs"]] \
            == [rid]
        assert httpx.get(srv.url + "/api/v1/runs", params={"status": "live"}).json()["runs"] == []
        assert conditions.mark_hung(("p", "e"), "nobody moved")
        assert httpx.get(f"{srv.url}/api/v1/runs/{rid}").json()["status"] == "hung"
        conditions.on_insights({("p", "e"): {"stalled": []}})  # it moves again
        assert "why" not in httpx.get(f"{srv.url}/api/v1/runs/{rid}").json()
        assert not conditions.mark_hung(("p", "e"), "nobody moved")  # not stalled: nothing to be hung
        assert httpx.get(srv.url + "/api/v1/runs", params={"status": "bogus"}).status_code == 422
    finally:
        srv.stop()


def test_a_hang_is_stalled_then_hung_with_two_snapshots_and_no_click(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     fast: None) -> None:
    """The real client in a state that never ends, beating only: within seconds the refresh calls the run stalled,
    the server takes the stacks by itself (the client answers on its sender thread), and the second snapshot finds
    nobody moved: hung."""
    srv = start_server(tmp_path, live_window_s=2.0, insights_interval_s=0.5, stalled_lane_min_s=1.5,
                       stall_confirm_s=1.5, stall_step_s=0.0)
    stop = threading.Event()
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        rl_insight.init(project="p", experiment_name="hang")
        for step in range(8):  # the state's usual length (a few milliseconds), known from steps the server summed up
            rl_insight.metric_gauge("training/global_step", step)
            with rl_insight.trace_state("train_batch", state_lane_id="rank_0"):
                time.sleep(0.02)
            time.sleep(0.03)
        rl_insight.flush(5)

        def wedged() -> None:  # the hang: one thread in a state, at one line, until told
            with rl_insight.trace_state("train_batch", state_lane_id="rank_0"):
                stop.wait(60)

        t = threading.Thread(target=wedged, name="wedged-rank")
        t.start()
        run = wait_until(lambda: (r := _run(srv.url, "hang"))["status"] == "stalled" and r, timeout=20,
                         what="the run to be called stalled")
        assert run["why"].startswith("rank_0 has been in train_batch for ")
        hung = wait_until(lambda: (r := _run(srv.url, "hang"))["status"] == "hung" and r, timeout=30,
                          what="two automatic snapshots, nobody moved")
        assert "nobody moved" in hung["why"]
        snaps = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}/stacks").json()["snapshots"]
        assert [s["origin"] for s in snaps] == ["auto", "auto"] and all(s["answered"] == 1 for s in snaps)
        stop.set()
        t.join(10)
        rl_insight.flush(5)
        assert wait_until(lambda: _run(srv.url, "hang")["status"] == "live", timeout=10, what="moving again")
    finally:
        stop.set()
        rl_insight.finish(5)
        srv.stop()
