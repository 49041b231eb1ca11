"""Nothing acknowledged is lost: the ingest server killed with SIGKILL twice during a stream (the real
`python -m rl_insight.server` process, restarted on the same port and data directory) and a real client.
Every sample and span the client had acknowledged is stored exactly once, and its flush() is True only
once everything is stored. States open at the previous boot are claimed by their live process or closed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx

import rl_insight
from rl_insight.server.config import ServerConfig
from tests.conftest import answers, free_port, wait_until


def _start(cfg_file: Path, url: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rl_insight.server", "--config", str(cfg_file), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    wait_until(lambda: answers(url + "/healthz"), timeout=30, interval=0.05, what="the ingest server to answer")
    return proc


def _config(tmp_path: Path, **kw: object) -> tuple[Path, str]:
    port = free_port()
    cfg = ServerConfig(host="127.0.0.1", port=port, data_dir=str(tmp_path / "data"), **kw)
    path = tmp_path / "server.json"
    path.write_text(cfg.to_json())
    return path, f"http://127.0.0.1:{port}"


def test_two_sigkills_lose_no_acknowledged_sample_or_span_and_store_none_twice(tmp_path: Path, monkeypatch) -> None:
    cfg_file, url = _config(tmp_path)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    server = _start(cfg_file, url)
    steps, kills = 1500, (500, 1000)
    try:
        rl_insight.init(project="durable", experiment_name="kill9")
        for step in range(1, steps + 1):
            with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
                pass
            rl_insight.metric_gauge("timing_s/step", step * 0.5)
            rl_insight.metric_gauge("training/global_step", step)
            if step in kills:
                time.sleep(0.05)  # batches in flight when the server dies
                server.send_signal(signal.SIGKILL)
                server.wait(10)
                server = _start(cfg_file, url)
            if step % 100 == 0:
                time.sleep(0.02)
        assert rl_insight.flush(timeout=60) is True  # true only when everything is stored
        stats = rl_insight.stats()
        assert not stats.get("dropped"), stats
    finally:
        rl_insight.finish(timeout=10)
        server.send_signal(signal.SIGTERM)
        server.wait(15)

    db = _store(tmp_path)
    stored = [v for (v,) in db.execute("SELECT p.value FROM samples p JOIN series s ON s.id = p.series_id "
                                       "WHERE s.name = 'timing_s_step' ORDER BY p.value")]
    assert stored == [s * 0.5 for s in range(1, steps + 1)]  # each step once: none lost, none twice
    ended = db.execute("SELECT count(*), count(DISTINCT id) FROM spans WHERE lane = 'rank_0' AND name = 'actor_update' "
                       "AND end_ns IS NOT NULL").fetchone()
    assert ended == (steps, steps)


def _store(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{tmp_path / 'data' / 'runstore.sqlite'}?mode=ro", uri=True)


DRIVER = """
import os, sys, time, rl_insight
rl_insight.init(project="durable", experiment_name="orphan")
state = rl_insight.trace_state("rollout", state_lane_id="replica_0")
state.__enter__()
rl_insight.flush(timeout=10)
print("open", flush=True)
time.sleep(600)
"""


def test_a_state_left_open_by_a_process_that_died_with_the_server_is_closed_after_the_restart(tmp_path: Path) -> None:
    cfg_file, url = _config(tmp_path, client_silence_s=1.0)
    server = _start(cfg_file, url)
    env = {**os.environ, "RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_FLUSH_INTERVAL": "0.05"}
    job = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "open"
        server.send_signal(signal.SIGKILL)  # the server dies first; the job dies while it is down
        server.wait(10)
        job.send_signal(signal.SIGKILL)
        job.wait(10)
        server = _start(cfg_file, url)

        db = _store(tmp_path)
        row = wait_until(lambda: db.execute("SELECT end_ns, attributes FROM spans WHERE lane = 'replica_0' AND "
                                            "name = 'rollout' AND end_ns IS NOT NULL").fetchone(),
                         timeout=30, interval=0.25, what="the orphaned state to be closed")
        attrs = json.loads(row[1])
        assert attrs["cut_short"] is True and "restart" in attrs["cut_short_reason"]
        run = wait_until(lambda: next(r for r in httpx.get(url + "/api/v1/runs").json()["runs"]
                                      if r["experiment_name"] == "orphan" and r["status"] == "finished"),
                         timeout=30, what="the run to finish")
        assert run["status"] == "finished"
    finally:
        if job.poll() is None:
            job.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(15)


def test_a_live_process_claims_its_open_state_after_a_restart(tmp_path: Path, monkeypatch) -> None:
    cfg_file, url = _config(tmp_path, client_silence_s=1.0)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    monkeypatch.setattr("rl_insight.client.delivery.HEARTBEAT_S", 0.2)  # alive within the 1 s silence limit
    server = _start(cfg_file, url)
    try:
        rl_insight.init(project="durable", experiment_name="claimed")
        with rl_insight.trace_state("rollout", state_lane_id="replica_1"):
            assert rl_insight.flush(timeout=10)
            server.send_signal(signal.SIGKILL)
            server.wait(10)
            server = _start(cfg_file, url)
            rl_insight.metric_gauge("x", 1.0)  # the client hears the new boot id and announces its open state
            assert rl_insight.flush(timeout=20)
            time.sleep(2.5)  # past the silence limit after the boot: a claimed state stays open
            db = _store(tmp_path)
            assert db.execute("SELECT end_ns FROM spans WHERE lane = 'replica_1' AND name = 'rollout'").fetchall() == [
                (None,)
            ]
        assert rl_insight.flush(timeout=10)
        (end_ns, attrs), = db.execute("SELECT end_ns, attributes FROM spans WHERE lane = 'replica_1' AND name = "
                                      "'rollout'")
        assert end_ns is not None and not json.loads(attrs).get("cut_short")
    finally:
        rl_insight.finish(timeout=5)
        server.send_signal(signal.SIGTERM)
        server.wait(15)


def test_an_answered_action_is_in_the_audit_log_across_sigkills(tmp_path: Path) -> None:
    """Issue 64: 2-3 of ~95 acknowledged token creations lost their audit entry across three SIGKILLs (the entry
    waited in a queue). The answer now waits for its entry: every creation that was answered is in the log."""
    token = "audit-kill-token"
    cfg_file, url = _config(tmp_path, token=token)
    h = {"Authorization": f"Bearer {token}"}
    server = _start(cfg_file, url)
    answered: list[str] = []
    try:
        for kill in range(3):
            for i in range(30):
                name = f"t{kill}-{i}"
                try:
                    r = httpx.post(url + "/api/v1/tokens", json={"name": name, "role": "viewer"}, headers=h,
                                   timeout=10)
                except httpx.HTTPError:
                    continue
                if r.status_code == 201:
                    answered.append(name)
            server.send_signal(signal.SIGKILL)  # right after the last answer
            server.wait(10)
            server = _start(cfg_file, url)
        logged = {e["what"].get("name") for e in httpx.get(url + "/api/v1/audit", params={"limit": 5000}, headers=h,
                                                           timeout=30).json()["entries"]
                  if e["path"] == "/api/v1/tokens" and e["method"] == "POST"}
        assert len(answered) == 90 and set(answered) <= logged, sorted(set(answered) - logged)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(10)
