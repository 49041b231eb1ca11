"""Write the run store's schema as each released version created it, for the migration tests.

For every schema version, the code of the last commit before the next version is checked out (a git worktree), a
fresh store is created with it, and its schema is dumped: SQLite's `sqlite_master` statements, and on PostgreSQL
(version 5 on) `pg_dump --schema-only`. The tests then create a store from each dump, open it with today's code and
compare what the migrations made with a fresh store of today's version.

    python -m tools.store_schemas   # rewrites tests/unit/server/runstore/backend/schemas/

Run it when a schema version is released (the new version's dump is today's fresh store).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "unit" / "server" / "runstore" / "backend" / "schemas"
# where the schema's version was written, newest first (it moved into backend/ at version 11)
SCHEMA_FILES = ("rl_insight/server/runstore/backend/schema.py", "rl_insight/server/runstore/schema.py")
FIRST_POSTGRES_VERSION = 5

# (a release's own way of opening a store: open_backend from schema version 11 on, schema.connect before)
_OPEN = """
try:
    from rl_insight.server.runstore.backend import open_backend
    connect = lambda where: open_backend(where).connect()
except ImportError:
    from rl_insight.server.runstore.schema import connect
"""
_SQLITE_DUMP = _OPEN + """
import sqlite3, sys
from pathlib import Path
path = Path(sys.argv[1])
connect(path).close()
c = sqlite3.connect(path)
for (sql,) in c.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"):
    print(sql.strip() + ";")
"""

_POSTGRES_CREATE = _OPEN + """
import sys
from pathlib import Path
try:
    from rl_insight.server.runstore.backend.location import parse_store
except ImportError:
    from rl_insight.server.runstore.location import parse_store
connect(parse_store(sys.argv[1], Path("."))).close()
"""


def release_commits() -> dict[int, str]:
    """Version -> the commit before the one that moved to the next version (the newest version: HEAD)."""
    log = subprocess.run(["git", "log", "--format=%H", "--", *SCHEMA_FILES], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    first: dict[int, str] = {}  # version -> the oldest commit that says it
    for commit in log:  # (newest first)
        version = next((v for v in map(_version_in, (_show(commit, f) for f in SCHEMA_FILES)) if v is not None), None)
        if version is not None:
            first[version] = commit
    newest = max(first)
    found = {v: f"{first[v + 1]}^" for v in first if v + 1 in first}
    found[newest] = "HEAD"
    return found


def _show(commit: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True).stdout


def _version_in(text: str) -> int | None:
    at = text.find("\nSCHEMA_VERSION =")
    if at < 0:
        return None
    digits = "".join(ch if ch.isdigit() else " " for ch in text[at:at + 40]).split()
    return int(digits[0]) if digits else None


def _run_old(worktree: Path, code: str, *args: str, env: dict[str, str] | None = None) -> str:
    environ = {**os.environ, "PYTHONPATH": str(worktree), **(env or {})}
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=worktree, capture_output=True, text=True,
                       env=environ, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"at {worktree.name}: {r.stderr[-2000:]}")
    return r.stdout


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from tests.pg_cluster import PASSWORD, PostgresCluster

    commits = release_commits()
    (OUT / "sqlite").mkdir(parents=True, exist_ok=True)
    (OUT / "postgres").mkdir(parents=True, exist_ok=True)
    cluster = PostgresCluster()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for version, commit in sorted(commits.items()):
                tree = Path(tmp) / f"v{version}"
                subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                               capture_output=True)
                try:
                    sha = subprocess.run(["git", "rev-parse", "--short=10", commit], cwd=ROOT, capture_output=True,
                                         text=True, check=True).stdout.strip()
                    header = f"-- run store schema version {version}, as rl-insight {sha} created it\n"
                    sql = _run_old(tree, _SQLITE_DUMP, str(Path(tmp) / f"v{version}.sqlite"))
                    (OUT / "sqlite" / f"v{version}.sql").write_text(header + sql)
                    if version >= FIRST_POSTGRES_VERSION:
                        db = cluster.create_database(f"v{version}_")
                        _run_old(tree, _POSTGRES_CREATE, cluster.url(db),
                                 env={"RL_INSIGHT_STORE_PASSWORD": PASSWORD})
                        dump = subprocess.run(
                            ["pg_dump", "--schema-only", "--no-owner", "--no-privileges", "--no-comments",
                             "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "rli", db],
                            capture_output=True, text=True, check=True, env={**os.environ, "PGPASSWORD": PASSWORD},
                        ).stdout
                        body = "\n".join(line for line in dump.splitlines()
                                         if line.strip() and not line.startswith("--")
                                         and not line.startswith("SET ") and "set_config" not in line
                                         and not line.startswith("\\"))
                        (OUT / "postgres" / f"v{version}.sql").write_text(header + body + "\n")
                    print(f"version {version}: {sha}")
                finally:
                    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                                   capture_output=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
