"""A NUL byte in a path or query parameter (issue 49, item 11): PostgreSQL refuses one inside a query, which was a 500
(or a reset connection) on a PostgreSQL store; it is a 400 naming the problem on either store, before any route."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import start_server

PATHS = ["/api/v1/runs/1/spans/%00", "/api/v1/runs/1/trajectories/%00", "/api/v1/runs/1/series?name=%00",
         "/api/v1/runs?project=a%00b", "/api/v1/runs/1/metrics%00"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_nul_in_the_path_or_query_is_a_400_on_every_store(backend: str, tmp_path: Path,
                                                           request: pytest.FixtureRequest) -> None:
    store = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    srv = start_server(tmp_path, store=store)
    try:
        for path in PATHS:
            r = httpx.get(srv.url + path)
            assert r.status_code == 400 and "NUL" in r.json()["detail"], (path, r.status_code, r.text[:200])
        assert httpx.get(srv.url + "/api/v1/runs").status_code == 200  # and the server goes on
    finally:
        srv.stop()
