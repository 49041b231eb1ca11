"""Grafana: grafana.ini, datasource and dashboard provisioning, admin password, command line."""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..fsutil import atomic_write
from .render import render_template
from .resources import data_path


@dataclass(frozen=True)
class GrafanaSettings:
    http_host: str
    http_port: int
    data_dir: Path
    runtime_dir: Path
    prometheus_url: str | None
    tempo_url: str | None
    scrape_interval: str = "10s"
    extra_dashboard_dir: Path | None = None  # provisioned next to ours (--extra-dashboard-dir)

    @property
    def url(self) -> str:
        return f"http://{self.http_host if self.http_host not in ('0.0.0.0', '::') else '127.0.0.1'}:{self.http_port}"

    @property
    def ini(self) -> Path:
        return self.runtime_dir / "grafana.ini"

    @property
    def provisioning(self) -> Path:
        return self.runtime_dir / "grafana-provisioning"

    @property
    def dashboards(self) -> Path:
        return self.runtime_dir / "grafana-dashboards"


def admin_password(home_root: Path) -> tuple[str, bool]:
    """The generated admin password (mode 0600 in the home); True when it was created just now."""
    path = home_root / "grafana-admin-password"
    try:
        return path.read_text().strip(), False
    except FileNotFoundError:
        pw = secrets.token_urlsafe(18)
        home_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(pw + "\n")
        return pw, True


def write_config(s: GrafanaSettings) -> None:
    """grafana.ini, provisioning YAML (datasources with fixed uids, dashboards folder) and the dashboards."""
    for d in (s.data_dir, s.data_dir / "logs", s.data_dir / "plugins", s.provisioning / "datasources",
              s.provisioning / "dashboards", s.provisioning / "plugins", s.provisioning / "alerting", s.dashboards):
        d.mkdir(parents=True, exist_ok=True)
    atomic_write(
        s.ini,
        render_template(
            "provisioning/grafana.ini",
            {
                "data_dir": s.data_dir,
                "logs_dir": s.data_dir / "logs",
                "plugins_dir": s.data_dir / "plugins",
                "provisioning_dir": s.provisioning,
                "http_host": s.http_host,
                "http_port": s.http_port,
            },
            quote=False,
            check_yaml=False,
        ),
    )
    datasources = render_template("provisioning/grafana/datasources.yaml", {
        "prometheus_url": s.prometheus_url or "http://127.0.0.1:9090", "tempo_url": s.tempo_url or "http://127.0.0.1:3200",
        "scrape_interval": s.scrape_interval})
    atomic_write(s.provisioning / "datasources" / "rl-insight.yaml", datasources)
    atomic_write(s.provisioning / "dashboards" / "rl-insight.yaml",
                 render_template("provisioning/grafana/dashboards.yaml", {"dashboards_dir": str(s.dashboards)}))
    for old in s.dashboards.glob("*.json"):
        old.unlink()
    for src in sorted(data_path("dashboards").glob("*.json")):
        shutil.copyfile(src, s.dashboards / src.name)
    if s.extra_dashboard_dir is not None:
        for src in extra_dashboards(s.extra_dashboard_dir):
            shutil.copyfile(src, s.dashboards / f"extra-{src.name}")


def extra_dashboards(directory: Path) -> list[Path]:
    """Dashboards of --extra-dashboard-dir, validated: classic Grafana JSON (an object with a title and
    panels, not the v2 schema that file provisioning cannot load) whose uid does not clash with ours."""
    import json

    from ..errors import ConfigError

    if not directory.is_dir():
        raise ConfigError(f"--extra-dashboard-dir {directory} is not a directory")
    ours = {json.loads(p.read_text()).get("uid") for p in data_path("dashboards").glob("*.json")}
    found = sorted(directory.glob("*.json"))
    if not found:
        raise ConfigError(f"--extra-dashboard-dir {directory} holds no *.json dashboard")
    for src in found:
        try:
            doc = json.loads(src.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"dashboard {src} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or "title" not in doc or ("panels" not in doc and "rows" not in doc):
            raise ConfigError(f"dashboard {src} is not a classic Grafana dashboard (an object with title and panels)",
                              hint="export it from Grafana with 'Export for sharing externally' off, as classic JSON")
        if doc.get("apiVersion") or doc.get("spec"):
            raise ConfigError(f"dashboard {src} uses Grafana's v2 schema, which file provisioning cannot load",
                              hint="export it as classic JSON")
        if doc.get("uid") in ours:
            raise ConfigError(f"dashboard {src} has uid {doc.get('uid')!r}, which one of rl-insight's dashboards uses")
    return found


def homepath(binary: Path) -> Path | None:
    """Grafana's home: the nearest ancestor of the binary holding conf/ and public/ (archive or system layout)."""
    for parent in binary.resolve().parents:
        if (parent / "conf").is_dir() and (parent / "public").is_dir():
            return parent
    for candidate in (Path("/usr/share/grafana"), Path("/usr/local/share/grafana")):
        if (candidate / "conf").is_dir():
            return candidate
    return None


def command(binary: Path, s: GrafanaSettings) -> list[str]:
    home = homepath(binary)
    argv = [str(binary)]
    if binary.name == "grafana":
        argv.append("server")
    argv += ["--config", str(s.ini)]
    if home is not None:
        argv += ["--homepath", str(home)]
    return argv
