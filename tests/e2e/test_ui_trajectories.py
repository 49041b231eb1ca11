"""The run page's agent-loop trajectories in real headless Chromium, on `rl-insight demo --agent` (trajectories
through agent_loop_session and through real MLflow over OTLP, engine request spans): the step's table sorts and
filters, the distributions show every tool, a row opens its waterfall (generate → tool → generate …), and the
long-tail card opens the trajectories that kept its replica busy at its step."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.test_ui import ARTIFACTS, _need_browser, running_demo

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def agent_demo(tmp_path_factory: pytest.TempPathFactory):
    _need_browser()
    pytest.importorskip("mlflow")
    with running_demo(tmp_path_factory.mktemp("ui-agent"), "agent-ui", 2.5, replicas=3, ranks=1, min_steps=4,
                      extra=("--agent",)) as url:
        yield url


def _column(page, index: int) -> list[str]:
    return page.eval_on_selector_all(f"#traj-table tr[data-traj-id] td:nth-child({index})", "els => els.map(e => "
                                                                                            "e.innerText)")


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}[unit]


def test_trajectory_table_distributions_waterfall_and_long_tail_link(agent_demo: str, page) -> None:
    page.set_viewport_size({"width": 1440, "height": 1000})
    page.goto(agent_demo + "/#/run/1")
    page.wait_for_selector("#traj-table tr[data-traj-id]", timeout=60_000)
    # a 1440 px window: the wide trajectory table scrolls inside its section, the page never sideways
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    # the newest complete step opens first (the newest may still be generating); "failed" and "with tool errors"
    # are two filters
    assert page.is_visible("#traj-failed") and page.is_visible("#traj-tool-errors")
    last_step = httpx.get(agent_demo + "/api/v1/runs/1").json()["last_step"]
    opened = int(page.input_value("#traj-step"))
    assert last_step is None or opened <= last_step, (opened, last_step)
    # the timeline keeps its ranks and replicas: one lane per trajectory would bury them; a link says where they are
    lanes = page.eval_on_selector_all("#timeline .lane-label[data-lane]", "els => els.map(e => e.dataset.lane)")
    assert {"rank_0", "replica_0", "replica_1", "replica_2"} <= set(lanes) and not any(
        x.startswith("experiment=") for x in lanes
    ), lanes
    assert "otlp/verl-rollout-trace" in lanes  # the MLflow spans' service, as the demo's env names it
    assert "agent-loop trajectory lanes" in page.inner_text("#lanes-hidden")
    steps = [s for s in page.eval_on_selector_all("#traj-step option", "els => els.map(e => e.value)") if s != "none"]
    assert len(steps) >= 2
    # a finished step whose MLflow traces have arrived: the newest is still being generated, and MLflow exports its
    # spans in batches (on a loaded machine a batch can come after the step ended)
    def both_sources(step: str) -> bool:
        page_of = httpx.get(f"{agent_demo}/api/v1/runs/1/trajectories", params={"step": step, "limit": 500}).json()
        keys = [t["key"] for t in page_of["trajectories"]]
        return any(k.startswith("trace:") for k in keys) and any(not k.startswith("trace:") for k in keys)
    chosen = wait_until(lambda: next((s for s in steps[1:] if both_sources(s)), None), timeout=60, interval=0.5,
                        what="a finished step with both agent-loop sessions and MLflow traces")
    if page.input_value("#traj-step") == chosen:  # shown since before its traces came: away and back, read again
        other = next(x for x in steps if x != chosen)
        page.select_option("#traj-step", other)
        page.wait_for_function(
            f"document.querySelector('#traj-card-duration')?.innerText.startsWith('step {other}:')", timeout=10_000)
    page.select_option("#traj-step", chosen)
    page.wait_for_function(
        f"document.querySelector('#traj-card-duration')?.innerText.startsWith('step {chosen}:')", timeout=10_000
    )
    page.wait_for_selector(f"#traj-table table[data-step='{chosen}']")  # the table's rows are that step's too
    # slowest first by default, and both sources in one step: agent_loop_session lanes and MLflow traces
    durations = [_seconds(t) for t in _column(page, 2)]
    assert durations == sorted(durations, reverse=True)
    names = _column(page, 1)
    assert any(n.startswith("trace ") for n in names) and any(n.startswith("sample=") for n in names), names
    # the distributions: every tool of the demo (two spellings: agent_loop_session's names, verl's tool classes)
    page.wait_for_selector("#traj-tools tr[data-tool]")
    tools = set(page.eval_on_selector_all("#traj-tools tr[data-tool]", "els => els.map(e => e.dataset.tool)"))
    assert tools & {"search", "python", "browser", "calculator"} and any(t.endswith("Tool") for t in tools), tools
    assert page.eval_on_selector_all("#traj-hist-turns svg rect", "els => els.length") >= 1

    # sort by turns (one click: most first), then by reward ascending (two clicks)
    page.click("#traj-table th[data-sort='turns']")
    page.wait_for_selector("#traj-table th.sorted[data-sort='turns']")
    turns = [int(t.split()[0]) for t in _column(page, 3)]
    assert turns == sorted(turns, reverse=True) and turns[0] >= 3
    page.click("#traj-table th[data-sort='reward']")
    page.wait_for_selector("#traj-table th.sorted[data-sort='reward']")
    rewards = [float(r) for r in _column(page, 9) if r != "–"]
    assert rewards == sorted(rewards)

    # a row opens its waterfall: turns in time order, generate first, tools between generates, gaps drawn
    page.click("#traj-table th[data-sort='turns']")
    page.wait_for_selector("#traj-table th.sorted[data-sort='turns']")
    page.locator("#traj-table tr[data-traj-id]").first.click()
    page.wait_for_selector("#traj-wf .wf-row")
    kinds = page.eval_on_selector_all("#traj-wf .wf-row", "els => els.map(e => e.dataset.kind)")
    assert kinds[0] == "generate" and kinds[-1] == "generate" and "tool" in kinds
    assert all(a != b for a, b in zip(kinds, kinds[1:]))  # generate → tool → generate …
    assert page.eval_on_selector_all("#traj-wf .wf-gap", "els => els.length") >= 1
    assert "between turns" in page.inner_text("#traj-wf-summary")
    # what each turn said (issue 49 item 21): the first turn's text open, a waterfall row opens its own
    page.wait_for_selector("#traj-io details.turn-io[open] pre.io-text")
    first = page.eval_on_selector_all("#traj-io details.turn-io[open] pre.io-text",
                                      "els => els.map(e => [e.dataset.field, e.textContent])")
    assert first and all(text for _, text in first), first
    assert {f for f, _ in first} <= {"prompt", "response", "input", "output"}  # turn 1 is a generate
    last = len(kinds) - 1
    page.click(f"#traj-wf .wf-row[data-turn='{last}'] .wf-label")
    page.wait_for_selector(f"#traj-io details.turn-io[data-turn='{last}'][open]")
    tool = kinds.index("tool")
    fields = page.eval_on_selector_all(f"#traj-io details.turn-io[data-turn='{tool}'] pre.io-text",
                                       "els => els.map(e => e.dataset.field)")
    assert set(fields) & {"tool_args", "tool_result", "input", "output"}, fields
    # the waterfall right under the rows' box, not under 50 rows; a refresh keeps the reader's place in the box
    # (issue 49 item 21)
    below = page.evaluate("document.querySelector('#traj-wf').getBoundingClientRect().top - "
                          "document.querySelector('#traj-table .traj-rows').getBoundingClientRect().bottom")
    assert below < 200, below
    rows = page.locator("#traj-table tr[data-traj-id]").count()
    if rows > 20:
        page.eval_on_selector("#traj-table .traj-rows", "e => { e.scrollTop = 120; }")
        page.evaluate("state.trajectories.loadPage()")
        page.wait_for_timeout(500)
        assert page.eval_on_selector("#traj-table .traj-rows", "e => e.scrollTop") == 120
    # each turn's text stays inside its track, on the roomier side of its bar: the page never widens for it
    outside = page.eval_on_selector_all("#traj-wf .wf-text", """els => els.filter(e => {
        const r = e.getBoundingClientRect(), t = e.parentElement.getBoundingClientRect();
        return r.left < t.left - 1 || r.right > t.right + 1; }).map(e => e.textContent)""")
    assert outside == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    page.screenshot(path=str(ARTIFACTS / "trajectories.png"), full_page=False)
    page.locator("#traj-waterfall").screenshot(path=str(ARTIFACTS / "trajectory-waterfall.png"))

    # a sample's rollout group: every row has that sample, and the chip clears it
    page.locator("#traj-table a.traj-sample").first.click()
    page.wait_for_selector("#traj-sample-clear")
    samples = set(_column(page, 12))
    assert len(samples) == 1 and len(_column(page, 12)) >= 1, samples
    page.click("#traj-sample-clear")
    page.wait_for_function("!document.querySelector('#traj-sample-clear')", timeout=10_000)

    # filter by a tool: every row used it
    tool = page.eval_on_selector("#traj-tools tr[data-tool]", "e => e.dataset.tool")
    page.select_option("#traj-tool", tool)
    page.wait_for_function(
        "[...document.querySelectorAll('#traj-table tr[data-traj-id] td:nth-child(4)')].every(td => "
        f"td.innerText.includes('{tool}'))",
        timeout=10_000,
    )

    # the long-tail card: "trajectories ›" shows the trajectories that ran on its replica at its step, slowest first
    # (shown only for a step the trajectories' menu has; read and clicked at once: the card redraws as the run goes)
    page.wait_for_selector("#long-tail-trajectories", timeout=60_000)
    lane, step, card = page.evaluate(
        "(() => { const b = document.querySelector('#long-tail-trajectories'); const seen = [b.dataset.lane, "
        "b.dataset.step, document.querySelector('#insight-long-tail').innerText]; b.click(); return seen; })()")
    assert lane and lane in card
    assert step in page.eval_on_selector_all("#traj-step option", "els => els.map(e => e.value)")
    page.wait_for_function(f"document.querySelector('#traj-step').value === '{step}'", timeout=10_000)
    page.wait_for_function(f"document.querySelector('#traj-replica').value === '{lane}'", timeout=10_000)
    page.wait_for_selector("#traj-table tr[data-traj-id]")
    replicas = set(_column(page, 11))
    assert replicas == {lane}, replicas
    assert page.input_value("#traj-tool") == ""  # the link starts from a clean filter
    assert f"ran on {lane}" in page.inner_text("#traj-table")
    page.screenshot(path=str(ARTIFACTS / "trajectories-long-tail.png"), full_page=False)
    # live: the next steps join the step menu while the page stays open (refreshed every 10 s)
    n = len(page.eval_on_selector_all("#traj-step option", "els => els.map(e => e.value)"))
    page.wait_for_function(f"document.querySelectorAll('#traj-step option').length > {n}", timeout=40_000)
