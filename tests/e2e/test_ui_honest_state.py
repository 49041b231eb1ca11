"""The page tells how a run ended and whether it is still current (real Chromium, a real server on a token): a job
killed mid-step is `lost` with the lane it had open, not `finished`; when the server stops, a banner says the page
is stale instead of showing old data silently."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.test_ui import ARTIFACTS, _need_browser, _server, sign_in

pytestmark = pytest.mark.e2e
TOKEN = "e2e-honest-token"
JOB = r"""
import time
import rl_insight
rl_insight.init(project="p", experiment_name="killed")
for step in (1, 2):
    rl_insight.metric_gauge("training/global_step", step)
    with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
        time.sleep(0.2)
block = rl_insight.trace_state("actor_update", state_lane_id="rank_0")
block.__enter__()  # step 3 is under way when the job is killed
assert rl_insight.flush(10)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_job_is_lost_and_a_stopped_server_shows_a_banner(tmp_path: Path, page) -> None:
    _need_browser()
    server, url = _server(tmp_path, TOKEN, {"client_silence_s": 1.5})
    env = {**os.environ, "RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_TOKEN": TOKEN}
    job = subprocess.Popen([sys.executable, "-c", JOB], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "ready"
        job.send_signal(signal.SIGKILL)
        job.wait(10)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        wait_until(lambda: httpx.get(url + "/api/v1/runs", headers=auth).json()["runs"][0]["status"] == "lost",
                   timeout=20, what="the run lost")
        sign_in(page, url, TOKEN)
        page.wait_for_selector("#runs-table tr[data-run-id] .badge.lost")
        page.goto(url + "/#/run/1")
        page.wait_for_selector("#run-status.lost")
        assert "rank_0" in page.inner_text("#run-lost") and "stopped reporting" in page.inner_text("#run-lost")
        assert page.is_hidden("#offline-banner")
        # alerts are grouped by name and state: seven targets down are one entry, counted, since the earliest
        grouped = page.evaluate("""groupAlerts([
            ...[1, 2, 3, 4, 5, 6, 7].map(i => ({alertname: "TargetDown", state: "firing", summary: `t${i} down`,
                                               since: `2026-12-01T00:0${i}:00Z`})),
            {alertname: "TargetDown", state: "pending", summary: "t8 down"},
            {alertname: "RLInsightTrainerStalled", state: "firing", summary: "stalled"}])""")
        assert [(g["alertname"], g["state"], g["count"]) for g in grouped] == [
            ("TargetDown", "firing", 7), ("TargetDown", "pending", 1), ("RLInsightTrainerStalled", "firing", 1)]
        assert grouped[0]["summary"] == "t1 down" and grouped[0]["others"][-1] == "t7 down"
        assert grouped[0]["since"] == "2026-12-01T00:01:00Z"
        page.screenshot(path=str(ARTIFACTS / "run-lost.png"))
        # the views' refreshes stop (as when a view failed before starting them): the banner must not need them
        page.wait_for_function("rlInsight.refreshMs > 0", timeout=30_000)  # the page's render has finished
        page.evaluate("rlInsight.timers.forEach(clearInterval); rlInsight.timers = []")
        server.send_signal(signal.SIGTERM)  # the server goes away under the open page
        server.wait(30)
        page.wait_for_selector("#offline-banner:not([hidden])", timeout=30_000)
        assert "is not answering" in page.inner_text("#offline-banner")
        page.screenshot(path=str(ARTIFACTS / "offline-banner.png"))
        # a view opened while the server is away says so and retries; the server back on its address, it heals
        page.evaluate("location.hash = '#/run/1?lanes='")
        page.wait_for_selector("#page-error")
        assert "not answering" in page.inner_text("#page-error") and "retrying" in page.inner_text("#page-error")
        server = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(tmp_path / "server.json"),
                                   "--log-level", "warning"])
        page.wait_for_selector("#run-status.lost", timeout=60_000)
        page.wait_for_selector("#offline-banner", state="hidden", timeout=10_000)
        assert page.query_selector("#page-error") is None
    finally:
        job.kill()
        if server.poll() is None:
            server.terminate()
            server.wait(30)
