"""The MoE heatmap in Chromium (issue 26), on a token server: `demo --moe` logs verl's rollout/moe/* metrics and each
expert's share; the run page draws layers × steps and layers × experts and names the hot layer and expert."""

from __future__ import annotations

import pytest

from tests.conftest import DemoPair
from tests.e2e.test_ui import ARTIFACTS, browser_demo, sign_in

pytestmark = pytest.mark.e2e
TOKEN = "e2e-moe-token"
RECT = "c => { const r = c.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    yield from browser_demo(tmp_path_factory, "moe-ui", 0.8, TOKEN, replicas=2, ranks=2, min_steps=6,
                            extra=("--moe",))


def test_the_heatmap_names_the_hot_layer_and_expert(demo: str, page) -> None:
    sign_in(page, demo, TOKEN)
    page.goto(demo + "/#/run/1")
    page.wait_for_function("document.querySelector('#moe')?.dataset.hotExpert === '7/5'", timeout=60_000)
    assert page.is_visible("#moe-h") and page.get_attribute("#moe", "data-hot-layer") == "7"
    text = page.inner_text("#moe-sentence")
    assert "layer 7 is the most imbalanced" in text and "the hottest expert is 5 of layer 7" in text, text
    assert page.eval_on_selector("#moe-steps", "c => c.width > 0") and page.eval_on_selector("#moe-experts",
                                                                                               "c => c.width > 0")
    page.locator("#moe").scroll_into_view_if_needed()
    box = page.eval_on_selector("#moe-experts", RECT)
    page.mouse.move(box[0] + 70, box[1] + 3)  # layer 0, the first expert: a value in the tooltip
    assert "layer 0 · expert" in page.inner_text("#tooltip")
    page.locator("#moe").screenshot(path=str(ARTIFACTS / "ui-moe.png"))


def test_a_run_without_moe_metrics_has_no_section(demo_pair: DemoPair, page) -> None:
    sign_in(page, demo_pair.url, demo_pair.token)
    page.goto(f"{demo_pair.url}/#/run/{demo_pair.base}")
    page.wait_for_selector(".chart[data-metric][data-points]", timeout=60_000)
    assert not page.is_visible("#moe") and not page.is_visible("#moe-h")
