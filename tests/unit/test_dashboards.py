"""Static checks of every dashboard file: classic JSON, ids, datasources, variables, scoping, metric names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rl_insight.client.agent_loop import GAUGES as AGENT_LOOP_GAUGES
from rl_insight.demo.trainer_metrics import verl_keys
from rl_insight.semantics.catalog import CLIENT_SELF_METRICS, GAUGES_NAMED_TOTAL, exporter_metric_names
from rl_insight.semantics.names import sanitize_metric_name

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RULE_FILES = sorted((ROOT / "provisioning" / "rules").glob("*.yml"))
V2_KEYS = {"apiVersion", "kind", "spec", "elements", "layout", "metadata"}  # Grafana 13 v2 schema
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
                "inf", "nan"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def all_panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def promql_targets(d: dict) -> list[str]:
    return [t["expr"] for p in all_panels(d) for t in p.get("targets", []) if "expr" in t]


def traceql_targets(d: dict) -> list[str]:
    return [t["query"] for p in all_panels(d) for t in p.get("targets", []) if t.get("queryType") == "traceql"]


def rule_exprs() -> list[tuple[str, str]]:
    out = []
    for f in RULE_FILES:
        for g in yaml.safe_load(f.read_text())["groups"]:
            for r in g["rules"]:
                out.append((r.get("record") or r.get("alert"), r["expr"]))
    return out


def metric_references(expr: str) -> tuple[set[str], set[str]]:
    """(plain metric names, __name__ regexes) referenced by a PromQL expression."""
    regexes = set(re.findall(r'__name__=~"([^"]+)"', expr))
    s = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    s = re.sub(r'"[^"]*"', " ", s)  # strings
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges
    s = re.sub(r"\boffset\s+\w+", " ", s)  # offsets (`offset 10m`)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # grouping labels
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or m.group(0) in PROMQL_WORDS or re.fullmatch(r"\d.*", m.group(0)):
            continue
        names.add(m.group(0))
    return names, regexes


def known_metric_names() -> set[str]:
    names = set(exporter_metric_names())
    names |= {"rl_insight_monitor_" + sanitize_metric_name(k.replace("/", "_")) for k in verl_keys()}
    names |= {"rl_insight_monitor_" + n for n in AGENT_LOOP_GAUGES}
    names |= set(CLIENT_SELF_METRICS)
    names |= {r.get("record") for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]
              if r.get("record")}
    from rl_insight.server.live.insights.rounds import insight_families

    # the server's own insight series (rl_insight_insight_*, and the ledger's counter, exposed with "_total")
    names |= {f.name + ("_total" if f.type == "counter" else "") for f in insight_families({})}
    return names


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_valid_classic_json(path: Path) -> None:
    d = load(path)
    assert not (V2_KEYS & set(d)), "Grafana 13 v2 schema keys break file provisioning"
    assert re.fullmatch(r"[a-z0-9-]{3,40}", d["uid"]), "uid must be stable and readable"
    assert d["schemaVersion"] >= 36 and isinstance(d["panels"], list) and d["panels"]
    ids = [p["id"] for p in all_panels(d)]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    variables = [v["name"] for v in d["templating"]["list"]]
    assert variables[:1] == ["datasource"] and "project" in variables and "experiment_name" in variables
    ds_vars = {f"${{{v['name']}}}" for v in d["templating"]["list"] if v["type"] == "datasource"}
    for p in all_panels(d):
        if p["type"] == "row":
            continue
        for ref in [p.get("datasource")] + [t.get("datasource") for t in p.get("targets", [])]:
            assert ref and ref["uid"] in ds_vars, f"panel {p['title']!r}: datasource {ref} is not a datasource variable"
        assert set(p["gridPos"]) == {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


def test_uids_are_unique_across_dashboards() -> None:
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))
    assert {load(p)["title"] for p in DASHBOARDS} >= {
        "verl_trainer_v1_with_vllm_engine",
        "verl_trainer_v1_with_sglang_engine",
        "rl_insight_overview",
        "rl_state_timeline",
        "transfer_queue",
        "hardware",
    }


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_variables_defined_before_use_and_cascade(path: Path) -> None:
    d = load(path)
    defined: set[str] = {"__rate_interval", "__interval", "__range"}
    for v in d["templating"]["list"]:
        used = set(re.findall(r"\$\{?(\w+)", json.dumps(v.get("query", ""))))
        assert used <= defined, f"variable {v['name']} uses {used - defined} before they are defined"
        defined.add(v["name"])
    exp = next(v for v in d["templating"]["list"] if v["name"] == "experiment_name")
    assert '$project' in exp["definition"], "experiment_name must cascade on project"
    for p in all_panels(d):
        for t in p.get("targets", []):
            used = set(re.findall(r"\$\{?(\w+)", t.get("expr", "") + t.get("query", "")))
            assert used <= defined, f"panel {p['title']!r} uses undefined {used - defined}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_is_scoped_to_the_run(path: Path) -> None:
    d = load(path)
    for expr in promql_targets(d):
        for selector in re.findall(r"\{[^}]*\}", expr):
            assert 'project=~"$project"' in selector and 'experiment_name=~"$experiment_name"' in selector, \
                f"unscoped selector {selector} in {expr}"
        bare = [n for n in metric_references(expr)[0] if not re.search(re.escape(n) + r"\s*\{", expr)]
        assert not bare, f"metric(s) {bare} used without a scoped selector in {expr}"
    for q in traceql_targets(d):
        assert "span.project" in q and "span.experiment_name" in q


def test_transfer_queue_total_gauges_are_never_rated() -> None:
    exprs = [e for p in DASHBOARDS for e in promql_targets(load(p))] + [e for _, e in rule_exprs()]
    for expr in exprs:
        for gauge in GAUGES_NAMED_TOTAL:
            assert not re.search(rf"(rate|increase|irate)\(\s*{gauge}\b", expr), f"{gauge} is a gauge: {expr}"


def test_engine_panels_accept_current_and_deprecated_vllm_names() -> None:
    exprs = " ".join(promql_targets(load(ROOT / "dashboards" / "verl_trainer_v1_with_vllm_engine.json")))
    assert "kv_cache_usage_perc|gpu_cache_usage_perc" in exprs
    assert "inter_token_latency_seconds_bucket" in exprs and "time_per_output_token_seconds_bucket" in exprs
    assert "gpu_prefix_cache_hits_total" in exprs
    assert 'vllm[:_]' in exprs  # served as vllm: or escaped to vllm_ by newer prometheus-client


def test_every_referenced_metric_is_known() -> None:
    known = known_metric_names()
    exprs = [(p.name, e) for p in DASHBOARDS for e in promql_targets(load(p))]
    exprs += [(f"rule {n}", e) for n, e in rule_exprs()]
    for p in DASHBOARDS:  # label_values(<selector>, <label>): only the selector names a metric
        for v in load(p)["templating"]["list"]:
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", v.get("definition", ""))
            if m:
                exprs.append((f"{p.name} variable {v['name']}", m.group(1)))
    for where, expr in exprs:
        names, regexes = metric_references(expr)
        for n in names:
            assert n in known, f"{where}: metric {n!r} is not produced by rl-insight or listed in semantics/catalog.py"
        for rx in regexes:
            assert any(re.fullmatch(rx, k) for k in known), f"{where}: no known metric matches {rx!r}"


def test_catalog_is_documented() -> None:
    from rl_insight.semantics.catalog import EXPORTERS

    docs = (ROOT / "docs" / "dashboards.md").read_text()
    for names in EXPORTERS.values():
        for n in names:
            assert n.rstrip("*") in docs, f"{n} missing from docs/dashboards.md"


def test_dashboards_match_their_generator() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_dashboards.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_rate_never_spans_several_metric_names() -> None:
    """rate() drops __name__: a regex over two names (current + deprecated) would make duplicate series."""
    exprs = [e for p in DASHBOARDS for e in promql_targets(load(p))] + [e for _, e in rule_exprs()]
    for expr in exprs:
        for rx in re.findall(r'(?:rate|increase)\(\{__name__=~"([^"]+)"', expr):
            stripped = rx.replace("[:_]", "")
            if "|" in stripped:
                prefix = re.match(r"\(?([a-z|]+)\)?", stripped)
                # alternatives of the *engine* prefix are fine: vLLM and SGLang are different targets
                assert prefix and "|" not in stripped[prefix.end():], f"rate over several names: {rx} in {expr}"


def test_reference_extraction_finds_names() -> None:
    names, regexes = metric_references(
        'histogram_quantile(0.9, sum by (le, replica) (rate({__name__=~"vllm[:_]x_bucket", project=~"$project"}[5m])))'
        ' / on (project) max(rl_insight:ratio{a="b"}) - node_load1{project=~"$project"}')
    assert names == {"rl_insight:ratio", "node_load1"} and regexes == {"vllm[:_]x_bucket"}


def test_agent_loop_dashboard_reads_what_agent_loop_session_writes() -> None:
    """Upstream's agent_loop_trajectory, classic JSON: its repeat variables take value and title from the info series'
    labels, its TraceQL selects attributes our agent_loop_session and turn spans carry, turns filtered numerically."""
    d = load(ROOT / "dashboards" / "agent_loop_trajectory.json")
    v = {x["name"]: x for x in d["templating"]["list"]}
    assert [n for n in v if n in ("step", "sample", "session", "traj")] == ["step", "sample", "session", "traj"]
    line = (
        '{__name__="rl_insight_monitor_agent_loop_session_info", experiment_name="e", global_steps="7", project="p", '
        'sample="3", sess_key="sample=3/session=s1", session="s1", title="Session s1"} 1 1700000000000'
    )
    m = re.search(v["session"]["regex"].strip("/").replace("(?<", "(?P<"), line)  # Grafana's regex, in Python's dialect
    assert m and (m.group("value"), m.group("text")) == ("sample=3/session=s1", "Session s1")
    rows = [p for p in d["panels"] if p["type"] == "row"]
    assert any(r.get("repeat") == "session" for r in rows)
    assert any(p.get("repeat") == "traj" for p in all_panels(d))
    emitted = {
        "turn",
        "type",
        "tools",
        "tool_args",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "tool",
        "error",
        "runner_name",
        "status",
        "num_trajectories",
        "reward_source",
        "finished",
        # the runtimes' agent_task spans (upstream's protocol; agent_loop_session does not write them)
        "task_name",
        "reward",
        "accuracy",
        "reward_posted",
        "reasoning",
        "content",
    }
    for q in traceql_targets(d):
        assert q.count("{") == q.count("}") and q.count("(") == q.count(")"), q
        assert "span.global_steps = ${step}" in q  # numeric: agent_loop_session keeps global_steps a number
        selected = re.search(r"\| select\(([^)]*)\)", q).group(1)
        assert {s.strip().removeprefix("span.") for s in selected.split(",")} <= emitted, q
