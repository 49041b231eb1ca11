"""`/metrics` behind a scrape token (issue 54 item 6): refused without it, and a real Prometheus, run with the scrape
configuration `server start` renders (services/prometheus.py: the token in a 0600 file, `authorization:
credentials_file`), scrapes it; the file is where the token is, never the YAML."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import httpx

from rl_insight.services.prometheus import PrometheusSettings, render_config
from tests.conftest import free_port, prom_query, prometheus_binary, start_server, wait_until

ADMIN, SCRAPE = "admin-token-for-metrics", "scrape-only-secret"


def test_metrics_needs_the_scrape_token_and_the_managed_prometheus_has_it(tmp_path: Path) -> None:
    srv = start_server(tmp_path, token=ADMIN, metrics_token=SCRAPE)
    prom = None
    try:
        assert httpx.get(srv.url + "/metrics").status_code == 401
        assert httpx.get(srv.url + "/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        viewer = httpx.post(srv.url + "/api/v1/tokens", json={"name": "v", "role": "viewer"},
                            headers={"Authorization": f"Bearer {ADMIN}"}).json()["token"]
        assert httpx.get(srv.url + "/metrics", headers={"Authorization": f"Bearer {viewer}"}).status_code == 401
        for token in (SCRAPE, ADMIN):
            got = httpx.get(srv.url + "/metrics", headers={"Authorization": f"Bearer {token}"})
            assert got.status_code == 200 and "rl_insight_server_" in got.text
        assert httpx.get(srv.url + "/healthz").status_code == 200  # probes stay open

        from rl_insight.fsutil import atomic_write
        token_file = tmp_path / "metrics_token"
        atomic_write(token_file, SCRAPE + "\n", mode=0o600)
        port = free_port()
        settings = PrometheusSettings(host="127.0.0.1", port=port, data_dir=tmp_path / "tsdb",
                                      config_file=tmp_path / "prometheus.yml", targets_file=tmp_path / "targets.json",
                                      ingest_target=srv.url[7:], scrape_interval="1s", metrics_token_file=token_file)
        (tmp_path / "targets.json").write_text("[]")
        text = render_config(settings)
        assert SCRAPE not in text and str(token_file) in text
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        settings.config_file.write_text(text)
        prom = subprocess.Popen([prometheus_binary(), f"--config.file={settings.config_file}",
                                 f"--storage.tsdb.path={settings.data_dir}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def scraped() -> bool:
            try:
                up = prom_query(f"http://127.0.0.1:{port}", 'up{job="rl_insight_server"}')
            except httpx.HTTPError:
                return False
            return bool(up) and up[0]["value"][1] == "1"
        wait_until(scraped, timeout=30, interval=0.5, what="Prometheus to scrape /metrics with the token")
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(10)
        srv.stop()


def test_server_start_gives_its_prometheus_the_token_in_a_private_file(tmp_path: Path) -> None:
    """The supervisor's plan (what `server start --metrics-token` runs): the token in runtime/metrics_token (0600),
    named by the rl_insight_server scrape job; nothing of it in prometheus.yml or on any command line."""
    import yaml

    from rl_insight.server.config import ServerConfig
    from rl_insight.services.home import Home
    from rl_insight.services.supervisor import StackSettings, Supervisor

    server = ServerConfig(host="127.0.0.1", port=free_port(), token=ADMIN, metrics_token=SCRAPE)
    sup = Supervisor(StackSettings(home=Home(tmp_path), server=server, prometheus_bin=prometheus_binary(),
                                   prometheus_port=free_port(), alertmanager=False, tempo=False, grafana=False))
    sup.plan()
    token_file = tmp_path / "runtime" / "metrics_token"
    assert token_file.read_text().strip() == SCRAPE and stat.S_IMODE(token_file.stat().st_mode) == 0o600
    rendered = (tmp_path / "runtime" / "prometheus.yml").read_text()
    jobs = {j["job_name"]: j for j in yaml.safe_load(rendered)["scrape_configs"]}
    assert jobs["rl_insight_server"]["authorization"] == {"type": "Bearer", "credentials_file": str(token_file)}
    assert SCRAPE not in rendered and not any(SCRAPE in " ".join(s.argv) for s in sup.services)
