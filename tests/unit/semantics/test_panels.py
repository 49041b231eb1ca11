"""The panel catalogue (rl_insight/semantics/panels.py): one source for the UI's Prometheus panels and the Grafana
dashboards, true to what the exporters expose (shared/reference/exporters-today.md)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rl_insight.semantics import panels
from rl_insight.semantics.catalog import REMOVED_FALLBACKS, exporter_metric_names
from rl_insight.server.prometheus.panels import query_step_s, rate_window_s, scope_selector

SERVER_ON_A_PORT = "the rl_insight client sends through the stdlib, not httpx"  # (tests/lanes.py)

ROOT = Path(__file__).resolve().parents[3]
GRAFANA_SCOPE = 'project=~"$project", experiment_name=~"$experiment_name"'
BOARDS = {
    "vllm": "verl_trainer_v1_with_vllm_engine.json",
    "sglang": "verl_trainer_v1_with_sglang_engine.json",
    "transfer_queue": "transfer_queue.json",
    "gpu": "hardware.json",
    "npu": "hardware.json",
    "host": "hardware.json",
}


def _board_panels(name: str) -> dict[str, list[str]]:
    d = json.loads((ROOT / "dashboards" / name).read_text())
    out: dict[str, list[str]] = {}
    row = ""
    for p in d["panels"]:
        if p["type"] == "row":
            row = p["title"]
            continue
        out[f"{row}/{p['title']}"] = [t["expr"] for t in p.get("targets", []) if "expr" in t]
    return out


@pytest.mark.parametrize("section", panels.SECTIONS, ids=lambda s: s.id)
def test_grafana_dashboards_run_exactly_the_catalogue_queries(section: panels.Section) -> None:
    """The UI and Grafana show the same numbers because they run the same expressions."""
    board = _board_panels(BOARDS[section.id])
    scope = GRAFANA_SCOPE + (', replica=~"$replica"' if section.per_replica else "")
    for p in section.panels:
        key = f"{section.title}/{p.title}"
        assert key in board, f"{key} missing from {BOARDS[section.id]}"
        assert board[key] == [panels.render(q.expr, scope, "$__rate_interval") for q in p.queries], key


def test_every_catalogue_metric_is_an_exposed_or_fallback_exporter_name() -> None:
    known = exporter_metric_names()
    for name in panels.metric_names():
        assert name in known, f"{name} is read by a panel but not in rl_insight/semantics/catalog.py"


def test_removed_vllm_names_are_only_fallbacks() -> None:
    """exporters-today.md: removed vLLM names may only appear after `or`, behind the current name."""
    for s in panels.SECTIONS:
        for p in s.panels:
            for q in p.queries:
                for old in REMOVED_FALLBACKS:
                    short = old.split(":", 1)[1].removesuffix("_bucket")
                    if short in q.expr:
                        assert " or " in q.expr or "|" in q.expr, f"{p.id}: {old} used without the current name"


def test_sglang_hit_rate_comes_from_counters_and_npu_health_alert_catches_unknown() -> None:
    hit = next(p for p in panels.SGLANG.panels if p.id == "sglang_prefix_hit")
    assert "cache_hit_rate" not in hit.queries[0].expr and "cached_tokens_total" in hit.queries[0].expr
    rules = (ROOT / "provisioning" / "rules" / "rl_insight_alerts.yml").read_text()
    assert "npu_chip_info_health_status != 1" in rules


def test_scope_is_quoted_so_a_hostile_run_name_cannot_change_the_query() -> None:
    sel = scope_selector('p"} or vector(1) #', "e\\x\nnew")
    assert sel == r'project="p\"} or vector(1) #", experiment_name="e\\x\nnew"'


def test_rate_window_follows_grafanas_rate_interval_rule() -> None:
    assert rate_window_s(1, 10) == 40 and rate_window_s(60, 10) == 70
    assert query_step_s(0, 3600, 240, 10) == 15 and query_step_s(0, 60, 240, 10) == 10


def test_legend_renders_like_grafana() -> None:
    assert panels.legend("p99 r{{replica}}", {"replica": "3"}) == "p99 r3"
    assert panels.legend("{{ op_type }} x{{missing}}", {"op_type": "GET_META"}) == "GET_META x"


def test_without_prometheus_the_panels_say_why(server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server with no Prometheus answers the panel and alert routes with the reason, not an error."""
    import rl_insight

    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="no-prom")
    rl_insight.metric_gauge("training/global_step", 1.0)
    assert rl_insight.flush(10)
    from tests.conftest import wait_until

    run = wait_until(lambda: httpx.get(server.url + "/api/v1/runs").json()["runs"], what="the run")[0]
    d = httpx.get(f"{server.url}/api/v1/runs/{run['id']}/panels").json()
    assert d["prometheus"]["state"] == "not_configured" and "rl-insight server start" in d["prometheus"]["message"]
    assert {s["id"] for s in d["sections"]} == set(panels.BY_ID) and not any(s["available"] for s in d["sections"])
    assert all(s["enable"] for s in d["sections"])
    assert httpx.get(f"{server.url}/api/v1/runs/{run['id']}/alerts").json()["prometheus"]["state"] == "not_configured"
    r = httpx.get(f"{server.url}/api/v1/runs/{run['id']}/panels/<script>")
    assert r.status_code == 404 and "no panel section" in r.json()["detail"]
    assert httpx.get(f"{server.url}/api/v1/runs/999/panels").status_code == 404


def test_the_verl_omni_dashboard_runs_exactly_the_catalogue_queries() -> None:
    board = _board_panels("verl_omni_trainer_v1_with_vllm_omni_engine.json")
    for section in panels.OMNI_SECTIONS:
        scope = GRAFANA_SCOPE + ', replica=~"$replica"' + "".join(f', {lb}=~"${v}"' for lb, v in section.variables)
        for p in section.panels:
            key = f"{section.title}/{p.title}"
            assert board[key] == [panels.render(q.expr, scope, "$__rate_interval") for q in p.queries], key


def test_trainer_families_are_one_catalogue_for_grafana_and_the_ui() -> None:
    board = _board_panels("verl_trainer_v1_with_vllm_engine.json")
    for family in panels.TRAINER_FAMILIES:
        assert all(m.split("_")[0] == family.id for m in family.metrics), family.id  # the UI groups by first word
        assert [k.split("/", 1)[1] for k in board if k.startswith(f"training · {family.title}/")] == list(
            family.metrics
        )
    assert len({f.id for f in panels.TRAINER_FAMILIES}) == len(panels.TRAINER_FAMILIES)


def test_the_headline_charts_name_metrics_the_catalogue_knows() -> None:
    # the run page's first screen draws the first name of each line the run logged: a name no family lists (a typo,
    # a metric verl renamed) would leave that chart out for every run
    known = {m for f in panels.TRAINER_FAMILIES for m in f.metrics}
    assert [title for title, _ in panels.HEADLINE_METRICS] == ["reward", "step time", "throughput", "entropy"]
    for title, names in panels.HEADLINE_METRICS:
        assert names and set(names) <= known, (title, set(names) - known)


def test_verl_keys_spell_exactly_the_families_metrics_as_verl_logs_them() -> None:
    # the UI titles a verl trainer metric as verl logs it (actor/entropy), though verl hands the client actor_entropy
    from rl_insight.demo.trainer_metrics import TrainerMetricModel

    logged = panels.logged_names()
    assert set(logged) == {m for f in panels.TRAINER_FAMILIES for m in f.metrics}
    assert logged["actor_entropy"] == "actor/entropy" and logged["timing_s_step"] == "timing_s/step"
    assert logged["val_core_openai_gsm8k_acc_mean_1"] == "val-core/openai/gsm8k/acc/mean@1"
    # the demo's verl model logs the same keys
    phases = ("gen", "old_log_prob", "ref", "update_actor", "update_weights", "adv", "step", "testing")
    timings = dict.fromkeys(phases, 0.1)
    demo = set(TrainerMetricModel().step_metrics(10, timings, 0.5))
    assert set(panels.VERL_KEYS) == demo
