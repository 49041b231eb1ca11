"""The selected step (real Chromium, a live demo on a token server): the step table lists the slowest steps first, a
row selects its step everywhere (the cards show that step's numbers, the address says it), [ and ] move between
steps, and a reload keeps the selection."""

from __future__ import annotations

import pytest

from tests.e2e.test_ui import ARTIFACTS, browser_demo, sign_in

pytestmark = pytest.mark.e2e
TOKEN = "e2e-steps-token"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    yield from browser_demo(tmp_path_factory, "steps-ui", 1.0, TOKEN, replicas=2, ranks=2, min_steps=5)


def _durations(page) -> list[float]:
    return page.evaluate("[...document.querySelectorAll('#step-table tr[data-step]')].map(r => "
                         "state.stepTable.steps.find(s => s.step === +r.dataset.step).duration_s)")


def test_a_row_selects_its_step_everywhere_and_the_address_keeps_it(demo: str, page) -> None:
    sign_in(page, demo, TOKEN)
    page.goto(demo + "/#/run/1")
    page.wait_for_function("document.querySelectorAll('#step-table tr[data-step]').length >= 3", timeout=60_000)
    durations = _durations(page)
    assert durations == sorted(durations, reverse=True)  # the slowest first
    rows = page.eval_on_selector_all("#step-table tr[data-step]", "rs => rs.map(r => +r.dataset.step)")
    chosen = sorted(rows)[1]  # not the last step: the cards default to that one
    page.click(f"#step-table tr[data-step='{chosen}']")
    page.wait_for_function("document.querySelector('#insight-step .k').textContent"
                           f".startsWith('selected step ({chosen},')")
    assert f"step={chosen}" in page.url and "selected" in page.get_attribute(f"#step-table tr[data-step='{chosen}']",
                                                                              "class")
    assert f"(step {chosen})" in page.inner_text("#insight-wait .k")
    # utilization and overlap of exactly that step; the table's bubbles column is its idle share
    page.wait_for_function(f"document.querySelector('#insight-utilization .k').textContent.includes('(step {chosen})')")
    assert f"(step {chosen})" in page.inner_text("#insight-overlap .k")
    bubbles = page.inner_text(f"#step-table tr[data-step='{chosen}'] td:nth-child(8)")
    assert bubbles.endswith(" %") and 0 <= int(bubbles[:-2]) <= 100, bubbles
    assert "null" not in page.inner_text("#step-table")
    # the breakdown card shows whole numbers (wrapped, never cut with an ellipsis) and a readable profile button
    cut = page.eval_on_selector_all("#insight-step .breakdown li", "ls => ls.filter(l => l.scrollWidth > l.clientWidth "
                                    "|| getComputedStyle(l).textOverflow === 'ellipsis').length")
    assert cut == 0 and page.inner_text("#insight-step button[data-profile-stage]").strip() == "profile"
    page.screenshot(path=str(ARTIFACTS / "selected-step.png"))
    page.keyboard.press("]")  # the next step
    page.wait_for_function(f"location.hash.includes('step={chosen + 1}')")
    page.reload()
    page.wait_for_function(f"(document.querySelector('#insight-step .k') || {{}}).textContent?.startsWith("
                           f"'selected step ({chosen + 1},')", timeout=60_000)
    page.wait_for_selector(f"#step-table tr.selected[data-step='{chosen + 1}']", timeout=60_000)  # the steps are known
    page.keyboard.press("[")
    page.wait_for_function(f"location.hash.includes('step={chosen}')")
