"""Find service binaries and check their versions (install dir, then PATH, then system paths)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import BinaryNotFoundError
from .catalog import CATALOG

Source = Literal["configured", "managed", "PATH", "system"]
MIN_VERSIONS = {name: spec.min_version for name, spec in CATALOG.items()}
MAX_MAJOR = {name: spec.max_major for name, spec in CATALOG.items()}
INSTALL_HINTS = {
    "prometheus": "run `rl-insight server install`, `apt-get install prometheus` (Debian/Ubuntu), put a `prometheus` "
                  "binary on PATH, or pass --prometheus-bin PATH",
    "alertmanager": "run `rl-insight server install`, `apt-get install prometheus-alertmanager` (Debian/Ubuntu), "
                    "or pass --alertmanager-bin PATH",
    "tempo": "run `rl-insight server install` (or `--local-archive` with a bundle on clusters without internet), "
             "or pass --tempo-bin PATH",
    "grafana": "run `rl-insight server install` (or `--local-archive` with a bundle), install Grafana from "
               "apt.grafana.com, or pass --grafana-bin PATH",
}
_PATH_NAMES = {"prometheus": ["prometheus"], "alertmanager": ["alertmanager", "prometheus-alertmanager"],
               "tempo": ["tempo"], "grafana": ["grafana", "grafana-server"]}
_SYSTEM_PATHS = {
    "prometheus": ["/usr/bin/prometheus", "/usr/local/bin/prometheus", "/opt/prometheus/prometheus"],
    "alertmanager": ["/usr/bin/prometheus-alertmanager", "/usr/local/bin/alertmanager",
                     "/opt/alertmanager/alertmanager"],
    "tempo": ["/usr/bin/tempo", "/usr/local/bin/tempo", "/opt/tempo/tempo"],
    "grafana": [
        "/usr/share/grafana/bin/grafana",
        "/usr/sbin/grafana-server",
        "/usr/local/bin/grafana",
        "/opt/grafana/bin/grafana",
    ],
}
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Binary:
    name: str
    path: Path
    version: tuple[int, int, int]
    source: Source

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))


def binary_version(path: Path) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION.search((out.stdout or "") + (out.stderr or ""))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _managed(name: str, install_dir: Path) -> list[Path]:
    """Binaries under <install>/<name>/<version>/, the manifest's first, then newest version first."""
    out: list[Path] = []
    try:
        import json

        recorded = json.loads((install_dir / "manifest.json").read_text())["services"][name]["path"]
        out.append(Path(recorded))
    except (OSError, ValueError, KeyError):
        pass
    svc_dir = install_dir / name
    if svc_dir.is_dir():
        for exe in _PATH_NAMES[name]:
            out += sorted(
                (p for p in svc_dir.glob(f"[!.]*/**/{exe}") if p.is_file()), key=lambda p: p.parts, reverse=True
            )
    return out


def _candidates(name: str, install_dir: Path) -> list[tuple[Path, Source]]:
    found: list[tuple[Path, Source]] = [(p, "managed") for p in _managed(name, install_dir)]
    for exe in _PATH_NAMES[name]:
        on_path = shutil.which(exe)
        if on_path:
            found.append((Path(on_path), "PATH"))
    for p in _SYSTEM_PATHS.get(name, []):
        found.append((Path(p), "system"))
    return found


def find_binary(name: str, install_dir: Path, explicit: str | Path | None = None) -> Binary:
    """Return the first good-enough binary; raise BinaryNotFoundError saying what was seen and what to do."""
    minimum = MIN_VERSIONS[name]
    candidates: list[tuple[Path, Source]] = (
        [(Path(explicit), "configured")] if explicit else _candidates(name, install_dir)
    )
    problems: list[str] = []
    seen: set[Path] = set()
    for path, source in candidates:
        if path in seen:
            continue
        seen.add(path)
        if not path.is_file():
            if source == "configured":
                problems.append(f"{path} does not exist")
            continue
        version = binary_version(path)
        if version is None:
            problems.append(f"{path}: could not read a version from `--version`")
        elif version < minimum:
            problems.append(f"{path}: version {'.'.join(map(str, version))} is older than the minimum "
                            f"{'.'.join(map(str, minimum))}")
        elif MAX_MAJOR.get(name) is not None and version[0] > MAX_MAJOR[name]:  # type: ignore[operator]  # not None: checked in the same condition
            problems.append(f"{path}: {name} {'.'.join(map(str, version))} is unsupported (its config layout changed; "
                            f"rl-insight configures {name} {MAX_MAJOR[name]}.x)")
        else:
            return Binary(name, path, version, source)
    detail = (
        "; ".join(problems)
        if problems
        else f"no `{name}` binary in {install_dir / name}, on PATH, or in system locations"
    )
    raise BinaryNotFoundError(f"{name} not found: {detail}", hint=INSTALL_HINTS[name])
