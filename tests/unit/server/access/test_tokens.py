"""Named tokens (server/access/, issue 54): created by an admin, shown once, kept as a hash in the run store; each role
allowed what it is for and refused the rest (401 unknown, 403 known but not allowed); revoked at once; the server's
own token still the admin token; the CLI prints the secret alone on its last line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import start_server

ADMIN = "the-servers-own-token"


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _batch(project: str) -> dict:
    return {"v": 1, "client": {"id": "c1", "pid": 1, "host": "h"},
            "series": [{"k": "g", "n": "training_global_step", "l": {"project": project, "experiment_name": "e"}}],
            "samples": [[0, time.time(), 1, 1.0]]}


def test_each_role_does_what_it_is_for_and_nothing_else(tmp_path: Path) -> None:
    srv = start_server(tmp_path, token=ADMIN)
    try:
        api = httpx.Client(base_url=srv.url, timeout=30)
        made = {}
        for name, role in (("alice", "viewer"), ("ops", "operator"), ("ci", "ingest"), ("boss", "admin")):
            scope = {"projects": ["a"]} if role != "admin" else {}
            r = api.post("/api/v1/tokens", json={"name": name, "role": role, **scope}, headers=_h(ADMIN))
            assert r.status_code == 201, r.text
            made[role] = r.json()["token"]
            assert r.json()["info"]["created_by"] == "admin (the server's token)"
        listed = api.get("/api/v1/tokens", headers=_h(ADMIN)).json()["tokens"]
        assert {t["name"] for t in listed} == {"alice", "ops", "ci", "boss"}
        assert not any(secret in r for r in map(str, listed) for secret in made.values())  # never the secret
        assert all("hash" not in t for t in listed)
        # an admin is of every project: one held to projects would mint tokens wider than itself (issue 64)
        wide = api.post("/api/v1/tokens", json={"name": "boss-a", "role": "admin", "projects": ["a"]},
                        headers=_h(ADMIN))
        assert wide.status_code == 422 and "an admin token is for every project" in wide.text
        # a second token of the same name is refused
        again = api.post("/api/v1/tokens", json={"name": "alice", "role": "viewer"}, headers=_h(ADMIN))
        assert again.status_code == 409

        def status(method: str, path: str, token: str, **kw: object) -> int:
            return api.request(method, path, headers=_h(token), **kw).status_code

        reads = ("GET", "/api/v1/runs")
        operate = ("POST", "/api/v1/profiles", {"json": {"project": "a", "experiment_name": "e", "steps": "4",
                                                         "wait_for_run": True}})
        ingest = ("POST", "/api/v1/ingest", {"json": _batch("a")})
        manage = ("GET", "/api/v1/tokens")
        expected = {  # role: (read, operate, ingest, manage)
            "viewer": (200, 403, 403, 403), "operator": (200, 201, 403, 403), "ingest": (403, 403, 200, 403),
            "admin": (200, 201, 200, 200)}
        for role, want in expected.items():
            got = (status(*reads, made[role]), status(operate[0], operate[1], made[role], **operate[2]),
                   status(ingest[0], ingest[1], made[role], **ingest[2]), status(*manage, made[role]))
            assert got == want, (role, got)
        assert status(*reads, "rli_not-a-token") == 401 and status(*reads, ADMIN) == 200
        # revoked: refused at once on this server
        assert api.delete("/api/v1/tokens/alice", headers=_h(ADMIN)).json()["revoked"] is not None
        assert status(*reads, made["viewer"]) == 401
        assert api.delete("/api/v1/tokens/nobody", headers=_h(ADMIN)).status_code == 404
        # the UI signs in with a named token and says who it is
        login = httpx.Client(base_url=srv.url, timeout=30)
        assert login.post("/api/v1/login", json={"token": made["operator"]}).status_code == 200
        who = login.get("/api/v1/session").json()
        assert (who["who"], who["role"], who["projects"]) == ("ops", "operator", ["a"])
        assert login.post("/api/v1/login", json={"token": made["ingest"]}).status_code == 401  # cannot read
    finally:
        srv.stop()


def test_the_cli_prints_the_secret_alone_on_its_last_line(tmp_path: Path) -> None:
    srv = start_server(tmp_path, token=ADMIN)
    try:
        common = ["--server-url", srv.url, "--token", ADMIN, "--home", str(tmp_path / "h")]
        r = subprocess.run([sys.executable, "-m", "rl_insight", "server", "tokens", "create", "ci-math", "--role",
                            "ingest", "--project", "math", "--expires", "90d", *common],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        secret = r.stdout.strip().splitlines()[-1]
        assert secret.startswith("rli_") and " " not in secret and "ingest of math" in r.stdout
        assert httpx.post(srv.url + "/api/v1/ingest", json=_batch("math"), headers=_h(secret)).status_code == 200
        listed = subprocess.run([sys.executable, "-m", "rl_insight", "server", "tokens", "list", *common],
                                capture_output=True, text=True, timeout=60)
        assert "ci-math" in listed.stdout and "ingest" in listed.stdout and secret not in listed.stdout
        bad = subprocess.run([sys.executable, "-m", "rl_insight", "server", "tokens", "create", "x y", "--role",
                              "chief", *common], capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and ("invalid" in bad.stderr or "role" in bad.stderr), bad.stderr
        gone = subprocess.run([sys.executable, "-m", "rl_insight", "server", "tokens", "revoke", "ci-math", *common],
                              capture_output=True, text=True, timeout=60)
        assert gone.returncode == 0 and "Revoked token 'ci-math'" in gone.stdout
        assert httpx.post(srv.url + "/api/v1/ingest", json=_batch("math"), headers=_h(secret)).status_code == 401
    finally:
        srv.stop()


def test_a_revoked_token_stops_working_on_every_server_of_the_fleet_within_seconds(
        postgres_url: str, tmp_path: Path) -> None:
    """Two servers on one real PostgreSQL store: a token made through one works through the other; revoked through
    the first, the second refuses it within 5 s (its poll reads the store every second), with no restart."""
    a = start_server(tmp_path / "a", store=postgres_url, token=ADMIN)
    b = start_server(tmp_path / "b", store=postgres_url, token=ADMIN)
    try:
        made = httpx.post(a.url + "/api/v1/tokens", json={"name": "bob", "role": "viewer"}, headers=_h(ADMIN))
        secret = made.json()["token"]
        deadline = time.monotonic() + 5
        while httpx.get(b.url + "/api/v1/runs", headers=_h(secret)).status_code != 200:
            assert time.monotonic() < deadline, "b never learned of the new token"
            time.sleep(0.1)
        httpx.delete(a.url + "/api/v1/tokens/bob", headers=_h(ADMIN)).raise_for_status()
        revoked_at = time.monotonic()
        while httpx.get(b.url + "/api/v1/runs", headers=_h(secret)).status_code != 401:
            assert time.monotonic() - revoked_at < 5, "b still accepts the revoked token"
            time.sleep(0.1)
        names = [t["name"] for t in httpx.get(b.url + "/api/v1/tokens", headers=_h(ADMIN)).json()["tokens"]]
        assert names == ["bob"]
    finally:
        a.stop()
        b.stop()


def test_an_ingest_token_writes_its_projects_only_and_the_rest_of_the_batch_is_kept(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """A real client with project a's ingest token: its own data is stored; a batch that also carries project b's
    samples keeps a's, refuses b's one by one with a clear reason, counted on /metrics."""
    import rl_insight

    srv = start_server(tmp_path, token=ADMIN)
    try:
        secret = httpx.post(srv.url + "/api/v1/tokens", json={"name": "ci-a", "role": "ingest", "projects": ["a"]},
                            headers=_h(ADMIN)).json()["token"]
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        monkeypatch.setenv("RL_INSIGHT_TOKEN", secret)
        rl_insight.init(project="a", experiment_name="mine")
        with rl_insight.trace_state("update_actor", state_lane_id="rank_0"):
            rl_insight.metric_gauge("training/global_step", 1)
        assert rl_insight.flush(10)
        rl_insight.finish(10)
        mixed = _batch("a")
        mixed["series"].append({"k": "g", "n": "critic_score_mean", "l": {"project": "b", "experiment_name": "e"}})
        mixed["samples"].append([1, time.time(), 1, 0.5])
        r = httpx.post(srv.url + "/api/v1/ingest", json=mixed, headers=_h(secret))
        assert r.status_code == 200 and r.json()["accepted"] == 1 and r.json()["rejected"] == 1, r.text
        err = r.json()["errors"][0]
        assert err["reason"] == "project_not_allowed" and "not of project 'b'" in err["detail"]
        only_b = httpx.post(srv.url + "/api/v1/ingest", json=_batch("b"), headers=_h(secret))
        assert only_b.status_code == 422  # nothing of it was the token's
        srv.app.state.st.writer.flush(10)
        runs = httpx.get(srv.url + "/api/v1/runs", headers=_h(ADMIN)).json()["runs"]
        assert {(r["project"], r["experiment_name"]) for r in runs} == {("a", "mine"), ("a", "e")}
        mine = next(r["id"] for r in runs if r["experiment_name"] == "mine")
        spans = httpx.get(f"{srv.url}/api/v1/runs/{mine}/spans", headers=_h(ADMIN)).json()["spans"]
        assert [s[2] for s in spans] == ["update_actor"]  # the client's spans carry its project
        assert 'reason="project_not_allowed"' in httpx.get(srv.url + "/metrics").text
    finally:
        srv.stop()


def test_the_audit_log_names_who_did_each_action_of_a_scripted_session(tmp_path: Path, monkeypatch) -> None:
    """Tokens made and revoked, a profile requested and cancelled by an operator, a stack snapshot asked for: each
    an entry with who, role, address, action and what its answer named; a refused request is a refused attempt; reads
    are not actions, nor is the data a job sends. Only an admin reads the log, through the API and `rl-insight server
    audit`."""
    import rl_insight

    srv = start_server(tmp_path, token=ADMIN)
    try:
        api = httpx.Client(base_url=srv.url, timeout=30)
        ops = api.post("/api/v1/tokens", json={"name": "ops", "role": "operator"}, headers=_h(ADMIN)).json()["token"]
        viewer = api.post("/api/v1/tokens", json={"name": "v", "role": "viewer"}, headers=_h(ADMIN)).json()["token"]
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        monkeypatch.setenv("RL_INSIGHT_TOKEN", ADMIN)
        rl_insight.init(project="p", experiment_name="e")
        with rl_insight.trace_state("update_actor", state_lane_id="rank_0"):
            rl_insight.metric_gauge("training/global_step", 1)
        assert rl_insight.flush(10)
        srv.app.state.st.writer.flush(10)
        run_id = api.get("/api/v1/runs", headers=_h(ADMIN)).json()["runs"][0]["id"]
        prof = api.post("/api/v1/profiles", json={"run_id": run_id, "steps": "50", "wait_for_run": True},
                        headers=_h(ops))
        assert prof.status_code == 201, prof.text
        assert api.post("/api/v1/profiles", json={"run_id": run_id, "steps": "51"},
                        headers=_h(viewer)).status_code == 403  # refused: logged as a refused attempt
        assert api.delete(f"/api/v1/profiles/{prof.json()['id']}", headers=_h(ops)).status_code == 200
        snap = api.post(f"/api/v1/runs/{run_id}/stacks", json={}, headers=_h(ops))
        assert snap.status_code == 201, snap.text
        api.delete("/api/v1/tokens/v", headers=_h(ADMIN)).raise_for_status()
        rl_insight.finish(10)
        srv.app.state.st.audit.flush(10)
        listed = api.get("/api/v1/audit", headers=_h(ADMIN)).json()["entries"][::-1]  # oldest first
        refused = [e for e in listed if e.get("refused")]
        assert [(e["who"], e["status"], e["path"], e["what"]["why"]) for e in refused] == \
            [("v", 403, "/api/v1/profiles", "not allowed")]
        entries = [e for e in listed if not e.get("refused")]
        got = [(e["who"], e["method"], e["path"].rsplit("/", 1)[0] if e["method"] == "DELETE" else e["path"])
               for e in entries]
        admin = "admin (the server's token)"
        assert got == [(admin, "POST", "/api/v1/tokens"), (admin, "POST", "/api/v1/tokens"),
                       ("ops", "POST", "/api/v1/profiles"), ("ops", "DELETE", "/api/v1/profiles"),
                       ("ops", "POST", f"/api/v1/runs/{run_id}/stacks"), (admin, "DELETE", "/api/v1/tokens")], got
        assert entries[0]["what"]["name"] == "ops" and entries[0]["what"]["role"] == "operator"
        assert entries[2]["what"]["id"] == prof.json()["id"] and entries[2]["role"] == "operator"
        assert all(e["address"] == "127.0.0.1" and e["status"] < 400 for e in entries)
        assert api.get("/api/v1/audit", headers=_h(ops)).status_code == 403  # the admin's only
        r = subprocess.run([sys.executable, "-m", "rl_insight", "server", "audit", "--who", "ops", "--server-url",
                            srv.url, "--token", ADMIN, "--home", str(tmp_path / "h")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.count("ops") >= 3 and "POST /api/v1/profiles" in r.stdout, r.stdout
    finally:
        srv.stop()


def test_a_viewer_of_one_project_sees_its_runs_and_nothing_of_another(tmp_path: Path) -> None:
    """Project a's viewer lists a's runs only; any run id of b — in a path, a diff or a comparison — is 404 like a run
    that does not exist; a's own run answers; an unscoped viewer sees both."""
    srv = start_server(tmp_path, token=ADMIN)
    try:
        api = httpx.Client(base_url=srv.url, timeout=30)
        for project in ("a", "b"):
            assert api.post("/api/v1/ingest", json=_batch(project), headers=_h(ADMIN)).status_code == 200
        srv.app.state.st.writer.flush(10)
        ids = {r["project"]: r["id"] for r in api.get("/api/v1/runs", headers=_h(ADMIN)).json()["runs"]}
        scoped = api.post("/api/v1/tokens", json={"name": "va", "role": "viewer", "projects": ["a"]},
                          headers=_h(ADMIN)).json()["token"]
        every = api.post("/api/v1/tokens", json={"name": "vall", "role": "viewer"}, headers=_h(ADMIN)).json()["token"]
        listed = api.get("/api/v1/runs", headers=_h(scoped)).json()["runs"]
        assert [r["project"] for r in listed] == ["a"]
        assert {r["project"] for r in api.get("/api/v1/runs", headers=_h(every)).json()["runs"]} == {"a", "b"}
        a, b = ids["a"], ids["b"]
        for path, params in ((f"/api/v1/runs/{b}", {}), (f"/api/v1/runs/{b}/metrics", {}),
                             (f"/api/v1/runs/{b}/ledger", {}), (f"/api/v1/runs/{b}/trajectories/steps", {}),
                             (f"/api/v1/runs/{b}/export.csv", {}), ("/api/v1/runs/diff", {"a": a, "b": b}),
                             ("/api/v1/series", {"name": "training_global_step", "runs": f"{a},{b}"})):
            r = api.get(path, params=params, headers=_h(scoped))
            assert r.status_code == 404 and "no run" in r.json()["detail"], (path, r.status_code, r.text)
        # the same answer as a run that does not exist
        missing = api.get("/api/v1/runs/999999", headers=_h(ADMIN)).json()
        other = api.get(f"/api/v1/runs/{b}", headers=_h(scoped)).json()
        assert other["detail"].replace(str(b), "N") == missing["detail"].replace("999999", "N"), (other, missing)
        assert api.get(f"/api/v1/runs/{a}", headers=_h(scoped)).status_code == 200
        assert api.get(f"/api/v1/runs/{b}", headers=_h(every)).status_code == 200
        # profile requests: b's is not listed for a's viewer, and reads as one that does not exist
        made = api.post("/api/v1/profiles", json={"run_id": b, "steps": "50", "wait_for_run": True},
                        headers=_h(ADMIN))
        assert made.status_code == 201, made.text
        assert api.get("/api/v1/profiles", headers=_h(scoped)).json()["count"] == 0
        assert api.get("/api/v1/profiles", headers=_h(every)).json()["count"] == 1
        assert api.get(f"/api/v1/profiles/{made.json()['id']}", headers=_h(scoped)).status_code == 404
        assert api.get("/api/v1/profiles", params={"run_id": b}, headers=_h(scoped)).status_code == 404
    finally:
        srv.stop()


def test_an_admin_held_to_projects_manages_no_tokens(tmp_path: Path) -> None:
    """A token record made before `admin` with projects was refused keeps an operator's and an ingest token's rights in
    its projects, never token management or the audit log (which span every project)."""
    from rl_insight.server.access.principal import Principal

    legacy = Principal("old-boss", "admin", frozenset({"a"}))
    assert not legacy.is_admin and legacy.can_operate and legacy.can_ingest and legacy.can_read
    srv = start_server(tmp_path, token=ADMIN)
    try:
        book = srv.app.state.st.tokens
        secret, _ = book.create("old-boss", "viewer", ["a"], None, "test")
        doc = book._records.load()["old-boss"]  # rewritten as an older server stored it
        assert book._records.update("old-boss", {**doc.body, "role": "admin"}, doc.version) is None
        book.refresh()
        api = httpx.Client(base_url=srv.url, timeout=30, headers=_h(secret))
        assert api.get("/api/v1/runs").status_code == 200
        for method, path, body in (("GET", "/api/v1/tokens", None), ("GET", "/api/v1/audit", None),
                                   ("POST", "/api/v1/tokens", {"name": "mint", "role": "admin"})):
            assert api.request(method, path, json=body).status_code == 403, path
    finally:
        srv.stop()


def test_a_server_without_a_token_makes_no_named_tokens(tmp_path: Path) -> None:
    """Every request to a server without a token is admin, so a named token would limit nobody: refused, saying so
    (the README's demo server, issue 64)."""
    srv = start_server(tmp_path)
    try:
        r = httpx.post(srv.url + "/api/v1/tokens", json={"name": "v", "role": "viewer"}, timeout=30)
        assert r.status_code == 409 and "has no token" in r.text and "--token" in r.json()["hint"]
    finally:
        srv.stop()


def test_a_run_id_given_again_after_retention_is_the_new_runs(tmp_path: Path) -> None:
    """Issue 64: when retention deletes the newest run, SQLite gives its id to the next run, maybe another project's;
    the project remembered for the id goes with the deletion (a's viewer read b's new run; b's viewer got 404)."""
    srv = start_server(tmp_path, token=ADMIN)
    try:
        api = httpx.Client(base_url=srv.url, timeout=30)
        st = srv.app.state.st
        assert api.post("/api/v1/ingest", json=_batch("a"), headers=_h(ADMIN)).status_code == 200
        st.writer.flush(10)
        (old,) = [r["id"] for r in api.get("/api/v1/runs", headers=_h(ADMIN)).json()["runs"]]
        va, vb = ({"name": f"v{p}", "role": "viewer", "projects": [p]} for p in "ab")
        va_t = api.post("/api/v1/tokens", json=va, headers=_h(ADMIN)).json()["token"]
        vb_t = api.post("/api/v1/tokens", json=vb, headers=_h(ADMIN)).json()["token"]
        assert api.get(f"/api/v1/runs/{old}", headers=_h(va_t)).status_code == 200  # remembered: project a
        st.writer._delete_runs([old])  # what retention does
        batch = _batch("b")
        batch["client"]["id"] = "c2"
        assert api.post("/api/v1/ingest", json=batch, headers=_h(ADMIN)).status_code == 200
        st.writer.flush(10)
        (new,) = [r["id"] for r in api.get("/api/v1/runs", headers=_h(ADMIN)).json()["runs"]]
        assert new == old  # (SQLite: the deleted newest id again)
        assert api.get(f"/api/v1/runs/{new}", headers=_h(va_t)).status_code == 404
        assert api.get(f"/api/v1/runs/{new}", headers=_h(vb_t)).json()["project"] == "b"
    finally:
        srv.stop()


def test_a_scoped_list_is_filtered_before_its_limit(tmp_path: Path) -> None:
    """Issue 64: `limit=1` for a's viewer while b's run is the newest still gives a's run."""
    srv = start_server(tmp_path, token=ADMIN)
    try:
        api = httpx.Client(base_url=srv.url, timeout=30)
        for n, project in enumerate(("a", "b")):
            batch = _batch(project)
            batch["client"]["id"] = f"c{n}"
            assert api.post("/api/v1/ingest", json=batch, headers=_h(ADMIN)).status_code == 200
            srv.app.state.st.writer.flush(10)
            time.sleep(0.05)
        va = api.post("/api/v1/tokens", json={"name": "va", "role": "viewer", "projects": ["a"]},
                      headers=_h(ADMIN)).json()["token"]
        assert api.get("/api/v1/runs", params={"limit": 1}, headers=_h(ADMIN)).json()["runs"][0]["project"] == "b"
        listed = api.get("/api/v1/runs", params={"limit": 1}, headers=_h(va)).json()["runs"]
        assert [r["project"] for r in listed] == ["a"]
    finally:
        srv.stop()


def test_the_audit_log_holds_every_documented_action_and_refused_attempts_rate_limited(tmp_path: Path) -> None:
    """Issue 64: experiment archive/restore and target removal (sent with an ingest token, but actions) are logged;
    a receiver's entry names it; a token's names its projects; refused attempts on action routes (401, 403) and wrong
    sign-ins are logged, at most REFUSED_PER_MINUTE an address, the rest counted in the next entry."""
    from rl_insight.server.access.audit import REFUSED_PER_MINUTE

    srv = start_server(tmp_path, token=ADMIN)
    try:
        api = httpx.Client(base_url=srv.url, timeout=30, headers=_h(ADMIN))
        made = api.post("/api/v1/tokens", json={"name": "ci", "role": "ingest", "projects": ["a", "b"]}).json()
        reg = {"job_name": "vllm", "targets": ["127.0.0.1:9"], "project": "a", "experiment_name": "e"}
        assert api.post("/api/v1/prometheus/targets", json=reg).status_code == 200  # registration: data, no action
        for path in ("/api/v1/experiments/archive", "/api/v1/experiments/restore"):
            r = api.post(path, json={"project": "a", "experiment_name": "e"}, headers=_h(made["token"]))
            assert r.status_code == 200, r.text
        assert api.delete("/api/v1/targets", params={"project": "a", "experiment_name": "e"},
                          headers=_h(made["token"])).status_code == 200
        for i in range(REFUSED_PER_MINUTE + 5):  # someone trying tokens
            assert httpx.post(srv.url + "/api/v1/tokens", json={"name": f"x{i}", "role": "admin"},
                              headers=_h(f"rli_guess{i}"), timeout=30).status_code == 401
        assert httpx.post(srv.url + "/api/v1/login", json={"token": "rli_wrong"}, timeout=30).status_code == 401
        srv.app.state.st.audit.flush(10)
        entries = api.get("/api/v1/audit", params={"limit": 500}).json()["entries"][::-1]
        actions = [(e["who"], e["method"], e["path"], e.get("what")) for e in entries if not e.get("refused")]
        assert actions[0][:3] == ("admin (the server's token)", "POST", "/api/v1/tokens")
        assert actions[0][3]["projects"] == ["a", "b"] and actions[0][3]["role"] == "ingest"
        assert [a[1:3] for a in actions[1:]] == [("POST", "/api/v1/experiments/archive"),
                                                 ("POST", "/api/v1/experiments/restore"),
                                                 ("DELETE", "/api/v1/targets")], actions
        assert all(a[0] == "ci" for a in actions[1:]) and actions[3][3]["project"] == "a"
        refused = [e for e in entries if e.get("refused")]
        assert len(refused) == REFUSED_PER_MINUTE  # the address's budget; a wrong sign-in from it waits its turn
        assert all(e["status"] == 401 and e["who"] == "(no or an unknown token)" for e in refused)
        assert not any("rli_guess" in str(e) for e in entries)  # what was tried is not repeated
    finally:
        srv.stop()


def test_a_wrong_sign_in_is_logged_and_a_refused_flood_is_counted_in_the_next_entry() -> None:
    from rl_insight.server.access.audit import REFUSED_PER_MINUTE, AuditLog

    now = [1000.0]
    kept: list[dict] = []

    class Records:
        def create(self, rid: str, run: tuple, body: dict) -> None:
            kept.append(body)

    log = AuditLog(Records(), 30, clock=lambda: now[0])
    for _ in range(REFUSED_PER_MINUTE + 7):
        log.refused("(no or an unknown token)", "", "10.0.0.9", "POST", "/api/v1/login", 401, {"why": "wrong sign-in"})
    now[0] += 61
    assert log.refused("(no or an unknown token)", "", "10.0.0.9", "POST", "/api/v1/login", 401, {"why": "x"})
    assert log.refused("v", "viewer", "10.0.0.8", "POST", "/api/v1/profiles", 403, {"why": "not allowed"})
    log.close()
    assert len(kept) == REFUSED_PER_MINUTE + 2
    assert kept[REFUSED_PER_MINUTE]["what"] == {"why": "x", "refused_not_logged": 7}
    assert all(e["refused"] for e in kept)
