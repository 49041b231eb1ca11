"""Stack snapshots from the browser (real headless Chromium, the demo's `--fault hang`): the server notices the
stalled lanes and takes a snapshot by itself, the stalled-lane card names the odd one out, a click opens the
groups and marks the moment and the odd lane on the timeline; the button takes another, which says nobody moved."""

from __future__ import annotations

import pytest

from tests.e2e.test_ui import ARTIFACTS, _need_browser, doc_image, running_demo, sign_in

pytestmark = pytest.mark.e2e
TOKEN = "e2e-stacks-token"
# a lane counts as stalled after 5 s (3x its usual time otherwise); insights (and the stall watch) every 2 s
FAST_STALLS = {"stalled_lane_min_s": 5.0, "insights_interval_s": 2.0, "stall_step_s": 0.0}


@pytest.fixture(scope="module")
def hung_demo(tmp_path_factory: pytest.TempPathFactory):
    _need_browser()
    with running_demo(tmp_path_factory.mktemp("ui-stacks"), "stacks-ui", 1.0, replicas=2, ranks=4, min_steps=1,
                      extra=("--fault", "hang"), token=TOKEN, config=FAST_STALLS) as url:
        yield url


def test_the_stalled_card_names_the_hung_rank_and_the_timeline_marks_it(hung_demo: str, page) -> None:
    sign_in(page, hung_demo, TOKEN)
    page.goto(hung_demo + "/#/run/1")
    page.wait_for_selector("#timeline .lane-label[data-lane='rank_2']")
    # the automatic snapshot, on the stalled-lane card (cards refresh every 10 s; the snapshot completes within the
    # processes' 10 s heartbeat)
    page.wait_for_function("(document.querySelector('#insight-stalled .stack-summary') || {}).textContent?.includes("
                           "'the odd one out')", timeout=120_000)
    card = page.inner_text("#insight-stalled")
    assert "rank_2 is in `wedged_rank`" in card and "3 of 4 (rank_0-1, rank_3) are in `all_reduce`" in card, card
    assert "rank_2: train_batch" in card  # the stalled lane itself
    # issue 51: the verdict on the card, and the run called hung in its header, without a click
    verdict = page.inner_text("#stalled-verdict")
    assert verdict.startswith("hung: a rank never reached the collective: rank_2") and "all_reduce" in verdict
    assert page.get_attribute("#stalled-verdict", "class") == "verdict hung"
    page.wait_for_function("document.querySelector('#run-status').textContent === 'hung'", timeout=30_000)
    assert "rank_2" in page.inner_text("#run-why")
    page.click("#stalled-stacks")
    sid = page.get_attribute("#stalled-stacks", "data-snapshot")
    odd = page.wait_for_selector(f"#stack-{sid}[open] .stack-group.odd[data-labels='rank_2']")
    assert "wedged_rank" in odd.inner_text() and "in train_batch for" in odd.inner_text()
    assert "automatic" in page.inner_text(f"#stack-{sid} summary")
    page.wait_for_function("JSON.parse(document.querySelector('#timeline').dataset.snapshot || '{}')"
                           ".odd?.includes('rank_2')")
    assert "odd" in page.get_attribute("#timeline .lane-label[data-lane='rank_2']", "class")
    assert "rank_2 never reached the collective" in page.inner_text(f"#verdict-{sid}")  # opened: what to check
    page.locator(f"#stack-{sid}").scroll_into_view_if_needed()
    page.screenshot(path=doc_image("ui-stacks.png"), full_page=False)
    for width in (1280, 1600):  # the header and the card, as a person sees them
        page.set_viewport_size({"width": width, "height": 900})
        page.locator("#run-status").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"stacks-verdict-{width}.png"), full_page=False)
    page.locator("#timeline-h").scroll_into_view_if_needed()
    page.screenshot(path=doc_image("ui-stacks-timeline.png"), full_page=False)

    # one more by hand: the sentence says who moved since
    page.click("#stacks-take")
    page.wait_for_function("document.querySelector('#stacks-msg').textContent.startsWith('asked')", timeout=10_000)
    page.wait_for_function("[...document.querySelectorAll('#stacks-list details[data-state=complete]')].some(d => "
                           "d.querySelector('.stack-summary').textContent.includes('did not move') || "
                           "d.querySelector('.stack-summary').textContent.includes('nobody moved'))", timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "stacks.png"), full_page=True)


def test_the_hang_link_opens_the_step_that_hangs_with_the_culprit_marked(hung_demo: str, page) -> None:
    """Issue 64: the notification's link (`#/run/N?step=S`, S the step that hangs: one after the last that ended)
    opened the healthy step before the hang — the hung states off-screen, no minimap bar, no lane marked. Opened
    fresh, the timeline shows the running step up to now with rank_2's open state, the culprit is outlined without a
    click, and the minimap has a red bar for the running step."""
    import httpx

    h = {"Authorization": f"Bearer {TOKEN}"}
    verdict = None
    for _ in range(120):
        verdict = httpx.get(hung_demo + "/api/v1/runs/1/verdict", headers=h).json()
        if verdict["status"] == "hung" and verdict["verdict"]:
            break
        page.wait_for_timeout(1000)
    assert verdict and verdict["status"] == "hung", verdict
    v = verdict["verdict"]
    last = httpx.get(hung_demo + "/api/v1/runs/1", headers=h).json()["last_step"]
    assert v["culprits"] == ["rank_2"] and v["step"] == int(last) + 1 and f"in step {v['step']}" in v["sentence"]
    opened = [s for s in httpx.get(hung_demo + "/api/v1/spans/open", headers=h).json()["spans"]
              if s["lane"] == "rank_2"]
    assert opened, "rank_2 holds its state"
    sign_in(page, hung_demo, TOKEN)
    page.goto(hung_demo + f"/#/run/1?step={v['step']}")
    page.wait_for_selector("#timeline .lane-label[data-lane='rank_2']")
    page.wait_for_function("JSON.parse(document.querySelector('#timeline').dataset.snapshot || '{}')"
                           ".odd?.includes('rank_2')", timeout=60_000)
    assert "odd" in page.get_attribute("#timeline .lane-label[data-lane='rank_2']", "class")
    page.wait_for_function(f"+document.querySelector('#timeline').dataset.toNs >= {opened[0]['start_ns']}",
                           timeout=30_000)
    view = page.evaluate("[+document.querySelector('#timeline').dataset.fromNs, "
                         "+document.querySelector('#timeline').dataset.toNs]")
    assert view[0] <= opened[0]["start_ns"] <= view[1], (view, opened[0]["start_ns"])  # the hung state is on screen
    page.wait_for_function(f"document.querySelector('#minimap')?.dataset.running === "
                           f"'{v['step']}'", timeout=30_000)
    page.wait_for_function("(document.querySelector('#critical-path-none') || {}).textContent?.includes("
                           f"'Step {v['step']} is still running')", timeout=30_000)
    for width in (1280, 1600):
        page.set_viewport_size({"width": width, "height": 900})
        page.locator("#timeline-h").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"hang-link-{width}.png"), full_page=False)
