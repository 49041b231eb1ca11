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
