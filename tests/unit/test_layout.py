"""The package's layout: the import contracts in pyproject.toml (import-linter: no cycles at any depth, deferred
imports included; the client, protocol and semantics light; exports apart from the server; the server's layers) hold,
and what an import graph cannot say: a root of at most ten modules, the server's root holding only the app, and all
of the run store's SQL in `server/runstore/`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rl_insight"
SERVER = PACKAGE / "server"
SERVER_ROOT_MODULES = {"__init__.py", "__main__.py", "app.py", "state.py", "config.py", "security.py"}
SERVER_FOLDERS = {"routes", "rooms", "routing", "intake", "control", "live", "fleet", "outbound", "runstore",
                  "prometheus", "http", "ui", "workers", "access"}
MAX_ROOT_MODULES = 10
# upstream RL-Insight's import paths, kept for drop-in users (docs/compat.md): aliases of the client, no code
UPSTREAM_PATHS = {"api.py", "utils.py", "agent_loop.py"}


def test_the_import_contracts_hold(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # what `lint-imports` runs, in process (its command line also reconfigures logging, which would disable the
    # loggers of the tests after this one)
    import importlinter.cli  # noqa: F401 - registers the readers and contract types the use case reads
    from importlinter.application.use_cases import lint_imports

    monkeypatch.chdir(ROOT)
    kept = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    out = capsys.readouterr().out
    assert kept, out[-4000:]


def test_the_package_root_is_small() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in UPSTREAM_PATHS)
    assert len(modules) <= MAX_ROOT_MODULES, modules
    for alias in UPSTREAM_PATHS:  # an alias stays one: imports and names, nothing defined there
        code = (PACKAGE / alias).read_text()
        assert "def " not in code and "class " not in code, alias


def test_the_server_root_holds_only_the_app_its_state_config_and_security() -> None:
    loose = {p.name for p in SERVER.glob("*.py")} - SERVER_ROOT_MODULES
    folders = {p.name for p in SERVER.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert not loose, loose
    assert folders == SERVER_FOLDERS, folders


def test_every_package_folder_is_a_regular_package() -> None:
    """A folder of modules without __init__.py is a namespace package, which the import contracts do not see."""
    bare = [str(d.relative_to(ROOT)) for d in PACKAGE.rglob("*") if d.is_dir() and d.name != "__pycache__"
            and any(d.glob("*.py")) and not (d / "__init__.py").exists()]
    assert not bare, bare


def test_all_sql_of_the_run_store_is_in_runstore() -> None:
    outside = [
        str(p.relative_to(PACKAGE))
        for folder in ("server", "export", "cli")
        for p in (PACKAGE / folder).rglob("*.py")
        if "runstore" not in p.parts and re.search(r"\.execute(many)?\(|\bSELECT\b.*\bFROM\b", p.read_text())
    ]
    assert not outside, outside


@pytest.mark.slow  # (over 2 s: the full suite runs it)
def test_every_import_of_our_own_modules_names_one_that_exists() -> None:
    """Every `import`/`from … import` of an rl_insight module, deferred ones inside functions included, names a module
    that exists (mypy is told to ignore missing imports, for the optional extras, so a moved module's stale relative
    import — `from .prometheus.api` left in server/prometheus/ — was a 500 at run time, issue 65)."""
    import ast
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    missing = []
    for path in sorted((root / "rl_insight").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names = [module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] != "rl_insight":
                    continue
                try:
                    found = importlib.util.find_spec(name) is not None
                except ModuleNotFoundError:  # (a parent package that does not exist)
                    found = False
                if not found:
                    missing.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    assert missing == []


def test_routes_hold_no_raw_connection_of_the_run_store() -> None:
    """Issue 65: a route reads through a kind's reader (`st.reader.runs.get(...)`, `reader.samples.series(...)`),
    never a connection of its own: a store of another engine for one kind is then one package behind that kind."""
    server = Path(__file__).resolve().parents[2] / "rl_insight" / "server"
    modules = sorted([*(server / "routes").glob("*.py"), *(server / "rooms").glob("*/routes.py")])
    holding = [f"{p.name}:{n}" for p in modules
               for n, line in enumerate(p.read_text().splitlines(), 1) if ".conn()" in line]
    assert holding == []


def test_every_room_is_in_the_rooms_contract_and_imports_another_only_where_it_comes_after_it() -> None:
    """The import contract that keeps rooms apart names every folder of server/rooms/ (a new room is in it), and each
    import it lets through goes from a room to one its Room's `after` names."""
    import tomllib

    from rl_insight.server.rooms.house import discover

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (rooms,) = [c for c in contracts if c["type"] == "independence" and any(".rooms." in m for m in c["modules"])]
    found = {room.name: room for room in discover()}
    assert sorted(rooms["modules"]) == sorted(f"rl_insight.server.rooms.{name}" for name in found)
    for allowed in rooms.get("ignore_imports", []):
        source, target = (side.strip().split(".")[3] for side in allowed.split("->"))
        assert target in found[source].after, allowed
