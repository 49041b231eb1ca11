"""Generate the Grafana dashboards in `dashboards/` (classic dashboard JSON).

    python tools/build_dashboards.py          # rewrite dashboards/*.json
    python tools/build_dashboards.py --check  # exit 1 if the committed files differ

The JSON files are the product (Grafana provisions them); this script keeps 150 panels consistent:
every PromQL query is scoped by `project` and `experiment_name`, the datasources are variables,
uids are stable and readable, and nothing from Grafana 13's v2 schema appears. A test runs
`--check`, so the files and the generator cannot drift apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rl_insight.semantics import panels, slime_panels

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dashboards"
SCHEMA_VERSION = 39  # classic JSON model understood by Grafana 10.x to 13.x
PROM = {"type": "prometheus", "uid": "${datasource}"}
TEMPO = {"type": "tempo", "uid": "${tempo_datasource}"}
S = 'project=~"$project", experiment_name=~"$experiment_name"'  # every PromQL selector carries this scope
M = "rl_insight_monitor_"

# ----------------------------------------------------------------------------- building blocks
class Board:
    """Collects panels and lays them out on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._x = 0
        self._y = 0
        self._row_h = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                            "gridPos": {"x": 0, "y": self._y, "w": 24, "h": 1}})
        self._y += 1

    def _newline(self) -> None:
        if self._x:
            self._y += self._row_h
            self._x, self._row_h = 0, 0

    def add(self, panel: dict[str, Any], w: int = 8, h: int = 8) -> None:
        if self._x + w > 24:
            self._newline()
        panel["gridPos"] = {"x": self._x, "y": self._y, "w": w, "h": h}
        self.panels.append(panel)
        self._x += w
        self._row_h = max(self._row_h, h)

    def finish(self) -> list[dict[str, Any]]:
        for i, p in enumerate(self.panels, start=1):
            p["id"] = i
        return self.panels


def prom(
    expr: str, legend: str = "", ref: str = "A", fmt: str = "time_series", instant: bool = False
) -> dict[str, Any]:
    t: dict[str, Any] = {"datasource": PROM, "expr": expr, "legendFormat": legend, "refId": ref, "format": fmt}
    if instant:
        t["instant"] = True
        t["range"] = False
    return t


def timeseries(title: str, targets: list[dict], unit: str = "short", description: str = "", stack: bool = False,
               thresholds: list[tuple[float | None, str]] | None = None) -> dict[str, Any]:
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    defaults: dict[str, Any] = {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 20 if stack else 0,
                                                         "stacking": {"mode": "normal" if stack else "none"},
                                                         "showPoints": "never"}}
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in thresholds]}
        defaults["custom"]["thresholdsStyle"] = {"mode": "line+area"}
    return {"type": "timeseries", "title": title, "description": description, "datasource": PROM, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def stat(title: str, expr: str, unit: str = "short", description: str = "", legend: str = "",
         thresholds: list[tuple[float | None, str]] | None = None) -> dict[str, Any]:
    steps = thresholds or [(None, "green")]
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": PROM,
        "targets": [prom(expr, legend, instant=False)],
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "thresholds": {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in steps]},
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        },
    }


def table(title: str, expr: str, description: str = "") -> dict[str, Any]:
    return {"type": "table", "title": title, "description": description, "datasource": PROM,
            "targets": [prom(expr, fmt="table", instant=True)],
            "transformations": [{"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True}}}],
            "fieldConfig": {"defaults": {}, "overrides": []}, "options": {"showHeader": True}}


def heatmap(title: str, expr: str, unit: str = "short") -> dict[str, Any]:
    return {"type": "heatmap", "title": title, "datasource": PROM, "targets": [prom(expr, "{{le}}", fmt="heatmap")],
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"calculate": False, "yAxis": {"unit": unit}, "cellGap": 1,
                        "color": {"mode": "scheme", "scheme": "Oranges"}}}


def traceql_state_timeline(title: str = "RL state timeline") -> dict[str, Any]:
    """Tempo spans as a state timeline: one row per lane (`state_lane_id`), lanes sorted by prefix then number."""
    query = ('{span.state_lane_id != "" && span.project =~ "${project:regex}" && '
             'span.experiment_name =~ "${experiment_name:regex}"}')
    return {
        "type": "state-timeline",
        "title": title,
        "datasource": TEMPO,
        "description": "One row per lane (rank_N, replica_N, …); colour = state. Open states appear when they end in "
                       "Tempo; "
        "the built-in UI shows them while they run.",
        "targets": [
            {
                "datasource": TEMPO,
                "refId": "A",
                "queryType": "traceql",
                "query": query,
                "tableType": "spans",
                "limit": 10000,
                "spss": 10000,
            }
        ],
        "transformations": [
            {
                "id": "calculateField",
                "options": {
                    "mode": "binary",
                    "alias": "End time",
                    "binary": {"left": "Start time", "operator": "+", "right": "Duration"},
                },
            },
            {
                "id": "extractFields",
                "options": {
                    "source": "state_lane_id",
                    "format": "regexp",
                    "regExp": "^(?<state_lane_prefix>.+?)(?:[_-](?<state_lane_num>\\d+))?$",
                },
            },
            {
                "id": "convertFieldType",
                "options": {
                    "conversions": [
                        {"targetField": "state_lane_num", "destinationType": "number"},
                        {"targetField": "End time", "destinationType": "time"},
                    ]
                },
            },
            {"id": "sortBy", "options": {"sort": [{"field": "state_lane_prefix"}, {"field": "state_lane_num"}]}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Duration": True, "Span ID": True, "Trace Service": True, "Trace Name": True}
                },
            },
            {"id": "partitionByValues", "options": {"fields": ["state_lane_id"], "keepFields": False}},
        ],
        "fieldConfig": {"defaults": {"custom": {"fillOpacity": 80, "lineWidth": 0}}, "overrides": []},
        "options": {
            "mergeValues": True,
            "showValue": "never",
            "rowHeight": 0.8,
            "alignValue": "left",
            "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
            "perPage": 64,
        },
    }


def spans_table() -> dict[str, Any]:
    query = (
        '{span.state_lane_id != "" && span.project =~ "${project:regex}" && '
        'span.experiment_name =~ "${experiment_name:regex}"} | select(span.state_lane_id, span.state_name, '
        'span.process_id)'
    )
    return {
        "type": "table",
        "title": "Recent states",
        "datasource": TEMPO,
        "targets": [
            {
                "datasource": TEMPO,
                "refId": "A",
                "queryType": "traceql",
                "query": query,
                "tableType": "spans",
                "limit": 200,
                "spss": 200,
            }
        ],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True},
    }


# ----------------------------------------------------------------------------- variables
def _query_var(name: str, label: str, query: str, hide: int = 0, multi: bool = True) -> dict[str, Any]:
    return {"type": "query", "name": name, "label": label, "datasource": PROM, "definition": query,
            "query": {"query": query, "refId": f"{name}-query", "qryType": 1}, "refresh": 2, "sort": 1,
            "multi": multi, "includeAll": True, "allValue": ".*", "hide": hide,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": []}


def variables(extra: list[dict[str, Any]] | None = None, tempo: bool = False) -> dict[str, Any]:
    lst: list[dict[str, Any]] = [
        {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus", "hide": 0,
         "current": {"text": "Prometheus", "value": "prometheus"}, "options": [], "refresh": 1},
    ]
    if tempo:
        lst.append({"type": "datasource", "name": "tempo_datasource", "label": "Tempo", "query": "tempo", "hide": 0,
                    "current": {"text": "Tempo", "value": "tempo"}, "options": [], "refresh": 1})
    lst.append(_query_var("project", "Project", f"label_values({M}training_global_step, project)"))
    lst.append(_query_var("experiment_name", "Experiment",
                          f'label_values({M}training_global_step{{project=~"$project"}}, experiment_name)'))
    return {"list": lst + (extra or [])}


def dashboard(uid: str, title: str, board: Board, templating: dict[str, Any], description: str,
              time_from: str = "now-30m") -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["rl-insight"],
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "browser",
        "graphTooltip": 1,
        "refresh": "10s",
        "time": {"from": time_from, "to": "now"},
        "timepicker": {"refresh_intervals": ["5s", "10s", "30s", "1m", "5m", "15m", "1h"]},
        "templating": templating,
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "tags": ["rl-insight"],
                "asDropdown": True,
                "title": "RL-Insight",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "panels": board.finish(),
    }


# ----------------------------------------------------------------------------- sections
def trainer_section(b: Board) -> None:
    for family in panels.TRAINER_FAMILIES:
        b.row(f"training · {family.title}")
        for name in family.metrics:
            b.add(timeseries(name, [prom(f"{M}{name}{{{S}}}", "{{experiment_name}}")]), w=6, h=7)


def moe_section(b: Board) -> None:
    """verl's rollout MoE load-balance metrics (semantics/moe.py): one heatmap row per layer, the colour its busiest
    expert's excess over its fair share (max_vio; 0 = balanced), as the run page's MoE heatmap."""
    b.row("rollout · MoE expert load")
    expr = f'{{__name__=~"{M}rollout_moe_max_vio_layer_[0-9]+", {S}}}'
    target = prom(expr, "{{__name__}}")  # one row per layer
    b.add({"type": "heatmap", "title": "MoE load violation per layer (max_vio: the busiest expert's share x experts "
           "- 1)", "datasource": PROM, "targets": [target],
           "description": "verl logs rollout/moe/max_vio/layer_i when moe_lb_metrics_interval > 0: 0 means the "
                          "busiest expert of the layer gets its fair share, 2 means three times it.",
           "fieldConfig": {"defaults": {"unit": "short"}, "overrides": []},
           "options": {"calculate": False, "yAxis": {"unit": "short"}, "rowsFrame": {"layout": "auto"},
                       "cellGap": 1, "color": {"mode": "scheme", "scheme": "Oranges"}}}, w=24, h=9)


def catalogue_section(b: Board, section: panels.Section) -> None:
    """One section of rl_insight/semantics/panels.py (the catalogue the built-in UI queries too) as a dashboard row."""
    scope = S + (', replica=~"$replica"' if section.per_replica else "")
    scope += "".join(f', {label}=~"${var}"' for label, var in section.variables)
    b.row(section.title)
    for p in section.panels:
        exprs = [panels.render(q.expr, scope, "$__rate_interval") for q in p.queries]
        if p.kind == "heatmap":
            b.add(heatmap(p.title, exprs[0], p.unit), w=12)
        else:
            b.add(timeseries(p.title, [prom(e, q.legend) for e, q in zip(exprs, p.queries)], unit=p.unit,
                             description=p.description, stack=p.stack, thresholds=list(p.thresholds) or None))


def vllm_section(b: Board) -> None:
    catalogue_section(b, panels.VLLM)


def sglang_section(b: Board) -> None:
    catalogue_section(b, panels.SGLANG)


def omni_trainer_section(b: Board) -> None:
    b.row("training · omni (verl-omni)")
    for name in panels.OMNI_TRAINER_METRICS:
        b.add(timeseries(name, [prom(f"{M}{name}{{{S}}}", "{{experiment_name}}")]), w=6, h=7)


def vllm_omni_section(b: Board) -> None:
    for section in panels.OMNI_SECTIONS:
        catalogue_section(b, section)


def transfer_queue_section(b: Board) -> None:
    catalogue_section(b, panels.TRANSFER_QUEUE)


def hardware_section(b: Board) -> None:
    for section in (panels.HOST, panels.GPU, panels.NPU):
        catalogue_section(b, section)


def replica_var(engine: str) -> dict[str, Any]:
    metric = {"vllm": "vllm[:_]num_requests_running", "sglang": "sglang[:_]num_running_reqs",
              "vllm-omni": "vllm_omni[:_]num_requests_running"}[engine]
    return _query_var(
        "replica",
        "Replica",
        f'label_values({{__name__=~"{metric}", project=~"$project", experiment_name=~"$experiment_name"}}, replica)',
    )


# ----------------------------------------------------------------------------- dashboards
def overview() -> dict[str, Any]:
    b = Board()
    b.row("Is the run healthy?")
    b.add(stat("Global step", f"max({M}training_global_step{{{S}}})"), w=4, h=5)
    b.add(stat("Steps per hour", f"3600 * max(deriv({M}training_global_step{{{S}}}[10m]))", unit="short",
               description="Slope of training_global_step over 10 minutes."), w=4, h=5)
    b.add(stat("Time per step", f"max({M}timing_s_step{{{S}}})", unit="s"), w=4, h=5)
    b.add(stat("Targets up", f"sum(up{{{S}}})", thresholds=[(None, "green")]), w=4, h=5)
    b.add(stat("Targets down", f"sum(1 - up{{{S}}})", thresholds=[(None, "green"), (1, "red")]), w=4, h=5)
    b.add(stat("Alerts firing", f'count(ALERTS{{alertstate="firing", {S}}})', thresholds=[(None, "green"), (1, "red")],
               description="Empty (no value) when nothing fires."), w=4, h=5)
    b.row("Where does the step time go?")
    b.add(timeseries("Step time breakdown", [prom(
        f'{{__name__=~"{M}timing_s_(gen|old_log_prob|ref|update_actor|update_weights|adv|testing)", {S}}}',
        "{{__name__}}")], unit="s", stack=True, description="verl's timing_s/* per step, stacked."), w=12)
    b.add(timeseries("Step time and throughput", [prom(f"{M}timing_s_step{{{S}}}", "step s"),
                                                  prom(f"{M}perf_throughput{{{S}}}", "tokens/s/GPU")]), w=12)
    b.row("Where do the device-hours go? (the goodput ledger, docs/ledger.md)")
    b.add(stat("Goodput", f"max(rl_insight_insight_goodput_ratio{{{S}}})", unit="percentunit",
               description="Training device-seconds over all device-seconds of the run's summarized steps.",
               thresholds=[(None, "red"), (0.2, "orange"), (0.4, "green")]), w=4, h=8)
    b.add(timeseries("Device-seconds per second by reason", [prom(
        f"sum by (reason) (rate(rl_insight_ledger_seconds_total{{{S}}}[$__rate_interval]))", "{{reason}}")],
        stack=True, description="Each step's wall time × devices, split into one reason each (training, generating, "
        "weight sync, waiting for the long-tail replica, …): the stack's height is the devices the run keeps busy "
        "or waiting."), w=12, h=8)
    b.add(timeseries("Generated tokens by fate", [prom(
        f'{{__name__=~"{M}tokens_(generated|filtered|stale|aborted)", {S}}}', "{{__name__}}")],
        description="What the job reports of each step's generated tokens (tokens/generated, tokens/filtered, …; "
        "the run page's ledger also derives trained-on tokens from verl's length metrics)."), w=8, h=8)
    b.row("Learning")
    b.add(timeseries("Reward", [prom(f"{M}critic_score_mean{{{S}}}", "score {{experiment_name}}"),
                                prom(f"{M}val_core_openai_gsm8k_acc_mean_1{{{S}}}", "val acc {{experiment_name}}")]))
    b.add(
        timeseries(
            "Rollout/training probability gap",
            [prom(f"{M}training_rollout_probs_diff_mean{{{S}}}", "probs_diff_mean")],
            thresholds=[(None, "green"), (0.005, "orange"), (0.01, "red")],
            description="verl FAQ: normal below 0.005, abnormal when it stays above 0.01 "
            "(precision mismatch between training and inference).",
        )
    )
    b.add(
        timeseries(
            "Pearson corr and grad norm",
            [
                prom(f"{M}training_rollout_actor_probs_pearson_corr{{{S}}}", "pearson corr"),
                prom(f"{M}actor_grad_norm{{{S}}}", "grad norm"),
            ],
            description="A steadily rising grad norm is the usual symptom of a precision mismatch.",
        )
    )
    b.row("Rollout")
    b.add(timeseries("Generation tokens/s (all engines)", [prom(
        f'sum(rate({{__name__=~"(vllm|sglang)[:_]generation_tokens_total", {S}}}[$__rate_interval]))', "tokens/s")],
        unit="tps"))
    b.add(timeseries("Rollout long tail: slowest / median replica", [prom(
        f"rl_insight:rollout_long_tail_ratio{{{S}}}", "{{experiment_name}}")],
        thresholds=[(None, "green"), (2, "orange"), (3, "red")],
        description="p90 end-to-end latency of the slowest replica divided by the median replica's (recording rule)."))
    b.add(timeseries("p90 e2e latency by replica", [prom(
        f"rl_insight:rollout_e2e_latency_seconds:p90{{{S}}}", "replica {{replica}}")], unit="s"))
    b.row("Targets")
    b.add(table("Scrape targets", f"up{{{S}}}", description="1 = up, 0 = down, by job and instance."), w=24, h=8)
    return dashboard(
        "rl-insight-overview",
        "rl_insight_overview",
        b,
        variables(),
        "Is the run healthy: step rate, step-time breakdown, reward, throughput, rollout long tail, targets, alerts.",
    )


def verl_trainer(engine: str) -> dict[str, Any]:
    b = Board()
    b.row("RL state timeline")
    b.add(traceql_state_timeline(), w=24, h=12)
    trainer_section(b)
    moe_section(b)
    (vllm_section if engine == "vllm" else sglang_section)(b)
    transfer_queue_section(b)
    hardware_section(b)
    title = f"verl_trainer_v1_with_{engine}_engine"
    return dashboard(
        f"verl-trainer-{engine}",
        title,
        b,
        variables([replica_var(engine)], tempo=True),
        f"verl trainer metrics, RL state timeline, {engine} engines, TransferQueue and hardware for one run.",
    )


def rl_state_timeline() -> dict[str, Any]:
    b = Board()
    b.add(traceql_state_timeline(), w=24, h=18)
    b.add(spans_table(), w=24, h=10)
    return dashboard(
        "rl-state-timeline",
        "rl_state_timeline",
        b,
        variables(tempo=True),
        "Which rank and replica was in which RL state (Tempo spans), one row per lane.",
        time_from="now-15m",
    )


def transfer_queue() -> dict[str, Any]:
    b = Board()
    transfer_queue_section(b)
    return dashboard("rl-insight-transfer-queue", "transfer_queue", b, variables(), "TransferQueue controller and "
                                                                                    "storage units.")


def hardware() -> dict[str, Any]:
    b = Board()
    hardware_section(b)
    return dashboard("rl-insight-hardware", "hardware", b, variables(),
                     "Hosts (node_exporter), NVIDIA GPUs (dcgm-exporter) and Ascend NPUs (npu-exporter).")


def verl_omni_trainer() -> dict[str, Any]:
    """Upstream's verl_omni_trainer_v1_with_vllm_omni_engine (its uid and title)."""
    b = Board()
    b.row("RL state timeline")
    b.add(traceql_state_timeline(), w=24, h=12)
    trainer_section(b)
    omni_trainer_section(b)
    vllm_omni_section(b)
    transfer_queue_section(b)
    hardware_section(b)
    scope = 'project=~"$project", experiment_name=~"$experiment_name"'
    extra = [
        replica_var("vllm-omni"),
        _query_var(
            "omni_model_name",
            "Model",
            f'label_values({{__name__=~"vllm_omni[:_]num_requests_running", {scope}}}, model_name)',
        ),
        _query_var(
            "stage", "Stage", f'label_values({{__name__=~"vllm_omni[:_]num_requests_running", {scope}}}, stage)'
        ),
    ]
    return dashboard(
        "9d5b98ca-e967-48a0-9b5f-03435c36c8db",
        "verl_omni_trainer_v1_with_vllm_omni_engine",
        b,
        variables(extra, tempo=True),
        "verl-omni trainer metrics, RL state timeline, vLLM-Omni pipeline / diffusion / AR stages, TransferQueue "
        "and hardware for one run.",
        time_from="now-15m",
    )


def quick_start_demo() -> dict[str, Any]:
    """Upstream's quick_start_demo (its uid and title, so links from upstream's docs work): one panel per API call
    kind."""
    b = Board()
    b.add(traceql_state_timeline("state_timeline"), w=24, h=10)
    b.add(
        stat(
            "metric_count",
            f"sum({M}train_step_total{{{S}}})",
            description="metric_count(\"train_step\"): the counter's total.",
        ),
        w=6,
        h=8,
    )
    b.add(timeseries("metric_gauge", [prom(f"{M}reward_mean{{{S}}}", "{{experiment_name}}")],
                     description="metric_gauge(\"reward_mean\", …): the latest value."), w=9, h=8)
    b.add(
        timeseries(
            "metric_histogram",
            [
                prom(
                    f"histogram_quantile(0.5, sum by (le) (rate({M}step_latency_ms_bucket{{{S}}}[$__rate_interval])))",
                    "p50",
                ),
                prom(
                    f"histogram_quantile(0.9, sum by (le) (rate({M}step_latency_ms_bucket{{{S}}}[$__rate_interval])))",
                    "p90",
                ),
            ],
            unit="ms",
            description="metric_histogram(\"step_latency_ms\", …): quantiles from the buckets (upstream plots raw "
                        "buckets).",
        ),
        w=9,
        h=8,
    )
    return dashboard("b7560416-da14-4d4d-898d-971245772891", "quick_start_demo", b, variables(tempo=True),
                     "Upstream's quick start: a state timeline and one panel per metric kind.", time_from="now-5m")


def _info_var(name: str, label: str, metric: str, value_label: str, extra: str = "") -> dict[str, Any]:
    """A row/panel repeat variable from an info series' labels (upstream's query_result + regex): value `value_label`,
    text its `title` (query_result prints labels in name order, so `title` follows)."""
    query = f'query_result(max_over_time({M}{metric}{{{S}, global_steps=~"$step"{extra}}}[$__range]))'
    v = _query_var(name, label, query)
    v["regex"] = f'/{value_label}="(?<value>[^"]*)".*title="(?<text>[^"]*)"/'
    v["sort"] = 3  # numerical: sample 10 after sample 9
    return v


def _agent_traceql(where: str, select: str, limit: int) -> dict[str, Any]:
    query = (
        '{' + where + ' && span.project =~ "${project:regex}" && span.experiment_name =~ "${experiment_name:regex}" && '
        'span.global_steps = ${step}} | select(' + select + ')'
    )
    return {
        "datasource": TEMPO,
        "refId": "A",
        "queryType": "traceql",
        "query": query,
        "tableType": "spans",
        "limit": limit,
        "spss": limit,
    }


def _agent_table(title: str, where: str, select: str, limit: int = 100, description: str = "") -> dict[str, Any]:
    return {"type": "table", "title": title, "description": description, "datasource": TEMPO,
            "targets": [_agent_traceql(where, select, limit)], "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {"showHeader": True}}


def agent_loop_trajectory() -> dict[str, Any]:
    """Upstream's agent_loop_trajectory (its title; upstream ships it in Grafana's v2 schema, which file provisioning
    does not load), as classic JSON scoped like the others: PromQL over the `agent_loop_*_info` gauges that
    `agent_loop_session` publishes, TraceQL over its spans. Row per session (repeat), turn details per trajectory."""
    b = Board()
    step = f'{S}, global_steps=~"$step"'
    b.row("Step overview")
    b.add(stat("trajectories", f"count(max_over_time({M}agent_loop_traj_info{{{step}}}[$__range]))",
               description="Trajectories the step's sessions finished (agent_loop_traj_info)."), w=6, h=5)
    b.add(stat("sessions", f"count(max_over_time({M}agent_loop_session_info{{{step}}}[$__range]))"), w=6, h=5)
    b.add(stat("samples", f"count(max_over_time({M}agent_loop_sample_info{{{step}}}[$__range]))"), w=6, h=5)
    b.add(stat("rollout span", f"max(max_over_time({M}agent_loop_last_turn_unixtime{{{step}}}[$__range])) - "
                               f"min(min_over_time({M}agent_loop_first_turn_unixtime{{{step}}}[$__range]))", unit="s",
               description="From the first session's start to the last session's end in this step."), w=6, h=5)
    b.add(
        table(
            "Trajectories",
            f"max by (sample, session, traj, title) (max_over_time({M}agent_loop_traj_info{{{step}}}[$__range]))",
            description="One row per trajectory: its reward and turns in the title, as upstream's row titles say.",
        ),
        w=24,
        h=8,
    )
    b.row("Session ${session}")
    b.panels[-1]["repeat"] = "session"
    lane = 'span.state_lane_id =~ "experiment=${experiment_name}/${session}/traj=.*"'
    b.add(
        {
            **_agent_table(
                "Trajectory overview",
                f"{lane} && span.turn >= 0",
                "span.turn, span.type, span.finish_reason, span.tool",
                limit=1000,
                description="Every turn of the session's trajectories: generate (gateway) and tool spans.",
            )
        },
        w=24,
        h=8,
    )
    b.add(
        _agent_table(
            "Task summary",
            f'span.monitor.trace_source = "task" && {lane}',
            "span.task_name, span.status, span.reward, span.accuracy, span.finished, span.reward_posted, span.error",
        ),
        w=12,
        h=6,
    )
    b.add(
        _agent_table(
            "Session summary",
            f'span.monitor.trace_source = "session" && {lane}',
            "span.runner_name, span.status, span.num_trajectories, span.reward_source, span.finished",
        ),
        w=12,
        h=6,
    )
    details = _agent_table(
        "Turn details · trajectory ${traj}",
        'span.state_lane_id =~ "experiment=${experiment_name}/${session}/traj=${traj}" && span.turn >= 0',
        "span.turn, span.type, span.tools, span.tool_args, span.finish_reason, span.reasoning, span.content, "
        "span.prompt_tokens, span.completion_tokens, span.tool, span.error",
        limit=500,
    )
    details["repeat"], details["repeatDirection"] = "traj", "v"
    b.add(details, w=24, h=8)
    extra = [_query_var("step", "Step", f'label_values({M}agent_loop_run_info{{{S}}}, global_steps)', multi=False),
             _info_var("sample", "Sample", "agent_loop_sample_info", "sample"),
             _info_var("session", "Session", "agent_loop_session_info", "sess_key", ', sample=~"$sample"'),
             _info_var("traj", "Trajectory", "agent_loop_traj_info", "traj", ', sample=~"$sample"')]
    extra[0]["includeAll"] = False
    extra[0]["sort"] = 4  # numerical, newest step first
    extra[0]["current"] = {}
    templating = variables(extra, tempo=True)
    for v in templating["list"]:  # the agent-loop gauges name the runs here, not the trainer's step metric
        if v["name"] == "project":
            v["definition"] = v["query"]["query"] = f"label_values({M}agent_loop_run_info, project)"
        elif v["name"] == "experiment_name":
            v["definition"] = v["query"]["query"] = (
                f'label_values({M}agent_loop_run_info{{project=~"$project"}}, experiment_name)'
            )
    return dashboard(
        "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        "agent_loop_trajectory",
        b,
        templating,  # upstream's uid: its links work
        "Agent-loop rollouts (upstream's protocol, rl_insight.agent_loop_session): per step, its sessions and "
        "trajectories and every turn. The built-in UI's trajectories view adds verl's MLflow traces, "
        "distributions and the long-tail link.",
        time_from="now-1h",
    )


def slime() -> dict[str, Any]:
    """upstream RL-Insight's slime dashboard (its uid and title), classic JSON, from the catalogue's SLIME_PANELS and
    its SGLang section."""
    b = Board()
    b.row("RL state timeline")
    b.add(traceql_state_timeline(), w=24, h=12)
    b.row("training · slime")
    for title, queries, unit, description in slime_panels.SLIME_PANELS:
        b.add(timeseries(title, [prom(f"{M}{name}{{{S}}}", legend) for name, legend in queries], unit=unit,
                         description=description), w=24 if len(queries) > 1 else 8, h=8)
    catalogue_section(b, panels.SGLANG)
    b.add(timeseries("SGLang target scrape health", [prom(f'up{{job="sglang", {S}, replica=~"$replica"}}',
                                                          "replica {{replica}} · {{instance}}")],
                     description="Prometheus' scrape health of the SGLang servers slime registered (1 = up)."),
          w=12)
    templating = variables([replica_var("sglang")], tempo=True)
    for v in templating["list"]:  # slime's own keys name its runs (it has no verl step metric of its own)
        if v["name"] == "project":
            v["definition"] = v["query"]["query"] = f"label_values({M}train_loss, project)"
        elif v["name"] == "experiment_name":
            query = f'label_values({M}train_loss{{project=~"$project"}}, experiment_name)'
            v["definition"] = v["query"]["query"] = query
    board = dashboard("slime-training-with-sglang", "Slime Training with SGLang", b, templating,
                      "slime (Megatron training, SGLang rollout) through rl-insight: the RL state timeline, slime's "
                      "training and rollout scalars, the SGLang engines.", time_from="now-1h")
    board["tags"] = sorted({*board.get("tags", []), "slime", "sglang"})
    return board


def build_all() -> dict[str, dict[str, Any]]:
    return {
        "quick_start_demo.json": quick_start_demo(),
        "verl_omni_trainer_v1_with_vllm_omni_engine.json": verl_omni_trainer(),
        "rl_insight_overview.json": overview(),
        "verl_trainer_v1_with_vllm_engine.json": verl_trainer("vllm"),
        "verl_trainer_v1_with_sglang_engine.json": verl_trainer("sglang"),
        "rl_state_timeline.json": rl_state_timeline(),
        "transfer_queue.json": transfer_queue(),
        "hardware.json": hardware(),
        "agent_loop_trajectory.json": agent_loop_trajectory(),
        "slime_training_with_sglang.json": slime(),
    }


def render(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=2, sort_keys=False) + "\n"


ANSWERS = {
    "rl_insight_overview": "Is the run healthy? Step number, steps per hour and time per step; where the step time "
                           "goes "
    "(verl's `timing_s/*` stacked); reward and validation accuracy; the training/inference "
    "probability gap with verl's thresholds next to the Pearson correlation and grad norm; "
    "generation throughput; the rollout long tail (slowest vs median replica); scrape targets "
    "up/down and alerts firing.",
    "verl_trainer_v1_with_vllm_engine": "Everything about one verl run with vLLM rollout: the RL state timeline "
                                        "(Tempo), "
    "every trainer metric grouped as in verl's key list, the vLLM engines "
    "(per `replica`), TransferQueue and hardware.",
    "verl_trainer_v1_with_sglang_engine": "The same for SGLang rollout.",
    "rl_state_timeline": "Which rank and replica was in which RL state: one row per lane (`rank_N`, `replica_N`), "
    "lanes sorted by prefix then number, colour = state, plus a table of recent states.",
    "transfer_queue": "Is TransferQueue keeping up, and is it leaking? Request rate and latency by op, produced vs "
    "cleared samples, partitions, storage units.",
    "agent_loop_trajectory": "Agent-loop rollouts (upstream's `agent_loop_session` protocol): per step, how many "
    "trajectories, sessions and samples, each trajectory's reward and turns, and per session a "
    "row with every turn (Tempo), the task and session summaries and each trajectory's turn details.",
    "hardware": "Hosts (node_exporter), NVIDIA GPUs (dcgm-exporter, keyed on `instance` and `gpu`) and Ascend NPUs "
    "(npu-exporter, keyed on `instance` and `id`).",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_docs(boards: dict[str, dict[str, Any]]) -> str:
    import yaml

    from rl_insight.semantics.catalog import EXPORTERS, REMOVED_FALLBACKS

    lines = [
        "# Dashboards, rules and metric catalog",
        "",
        "<!-- Generated by tools/build_dashboards.py from the dashboards and rules themselves; do not edit by hand. "
        "-->",
        "",
        "Grafana dashboards are classic JSON in `dashboards/` (provisionable on Grafana 10 to 13), tagged "
        "`rl-insight`,",
        "with stable uids. Every dashboard has the variables `datasource` (Prometheus), `project` and "
        "`experiment_name`",
        "(cascading; All = `.*`, which also matches series without the label, such as a node exporter registered",
        "without a run identity), and every PromQL selector is scoped by them; TraceQL queries constrain",
        "`span.project` and `span.experiment_name`. Engine metric names are matched as `vllm[:_]…` / `sglang[:_]…`:",
        "engines define `vllm:` names, and newer prometheus-client versions escape them to `vllm_` when Prometheus",
        "negotiates OpenMetrics. `$__rate_interval` is used for every rate. The engine, TransferQueue, GPU, NPU and",
        "host rows come from `rl_insight/semantics/panels.py`, the same catalogue the built-in UI's panels query.",
        "",
    ]
    for name, d in boards.items():
        lines += [f"## {d['title']} (`uid: {d['uid']}`)", "", ANSWERS.get(d["title"], d["description"]), "",
                  "| row | panel | query |", "|---|---|---|"]
        row = ""
        trainer_rows: dict[str, list[str]] = {}
        for p in d["panels"]:
            if p["type"] == "row":
                row = p["title"]
                continue
            queries = [t.get("expr") or t.get("query") for t in p.get("targets", [])]
            if row.startswith("training · "):
                trainer_rows.setdefault(row, []).append(p["title"])
                continue
            lines.append(f"| {_cell(row)} | {_cell(p['title'])} | "
                         f"{'<br>'.join('`' + _cell(q) + '`' for q in queries)} |")
        for r, titles in trainer_rows.items():
            lines.append(
                f"| {_cell(r)} | one panel per metric: {', '.join(titles)} | "
                "`rl_insight_monitor_<metric>{project=~\"$project\", experiment_name=~\"$experiment_name\"}` |"
            )
        lines.append("")
    lines += [
        "## Prometheus rules (`provisioning/rules/`)",
        "",
        "Loaded by the `prometheus.yml` that `rl-insight server start` renders (copied to `<home>/runtime/rules/`).",
        "`promtool check rules` and the `promtool test rules` cases in `tests/promtool/` run in the test suite.",
        "",
        "| rule | kind | expression | for | meaning |",
        "|---|---|---|---|---|",
    ]
    for f in sorted((ROOT / "provisioning" / "rules").glob("*.yml")):
        for g in yaml.safe_load(f.read_text())["groups"]:
            for r in g["rules"]:
                kind = "alert" if "alert" in r else "recording"
                meaning = r.get("annotations", {}).get("summary", "") if kind == "alert" else ""
                lines.append(
                    f"| {r.get('alert') or r.get('record')} | {kind} | `{_cell(' '.join(r['expr'].split()))}` | "
                    f"{r.get('for', '')} | {_cell(meaning)} |"
                )
    lines += [
        "",
        "## Metric catalog",
        "",
        "Exporter metrics the dashboards and rules read (`semantics/catalog.py`; a test fails when a dashboard",
        "references a name that is neither here nor produced by rl-insight). `*` marks TransferQueue metrics whose",
        "name ends in `_total` but which are gauges: they are never `rate()`d.",
        "",
    ]
    for exporter, names in EXPORTERS.items():
        lines.append(f"- **{exporter}**: " + ", ".join(f"`{n}`" for n in names))
    lines.append("- **Removed by vLLM, read only as `or` fallbacks** (engines of the deprecation window): "
                 + ", ".join(f"`{n}`" for n in REMOVED_FALLBACKS))
    lines += [
        "",
        "rl-insight's own series: trainer scalars `rl_insight_monitor_<name>` (the verl keys above, sanitized),",
        "client self-metrics `rl_insight_client_*`, server self-metrics `rl_insight_server_*`, recording rules",
        "`rl_insight:*`.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="fail if dashboards/ differs from the generator")
    args = ap.parse_args()
    stale = []
    boards = build_all()
    outputs = {OUT / name: render(d) for name, d in boards.items()}
    outputs[ROOT / "docs" / "dashboards.md"] = render_docs(boards)
    for path, text in outputs.items():
        name = path.name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"dashboards out of date: {', '.join(stale)}; run python tools/build_dashboards.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
