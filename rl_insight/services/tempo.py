"""Tempo 2.x: render tempo.yaml and build its command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .render import render_template


@dataclass(frozen=True)
class TempoSettings:
    http_host: str
    http_port: int
    otlp_host: str
    otlp_grpc_port: int
    otlp_http_port: int
    grpc_port: int
    memberlist_port: int
    data_dir: Path
    config_file: Path
    retention: str = "720h"  # 30 days

    @property
    def url(self) -> str:
        return f"http://{self.http_host if self.http_host not in ('0.0.0.0', '::') else '127.0.0.1'}:{self.http_port}"


def render(s: TempoSettings) -> str:
    return render_template(
        "provisioning/tempo.yaml",
        {
            "http_host": s.http_host,
            "http_port": s.http_port,
            "internal_host": "127.0.0.1",
            "grpc_port": s.grpc_port,
            "otlp_grpc_endpoint": f"{s.otlp_host}:{s.otlp_grpc_port}",
            "otlp_http_endpoint": f"{s.otlp_host}:{s.otlp_http_port}",
            "memberlist_port": s.memberlist_port,
            "retention": s.retention,
            "wal_dir": str(s.data_dir / "wal"),
            "traces_dir": str(s.data_dir / "traces"),
        },
    )


def command(binary: Path, s: TempoSettings) -> list[str]:
    return [str(binary), f"-config.file={s.config_file}"]
