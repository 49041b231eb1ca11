"""What `rl-insight server install` installs: versions, per-platform asset names and URLs (data only).

Defaults are the versions upstream RL-Insight documents, with upstream's exact file names, so
archive sets users already downloaded keep working. Checksums come from the vendor's checksum
file at the same origin; `pinned` holds known sums (`asset name -> sha256`) for air-gapped use.
"""

from __future__ import annotations

import platform as _platform
from dataclasses import dataclass, field

PLATFORMS = ("linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64")


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    version: str
    min_version: tuple[int, int, int]
    asset: str  # template: {version} {os} {arch}
    url: str  # template: {version} {asset}
    checksum_url: str  # template: {version} {asset}; format given by checksum_kind
    checksum_kind: str  # "sums" (lines "<sha256>  <file>") or "single" (the file holds one hex digest)
    binaries: tuple[str, ...]  # executable names to look for inside the archive
    max_major: int | None = None  # newest major version we can configure
    pinned: dict[str, str] = field(default_factory=dict)

    def asset_name(self, version: str, plat: str) -> str:
        os_, arch = plat.split("-")
        return self.asset.format(version=version, os=os_, arch=arch)


CATALOG: dict[str, ServiceSpec] = {
    "prometheus": ServiceSpec(
        name="prometheus", version="2.54.1", min_version=(2, 30, 0),
        asset="prometheus-{version}.{os}-{arch}.tar.gz",
        url="https://github.com/prometheus/prometheus/releases/download/v{version}/{asset}",
        checksum_url="https://github.com/prometheus/prometheus/releases/download/v{version}/sha256sums.txt",
        checksum_kind="sums", binaries=("prometheus",)),
    "alertmanager": ServiceSpec(
        name="alertmanager", version="0.27.0", min_version=(0, 24, 0),
        asset="alertmanager-{version}.{os}-{arch}.tar.gz",
        url="https://github.com/prometheus/alertmanager/releases/download/v{version}/{asset}",
        checksum_url="https://github.com/prometheus/alertmanager/releases/download/v{version}/sha256sums.txt",
        checksum_kind="sums", binaries=("alertmanager",)),  # amtool: found beside it
    "tempo": ServiceSpec(
        name="tempo", version="2.6.1", min_version=(2, 0, 0), max_major=2,
        asset="tempo_{version}_{os}_{arch}.tar.gz",
        url="https://github.com/grafana/tempo/releases/download/v{version}/{asset}",
        checksum_url="https://github.com/grafana/tempo/releases/download/v{version}/SHA256SUMS",
        checksum_kind="sums", binaries=("tempo",)),
    "grafana": ServiceSpec(
        name="grafana", version="13.0.0", min_version=(10, 0, 0),
        asset="grafana-{version}.{os}-{arch}.tar.gz",
        url="https://dl.grafana.com/oss/release/{asset}",
        checksum_url="https://dl.grafana.com/oss/release/{asset}.sha256",
        checksum_kind="single", binaries=("grafana", "grafana-server")),
}


def current_platform() -> str:
    os_ = {"Linux": "linux", "Darwin": "darwin"}.get(_platform.system())
    arch = {"x86_64": "amd64", "amd64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        _platform.machine()
    )
    if os_ is None or arch is None:
        return f"{_platform.system().lower()}-{_platform.machine().lower()}"
    return f"{os_}-{arch}"
