"""Explain in Chromium (issue 25), on a token server: the demo pair compared — the sentence names the slow replica
and the generation stage, the table splits the difference — and a step's critical path, as a chain and outlined on
each run's timeline."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.e2e.test_ui import ARTIFACTS, _need_browser, _server, sign_in

pytestmark = pytest.mark.e2e
TOKEN = "e2e-explain-token"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    _need_browser()
    proc, url = _server(tmp_path_factory.mktemp("ui-explain"), TOKEN)
    try:
        for name, extra in (("base", ()), ("slow", ("--fault", "slow-replica", "--fault-step", "2"))):
            r = subprocess.run([sys.executable, "-m", "rl_insight", "demo", "--server-url", url, "--token", TOKEN,
                                "--steps", "7", "--step-seconds", "0.6", "--replicas", "4", "--ranks", "2",
                                "--experiment-name", name, *extra], capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, r.stdout + r.stderr
        runs = httpx.get(url + "/api/v1/runs", headers={"Authorization": f"Bearer {TOKEN}"}).json()["runs"]
        ids = {r["experiment_name"]: r["id"] for r in runs}
        yield url, ids["base"], ids["slow"]
    finally:
        proc.terminate()
        proc.wait(30)


def test_compare_says_where_the_time_went_and_draws_the_critical_path(pair, page) -> None:
    url, base, slow = pair
    sign_in(page, url, TOKEN)
    page.goto(f"{url}/#/run/{base}?compare={slow}&step=5")
    sentence = page.wait_for_selector(f"#compare-diff .diff-block[data-b='{slow}'] .diff-sentence", timeout=60_000)
    text = sentence.inner_text()
    assert "longer" in text and "vllm_generate" in text and "replica_3" in text, text
    first = page.eval_on_selector(f"#compare-diff table[data-b='{slow}'] tr[data-stage]", "r => r.dataset.stage")
    assert first == "vllm_generate"
    lane = page.eval_on_selector(f"#compare-diff table[data-b='{slow}'] tr[data-lane]", "r => r.dataset.lane")
    assert lane == "replica_3"
    # the selected step's critical path: a chain here, outlined on both runs' timelines
    page.wait_for_function("document.querySelector('#explain-step')?.dataset.step === '5'", timeout=30_000)
    assert "what would save time" in page.inner_text("#explain-step")
    page.wait_for_function(f"document.querySelector('.timeline[data-run-id=\"{slow}\"]')?.dataset.critical",
                           timeout=30_000)
    slow_path = json.loads(page.get_attribute(f".timeline[data-run-id='{slow}']", "data-critical"))
    assert slow_path["step"] == 5 and "replica_3" in slow_path["lanes"]
    assert json.loads(page.get_attribute("#timeline", "data-critical"))["step"] == 5
    page.locator("#compare-diff").screenshot(path=str(ARTIFACTS / "explain-diff.png"))
    page.screenshot(path=str(ARTIFACTS / "explain-compare.png"), full_page=True)
    # the slow run alone, at the step where the slow replica held the others up most (by the API): its path runs
    # through that replica, and its finishing with the others is what the card puts first
    headers = {"Authorization": f"Bearer {TOKEN}"}
    tails = {s: httpx.get(f"{url}/api/v1/runs/{slow}/critical-path", params={"step": s}, headers=headers).json()[
        "what_if"] for s in range(3, 8)}
    step = max(tails, key=lambda s: tails[s]["tail_s"])
    assert tails[step]["tail_lane"] == "replica_3"
    page.goto(f"{url}/#/run/{slow}?step={step}")
    page.wait_for_function(f"document.querySelector('#explain-step')?.dataset.step === '{step}'", timeout=60_000)
    best = page.inner_text("#cp-whatif .best")
    assert "long-tail replica" in best and "replica_3" in best, (best, tails[step])
    page.locator("#explain-step").screenshot(path=str(ARTIFACTS / "explain-step.png"))
