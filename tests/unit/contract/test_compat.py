"""Drop-in parity with upstream RL-Insight (issue: drop-in parity): version, import paths, trace_state as
a decorator, target registration semantics, server.namespace, finish() when the server is down,
registrations following the current URL. Through the public API, the real HTTP server and the real CLI."""

from __future__ import annotations

import asyncio
import importlib
import time

import httpx
import pytest

import rl_insight
from tests.conftest import start_server, wait_until

SERVER_ON_A_PORT = "the rl_insight client sends through the stdlib, not httpx"  # (tests/lanes.py)


def test_version_satisfies_verls_requirement() -> None:
    from importlib.metadata import version

    major, minor = (int(x) for x in rl_insight.__version__.split(".")[:2])
    assert (major, minor) >= (0, 4)
    assert version("rl-insight") == rl_insight.__version__  # one source of truth (hatch reads _version.py)


def test_upstream_import_paths_are_the_same_functions() -> None:
    api = importlib.import_module("rl_insight.api")
    utils = importlib.import_module("rl_insight.utils")
    assert utils.update_prometheus_config is rl_insight.update_prometheus_config
    for name in ("init", "finish", "metric_gauge", "metric_count", "metric_histogram", "trace_state", "trace_op",
                 "trace_span", "update_prometheus_config"):
        assert getattr(api, name) is getattr(rl_insight, name), name


def _spans(server) -> list[dict]:
    return httpx.get(server.url + "/api/v1/spans/recent", params={"limit": 1000}).json()["spans"]


def test_trace_state_as_decorator_sync_and_async_enabled_or_not(server, monkeypatch) -> None:
    @rl_insight.trace_state("decorated_before_init", state_lane_id="rank_0")
    def step(x: int) -> int:
        return x + 1

    @rl_insight.trace_state("async_decorated", state_lane_id="replica_0", phase="gen")
    async def generate(x: int) -> int:
        await asyncio.sleep(0.01)
        return x * 2

    assert step(1) == 2 and asyncio.run(generate(2)) == 4  # monitoring off: plain calls
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="deco")
    assert step(2) == 3 and step(3) == 4
    assert asyncio.run(generate(5)) == 10
    rl_insight.flush(5)
    names = [s["name"] for s in _spans(server)]
    assert names.count("decorated_before_init") == 2 and names.count("async_decorated") == 1
    gen = next(s for s in _spans(server) if s["name"] == "async_decorated")
    assert gen["lane"] == "replica_0" and gen["attributes"]["phase"] == "gen"


def test_target_registration_answers_like_upstream(server) -> None:
    r = httpx.post(server.url + "/api/v1/prometheus/targets", json={"targets": ["10.0.0.1:8000"], "job_name": "vllm"})
    body = r.json()
    assert r.status_code == 200 and body["prometheus_reloaded"] is True and body["target_count"] == 1
    assert {"status", "job_name", "targets_file", "config_file"} <= set(body)
    bad = httpx.post(server.url + "/api/v1/prometheus/targets", json={"targets": []})
    assert bad.status_code == 400 and "non-empty list" in bad.json()["detail"]


def test_server_namespace_is_the_metric_prefix_and_service_name(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="ns", config={"server": {"namespace": "my-team"}})
    rl_insight.metric_gauge("actor/pg_loss", 0.25)
    assert rl_insight.flush(5)
    text = httpx.get(server.url + "/metrics").text
    assert 'my_team_actor_pg_loss{experiment_name="ns",project="p"} 0.25' in text
    assert "rl_insight_monitor_actor_pg_loss" not in text
    from rl_insight.protocol import SpanRecord
    from rl_insight.server.outbound.otlp import OtlpForwarder

    fwd = OtlpForwarder.__new__(OtlpForwarder)
    fwd._resources = {}
    span = fwd._to_readable(SpanRecord("a", "t", None, "n", None, "span", 1, 2, {}), ("h", "my_team"))
    assert span.resource.attributes["service.name"] == "my_team"


@pytest.mark.socket  # (connects to a port nobody listens on)
def test_finish_returns_at_once_when_the_server_is_down(monkeypatch, caplog) -> None:
    from rl_insight.client.ratelog import ratelog

    monkeypatch.setattr(ratelog, "_last", {})  # earlier tests may have used this message's rate-limit slot
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", "http://127.0.0.1:9")  # nothing listens
    rl_insight.init()
    for i in range(10):
        rl_insight.metric_gauge("x", i)
    wait_until(lambda: rl_insight.stats().get("retries", 0) >= 1, what="a failed attempt")
    t0 = time.monotonic()
    rl_insight.finish()
    assert time.monotonic() - t0 < 1.0
    assert any("were not delivered at exit" in r.getMessage() for r in caplog.records)


def test_registrations_before_init_follow_the_current_url(tmp_path, monkeypatch) -> None:
    a, b = start_server(tmp_path / "a"), start_server(tmp_path / "b")
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", a.url)
        rl_insight.update_prometheus_config(["10.0.0.1:1"], job_name="first")
        wait_until(lambda: httpx.get(a.url + "/api/v1/targets").json()["count"] == 1, what="registration at a")
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", b.url)
        rl_insight.update_prometheus_config(["10.0.0.2:2"], job_name="second")
        wait_until(lambda: httpx.get(b.url + "/api/v1/targets").json()["count"] == 1, what="registration at b")
        assert httpx.get(a.url + "/api/v1/targets").json()["count"] == 1
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("bad,says", [("ftp://x:1", "scheme 'ftp'"), ("http://", "has no host")])
def test_registration_with_a_bad_url_is_one_clear_line(monkeypatch, caplog, bad, says) -> None:
    from rl_insight.client.ratelog import ratelog

    monkeypatch.setattr(ratelog, "_last", {})
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", bad)
    rl_insight.update_prometheus_config(["10.0.0.1:1"])
    assert any(says in r.getMessage() and "cannot register targets" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ identity rules and experiments (upstream main)
def test_init_needs_both_identity_fields_or_neither(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    with pytest.raises(ValueError, match="both project and experiment_name"):
        rl_insight.init(project="only-project")
    assert not rl_insight.is_enabled()
    with pytest.raises(ValueError):
        rl_insight.update_prometheus_config(["h:1"], project="p")


def test_call_labels_never_override_the_run_identity(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="mine")
    rl_insight.metric_gauge("g", 1.0, experiment_name="someone-else")
    rl_insight.trace_span(name="s", start_time_ns=1, end_time_ns=2, attributes={"project": "other"})
    rl_insight.flush(5)
    assert 'rl_insight_monitor_g{experiment_name="mine",project="p"} 1.0' in httpx.get(server.url + "/metrics").text
    (s,) = [x for x in _spans(server) if x["name"] == "s"]
    assert s["attributes"]["project"] == "p"


def test_identity_names_are_stripped_and_blank_counts_as_not_given(server, monkeypatch) -> None:
    """Upstream main normalises the identity before it becomes one: surrounding whitespace goes."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    with pytest.raises(ValueError, match="both project and experiment_name"):
        rl_insight.init(project="p", experiment_name="   ")  # blank: only project was given
    rl_insight.init(project="  proj ", experiment_name="\texp\n")
    rl_insight.metric_gauge("g", 2.0)
    rl_insight.flush(5)
    assert 'rl_insight_monitor_g{experiment_name="exp",project="proj"} 2.0' in httpx.get(server.url + "/metrics").text
    assert [(r["project"], r["experiment_name"]) for r in httpx.get(server.url + "/api/v1/runs").json()["runs"]] == [
        ("proj", "exp")]


def test_legacy_mode_keeps_an_identity_named_label_and_warns_once(server, monkeypatch) -> None:
    """No identity at init: a label named project / experiment_name passes through as a label, with one
    UserWarning per process (upstream main); the training call never raises."""
    import warnings

    monkeypatch.delenv("RL_INSIGHT_PROJECT", raising=False)
    monkeypatch.delenv("RL_INSIGHT_EXPERIMENT_NAME", raising=False)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rl_insight.metric_gauge("g", 1.0, project="legacy-p")
        rl_insight.metric_count("c", 1.0, experiment_name="legacy-e")
        rl_insight.metric_gauge("g", 3.0, project="legacy-p")
    user = [w for w in seen if issubclass(w.category, UserWarning) and "project or experiment_name" in str(w.message)]
    assert len(user) == 1 and user[0].filename == __file__  # once, pointing at the caller's line
    rl_insight.flush(5)
    assert 'rl_insight_monitor_g{project="legacy-p"} 3.0' in httpx.get(server.url + "/metrics").text


def _register(server, **payload) -> httpx.Response:
    return httpx.post(server.url + "/api/v1/prometheus/targets", json=payload)


def test_experiment_identity_rules_on_registration(server) -> None:
    assert _register(server, targets=["h:1"], project="p").status_code == 400
    r = _register(server, targets=[{"target": "h:1", "labels": {"project": "q"}}], project="p", experiment_name="e")
    assert r.status_code == 400 and "contradicts" in r.json()["detail"]
    r = _register(server, targets=["h:1"], project=" p ", experiment_name="e")
    assert r.status_code == 200
    # upstream main: the answer names the experiment (normalised) and its state; unidentified targets have none
    assert (r.json()["project"], r.json()["experiment_name"], r.json()["state"]) == ("p", "e", "active")
    legacy = _register(server, targets=["h:2"]).json()
    assert (legacy["project"], legacy["experiment_name"], legacy["state"]) == (None, None, None)


def test_archive_and_restore_over_http_cli_and_the_client(server, tmp_path, monkeypatch) -> None:
    import subprocess
    import sys

    assert (
        _register(
            server, targets=["10.0.0.1:8000", "10.0.0.2:8000"], job_name="vllm", project="p", experiment_name="e1"
        ).status_code
        == 200
    )
    assert (
        _register(server, targets=["10.0.0.3:8000"], job_name="vllm", project="p", experiment_name="e2").status_code
        == 200
    )
    exps = {
        e["experiment_name"]: e
        for e in httpx.get(server.url + "/api/v1/experiments", params={"project": "p"}).json()["experiments"]
    }
    assert exps["e1"]["state"] == "active" and exps["e1"]["target_count"] == 2

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "rl_insight",
                "server",
                "experiments",
                *args,
                "--server-url",
                server.url,
                "--home",
                str(tmp_path / "home"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )

    r = cli("archive", "--project", "p", "--experiment-name", "e1")
    assert r.returncode == 0 and "p/e1: archived, 2 target(s)" in r.stdout, r.stderr
    assert "e1" not in server.config.targets_file.read_text()  # Prometheus no longer discovers them
    assert "10.0.0.3:8000" in server.config.targets_file.read_text()  # the other experiment is untouched
    again = httpx.post(server.url + "/api/v1/experiments/archive", json={"project": "p", "experiment_name": "e1"})
    assert again.status_code == 200 and again.json()["state"] == "archived"  # idempotent
    refused = _register(server, targets=["10.0.0.9:1"], project="p", experiment_name="e1")
    assert refused.status_code == 409 and "archived" in refused.json()["detail"]
    # the client: a registration into the archived experiment is counted and logged, never raised
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="e1")
    rl_insight.update_prometheus_config(["10.0.0.9:1"], job_name="late")
    wait_until(lambda: rl_insight.stats()["dropped"].get("archived_experiment") == 1, what="409 counted")
    listed = cli("list", "--project", "p")
    assert listed.returncode == 0 and "archived" in listed.stdout and "active" in listed.stdout
    shown = cli("show", "--project", "p", "--experiment-name", "e1")
    assert shown.returncode == 0 and "10.0.0.2:8000" in shown.stdout
    r = cli("restore", "--project", "p", "--experiment-name", "e1")
    assert r.returncode == 0 and "p/e1: active, 2 target(s)" in r.stdout
    assert "10.0.0.1:8000" in server.config.targets_file.read_text()
    missing = cli("archive", "--project", "p", "--experiment-name", "nope")
    assert missing.returncode == 2 and "no experiment" in missing.stderr
    assert httpx.get(server.url + "/api/v1/experiments/targets", params={"project": "p"}).status_code == 400


def test_archived_experiments_are_marked_in_the_runs_list(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="old")
    rl_insight.metric_gauge("x", 1.0)
    rl_insight.flush(5)
    assert _register(server, targets=["10.0.0.1:1"], project="p", experiment_name="old").status_code == 200
    httpx.post(server.url + "/api/v1/experiments/archive", json={"project": "p", "experiment_name": "old"})
    server.app.state.st.writer.flush(10)
    (run,) = httpx.get(server.url + "/api/v1/runs").json()["runs"]
    assert run["archived"] is True


# ------------------------------------------------------------------ CLI: upstream's --config, --attach-logs,
# --extra-dashboard-dir
def _cli(home, *args: str):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
    return subprocess.run(
        [sys.executable, "-m", "rl_insight", *args, "--home", str(home)]
        if "server" in args[:3]
        else [sys.executable, "-m", "rl_insight", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_server_start_reads_upstreams_config_file_and_flags_win(tmp_path) -> None:
    from tests.conftest import free_port

    file_port, flag_port = free_port(), free_port()
    cfg = tmp_path / "rl-insight.yaml"
    cfg.write_text(f"""
server:
  port: {file_port}
  data_dir: ./monitor-data
  runtime_dir: /ignored/runtime
prometheus:
  enable: false
tempo:
  enable: false
grafana:
  enable: false
mystery:
  knob: 1
""")
    home = tmp_path / "home"
    r = _cli(home, "server", "start", "--config", str(cfg), "--detach", "--host", "127.0.0.1", "--no-alertmanager")
    try:
        assert r.returncode == 0, r.stderr
        assert f"http://127.0.0.1:{file_port}" in r.stdout  # the file's port
        assert "unknown keys ignored: mystery.knob" in r.stderr and "server.runtime_dir" in r.stderr
        assert (tmp_path / "monitor-data" / "runstore.sqlite").exists()  # relative to the YAML, as upstream
        assert httpx.get(f"http://127.0.0.1:{file_port}/healthz").status_code == 200
    finally:
        assert _cli(home, "server", "stop", "--config", str(cfg)).returncode == 0
    r = _cli(home, "server", "start", "--config", str(cfg), "--detach", "--host", "127.0.0.1", "--port", str(flag_port),
             "--no-alertmanager")
    try:
        assert r.returncode == 0, r.stderr
        assert f"http://127.0.0.1:{flag_port}" in r.stdout  # the flag beats the file
    finally:
        _cli(home, "server", "stop")


def test_config_file_errors_and_switches(tmp_path) -> None:
    home = tmp_path / "home"
    off = tmp_path / "off.yaml"
    off.write_text("server:\n  enable: false\n")
    r = _cli(home, "server", "start", "--config", str(off))
    assert r.returncode == 0 and "management is disabled by config" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  port: eighteen\n")
    r = _cli(home, "server", "start", "--config", str(bad))
    assert r.returncode == 2 and "server.port must be an integer" in r.stderr and "Traceback" not in r.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("server: [unclosed\n")
    r = _cli(home, "server", "start", "--config", str(broken))
    assert r.returncode == 2 and "not valid YAML" in r.stderr
    r = _cli(home, "server", "start", "--detach", "--attach-logs")
    assert r.returncode == 2 and "--attach-logs" in r.stderr
    r = _cli(home, "--log-level", "loud", "server", "status")
    assert r.returncode == 2 and "--log-level" in r.stderr


def test_extra_dashboard_dir_is_validated_and_provisioned_next_to_ours(tmp_path) -> None:
    import json

    from rl_insight.services.grafana import GrafanaSettings, write_config

    extra = tmp_path / "dash"
    extra.mkdir()
    (extra / "mine.json").write_text(json.dumps({"title": "my team", "uid": "my-team", "panels": []}))
    s = GrafanaSettings(http_host="127.0.0.1", http_port=3000, data_dir=tmp_path / "g", runtime_dir=tmp_path / "rt",
                        prometheus_url=None, tempo_url=None, extra_dashboard_dir=extra)
    write_config(s)
    assert (s.dashboards / "extra-mine.json").exists() and (
        s.dashboards / "verl_trainer_v1_with_vllm_engine.json"
    ).exists()
    (extra / "v2.json").write_text(
        json.dumps({"apiVersion": "dashboard.grafana.app/v2", "spec": {}, "title": "x", "panels": []})
    )
    r = _cli(
        tmp_path / "home",
        "server",
        "start",
        "--extra-dashboard-dir",
        str(extra),
        "--no-prometheus",
        "--host",
        "127.0.0.1",
    )
    assert r.returncode == 2 and "v2 schema" in r.stderr


def test_attach_logs_prints_each_services_lines_with_its_name(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rl_insight",
            "server",
            "start",
            "--attach-logs",
            "--no-prometheus",
            "--no-tempo",
            "--no-grafana",
            "--no-alertmanager",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--home",
            str(tmp_path / "h"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("[ingest] "):
                break
        assert any(line.startswith("[ingest] ") for line in lines), "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def test_every_server_command_takes_upstreams_config(server, tmp_path) -> None:
    port = server.url.rsplit(":", 1)[1]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"server:\n  port: {port}\n")
    assert (
        _register(server, targets=["10.0.0.7:1"], job_name="cfg", project="p", experiment_name="e").status_code == 200
    )
    r = _cli(tmp_path / "h", "server", "targets", "list", "--config", str(cfg))
    assert r.returncode == 0 and "10.0.0.7:1" in r.stdout, r.stderr  # the server found through server.port
    r = _cli(tmp_path / "h", "server", "experiments", "list", "--config", str(cfg))
    assert r.returncode == 0 and "p" in r.stdout and "active" in r.stdout
    for cmd in (["status"], ["logs"], ["credentials"], ["stop"]):
        r = _cli(tmp_path / "h", "server", *cmd, "--config", str(cfg))
        assert "No such option" not in r.stderr, (cmd, r.stderr)
