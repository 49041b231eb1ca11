"""`--config FILE`: upstream RL-Insight's server YAML (ports, binary paths, data and install dirs,
retention, enable switches), mapped onto our `server` options.

Precedence, as upstream: a flag given on the command line (or through its environment variable)
beats the file, and the file beats our defaults. Keys we understand but do not need (runtime file
paths we render ourselves, the Ray backend) are reported once as ignored; unknown keys are warned
about; a value of the wrong type is an error naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError


# upstream key -> (our option name, converter)
def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).strip().lstrip("-").isdigit():
        raise ValueError("must be an integer")
    return int(v)


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return v.strip().lower() in ("true", "yes", "1")
    raise ValueError("must be true or false")


def _str(v: Any) -> str:
    if not isinstance(v, (str, int, float)) or isinstance(v, bool) or not str(v).strip():
        raise ValueError("must be a non-empty string")
    return str(v).strip()


MAPPING: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "server.port": ("port", _int),
    "server.host": ("host", _str),
    "server.data_dir": ("data_dir", _str),
    "server.install_dir": ("install_dir", _str),
    "prometheus.enable": ("prometheus", _bool),
    "prometheus.prometheus_port": ("prometheus_port", _int),
    "prometheus.binary_path": ("prometheus_bin", _str),
    "prometheus.retention_time": ("retention", _str),
    "prometheus.scrape_interval": ("scrape_interval", _str),
    "tempo.enable": ("tempo", _bool),
    "tempo.query_port": ("tempo_port", _int),
    "tempo.binary_path": ("tempo_bin", _str),
    "tempo.retention_time": ("tempo_retention", _str),
    "otel.otel_port": ("otlp_http_port", _int),
    "grafana.enable": ("grafana", _bool),
    "grafana.port": ("grafana_port", _int),
    "grafana.binary_path": ("grafana_bin", _str),
    "grafana.extra_dashboard_dir": ("extra_dashboard_dir", _str),
    # ours, in the same file: live export
    "export.tensorboard_dir": ("export_tensorboard", _str),
    "export.wandb": ("export_wandb", _bool),
    "export.wandb_project": ("wandb_project", _str),
    "export.wandb_entity": ("wandb_entity", _str),
}
# understood, not needed here (we render these files ourselves, or there is no hub)
IGNORED = {
    "server.runtime_dir",
    "server.state_file",
    "server.backend",
    "server.namespace",
    "server.url",
    "server.config_file",
    "prometheus.config_file",
    "prometheus.data_dir",
    "prometheus.metrics_report_port",
    "prometheus.download_url_template",
    "prometheus.experiment_convergence_timeout",
    "prometheus.version",
    "tempo.config_file",
    "tempo.data_dir",
    "tempo.grpc_port",
    "tempo.memberlist_port",
    "tempo.download_url_template",
    "tempo.version",
    "grafana.config_file",
    "grafana.provisioning_dir",
    "grafana.dashboards_dir",
    "grafana.data_dir",
    "grafana.homepath",
    "grafana.download_url_template",
    "grafana.version",
    "otel.enable",
}


@dataclass
class UpstreamConfig:
    path: Path
    values: dict[str, Any] = field(default_factory=dict)  # our option name -> value
    enabled: bool = True  # server.enable
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                out.update(_flatten(v, key))
            else:
                out[key] = v
    return out


# options that name a path: read relative to the YAML's directory, as upstream does
PATH_OPTIONS = ("data_dir", "install_dir", "extra_dashboard_dir", "prometheus_bin", "tempo_bin", "grafana_bin",
                "export_tensorboard")


def _mapped(path: Path, key: str, raw: Any) -> tuple[str, Any]:
    """Upstream's `key` as our option and its value (a path made absolute from the YAML's directory)."""
    option, conv = MAPPING[key]
    try:
        value = conv(raw)
    except ValueError as exc:
        raise ConfigError(f"--config {path}: {key} {exc}, found {raw!r}") from None
    if option in PATH_OPTIONS:
        given = Path(value).expanduser()
        value = str(given) if given.is_absolute() else str((path.parent / given).resolve())
    return option, value


def load(path: Path) -> UpstreamConfig:
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read --config {path}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"--config {path} must hold a mapping (server:, prometheus:, tempo:, grafana:), found "
                          f"{type(doc).__name__}")
    cfg = UpstreamConfig(path)
    base = path.parent
    for key, raw in sorted(_flatten(doc).items()):
        if isinstance(raw, str) and "${service_root}" in raw:
            raw = raw.replace("${service_root}", str(base))  # upstream resolves it to the YAML's directory
        if key == "server.enable":
            try:
                cfg.enabled = _bool(raw)
            except ValueError as exc:
                raise ConfigError(f"--config {path}: server.enable {exc}, found {raw!r}") from None
        elif key in MAPPING:
            option, value = _mapped(path, key, raw)
            cfg.values[option] = value
        elif key in IGNORED:
            cfg.ignored.append(key)
        else:
            cfg.unknown.append(key)
    return cfg
