"""The same job into a SQLite store and a PostgreSQL store (issue 24): `rl-insight demo --agent --moe` sends through a
tee that hands every request, byte for byte, to one server on each backend. Afterwards every view the UI and the
CLI read — runs, metrics, series, lanes, the timeline, span detail, insights, per-step statistics, the critical
path and the explanation, trajectories, MoE, CSV and Perfetto exports, retention — answers the same on both."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any, Iterator

import httpx
import pytest

from tests.conftest import RunningServer, start_server, wait_until
from tests.forwarding import Forwarder

TOKEN = "backends-token"
H = {"Authorization": f"Bearer {TOKEN}"}
# what depends on when each server wrote (its own clock), not on what it stored
VOLATILE = {"last_seen", "first_seen", "finished_at", "status", "age_s", "seen_s_ago", "generated_at", "now",
            "store", "live", "duration_s",
            # the timeline's default window: the run's first and last seen by each server (~10 ms apart behind the
            # tee, which at 9 significant digits of a time in ns can round apart)
            "from_ns", "to_ns"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, postgres_cluster: Any) -> Iterator[tuple[RunningServer, ...]]:
    from tests.pg_cluster import PASSWORD

    mp = pytest.MonkeyPatch()
    mp.setenv("RL_INSIGHT_STORE_PASSWORD", PASSWORD)
    url = postgres_cluster.url(postgres_cluster.create_database("backends"))
    lite = start_server(tmp_path_factory.mktemp("lite"), token=TOKEN, insights_interval_s=1.0)
    pg = start_server(tmp_path_factory.mktemp("pg"), token=TOKEN, insights_interval_s=1.0, store=url)
    tee = Forwarder(lite.url, pg.url)  # every request to both; the client hears SQLite's answer
    try:
        r = subprocess.run([sys.executable, "-m", "rl_insight", "demo", "--server-url", tee.url, "--token", TOKEN,
                            "--steps", "6", "--step-seconds", "0.5", "--replicas", "3", "--ranks", "2", "--agent",
                            "--moe", "--experiment-name", "both", "--seed", "7"],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        refused = [s for s in tee.statuses if s[1] != s[2]]
        assert not refused, refused  # every request was answered alike
        for srv in (lite, pg):
            srv.app.state.st.writer.flush(10)
        # the per-step statistics both servers compute in the background, for every step
        for srv in (lite, pg):
            wait_until(lambda srv=srv: len(_get(srv, "/api/v1/runs/1/insights", window_s=3600)["steps"]) >= 5,
                       timeout=30, what="step statistics")
        yield lite, pg
    finally:
        tee.close()
        lite.stop()
        pg.stop()
        mp.undo()


def _get(srv: RunningServer, path: str, **params: Any) -> Any:
    r = httpx.get(srv.url + path, params=params, headers=H, timeout=30)
    assert r.status_code == 200, (path, r.text)
    return r.json() if "json" in r.headers.get("content-type", "") else r.text


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV export's rows; of the insight rows (rl_insight/...: what each server computed, when), the time is left
    out, and the first and last steps' are left out: each server summed the last up when its own clock said the run
    went quiet, and the first begins with the run — its first batch as each server heard it (behind the tee, one
    later than the other) when no state began before it (queries.step_windows_of)."""
    rows = [line.split(",") for line in text.splitlines()]
    steps = [int(r[2]) for r in rows[1:] if r[2].isdigit()]
    ends = {str(min(steps)), str(max(steps))}
    return [r[:3] + r[4:] if r[0].startswith("rl_insight/") else r for r in rows
            if not (r[0].startswith("rl_insight/") and r[2] in ends)]


def _without_first_step(x: Any) -> Any:
    """`x` without the first step's window where it is drawn or summed (see `_csv_rows`): its slice in a Perfetto
    trace, its entry in the insights' steps."""
    if isinstance(x, dict) and "traceEvents" in x:
        first = min(e["args"]["step"] for e in x["traceEvents"] if e.get("cat") == "step")
        return {**x, "traceEvents": [e for e in x["traceEvents"]
                                     if not (e.get("cat") == "step" and e["args"]["step"] == first)]}
    if isinstance(x, list) and x and all(isinstance(s, dict) and "step" in s for s in x):
        first = min(s["step"] for s in x)
        return [s for s in x if s["step"] != first]
    return x


def _assert_close(a: Any, b: Any, at: str = "") -> None:
    """The same structure, and numbers equal to a millionth: sums of seconds over spans come out of the two backends'
    rows in different orders, which moved one 9th digit once (CI: training_s 1.58969879 vs 1.5896988)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), at
        for k in a:
            _assert_close(a[k], b[k], f"{at}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), at
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_close(x, y, f"{at}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert b == pytest.approx(a, rel=1e-6, abs=1e-6), at
    else:
        assert a == b, at


def _same(x: Any) -> Any:
    """`x` without what depends on each server's clock, floats to 9 significant digits, ints and whole floats alike."""
    if isinstance(x, dict):
        return {k: _same(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_same(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (int, float)):
        return float(f"{x:.9g}") if math.isfinite(x) else str(x)
    return x


VIEWS = [
    ("/api/v1/runs", {}),
    ("/api/v1/runs/1", {"config": True}),
    ("/api/v1/runs/1/metrics", {}),
    ("/api/v1/runs/1/series", {"name": "critic_score_mean"}),
    ("/api/v1/runs/1/series", {"name": "critic_score_mean", "agg": "lttb", "points": 4}),
    ("/api/v1/runs/1/series", {"name": "train_step", "x": "time", "points": 8}),
    ("/api/v1/series", {"name": "critic_score_mean", "runs": "1"}),
    ("/api/v1/runs/1/lanes", {"counts": True}),
    ("/api/v1/runs/1/spans", {}),
    ("/api/v1/runs/1/moe", {}),
    ("/api/v1/runs/1/trajectories/steps", {}),
    ("/api/v1/runs/1/trajectories", {"sort": "duration", "desc": True, "limit": 50}),
    ("/api/v1/runs/1/trajectories/stats", {}),
    ("/api/v1/runs/1/trajectories", {"failed": True}),
    ("/api/v1/runs/1/critical-path", {"step": 4}),
    ("/api/v1/runs/1/explain", {"steps": "2-6"}),
    ("/api/v1/runs/diff", {"a": 1, "b": 1, "a_steps": "2-3", "b_steps": "4-5"}),
    ("/api/v1/runs/1/export.csv", {}),
    ("/api/v1/runs/1/trace.json", {}),
]


@pytest.mark.parametrize("path,params", VIEWS, ids=[p + "?" + "&".join(f"{k}={v}" for k, v in q.items())
                                                     for p, q in VIEWS])
def test_every_view_answers_the_same_on_both_backends(pair: tuple[RunningServer, ...], path: str,
                                                      params: dict[str, Any]) -> None:
    lite, pg = pair
    a, b = _get(lite, path, **params), _get(pg, path, **params)
    assert a, f"{path}: nothing to compare"
    if isinstance(a, str):  # CSV: the insight rows' times are when each server computed them
        assert _csv_rows(a) == _csv_rows(b)
    else:
        assert _same(_without_first_step(a)) == _same(_without_first_step(b))


def test_span_detail_insights_and_one_trajectory_answer_the_same(pair: tuple[RunningServer, ...]) -> None:
    lite, pg = pair
    span_id = next(s[6] for s in _get(lite, "/api/v1/runs/1/spans")["spans"] if s[6])
    assert _same(_get(lite, f"/api/v1/runs/1/spans/{span_id}")) == _same(_get(pg, f"/api/v1/runs/1/spans/{span_id}"))
    # the timeline merged to a view's width, over one window (the default one ends at each server's last_seen)
    whole = _get(lite, "/api/v1/runs/1/spans")
    window = {"from_ns": whole["from_ns"], "to_ns": whole["to_ns"], "px": 200}
    assert _same(_get(lite, "/api/v1/runs/1/spans", **window)) == _same(_get(pg, "/api/v1/runs/1/spans", **window))
    steps = [s["step"] for s in _get(lite, "/api/v1/runs/1/insights", window_s=3600)["steps"]]
    a = _get(lite, "/api/v1/runs/1/insights", window_s=3600, max_steps=50)
    b = _get(pg, "/api/v1/runs/1/insights", window_s=3600, max_steps=50)
    assert steps
    _assert_close(_same(_without_first_step(a["steps"])), _same(_without_first_step(b["steps"])))
    _assert_close(_same(a["overlap"]), _same(b["overlap"]))
    traj = _get(lite, "/api/v1/runs/1/trajectories", limit=1)["trajectories"][0]["id"]
    assert _same(_get(lite, f"/api/v1/runs/1/trajectories/{traj}")) == _same(
        _get(pg, f"/api/v1/runs/1/trajectories/{traj}"))


def test_the_postgres_store_says_what_it_is_and_never_its_password(pair: tuple[RunningServer, ...]) -> None:
    _, pg = pair
    from tests.pg_cluster import PASSWORD

    health = httpx.get(pg.url + "/healthz").json()
    assert health["store"]["backend"] == "postgresql" and health["store"]["schema_version"] >= 5
    assert health["store"]["path"].startswith("postgresql://") and PASSWORD not in str(health)
    assert PASSWORD not in pg.config.to_json()

