"""PostgreSQL restarted (`systemctl restart`: a fast shutdown) and then crashed under a real ingest server
(`python -m rl_insight.server` on a PostgreSQL store) while a real client streams steps: ingest writes again as
soon as the database is back, with no restart of the server; every step the client sent is stored exactly once,
every state is closed, its flush() is True, and reads answer 503 (not 500) while the database is away."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import psycopg
import pytest

import rl_insight
from rl_insight.server.config import ServerConfig
from tests.conftest import answers, free_port, wait_until
from tests.pg_cluster import PASSWORD, PostgresCluster, postgres_bin_dir


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    if postgres_bin_dir() is None:
        pytest.skip("PostgreSQL not installed (apt-get install postgresql-15)")
    c = PostgresCluster(durable_commits=True)  # (a crash loses no commit, as on a real deployment)
    c.wait_ready()
    yield c
    c.stop()


def _start(cfg_file: Path, url: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg_file),
                             "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    wait_until(lambda: answers(url + "/healthz"), timeout=60, interval=0.1, what="the ingest server to answer")
    return proc


def test_ingest_writes_again_after_a_restart_and_a_crash_and_stores_every_step_once(
        tmp_path: Path, cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_STORE_PASSWORD", PASSWORD)
    store = cluster.url(cluster.create_database("ingest"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cfg_file = tmp_path / "server.json"
    cfg_file.write_text(ServerConfig(host="127.0.0.1", port=port, data_dir=str(tmp_path / "data"), store=store,
                                     insights_interval_s=3600).to_json())
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    server = _start(cfg_file, url)
    reads_while_down: list[int] = []

    def outages() -> None:
        for mode in ("fast", "immediate"):  # a restart, then a crash, each down for a few seconds
            cluster.halt(mode)
            try:
                reads_while_down.append(httpx.get(url + "/api/v1/runs/1/metrics", timeout=30).status_code)
                time.sleep(3)
            finally:
                cluster.resume()
            time.sleep(2)

    try:
        rl_insight.init(project="pg", experiment_name="restarts")
        outage = threading.Thread(target=outages)
        step, after = 0, 0
        while after < 200:  # the job goes on through both outages, and 200 steps after
            step += 1
            with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
                rl_insight.metric_gauge("training/global_step", step)
                rl_insight.metric_gauge("timing_s/step", step * 0.5)
            if step == 200:
                outage.start()
            if step > 200 and not outage.is_alive():
                after += 1
            time.sleep(0.005)
        steps = step
        assert rl_insight.flush(timeout=90) is True  # true only when everything is stored
        health = httpx.get(url + "/healthz", timeout=10).json()
        assert health["store"].get("degraded") in (None, False), health["store"]
    finally:
        rl_insight.finish(timeout=10)
        server.send_signal(signal.SIGTERM)
        server.wait(30)

    assert reads_while_down == [503, 503]  # "unavailable, ask again", never an internal error
    with psycopg.connect(store, password=PASSWORD) as db:
        stored = [v for (v,) in db.execute(
            "SELECT p.value FROM samples p JOIN series s ON s.id = p.series_id WHERE s.name = 'timing_s_step' "
            "ORDER BY p.value")]
        assert stored == [s * 0.5 for s in range(1, steps + 1)]  # each step once: none lost, none twice
        spans = db.execute("SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE end_ns IS NULL) FROM spans "
                           "WHERE lane = 'rank_0' AND name = 'actor_update'").fetchone()
        assert tuple(spans) == (steps, steps, 0)  # every state closed, none twice
