"""Prometheus: render prometheus.yml from the provisioning template and build its command line."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError
from .render import render_template
from .resources import data_path


@dataclass(frozen=True)
class PrometheusSettings:
    host: str
    port: int
    data_dir: Path
    config_file: Path
    targets_file: Path
    ingest_target: str  # host:port Prometheus uses to scrape the ingest server
    rules_dir: Path | None = None  # where the rule files are installed; None: no rules
    remote_write_url: str | None = None  # send on to Mimir / Thanos / VictoriaMetrics
    alertmanager_target: str | None = None  # host:port of the managed Alertmanager its alerts go to
    user_rules_file: Path | None = None  # the rules users add (server/prometheus/user_rules.py)
    metrics_token_file: Path | None = None  # the bearer token the ingest server's /metrics needs (0600; None: open)
    scrape_interval: str = "10s"
    retention: str = "30d"
    external_url: str | None = None  # where people reach it (an alert's generatorURL); None: Prometheus' guess, the
    # host name, which a Prometheus on loopback cannot be reached at

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def render_config(s: PrometheusSettings, template: Path | None = None) -> str:
    """Fill the template; the result is checked to be YAML with the expected jobs."""
    interval = s.scrape_interval
    values: dict[str, object] = {
        "scrape_interval": interval,
        "scrape_timeout": interval if duration_seconds(interval) <= 10 else "10s",
        "ingest_target": s.ingest_target,
        "targets_file": str(s.targets_file),
        "rules_glob": str(s.rules_dir / "*.yml") if s.rules_dir else "",
    }
    if template is None:
        text = render_template("provisioning/prometheus.yml", values)
    else:
        text = string.Template(template.read_text()).substitute({k: json.dumps(v) for k, v in values.items()})
    parsed = yaml.safe_load(text) or {}
    if s.rules_dir is not None:
        parsed["rule_files"] = [str(s.rules_dir / "*.yml")] + ([str(s.user_rules_file)] if s.user_rules_file else [])
    else:
        parsed.pop("rule_files", None)
    if s.remote_write_url:
        parsed["remote_write"] = [{"url": s.remote_write_url}]
    if s.alertmanager_target:
        parsed["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [s.alertmanager_target]}]}]}
    jobs = {j.get("job_name"): j for j in parsed.get("scrape_configs", [])}
    if "rl_insight_server" not in jobs:
        raise ConfigError("the Prometheus template must keep the scrape job 'rl_insight_server'")
    if s.metrics_token_file is not None:  # read from a file Prometheus re-reads each scrape: never in this YAML
        jobs["rl_insight_server"]["authorization"] = {"type": "Bearer",
                                                     "credentials_file": str(s.metrics_token_file)}
    header = "# Rendered by `rl-insight server start`; edit provisioning/prometheus.yml instead.\n"
    return header + yaml.safe_dump(parsed, sort_keys=False)


def install_rules(dest: Path) -> list[Path]:
    """Copy the shipped rule files into `dest` (replacing what an earlier start put there)."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.yml"):
        old.unlink()
    installed = []
    for src in sorted(data_path("provisioning/rules").glob("*.yml")):
        target = dest / src.name
        target.write_text(src.read_text())
        installed.append(target)
    return installed


def duration_seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for suffix in ("ms", "s", "m", "h"):
        if duration.endswith(suffix) and duration[: -len(suffix)].isdigit():
            return int(duration[: -len(suffix)]) * units[suffix]
    raise ConfigError(f"scrape interval {duration!r} must look like 10s, 500ms, 1m")


def command(binary: Path, s: PrometheusSettings) -> list[str]:
    # No --web.enable-lifecycle: file_sd needs no reload, and /-/quit must not be reachable.
    return [
        str(binary),
        f"--config.file={s.config_file}",
        f"--web.listen-address={s.host}:{s.port}",
        f"--storage.tsdb.path={s.data_dir}",
        f"--storage.tsdb.retention.time={s.retention}",
        *([f"--web.external-url={s.external_url}"] if s.external_url else []),
        # An alert's "since" (activeAt) survives a restart (the server's, which restarts this Prometheus) for every
        # rule, not only those whose `for` is longer than the 10 min default: Prometheus restores it from its
        # ALERTS_FOR_STATE series after an outage of up to --rules.alert.for-outage-tolerance (1 h).
        "--rules.alert.for-grace-period=0s",
    ]
