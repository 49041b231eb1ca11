"""A NUL byte in a path or query parameter (issue 49, item 11): PostgreSQL refuses one inside a query, which was a 500
(or a reset connection) on a PostgreSQL store. Text is stored with NUL as U+FFFD on both stores, and a read's text
arguments are cleaned the same way, so either store answers a NUL alike, and never with a 5xx."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.conftest import start_server

PATHS = ["/api/v1/runs/1/spans/%00", "/api/v1/runs/1/trajectories/%00", "/api/v1/runs/1/series?name=%00",
         "/api/v1/runs?project=a%00b", "/api/v1/runs/1/series?name=loss%00x", "/api/v1/runs/1/metrics"]


def _answers(tmp_path: Path, store: str | None) -> list[tuple[int, int]]:
    srv = start_server(tmp_path, store=store)
    try:
        now = time.time()  # a run whose metric name held a NUL when sent (stored with U+FFFD)
        assert httpx.post(srv.url + "/api/v1/ingest", json={
            "v": 1, "client": {"id": "c", "project": "p", "experiment_name": "e"},
            "series": [{"k": "g", "n": "loss\x00x"}], "samples": [[0, now, 1, 0.5]]}).status_code == 200
        out = []
        for path in PATHS:
            r = httpx.get(srv.url + path)
            points = len(r.json().get("series", [{}])[0].get("points", [])) if "series?" in path and r.is_success \
                and r.json().get("series") else 0
            out.append((r.status_code, points))
        return out
    finally:
        srv.stop()


def test_a_nul_in_the_path_or_query_is_answered_alike_on_both_stores_never_5xx(
        tmp_path: Path, postgres_url: str) -> None:
    on_sqlite = _answers(tmp_path / "sqlite", None)
    on_postgres = _answers(tmp_path / "pg", postgres_url)
    assert all(status < 500 for status, _ in on_sqlite), on_sqlite
    assert on_postgres == on_sqlite
