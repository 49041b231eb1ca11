"""The built-in UI's ES modules (server/ui/static/*.js) import one another without a circle: every module can be read
(and loaded) after the ones it imports. A circle (api.js imported main.js, which imports api.js, for one call on a
401) makes which module's top level runs first depend on who was imported first."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[3] / "rl_insight" / "server" / "ui" / "static"
IMPORT = re.compile(r'^\s*import\s+(?:[^"\']*\sfrom\s+)?["\']\./([\w.-]+\.js)["\']', re.M)


def _imports() -> dict[str, set[str]]:
    return {p.name: set(IMPORT.findall(p.read_text())) for p in STATIC.glob("*.js")}


def test_every_import_names_a_module_that_exists() -> None:
    graph = _imports()
    assert graph and all(dep in graph for deps in graph.values() for dep in deps), graph


def test_the_ui_modules_import_one_another_without_a_circle() -> None:
    graph = _imports()
    assert graph["main.js"] and "api.js" in graph["main.js"]  # (the parser reads what the entry imports)
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> None:
        if name in path:
            raise AssertionError("import circle: " + " → ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for dep in sorted(graph[name]):
            visit(dep)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
