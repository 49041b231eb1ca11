"""`/api/v1/runs/{id}/panels…` and `/api/v1/alerts`: Prometheus data for the UI, queried by the server.

The browser names a catalogue section and a time range; the server builds the PromQL from
`rl_insight/semantics/panels.py` scoped to the run. Prometheus being absent or down is an answer (200 with
`prometheus.state`), not an error: the UI shows why a section is empty.
"""

from __future__ import annotations

from typing import Optional, cast

from fastapi import APIRouter, Query, Request

from ...errors import NotFoundError
from ...semantics import panels as catalogue
from ..access.declared import declare
from ..access.scope import only_visible
from ..prometheus.answers import Alert, AlertList, MetricFamilies, PanelSections, PrometheusState, SectionData
from ..prometheus.api import PrometheusApi, PrometheusUnavailable
from ..prometheus.panels import RECENT_ALERTS_S, alerts, availability, run_time_range, section_data
from ..rooms.alerting.parts import alerting_of
from ..routing.models import error_responses, typed_answer
from ..routing.params import RunId
from ..runstore.results import Run
from ..state import AppState

FromS = Query(None, ge=0, le=1e11, description="window start, epoch seconds (default: the run's last 30 minutes)")
ToS = Query(None, ge=0, le=1e11, description="window end, epoch seconds")


def _unavailable(api: PrometheusApi, e: Exception | None = None) -> PrometheusState:
    if not api.configured:
        return {"state": "not_configured", "message": "no Prometheus is managed by this server: start the stack with "
                                                       "`rl-insight server start` (Debian: apt install prometheus)"}
    return {"state": "unreachable", "message": str(e)}


def build_router(st: AppState) -> APIRouter:
    cfg = st.config
    api = PrometheusApi(cfg.prometheus_url)  # panels and alert history: the query endpoint
    rules = PrometheusApi(cfg.managed_prometheus_url) if cfg.managed_prometheus_url else api  # where rules run
    r = APIRouter(prefix="/api/v1", tags=["prometheus"],
                  responses=error_responses(401, 403, 404, 422))
    _add_panel_routes(r, st, api)
    _add_alert_routes(r, st, api, rules)
    return r


def _add_panel_routes(r: APIRouter, st: AppState, api: PrometheusApi) -> None:
    """The catalogue's families and sections, and a section's panels as series (the Grafana dashboards' queries)."""
    assert st.reader is not None
    reader, cfg = st.reader, st.config

    def run_of(run_id: int) -> Run:
        return reader.runs.get(run_id, cfg.live_window_s)

    @r.get("/metric-families", **declare(st.auth, "read", "global"),
           **typed_answer(MetricFamilies, "the catalogue's trainer metric families"))
    def metric_families() -> MetricFamilies:
        """The trainer's metric families (panel catalogue): the UI groups a run's metric charts by them, in this
        order; a metric whose first word is no family's id goes to "other". `headline`: the run page's first-screen
        charts, each the first of its names a run logged."""
        return {"families": [{"id": f.id, "title": f.title, "key": f.key, "metrics": list(f.metrics)}
                             for f in catalogue.TRAINER_FAMILIES],
                "headline": [{"title": t, "metrics": list(names)} for t, names in catalogue.HEADLINE_METRICS]}

    @r.get("/runs/{run_id}/panels", **declare(st.auth, "read", "named"),
           **typed_answer(PanelSections, "the sections and which have data"))
    async def sections(run_id: RunId, from_s: Optional[float] = FromS, to_s: Optional[float] = ToS) -> PanelSections:
        """The catalogue's sections for this run: which have data, and what turns the empty ones on."""
        run = run_of(run_id)
        start, end = run_time_range(run, from_s, to_s)
        prom: PrometheusState = {"state": "ok"}
        found: dict[str, bool] = {}
        if api.configured:
            try:
                found = await availability(api, run["project"], run["experiment_name"], start, end)
            except PrometheusUnavailable as e:
                prom = _unavailable(api, e)
        else:
            prom = _unavailable(api)
        return {"run_id": run_id, "from_s": start, "to_s": end, "prometheus": prom, "sections": [
            {"id": s.id, "title": s.title, "available": found.get(s.id, False), "enable": s.enable,
             "panels": [{"id": p.id, "title": p.title, "unit": p.unit, "description": p.description}
                        for p in s.panels if p.kind == "timeseries"]} for s in catalogue.SECTIONS]}

    @r.get("/runs/{run_id}/panels/{section_id}", **declare(st.auth, "read", "named"),
           **typed_answer(SectionData, "the section's panels as series"))
    async def section(
        run_id: RunId,
        section_id: str,
        from_s: Optional[float] = FromS,
        to_s: Optional[float] = ToS,
        points: int = Query(240, ge=2, le=1000, description="about this many points per series"),
    ) -> SectionData:
        """Every panel of one section as downsampled series (the same queries as the Grafana dashboards)."""
        sec = catalogue.BY_ID.get(section_id)
        if sec is None:
            raise NotFoundError(f"no panel section {section_id[:64]!r}", hint="known: " + ", ".join(catalogue.BY_ID))
        run = run_of(run_id)
        start, end = run_time_range(run, from_s, to_s)
        if not api.configured:
            return {"section": sec.id, "title": sec.title, "from_s": start, "to_s": end,
                    "prometheus": _unavailable(api), "panels": []}
        return await section_data(api, sec, run["project"], run["experiment_name"], start, end, points,
                                  cfg.scrape_interval_s)



def _add_alert_routes(r: APIRouter, st: AppState, api: PrometheusApi, rules: PrometheusApi) -> None:
    """A run's alerts and every alert: Prometheus' (from `rules`, where they are evaluated) and what this server
    delivered itself."""
    assert st.reader is not None
    reader, cfg = st.reader, st.config

    def run_of(run_id: int) -> Run:
        return reader.runs.get(run_id, cfg.live_window_s)

    @r.get("/runs/{run_id}/alerts", **declare(st.auth, "read", "named"),
           **typed_answer(AlertList, "the run's alerts, active and recent"))
    async def run_alerts(run_id: RunId) -> AlertList:
        """Firing, pending and recently resolved alerts of this run (labels project/experiment_name)."""
        run = run_of(run_id)
        # what this server delivered itself (a stall, a hang, a lost run), first: the page shows what people were told
        events = alerting_of(st).events
        delivered = events.posted_for(run_id) if events is not None else []
        try:
            found = await alerts(api, run["project"], run["experiment_name"], resolution_s=cfg.scrape_interval_s,
                                 rules_api=rules)
        except PrometheusUnavailable as e:
            return {"prometheus": _unavailable(api, e), "active": cast(list[Alert], delivered), "recent": [],
                    "recent_window_s": RECENT_ALERTS_S}
        found["active"] = cast(list[Alert], delivered) + found["active"]
        return found

    @r.get("/alerts", **declare(st.auth, "read", "listed"), **typed_answer(AlertList, "every alert, active and recent"))
    async def all_alerts(request: Request) -> AlertList:
        """Every firing, pending and recently resolved alert (the runs list groups them by run); of the token's
        projects only."""
        try:
            found = await alerts(api, resolution_s=cfg.scrape_interval_s, rules_api=rules)
        except PrometheusUnavailable as e:
            return {"prometheus": _unavailable(api, e), "active": [], "recent": [], "recent_window_s": RECENT_ALERTS_S}
        found["active"] = only_visible(request, found["active"], lambda a: a["labels"].get("project"))
        found["recent"] = only_visible(request, found["recent"], lambda a: a["labels"].get("project"))
        return found
