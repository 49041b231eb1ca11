"""Alertmanager: where it listens, where it keeps its state (silences and what it already sent, kept across restarts),
and its command line. Its configuration is the server's (server/rooms/alerting/notifications.write_config): the
supervisor writes it from the stored receivers before Alertmanager starts, the server on every receiver change."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AlertmanagerSettings:
    host: str
    port: int
    data_dir: Path  # its --storage.path: silences and the notification log
    config_file: Path

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    @property
    def target(self) -> str:
        """host:port as Prometheus' `alerting:` section names it."""
        return self.url.removeprefix("http://")


def command(binary: Path, s: AlertmanagerSettings) -> list[str]:
    return [str(binary), f"--config.file={s.config_file}", f"--storage.path={s.data_dir}",
            f"--web.listen-address={s.host}:{s.port}", f"--web.external-url={s.url}",
            "--cluster.listen-address=",  # one Alertmanager per stack: no gossip port to pick or open
            "--log.level=info"]


def tool_beside(binary: Path, tool: str) -> str | None:
    """A tool from the same install as `binary` (release archives ship amtool with Alertmanager, promtool with
    Prometheus), else from PATH; None when there is none."""
    beside = binary.parent / tool
    return str(beside) if beside.is_file() else shutil.which(tool)
