"""Several ingest servers on one PostgreSQL store (issue 24). Behind Debian's haproxy: processes stream counters and
states through the load balancer; one server is SIGKILLed mid-run together with a process hung in a state. The
processes fail over; afterwards the totals are exact, no accepted state is lost, the killed process's state is
closed once (cut short), the run finishes, and the API answers through the balancer from the surviving server.
A profile request made through one server is armed and answered by a process reporting to the other, and its
trace and analysis are served by both (the records in the store, the traces in the shared directory). With a real
Prometheus scraping both servers: a process that moves while its first server stays up is counted
once by the dashboards' sums."""

from __future__ import annotations

import gzip
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

from rl_insight.protocol.limits import HEADER_CLIENT, ROUTE_TARGETS
from tests.conftest import answers_healthz, debian_binary, free_port, wait_until
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
                               "store": store, "shared_dir": str(tmp / "shared"), "client_silence_s": SILENCE_S,
                               "insights_interval_s": 1.0}))
    log = open(tmp / f"{name}.log", "ab")  # (read it when a test fails)
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level",
                             "warning"], env=env, cwd=ROOT, stdout=log, stderr=log)
    log.close()
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers_healthz(url), timeout=30, what=f"server {name}")
    return proc, url


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
    server a {a_url[7:]} check inter 300ms fall 3 rise 2
    server b {b_url[7:]} check inter 300ms fall 3 rise 2
""")
        lb = subprocess.Popen([haproxy, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(lb)
        lb_url = f"http://127.0.0.1:{lb_port}"
        wait_until(lambda: answers_healthz(lb_url), timeout=20, what="haproxy")
        yield {"a": a, "b": b, "a_url": a_url, "b_url": b_url, "lb_url": lb_url, "env": env, "store": store,
               "password": PASSWORD}
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
               what=f"the run finished (it says {get(f'/api/v1/runs/{rid}')})")
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


def test_a_profile_requested_on_one_server_is_taken_through_the_other(fleet: dict[str, Any]) -> None:
    pytest.importorskip("torch")
    a_url, b_url = fleet["a_url"], fleet["b_url"]
    r = httpx.post(a_url + "/api/v1/profiles", headers=H, timeout=30, json={
        "project": "gloo", "experiment_name": "fleet-profile", "steps": "4", "activities": ["cpu"],
        "wait_for_run": True})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    env = {**fleet["env"], "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "RL_INSIGHT_SERVER_URL": b_url, "RL_INSIGHT_TOKEN": TOKEN, "JOB_PROJECT": "gloo",
           "JOB_EXPERIMENT": "fleet-profile"}
    job = subprocess.Popen([sys.executable, "-m", "tests.profile_job", "7", "0.25"], env=env, cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = job.communicate(timeout=240)
    assert "done" in out, out + err

    def done(url: str) -> dict[str, Any] | None:
        got = httpx.get(f"{url}/api/v1/profiles/{rid}", headers=H, timeout=30).json()
        return got if got["state"] == "done" and got["analysis"]["state"] in ("done", "failed") else None

    for url in (a_url, b_url):  # the process reported to b only; a says the same
        prof = wait_until(lambda: done(url), timeout=90, what=f"the profile, seen from {url}")
        assert prof["analysis"]["state"] == "done", prof["analysis"]
        (proc,) = prof["processes"].values()
        assert proc["state"] == "uploaded" and proc["window"]["steps"] == [4]
        (name,) = [n for n, f in prof["files"].items() if f["complete"]]
        trace = json.loads(gzip.decompress(httpx.get(f"{url}/api/v1/profiles/{rid}/files/{name}", headers=H,
                                                     timeout=30).content))
        assert sorted({e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("work_step")}) == \
            ["work_step4"]
        summary = httpx.get(f"{url}/api/v1/profiles/{rid}/report/summary.json", headers=H, timeout=30).json()
        assert [s["step"] for s in summary["steps"]] == [4]


def test_a_stack_snapshot_asked_on_one_server_gets_the_processes_of_both(fleet: dict[str, Any]) -> None:
    a_url, b_url, env = fleet["a_url"], fleet["b_url"], fleet["env"]
    hung = [_job(env, a_url, 0, hang=True), _job(env, b_url, 1, hang=True)]  # one process on each server
    try:
        for p in hung:
            assert p.stdout is not None and p.stdout.readline().strip() == "hanging"
        run_id = wait_until(lambda: (httpx.get(a_url + "/api/v1/runs", headers=H).json()["runs"] or [{}])[0].get("id"),
                            what="the run")
        time.sleep(2.5)  # the servers publish their processes to the fleet's registry every 2 s
        r = httpx.post(f"{a_url}/api/v1/runs/{run_id}/stacks", headers=H, json={"deadline_s": 20}, timeout=30)
        assert r.status_code == 201, r.text
        assert r.json()["expected_count"] == 2  # b's process too
        sid = r.json()["id"]

        def complete(url: str) -> dict[str, Any] | None:
            got = httpx.get(f"{url}/api/v1/runs/{run_id}/stacks/{sid}", params={"reports": "true"}, headers=H,
                            timeout=30).json()
            return got if got["state"] == "complete" else None

        snap = wait_until(lambda: complete(b_url), timeout=30, what="the snapshot, complete, seen from b")
        assert snap["missing"] == [] and snap["answered"] == 2  # both answered before the deadline
        assert {rep["process"]["pid"] for rep in snap["reports"].values()} == {p.pid for p in hung}
        held = {h["lane"] for rep in snap["reports"].values() for t in rep["threads"] for h in t["lanes"]}
        assert held == {"rank_0", "rank_1"}, held  # where each process's main thread is: in its wedged state
        seen_from_a = wait_until(lambda: complete(a_url), timeout=10, what="the snapshot, complete, seen from a")
        assert seen_from_a["summary"] == snap["summary"] and seen_from_a["completed_at"] == snap["completed_at"]
    finally:
        for p in hung:
            p.kill()
            p.wait(10)


def test_a_target_registered_and_archived_through_one_server_reaches_the_other(fleet: dict[str, Any]) -> None:
    a_url, b_url = fleet["a_url"], fleet["b_url"]
    r = httpx.post(a_url + ROUTE_TARGETS, headers=H, timeout=30, json={
        "targets": ["10.1.2.3:9100"], "job_name": "node", "project": "p", "experiment_name": "e"})
    assert r.status_code == 200, r.text

    def on_b() -> list[str]:
        return [t["target"] for t in httpx.get(b_url + "/api/v1/targets", headers=H, timeout=30).json()["targets"]]

    wait_until(lambda: on_b() == ["10.1.2.3:9100"], timeout=15, what="b's scrape targets to hold a's registration")
    r = httpx.post(b_url + "/api/v1/experiments/archive", headers=H, timeout=60,
                   json={"project": "p", "experiment_name": "e"})
    assert r.status_code == 200 and r.json()["state"] == "archived", r.text
    wait_until(lambda: httpx.get(a_url + "/api/v1/targets", headers=H, timeout=30).json()["targets"] == [],
               timeout=15, what="a to stop scraping the experiment b archived")
    r = httpx.post(a_url + ROUTE_TARGETS, headers=H, timeout=30, json={
        "targets": ["10.1.2.4:9100"], "project": "p", "experiment_name": "e"})
    assert r.status_code == 409, r.text  # archived for the whole fleet


STICKY_JOB = """
import os, time, rl_insight
rl_insight.init(project="sticky", experiment_name="e")
for i in range(40):
    rl_insight.metric_count("tokens", 30)
    rl_insight.metric_gauge("training/global_step", i)
    rl_insight.flush(5)
rl_insight.finish(timeout=10)
"""


def test_the_documented_balancer_keeps_each_process_on_one_server(fleet: dict[str, Any], tmp_path: Path) -> None:
    """docs/scale.md's haproxy backend (issue 49 item 5): hashing each request's X-RL-Insight-Client header, every
    process reaches one server only, so /metrics counts it once and it never resends everything on every batch."""
    doc = (ROOT / "docs" / "scale.md").read_text()
    backend = ["balance hdr(X-RL-Insight-Client)", "hash-type consistent"]
    assert all(line in doc for line in backend)  # the test runs what the docs say
    haproxy = debian_binary("haproxy", "haproxy", "/usr/sbin")
    port = free_port()
    cfg = tmp_path / "sticky.cfg"
    cfg.write_text(f"""
defaults
    mode http
    timeout connect 1s
    timeout client 65s
    timeout server 65s
frontend ingest
    bind 127.0.0.1:{port}
    default_backend servers
backend servers
    {backend[0]}
    {backend[1]}
    http-response set-header X-Served-By %s
    server a {fleet['a_url'][7:]}
    server b {fleet['b_url'][7:]}
""")
    lb = subprocess.Popen([haproxy, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: answers_healthz(f"http://127.0.0.1:{port}"), timeout=20, what="haproxy")
        # The hash spreads clients over both servers, and always sends one to the same server. Fixed ids, so this
        # does not rest on six random ids landing together (about one run in twenty with two servers).
        def served_by(cid: str) -> str:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", headers={HEADER_CLIENT: cid}).headers["X-Served-By"]
        served = {cid: {served_by(cid) for _ in range(3)} for cid in (f"host-{i}:{1000 + i}" for i in range(16))}
        assert all(len(names) == 1 for names in served.values()), served
        assert {n for names in served.values() for n in names} == {"a", "b"}, served
        env = {**fleet["env"], "RL_INSIGHT_SERVER_URL": f"http://127.0.0.1:{port}", "RL_INSIGHT_TOKEN": TOKEN}
        jobs = [subprocess.Popen([sys.executable, "-c", STICKY_JOB], env=env, cwd=ROOT) for _ in range(6)]
        for j in jobs:
            assert j.wait(120) == 0
    finally:
        lb.terminate()
        lb.wait(10)

    def sent_by_pid(url: str) -> dict[str, float]:
        out = {}
        for line in httpx.get(url + "/metrics", headers=H).text.splitlines():
            if line.startswith("rl_insight_client_events_sent_total{") and 'project="sticky"' in line:
                pid = line.split('pid="', 1)[1].split('"', 1)[0]
                out[pid] = float(line.rsplit(" ", 1)[1])
        return out

    wait_until(lambda: len(sent_by_pid(fleet["a_url"])) + len(sent_by_pid(fleet["b_url"])) == 6, timeout=15,
               what="each server to show the processes it owns (a fleet round: 2 s)")
    a, b = sent_by_pid(fleet["a_url"]), sent_by_pid(fleet["b_url"])
    assert len(a) + len(b) == 6 and not set(a) & set(b), (a, b)  # each process on one server only
    total = 0.0
    for url in (fleet["a_url"], fleet["b_url"]):
        for line in httpx.get(url + "/metrics", headers=H).text.splitlines():
            if line.startswith("rl_insight_monitor_tokens_total{") and 'project="sticky"' in line:
                total += float(line.rsplit(" ", 1)[1])
    assert total == 6 * 40 * 30  # summed over both servers, each process counted once


@pytest.mark.alone  # beside the other worker's demos its fleet rounds fell behind (CI, 4 of 7 runs); alone it holds
def test_behind_round_robin_a_process_is_counted_once_and_resends_once_per_server(fleet: dict[str, Any]) -> None:
    """The fixture's haproxy alternates between the servers (no stickiness; issue 49 item 5: /metrics said A 1,200 +
    B 1,200 for a true 1,200, still 14 s after the process finished, and it resent everything on every batch)."""
    env = {**fleet["env"], "RL_INSIGHT_SERVER_URL": fleet["lb_url"], "RL_INSIGHT_TOKEN": TOKEN}
    job = subprocess.run([sys.executable, "-c", STICKY_JOB.replace('"sticky"', '"roundrobin"')], env=env, cwd=ROOT,
                         timeout=120)
    assert job.returncode == 0

    def series(url: str, name: str) -> dict[str, float]:
        out = {}
        for line in httpx.get(url + "/metrics", headers=H).text.splitlines():
            if line.startswith(name + "{") and 'project="roundrobin"' in line:
                out[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
        return out

    def total(name: str) -> float:
        return sum(sum(series(u, name).values()) for u in (fleet["a_url"], fleet["b_url"]))

    # (a fleet round is 2 s; on a loaded CI machine, with another worker's jobs beside it, a few rounds can take 15 s)
    try:
        wait_until(lambda: total("rl_insight_monitor_tokens_total") == 40 * 30, timeout=40,
                   what="the process counted once over both servers")
    except AssertionError as exc:  # say what each server shows, and what each says of the fleet
        shown = {u: series(u, "rl_insight_monitor_tokens_total") for u in (fleet["a_url"], fleet["b_url"])}
        said = {u: httpx.get(u + "/healthz", headers=H).json().get("fleet") for u in (fleet["a_url"], fleet["b_url"])}
        raise AssertionError(f"{exc}; shown {shown}; fleet {said}") from None
    time.sleep(5)  # and it stays so after the process finished (fleet rounds go on)
    assert total("rl_insight_monitor_tokens_total") == 40 * 30
    shown_on = [u for u in (fleet["a_url"], fleet["b_url"]) if series(u, "rl_insight_monitor_tokens_total")]
    assert len(shown_on) == 1  # one owner shows it
    # what it sent: each batch once, plus one resend of its totals to the second server it met (not every batch)
    sent = sum(series(u, "rl_insight_client_events_sent_total").get(k, 0) for u in (fleet["a_url"], fleet["b_url"])
               for k in series(u, "rl_insight_client_events_sent_total"))
    assert 80 <= sent <= 80 + 2 * 4, sent  # 40 steps x 2 samples; a resend is a handful of series
    with __import__("psycopg").connect(fleet["store"], password=fleet["password"]) as db:
        stored = db.execute("SELECT p.value FROM samples p JOIN series s ON s.id = p.series_id JOIN runs r ON "
                            "r.id = s.run_id WHERE r.project = 'roundrobin' AND s.name = 'tokens' ORDER BY p.ts "
                            "DESC LIMIT 1").fetchone()[0]
    assert stored == 40 * 30  # the run store's series: the process's own total, whichever server wrote it
