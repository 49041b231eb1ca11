"""The run store's contract runs on both backends: `store_at` is a fresh SQLite file or a fresh PostgreSQL database
(a real server, tests/pg_cluster.py), and every test that takes it runs once on each."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_insight.server.runstore.location import StoreLocation, parse_store, sqlite_location

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> StoreLocation:
    if request.param == "sqlite":
        return sqlite_location(tmp_path / "rs.sqlite")
    return parse_store(request.getfixturevalue("postgres_url"), tmp_path)
