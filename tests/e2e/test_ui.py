"""The built-in UI in real headless Chromium (Debian's package) driven by Playwright, on live demo data.

Screenshots are kept in test-artifacts/ (the CI uploads them when it keeps artifacts).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import answers_healthz, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_IMG = ROOT / "docs" / "img"
DOCS_IMAGES_ENV = "RL_INSIGHT_DOCS_IMAGES"  # `python -m tests --docs-images` sets it


def doc_image(name: str) -> str:
    """Where a screenshot docs/ shows is written: test-artifacts/ on every run (a run leaves the tree clean), docs/img/
    only when the docs' images are refreshed on purpose (`python -m tests --docs-images`)."""
    return str((DOCS_IMG if os.environ.get(DOCS_IMAGES_ENV) == "1" else ARTIFACTS) / name)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.e2e


def _need_browser() -> None:
    try:
        import playwright  # noqa: F401 - whether it imports is the question
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("playwright missing in CI (pip install -e '.[dev]')")
        pytest.skip("playwright not installed")
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium missing in CI; .ci/run installs Debian's chromium")
        pytest.skip("chromium not installed (apt-get install chromium)")


def _server(tmp: Path, token: str = "", config: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cfg = tmp / "server.json"
    import json

    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": port, "data_dir": str(tmp / "data"), "token": token,
                               **(config or {})}))
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers_healthz(url), timeout=30, what="server")
    return proc, url


def browser_demo(factory: pytest.TempPathFactory, experiment: str, step_seconds: float, token: str,
                 **kwargs) -> Iterator[str]:
    """The body of a module-scoped fixture: a token server with a demo feeding it, for Chromium tests."""
    _need_browser()
    with running_demo(factory.mktemp(experiment), experiment, step_seconds, token=token, **kwargs) as url:
        yield url


@contextmanager
def running_demo(tmp: Path, experiment: str, step_seconds: float, replicas: int, ranks: int, min_steps: int,
                 extra: tuple[str, ...] = (), token: str = "", config: dict | None = None) -> Iterator[str]:
    """An ingest server (with `token`, as every network-facing server has one, and `config`'s settings) and
    `rl-insight demo` feeding it, until `min_steps` steps are in the run store; its URL."""
    server, url = _server(tmp, token, config)
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rl_insight",
            "demo",
            "--server-url",
            url,
            "--steps",
            "500",
            "--step-seconds",
            str(step_seconds),
            "--replicas",
            str(replicas),
            "--ranks",
            str(ranks),
            "--experiment-name",
            experiment,
            *(["--token", token] if token else []),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import httpx

    auth = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        wait_until(
            lambda: (
                ((httpx.get(url + "/api/v1/runs", headers=auth).json()["runs"] or [{}])[0].get("last_step") or 0)
                >= min_steps
            ),
            timeout=90,
            interval=0.5,
            what="demo steps in the run store",
        )
        yield url
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(60)
        except subprocess.TimeoutExpired:
            demo.kill()
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="module")
def live_demo(tmp_path_factory: pytest.TempPathFactory):
    _need_browser()
    with running_demo(tmp_path_factory.mktemp("ui"), "ui-test", 1.2, replicas=3, ranks=2, min_steps=3) as url:
        yield url


def sign_in(page, url: str, token: str) -> None:
    """The UI's sign-in form, as a person on a token server uses it (the session cookie does the rest)."""
    page.goto(url + "/")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_selector("#runs-table tr[data-run-id]")


def test_runs_list_and_run_page(live_demo: str, page) -> None:
    page.goto(live_demo + "/")
    row = page.wait_for_selector("#runs-table tr[data-run-id]")
    assert "ui-test" in row.inner_text() and "live" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "runs.png"))
    row.click()
    page.wait_for_selector("#timeline canvas")
    page.wait_for_function("document.querySelectorAll('.chart[data-points]').length >= 20", timeout=30_000)
    assert int(page.eval_on_selector("#timeline", "e => e.dataset.laneCount")) == 5  # rank_0..1, replica_0..2
    labels = page.eval_on_selector_all("#timeline .lane-label[data-lane]", "els => els.map(e => e.dataset.lane)")
    assert labels == ["rank_0", "rank_1", "replica_0", "replica_1", "replica_2"]
    # no Prometheus runs with this server: the engine sections say so, not "set disable_log_stats=False" (issue 64)
    page.wait_for_selector("#prom-unavailable")
    vllm = page.inner_text("#sec-vllm")
    assert "no Prometheus scrapes this run's targets" in vllm and "disable_log_stats" not in vllm, vllm
    page.wait_for_selector(
        '.chart[data-metric="critic_score_mean"][data-points]', timeout=30_000
    )  # open families load in turn
    points = page.eval_on_selector('.chart[data-metric="critic_score_mean"]', "e => +e.dataset.points")
    assert points >= 3
    assert page.inner_text("#insight-overlap").endswith("%")
    # staleness as time: the sync demo's trainer starts right after generation (plus the advantage step)
    page.wait_for_function(
        "/\\d+(\\.\\d+)? (µs|ms|s)$/.test(document.querySelector('#insight-wait .v')?.innerText || '')", timeout=30_000
    )
    # what init(config=...) described: tags, duration, and the searchable trainer config
    assert {"demo", "sync", "vllm"} <= set(page.eval_on_selector_all("h2 .tag", "els => els.map(e => e.textContent)"))
    assert "ran " in page.inner_text("#run-meta") and "run 1" in page.inner_text("#run-meta")
    page.click("#run-config summary")
    page.fill("#config-search", "optim.lr")
    assert page.eval_on_selector_all("#run-config td.key", "els => els.map(e => e.textContent)") == [
        "actor_rollout_ref.actor.optim.lr"
    ]
    page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)
    # the first screen of a 1280 x 800 laptop (issue 49 item 19): the verdict, the headline charts (reward, step time,
    # throughput, entropy: what the job logged) whole, and the timeline's axis and first lanes, without scrolling
    page.set_viewport_size({"width": 1280, "height": 800})
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_selector(".chart.headline[data-points]", timeout=30_000)
    headline = page.eval_on_selector_all(".chart.headline", "cs => cs.map(c => [c.dataset.headline, "
                                         "c.getBoundingClientRect().bottom])")
    assert [n for n, _ in headline] == ["critic_score_mean", "timing_s_step", "perf_throughput", "actor_entropy"]
    assert all(bottom <= 800 for _, bottom in headline), headline
    # metric names as the job logged them (stored and exposed sanitized: actor_entropy)
    assert page.inner_text(".chart.headline[data-headline='actor_entropy'] .title .muted").strip() == "actor/entropy"
    assert "critic/score/mean" in page.inner_text(".chart[data-metric='critic_score_mean'] .title")
    # the goodput ledger (docs/ledger.md): where the device time went, in one sentence and a bar of its reasons
    ledger = page.wait_for_selector("#ledger", timeout=40_000)
    assert "% of the device time went to training. Other work: " in ledger.inner_text()
    assert page.eval_on_selector_all("#ledger .ledger-bar span", "s => s.map(x => x.dataset.reason)")[:1] != []
    assert page.evaluate("document.querySelector('#timeline').getBoundingClientRect().top") + 60 <= 800
    card = page.eval_on_selector("#insight-step", "e => e.getBoundingClientRect().width")
    other = page.eval_on_selector("#insight-overlap", "e => e.getBoundingClientRect().width")
    assert card > 1.8 * other
    for width in (1280, 1600):  # the wide cards' row reaches the block's right edge: no blank strip (issue 64)
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(200)
        edges = page.evaluate("[...['#insights', '#insight-utilization']].map(s => document.querySelector(s)"
                              ".getBoundingClientRect().right)")
        assert abs(edges[0] - edges[1]) <= 2, (width, edges)
        page.screenshot(path=str(ARTIFACTS / f"insight-cards-{width}.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})  # (the suite's own, for what follows)
    # a headline chart's title opens that metric's full chart below
    page.click(".chart.headline[data-headline='actor_entropy'] .title a")
    page.wait_for_function("(() => { const r = document.querySelector('.chart[data-metric=\"actor_entropy\"]')"
                           ".getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })()")
    page.evaluate("window.scrollTo(0, 0)")
    assert page.locator("button:has-text('whole run')").count() == 0  # (the picker's option is the one control)
    page.screenshot(path=str(ARTIFACTS / "run-first-screen-1280.png"))


def test_hover_shows_state_details_and_zoom_changes_window(live_demo: str, page) -> None:
    page.goto(live_demo + "/#/run/1")
    page.wait_for_selector("#insight-overlap")  # the page has finished its first layout
    page.wait_for_function("window.rlInsight.timeline && window.rlInsight.timeline.rects && "
                           "window.rlInsight.timeline.rects.length > 5")
    for _ in range(5):  # a live page may redraw between reading a span's place and moving there: read again
        page.locator("#timeline canvas").scroll_into_view_if_needed()  # (below the range bar: maybe below the fold)
        target = page.evaluate("""() => { const t = window.rlInsight.timeline;
            const i = t.rects.findIndex(r => r.x1 - r.x0 > 4 && r.span[5] === 1); return t.spanRect(i); }""")
        page.mouse.move(target["x"], target["y"])
        try:
            page.wait_for_selector("#tooltip:not([hidden])", timeout=3_000)
            break
        except Exception:  # playwright's TimeoutError: the span moved; read its place again
            page.mouse.move(5, 5)
    tip = page.wait_for_selector("#tooltip:not([hidden])")
    text = tip.inner_text()
    assert target["name"] in text and ("ms" in text or " s" in text)
    page.wait_for_function("document.querySelector('#tooltip').dataset.detailed === '1'")  # attributes fetched
    text = page.inner_text("#tooltip")
    assert "started " in text and "process_id" not in text and "monitor.trace_segment" not in text  # no plumbing
    assert page.eval_on_selector("#tooltip", "e => e.dataset.step") != ""  # the span's step is known
    page.screenshot(path=str(ARTIFACTS / "hover.png"))
    # a lane filter typed while the pointer rests: the tooltip of a lane no longer drawn goes (it stayed, pointing
    # at nothing), and comes back for what is under the pointer when it moves
    hovered = text.split("\n")[0].split(" on ")[-1].strip()
    keep = "replica" if hovered.startswith("rank") else "rank"
    page.fill("#lane-filter", keep)
    page.wait_for_function(f"[...document.querySelectorAll('#timeline .lane-label[data-lane]')].every(e => "
                           f"e.dataset.lane.startsWith('{keep}'))", timeout=10_000)
    assert page.eval_on_selector("#tooltip", "e => e.hidden")
    page.fill("#lane-filter", "")
    page.wait_for_function("+document.querySelector('#timeline').dataset.laneCount === 5", timeout=10_000)
    page.mouse.move(target["x"], target["y"])
    before = page.eval_on_selector("#timeline", "e => [+e.dataset.fromNs, +e.dataset.toNs]")
    page.mouse.wheel(0, -400)  # zoom in around the pointer
    page.wait_for_function(
        f"+document.querySelector('#timeline').dataset.toNs - +document.querySelector('#timeline').dataset.fromNs"
        f" < {before[1] - before[0]}"
    )
    after = page.eval_on_selector("#timeline", "e => [+e.dataset.fromNs, +e.dataset.toNs]")
    assert after[1] - after[0] < before[1] - before[0] and after[0] >= before[0] - 1


def test_live_run_updates_without_reload(live_demo: str, page) -> None:
    page.goto(live_demo + "/#/run/1")
    page.wait_for_selector('.chart[data-metric="timing_s_step"][data-points]')
    first = int(page.inner_text("#last-step"))
    points = page.eval_on_selector('.chart[data-metric="timing_s_step"]', "e => +e.dataset.points")
    page.wait_for_function(f"+document.querySelector('#last-step').innerText > {first}", timeout=30_000)
    page.wait_for_function(
        f"+document.querySelector('.chart[data-metric=\"timing_s_step\"]').dataset.points > {points}", timeout=30_000)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # same page, no reload


def test_login_required_when_a_token_is_configured(tmp_path: Path, page) -> None:
    server, url = _server(tmp_path, token="ui-secret")
    try:
        page.goto(url + "/")
        page.wait_for_selector("#token")
        page.fill("#token", "wrong")
        page.click("button[type=submit]")
        page.wait_for_selector(".login .error:has-text('wrong token')")
        page.fill("#token", "ui-secret")
        page.click("button[type=submit]")
        page.wait_for_selector("#runs-table")
        page.screenshot(path=str(ARTIFACTS / "login.png"))
    finally:
        server.terminate()
        server.wait(10)


def test_export_links_download_valid_files(live_demo: str, page) -> None:
    page.goto(live_demo + "/#/run/1")
    page.wait_for_selector("#export-trace")
    with page.expect_download() as dl:
        page.click("#export-trace")
    import json

    trace = json.loads(Path(dl.value.path()).read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])


def test_offline_html_timeline_opens_and_zooms_in_chromium(tmp_path: Path, page) -> None:
    from rl_insight.analysis.render import html
    from rl_insight.analysis.table import Columns, with_depth

    c = Columns()
    for rank in range(4):
        for step in range(50):
            t = step * 100_000_000
            c.add(
                "torch",
                "actor",
                rank,
                f"actor/rank{rank}",
                "actor_update",
                "annotation",
                t,
                t + 60_000_000 + rank * 1_000_000,
                step,
                None,
                "f",
            )
            for k in range(20):  # sub-pixel events at the full view
                c.add("torch", "actor", rank, f"actor/rank{rank}", "all_reduce", "communication", t + k * 100_000,
                      t + k * 100_000 + 50_000, step, None, "f")
    out = html.render(with_depth(c.frame()), tmp_path / "timeline.html", "e2e")
    page.goto(out.as_uri())
    page.wait_for_function("window.timeline && window.timeline.rects.length > 0")
    level_before = page.eval_on_selector("#c", "e => e.dataset.level")
    assert "merged" in level_before
    box = page.eval_on_selector("#c", "e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.width]; }")
    for _ in range(12):
        page.mouse.move(box[0] + 400, box[1] + 40)
        page.mouse.wheel(0, -300)
    page.wait_for_function("window.timeline.view[1] - window.timeline.view[0] < 1000")
    r = page.evaluate("window.timeline.rects.length ? window.timeline.rects[0] : null")
    assert r is not None
    page.mouse.move(box[0] + (r[0] + r[1]) / 2, box[1] + r[2] + 2)  # hover a bar: its name and duration show
    tip = page.wait_for_selector("#tip:not([hidden])")
    assert "actor_update" in tip.inner_text() or "all_reduce" in tip.inner_text()
    page.screenshot(path=str(ARTIFACTS / "offline-timeline.png"))
    assert "merged" not in page.eval_on_selector("#c", "e => e.dataset.level") or \
        page.eval_on_selector("#c", "e => e.dataset.level") != level_before


def test_ui_and_docs_work_under_their_content_security_policy(live_demo: str, browser) -> None:
    """No bypass here: the UI, its charts and /docs render with the server's CSP, load nothing from
    another origin, and the browser reports no CSP violation."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        pg = context.new_page()
        console: list[str] = []
        urls: list[str] = []
        pg.on("console", lambda m: console.append(m.text))
        pg.on("request", lambda r: urls.append(r.url))
        resp = pg.goto(live_demo + "/")
        assert "frame-ancestors 'none'" in resp.headers["content-security-policy"]
        assert resp.headers["x-content-type-options"] == "nosniff"
        pg.wait_for_selector("#runs-table tr[data-run-id]").click()
        pg.wait_for_selector("#timeline canvas")
        pg.wait_for_selector('.chart[data-points]')
        pg.goto(live_demo + "/docs")
        pg.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
        assert "RL-Insight server" in pg.inner_text(".swagger-ui .info .title")
        pg.wait_for_selector(".opblock-summary-path[data-path='/api/v1/ingest']")
        pg.screenshot(path=str(ARTIFACTS / "docs.png"))
    finally:
        context.close()
    foreign = [u for u in urls if not (u.startswith(live_demo) or u.startswith("data:"))]
    assert not foreign, f"requests to other origins: {foreign[:5]}"
    violations = [m for m in console if "Content Security Policy" in m]
    assert not violations, violations


def test_archived_experiments_are_shown_as_such_in_the_runs_list(tmp_path: Path, page) -> None:
    import httpx

    server, url = _server(tmp_path)
    try:
        for exp in ("kept", "old"):
            batch = {"v": 1, "client": {"id": exp, "project": "p", "experiment_name": exp},
                     "series": [{"k": "g", "n": "x", "l": {"project": "p", "experiment_name": exp}}],
                     "samples": [[0, time.time(), 1, 1.0]]}
            assert httpx.post(url + "/api/v1/ingest", json=batch).status_code == 200
            assert (
                httpx.post(
                    url + "/api/v1/prometheus/targets",
                    json={"targets": [f"10.0.0.1:{len(exp)}"], "project": "p", "experiment_name": exp},
                ).status_code
                == 200
            )
        assert (
            httpx.post(url + "/api/v1/experiments/archive", json={"project": "p", "experiment_name": "old"}).status_code
            == 200
        )
        page.goto(url + "/")
        row = page.wait_for_selector("#runs-table tr[data-run-id]:has-text('old')")
        page.wait_for_selector("#runs-table .badge.archived")
        assert "archived" in row.inner_text()
        kept = page.wait_for_selector("#runs-table tr[data-run-id]:has-text('kept')")
        assert "archived" not in kept.inner_text()
        page.screenshot(path=str(ARTIFACTS / "runs-archived.png"))
    finally:
        server.terminate()
        server.wait(10)


def test_demo_run_in_tensorboard_and_as_an_offline_wandb_run(tmp_path: Path, page) -> None:
    """`server start --export-tensorboard/--export-wandb` + `rl-insight demo`: TensorBoard's scalar page
    (real TensorBoard, real Chromium) shows the trainer and insight scalars; W&B has an offline run."""
    import glob

    from tests.wandb_files import history

    home, tb, port = tmp_path / "home", tmp_path / "tb", free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}, "WANDB_MODE": "offline",
           "WANDB_SILENT": "true"}
    rl = [sys.executable, "-m", "rl_insight"]
    r = subprocess.run(
        rl
        + [
            "server",
            "start",
            "--detach",
            "--home",
            str(home),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-prometheus",
            "--export-tensorboard",
            str(tb),
            "--export-wandb",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    try:
        d = subprocess.run(rl + ["demo", "--steps", "6", "--step-seconds", "0.8", "--replicas", "2", "--ranks", "2",
                                 "--experiment-name", "tb-demo", "--server-url", f"http://127.0.0.1:{port}"],
                           capture_output=True, text=True, env=env, timeout=180)
        assert d.returncode == 0, d.stdout[-2000:] + d.stderr[-2000:]
    finally:
        subprocess.run(rl + ["server", "stop", "--home", str(home)], capture_output=True, env=env, timeout=60)
    run_dir = tb / "rl-insight-demo" / "tb-demo"
    assert list(run_dir.glob("events.out.tfevents.*"))
    (wb_file,) = glob.glob(str(home / "data" / "wandb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert sorted(r["_step"] for r in history(Path(wb_file)) if "critic_score_mean" in r) == [1, 2, 3, 4, 5, 6]

    tb_port = free_port()
    board = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(tb),
            "--host",
            "127.0.0.1",
            "--port",
            str(tb_port),
            "--load_fast=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import httpx

        def up() -> bool:
            try:
                return "tb-demo" in httpx.get(f"http://127.0.0.1:{tb_port}/data/runs", timeout=1).text
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=60, what="TensorBoard")
        tags = httpx.get(f"http://127.0.0.1:{tb_port}/data/plugin/scalars/tags").json()
        run_tags = next(v for k, v in tags.items() if k.endswith("tb-demo"))
        assert "critic_score_mean" in run_tags and any(t.startswith("rl_insight/") for t in run_tags)
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(f"http://127.0.0.1:{tb_port}/#timeseries")
        page.wait_for_selector("input[placeholder*='Filter tags']", timeout=60_000)
        page.fill(
            "input[placeholder*='Filter tags']", "critic_score_mean|rl_insight/step/duration|step_state_share/vllm"
        )
        page.wait_for_selector("text=critic_score_mean", timeout=60_000)
        page.wait_for_selector("text=rl_insight/step/duration_s", timeout=60_000)
        page.keyboard.press("Escape")  # close the tag autocomplete
        page.mouse.click(700, 980)
        page.wait_for_timeout(2500)  # let the charts draw
        page.screenshot(path=str(ARTIFACTS / "tensorboard.png"))
    finally:
        board.terminate()
        board.wait(10)


def test_chart_axes_format_large_tiny_and_constant_values(live_demo: str, page) -> None:
    page.goto(live_demo + "/")
    page.wait_for_selector("#runs-table tr[data-run-id]").click()
    page.wait_for_function("document.querySelectorAll('.chart[data-points]').length >= 10", timeout=30_000)
    ticks = page.evaluate("[52500, 60000, 1250000, 0.00025, 0.5, 0, -0.0004, 3.14159].map(fmtTick)")
    assert ticks == ["52.5k", "60k", "1.25M", "2.5e-4", "0.5", "0", "-4e-4", "3.142"]
    assert page.evaluate("yRange(null, 0, 0)") == [-1, 1]  # a constant zero series: a band around 0, not 0..100
    assert page.evaluate("yRange(null, 5, 5)") == [4.5, 5.5]
    lo, hi = page.evaluate("yRange(null, 50000, 60000)")
    assert lo <= 50000 and hi >= 60000 and hi - lo < 20000


def test_zoomed_timeline_ticks_never_repeat(live_demo: str, page) -> None:
    page.goto(live_demo + "/")
    page.wait_for_selector("#runs-table tr[data-run-id]").click()
    page.wait_for_selector("#timeline canvas")
    for span_ms in (60_000, 4_000, 500, 40):  # minutes down to tens of milliseconds per view
        ticks = page.evaluate(f"timeTicks(1796000000000000000, 1796000000000000000 + {span_ms} * 1e6, 8)")
        assert len(set(ticks)) == len(ticks), (span_ms, ticks)
    page.wait_for_function("document.querySelector('#timeline').dataset.ticks !== undefined", timeout=30_000)
    page_ticks = page.eval_on_selector("#timeline", "e => JSON.parse(e.dataset.ticks)")
    assert len(set(page_ticks)) == len(page_ticks)


def test_timeline_legend_and_stage_colours_match_the_offline_renderers(live_demo: str, page) -> None:
    from rl_insight.semantics.palette import color_of

    page.goto(live_demo + "/")
    page.wait_for_selector("#runs-table tr[data-run-id]").click()
    page.wait_for_selector("#timeline-legend .item[data-stage='vllm_generate']", timeout=30_000)
    legend = page.eval_on_selector_all("#timeline-legend .item", "els => els.map(e => [e.dataset.stage, "
                                                                 "e.dataset.color])")
    assert {"vllm_generate", "update_weights", "actor_update", "train_batch"} <= {n for n, _ in legend}
    assert all(c == color_of(n) for n, c in legend), legend  # the same colour as the HTML report and the PNG
    assert (
        len({c for n, c in legend if n in ("vllm_generate", "update_weights", "actor_update")}) == 3
    )  # distinct stages
    for name in ("my_custom_stage", "tool_call/search", "ünïcode stage"):  # the JS hash equals palette.py's
        assert page.evaluate(f"colorOf({name!r})") == color_of(name)


def test_timeline_marks_steps_and_a_click_zooms_to_one(live_demo: str, page) -> None:
    page.goto(live_demo + "/")
    page.wait_for_selector("#runs-table tr[data-run-id]").click()
    page.wait_for_selector("#timeline canvas")
    page.wait_for_function(
        "(JSON.parse(document.querySelector('#timeline')?.dataset.steps || '[]')).length >= 2", timeout=30_000
    )
    steps = page.eval_on_selector("#timeline", "e => JSON.parse(e.dataset.steps)")
    target = steps[-1]
    # One synchronous act, as a click is: the mark's place read and clicked in the same frame. A live page moves
    # between separate steps (the followed timeline redraws, sections above it grow), so a position measured in
    # one call and clicked in the next can land beside the mark.
    before = page.evaluate(f"""() => {{
        const tl = document.querySelector('#timeline'), c = tl.querySelector('canvas'), r = c.getBoundingClientRect();
        const x = state.timeline.stepHits.find(h => h[1] === {target})[0];
        const view = [+tl.dataset.fromNs, +tl.dataset.toNs];
        c.dispatchEvent(new MouseEvent('click', {{clientX: r.left + x, clientY: r.top + 26, bubbles: true}}));
        return view; }}""")
    page.wait_for_function(f"+document.querySelector('#timeline').dataset.toNs < {before[1]}", timeout=10_000)
    after = page.eval_on_selector("#timeline", "e => [+e.dataset.fromNs, +e.dataset.toNs]")
    marks = page.evaluate("state.timeline.stepMarks")
    i = [m[0] for m in marks].index(target)
    assert after[1] == marks[i][1] and after[0] == marks[i - 1][1]  # exactly that step's window
    page.screenshot(path=str(ARTIFACTS / "timeline-step.png"))


def test_metric_search_pinning_and_collapsed_groups(live_demo: str, page) -> None:
    page.goto(live_demo + "/")
    page.evaluate("localStorage.removeItem('rl-insight.pinned-metrics')")
    page.wait_for_selector("#runs-table tr[data-run-id]").click()
    page.wait_for_function(
        "document.querySelector('.chart[data-metric=\"critic_score_mean\"][data-points]')", timeout=30_000
    )
    # a chart of one series names it by its metric, as the job logged it, in the legend, never "value" (issue 49
    # item 19)
    assert page.eval_on_selector_all('.chart[data-metric="critic_score_mean"] .legend-table tr[data-series]',
                                     "els => els.map(e => e.dataset.series)") == ["critic/score/mean"]
    open_families = page.eval_on_selector_all("details.family[data-family]", "els => els.filter(e => e.open).map(e "
                                                                             "=> e.dataset.family)")
    assert set(open_families) <= {"critic", "actor", "perf", "timing"} and "critic" in open_families
    # a collapsed group costs no request until it is opened
    assert (
        page.eval_on_selector_all("details.family[data-family='response'] .chart[data-points]", "els => els.length")
        == 0
    )
    page.click("details.family[data-family='response'] > summary")
    page.wait_for_function(
        "document.querySelectorAll(\"details[data-family='response'] .chart[data-points]\").length > 0", timeout=20_000
    )
    # search: only matching charts stay visible, in whichever group they are
    page.fill("#metric-search", "global_seqlen")
    visible = page.eval_on_selector_all(".chart[data-metric]:not([hidden])", "els => els.map(e => e.dataset.metric)")
    assert visible and all("global_seqlen" in m for m in visible)
    page.fill("#metric-search", "training/global")  # verl's slash spelling finds the sanitized name
    assert "training_global_step" in page.eval_on_selector_all(
        ".chart[data-metric]:not([hidden])", "els => els.map(e => e.dataset.metric)"
    )
    page.fill("#metric-search", "")
    # pin: the chart appears in a "pinned" group at the top, and stays pinned after a reload
    page.click(".chart[data-metric='response_length_mean'] .pin")
    page.wait_for_selector("details.family[data-family='pinned'] "
                           ".chart[data-metric='response_length_mean'][data-points]", timeout=20_000)
    assert page.eval_on_selector("#charts details.family", "e => e.dataset.family") == "pinned"
    page.reload()
    page.wait_for_selector(
        "details.family[data-family='pinned'] .chart[data-metric='response_length_mean']", timeout=30_000
    )
    page.evaluate("localStorage.removeItem('rl-insight.pinned-metrics')")


def test_clicking_a_chart_point_or_the_breakdown_card_zooms_the_timeline_to_that_step(live_demo: str, page) -> None:
    page.goto(live_demo + "/")
    page.wait_for_selector("#runs-table tr[data-run-id]").click()
    page.wait_for_function(
        "(JSON.parse(document.querySelector('#timeline')?.dataset.steps || '[]')).length >= 3", timeout=30_000
    )
    page.wait_for_function(
        "document.querySelector('.chart[data-metric=\"timing_s_step\"][data-points]')", timeout=30_000
    )
    # the breakdown card names its step; a click shows exactly that step
    card = page.wait_for_selector("#insight-step.link", timeout=30_000)
    step = int(card.inner_text().split("(")[1].split(",")[0])
    card.click()
    page.wait_for_function(
        f"state.timeline.stepOf(+document.querySelector('#timeline').dataset.toNs) === {step}", timeout=30_000
    )
    marks = dict(page.evaluate("state.timeline.stepMarks"))
    assert int(page.eval_on_selector("#timeline", "e => +e.dataset.toNs")) == marks[step]
    # a chart point: hover its first point and click
    page.dblclick("#timeline canvas")  # back to the whole run
    page.locator(".chart[data-metric='timing_s_step'] .u-over").scroll_into_view_if_needed()
    box = page.eval_on_selector(".chart[data-metric='timing_s_step'] .u-over", "e => { const r = "
                                                                               "e.getBoundingClientRect(); return "
                                                                               "[r.x, r.y, r.width, r.height]; }")
    page.mouse.move(box[0] + box[2] / 2, box[1] + box[3] / 2)
    first = page.evaluate("(() => { const c = [...state.charts].find(p => "
                          "p.root.closest('[data-metric=\"timing_s_step\"]')); return c.data[0][c.cursor.idx]; })()")
    assert first is not None
    page.mouse.click(box[0] + box[2] / 2, box[1] + box[3] / 2)
    page.wait_for_function("state.timeline.stepOf(+document.querySelector('#timeline').dataset.toNs) === "
                           f"{int(first)}", timeout=10_000)
    page.screenshot(path=str(ARTIFACTS / "chart-click-step.png"))


def test_offline_report_tables_link_to_the_timeline_with_depth_rows_steps_and_search(tmp_path: Path, page) -> None:
    from rl_insight.analysis import analyze as an
    from rl_insight.analysis.render import html
    from rl_insight.analysis.table import Columns, with_depth

    ms = 1_000_000
    c = Columns()
    for step in (1, 2, 3):
        t = (step - 1) * 1000 * ms
        for r in range(3):  # replica_1 is the long tail in step 2
            d = 600 if (r == 1 and step == 2) else 200
            c.add(
                "torch",
                "rollout",
                None,
                f"rollout/replica_{r}",
                "vllm_generate",
                "annotation",
                t,
                t + d * ms,
                step,
                None,
                "f",
            )
        for rank in range(2):
            a = t + 650 * ms
            c.add(
                "torch",
                "actor",
                rank,
                f"actor/rank{rank}",
                "actor_update",
                "annotation",
                a,
                a + 300 * ms,
                step,
                None,
                "f",
            )
            c.add(
                "torch",
                "actor",
                rank,
                f"actor/rank{rank}",
                "mini_batch0",
                "annotation",
                a + 10 * ms,
                a + 200 * ms,
                step,
                None,
                "f",
            )
            c.add(
                "torch",
                "actor",
                rank,
                f"actor/rank{rank}",
                "all_reduce",
                "communication",
                a + 150 * ms,
                a + 250 * ms,
                step,
                None,
                "f",
            )
    df = with_depth(c.frame())
    out = html.render(df, tmp_path / "report.html", "report", result=an.summarize(df))
    page.goto(out.as_uri())
    page.wait_for_function("window.timeline && window.timeline.rects.length > 0")
    assert page.eval_on_selector("#c", "e => JSON.parse(e.dataset.steps)") == [1, 2, 3]  # step boundaries drawn
    tops = page.evaluate("window.timeline.laneTop")
    lanes = page.evaluate("window.timeline.D.lanes")
    i0, i1 = lanes.index("actor/rank0"), lanes.index("actor/rank1")
    assert tops[i1] - tops[i0] >= 2 * 18  # actor lanes hold a nested row (mini_batch0 inside actor_update)
    titles = page.eval_on_selector_all("#tables summary", "els => els.map(e => e.textContent)")
    for want in (
        "Stage statistics",
        "Per-step breakdown",
        "Bubbles",
        "overlap",
        "stragglers",
        "long tail",
        "Communication",
        "Memory",
    ):
        assert any(want.lower() in t.lower() for t in titles), (want, titles)
    # the long-tail row of step 2 names replica_1; clicking it shows step 2 with that lane highlighted
    row = page.locator("#table-long-tail tr.row", has_text="rollout/replica_1").first
    assert "flag" in row.get_attribute("class")
    row.click()
    view = page.evaluate("window.timeline.view")
    assert 900 <= view[0] <= 1000 and 1700 <= view[1] <= 2100, view  # step 2: 1000-1950 ms, padded
    assert page.eval_on_selector("#c", "e => JSON.parse(e.dataset.steps)") == [2]
    # exposed communication is flagged in its table
    assert page.locator("#table-communication tr.flag").count() == 2
    page.fill("#search", "all_reduce")
    assert int(page.eval_on_selector("#c", "e => e.dataset.matched")) == 2  # one per actor lane in step 2's view
    page.fill("#search", "")
    page.click("#reset")
    page.screenshot(path=str(ARTIFACTS / "offline-report.png"), full_page=True)


def test_lanes_are_in_one_order_in_python_and_in_the_ui(live_demo: str, page) -> None:
    """semantics/lane_order.py and static/lanes.js: the server's lists, the offline renderers and the UI agree."""
    from rl_insight.semantics.lane_order import lane_sort_key

    names = [
        "replica_10",
        "replica_2",
        "replica",
        "Replica_1",
        "replica-3",
        "actor/rank10",
        "actor/rank2",
        "actor_rank_0",
        "_x",
        "z",
        "ünïcode_1",
        "ünïcode_01",
        "replica_2b",
        "a_99999999999",
        "a_100000000000",
        "",
        "trainer",
    ]
    page.goto(live_demo + "/")
    page.wait_for_selector("#runs-table tr[data-run-id]")
    in_js = page.evaluate("names => import('/ui/lanes.js').then(m => [...names].sort(m.compareLanes))", names)
    assert in_js == sorted(names, key=lane_sort_key)
