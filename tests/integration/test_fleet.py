"""Several ingest servers on one PostgreSQL store (issue 24). Behind Debian's haproxy: processes stream counters and
states through the load balancer; one server is SIGKILLed mid-run together with a process hung in a state. The
processes fail over; afterwards the totals are exact, no accepted state is lost, the killed process's state is
closed once (cut short), the run finishes, and the API answers through the balancer from the surviving server.
With a real Prometheus scraping both servers: a process that moves while its first server stays up is counted
once by the dashboards' sums."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.conftest import debian_binary, free_port, wait_until
from tests.forwarding import Forwarder

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fleet-token"
H = {"Authorization": f"Bearer {TOKEN}"}
STEPS, STEP_S, SILENCE_S = 30, 0.25, 4.0


def _server(tmp: Path, name: str, store: str, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cfg = tmp / f"{name}.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": port, "data_dir": str(tmp / name), "token": TOKEN,
                               "store": store, "client_silence_s": SILENCE_S, "insights_interval_s": 1.0}))
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level",
                             "warning"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _up(url), timeout=30, what=f"server {name}")
    return proc, url


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def fleet(tmp_path: Path, postgres_cluster: Any) -> Iterator[dict[str, Any]]:
    from tests.pg_cluster import PASSWORD

    haproxy = debian_binary("haproxy", "haproxy", "/usr/sbin")
    env = {**os.environ, "RL_INSIGHT_STORE_PASSWORD": PASSWORD, "PYTHONPATH": str(ROOT)}
    store = postgres_cluster.url(postgres_cluster.create_database("fleet"))
    procs: list[subprocess.Popen] = []
    try:
        a, a_url = _server(tmp_path, "a", store, env)
        b, b_url = _server(tmp_path, "b", store, env)
        procs += [a, b]
        lb_port = free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(f"""
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch
frontend ingest
    bind 127.0.0.1:{lb_port}
    default_backend servers
backend servers
    balance roundrobin
    option httpchk GET /healthz
    server a {a_url[7:]} check inter 300ms fall 1 rise 2
    server b {b_url[7:]} check inter 300ms fall 1 rise 2
""")
        lb = subprocess.Popen([haproxy, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(lb)
        lb_url = f"http://127.0.0.1:{lb_port}"
        wait_until(lambda: _up(lb_url), timeout=20, what="haproxy")
        yield {"a": a, "b": b, "a_url": a_url, "b_url": b_url, "lb_url": lb_url, "env": env}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def _job(env: dict[str, str], url: str, rank: int, hang: bool = False) -> subprocess.Popen:
    e = {**env, "RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_TOKEN": TOKEN, "JOB_RANK": str(rank), "JOB_STEPS": str(STEPS),
         "JOB_STEP_S": str(STEP_S), **({"JOB_HANG": "1"} if hang else {})}
    return subprocess.Popen([sys.executable, "-m", "tests.fleet_job"], env=e, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_server_killed_mid_run_loses_nothing(fleet: dict[str, Any]) -> None:
    lb, env = fleet["lb_url"], fleet["env"]
    # two ranks through the balancer, one naming both servers itself, and one that hangs in a state
    jobs = [_job(env, lb, 0), _job(env, lb, 1), _job(env, f"{fleet['a_url']},{fleet['b_url']}", 2)]
    hung = _job(env, lb, 3, hang=True)
    assert hung.stdout is not None and hung.stdout.readline().strip() == "hanging"
    time.sleep(STEPS * STEP_S / 3)
    fleet["a"].send_signal(signal.SIGKILL)  # a server gone without a word, mid-run
    hung.send_signal(signal.SIGKILL)  # and a process with it, in the middle of a state
    fleet["a"].wait(10)
    hung.wait(10)
    for j in jobs:
        out, err = j.communicate(timeout=120)
        assert j.returncode == 0 and out.strip() == "sent", out + err

    def get(path: str, **params: Any) -> Any:
        r = httpx.get(lb + path, params=params, headers=H, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    run = wait_until(lambda: (get("/api/v1/runs")["runs"] or [None])[0], what="the run")
    rid = run["id"]
    # exact totals: three processes' counts, summed by the surviving server from their cumulative totals (stored at
    # each sample's client time, so the highest total is the last one, not the latest time)
    (done,) = get(f"/api/v1/runs/{rid}/series", name="done", x="time", agg="none")["series"]
    assert max(v for _, v in done["points"]) == 3 * STEPS
    # every state of every step (accepted by the server that died, or resent to the other), each once
    lanes = {x["lane"]: x["spans"] for x in get(f"/api/v1/runs/{rid}/lanes", counts=True)["lanes"]}
    assert lanes["rank_0"] == lanes["rank_1"] == lanes["rank_2"] == STEPS, lanes

    # the killed process's state: closed once, cut short, by the survivor (by the lease holder if its server died)
    def wedged() -> list[Any] | None:
        rows = [s for s in get(f"/api/v1/runs/{rid}/spans")["spans"] if s[2] == "wedged"]
        return rows if rows and not any(s[7] for s in rows) else None

    rows = wait_until(wedged, timeout=SILENCE_S * 6, interval=0.5, what="the hung process's state closed")
    assert len(rows) == 1
    detail = get(f"/api/v1/runs/{rid}/spans/{rows[0][6]}") if rows[0][6] else None
    if detail is not None:
        assert detail["attributes"].get("cut_short") is True
    wait_until(lambda: get(f"/api/v1/runs/{rid}")["status"] == "finished", timeout=SILENCE_S * 6, interval=0.5,
               what="the run finished")
    health = httpx.get(fleet["b_url"] + "/healthz").json()
    assert health["store"]["backend"] == "postgresql" and health["fleet"]["background_work"] is True


def test_prometheus_counts_a_client_that_moved_once(tmp_path: Path, postgres_url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Both servers alive and scraped by a real Prometheus; a process's way to the first breaks (503) and it moves to
    the second. The first stops exposing the series only that process fed, so the dashboards' sums count it once."""
    import rl_insight
    from tests.conftest import prom_query, prometheus_binary, start_server

    a = start_server(tmp_path / "a", store=postgres_url)
    b = start_server(tmp_path / "b", store=postgres_url)
    way_to_a = Forwarder(a.url)
    prom_port = free_port()
    (tmp_path / "prom.yml").write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: ingest\n    static_configs:\n      - targets: "
        f"['{a.url[7:]}', '{b.url[7:]}']\n")
    prom = subprocess.Popen([prometheus_binary(), f"--config.file={tmp_path / 'prom.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prom_url = f"http://127.0.0.1:{prom_port}"
    sel = '{project="fleet",experiment_name="moved"}'

    def value(expr: str) -> float | None:
        r = prom_query(prom_url, expr)
        return float(r[0]["value"][1]) if r else None

    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"{way_to_a.url},{b.url}")
        rl_insight.init("fleet", "moved")
        rl_insight.metric_count("done", 5)
        rl_insight.metric_gauge("loss", 0.5)
        assert rl_insight.flush(10)
        wait_until(lambda: value(f"sum(rl_insight_monitor_done_total{sel})") == 5.0, timeout=30, interval=0.5,
                   what="Prometheus to see the count on the first server")
        way_to_a.broken = True  # the first server stays up (and scraped); the process can no longer reach it
        rl_insight.metric_count("done", 2)
        rl_insight.metric_gauge("loss", 0.25)
        assert rl_insight.flush(15)
        wait_until(lambda: "rl_insight_monitor_done_total" not in httpx.get(a.url + "/metrics").text, timeout=15,
                   what="the first server to let go of the moved process's series")
        # what a dashboard sums, over every server Prometheus scrapes: the process counted once
        wait_until(lambda: value(f"sum(rl_insight_monitor_done_total{sel})") == 7.0, timeout=30, interval=0.5,
                   what="the total counted once")
        wait_until(lambda: value(f"sum(rl_insight_monitor_loss{sel})") == 0.25, timeout=30, interval=0.5,
                   what="the gauge counted once")
        assert value(f"count(rl_insight_monitor_done_total{sel})") == 1.0
        assert value('sum(up{job="ingest"})') == 2.0  # both servers up and scraped throughout
        health = httpx.get(a.url + "/healthz").json()["fleet"]
        assert health["clients_moved_away"] == 1
    finally:
        rl_insight.finish(timeout=2)
        prom.terminate()
        prom.wait(10)
        way_to_a.close()
        a.stop()
        b.stop()
