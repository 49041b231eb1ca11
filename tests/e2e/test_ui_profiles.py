"""Profile on demand from the browser (real headless Chromium, a live demo): choose a lane on the timeline,
"Profile next step", and the run page shows the request finish, the profiled window over that lane on the
live timeline, and the analysis (the offline report) of exactly that step."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.test_ui import ARTIFACTS, _need_browser, doc_image, running_demo, sign_in

pytestmark = pytest.mark.e2e
TOKEN = "e2e-profiles-token"  # the profile buttons on a server with a token (every network-facing server has one)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    _need_browser()
    pytest.importorskip("torch")
    # 3 s steps: the trainer (which logs no step metric) hears the run's clock from replies well before its next
    # step's first state even on a loaded 2-core machine; shorter steps make "next step" refuse (exact or nothing)
    with running_demo(tmp_path_factory.mktemp("ui-profiles"), "profile-ui", 3.0, replicas=2, ranks=2, min_steps=2,
                      token=TOKEN) as url:
        yield url


def _profile_next_step(page) -> str:
    """Click "Profile next step": the server asks for the first step every process hears of before it begins, so
    the request is taken the first time (exact, never refused as already begun)."""
    page.click("#profile-next")
    page.wait_for_function("document.querySelector('#profile-msg').textContent.startsWith('requested')", timeout=10_000)
    rid = page.inner_text("#profile-msg").split()[1]
    row = f"#profile-list tr[data-profile='{rid}']"
    page.wait_for_selector(f"{row}[data-state='done'], {row}[data-state='failed'], {row}[data-state='expired']",
                           timeout=90_000)
    assert page.get_attribute(row, "data-state") == "done", page.inner_text(row)
    return rid


def test_choose_a_lane_profile_the_next_step_and_read_its_analysis(demo: str, page) -> None:
    sign_in(page, demo, TOKEN)
    page.goto(demo + "/#/run/1")
    page.wait_for_selector("#timeline .lane-label[data-lane='rank_1']")
    page.click("#timeline .lane-label[data-lane='rank_1']")
    assert page.input_value("#profile-lanes") == "rank_1"
    assert "selected" in page.get_attribute("#timeline .lane-label[data-lane='rank_1']", "class")
    page.uncheck("#profile-cuda")
    rid = _profile_next_step(page)
    # the request rides on the trainer's ingest replies; its rank_1 thread profiles one whole step and uploads
    page.wait_for_selector(
        f"#profile-list tr[data-profile='{rid}'][data-state='done'] a[data-link='report']", timeout=90_000
    )
    row = page.inner_text(f"#profile-list tr[data-profile='{rid}']")
    assert "uploaded" in row and "lanes rank_1" in row
    # the profiled window over rank_1 on the live timeline
    page.wait_for_function(
        f"JSON.parse(document.querySelector('#timeline').dataset.profiled || '[]').includes('{rid}')", timeout=30_000
    )
    # "on the timeline": the live timeline zooms to the profiled step, the window drawn over rank_1
    page.click(f"#profile-list tr[data-profile='{rid}'] button[data-link='timeline']")
    page.wait_for_function(
        f"JSON.parse(document.querySelector('#timeline').dataset.profiled || '[]').includes('{rid}')", timeout=10_000
    )
    page.screenshot(path=str(ARTIFACTS / "profiles.png"), full_page=False)
    page.locator("#timeline-h").scroll_into_view_if_needed()
    page.screenshot(path=doc_image("ui-profiles.png"), full_page=False)

    prof = httpx.get(f"{demo}/api/v1/profiles/{rid}", headers=AUTH).json()
    (proc,) = prof["processes"].values()
    assert proc["lanes"] == ["rank_0", "rank_1"] or "rank_1" in proc["lanes"]
    step = prof["request"]["steps"][0]
    assert proc["window"]["steps"] == [step]
    stages = {s["name"] for s in prof["analysis"]["stages"]}
    assert {"train_batch", "actor_compute_log_prob"} & stages, stages  # the demo's stages, recorded on rank_1's thread
    ops = prof["analysis"]["operators"]["operators"]  # the demo's workers run torch ops in their stages
    assert ops, prof["analysis"]["operators"]
    ops_el = f"document.querySelector(\"#profile-list tr[data-profile='{rid}'] details.profile-ops\")"
    page.evaluate("state.profiles.opened = null; state.profiles.load()")  # (the button above opened it for us)
    page.wait_for_function(f"{ops_el} && !{ops_el}.open")
    page.click(f"#profile-list tr[data-profile='{rid}'] details.profile-ops summary")
    first = page.get_attribute(f"#profile-list tr[data-profile='{rid}'] table.ops tr[data-op]", "data-op")
    assert first == ops[0]["name"]  # the largest self time first, as the API says
    # the list redraws as the run goes on: what the user opened stays open (it closed at each redraw, and once the
    # element this test held was gone)
    page.evaluate("state.profiles.load()")
    assert page.evaluate(f"{ops_el}.open")
    page.evaluate(f"{ops_el}.scrollIntoView({{block: 'nearest'}})")
    page.screenshot(path=str(ARTIFACTS / "profile-operators.png"), full_page=False)
    report = httpx.get(f"{demo}/api/v1/profiles/{rid}/report/timeline.html", headers=AUTH)
    assert report.status_code == 200 and "default-src 'none'" in report.headers["content-security-policy"]
    with page.context.expect_page() as new:
        page.click(f"#profile-list tr[data-profile='{rid}'] a[data-link='report']")
    rp = new.value
    rp.wait_for_load_state()
    rp.wait_for_selector("canvas")
    assert "train_batch" in rp.content() or "actor_compute_log_prob" in rp.content()
    rp.screenshot(path=doc_image("ui-profile-report.png"), full_page=False)


def test_profile_this_stage_from_the_step_breakdown(demo: str, page) -> None:
    sign_in(page, demo, TOKEN)
    page.goto(demo + "/#/run/1")
    page.wait_for_selector("#timeline .lane-label[data-lane='rank_0']")
    page.wait_for_selector("#profile-list")  # the profiles section is ready: its stage menu follows the timeline
    page.click("#timeline .lane-label[data-lane='rank_0']")
    page.uncheck("#profile-cuda")
    button = page.locator("#insight-step button[data-profile-stage='train_batch']")  # re-found: the cards refresh
    button.wait_for(timeout=30_000)
    button.click()
    page.wait_for_function("document.querySelector('#profile-msg').textContent.startsWith('requested')", timeout=10_000)
    rid = page.inner_text("#profile-msg").split()[1]
    assert page.input_value("#profile-stage") == "train_batch"
    page.wait_for_selector(f"#profile-list tr[data-profile='{rid}'][data-state='done']", timeout=90_000)
    assert "stage train_batch" in page.inner_text(f"#profile-list tr[data-profile='{rid}']")
    wait_until(
        lambda: httpx.get(f"{demo}/api/v1/profiles/{rid}", headers=AUTH).json()["analysis"]["state"] == "done",
        timeout=60,
        what="analysis",
    )
    prof = httpx.get(f"{demo}/api/v1/profiles/{rid}", headers=AUTH).json()
    stages = {s["name"] for s in prof["analysis"]["stages"]}
    # the train_batch state only (its nested actor_update included): no generation, no log-prob stages
    assert stages and stages <= {"train_batch", "actor_update"}, stages
