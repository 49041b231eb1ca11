"""Write docs/modules.md: every module of the package with the first paragraph of its docstring, folder by folder.

    python -m tools.module_table          # rewrite docs/modules.md
    python -m tools.module_table --check  # exit 1 when it is not current (a test runs this)

The docstrings are the source: a module's job is said once, where the code is, and this table follows it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rl_insight"
OUT = ROOT / "docs" / "modules.md"
SKIP = {"__main__.py", "_version.py"}  # (an entry point and a version string: nothing to say)
MAX_CHARS = 400


def summary(path: Path) -> str:
    """The first paragraph of the module's docstring on one line, cut after a sentence near MAX_CHARS."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or "(no docstring)"
    text = re.sub(r"\s+", " ", doc.split("\n\n")[0]).strip()
    if len(text) > MAX_CHARS:
        cut = text.rfind(". ", 0, MAX_CHARS)
        text = text[: cut + 1] if cut > 0 else text[:MAX_CHARS].rstrip() + " …"
    return text.replace("|", "\\|")


def render() -> str:
    lines = ["# Modules", "",
             "Generated from each module's docstring by `python -m tools.module_table` (a test checks it",
             "is current); [architecture.md](architecture.md) says how they fit together.", ""]
    folders: dict[Path, list[Path]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in SKIP or "vendor" in path.parts:
            continue
        folders.setdefault(path.parent, []).append(path)
    for folder, paths in sorted(folders.items(), key=lambda kv: str(kv[0].relative_to(ROOT))):
        lines += [f"## `{folder.relative_to(ROOT).as_posix()}/`", "", "| module | what it is |", "|---|---|"]
        for path in sorted(paths, key=lambda p: (p.name != "__init__.py", p.name)):
            lines.append(f"| `{path.name}` | {summary(path)} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/modules.md is not current")
    text = render()
    if ap.parse_args().check:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"{OUT.relative_to(ROOT)} is not current: run python -m tools.module_table")
        return
    OUT.write_text(text)


if __name__ == "__main__":
    main()
