"""Find service binaries and check their versions (install dir, then PATH, then system paths)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import BinaryNotFoundError

Source = Literal["configured", "managed", "PATH", "system"]
MIN_VERSIONS = {"prometheus": (2, 30, 0)}
INSTALL_HINTS = {
    "prometheus": "install it with `apt-get install prometheus` (Debian/Ubuntu), put a `prometheus` binary on PATH, "
                  "or pass --prometheus-bin PATH",
}
_SYSTEM_PATHS = {"prometheus": ["/usr/bin/prometheus", "/usr/local/bin/prometheus", "/opt/prometheus/prometheus"]}
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


def _candidates(name: str, install_dir: Path) -> list[tuple[Path, Source]]:
    found: list[tuple[Path, Source]] = []
    svc_dir = install_dir / name
    if svc_dir.is_dir():
        # Newest version directory first: <install>/<name>/<version>/.../<name>
        for p in sorted(svc_dir.glob(f"*/**/{name}"), key=lambda p: p.parts, reverse=True):
            if p.is_file():
                found.append((p, "managed"))
    on_path = shutil.which(name)
    if on_path:
        found.append((Path(on_path), "PATH"))
    for p in _SYSTEM_PATHS.get(name, []):
        found.append((Path(p), "system"))
    return found


def find_binary(name: str, install_dir: Path, explicit: str | Path | None = None) -> Binary:
    """Return the first good-enough binary; raise BinaryNotFoundError saying what was seen and what to do."""
    minimum = MIN_VERSIONS[name]
    candidates: list[tuple[Path, Source]] = [(Path(explicit), "configured")] if explicit else _candidates(name, install_dir)
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
            problems.append(f"{path}: version {'.'.join(map(str, version))} is older than the minimum {'.'.join(map(str, minimum))}")
        else:
            return Binary(name, path, version, source)
    detail = "; ".join(problems) if problems else f"no `{name}` binary in {install_dir / name}, on PATH, or in system locations"
    raise BinaryNotFoundError(f"{name} not found: {detail}", hint=INSTALL_HINTS[name])
