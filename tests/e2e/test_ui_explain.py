"""Explain in Chromium (issue 25), on a token server: the demo pair compared — the sentence names the slow replica
and the generation stage, the table splits the difference — and a step's critical path, as a chain and outlined on
each run's timeline."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import DemoPair
from tests.e2e.test_ui import ARTIFACTS, sign_in

pytestmark = pytest.mark.e2e


def test_compare_says_where_the_time_went_and_draws_the_critical_path(demo_pair: DemoPair, page) -> None:
    url, base, slow, token = demo_pair.url, demo_pair.base, demo_pair.slow, demo_pair.token
    sign_in(page, url, token)
    page.goto(f"{url}/#/run/{base}?compare={slow}&step=5")
    sentence = page.wait_for_selector(f"#compare-diff .diff-block[data-b='{slow}'] .diff-sentence", timeout=60_000)
    text = sentence.inner_text()
    assert "longer" in text and "vllm_generate" in text and demo_pair.slow_lane in text, text
    first = page.eval_on_selector(f"#compare-diff table[data-b='{slow}'] tr[data-stage]", "r => r.dataset.stage")
    assert first == "vllm_generate"
    lane = page.eval_on_selector(f"#compare-diff table[data-b='{slow}'] tr[data-lane]", "r => r.dataset.lane")
    assert lane == demo_pair.slow_lane
    # where the slow run's extra device-seconds went (the goodput ledger): the long tail first
    assert page.inner_text(f"#compare-diff .diff-block[data-b='{slow}'] .diff-ledger").startswith("B spends ")
    reason = page.eval_on_selector(f"#compare-diff table[data-b='{slow}'] tr[data-reason]", "r => r.dataset.reason")
    assert reason == "waiting: long-tail replica"
    # the selected step's critical path: a chain here, outlined on both runs' timelines
    page.wait_for_function("document.querySelector('#explain-step')?.dataset.step === '5'", timeout=30_000)
    assert "what would save time" in page.inner_text("#explain-step")
    page.wait_for_function(f"document.querySelector('.timeline[data-run-id=\"{slow}\"]')?.dataset.critical",
                           timeout=30_000)
    slow_path = json.loads(page.get_attribute(f".timeline[data-run-id='{slow}']", "data-critical"))
    assert slow_path["step"] == 5 and demo_pair.slow_lane in slow_path["lanes"]
    assert json.loads(page.get_attribute("#timeline", "data-critical"))["step"] == 5
    page.locator("#compare-diff").screenshot(path=str(ARTIFACTS / "explain-diff.png"))
    page.screenshot(path=str(ARTIFACTS / "explain-compare.png"), full_page=True)
    # the slow run's steps: its ledger as a waterfall from all device time to what trained, adding up, and its tokens
    page.goto(f"{url}/#/run/{slow}")
    page.wait_for_selector(f"#ledger-waterfall[data-run-id='{slow}'] .lg-useful", timeout=60_000)
    rows = page.eval_on_selector_all("#ledger-waterfall .lg-row", "rs => rs.map(r => [r.dataset.reason, "
                                     "+r.dataset.share])")
    assert rows[0] == ["all device time", 1.0] and rows[-1][0] == "training"
    assert rows[1][0] == "generating" or rows[1][1] >= rows[2][1]  # the largest loss first
    assert abs(sum(share for _, share in rows[1:]) - 1.0) < 0.01, rows  # the losses and the goodput tile the total
    assert "filtered" in page.inner_text("#ledger-tokens")  # --filter-share 0.25: the token ledger reports it
    goodput = page.eval_on_selector_all("#step-table td[data-col='goodput']", "ts => ts.map(t => t.textContent)")
    assert goodput and all(g.endswith(" %") for g in goodput), goodput
    tokens = page.eval_on_selector_all("#step-table td[data-col='trained_tokens']", "ts => ts.map(t => t.textContent)")
    assert tokens and tokens[0] != "–"
    # a price typed on the page (the server has none): the cost in all, a step and per 1,000 trained-on tokens, and
    # each step's cost in the table
    assert not page.query_selector("#step-table td[data-col='cost']")
    page.fill("#ledger-price", "3.6")
    page.press("#ledger-price", "Enter")
    page.wait_for_selector("#step-table td[data-col='cost']", timeout=10_000)
    total = page.eval_on_selector("#ledger-waterfall .lg-total", "r => r.querySelector('.lg-value').textContent")
    device_s, money = float(total.split("·")[1].split()[0]), float(total.split("·")[2])
    assert abs(money - device_s * 0.001) <= 2e-4, total  # 3.6 a device-hour = 0.001 a device-second (as displayed)
    assert "per 1,000 trained-on tokens" in page.inner_text("#ledger-tokens")
    page.locator("#steps-details").screenshot(path=str(ARTIFACTS / "ledger-waterfall.png"))
    page.set_viewport_size({"width": 1600, "height": 1000})
    page.locator("#steps-details").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "ledger-steps-1600.png"))
    page.evaluate("localStorage.removeItem('rl-insight.gpu-hour-cost')")
    # the slow run alone, at the step where the slow replica held the others up most (by the API)
    headers = {"Authorization": f"Bearer {token}"}
    tails = {s: httpx.get(f"{url}/api/v1/runs/{slow}/critical-path", params={"step": s}, headers=headers).json()[
        "what_if"] for s in range(3, 8)}
    step = max(tails, key=lambda s: tails[s]["tail_s"])
    assert tails[step]["tail_lane"] == demo_pair.slow_lane
    # (only the address's hash changes: until the run page replaces it, the compare view's card, which may be of the
    # same step, is still in the document; it is marked so that the wait is for the new page's card)
    page.eval_on_selector("#explain-step", "el => { el.dataset.old = '1'; }")
    page.goto(f"{url}/#/run/{slow}?step={step}")
    page.wait_for_function(f"(el => el && !el.dataset.old && el.dataset.step === '{step}')"
                           f"(document.querySelector('#explain-step'))", timeout=60_000)
    # the card puts first what saves most by its own numbers (on a loaded machine the idle gaps of a step can
    # outweigh the tail, the demo's timings being real, and the step's spans may still move between two reads)
    saves = page.eval_on_selector_all("#cp-whatif span[data-saves-s]", "els => els.map(e => +e.dataset.savesS)")
    assert saves and saves[0] == max(saves) > 0, saves
    assert page.get_attribute("#cp-whatif span[data-saves-s]:first-child", "class") == "best"
    assert f"long-tail replica finishing with the others ({demo_pair.slow_lane})" in page.inner_text("#cp-whatif")
    page.locator("#explain-step").screenshot(path=str(ARTIFACTS / "explain-step.png"))
