"""The whole data path with a real Prometheus, driven through the CLI in a temporary home."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, prom_query, wait_until
from tests.integration.conftest import Stack, cli, start_stack

pytestmark = pytest.mark.integration
DRIVER = Path(__file__).with_name("trainer_driver.py")
REPO = Path(__file__).resolve().parents[2]


class Trainer:
    """The driver process; `send` waits for its one-line answer."""

    def __init__(self, url: str, token: str) -> None:
        env = {
            **os.environ,
            "RL_INSIGHT_SERVER_URL": url,
            "RL_INSIGHT_TOKEN": token,
            "RL_INSIGHT_FLUSH_INTERVAL": "0.1",
            "PYTHONPATH": str(REPO),
        }
        self.proc = subprocess.Popen([sys.executable, str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=REPO)

    def send(self, line: str) -> str:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer.startswith("ok"), f"driver answered {answer!r} to {line!r}"
        return answer

    def flush(self, timeout: float = 30.0) -> dict:
        return json.loads(self.send(f"flush {timeout}")[3:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def value(prom_url: str, query: str) -> float | None:
    result = prom_query(prom_url, query)
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_verl_job_reaches_prometheus(stack: Stack) -> None:
    trainer = Trainer(stack.ingest_url, stack.token)
    try:
        exporter_port = free_port()
        for step in (1, 2, 3):
            trainer.send(f"verl_step {step}")
        trainer.send("states")
        trainer.send(f"register {exporter_port}")
        assert trainer.flush()["flushed"]

        wait_until(lambda: value(stack.prometheus_url, "rl_insight_monitor_training_global_step") == 3.0, timeout=30,
                   what="global step in Prometheus")
        assert value(stack.prometheus_url, "rl_insight_monitor_actor_pg_loss") == pytest.approx(0.5 / 3)
        assert value(stack.prometheus_url, "rl_insight_monitor_val_core_openai_gsm8k_acc_mean_1") == pytest.approx(0.3)
        assert value(stack.prometheus_url, "rl_insight_monitor_timing_s_gen") == pytest.approx(4.5)

        # the rollout exporter registered through update_prometheus_config is scraped with its replica label
        # prometheus-client >= 0.2x serves `vllm:` names escaped as `vllm_` in OpenMetrics, so accept both
        series = wait_until(
            lambda: prom_query(stack.prometheus_url, '{__name__=~"vllm[:_]num_requests_running",job="vllm"}'),
            timeout=30,
            what="vllm target scraped",
        )
        assert series[0]["metric"]["replica"] == "0" and series[0]["value"][1] == "3"
        assert value(stack.prometheus_url, f'up{{job="vllm",instance="127.0.0.1:{exporter_port}"}}') == 1.0

        # 16 concurrent coroutines on replica_0..3 -> one merged busy interval per lane
        spans = httpx.get(
            stack.ingest_url + "/api/v1/spans/recent", headers={"Authorization": f"Bearer {stack.token}"}
        ).json()["spans"]
        lanes = sorted(s["lane"] for s in spans if s["name"] == "vllm_generate")
        assert lanes == ["replica_0", "replica_1", "replica_2", "replica_3"]

        r = cli(stack.home, "server", "status")
        assert r.returncode == 0 and "prometheus" in r.stdout and "2." in r.stdout
        r = cli(stack.home, "server", "targets", "list")
        assert f"127.0.0.1:{exporter_port}" in r.stdout and "replica=0" in r.stdout
    finally:
        trainer.close()


def test_counter_totals_exact_after_sigkill_of_ingest_server(stack: Stack) -> None:
    trainer = Trainer(stack.ingest_url, stack.token)
    try:
        trainer.send("count before_kill 50")
        trainer.send("count processed 200")
        assert trainer.flush()["flushed"]
        wait_until(lambda: value(stack.prometheus_url, "rl_insight_monitor_processed_total") == 200.0, timeout=30,
                   what="first total")

        old_pid = stack.ingest_pid()
        os.kill(old_pid, signal.SIGKILL)
        trainer.send("count processed 100")  # while the server is down: kept cumulative in the client
        # the supervisor restarts it; the client retries, notices the new boot id and resends every total
        wait_until(lambda: stack.ingest_pid() != old_pid, timeout=30, what="supervisor restart")
        assert trainer.flush(60)["flushed"]
        wait_until(lambda: value(stack.prometheus_url, "rl_insight_monitor_processed_total") == 300.0, timeout=30,
                   what="exact total after restart")
        wait_until(lambda: value(stack.prometheus_url, "rl_insight_monitor_before_kill_total") == 50.0, timeout=30,
                   what="untouched counter resent after restart")
    finally:
        trainer.close()


def test_training_starts_before_the_server(tmp_path: Path, stop_home: list[Path]) -> None:
    port, prom_port, exporter_port = free_port(), free_port(), free_port()
    trainer = Trainer(f"http://127.0.0.1:{port}", "integration-token")
    try:
        t0 = time.perf_counter()
        for step in (1, 2):
            trainer.send(f"verl_step {step}")
        trainer.send(f"register {exporter_port}")
        assert time.perf_counter() - t0 < 5  # training was not held up by the missing server
        assert not trainer.flush(0.5)["flushed"]

        home = tmp_path / "home"
        stop_home.append(home)
        stack = start_stack(home, port=port, prom_port=prom_port)
        assert trainer.flush(60)["flushed"]
        wait_until(lambda: value(stack.prometheus_url, "rl_insight_monitor_training_global_step") == 2.0, timeout=30,
                   what="metrics sent before the server existed")
        wait_until(lambda: prom_query(stack.prometheus_url, 'up{job="vllm"} == 1'), timeout=40,
                   what="target registered before the server existed")
    finally:
        trainer.close()
