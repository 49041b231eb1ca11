"""`/api/v1/runs…`: the run store's query API (runs, series, spans, insights, exports)."""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ...errors import InvalidInputError, NotFoundError
from ...protocol import INT64_MAX
from ..access.declared import declare
from ..access.run_ids import parse_run_id_list
from ..access.scope import visible_filter
from ..prometheus.targets import RunTargets, TargetHealth
from ..rooms.exports.run_points import reader_insight_rows
from ..rooms.profiles.feature import profiles_of
from ..rooms.stacks.feature import stacks_of
from ..routing.models import error_responses, typed_answer
from ..routing.params import FromNs, RunId, ToNs
from ..runstore.results import Comparison, LaneList, MetricList, Run, RunList, RunStatus, Series, SpanDetail, SpanWindow
from ..runstore.steps.answers import Insights
from ..state import AppState


def build_router(st: AppState) -> APIRouter:
    """The run store's read API; every route needs the token (or the UI's cookie) when one is set."""
    assert st.reader is not None
    r = APIRouter(prefix="/api/v1", tags=["runs"],
                  responses=error_responses(401, 403, 404, 422))
    for add in (_add_run_routes, _add_series_routes, _add_span_routes, _add_insight_and_export_routes):
        add(r, st)
    return r


def _add_run_routes(r: APIRouter, st: AppState) -> None:
    """The runs list (filtered, sorted, searched) and one run."""
    reader = st.reader
    assert reader is not None
    live_window_s = st.config.live_window_s

    @r.get("/runs", **declare(st.auth, "read", "listed"), **typed_answer(RunList, "the runs"))
    def runs(
        request: Request,
        project: str | None = Query(None, max_length=1024, description="only this project's runs"),
        status: RunStatus | None = Query(None, description="only runs in this state (stalled and hung runs are live, "
                                                          "and something more: they are not listed as live)"),
        tag: str | None = Query(None, max_length=256, description="only runs with this tag"),
        q_: str | None = Query(None, alias="q", max_length=256,
                               description="search: part of project/experiment or of a tag"),
        metric: str | None = Query(None, max_length=256, description="a summary column: this metric's latest value "
                                                                     "in each run (as logged, e.g. critic/score/mean)"),
        config: str | None = Query(None, max_length=2048, description="config columns: comma-separated keys "
                                                                       "(e.g. actor.lr,data.train_batch_size)"),
        sort: Literal["last_seen", "first_seen", "duration", "name", "last_step", "metric"] = "last_seen",
        order: Literal["asc", "desc"] = "desc",
        limit: int | None = Query(None, ge=1, le=100_000),
    ) -> RunList:
        """The runs, newest activity first unless `sort` says otherwise; filtered, searched, with a summary metric
        and config columns when asked (runstore/run_list.py)."""
        keys = [k.strip() for k in (config or "").split(",") if k.strip()]
        items = reader.runs.listed(live_window_s, project=project, status=status, tag=tag, search=q_,
                                   metric=metric, config_keys=keys, sort=sort, descending=order == "desc", limit=limit,
                                   conditions=st.conditions.all(), visible=visible_filter(request))
        archived = st.experiments.archived_keys()
        for it in items:  # the experiments API's state, shown in the runs list
            it["archived"] = (it["project"], it["experiment_name"]) in archived
            _say_why(it)
        return {"runs": items, "count": len(items)}

    def _say_why(run: Run) -> Run:
        """A stalled or hung run says why (the stall watch's words, or the verdict's)."""
        if run["status"] in ("stalled", "hung"):
            stall = st.conditions.stall((run["project"], run["experiment_name"]))
            if stall is not None:
                run["why"] = stall.hung or stall.reason
        return run

    @r.get("/runs/{run_id}", **declare(st.auth, "read", "named"), **typed_answer(Run, "the run"))
    def run(
        run_id: RunId, config: bool = Query(True, description="include the run config (false for cheap polling)")
    ) -> Run:
        """A run: identity, status, last step, duration, tags and the config init(config=...) described."""
        return _say_why(reader.runs.get(run_id, live_window_s, include_config=config,
                                  conditions=st.conditions.all()))


def _add_series_routes(r: APIRouter, st: AppState) -> None:
    """A run's metrics and series, and one metric across runs."""
    reader = st.reader
    assert reader is not None

    @r.get("/runs/{run_id}/metrics", **declare(st.auth, "read", "named"),
           **typed_answer(MetricList, "the run's series"))
    def metrics(run_id: RunId) -> MetricList:
        """The run's series: `name` as stored and exposed (`actor_entropy`), `logged` as the job logged it
        (`actor/entropy`), kind, labels, how many samples and the last step."""
        items = reader.samples.names(run_id)
        return {"run_id": run_id, "metrics": items, "count": len(items)}

    @r.get("/runs/{run_id}/series", **declare(st.auth, "read", "named"),
           **typed_answer(Series, "the metric, downsampled"))
    def series(
        run_id: RunId,
        name: str = Query(..., max_length=1024),
        x: Literal["step", "time"] = "step",
        points: int = Query(1000, ge=2, le=20_000, description="about this many points per series"),
        agg: Literal["minmax", "lttb", "none"] = "minmax",
        x_from: float | None = Query(None, alias="from", ge=-1e300, le=1e300),
        x_to: float | None = Query(None, alias="to", ge=-1e300, le=1e300),
    ) -> Series:
        """A metric of a run by step or by time, downsampled server-side."""
        return reader.samples.series(run_id, name, x=x, points=points, agg=agg, x_from=x_from, x_to=x_to)

    @r.get("/series", **declare(st.auth, "read", "named"), **typed_answer(Comparison, "the metric of each run"))
    def compare(
        name: str = Query(..., max_length=1024),
        runs: str = Query(
            ...,
            max_length=400,
            pattern=r"^[1-9][0-9]{0,18}(,[1-9][0-9]{0,18}){0,19}$",
            description="1 to 20 comma-separated run ids",
        ),
        x: Literal["step", "time"] = "step",
        points: int = Query(1000, ge=2, le=20_000),
        agg: Literal["minmax", "lttb", "none"] = "minmax",
    ) -> Comparison:
        """The same metric of several runs side by side."""
        ids = parse_run_id_list(runs)  # as the access check read them
        if ids is None:
            past = next((i for i in runs.split(",") if i.isdigit() and int(i) > INT64_MAX), None)
            if past is not None:  # (the documented pattern cannot bound a number: such an id is no run's)
                raise NotFoundError(f"no run with id {past[:40]}", hint="GET /api/v1/runs lists the runs")
            raise InvalidInputError(f"runs must be 1 to 20 comma-separated run ids, got {runs[:80]!r}")
        return {"name": name, "runs": reader.samples.compare(ids, name, x=x, points=points, agg=agg)}


def _add_span_routes(r: APIRouter, st: AppState) -> None:
    """A run's lanes and spans (the timeline's window), and one span."""
    reader = st.reader
    assert reader is not None
    live_window_s = st.config.live_window_s

    @r.get("/runs/{run_id}/lanes", **declare(st.auth, "read", "named"), **typed_answer(LaneList, "the run's lanes"))
    def lanes(run_id: RunId, counts: bool = False) -> LaneList:
        """Lane names sorted by prefix then number; `counts=true` adds span counts (scans every span)."""
        items = reader.spans.lanes(run_id, counts)
        return {"run_id": run_id, "lanes": items}

    @r.get("/runs/{run_id}/spans", **declare(st.auth, "read", "named"),
           **typed_answer(SpanWindow, "the timeline's window, merged to its resolution"))
    def spans(
        run_id: RunId,
        from_ns: FromNs = None,
        to_ns: ToNs = None,
        resolution_ns: int = Query(0, ge=0, le=INT64_MAX),
        px: int = Query(0, ge=0, le=100_000, description="the view's width in pixels: without resolution_ns, merge "
                        "to about one item per pixel per lane over the window (the run's own when from/to are not "
                        "given) — one answer the size of the view, not the whole run at full resolution"),
        lanes: str | None = Query(None, description="comma-separated lane names (default: all)"),
        limit: int = Query(200_000, ge=1, le=1_000_000),
    ) -> JSONResponse:
        """Spans in a time window; same-name spans shorter than `resolution_ns` are merged (with a count)."""
        lane_list = [x for x in (lanes or "").split(",") if x] or None
        body = reader.spans.window(run_id, from_ns=from_ns, to_ns=to_ns, resolution_ns=resolution_ns, px=px,
                                   lane_names=lane_list, limit=limit, live_window_s=live_window_s)
        return JSONResponse(body)

    @r.get("/runs/{run_id}/spans/{span_id}", **declare(st.auth, "read", "named"),
           **typed_answer(SpanDetail, "the span"))
    def span(run_id: RunId, span_id: str = Path(..., max_length=64)) -> SpanDetail:
        return reader.spans.detail(run_id, span_id)


def _add_insight_and_export_routes(r: APIRouter, st: AppState) -> None:
    """A run's insights, its CSV and Perfetto exports, and its scrape targets."""
    reader = st.reader
    assert reader is not None
    cfg = st.config
    live_window_s = st.config.live_window_s
    step_metric = st.config.step_metric
    version_metric = st.config.version_metric

    @r.get("/runs/{run_id}/insights", **declare(st.auth, "read", "named"),
           **typed_answer(Insights, "the run's insights over the window"))
    def run_insight(
        run_id: RunId,
        from_ns: FromNs = None,
        to_ns: ToNs = None,
        window_s: float = Query(300.0, gt=0, le=30 * 86400),
        max_steps: int = Query(
            200, ge=1, le=1_000_000, description="the most recent steps listed in `steps` and `long_tail`"
        ),
    ) -> dict[str, Any]:
        """Utilization, bubbles, step breakdown, overlap, long tail, stalled lanes, staleness (docs/insights.md)."""
        run = reader.runs.get(run_id, live_window_s)
        to = to_ns if to_ns is not None else time.time_ns()
        frm = from_ns if from_ns is not None else to - int(window_s * 1e9)
        if to <= frm:
            raise InvalidInputError(f"empty window: to_ns ({to}) must be greater than from_ns ({frm})")
        if from_ns is None and to_ns is None:
            if run["status"] != "live":  # a finished run: the window ends where its data ends
                to = int(run["last_seen"] * 1e9) + 1
                frm = to - int(window_s * 1e9)
            frm = max(frm, int(run["first_seen"] * 1e9))  # never count time before the run existed as idle
        out = {"run_id": run_id, **reader.steps.insights(run_id, frm, to, step_metric, version_metric, max_steps,
                                                         cfg.stalled_lane_min_s)}
        # steps a profiling window covered: disturbed by the profiler, not the run's usual pace
        profiled: set[int] = set(profiles_of(st).profiled_steps(run["project"], run["experiment_name"])) \
            if run["project"] else set()
        out["profiled_steps"] = sorted(profiled)
        for s in out["steps"]:
            s["profiled"] = s["step"] in profiled
        # the latest stack snapshot the server took by itself (a stall), for the stalled-lane card
        snap = stacks_of(st).latest(run["project"], run["experiment_name"], origin="auto") if run["project"] else None
        out["stack_snapshot"] = None if snap is None else {k: snap.get(k) for k in (
            "id", "created_at", "state", "reason", "summary", "answered", "expected_count", "verdict")}
        return out

    @r.get("/runs/{run_id}/export.csv", **declare(st.auth, "read", "named"), response_class=CSVResponse)
    def export_csv(run_id: RunId, names: str | None = Query(None, max_length=20_000),
                   insights: bool = Query(True, description="add the insight metrics per step (without `names`)")
                   ) -> StreamingResponse:
        """Every sample (name, labels, step, unix time, value), then the run's insight metrics per step."""
        run = reader.runs.get(run_id)  # 404 before streaming starts
        wanted = [n for n in (names or "").split(",") if n] or None
        extra = reader_insight_rows(reader, run, step_metric, version_metric) if insights and wanted is None else []
        return StreamingResponse(reader.samples.csv(run_id, wanted, extra), media_type="text/csv",
                                 headers={"Content-Disposition": f'attachment; filename="run-{run_id}-metrics.csv"'})

    @r.get("/runs/{run_id}/trace.json", **declare(st.auth, "read", "named"))
    def export_trace(run_id: RunId) -> StreamingResponse:
        """Chrome trace / Perfetto JSON of the run's spans (open in ui.perfetto.dev or chrome://tracing),
        streamed one lane at a time."""
        reader.runs.get(run_id)  # 404 before streaming starts
        return StreamingResponse(reader.spans.chrome_trace(run_id, step_metric), media_type="application/json",
                                 headers={"Content-Disposition": f'attachment; filename="run-{run_id}-trace.json"'})

    @r.get("/runs/{run_id}/targets", **declare(st.auth, "read", "named"),
           **typed_answer(RunTargets, "the run's scrape targets and their health"))
    async def run_targets(run_id: RunId) -> RunTargets:
        """The run's registered targets (labels project/experiment_name) with health from Prometheus when it runs."""
        run = reader.runs.get(run_id)
        mine = [t.to_api() for t in st.targets.list()]
        mine = [t for t in mine if t["labels"].get("project") == run["project"]
                and t["labels"].get("experiment_name") == run["experiment_name"]]
        health = await st.prometheus.target_health()
        with_health: list[TargetHealth] = [
            {**t, "health": health.get((t["job"], t["target"]), "unknown" if health else None)} for t in mine]
        return {"run_id": run_id, "targets": with_health}


class CSVResponse(StreamingResponse):
    media_type = "text/csv"

