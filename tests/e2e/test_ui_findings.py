"""The findings card (static/findings.js) in Chromium: a run with a rank that computes longer from step 10 shows
`rank_3 · straggler · compute` on the first screen; a click shows its last step with rank_3 banded on the timeline."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.conftest import start_server
from tests.e2e.test_ui import ARTIFACTS
from tests.unit.server.rooms.findings.test_findings_api import _job


def test_the_card_names_the_straggler_and_a_click_bands_its_lane(tmp_path: Path, page) -> None:
    srv = start_server(tmp_path, stall_snapshots=False)
    try:
        assert httpx.post(srv.url + "/api/v1/ingest", json=_job(8, 24, slow_rank=3, from_step=10, seed=6)
                          ).status_code == 200
        srv.app.state.st.writer.flush(10)
        rid = httpx.get(srv.url + "/api/v1/runs").json()["runs"][0]["id"]
        page.goto(f"{srv.url}/#/run/{rid}")
        item = page.wait_for_selector("#insight-findings .finding.open[data-subject=rank_3]")
        assert item.get_attribute("data-cause") == "compute" and "straggler" in item.inner_text()
        assert page.evaluate("document.querySelector('#insight-findings').getBoundingClientRect().top") < 900
        page.wait_for_selector("#timeline canvas")
        item.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "findings-card.png"))
        item.click()
        page.wait_for_function("() => (document.querySelector('#timeline').dataset.finding || '').includes('rank_3')")
        assert json.loads(page.eval_on_selector("#timeline", "e => e.dataset.finding")) == \
            {"lane": "rank_3", "kind": "straggler"}
        page.screenshot(path=str(ARTIFACTS / "findings.png"))
    finally:
        srv.stop()
