"""The run store's contract runs on both backends: `store_at` is a fresh SQLite file or a fresh PostgreSQL database
(a real server, tests/pg_cluster.py), and every test that takes it runs once on each."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from rl_insight.server.runstore.backend.location import StoreLocation, parse_store, sqlite_location

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> StoreLocation:
    if request.param == "sqlite":
        return sqlite_location(tmp_path / "rs.sqlite")
    return parse_store(request.getfixturevalue("postgres_url"), tmp_path)


@dataclass(frozen=True)
class ForeignFile:
    """A SQLite file of someone else's (a `customers` table) and its digest, to show a refusal left it untouched."""

    path: Path
    sha256: str

    def untouched(self) -> bool:
        return hashlib.sha256(self.path.read_bytes()).hexdigest() == self.sha256


@pytest.fixture
def foreign_sqlite(tmp_path: Path) -> ForeignFile:
    path = tmp_path / "foreign.sqlite"
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE customers (id INTEGER)")
    c.commit()
    c.close()
    return ForeignFile(path, hashlib.sha256(path.read_bytes()).hexdigest())
