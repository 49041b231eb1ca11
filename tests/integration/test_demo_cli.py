"""`rl-insight demo` tells the truth: non-zero when its data was not stored; SIGTERM cleans up like Ctrl+C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import start_server

DEMO = [sys.executable, "-m", "rl_insight", "demo", "--replicas", "1", "--ranks", "1", "--step-seconds", "0.5"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}


def test_demo_exits_non_zero_when_nothing_was_stored() -> None:
    r = subprocess.run(DEMO + ["--steps", "2", "--server-url", "http://127.0.0.1:9"], capture_output=True, text=True,
                       timeout=120, env=_env())
    assert r.returncode == 1 and "did not store the demo's data" in r.stderr


def test_demo_refuses_negative_steps() -> None:
    r = subprocess.run(DEMO + ["--steps", "-1", "--server-url", "http://127.0.0.1:9"], capture_output=True, text=True,
                       timeout=60, env=_env())
    assert r.returncode == 2 and "--steps" in r.stderr


def test_demo_framework_choices_are_checked() -> None:
    for args, says in ((["--framework", "rllib"], "framework must be verl or slime"),
                       (["--framework", "slime", "--engine", "vllm"], "slime rolls out with SGLang")):
        r = subprocess.run(DEMO + ["--steps", "1", "--server-url", "http://127.0.0.1:9", *args], capture_output=True,
                           text=True, timeout=60, env=_env())
        assert r.returncode == 2 and says in r.stderr, r.stderr


def test_the_slime_shape_reports_slimes_keys_with_role_and_rank(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    try:
        r = subprocess.run(DEMO + ["--steps", "2", "--server-url", srv.url, "--framework", "slime",
                                   "--experiment-name", "slime"], capture_output=True, text=True, timeout=120,
                           env=_env())
        assert r.returncode == 0, r.stdout + r.stderr
        text = httpx.get(srv.url + "/metrics").text
        for name in ("train_loss", "train_grad_norm", "train_lr_pg_0", "rollout_response_len_mean", "rollout_rewards",
                     "rollout_truncated_ratio", "perf_rollout_time", "perf_train_time", "perf_update_weights_time"):
            assert f'rl_insight_monitor_{name}{{experiment_name="slime",project="rl-insight-demo",rank="0",' \
                   f'role="actor"}}' in text, name
        assert "rl_insight_monitor_critic_score_mean{" not in text  # not verl's keys
        lanes = {x["lane"] for x in httpx.get(srv.url + "/api/v1/runs/1/lanes").json()["lanes"]}
        assert {"rank_0", "replica_0"} <= lanes
        states = {row[2] for row in httpx.get(srv.url + "/api/v1/runs/1/spans").json()["spans"]}
        assert {"sglang_generate", "actor_compute_log_prob", "ref_compute_log_prob", "train_batch"} <= states
    finally:
        srv.stop()


def test_demo_with_a_wrong_token_exits_non_zero(tmp_path: Path) -> None:
    srv = start_server(tmp_path, token="right")
    try:
        r = subprocess.run(DEMO + ["--steps", "2", "--server-url", srv.url, "--token", "wrong"], capture_output=True,
                           text=True, timeout=120, env=_env())
        assert r.returncode == 1 and "unauthorized" in r.stderr
    finally:
        srv.stop()


def test_sigterm_stops_the_demo_like_ctrl_c(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    try:
        proc = subprocess.Popen(DEMO + ["--server-url", srv.url, "--experiment-name", "term"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=_env())
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.startswith("[demo] run page: "):  # after step 1: where to look, not the runs list
                break
        assert lines[-1].strip().startswith(f"[demo] run page: {srv.url}/#/run/"), lines
        assert httpx.get(srv.url + "/api/v1/targets").json()["count"] >= 1  # its stand-ins are registered
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, "".join(lines) + out
        assert "stopping the demo" in out and "Demo finished" in out
        assert httpx.get(srv.url + "/api/v1/targets").json()["count"] == 0  # cleaned up: no target left behind
    finally:
        srv.stop()


def test_start_on_a_running_loopback_server_prints_its_address_and_warns(tmp_path: Path) -> None:
    from tests.conftest import free_port

    port = free_port()
    cli = [sys.executable, "-m", "rl_insight", "server"]
    home = ["--home", str(tmp_path / "h")]
    r = subprocess.run(
        cli + ["start", "--detach", "--host", "127.0.0.1", "--port", str(port), "--no-prometheus", "--no-alertmanager",
               *home],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert r.returncode == 0, r.stderr
    try:
        again = subprocess.run(cli + ["start", *home], capture_output=True, text=True, timeout=120, env=_env())
        assert again.returncode == 0 and "already running" in again.stdout
        assert f"export RL_INSIGHT_SERVER_URL=http://127.0.0.1:{port}" in again.stdout
        assert "loopback only" in again.stderr and "has no token" in again.stderr and "server stop" in again.stderr
        other = subprocess.run(cli + ["start", "--port", str(port + 1), *home], capture_output=True, text=True,
                               timeout=120, env=_env())  # never silently ignored
        assert other.returncode == 2 and f"already runs on port {port}" in other.stderr
        assert f"--port {port + 1} was not applied" in other.stderr and "server stop" in other.stderr
        # any other option that differs is refused the same way, naming it (issue 49 item 15: exit 0 before)
        store = subprocess.run(cli + ["start", "--store", "sqlite:///" + str(tmp_path / "other.sqlite"),
                                      "--store-retention-days", "3", *home], capture_output=True, text=True,
                               timeout=120, env=_env())
        assert store.returncode == 2, store.stdout + store.stderr
        text = " ".join(store.stderr.split())  # (the message is wrapped to the terminal)
        assert "--store sqlite:///" in text and "(it runs with its default)" in text
        assert "--store-retention-days 3.0 (it runs with" in text and "server stop" in text
        secret = subprocess.run(cli + ["start", "--metrics-token", "s3cret-scrape", *home], capture_output=True,
                                text=True, timeout=120, env=_env())  # a secret option: named, its value never shown
        assert secret.returncode == 2 and "--metrics-token (it runs with another)" in " ".join(secret.stderr.split())
        assert "s3cret-scrape" not in secret.stderr + secret.stdout
        same = subprocess.run(cli + ["start", "--host", "127.0.0.1", *home], capture_output=True, text=True,
                              timeout=120, env=_env())  # the value it runs with: nothing to refuse
        assert same.returncode == 0 and "already running" in same.stdout, same.stderr
    finally:
        subprocess.run(cli + ["stop", *home], capture_output=True, timeout=60, env=_env())
