"""Prometheus panels and alerts for one run, from the panel catalogue (`rl_insight/semantics/panels.py`).

The server owns every query: the scope is the run's `project`/`experiment_name` (quoted, never
taken from the browser as PromQL), the rate window follows Grafana's `$__rate_interval` rule so
the UI and the dashboards draw the same numbers, and results are bounded (points per series,
series per panel).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from typing import Any, Mapping

from ...semantics import panels as catalogue
from .answers import Alert, AlertList, Panel, PanelSeries, PrometheusState, SectionData
from .api import PrometheusApi, PrometheusUnavailable, sample_value

MAX_SERIES_PER_QUERY = 64
MAX_POINTS = 1000
RECENT_ALERTS_S = 3600.0


def scope_selector(project: str, experiment_name: str) -> str:
    return f"project={catalogue.quote(project)}, experiment_name={catalogue.quote(experiment_name)}"


def rate_window_s(step_s: float, scrape_s: float) -> float:
    """Grafana's `$__rate_interval`: max(step + scrape interval, 4 × scrape interval)."""
    return max(step_s + scrape_s, 4 * scrape_s)


def query_step_s(start: float, end: float, points: int, scrape_s: float) -> float:
    """About `points` points over the range, never finer than the scrape interval, in whole seconds."""
    return float(max(math.ceil(scrape_s), math.ceil((end - start) / max(2, points))))


def run_time_range(
    run: Mapping[str, Any], from_s: float | None, to_s: float | None, default_s: float = 1800.0
) -> tuple[float, float]:
    """The window shown for a run: what was asked, else the last `default_s` of the run (up to now when live)."""
    end = to_s if to_s is not None else (time.time() if run.get("status") == "live" else float(run["last_seen"]) + 30)
    start = from_s if from_s is not None else max(float(run["first_seen"]) - 30, end - default_s)
    if end <= start:
        start = end - 60
    return start, end


async def availability(
    api: PrometheusApi, project: str, experiment_name: str, start: float, end: float
) -> dict[str, bool]:
    """Which catalogue sections have any series for the run in the window (one instant query each)."""
    sel = scope_selector(project, experiment_name)
    rng = f"{max(1, math.ceil(end - start))}s"
    async with api.session() as client:
        async def probe(section: catalogue.Section) -> bool:
            expr = f'count(last_over_time({{__name__=~"{section.probe}", {sel}}}[{rng}]))'
            return bool(await api.query(client, expr, at=end))
        found = await asyncio.gather(*(probe(s) for s in catalogue.SECTIONS))
    return {s.id: ok for s, ok in zip(catalogue.SECTIONS, found)}


def _shape(result: list[dict[str, Any]], legend: str) -> tuple[list[PanelSeries], bool]:
    series: list[PanelSeries] = []
    for item in result:
        labels = {k: str(v) for k, v in item.get("metric", {}).items()}
        pts = [[float(t), sample_value(v)] for t, v in item.get("values", [])]
        series.append(
            {
                "name": catalogue.legend(legend, labels) or labels.get("__name__", "value"),
                "labels": labels,
                "points": pts,
            }
        )
    series.sort(key=lambda s: _natural(s["name"]))
    return series[:MAX_SERIES_PER_QUERY], len(series) > MAX_SERIES_PER_QUERY


def _natural(text: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


async def section_data(api: PrometheusApi, section: catalogue.Section, project: str, experiment_name: str, start: float,
                       end: float, points: int, scrape_s: float) -> SectionData:
    """Every (non-heatmap) panel of a section, each query run as a range query over [start, end]. Prometheus counts
    as unreachable only when every panel failed; a single failing query stays on its panel."""
    step = query_step_s(start, end, min(points, MAX_POINTS), scrape_s)
    window = f"{rate_window_s(step, scrape_s):g}s"
    sel = scope_selector(project, experiment_name)
    shown = [p for p in section.panels if p.kind == "timeseries"]
    async with api.session() as client:
        async def one(query: catalogue.Query) -> tuple[list[PanelSeries], bool, str | None]:
            try:
                result = await api.query_range(client, catalogue.render(query.expr, sel, window), start, end, step)
            except PrometheusUnavailable as e:
                return [], False, str(e)
            series, truncated = _shape(result, query.legend)
            return series, truncated, None
        results = await asyncio.gather(*(one(q) for p in shown for q in p.queries))
    out: list[Panel] = []
    i = 0
    for p in shown:
        series: list[PanelSeries] = []
        errors, truncated = [], False
        for _ in p.queries:
            s, cut, err = results[i]
            i += 1
            series += s
            truncated |= cut
            if err:
                errors.append(err)
        out.append({"id": p.id, "title": p.title, "unit": p.unit, "description": p.description, "stack": p.stack,
                    "series": series, "truncated": truncated, "error": "; ".join(dict.fromkeys(errors)) or None})
    failed = [p["error"] for p in out if p["error"]]
    state: PrometheusState = {"state": "unreachable", "message": "; ".join(dict.fromkeys(failed))} \
        if failed and len(failed) == len(out) else {"state": "ok"}
    return {"section": section.id, "title": section.title, "from_s": start, "to_s": end, "step_s": step,
            "rate_window": window, "prometheus": state, "panels": out}


# ----------------------------------------------------------------------------- alerts
MAX_RESOLVED_VALUES = 50  # resolved alerts whose value is looked up (one query each)
RESOLVED_LOOKBACK_S = 60.0  # a resolved alert's value: the last of its expression's values in this window
_TEMPLATE_LABEL = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")
_TEMPLATE_OTHER = re.compile(r"\{\{[^}]*\}\}")


_TEMPLATE_VALUE = re.compile(r"\{\{\s*\$value\s*(?:\|\s*printf\s*\"([^\"]{1,20})\"\s*)?\}\}")


def _fill(template: str, labels: dict[str, str], value: float | None = None) -> str:
    """Annotations of an alert that is no longer active: its rule's template with the labels filled in, and its value
    when it is known (the rule's expression at the alert's last firing); what cannot be filled reads "…"."""
    def value_of(m: re.Match) -> str:
        if value is None:
            return "…"
        if m.group(1):
            try:
                return m.group(1) % value  # Go's printf verbs the rules use (%.1f, %.2f, %g) are Python's too
            except (TypeError, ValueError):
                pass
        return f"{value:.4g}"

    filled = _TEMPLATE_VALUE.sub(value_of, _TEMPLATE_LABEL.sub(lambda m: labels.get(m.group(1), ""), template))
    return _TEMPLATE_OTHER.sub("…", filled)


async def _value_at(api: PrometheusApi, client: Any, rule: dict[str, Any], labels: dict[str, str],
                    at: float | None) -> float | None:
    """A resolved alert's value: its rule's expression over the minute up to its last firing, the last value of the
    series whose labels it carries (a range, not the one instant: a scrape appended after the rule's evaluation but
    stamped before it can make the expression false at that very instant)."""
    expr = rule.get("query")
    if not expr or at is None:
        return None
    try:
        result = await api.query_range(client, expr, at - RESOLVED_LOOKBACK_S, at, 1.0)
    except Exception:  # (Prometheus gone meanwhile: the summary says "…")
        return None
    for item in result:
        metric = item.get("metric", {})
        if all(labels.get(k) == str(v) for k, v in metric.items() if k != "__name__"):  # (a filter keeps the name)
            values = item.get("values") or []
            return sample_value(values[-1][1]) if values else None
    return None


def _matches(labels: dict[str, str], project: str | None, experiment_name: str | None) -> bool:
    return ((project is None or labels.get("project") == project)
            and (experiment_name is None or labels.get("experiment_name") == experiment_name))


async def alerts(api: PrometheusApi, project: str | None = None, experiment_name: str | None = None,
                 recent_s: float = RECENT_ALERTS_S, resolution_s: float = 15.0,
                 rules_api: PrometheusApi | None = None) -> AlertList:
    """Firing and pending alerts now (from `rules_api`, where the rules are evaluated: the managed Prometheus, else
    `api`), and alerts that fired within `recent_s` and are resolved (their ALERTS series, from `api`, which a
    long-term store behind --prometheus-url receives by remote_write), each with its summary, description and what
    to check (the rule's annotations)."""
    async with api.session() as client:
        rules, fired = await asyncio.gather(
            (rules_api or api).alert_rules(client),
            api.query(
                client,
                f'max_over_time(timestamp(ALERTS{{alertstate="firing"}})'
                f"[{int(recent_s)}s:{max(1, int(resolution_s))}s])",
            ),
        )
    by_name = {r.get("name"): r for r in rules}
    active: list[Alert] = []
    seen = set()
    for rule in rules:
        for a in rule.get("alerts", []):
            labels = {k: str(v) for k, v in a.get("labels", {}).items()}
            if not _matches(labels, project, experiment_name):
                continue
            key = tuple(sorted(labels.items()))
            seen.add(key)
            ann = a.get("annotations", {})
            active.append(
                {
                    "alertname": rule.get("name"),
                    "state": a.get("state"),
                    "severity": labels.get("severity", ""),
                    "labels": labels,
                    "since": a.get("activeAt"),
                    "value": a.get("value"),
                    "summary": ann.get("summary", ""),
                    "description": ann.get("description", ""),
                    "what_to_check": ann.get("what_to_check", ""),
                }
            )
    recent: list[Alert] = []
    for item in fired:
        labels = {k: str(v) for k, v in item.get("metric", {}).items() if k != "alertstate"}
        if not _matches(labels, project, experiment_name):
            continue
        firing_labels = tuple(sorted(labels.items()))
        if firing_labels in seen:
            continue
        rule = by_name.get(labels.get("alertname"), {})
        ann = rule.get("annotations", {})
        recent.append(
            {
                "alertname": labels.get("alertname"),
                "state": "resolved",
                "severity": labels.get("severity", ""),
                "labels": labels,
                "last_firing": sample_value(item.get("value", [0, "nan"])[1]),
                "summary": _fill(ann.get("summary", ""), labels),
                "description": _fill(ann.get("description", ""), labels),
                "what_to_check": ann.get("what_to_check", ""),
            }
        )
    if recent:  # each resolved alert's value when it last fired, for its summary ("4.0x the median", not "…")
        async with api.session() as client:
            values = await asyncio.gather(*(
                _value_at(api, client, by_name.get(r["alertname"], {}), r["labels"], r["last_firing"])
                for r in recent[:MAX_RESOLVED_VALUES]))
        for r, value in zip(recent, values):
            rule = by_name.get(r["alertname"], {})
            ann = rule.get("annotations", {})
            r["value"] = value
            r["summary"] = _fill(ann.get("summary", ""), r["labels"], value)
            r["description"] = _fill(ann.get("description", ""), r["labels"], value)
    order = {"firing": 0, "pending": 1}
    active.sort(key=lambda a: (order.get(a["state"] or "", 2), a["severity"] != "critical", a["alertname"] or ""))
    recent.sort(key=lambda a: -(a.get("last_firing") or 0))
    return {"prometheus": {"state": "ok"}, "active": active, "recent": recent, "recent_window_s": recent_s}
