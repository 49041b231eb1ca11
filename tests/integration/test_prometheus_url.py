"""Metrics beyond one Prometheus (issue 24, item 4): the managed Prometheus remote-writes into Debian's VictoriaMetrics,
and `server start --prometheus-url` points the UI's panels and alert history at VictoriaMetrics — the panels answer
from it (its own query counter moves; the numbers equal a query of it), the alert rules still come from the managed
Prometheus that evaluates them, and a bad URL is refused before anything starts."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from rl_insight.semantics import panels as catalogue
from rl_insight.server.prometheus.panels import scope_selector
from tests.conftest import debian_binary, free_port, prometheus_binary, wait_until
from tests.integration.conftest import cli

pytestmark = pytest.mark.integration
TOKEN = "vm-token"
H = {"Authorization": f"Bearer {TOKEN}"}


def _query_count(vm_url: str) -> float:
    """VictoriaMetrics' own count of range queries it answered."""
    text = httpx.get(vm_url + "/metrics", timeout=5).text
    return sum(float(m.group(1)) for m in re.finditer(r'^vm_http_requests_total\{path="/api/v1/query_range"\} (\S+)',
                                                        text, re.M))


@pytest.fixture(scope="module")
def vm_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, int]]:
    tmp = tmp_path_factory.mktemp("vm")
    vm_port, port = free_port(), free_port()
    vm_url = f"http://127.0.0.1:{vm_port}"
    binary = debian_binary("victoria-metrics", "victoria-metrics")
    vm = subprocess.Popen([binary, f"-httpListenAddr=127.0.0.1:{vm_port}", f"-storageDataPath={tmp / 'vm'}",
                           "-retentionPeriod=1d", "-search.latencyOffset=0s"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    home = tmp / "home"
    demo = None
    try:
        wait_until(lambda: _ok(vm_url + "/health"), timeout=30, what="VictoriaMetrics")
        r = cli(home, "server", "start", "--detach", "--host", "127.0.0.1", "--port", str(port), "--prometheus-bin",
                prometheus_binary(), "--prometheus-port", str(free_port()), "--scrape-interval", "1s", "--token",
                TOKEN, "--remote-write-url", vm_url + "/api/v1/write", "--prometheus-url", vm_url, "--no-tempo",
                "--no-grafana", "--no-alertmanager")
        assert r.returncode == 0, r.stdout + r.stderr
        url = f"http://127.0.0.1:{port}"
        demo = subprocess.Popen([sys.executable, "-m", "rl_insight", "demo", "--server-url", url, "--token", TOKEN,
                                 "--steps", "500", "--step-seconds", "0.6", "--replicas", "2", "--ranks", "2",
                                 "--experiment-name", "vm"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rid = wait_until(lambda: next((x["id"] for x in httpx.get(url + "/api/v1/runs", headers=H).json()["runs"]
                                       if (x["last_step"] or 0) >= 3), None), timeout=90, interval=0.5,
                         what="demo steps")
        yield url, vm_url, rid
    finally:
        if demo is not None:
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(60)
            except subprocess.TimeoutExpired:
                demo.kill()
        cli(home, "server", "stop")
        vm.terminate()
        vm.wait(10)


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_panels_answer_from_victoria_metrics(vm_stack: tuple[str, str, int]) -> None:
    url, vm_url, rid = vm_stack

    def vllm_panels() -> dict | None:
        d = httpx.get(f"{url}/api/v1/runs/{rid}/panels/vllm", headers=H, timeout=30).json()
        have = [p for p in d["panels"] if any(s["points"] for s in p["series"])]
        return d if d["prometheus"]["state"] == "ok" and have else None

    before = _query_count(vm_url)
    d = wait_until(vllm_panels, timeout=90, interval=1, what="vLLM panels with data from VictoriaMetrics")
    # the server asked VictoriaMetrics, not the managed Prometheus (VictoriaMetrics may count a request only after
    # it has answered: its /metrics, read at once, said 0 twice here, once in this test under load)
    wait_until(lambda: _query_count(vm_url) > before, timeout=10, interval=0.2,
               what="VictoriaMetrics counting the panels' queries")
    # the same numbers as the panel's own query sent to VictoriaMetrics directly, over a settled window
    def settled() -> tuple[dict, dict] | None:
        end = time.time() - 5
        got = httpx.get(f"{url}/api/v1/runs/{rid}/panels/vllm", params={"from_s": end - 60, "to_s": end}, headers=H,
                        timeout=30).json()
        single = {p.id for p in catalogue.BY_ID["vllm"].panels if len(p.queries) == 1}  # its series are one query's
        with_data = [p for p in got["panels"] if p["id"] in single and any(x["points"] for x in p["series"])]
        return (got, with_data[0]) if with_data else None

    d, panel = wait_until(settled, timeout=60, interval=1, what="a settled window with data")
    spec = next(p for p in catalogue.BY_ID["vllm"].panels if p.id == panel["id"])
    expr = catalogue.render(spec.queries[0].expr, scope_selector("rl-insight-demo", "vm"), d["rate_window"])
    window = {"query": expr, "start": d["from_s"], "end": d["to_s"], "step": d["step_s"]}
    direct = httpx.get(vm_url + "/api/v1/query_range", params=window, timeout=10).json()["data"]["result"]
    assert direct
    shown = {tuple(sorted(x["labels"].items())): x["points"] for x in panel["series"]}
    for item in direct:
        key = tuple(sorted((k, str(v)) for k, v in item["metric"].items()))
        # the same value at every time both hold (times to the ms the UI rounds to); only the window's last point may
        # be missing from one of the two: asked a moment apart, VictoriaMetrics once held it back from one (CI)
        theirs = {round(float(t), 3): float(v) for t, v in item["values"]}
        ours = {round(t, 3): v for t, v in shown[key]}
        both = sorted(theirs.keys() & ours.keys())
        assert both and [theirs[t] for t in both] == [ours[t] for t in both]
        rest = (theirs.keys() | ours.keys()) - set(both)
        assert len(rest) <= 1 and all(t > both[-1] for t in rest), (theirs, ours)
    services = httpx.get(url + "/api/v1/services").json()["services"]["prometheus"]
    assert services["query_url"] == vm_url and services["state"] == "running" and services["url"] != vm_url


def test_alerts_read_rules_from_prometheus_and_history_from_victoria_metrics(vm_stack: tuple[str, str, int]) -> None:
    url, vm_url, rid = vm_stack
    a = httpx.get(f"{url}/api/v1/runs/{rid}/alerts", headers=H, timeout=30).json()
    assert a["prometheus"]["state"] == "ok", a  # rules from the managed Prometheus; ALERTS history from VM


def test_a_bad_prometheus_url_is_refused_before_anything_starts(tmp_path: Path) -> None:
    r = cli(tmp_path / "h", "server", "start", "--prometheus-url", "victoria:8428", "--no-prometheus")
    assert r.returncode == 2 and "is not an http(s)://host[:port][/path] URL" in r.stderr, r.stderr
