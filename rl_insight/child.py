"""How rl-insight starts a Python process of its own: `python -m <module>` of this very package.

Every child of ours goes through `python_command` and `python_env`: the ingest server under the supervisor, a
detached `server start`, the demo's stack, the run store's writer and the insight rounds (server/workers/
child_process.py adds their pipes), a profile's analysis (analysis/isolated.py adds its limits). Invariant: the
child runs with the interpreter running now and this package first on PYTHONPATH, never a directory of the same
name where it was started (PYTHONSAFEPATH, Python 3.11+), so it runs the same code as its parent, also from a
checkout that is not installed. External binaries (Prometheus, Tempo, Grafana) are started by
services/process.py. Stdlib only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping


def package_root() -> str:
    """The directory holding the `rl_insight` package this process runs."""
    return str(Path(__file__).resolve().parent.parent)


def python_command(module: str, *args: str) -> list[str]:
    """argv running `module` of this package with this interpreter."""
    return [sys.executable, "-m", module, *args]


def python_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`base` (default: this process's environment) with `extra` set and this package first on PYTHONPATH (and no
    working directory on the path)."""
    env = {**(os.environ if base is None else base), "PYTHONSAFEPATH": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH")) if p)
    return env
