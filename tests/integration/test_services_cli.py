"""CLI and supervisor behaviour that needs no Prometheus: busy ports, missing binaries, stale pids, targets."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rl_insight.errors import BinaryNotFoundError
from rl_insight.server.config import ServerConfig
from rl_insight.services import binaries
from rl_insight.services.home import Home
from rl_insight.services.prometheus import PrometheusSettings, render_config
from rl_insight.services.supervisor import StackSettings, Supervisor
from tests.conftest import free_port
from tests.integration.conftest import cli

INGEST_ONLY = ("--no-prometheus", "--no-alertmanager")  # the ingest server alone


def test_busy_port_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = cli(tmp_path, "server", "start", "--host", "127.0.0.1", "--port", str(port), *INGEST_ONLY, timeout=60)
    assert r.returncode == 3
    assert f"port {port}" in r.stderr and "--auto-port" in r.stderr
    assert not (tmp_path / "run" / "stack.json").exists()


def test_auto_port_picks_a_free_port(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        sup = Supervisor(
            StackSettings(
                home=Home(tmp_path), server=ServerConfig(host="127.0.0.1", port=busy), prometheus=False, auto_port=True,
                alertmanager_port=busy)
        )
        sup.plan()
    assert sup.ingest_port != busy
    ingest, = (s for s in sup.services if s.name == "ingest")
    assert ingest.url.endswith(f":{sup.ingest_port}")
    am, = (s for s in sup.services if s.name == "alertmanager")  # moved like the others
    assert am.port not in (busy, sup.ingest_port) and f"--web.listen-address=127.0.0.1:{am.port}" in am.argv


def test_store_retention_settings_reach_the_server_config(tmp_path: Path) -> None:
    server = ServerConfig(host="127.0.0.1", port=free_port(), store_retention_days=2.5, store_max_gb=0.5)
    sup = Supervisor(StackSettings(home=Home(tmp_path), server=server, prometheus=False, alertmanager=False))
    sup.plan()
    cfg = ServerConfig.from_file(tmp_path / "runtime" / "server.json")
    assert (cfg.store_retention_days, cfg.store_max_bytes) == (2.5, 2**29)


def test_a_runtime_config_of_the_previous_version_reads_under_todays_names(tmp_path: Path) -> None:
    f = tmp_path / "server.json"
    f.write_text(json.dumps({"retention_days": 3.0, "store_max_bytes": 2**30, "otlp_grpc_intake_port": 4399}))
    cfg = ServerConfig.from_file(f)
    assert (cfg.store_retention_days, cfg.store_max_gb, cfg.otlp_intake_grpc_port) == (3.0, 1.0, 4399)


def test_missing_prometheus_degrades_to_ingest_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries, "_SYSTEM_PATHS", {"prometheus": []})
    monkeypatch.setattr(binaries.shutil, "which", lambda name: None)
    sup = Supervisor(StackSettings(home=Home(tmp_path), server=ServerConfig(host="127.0.0.1", port=free_port())))
    sup.plan()
    assert [s.name for s in sup.services] == ["ingest"]
    assert sup.missing[0].name == "prometheus" and "apt-get install prometheus" in (sup.missing[0].hint or "")
    assert sup.missing[1].name == "alertmanager" and "apt-get install prometheus-alertmanager" in (
        sup.missing[1].hint or "")
    server_cfg = json.loads((tmp_path / "runtime" / "server.json").read_text())
    assert server_cfg["prometheus_url"] is None


def test_explicit_prometheus_bin_that_is_missing_is_an_error(tmp_path: Path) -> None:
    r = cli(tmp_path, "server", "start", "--host", "127.0.0.1", "--port", str(free_port()),
            "--prometheus-bin", str(tmp_path / "nope"), timeout=60)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_too_old_prometheus_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "prometheus"
    fake.write_text("#!/bin/sh\necho 'prometheus, version 2.20.1 (branch: HEAD)'\n")
    fake.chmod(0o755)
    with pytest.raises(BinaryNotFoundError, match="older than the minimum 2.30.0"):
        binaries.find_binary("prometheus", tmp_path / "services", fake)


def test_tempo_3_is_reported_unsupported(tmp_path: Path) -> None:
    from tests.standins import write_standin

    t3 = write_standin(tmp_path / "tempo", "tempo", "3.0.1")
    with pytest.raises(BinaryNotFoundError, match="unsupported"):
        binaries.find_binary("tempo", tmp_path / "services", t3)
    assert binaries.find_binary(
        "tempo", tmp_path / "services", write_standin(tmp_path / "t2" / "tempo", "tempo", "2.9.0")
    ).version == (2, 9, 0)


def test_logs_rotate_by_size_without_losing_the_writer(tmp_path: Path) -> None:
    from rl_insight.services.process import rotate_if_large

    log = tmp_path / "x.log"
    f = open(log, "ab", buffering=0)  # as a child holds it
    f.write(b"a" * 2000)
    assert not rotate_if_large(log, limit=5000)
    assert rotate_if_large(log, limit=1000)
    f.write(b"after")
    f.close()
    assert (tmp_path / "x.log.1").read_bytes() == b"a" * 2000 and log.read_bytes() == b"after"


def test_ingest_only_stack_start_status_stop(tmp_path: Path) -> None:
    port = free_port()
    r = cli(tmp_path, "server", "start", "--detach", "--host", "127.0.0.1", "--port", str(port), *INGEST_ONLY)
    try:
        assert r.returncode == 0, r.stderr
        assert f"export RL_INSIGHT_SERVER_URL=http://127.0.0.1:{port}" in r.stdout
        st = cli(tmp_path, "server", "status", "--json")
        assert st.returncode == 0
        status = json.loads(st.stdout)
        assert status["running"] and [s["name"] for s in status["services"]] == ["ingest"]
        again = cli(
            tmp_path, "server", "start", "--detach", "--host", "127.0.0.1", "--port", str(port), *INGEST_ONLY
        )
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        stop = cli(tmp_path, "server", "stop")
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert cli(tmp_path, "server", "status").returncode == 1


def test_network_bind_generates_a_private_token(tmp_path: Path) -> None:
    port = free_port()
    r = cli(tmp_path, "server", "start", "--detach", "--host", "0.0.0.0", "--port", str(port), *INGEST_ONLY)
    try:
        assert r.returncode == 0, r.stderr
        token = (tmp_path / "token").read_text().strip()
        assert len(token) >= 20 and (tmp_path / "token").stat().st_mode & 0o777 == 0o600
        assert f"export RL_INSIGHT_TOKEN={token}" in r.stdout
        import httpx

        assert (
            httpx.post(f"http://127.0.0.1:{port}/api/v1/prometheus/targets", json={"targets": ["a:1"]}).status_code
            == 401
        )
        # the CLI finds the token in the home by itself
        f = tmp_path / "t.yaml"
        f.write_text("jobs:\n  - job_name: node-exporter\n    targets: ['10.0.0.1:9100']\n    labels: {node: n1}\n")
        add = cli(tmp_path, "server", "targets", "add", str(f))
        assert add.returncode == 0, add.stderr
        assert "Added 1 target(s) to job 'node-exporter'." in add.stdout
    finally:
        cli(tmp_path, "server", "stop")


def test_stale_pid_file_never_touches_other_processes(tmp_path: Path) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = {
            "supervisor": {"pid": victim.pid, "marker": "rl_insight server start --home elsewhere"},
            "services": [
                {
                    "name": "ingest",
                    "pid": victim.pid,
                    "marker": "-m rl_insight.server --config x",
                    "ready_url": "http://127.0.0.1:1/healthz",
                    "url": "",
                    "port": 1,
                    "version": "0",
                    "log": "",
                }
            ],
        }
        (tmp_path / "run").mkdir(parents=True)
        (tmp_path / "run" / "stack.json").write_text(json.dumps(state))
        st = cli(tmp_path, "server", "status")
        assert st.returncode == 1 and "stale" in st.stdout
        stop = cli(tmp_path, "server", "stop")
        assert stop.returncode == 0
        assert victim.poll() is None  # the unrelated process with the recorded pid is still alive
        assert not (tmp_path / "run" / "stack.json").exists()
    finally:
        victim.kill()
        victim.wait()


def test_targets_cli_without_server_writes_file_sd(tmp_path: Path) -> None:
    f = tmp_path / "targets.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "jobs": [
                    {
                        "job_name": "node-exporter",
                        "targets": ["10.0.0.1:9100", {"target": "10.0.0.2:9100", "labels": {"node": "n2"}}],
                        "labels": {"node": "n1"},
                    },
                    {"job_name": "npu-exporter", "targets": ["10.0.0.1:8082"]},
                ]
            }
        )
    )
    r = cli(tmp_path, "server", "targets", "add", str(f))
    assert r.returncode == 0, r.stderr
    assert "Added 2 target(s) to job 'node-exporter'." in r.stdout
    listed = json.loads(cli(tmp_path, "server", "targets", "list", "--json").stdout)
    assert {(t["job"], t["target"], t["labels"].get("node")) for t in listed} == {
        ("node-exporter", "10.0.0.1:9100", "n1"),
        ("node-exporter", "10.0.0.2:9100", "n2"),
        ("npu-exporter", "10.0.0.1:8082", None),
    }
    r = cli(tmp_path, "server", "targets", "remove", "--job", "npu-exporter")
    assert r.returncode == 0 and "Removed 1 target(s)." in r.stdout


@pytest.mark.parametrize("content,needle", [
    ("jobs: []", "non-empty top-level 'jobs:'"),
    ("jobs:\n  - job_name: ''\n    targets: ['a:1']", "needs a non-empty job_name"),
    ("jobs:\n  - job_name: x\n    targets: ['a:1', 'http://b:2']", "jobs[0] (x): target 'http://b:2'"),
    ("jobs: [unclosed", "not valid YAML"),
])
def test_targets_add_rejects_bad_files_before_writing(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(content)
    r = cli(tmp_path, "server", "targets", "add", str(f))
    assert r.returncode == 2 and needle in r.stderr
    assert not (tmp_path / "data" / "targets" / "rl-insight-targets.json").exists()


def test_rendered_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    settings = PrometheusSettings(
        host="127.0.0.1",
        port=9090,
        data_dir=tmp_path / "tsdb",
        config_file=tmp_path / "p.yml",
        targets_file=tmp_path / "targets.json",
        ingest_target="127.0.0.1:18080",
        scrape_interval="15s",
        rules_dir=tmp_path / "rules",
    )
    from rl_insight.services.prometheus import install_rules

    assert {p.name for p in install_rules(tmp_path / "rules")} == {"rl_insight_alerts.yml", "rl_insight_recording.yml"}
    text = render_config(settings)
    parsed = yaml.safe_load(text)
    jobs = {j["job_name"]: j for j in parsed["scrape_configs"]}
    assert jobs["rl_insight_server"]["static_configs"][0]["targets"] == ["127.0.0.1:18080"]
    assert jobs["rl_insight_targets"]["relabel_configs"][0] == {
        "source_labels": ["__rl_insight_job"],
        "target_label": "job",
    }
    assert parsed["global"]["scrape_timeout"] == "10s"  # never longer than the interval, capped at 10s
    assert parsed["rule_files"] == [str(tmp_path / "rules" / "*.yml")]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    (tmp_path / "targets.json").write_text("[]")
    settings.config_file.write_text(text)
    out = subprocess.run([promtool, "check", "config", str(settings.config_file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_auto_port_says_at_start_which_port_moved_and_why(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        r = cli(tmp_path, "server", "start", "--detach", "--host", "127.0.0.1", "--port", str(busy), "--auto-port",
                *INGEST_ONLY, timeout=60)
        try:
            assert r.returncode == 0, r.stdout + r.stderr
            state = json.loads((tmp_path / "run" / "stack.json").read_text())
            moved = f"port {busy} (ingest server) was busy; using"
            assert any(m.startswith(moved) for m in state["moved_ports"]), state["moved_ports"]
            assert moved in r.stdout  # on the screen, not only in the log
            # optional services that are not installed: one line naming them, not a paragraph each
            assert [x for x in r.stdout.splitlines() if "tempo" in x and "--tempo-bin" not in x] == [
                "not running, not installed (optional: ingest and the built-in UI work without them): tempo, grafana"]
        finally:
            cli(tmp_path, "server", "stop", timeout=60)


def test_a_stop_ends_the_ingest_server_in_order_with_what_it_was_sent(tmp_path: Path) -> None:
    """`server stop` signals the supervisor's process group, the server's writer and insight children too: they live
    as long as their pipe (server/workers/child_process.ServerPipe), so the server commits and exits by itself, at
    once, instead of finding its writer dead, starting another, and being killed 10 s later."""
    import time

    import httpx

    port = free_port()
    r = cli(tmp_path, "server", "start", "--detach", "--host", "127.0.0.1", "--port", str(port), *INGEST_ONLY)
    assert r.returncode == 0, r.stderr
    url = f"http://127.0.0.1:{port}"
    try:
        body = {"v": 1, "client": {"id": "c", "project": "p", "experiment_name": "e"},
                "series": [{"k": "g", "n": "loss", "l": {"project": "p", "experiment_name": "e"}}],
                "samples": [[0, time.time(), 1, 0.5]]}
        assert httpx.post(url + "/api/v1/ingest", json=body, timeout=30).json()["accepted"] == 1
    finally:
        started = time.monotonic()
        stop = cli(tmp_path, "server", "stop")
        took = time.monotonic() - started
    assert stop.returncode == 0, stop.stderr
    supervisor_log = (tmp_path / "logs" / "supervisor.log").read_text()
    server_log = (tmp_path / "logs" / "rl-insight-server.log").read_text()
    assert "ingest: stopped" in supervisor_log and "ingest: killed" not in supervisor_log, (took, supervisor_log[-500:])
    assert "ended unexpectedly" not in server_log and "Application shutdown complete" in server_log, server_log[-800:]
    # and what it acknowledged is in the store the next server reads
    import sqlite3

    store = sqlite3.connect(f"file:{tmp_path / 'data' / 'runstore.sqlite'}?mode=ro", uri=True)
    try:
        assert store.execute("SELECT count(*) FROM samples").fetchone()[0] == 1
    finally:
        store.close()
