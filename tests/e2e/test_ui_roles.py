"""The UI by role (issue 54), in Chromium on a token server: signed in with a named viewer token, the page says who
and what role, and has no button its role cannot use (profile, stack snapshot, silence, rules); an operator's page has
them; a viewer scoped to another project sees no run at all."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import DemoPair
from tests.e2e.test_ui import ARTIFACTS, sign_in

pytestmark = pytest.mark.e2e
WRITE_BUTTONS = ("#profile-next", "#profile-submit", "#stacks-take", "[data-profile-stage]")


def _token(pair: DemoPair, name: str, role: str, projects: list[str] | None = None) -> str:
    r = httpx.post(pair.url + "/api/v1/tokens", json={"name": name, "role": role, "projects": projects},
                   headers={"Authorization": f"Bearer {pair.token}"})
    if r.status_code == 409:  # (made by an earlier run of this session's server)
        httpx.delete(f"{pair.url}/api/v1/tokens/{name}", headers={"Authorization": f"Bearer {pair.token}"})
        r = httpx.post(pair.url + "/api/v1/tokens", json={"name": name + "2", "role": role, "projects": projects},
                       headers={"Authorization": f"Bearer {pair.token}"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def test_a_viewer_has_no_write_buttons_and_an_operator_has_them(demo_pair: DemoPair, page) -> None:
    for role, present in (("viewer", False), ("operator", True)):
        page.context.clear_cookies()
        sign_in(page, demo_pair.url, _token(demo_pair, f"ui-{role}", role))
        assert page.inner_text("#who").startswith(f"ui-{role}") and page.get_attribute("#who", "data-role") == role
        page.goto(f"{demo_pair.url}/#/run/{demo_pair.slow}")
        page.wait_for_selector("#insight-step li", timeout=60_000)
        page.wait_for_selector("#stacks-list", state="attached", timeout=30_000)
        found = {sel: page.query_selector(sel) is not None for sel in WRITE_BUTTONS}
        assert all(v == present for v in found.values()), (role, found)
        page.screenshot(path=str(ARTIFACTS / f"role-{role}.png"))


def test_a_viewer_of_another_project_sees_no_run(demo_pair: DemoPair, page) -> None:
    page.context.clear_cookies()
    page.goto(demo_pair.url + "/")
    page.fill("#token", _token(demo_pair, "ui-elsewhere", "viewer", ["another-project"]))
    page.click("button[type=submit]")
    page.wait_for_selector("#who")
    assert "of another-project" in page.inner_text("#who")
    page.wait_for_timeout(1000)
    assert page.query_selector("#runs-table tr[data-run-id]") is None
    page.goto(f"{demo_pair.url}/#/run/{demo_pair.slow}")
    page.wait_for_selector("#page-error", timeout=30_000)
    assert "no run with id" in page.inner_text("#page-error")


def test_the_top_bar_by_scope_and_a_run_of_another_project_leaves_no_name_behind(tmp_path, page) -> None:
    """Issue 64: the top bar read "Prometheusalice · viewer"; a viewer held to a project was offered Prometheus (which
    has no project scoping); another project's run left the previous run's name in the breadcrumb."""
    from tests.conftest import start_server
    from tests.unit.server.routes.test_read_results import _steps_of_a_run

    admin = "ui-topbar-admin"
    srv = start_server(tmp_path, token=admin, prometheus_url="http://127.0.0.1:9")
    try:
        h = {"Authorization": f"Bearer {admin}"}
        _steps_of_a_run(srv.url, "mine", "a", headers=h)
        _steps_of_a_run(srv.url, "theirs", "b", headers=h)
        srv.app.state.st.writer.flush(10)
        ids = {r["project"]: r["id"] for r in httpx.get(srv.url + "/api/v1/runs", headers=h).json()["runs"]}
        every = httpx.post(srv.url + "/api/v1/tokens", json={"name": "alice", "role": "viewer"}, headers=h).json()
        scoped = httpx.post(srv.url + "/api/v1/tokens", json={"name": "bob", "role": "viewer", "projects": ["mine"]},
                            headers=h).json()
        sign_in(page, srv.url, every["token"])
        page.wait_for_selector("#who")
        link = page.eval_on_selector("#link-prometheus", "e => e.getBoundingClientRect().right")
        who = page.eval_on_selector("#who", "e => e.getBoundingClientRect().left")
        assert who >= link + 8, (link, who)  # apart, not "Prometheusalice · viewer"
        page.context.clear_cookies()
        sign_in(page, srv.url, scoped["token"])
        page.wait_for_selector("#who")
        assert page.query_selector("#link-prometheus") is None  # Prometheus shows every project
        page.goto(f"{srv.url}/#/run/{ids['mine']}")
        page.wait_for_function("document.querySelector('#crumbs').textContent.includes('mine / a')")
        page.goto(f"{srv.url}/#/run/{ids['theirs']}")
        page.wait_for_selector("#page-error", timeout=30_000)
        assert page.inner_text("#crumbs").strip() == "runs"
        page.screenshot(path=str(ARTIFACTS / "role-topbar-scoped.png"))
        page.goto("about:blank")  # (the page stops polling before its server does: no "not answering" error)
    finally:
        srv.stop()
