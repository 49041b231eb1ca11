"""The UI's Prometheus sections and alerts, on the real stack: Debian's Prometheus scraping a running demo
(stand-in vLLM, TransferQueue, dcgm/npu exporters, node_exporter), the server querying it, Chromium drawing it.

The demo injects an XID error on GPU 0 at step 2 (`--fault xid`), so RLInsightGPUXidError fires.
Screenshots of each section go to test-artifacts/ (described in docs/ui.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rl_insight.semantics import panels
from tests.conftest import wait_until
from tests.e2e.test_ui import ARTIFACTS
from tests.integration.conftest import Stack, cli, start_stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = "ui-prom"


@pytest.fixture(scope="module")
def prom_demo(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("uiprom") / "home"
    stack = start_stack(home, alertmanager=True)
    env = {**os.environ, "RL_INSIGHT_HOME": str(home), "RL_INSIGHT_TOKEN": stack.token}
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rl_insight",
            "demo",
            "--server-url",
            stack.ingest_url,
            "--steps",
            "400",
            "--step-seconds",
            "1.2",
            "--replicas",
            "3",
            "--ranks",
            "2",
            "--experiment-name",
            EXPERIMENT,
            "--fault",
            "xid",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    auth = {"Authorization": f"Bearer {stack.token}"}

    def run_id() -> int | None:
        runs = httpx.get(stack.ingest_url + "/api/v1/runs", headers=auth).json()["runs"]
        return next((r["id"] for r in runs if r["experiment_name"] == EXPERIMENT and (r["last_step"] or 0) >= 3), None)

    rid = wait_until(run_id, timeout=90, interval=0.5, what="demo steps in the run store")
    try:
        yield stack, rid, auth
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            out, _ = demo.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
            out, _ = demo.communicate()
        cli(home, "server", "stop")
        assert "fault injected: xid" in out, out[-2000:]


def _sections(stack: Stack, rid: int, auth: dict) -> dict[str, dict]:
    d = httpx.get(f"{stack.ingest_url}/api/v1/runs/{rid}/panels", headers=auth, timeout=30).json()
    return {s["id"]: s for s in d["sections"]}


def test_sections_have_the_demos_data_and_empty_ones_say_how_to_enable(prom_demo) -> None:
    stack, rid, auth = prom_demo
    want = {"vllm", "transfer_queue", "gpu", "npu", "host"}

    def ready() -> dict | None:
        s = _sections(stack, rid, auth)
        return s if all(s[k]["available"] for k in want) else None

    secs = wait_until(ready, timeout=60, interval=1, what="every section of the demo available")
    assert not secs["sglang"]["available"] and "disable_log_stats=False" in secs["sglang"]["enable"]
    # the panel requires the token like every read of runs
    assert httpx.get(f"{stack.ingest_url}/api/v1/runs/{rid}/panels/vllm").status_code == 401


def test_ui_numbers_equal_grafanas_queries_on_the_same_prometheus(prom_demo) -> None:
    """For every panel: the server's series equal what Grafana's dashboard expression returns from Prometheus
    for the same window, step and rate interval."""
    stack, rid, auth = prom_demo
    boards = {
        "vllm": "verl_trainer_v1_with_vllm_engine.json",
        "transfer_queue": "transfer_queue.json",
        "gpu": "hardware.json",
        "npu": "hardware.json",
        "host": "hardware.json",
    }
    wait_until(
        lambda: all(_sections(stack, rid, auth)[k]["available"] for k in boards), timeout=60, interval=1, what="data"
    )
    compared = 0
    for sid, board in boards.items():
        d = httpx.get(f"{stack.ingest_url}/api/v1/runs/{rid}/panels/{sid}", headers=auth, timeout=30).json()
        assert d["prometheus"]["state"] == "ok", d["prometheus"]
        grafana = json.loads((ROOT / "dashboards" / board).read_text())["panels"]
        section = panels.BY_ID[sid]
        for p in d["panels"]:
            exprs = next(
                g
                for g in grafana
                if g["title"] == p["title"]
                and any(
                    t.get("expr")
                    == panels.render(
                        section.panels[[x.id for x in section.panels].index(p["id"])].queries[0].expr,
                        'project=~"$project", experiment_name=~"$experiment_name"'
                        + (', replica=~"$replica"' if section.per_replica else ""),
                        "$__rate_interval",
                    )
                    for t in g.get("targets", [])
                )
            )["targets"]
            mine = {}
            for t in exprs:
                expr = (t["expr"].replace("$__rate_interval", d["rate_window"]).replace("$project", "rl-insight-demo")
                        .replace("$experiment_name", EXPERIMENT).replace("$replica", ".*"))
                r = httpx.get(
                    stack.prometheus_url + "/api/v1/query_range",
                    params={
                        "query": expr,
                        "start": f"{d['from_s']:.3f}",
                        "end": f"{d['to_s']:.3f}",
                        "step": f"{d['step_s']:g}",
                    },
                ).json()
                assert r["status"] == "success", (p["id"], r)
                for item in r["data"]["result"]:
                    name = panels.legend(t["legendFormat"], item["metric"]) or item["metric"].get("__name__", "value")
                    mine[name] = {float(ts): float(v) for ts, v in item["values"]}
            served = {s["name"]: {ts: v for ts, v in s["points"] if v is not None} for s in p["series"]}
            assert set(served) == set(mine), p["id"]
            for name, pts in served.items():
                assert pts == {ts: v for ts, v in mine[name].items() if v == v}, (
                    p["id"],
                    name,
                )  # NaN dropped on both sides
            compared += 1
    assert compared >= 35


def test_panels_and_a_firing_alert_in_the_browser(prom_demo, page) -> None:
    stack, rid, auth = prom_demo
    wait_until(lambda: any(a["alertname"] == "RLInsightGPUXidError" and a["state"] == "firing" for a in httpx.get(
        f"{stack.ingest_url}/api/v1/runs/{rid}/alerts", headers=auth).json()["active"]),
        timeout=90, interval=1, what="the injected XID alert firing")
    page.goto(stack.ingest_url + "/")
    page.fill("#token", stack.token)
    page.click("button[type=submit]")
    row = page.wait_for_selector(f"#runs-table tr[data-run-id='{rid}']")
    page.wait_for_selector(f"#runs-table tr[data-run-id='{rid}'] .badge.firing", timeout=20_000)
    assert "firing" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "runs-alerts.png"))
    row.click()
    alert = page.wait_for_selector(
        "#alerts .alert[data-alert='RLInsightGPUXidError'][data-state='firing']", timeout=30_000
    )
    text = alert.inner_text()
    assert "GPU 0" in text and "XID 79" in text and "What to check" in text
    alert.screenshot(path=str(ARTIFACTS / "ui-alerts.png"))
    page.wait_for_function("document.querySelectorAll('.chart[data-panel][data-points]').length >= 30", timeout=60_000)
    # the sections say when every panel has been drawn once: read then, not when 30 of them happen to be
    page.wait_for_function("+document.querySelector('#prom-sections').dataset.refreshed >= 1", timeout=60_000)
    kv = page.eval_on_selector('.chart[data-panel="vllm_kv_cache"]', "e => [+e.dataset.series, "
                                                                     "JSON.parse(e.dataset.last)]")
    assert kv[0] == 3 and [n for n, _ in kv[1]] == ["r0", "r1", "r2"]  # one line per replica
    assert all(v is not None and 0 <= v <= 1 for _, v in kv[1])
    xid = page.eval_on_selector('.chart[data-panel="gpu_xid"]', "e => JSON.parse(e.dataset.last)")
    assert dict(xid)[next(n for n, _ in xid if n.endswith("gpu0"))] == 79
    assert page.get_attribute("#sec-sglang", "data-available") == "0"
    assert "disable_log_stats=False" in page.inner_text("#sec-sglang")
    # axis labels in the panel's unit, formatted whole
    assert page.evaluate(
        "[fmtUnit('percentunit', 0.5), fmtUnit('s', 0.0123), fmtUnit('bytes', 2.5e9), fmtUnit('tps', 52500),"
        " fmtUnit('decmbytes', 61440), fmtUnit('s', 0.00025)]"
    ) == ["50%", "12.3 ms", "2.5GB", "52.5k tok/s", "61.4GB", "250 µs"]
    ticks = page.evaluate("state.prom.boxes.get('vllm_kv_cache').plot.axes[1]._values")  # the y labels uPlot drew
    assert ticks and all(t.endswith("%") for t in ticks), ticks
    # issue 49 item 18, at 1280 and 1600 px: every y axis as wide as its longest label (Token throughput read
    # "00 tok/s" for 500), every legend column shown, up to eight series without scrolling
    for width in (1280, 1600):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(800)  # (the charts follow the new width)
        fits = page.evaluate("""[...state.prom.boxes.values()].filter(b => b.plot).map(b => {
            const u = b.plot, ax = u.axes[1], ctx = u.ctx; ctx.save(); ctx.font = ax.font[0];
            const widest = Math.max(0, ...(ax._values || []).map(t => ctx.measureText(t).width / devicePixelRatio));
            ctx.restore();
            const table = u.root.parentElement.querySelector('.legend-table');
            const mean = table.querySelector('th:last-child').getBoundingClientRect();
            const box = u.root.parentElement.getBoundingClientRect();
            const rows = table.querySelectorAll('tr[data-series]').length;
            return [b.plot.root.closest('.chart').dataset.panel, ax._size >= widest, mean.right <= box.right + 1,
                    rows > 8 || table.scrollHeight <= table.clientHeight + 1];
        })""")
        bad = [f for f in fits if not all(f[1:])]
        assert fits and not bad, (width, bad)
        repeated = page.evaluate("[...state.prom.boxes.values()].filter(b => b.plot).map(b => b.plot.axes[0]._values"
                                 ".filter(Boolean)).filter(v => new Set(v).size !== v.length)")
        assert repeated == [], repeated  # a time label never twice on one axis (whole seconds at the least)
        page.locator("#sec-vllm").screenshot(path=str(ARTIFACTS / f"ui-engine-{width}.png"))
    for sid, shot in (("vllm", "ui-engine.png"), ("transfer_queue", "ui-transfer-queue.png"), ("gpu", "ui-gpu.png"),
                      ("npu", "ui-npu.png"), ("host", "ui-host.png")):
        if page.get_attribute(f"#sec-{sid}", "data-available") == "1":
            page.locator(f"#sec-{sid}").screenshot(path=str(ARTIFACTS / shot))
    # the panels follow the page's one time range: "last 5 min" queries that window, and their x axes show it in
    # 24-hour time; hovering one panel moves every panel's crosshair (and the timeline's line) to the same moment
    x_ticks = page.evaluate("state.prom.boxes.get('vllm_kv_cache').plot.axes[0]._values")
    assert x_ticks and all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t) for t in x_ticks if t), x_ticks
    drawn = int(page.get_attribute("#prom-sections", "data-refreshed"))
    page.select_option("#range-preset", "300")
    page.wait_for_function(f"+document.querySelector('#prom-sections').dataset.refreshed > {drawn}", timeout=30_000)
    lo, hi = page.evaluate("(() => { const s = state.prom.boxes.get('vllm_kv_cache').plot.scales.x; "
                           "return [s.min, s.max]; })()")
    assert 290 <= hi - lo <= 310, (lo, hi)
    box = page.eval_on_selector(".chart[data-panel='vllm_kv_cache'] .u-over", "e => { e.scrollIntoView(); "
                                "const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }")
    page.mouse.move(box[0] + box[2] * 0.9, box[1] + box[3] / 2)
    at = page.inner_text(".chart[data-panel='vllm_kv_cache'] .legend-table th.at")
    assert re.fullmatch(r"\d\d:\d\d:\d\d", at), at
    assert page.inner_text(".chart[data-panel='vllm_requests'] .legend-table th.at") == at
    assert page.get_attribute("#timeline", "data-hover-ns")


def test_who_is_told_silences_and_a_rule_in_two_clicks_on_the_run_page(prom_demo, page) -> None:
    """The alerts card says whether anyone is told, silences the run (who, until when; ended with a click) and adds
    an alert rule on a metric of the run: the managed Alertmanager and Prometheus behind it (docs/alerts.md)."""
    stack, rid, auth = prom_demo
    page.goto(stack.ingest_url + "/")
    page.fill("#token", stack.token)
    page.click("button[type=submit]")
    page.goto(f"{stack.ingest_url}/#/run/{rid}")
    page.wait_for_selector("#alerting[data-notifications='no-receiver']", state="attached", timeout=30_000)
    assert page.inner_text("#alerting-status") == "notify: no receiver ›"  # in the run's header line
    page.click("#alerting-status")  # and in words, with the buttons, asked
    assert "Notifications on, but no receiver is set" in page.inner_text("#alerting .notifications")

    page.click("#silence-run")
    row = page.wait_for_selector("#alerting .silence", timeout=20_000)
    # who set it: the signed-in token (issue 64: the body's claim was taken), the comment as the page wrote it
    assert "this run by admin (the server's token) until" in row.inner_text() and page.is_hidden("#silence-run")
    assert "silenced from the run page" in row.inner_text() and "sent as" not in row.inner_text()
    listed = httpx.get(f"{stack.ingest_url}/api/v1/alerting/silences", params={"run_id": rid}, headers=auth).json()
    assert [s["matchers"]["experiment_name"] for s in listed["silences"]] == [EXPERIMENT]

    page.click("#rule-toggle")
    page.fill("#rule-metric", "critic/score/mean")
    page.select_option("#rule-op", "above")
    page.fill("#rule-value", "-1000")
    page.click("#rule-add")  # the second click
    rule = page.wait_for_selector("#alerting .user-rule[data-rule='critic_score_mean_above']", timeout=20_000)
    assert "critic/score/mean above -1000 for" in rule.inner_text() and "s per step" in rule.inner_text()
    page.screenshot(path=str(ARTIFACTS / "ui-alerting.png"), full_page=False)
    page.locator("#alerting").screenshot(path=str(ARTIFACTS / "ui-alerting-card.png"))
    wait_until(lambda: any(a["labels"]["alertname"] == "critic_score_mean_above" and a["state"] == "firing"
                           and a["labels"]["experiment_name"] == EXPERIMENT for a in httpx.get(
        stack.prometheus_url + "/api/v1/alerts").json()["data"]["alerts"]), timeout=60,
        what="the rule added in the browser firing on the demo")

    # the rule's own silence, then the run's ended: the rule's stays, the run can be silenced again
    page.click("#alerting [data-silence-rule='critic_score_mean_above']")
    page.wait_for_function("document.querySelectorAll('#alerting .silence').length === 2", timeout=20_000)
    page.click("#alerting .silence:has-text('this run') button")
    page.wait_for_function("document.querySelectorAll('#alerting .silence').length === 1", timeout=20_000)
    assert "critic_score_mean_above by admin (the server's token) until" in page.inner_text("#alerting .silence")
    assert page.is_visible("#silence-run")
