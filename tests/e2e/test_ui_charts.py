"""Readable charts and one time range (real Chromium, a live demo on a token server): hover values in every chart's
legend table, one crosshair shared by the charts on the same axis, the selected step marked on every chart, a drag on
a chart zooming every chart and the timeline (and the reverse), the range and view surviving a reload through the
address, the keyboard shortcuts, log scale and full width, 24-hour time and thinned step labels."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.conftest import DemoPair, wait_until
from tests.e2e.test_ui import ARTIFACTS, browser_demo, sign_in

pytestmark = pytest.mark.e2e
TOKEN = "e2e-charts-token"
RECT = "e => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    yield from browser_demo(tmp_path_factory, "charts-ui", 0.8, TOKEN, replicas=3, ranks=2, min_steps=8)


def _open(page, demo: str, query: str = "") -> None:
    sign_in(page, demo, TOKEN)
    page.goto(f"{demo}/#/run/1{query}")
    page.wait_for_function("document.querySelectorAll('.chart[data-metric][data-points]').length >= 10", timeout=60_000)
    page.wait_for_function("(JSON.parse(document.querySelector('#timeline')?.dataset.steps || '[]')).length >= 5",
                           timeout=60_000)


def _over(page, metric: str) -> list[float]:
    page.locator(f".chart[data-metric='{metric}'] .u-over").scroll_into_view_if_needed()
    return page.eval_on_selector(f".chart[data-metric='{metric}'] .u-over", RECT)


def test_hover_values_a_shared_crosshair_and_the_selected_step_on_every_chart(demo: str, page) -> None:
    page.set_viewport_size({"width": 1440, "height": 1000})
    # a fixed range of steps: on the whole run of a live job every refresh widens the x axis, and the step under a
    # resting pointer moves on between the hover and the click
    _open(page, demo, "?steps=1-6")
    # the page fits a 1440 px window: no sideways scrolling
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    x, y, w, hgt = _over(page, "timing_s_step")
    page.mouse.move(x + w * 0.5, y + hgt / 2)
    at = page.inner_text(".chart[data-metric='timing_s_step'] .legend-table th.at")
    assert re.fullmatch(r"step \d+", at), at
    step = int(at.split()[1])
    # the value under the cursor is the chart's own data point at that step
    value = page.inner_text(".chart[data-metric='timing_s_step'] .legend-table td.cur")
    data = page.evaluate("(() => { const p = state.charts.find(c => c.root.closest('[data-metric=\"timing_s_step\"]'));"
                         " return [p.data[0], p.data[1]]; })()")
    expected = data[1][data[0].index(step)]
    assert value != "–" and abs(float(value) - expected) <= abs(expected) * 1e-3 + 1e-9, (value, expected)
    # min / max of the points in view (steps 1-6)
    stats = {k: float(page.inner_text(f".chart[data-metric='timing_s_step'] td[data-stat='{k}']"))
             for k in ("min", "max")}
    values = [v for x, v in zip(data[0], data[1]) if v is not None and 1 <= x <= 6]
    assert stats["min"] == pytest.approx(min(values), rel=1e-3) and stats["max"] == pytest.approx(max(values), rel=1e-3)
    # one crosshair: another chart on the step axis shows the same step
    assert page.inner_text(".chart[data-metric='critic_score_mean'] .legend-table th.at") == f"step {step}"
    page.locator(".chart[data-metric='timing_s_step']").screenshot(path=str(ARTIFACTS / "chart-hover.png"))
    # a click selects the step: every chart marks it, the address says it
    page.mouse.click(x + w * 0.5, y + hgt / 2)
    page.wait_for_function(f"location.hash.includes('step={step}')")
    marked = page.eval_on_selector_all(".chart[data-metric][data-points]", "cs => cs.map(c => c.dataset.selectedStep)")
    assert marked and all(m == str(step) for m in marked), marked
    # smoothing keeps the raw values behind the smoothed line, faint, in the same colour
    page.eval_on_selector("#smoothing", "e => { e.value = 0.6; e.dispatchEvent(new Event('input')); }")
    plot = "state.charts.find(p => p.root.closest('[data-metric=\"timing_s_step\"]'))"
    page.wait_for_function(f"{plot}?.series.length === 3", timeout=10_000)
    raw, smooth = page.evaluate(f"[{plot}.series[1], {plot}.series[2]].map(s => [s.label, s.stroke(), s.width])")
    assert raw[0].endswith("(raw)") and raw[1].startswith(smooth[1]) and raw[1] != smooth[1] and raw[2] < smooth[2]
    rows = ".chart[data-metric='timing_s_step'] .legend-table tr[data-series]"
    assert page.eval_on_selector_all(rows, "r => r.length") == 1


def test_a_drag_on_a_chart_zooms_every_chart_and_the_timeline_and_the_address_keeps_it(demo: str, page) -> None:
    _open(page, demo)
    x, y, w, hgt = _over(page, "timing_s_step")
    # the timeline's step marks lag behind the charts (they refresh on their own clock): the range must fetch them
    page.evaluate("state.timeline.stepMarks = state.timeline.stepMarks.slice(0, 2); "
                  "state.timeline._stepsLoadedAt = Date.now()")
    page.mouse.move(x + w * 0.15, y + hgt / 2)
    page.mouse.down()
    page.mouse.move(x + w * 0.6, y + hgt / 2, steps=6)
    page.mouse.up()
    page.wait_for_function("/steps=\\d+-\\d+/.test(location.hash)")
    a, b = map(int, re.search(r"steps=(\d+)-(\d+)", page.url).groups())
    assert a < b
    # every step chart shows exactly that range; the timeline shows those steps' time
    scales = page.evaluate("state.charts.filter(p => p.xKind === 'step').map(p => [p.scales.x.min, p.scales.x.max])")
    assert scales and all(s == [a, b] for s in scales), scales
    # (the range fetches the marks it lacks: wait for them before reading)
    page.wait_for_function(f"state.timeline.stepMarks.some(m => m[0] === {b})", timeout=30_000)
    marks = dict(page.evaluate("state.timeline.stepMarks"))
    # (within a microsecond: the range holds seconds, and ns / 1e9 * 1e9 is not always the same double at 1.7e18)
    try:
        page.wait_for_function(f"Math.abs(+document.querySelector('#timeline').dataset.toNs - {marks[b]}) < 1e3")
    except PlaywrightTimeout:  # say what the page held instead (this wait once timed out in CI, never alone)
        seen = page.evaluate("JSON.stringify({range: state.range, view: state.timeline.view,"
                             " follow: state.timeline.follow, marks: state.timeline.stepMarks, hash: location.hash})")
        raise AssertionError(f"the timeline did not show steps {a}-{b} (end {marks[b]}): {seen}") from None
    assert json.loads(page.get_attribute("#range", "data-range"))["steps"] == [a, b]
    assert page.input_value("#range-from-step") == str(a) and page.input_value("#range-to-step") == str(b)
    # the insight cards and the ledger's waterfall follow the range too (issue 64: only charts and timeline did)
    page.wait_for_function("document.querySelector('#insights') && document.querySelector('#insights').dataset.window"
                           " !== 'last 300 s'", timeout=30_000)
    page.wait_for_function(f"(document.querySelector('#ledger-waterfall') || {{dataset: {{}}}}).dataset.steps === "
                           f"'{','.join(str(s) for s in range(a, b + 1))}'", timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "range-steps.png"))
    # a reload opens the same range
    page.reload()
    page.wait_for_function("document.querySelectorAll('.chart[data-metric][data-points]').length >= 10", timeout=60_000)
    page.wait_for_function(f"state.charts.filter(p => p.xKind === 'step').every(p => p.scales.x.min === {a} && "
                           f"p.scales.x.max === {b})", timeout=30_000)
    # the timeline's zoom drives the charts back: W zooms in around its middle, the step charts follow
    page.wait_for_function(f"Math.abs(+document.querySelector('#timeline').dataset.toNs - {marks[b]}) < 1e3",
                           timeout=30_000)
    page.keyboard.press("w")
    page.wait_for_function("!/steps=/.test(location.hash) && /from=\\d+&to=\\d+/.test(location.hash)", timeout=10_000)
    frm, to = map(int, re.search(r"from=(\d+)&to=(\d+)", page.url).groups())
    tl = page.eval_on_selector("#timeline", "e => [+e.dataset.fromNs, +e.dataset.toNs]")
    assert abs(tl[0] / 1e6 - frm) <= 1 and abs(tl[1] / 1e6 - to) <= 1
    time_range = page.evaluate("state.rangeNow().secs")
    assert time_range[1] - time_range[0] < (marks[b] - marks[a - 1 if a - 1 in marks else a]) / 1e9
    # the picker: the whole run again
    page.select_option("#range-preset", "")  # the one "whole run" control
    page.wait_for_function("!/from=|steps=|last=/.test(location.hash)")
    assert page.input_value("#range-preset") == ""


def test_a_range_change_says_it_is_loading_until_its_views_have_drawn_it(demo: str, page) -> None:
    _open(page, demo)
    page.wait_for_function("!!state.prom")
    assert page.eval_on_selector("#range-loading", "e => e.hidden")
    # the Prometheus panels' fetch for the new range held back: the hint stays until it is let go
    page.evaluate("window.held = []; const refresh = state.prom.refresh.bind(state.prom); state.prom.refresh = () => "
                  "new Promise(done => window.held.push(() => refresh().then(done, done))); 0")
    page.select_option("#range-preset", "300")
    page.wait_for_selector("#range-loading:not([hidden])", timeout=5_000)
    assert page.inner_text("#range-loading") == "loading the range…"
    page.wait_for_timeout(500)
    assert page.is_visible("#range-loading")  # (the timeline's spans came long ago; the panels have not)
    page.evaluate("window.held.splice(0).forEach(go => go())")
    page.wait_for_selector("#range-loading", state="hidden", timeout=10_000)


def test_the_picker_the_minimap_and_the_time_charts(demo: str, page) -> None:
    _open(page, demo, "?last=900")
    assert page.input_value("#range-preset") == "900"
    page.wait_for_function("+document.querySelector('#minimap').dataset.steps >= 5", timeout=30_000)
    # the minimap: a drag across it chooses a step range
    box = page.eval_on_selector("#minimap", RECT)
    page.mouse.move(box[0] + box[2] * 0.3, box[1] + box[3] / 2)
    page.mouse.down()
    page.mouse.move(box[0] + box[2] * 0.7, box[1] + box[3] / 2, steps=4)
    page.mouse.up()
    page.wait_for_function("/steps=\\d+-\\d+/.test(location.hash)")
    assert page.input_value("#range-preset") == "custom"
    page.locator("#minimap").screenshot(path=str(ARTIFACTS / "minimap.png"))
    # by time: 24-hour clock ticks on the x axis, the timeline's cursor moves the time charts' crosshair
    drawn = int(page.get_attribute("#charts", "data-refreshed") or 0)
    page.click("#x-time")
    page.wait_for_function(f"+document.querySelector('#charts').dataset.refreshed > {drawn} && "
                           "state.charts.some(p => p.xKind === 'time')", timeout=30_000)
    ticks = page.evaluate("state.charts.find(p => p.xKind === 'time').axes[0]._values")
    assert ticks and all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t) for t in ticks if t), ticks
    page.select_option("#range-preset", "")  # the one "whole run" control
    page.wait_for_function("!/steps=/.test(location.hash)")
    # the mouse moves over the timeline as a person's would, a little at a time, until every time chart's crosshair
    # follows it (the views redraw on the whole run after the reset: a chart rebuilt after one hover has not seen it)
    moves = iter(range(10_000))

    def crosshairs_follow() -> bool:
        size = page.eval_on_selector("#timeline canvas", "e => [e.clientWidth, e.clientHeight]")
        page.hover("#timeline canvas", position={"x": size[0] * (0.55 + 0.01 * (next(moves) % 10)), "y": size[1] * 0.6})
        return bool(page.evaluate("state.charts.filter(p => p.xKind === 'time').every(p => p.cursor.idx !== null && "
                                  "p.cursor.idx !== undefined)"))

    wait_until(crosshairs_follow, timeout=30, interval=0.3, what="the time charts' crosshairs following the timeline")
    at = page.eval_on_selector(".chart[data-metric] .legend-table th.at", "e => e.textContent")
    assert re.fullmatch(r"\d\d:\d\d:\d\d", at), at


def test_shortcuts_log_scale_full_width_and_step_labels(demo: str, page) -> None:
    _open(page, demo)
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("?")
    assert page.is_visible("#shortcuts") and "W / S" in page.inner_text("#shortcuts")
    page.screenshot(path=str(ARTIFACTS / "shortcuts.png"))
    page.keyboard.press("Escape")
    assert not page.is_visible("#shortcuts")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "metric-search"
    page.keyboard.type("critic_score")
    page.wait_for_function("location.hash.includes('q=critic_score')")
    page.keyboard.press("Escape")
    # A / D pan the timeline by a fifth of its view
    before = page.eval_on_selector("#timeline", "e => [+e.dataset.fromNs, +e.dataset.toNs]")
    page.keyboard.press("d")
    page.wait_for_function(f"+document.querySelector('#timeline').dataset.fromNs > {before[0]}")
    after = page.eval_on_selector("#timeline", "e => [+e.dataset.fromNs, +e.dataset.toNs]")
    assert after[1] - after[0] == pytest.approx(before[1] - before[0], rel=0.01)
    # the search survived as the address's q: a reload filters the same
    page.reload()
    page.wait_for_function("document.querySelector('#metric-search')?.value === 'critic_score'", timeout=60_000)
    page.wait_for_function("document.querySelectorAll('.chart[data-metric]:not([hidden])').length > 0", timeout=30_000)
    shown = page.eval_on_selector_all(".chart[data-metric]:not([hidden])", "els => els.map(e => e.dataset.metric)")
    assert shown and all("critic_score" in m for m in shown), shown
    # log scale (positive data) and full width
    chart = ".chart[data-metric='critic_score_mean']"
    page.wait_for_selector(f"{chart}[data-points]", timeout=30_000)
    narrow = page.eval_on_selector(chart, "e => e.getBoundingClientRect().width")
    page.click(f"{chart} button[data-tool='wide']")
    wide = page.eval_on_selector(chart, "e => e.getBoundingClientRect().width")
    assert wide > narrow * 1.8
    positive = page.evaluate("state.charts.find(p => p.root.closest('[data-metric=\"critic_score_mean\"]'))"
                             ".data[1].every(v => v === null || v > 0)")
    page.click(f"{chart} button[data-tool='log']")
    plot = "state.charts.find(p => p.root.closest('[data-metric=\"critic_score_mean\"]'))"
    page.wait_for_function(f"{plot}?.scales.y.distr === {3 if positive else 1}", timeout=10_000)
    if not positive:  # the button says why it refused
        assert "above 0" in page.get_attribute(f"{chart} button[data-tool='log']", "title")
    # step labels on the timeline never overlap (thinned to what fits), ticks at round times in 24-hour form
    page.fill("#metric-search", "")
    labels = json.loads(page.get_attribute("#timeline", "data-step-labels"))
    assert labels
    ticks = json.loads(page.get_attribute("#timeline", "data-ticks"))
    assert all(re.fullmatch(r"\d\d:\d\d(:\d\d(\.\d{1,3})?)?", t) for t in ticks), ticks


def test_the_lane_filter_and_its_page_in_the_address(demo: str, page) -> None:
    _open(page, demo)
    page.fill("#lane-filter", "replica")
    page.wait_for_function("document.querySelector('#timeline').dataset.laneCount === '3'", timeout=10_000)
    assert "lanes=replica" in page.url and page.inner_text("#lanes-matched") == "3 of 5 lanes match"
    page.reload()
    page.wait_for_function("document.querySelector('#lane-filter')?.value === 'replica' && "
                           "document.querySelector('#timeline').dataset.laneCount === '3'", timeout=60_000)
    page.fill("#lane-filter", "rank_1, replica_0")  # any of the parts
    page.wait_for_function("document.querySelector('#timeline').dataset.laneCount === '2'", timeout=10_000)
    page.fill("#lane-filter", "no-such-lane")
    page.wait_for_function("document.querySelector('#timeline').dataset.laneCount === '0'", timeout=10_000)
    assert page.inner_text("#lanes-matched") == "0 of 5 lanes match"


def test_the_exports_carry_steps_through_the_signed_in_browser(demo: str, page) -> None:
    _open(page, demo)
    with page.expect_download() as dl:
        page.click("#export-trace")
    trace = json.loads(open(dl.value.path()).read())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    slices = [e for e in events if e.get("ph") == "X"]
    steps_track = [e for e in slices if re.fullmatch(r"step \d+", str(e.get("name", "")))]
    assert len(steps_track) >= 5  # the steps track
    stepped = [e for e in slices if isinstance(e.get("args", {}).get("step"), int)]
    assert len(stepped) >= len(slices) * 0.8, (len(stepped), len(slices))  # the step on (nearly) every slice
    with page.expect_download() as dl:
        page.click("#export-csv")
    lines = open(dl.value.path()).read().splitlines()
    header = lines[0].split(",")
    step_col = header.index("step")
    steps = [row.split(",")[step_col] for row in lines[1:] if row.split(",")[step_col]]
    assert steps and all(re.fullmatch(r"\d+", x) for x in steps)  # integer steps, never "1.0"
    from rl_insight.export.points import INSIGHT_PREFIX
    assert any(row.startswith(INSIGHT_PREFIX + "step/duration_s,") for row in lines[1:])  # the insight metrics too


def test_compare_names_runs_and_shows_both_cards_and_timelines(demo_pair: DemoPair, page) -> None:
    """Compare on a token server: two runs of the demo, opened by URL side by side."""
    demo, a, b = demo_pair.url, demo_pair.base, demo_pair.slow
    sign_in(page, demo, demo_pair.token)
    page.goto(f"{demo}/#/run/{a}?compare={b}")  # opened by URL: names must not depend on the runs list
    page.wait_for_function("document.querySelectorAll('#compare-insights [data-card=\"insight-overlap\"]').length "
                           "=== 2", timeout=30_000)
    heads = page.eval_on_selector_all("#compare-insights h4", "els => els.map(e => e.textContent)")
    assert heads == ["rl-insight-demo/base", "rl-insight-demo/slow"]
    page.wait_for_function(
        "document.querySelectorAll('.chart[data-metric=\"critic_score_mean\"] .legend-table tr[data-series]').length"
        " === 2", timeout=30_000
    )
    legend = page.eval_on_selector_all(
        '.chart[data-metric="critic_score_mean"] .legend-table tr[data-series]', "els => els.map(e => e.dataset.series)"
    )
    # the part the names share is left out of the legend, the part that differs kept (issue 49 item 19)
    assert sorted(legend) == ["…base", "…slow"], legend
    # a run legend names each run's colour; the runs' own values differ (the demo seeds each run by its name)
    assert page.eval_on_selector_all("#run-legend .item", "els => els.map(e => e.textContent)") == [
        "rl-insight-demo/base", "rl-insight-demo/slow"]
    curves = page.evaluate("(() => { const p = state.charts.find(c => "
                           "c.root.closest('[data-metric=\"critic_score_mean\"]')); "
                           "return [p.data[1], p.data[2], p.series[1].stroke(), p.series[2].stroke()]; })()")
    shared = [(x, y) for x, y in zip(curves[0], curves[1]) if x is not None and y is not None]
    assert shared and any(x != y for x, y in shared), shared  # not the same curve twice
    assert curves[2] != curves[3]
    # the config: one column per run, only the keys that differ by default
    assert page.eval_on_selector("#run-config", "e => e.open")
    heads = page.eval_on_selector_all("#run-config th", "els => els.map(e => e.textContent)")
    assert heads == ["key", "rl-insight-demo/base", "rl-insight-demo/slow"]
    differing = page.eval_on_selector_all("#run-config tr[data-key]", "els => els.map(e => e.dataset.key)")
    assert differing and all(page.get_attribute(f"#run-config tr[data-key='{k}']", "class") == "differs"
                             for k in differing)
    page.click("#config-diff-only")  # every key again
    assert len(page.eval_on_selector_all("#run-config tr[data-key]", "els => els")) > len(differing)
    # the Prometheus sections (or their honest absence) for every run, not only the first
    page.wait_for_selector(f".prom-sections[data-run-id='{b}'] > *", timeout=30_000)
    # both timelines, stacked; a step click shows that step in both runs
    page.wait_for_function(
        f"document.querySelector('.timeline[data-run-id=\"{b}\"]')?.dataset.laneCount === '6'", timeout=30_000
    )
    page.wait_for_function("state.timelines.every(t => (t.stepMarks || []).some(m => m[0] === 3))", timeout=30_000)
    page.evaluate("showStep(3)")
    for i in (0, 1):
        marks = dict(page.evaluate(f"state.timelines[{i}].stepMarks"))
        page.wait_for_function(f"Math.abs(+state.timelines[{i}].el.dataset.toNs - {marks[3]}) < 1e3", timeout=10_000)
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)
