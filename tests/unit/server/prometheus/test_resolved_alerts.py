"""A resolved alert keeps its value in its summary (issue 49 item 21: "Slowest rollout replica is …x the median"):
a real Prometheus evaluates a rule that fires and resolves; the alerts API fills the resolved alert's summary with
the rule's expression at its last firing."""

from __future__ import annotations

import asyncio
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from rl_insight.server.prometheus.api import PrometheusApi
from rl_insight.server.prometheus.panels import _fill, alerts
from tests.conftest import answers, free_port, prom_query, prometheus_binary, wait_until


def run(coro):  # (in a thread of its own: a test before may have left an event loop set on this one)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


RULES = """groups:
  - name: test
    interval: 1s
    rules:
      - alert: TailTooSlow
        expr: tail_ratio{job="t"} > 2
        labels: {severity: warning}
        annotations:
          summary: >-
            Slowest rollout replica is {{ $value | printf "%.1f" }}x the median in
            {{ $labels.experiment_name }}
"""


def test_templates_fill_labels_and_the_value_or_say_what_is_unknown() -> None:
    t = 'is {{ $value | printf "%.1f" }}x in {{ $labels.experiment_name }} ({{ $value }}, {{ humanize 3 }})'
    assert _fill(t, {"experiment_name": "e"}, 4.04) == "is 4.0x in e (4.04, …)"
    assert _fill(t, {"experiment_name": "e"}) == "is …x in e (…, …)"


def test_a_resolved_alert_says_the_value_it_fired_with(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    gauge = Gauge("tail_ratio", "slowest replica over the median", ["project", "experiment_name"], registry=reg)
    gauge.labels("p", "e").set(4.04)
    exporter_port = free_port()
    server, _ = start_http_server(exporter_port, addr="127.0.0.1", registry=reg)
    (tmp_path / "rules.yml").write_text(RULES)
    (tmp_path / "prom.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{tmp_path / 'rules.yml'}']\n"
        f"scrape_configs:\n  - job_name: t\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
    port = free_port()
    prom = subprocess.Popen([prometheus_binary(), f"--config.file={tmp_path / 'prom.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    api = PrometheusApi(url)
    try:
        wait_until(lambda: answers(url + "/-/ready"), timeout=60, interval=0.2, what="Prometheus to be ready")
        firing = wait_until(lambda: run(alerts(api, "p", "e"))["active"], timeout=60, interval=0.5,
                            what="the alert to fire")
        assert firing[0]["summary"].startswith("Slowest rollout replica is 4.0x")
        wait_until(lambda: prom_query(url, 'ALERTS{alertstate="firing"}'), timeout=30, what="ALERTS series")
        gauge.labels("p", "e").set(1.0)  # resolved
        got = wait_until(lambda: (lambda a: a["recent"] and not a["active"] and a)(
            run(alerts(api, "p", "e", resolution_s=1))), timeout=60, interval=0.5, what="the alert to resolve")
        resolved = got["recent"][0]
        assert resolved["state"] == "resolved" and resolved["value"] == 4.04
        assert resolved["summary"] == "Slowest rollout replica is 4.0x the median in e", resolved  # was "…x"
    finally:
        prom.terminate()
        prom.wait(10)
        server.shutdown()
