"""Single sign-on through a real proxy (issue 54 item 5): Debian's haproxy, standing in for oauth2-proxy, signs people
in and names them in X-Forwarded-User / X-Forwarded-Groups; the server, trusting only the proxy's address, maps them
to roles and projects by the access map. The proxy connects from 127.0.0.2 (haproxy's `source`), the test's own
requests from 127.0.0.1: a header sent straight to the server is ignored, one a client sends the proxy is replaced."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

from tests.conftest import answers_healthz, debian_binary, free_port, start_server, wait_until
from tests.unit.server.routes.test_read_results import _steps_of_a_run

ADMIN = "sso-admin-token"
MAP = """
users:
  alice@corp: {role: operator, projects: [math]}
groups:
  math-readers: {role: viewer, projects: [math]}
"""


def _haproxy(tmp_path: Path, server_port: int, adds: bool = False) -> tuple[subprocess.Popen, str]:
    """`adds`: a proxy configured wrongly, adding its identity header to the one a client sent instead of replacing
    it."""
    port = free_port()
    cfg = tmp_path / ("haproxy-adds.cfg" if adds else "haproxy.cfg")
    found = "if { req.hdr(X-Test-Login) -m found }"
    identity = (f"    http-request add-header X-Forwarded-User %[req.hdr(X-Test-Login)] {found}\n" if adds else
                "    http-request del-header X-Forwarded-User\n"
                "    http-request del-header X-Forwarded-Groups\n"
                f"    http-request set-header X-Forwarded-User %[req.hdr(X-Test-Login)] {found}\n"
                "    http-request set-header X-Forwarded-Groups %[req.fhdr(X-Test-Groups)] "
                "if { req.hdr(X-Test-Groups) -m found }\n")

    # what the sign-in proxy does: drop whatever identity a client claims, then name the person it signed in (here
    # the test says who, in X-Test-Login / X-Test-Groups, as an identity provider would have; fhdr: the whole value,
    # commas and all)
    cfg.write_text(f"""
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    option forwardfor
frontend sso
    bind 127.0.0.1:{port}
{identity}    default_backend monitor
backend monitor
    server s 127.0.0.1:{server_port} source 127.0.0.2
""")
    proc = subprocess.Popen([debian_binary("haproxy", "haproxy", "/usr/sbin"), "-f", str(cfg), "-db"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers_healthz(url), timeout=20, what="haproxy")
    return proc, url


def test_people_the_proxy_signs_in_get_their_role_and_a_forged_header_gets_nothing(tmp_path: Path) -> None:
    access = tmp_path / "access.yml"
    access.write_text(MAP)
    srv = start_server(tmp_path, token=ADMIN, trusted_proxy=("127.0.0.2/32",), groups_header="X-Forwarded-Groups",
                       access_map=str(access))
    proxy, url = _haproxy(tmp_path, srv.config.port)
    try:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        _steps_of_a_run(srv.url, "math", "grpo", headers=admin)
        _steps_of_a_run(srv.url, "code", "ppo", headers=admin)
        srv.app.state.st.writer.flush(10)
        ids = {r["project"]: r["id"] for r in httpx.get(srv.url + "/api/v1/runs", headers=admin).json()["runs"]}
        alice, bob = {"X-Test-Login": "alice@corp"}, {"X-Test-Login": "bob", "X-Test-Groups": "math-readers,x"}

        session = httpx.get(url + "/api/v1/session", headers=alice).json()
        assert (session["who"], session["role"], session["projects"]) == ("alice@corp (sso)", "operator", ["math"])
        listed = httpx.get(url + "/api/v1/runs", headers=alice).json()["runs"]
        assert [r["project"] for r in listed] == ["math"]
        assert httpx.get(f"{url}/api/v1/runs/{ids['code']}", headers=alice).status_code == 404
        asked = httpx.post(url + "/api/v1/profiles", json={"run_id": ids["math"], "steps": "100"}, headers=alice)
        assert asked.status_code == 201, asked.text
        refused = httpx.post(url + "/api/v1/profiles", json={"run_id": ids["math"], "steps": "101"}, headers=bob)
        assert refused.status_code == 403 and "'bob (sso)' (viewer) may not" in refused.text  # a viewer by group
        assert httpx.get(url + "/api/v1/runs", headers=bob).status_code == 200
        stranger = httpx.get(url + "/api/v1/runs", headers={"X-Test-Login": "eve"})
        assert stranger.status_code == 403 and "gives them no role" in stranger.json()["detail"]

        # forged: straight to the server (not the proxy's address), or sent to the proxy, which replaces it
        forged = {"X-Forwarded-User": "alice@corp"}
        assert httpx.get(srv.url + "/api/v1/runs", headers=forged).status_code == 401
        assert httpx.post(srv.url + "/api/v1/profiles", json={"run_id": ids["math"], "steps": "102"},
                          headers=forged).status_code == 401
        assert httpx.get(url + "/api/v1/runs", headers=forged).status_code == 401
        assert httpx.get(url + "/api/v1/runs", headers=admin).status_code == 200  # tokens still work through it

        # the map read again when it changes: bob's group made operators, no restart
        access.write_text(MAP.replace("math-readers: {role: viewer", "math-readers: {role: operator"))
        deadline = time.monotonic() + 5
        while httpx.post(url + "/api/v1/profiles", json={"run_id": ids["math"], "steps": "103"},
                         headers=bob).status_code != 201:
            assert time.monotonic() < deadline, "the changed access map was not read"
            time.sleep(0.2)
        srv.app.state.st.audit.flush(10)
        who = [e["who"] for e in httpx.get(srv.url + "/api/v1/audit", headers=admin).json()["entries"]
               if e["path"] == "/api/v1/profiles" and not e.get("refused")]
        assert sorted(who) == ["alice@corp (sso)", "bob (sso)"]
    finally:
        proxy.terminate()
        proxy.wait(10)
        srv.stop()


def test_utf8_names_an_ipv6_server_duplicate_headers_and_the_limiter_per_person(tmp_path: Path) -> None:
    """Issue 64, behind the real haproxy: a UTF-8 name matches the access map; a server on `::` believes its IPv4
    proxy (seen as ::ffff:127.0.0.2); a proxy that adds its header beside a client's is refused, not the first
    believed; eleven wrong sign-ins by one person through the proxy lock that person out, not everyone behind it."""
    access = tmp_path / "access.yml"
    access.write_text("users:\n  zoë@corp: {role: operator, projects: [math]}\n", encoding="utf-8")
    srv = start_server(tmp_path, host="::", token=ADMIN, trusted_proxy=("127.0.0.2/32",), access_map=str(access))
    proxy, url = _haproxy(tmp_path, srv.config.port)
    adding, adding_url = _haproxy(tmp_path, srv.config.port, adds=True)
    try:
        zoe = {"X-Test-Login": "zoë@corp".encode()}
        session = httpx.get(url + "/api/v1/session", headers=zoe).json()
        assert (session["who"], session["role"]) == ("zoë@corp (sso)", "operator"), session
        twice = httpx.get(adding_url + "/api/v1/runs", headers={**zoe, "X-Forwarded-User": "zoë@corp".encode()})
        assert twice.status_code == 403 and "carries 2 x-forwarded-user headers" in twice.text
        assert httpx.get(adding_url + "/api/v1/runs", headers=zoe).status_code == 200  # one header: fine
        for _ in range(10):
            r = httpx.post(url + "/api/v1/login", json={"token": "rli_wrong"}, headers={"X-Test-Login": "mallory"})
            assert r.status_code == 401, r.text
        assert httpx.post(url + "/api/v1/login", json={"token": "rli_wrong"},
                          headers={"X-Test-Login": "mallory"}).status_code == 429
        # everyone else behind the same proxy still signs in
        assert httpx.post(url + "/api/v1/login", json={"token": ADMIN}, headers={"X-Test-Login": "sam"}).status_code \
            == 200
        assert httpx.post(url + "/api/v1/login", json={"token": ADMIN}).status_code == 200  # no login: its address
    finally:
        for p in (proxy, adding):
            p.terminate()
            p.wait(10)
        srv.stop()
