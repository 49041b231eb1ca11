"""Prometheus: render prometheus.yml from the provisioning template and build its command line."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError
from ..resources import data_path


@dataclass(frozen=True)
class PrometheusSettings:
    host: str
    port: int
    data_dir: Path
    config_file: Path
    targets_file: Path
    ingest_target: str  # host:port Prometheus uses to scrape the ingest server
    rules_dir: Path | None = None  # where the rule files are installed; None: no rules
    scrape_interval: str = "10s"
    retention: str = "30d"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def render_config(s: PrometheusSettings, template: Path | None = None) -> str:
    """Fill the template; the result is checked to be YAML with the expected jobs."""
    src = template or data_path("provisioning/prometheus.yml")
    interval = s.scrape_interval
    values = {
        "scrape_interval": json.dumps(interval),
        "scrape_timeout": json.dumps(interval if _seconds(interval) <= 10 else "10s"),
        "ingest_target": json.dumps(s.ingest_target),
        "targets_file": json.dumps(str(s.targets_file)),
        "rules_glob": json.dumps(str(s.rules_dir / "*.yml")) if s.rules_dir else "",
    }
    try:
        text = string.Template(src.read_text()).substitute(values)
        parsed = yaml.safe_load(text)
    except (KeyError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"Prometheus template {src} could not be rendered: {exc}") from None
    jobs = {j.get("job_name") for j in (parsed or {}).get("scrape_configs", [])}
    if "rl_insight_server" not in jobs:
        raise ConfigError(f"Prometheus template {src} must keep the scrape job 'rl_insight_server'")
    return text


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


def _seconds(duration: str) -> float:
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
    ]
