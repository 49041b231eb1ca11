"""Every route of `/openapi.json` × every role × its own project and another's (issue 54), generated from the schema:
each route's access is declared where it is registered (server/access/declared.py) and published there
(`x-rl-insight-access`), which this test reads (issue 65); the app refuses a route that declares nothing.

For each route the declaration says who may call it (`who`) and how a project reaches it (`scope`, its reach):
  named    — a path, query or body names a run, request or rule: another project's is 404 (as if it did not exist),
             where the admin's same request finds it;
  listed   — a listing: filtered to the token's projects;
  global   — no project in it (catalogue, status);
  written  — data a job sends naming a project: another project's refused with 403, nothing stored;
  partial  — a batch of items (ingest, OTLP): another project's items refused one by one (200, counted);
  open     — no token (probes, signing in);
and who `scrape` — `/metrics`, every run's series, open unless the server is given a --metrics-token.
Every 2xx answer a token held to project `own` gets must not name the other project or its experiment; after every
scoped role has tried everything, the other project's things are as they were.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from rl_insight.semantics import panels as catalogue
from tests.conftest import start_server
from tests.unit.server.routes.test_read_results import _steps_of_a_run

ADMIN = "matrix-admin-token"
OWN, OTHER = "own", "zz-other-secret"
EXP = {OWN: "exp-own", OTHER: "exp-zz-secret"}
SPAN_ID = "0000000100000000"  # a span every seeded run has (test_read_results._steps_of_a_run)


@dataclass(frozen=True)
class Rule:
    who: str  # open, scrape, read, operate, ingest, admin, server (server/access/declared.py)
    scope: str  # the declared reach: named, listed, global, written, partial, open
    fake: bool = False  # names something that does not exist even for the admin (the 404 proves nothing)
    names: str | None = None  # the path parameter naming a thing of a project the declaration resolves


READ, OPERATE, INGEST = "read", "operate", "ingest"
# Routes whose request here names something that does not exist even for the admin (the 404 proves nothing): the
# matrix's data, not a route's access (that is declared where the route is registered).
FAKE = {("GET", "/api/v1/profiles/{profile_id}/files/{name}"),  # no trace uploaded
        ("GET", "/api/v1/profiles/{profile_id}/report/{name}"),
        ("DELETE", "/api/v1/alerting/silences/{silence_id}"),
        ("GET", "/api/v1/runs/{run_id}/trajectories/{traj_id}")}
EVERYONE = {"viewer", "operator", "ingest", "admin"}
MAY = {"scrape": EVERYONE, "open": EVERYONE, READ: {"viewer", "operator", "admin"},
       OPERATE: {"operator", "admin"}, INGEST: {"ingest", "admin"}, "admin": {"admin"}, "server": {"admin"}}


def _spec() -> dict[str, Any]:
    import tempfile

    from rl_insight.server.app import create_app
    from rl_insight.server.config import ServerConfig
    from tests.conftest import IN_PROCESS

    with tempfile.TemporaryDirectory() as d:
        return create_app(ServerConfig(port=1, data_dir=d, token="x", **IN_PROCESS)).openapi()


@functools.lru_cache(maxsize=1)
def _rules() -> dict[tuple[str, str], Rule]:
    """Every route's declaration, as /openapi.json publishes it (`x-rl-insight-access`)."""
    return {(m.upper(), path): Rule(op["x-rl-insight-access"]["who"], op["x-rl-insight-access"]["reach"],
                                    fake=(m.upper(), path) in FAKE, names=op["x-rl-insight-access"].get("names"))
            for path, ops in _spec()["paths"].items() for m, op in ops.items()}




def test_every_route_declares_who_may_call_it_and_how_a_project_reaches_it() -> None:
    """A route registered without a declaration is refused when the app is built (issue 65: the table lived in this
    test); what is declared keeps its shape: changes are never open or read-only (signing in aside), token and audit
    routes are the admin's, a route that names a run in its path reaches it by name."""
    from fastapi import APIRouter, FastAPI

    from rl_insight.server.access.declared import publish

    app = FastAPI()
    bare = APIRouter()

    @bare.get("/api/v1/undeclared")
    def undeclared() -> dict[str, str]:
        return {}

    app.include_router(bare)
    try:
        publish(app.routes)
    except RuntimeError as exc:
        assert "GET /api/v1/undeclared" in str(exc)
    else:
        raise AssertionError("a route without a declaration was published")
    for (method, path), rule in _rules().items():
        if method != "GET" and (method, path) != ("POST", "/api/v1/login"):
            assert rule.who in ("operate", "ingest", "admin", "server"), (method, path, rule)
        if path.startswith(("/api/v1/tokens", "/api/v1/audit")):
            assert rule.who == "admin", (method, path, rule)
        if "{run_id}" in path:
            assert rule.scope == "named", (method, path, rule)
        # a thing of a project its path names besides a run is resolved by the declaration, before the handler
        if "{profile_id}" in path:
            assert rule.names == "profile_id", (method, path, rule)
        if path.startswith("/api/v1/stacks/{snapshot_id}"):
            assert rule.names == "snapshot_id", (method, path, rule)
        if path.startswith(("/api/v1/alerting/receivers/{name}", "/api/v1/alerting/rules/{name}")) and method != "GET":
            assert rule.names == "name", (method, path, rule)
    assert set(FAKE) <= set(_rules()), "fake entries of routes that no longer exist"
    from rl_insight.server.access.declared import Named, declare

    try:  # a listing names no thing of a project in its path
        declare(None, "read", "listed", Named("profile_id", lambda _: None))  # type: ignore[arg-type]
    except ValueError as exc:
        assert "named or written" in str(exc)
    else:
        raise AssertionError("a listing was given a named thing")


@dataclass
class World:
    """What the seeded server holds for each project: a run, a profile request, a stack snapshot."""

    run: dict[str, int]
    profile: dict[str, str]
    snapshot: dict[str, str]


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _otlp_resource(project: str) -> dict[str, Any]:
    return {"attributes": [{"key": "project", "value": {"stringValue": project}},
                           {"key": "experiment_name", "value": {"stringValue": EXP[project]}}]}


def _request(method: str, path: str, side: str, world: World, tag: str) -> dict[str, Any]:
    """The request a rule's route gets for `side`'s project: path parameters, query and body filled in."""
    p, e, run = side, EXP[side], world.run[side]
    names = {"run_id": str(run), "profile_id": world.profile[side], "snapshot_id": world.snapshot[side],
             "span_id": SPAN_ID, "traj_id": "no-such-trajectory", "silence_id": "0123abcd",
             "section_id": catalogue.SECTIONS[0].id}
    if "/profiles/" in path:
        names["name"] = "trace.json.gz" if "/report/" not in path else "summary.json"
    elif "/receivers/" in path or "/deliver/" in path:
        names["name"] = f"recv-{side}"
    elif "/rules/" in path:
        names["name"] = f"rule_{side.replace('-', '_')}"
    elif "/tokens/" in path:
        names["name"] = "victim"
    url = path.format(**names)
    now = time.time()
    ns = str(time.time_ns())
    query: dict[str, Any] = {
        "/api/v1/targets": {"project": p, "experiment_name": e} if method == "DELETE" else {},
        "/api/v1/experiments/targets": {"project": p, "experiment_name": e},
        "/api/v1/profiles/{profile_id}/upload/{name}": {"offset": 0, "total": 10},
        "/api/v1/runs/diff": {"a": world.run[OWN], "b": run},
        "/api/v1/series": {"name": "training_global_step", "runs": str(run)},
        "/api/v1/alerting/silences": {"run_id": run} if method == "GET" else {},
    }.get(path, {})
    bodies: dict[str, Any] = {
        "/api/v1/ingest": {"v": 1, "client": {"id": f"m-{tag}", "project": p, "experiment_name": e},
                           "series": [{"k": "g", "n": f"written_by_{tag}", "l": {"project": p, "experiment_name": e}}],
                           "samples": [[0, now, 1, 1.0]]},
        "/v1/traces": {"resourceSpans": [{"resource": _otlp_resource(p), "scopeSpans": [{"spans": [{
            "traceId": "0102030405060708090a0b0c0d0e0f10", "spanId": "0102030405060708", "name": f"otlp_{tag}",
            "startTimeUnixNano": ns, "endTimeUnixNano": ns}]}]}]},
        "/v1/metrics": {"resourceMetrics": [{"resource": _otlp_resource(p), "scopeMetrics": [{"metrics": [{
            "name": f"otlp_{tag}", "gauge": {"dataPoints": [{"asDouble": 1.0, "timeUnixNano": ns}]}}]}]}]},
        "/api/v1/prometheus/targets": {"job_name": "matrix", "targets": ["127.0.0.1:9"], "project": p,
                                       "experiment_name": e},
        "/api/v1/experiments/archive": {"project": p, "experiment_name": e},
        "/api/v1/experiments/restore": {"project": p, "experiment_name": e},
        "/api/v1/login": {"token": ADMIN},
        "/api/v1/profiles": {"run_id": run, "steps": "100"},
        "/api/v1/profiles/{profile_id}/status": {},
        "/api/v1/alerting/receivers": {"name": f"recv-{side}", "kind": "webhook", "project": p,
                                       "url": "http://127.0.0.1:9/hook"},
        "/api/v1/alerting/silences": {"run_id": run, "duration_s": 600},
        "/api/v1/alerting/rules": {"name": f"rule_{side.replace('-', '_')}", "metric": "training/global_step",
                                   "kind": "threshold", "op": "below", "value": 0, "for_steps": 1, "run_id": run},
        "/api/v1/tokens": {"name": f"made-{tag}", "role": "viewer"},
        "/api/v1/runs/{run_id}/stacks": {"deadline_s": 1},
        "/api/v1/stacks/{snapshot_id}/report": {},
    }
    out: dict[str, Any] = {"method": method, "url": url, "params": query}
    if path.endswith("/upload/{name}"):
        out["content"], out["headers"] = b"x", {"content-type": "application/octet-stream"}
    elif method == "POST":
        out["json"] = bodies.get(path, {})
    return out


def _spellings(run_id: int) -> list[str]:
    """Other ways to write a run id, as they go on the wire, that a lax int parser reads as that id (`2_0` as 20):
    each must be refused, never read as the run."""
    from urllib.parse import quote

    n = str(run_id)
    wide = quote("".join(chr(0xFF10 + int(d)) for d in n))  # fullwidth digits: str.isdigit() and int() take them
    arabic = quote("".join(chr(0x0660 + int(d)) for d in n))
    return ["+" + n, n + ".0", "%2B" + n, n + "_0", "0" + n, "%20" + n, n + "%20", "%09" + n, hex(run_id), n + "e0",
            wide, arabic]


def _spelled(url: str, key: tuple[str, str], world: World, spelling: str, token: str) -> httpx.Response | None:
    """`key`'s request for the other project with its run id written `spelling` (None: the route names no run)."""
    method, path = key
    if "{run_id}" not in path and path not in ("/api/v1/runs/diff", "/api/v1/series"):
        return None
    req = _request(method, path, OTHER, world, "spelled")
    target = url + req["url"].replace(f"/runs/{world.run[OTHER]}", f"/runs/{spelling}", 1)
    query = "&".join(f"{k}={spelling if str(v) == str(world.run[OTHER]) else v}" for k, v in req["params"].items())
    headers = {**req.get("headers", {}), **_h(token)}
    # the raw text goes on the wire as written (httpx would encode a '%' again in params)
    return httpx.request(method, target + ("?" + query if query else ""), headers=headers, timeout=60,
                         **{k: v for k, v in req.items() if k in ("json", "content")})


def _seed(url: str) -> World:
    api = httpx.Client(base_url=url, headers=_h(ADMIN), timeout=30)
    run, profile, snapshot = {}, {}, {}
    for side in (OWN, OTHER):
        _steps_of_a_run(url, side, EXP[side], headers=_h(ADMIN))
        api.post("/api/v1/prometheus/targets", json={"job_name": "seed", "targets": ["127.0.0.1:19"], "project": side,
                                                     "experiment_name": EXP[side]}).raise_for_status()
    return World(run, profile, snapshot)


def _finish_seed(srv: Any, world: World) -> None:
    api = httpx.Client(base_url=srv.url, headers=_h(ADMIN), timeout=30)
    srv.app.state.st.writer.flush(10)
    for r in api.get("/api/v1/runs").json()["runs"]:
        world.run[r["project"]] = r["id"]
    for side in (OWN, OTHER):
        made = api.post("/api/v1/profiles", json={"run_id": world.run[side], "steps": "200"})
        assert made.status_code == 201, made.text
        world.profile[side] = made.json()["id"]
        snap = api.post(f"/api/v1/runs/{world.run[side]}/stacks", json={"deadline_s": 1})
        assert snap.status_code == 201, snap.text
        world.snapshot[side] = snap.json()["id"]
        for path in ("/api/v1/alerting/receivers", "/api/v1/alerting/rules"):  # each project's own, to find or not
            made = api.post(path, json=_request("POST", path, side, world, "seed")["json"])
            assert made.status_code == 201, made.text


def _other_untouched(api: httpx.Client, world: World) -> None:
    """What the scoped tokens must not have changed of the other project."""
    profile = api.get(f"/api/v1/profiles/{world.profile[OTHER]}").json()
    assert profile["state"] != "cancelled", profile["state"]
    experiments = {e["project"]: e for e in api.get("/api/v1/experiments").json()["experiments"]}
    assert experiments[OTHER]["state"] == "active" and experiments[OTHER]["target_count"] == 1
    names = api.get(f"/api/v1/runs/{world.run[OTHER]}/metrics").json()
    assert not any(n.startswith(("written_by_", "otlp_")) for n in map(str, names.get("metrics", names))), names


def test_each_route_each_role_own_and_other_project(tmp_path: Path) -> None:
    # rules need a managed Prometheus to be kept (none answers there: panels and alerts say it is away)
    srv = start_server(tmp_path, token=ADMIN, managed_prometheus_url="http://127.0.0.1:9")
    try:
        world = _seed(srv.url)
        _finish_seed(srv, world)
        admin = httpx.Client(base_url=srv.url, headers=_h(ADMIN), timeout=30)
        tokens = {}
        for role in ("viewer", "operator", "ingest"):
            made = admin.post("/api/v1/tokens", json={"name": f"{role}-own", "role": role, "projects": [OWN]})
            tokens[role] = made.json()["token"]
        tokens["admin"] = admin.post("/api/v1/tokens", json={"name": "boss", "role": "admin"}).json()["token"]
        admin.post("/api/v1/tokens", json={"name": "victim", "role": "viewer"}).raise_for_status()
        problems: list[str] = []

        def call(role: str, key: tuple[str, str], side: str) -> httpx.Response:
            req = _request(*key, side, world, f"{role}_{side.replace('-', '_')}")
            headers = {**req.pop("headers", {}), **_h(tokens[role])}
            return httpx.request(req.pop("method"), srv.url + req.pop("url"), headers=headers, timeout=60, **req)

        def check(ok: bool, what: Callable[[], str]) -> None:
            if not ok:
                problems.append(what())

        for role in ("viewer", "operator", "ingest"):  # the scoped roles first: the admin's writes come last
            for key, rule in sorted(_rules().items()):
                sides = (OWN, OTHER) if rule.scope in ("named", "written", "partial") else (OWN,)
                for side in sides:
                    r = call(role, key, side)
                    said = lambda: f"{role} {key} {side}: {r.status_code} {r.text[:300]}"  # noqa: E731
                    if role not in MAY[rule.who]:
                        check(r.status_code == 403, said)
                        continue
                    if r.status_code < 300 and rule.scope in ("named", "listed", "global", "open") and \
                            rule.who != "scrape":  # (not its input; /metrics names every run: --metrics-token)
                        check(OTHER not in r.text and EXP[OTHER] not in r.text, lambda: "leak: " + said())
                    if side == OWN:
                        check(r.status_code not in (401, 403) and (r.status_code != 404 or rule.fake), said)
                    elif rule.scope == "named":  # (a silence's owner is Alertmanager's to say: none runs here)
                        check(r.status_code == 404 or "notifications off" in r.text, said)
                    elif rule.scope == "written":
                        check(r.status_code == 403, said)
                    elif rule.scope == "partial":
                        check(r.status_code in (200, 422) and ("rejected" in r.text or "project_not_allowed"
                                                                in r.text), said)
        # another project's run id however it is spelled (issue 64), every route and spelling (a few at a time)
        from concurrent.futures import ThreadPoolExecutor

        asks = [(key, spelling) for key in sorted(_rules()) for spelling in _spellings(world.run[OTHER])]
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda ks: _spelled(srv.url, ks[0], world, ks[1], tokens["operator"]), asks))
        for (key, spelling), r in zip(asks, answers):
            if r is not None:
                check(r.status_code in (404, 422) and OTHER not in r.text and EXP[OTHER] not in r.text,
                      lambda: f"operator {key} spelled {spelling!r}: {r.status_code} {r.text[:300]}")
        _other_untouched(admin, world)
        for key, rule in sorted(_rules().items()):  # the admin: allowed everything, sees the other project's things
            r = call("admin", key, OTHER if rule.scope == "named" else OWN)
            check(r.status_code not in (401, 403), lambda: f"admin {key}: {r.status_code} {r.text[:300]}")
            if rule.scope == "named" and not rule.fake:
                check(r.status_code != 404, lambda: f"admin finds no other-project thing at {key}: {r.text[:300]}")
        assert not problems, "\n".join(problems)
    finally:
        srv.stop()
