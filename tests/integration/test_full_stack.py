"""Four supervised services: the real Prometheus, stand-in Tempo and Grafana (their binaries cannot be
downloaded here), and the ingest server. Checks the files Tempo and Grafana read, readiness-based
start, degraded mode, failures that leave nothing running, credentials, logs and stop."""

from __future__ import annotations

import configparser
import json
import socket
import time
from pathlib import Path

import httpx
import pytest
import yaml

from rl_insight.services import process
from tests.conftest import free_port, prometheus_binary, wait_until
from tests.integration.conftest import cli
from tests.standins import write_standin

pytestmark = pytest.mark.integration


def ports(n: int) -> list[str]:
    return [str(free_port()) for _ in range(n)]


def start_args(tmp: Path, tempo: Path, grafana: Path, *extra: str) -> list[str]:
    p = ports(7)
    return ["server", "start", "--detach", "--host", "127.0.0.1", "--port", p[0], "--prometheus-port", p[1],
            "--prometheus-bin", prometheus_binary(), "--tempo-bin", str(tempo), "--grafana-bin", str(grafana),
            "--tempo-port", p[2], "--otlp-grpc-port", p[3], "--otlp-http-port", p[4], "--grafana-port", p[5],
            "--grafana-host", "127.0.0.1", "--scrape-interval", "1s", "--ready-timeout", "15",
            "--alertmanager-port", p[6], *extra]


def no_stack_processes(home: Path) -> bool:
    state_file = home / "run" / "stack.json"
    if state_file.exists():
        state = json.loads(state_file.read_text())
        return not any(process.is_ours(s["pid"], s["marker"]) for s in state["services"])
    return True


def test_five_services_rendered_configs_credentials_logs_and_stop(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tempo = write_standin(tmp_path / "bin" / "tempo", "tempo", "2.6.1")
    grafana = write_standin(tmp_path / "bin" / "grafana", "grafana", "13.0.0")
    first = start_args(tmp_path, tempo, grafana, "--remote-write-url", "http://mimir.example:9009/api/v1/push")
    r = cli(home, *first)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Grafana login: admin / " in r.stdout
        state = json.loads((home / "run" / "stack.json").read_text())
        assert [s["name"] for s in state["services"]] == ["alertmanager", "prometheus", "tempo", "grafana",
                                                          "ingest"]  # start order
        st = json.loads(cli(home, "server", "status", "--json").stdout)
        assert st["running"] and all(s["ready"] for s in st["services"])

        # Tempo reads: receivers bound to the configured address, HTTP port, local storage + WAL, retention, no usage
        # report
        seen = json.loads((home / "runtime" / "tempo.yaml.seen.json").read_text())["config"]
        tempo_svc = next(s for s in state["services"] if s["name"] == "tempo")
        assert seen["server"]["http_listen_port"] == tempo_svc["port"]
        otlp = seen["distributor"]["receivers"]["otlp"]["protocols"]
        assert otlp["grpc"]["endpoint"].startswith("127.0.0.1:") and otlp["http"]["endpoint"].startswith("127.0.0.1:")
        assert seen["storage"]["trace"]["backend"] == "local"
        assert seen["storage"]["trace"]["wal"]["path"] == str(home / "data" / "tempo" / "wal")
        assert seen["storage"]["trace"]["local"]["path"] == str(home / "data" / "tempo" / "traces")
        assert seen["compactor"]["compaction"]["block_retention"] == "720h"
        assert seen["usage_report"]["reporting_enabled"] is False

        # Grafana reads: ini paths and security, provisioning with fixed uids and the RL-Insight folder
        ini = configparser.ConfigParser()
        ini.read(home / "runtime" / "grafana.ini")
        assert ini["paths"]["data"] == str(home / "data" / "grafana")
        assert ini["paths"]["provisioning"] == str(home / "runtime" / "grafana-provisioning")
        assert ini["auth.anonymous"]["enabled"] == "false" and ini["analytics"]["reporting_enabled"] == "false"
        assert ini["analytics"]["check_for_updates"] == "false" and "admin_password" not in ini["security"]
        ds = yaml.safe_load((home / "runtime" / "grafana-provisioning" / "datasources" / "rl-insight.yaml").read_text())
        by_uid = {d["uid"]: d for d in ds["datasources"]}
        assert by_uid["prometheus"]["url"] == next(s["url"] for s in state["services"] if s["name"] == "prometheus")
        assert (
            by_uid["tempo"]["url"] == tempo_svc["url"]
            and by_uid["tempo"]["jsonData"]["tracesToMetrics"]["datasourceUid"] == "prometheus"
        )
        prov = yaml.safe_load(
            (home / "runtime" / "grafana-provisioning" / "dashboards" / "rl-insight.yaml").read_text()
        )
        provider = prov["providers"][0]
        assert provider["folder"] == "RL-Insight" and provider["type"] == "file"
        dash_dir = Path(provider["options"]["path"])
        assert {p.name for p in dash_dir.glob("*.json")} >= {
            "verl_trainer_v1_with_vllm_engine.json",
            "rl_insight_overview.json",
        }
        gseen = json.loads((home / "runtime" / "grafana.ini.seen.json").read_text())
        password = (home / "grafana-admin-password").read_text().strip()
        assert gseen["password"] == password and password != "admin" and len(password) >= 16
        assert (home / "grafana-admin-password").stat().st_mode & 0o777 == 0o600
        assert gseen["argv"][1] == "server" and "--config" in gseen["argv"]

        # Prometheus: rules and remote_write rendered; promtool accepts the file
        prom_cfg = yaml.safe_load((home / "runtime" / "prometheus.yml").read_text())
        assert prom_cfg["remote_write"] == [{"url": "http://mimir.example:9009/api/v1/push"}]
        assert prom_cfg["rule_files"] == [str(home / "runtime" / "rules" / "*.yml"),
                                          str(home / "data" / "alerting" / "user_rules.yml")]  # the shipped, the users'
        assert (home / "data" / "alerting" / "user_rules.yml").exists()  # (written at start: Prometheus finds one)
        import shutil
        import subprocess

        if shutil.which("promtool"):
            out = subprocess.run(["promtool", "check", "config", str(home / "runtime" / "prometheus.yml")],
                                 capture_output=True, text=True)
            assert out.returncode == 0, out.stdout + out.stderr

        # Alertmanager: its configuration (0600: receivers hold secrets) accepted by amtool, Prometheus sends it alerts,
        # the ingest server posts to it
        am = next(s for s in state["services"] if s["name"] == "alertmanager")
        am_cfg = home / "data" / "alerting" / "alertmanager.yml"
        assert am_cfg.stat().st_mode & 0o777 == 0o600 and f"--config.file={am_cfg}" in am["marker"]
        assert prom_cfg["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": [
            am["url"].removeprefix("http://")]}]}]}
        if shutil.which("amtool"):
            out = subprocess.run(["amtool", "check-config", str(am_cfg)], capture_output=True, text=True)
            assert out.returncode == 0, out.stdout + out.stderr
        assert httpx.get(am["url"] + "/-/ready").status_code == 200

        # discovery reports every port, the ingest server forwards to the managed Tempo
        ingest = next(s for s in state["services"] if s["name"] == "ingest")
        svc = httpx.get(ingest["url"] + "/api/v1/services").json()
        assert svc["prometheus_port"] and svc["grafana_port"] == int(
            next(s for s in state["services"] if s["name"] == "grafana")["port"]
        )
        assert svc["otlp_port"] == int(otlp["http"]["endpoint"].rsplit(":", 1)[1])
        assert svc["services"]["tempo"]["state"] == "running" and svc["services"]["grafana"]["state"] == "running"
        assert svc["services"]["alertmanager"] == {"url": am["url"], "state": "running"}
        health = httpx.get(ingest["url"] + "/healthz").json()["notifications"]
        assert health["enabled"] and health["alertmanager_url"] == am["url"]

        cred = cli(home, "server", "credentials")
        assert password in cred.stdout and "admin" in cred.stdout
        logs = cli(home, "server", "logs", "tempo", "-n", "5")
        assert logs.returncode == 0 and "stand-in tempo listening" in logs.stdout
        again = cli(home, *first)  # the same start again: it says so
        assert "already running" in again.stdout
        # another --port while it runs is refused, naming the running port (never silently ignored)
        other = cli(home, *start_args(tmp_path, tempo, grafana))
        running_port = ingest["url"].rsplit(":", 1)[1]
        assert other.returncode == 2 and "was not applied" in other.stderr and running_port in other.stderr
        second = cli(home, "server", "stop")
        assert second.returncode == 0
        assert (
            "Grafana login" not in cli(home, *start_args(tmp_path, tempo, grafana)).stdout
        )  # only shown when generated
    finally:
        cli(home, "server", "stop")
    assert no_stack_processes(home)


def test_missing_optional_services_start_degraded(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    p = ports(2)
    env = {"PATH": "/nonexistent"}  # no tempo/grafana on PATH (and none in system locations here)
    r = cli(home, "server", "start", "--detach", "--host", "127.0.0.1", "--port", p[0], "--prometheus-port", p[1],
            "--prometheus-bin", prometheus_binary(), "--scrape-interval", "1s", "--no-alertmanager", env=env)
    try:
        assert r.returncode == 0, r.stderr
        line = next(x for x in r.stdout.splitlines() if x.startswith("not running, not installed"))
        assert line.endswith("tempo, grafana") and "--tempo-bin PATH / --grafana-bin PATH" in r.stdout
        st = cli(home, "server", "status")
        assert st.returncode == 0 and "tempo" in st.stdout and "missing" in st.stdout
        assert "Notifications off: no Alertmanager runs" in st.stdout  # and how to turn them on
        assert "apt-get install prometheus-alertmanager" in st.stdout
        ingest = json.loads((home / "run" / "stack.json").read_text())["ingest_url"]
        svc = httpx.get(ingest + "/api/v1/services").json()
        assert svc["otlp_port"] is None and svc["grafana_port"] is None and svc["prometheus_port"]
    finally:
        cli(home, "server", "stop")


def test_service_that_never_becomes_ready_stops_the_start_and_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tempo = write_standin(tmp_path / "bin" / "tempo", "tempo", "2.6.1")
    grafana = write_standin(tmp_path / "bin" / "grafana", "grafana", "13.0.0")
    r = cli(home, *start_args(tmp_path, tempo, grafana, "--ready-timeout", "3"), env={"STANDIN_MODE": "never-ready"})
    assert r.returncode == 1
    assert "tempo not ready after 3s" in r.stderr and "stand-in tempo listening" in r.stderr  # the log tail is shown
    assert no_stack_processes(home) and not (home / "run" / "stack.json").exists()


def test_crash_after_start_is_restarted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tempo = write_standin(tmp_path / "bin" / "tempo", "tempo", "2.6.1")
    grafana = write_standin(tmp_path / "bin" / "grafana", "grafana", "13.0.0")
    r = cli(home, *start_args(tmp_path, tempo, grafana))
    try:
        assert r.returncode == 0, r.stderr
        state = json.loads((home / "run" / "stack.json").read_text())
        old = next(s for s in state["services"] if s["name"] == "grafana")
        process.terminate(old["pid"], old["marker"], timeout=5)  # it dies under the supervisor
        wait_until(lambda: next(s for s in json.loads((home / "run" / "stack.json").read_text())["services"]
                                if s["name"] == "grafana")["pid"] != old["pid"], timeout=30, what="grafana restarted")
        sup_log = (home / "logs" / "supervisor.log").read_text()
        assert "grafana exited" in sup_log and "grafana restarted" in sup_log
        assert cli(home, "server", "status").returncode == 0
    finally:
        cli(home, "server", "stop")


def test_busy_grafana_port_is_named(tmp_path: Path) -> None:
    tempo = write_standin(tmp_path / "bin" / "tempo", "tempo", "2.6.1")
    grafana = write_standin(tmp_path / "bin" / "grafana", "grafana", "13.0.0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = str(s.getsockname()[1])
        args = start_args(tmp_path, tempo, grafana)
        args[args.index("--grafana-port") + 1] = busy
        r = cli(tmp_path / "home", *args)
    assert r.returncode == 3 or "port " + busy in r.stderr
    assert f"port {busy} (Grafana)" in r.stderr
    time.sleep(0.1)
    assert no_stack_processes(tmp_path / "home")
