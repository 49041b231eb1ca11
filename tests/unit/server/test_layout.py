"""The server package by role: data flows routes → intake → live → fleet → outbound → runstore → prometheus → http,
and an import never runs back up that order; below the routes nothing imports the composition root (state.py, app.py);
the package root holds only the app, its state, config, security and the entry point."""

from __future__ import annotations

import re
from pathlib import Path

SERVER = Path(__file__).resolve().parents[3] / "rl_insight" / "server"
ORDER = ["routes", "intake", "live", "fleet", "outbound", "runstore", "prometheus", "http", "ui"]
ROOT_MODULES = {"__init__.py", "__main__.py", "app.py", "state.py", "config.py", "security.py"}
_FROM = re.compile(r"^\s*from (\.+)([\w.]*) import (.+)$", re.M)


def _imports(path: Path) -> list[str]:
    """The server folders (or root modules) a module imports, from its relative imports."""
    parts = path.relative_to(SERVER).parts
    out = []
    for dots, name, _ in _FROM.findall(path.read_text()):
        base = ["server", *parts[:-1]]
        base = base[: len(base) - (len(dots) - 1)]
        target = base + (name.split(".") if name else [])
        if target[:1] == ["server"] and len(target) > 1:
            out.append(target[1])
    return out


def test_no_import_runs_back_up_the_house() -> None:
    upward = []
    for path in SERVER.rglob("*.py"):
        parts = path.relative_to(SERVER).parts
        if len(parts) == 1:
            continue
        src = parts[0]
        for dst in _imports(path):
            if dst in ("state", "app") and src != "routes":
                upward.append(f"{path.relative_to(SERVER)} imports the root's {dst}")
            elif dst in ORDER and ORDER.index(dst) < ORDER.index(src):
                upward.append(f"{path.relative_to(SERVER)} ({src}) imports {dst}")
    assert not upward, upward


def test_the_package_root_holds_only_the_app_its_state_config_and_security() -> None:
    loose = {p.name for p in SERVER.glob("*.py")} - ROOT_MODULES
    folders = {p.name for p in SERVER.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert not loose, loose
    assert folders == set(ORDER), folders


def test_all_sql_of_the_run_store_is_in_runstore() -> None:
    package = SERVER.parent
    outside = [
        str(p.relative_to(package))
        for folder in ("server", "export", "cli")
        for p in (package / folder).rglob("*.py")
        if "runstore" not in p.parts and re.search(r"\.execute(many)?\(|\bSELECT\b.*\bFROM\b", p.read_text())
    ]
    assert not outside, outside
