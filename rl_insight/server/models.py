"""Request and response bodies as pydantic models, so `/openapi.json` documents the contract.

The ingest route does not parse its body with these models (a batch holds up to hundreds of
thousands of items, and `rl_insight.protocol` validates it item by item without pydantic's cost);
they describe the same shape for the schema and for clients generated from it.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from .. import protocol as p


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: what was wrong, and usually what to do next."""

    model_config = ConfigDict(extra="allow")
    detail: str = Field(description="what was expected, what was found, and where")
    hint: str | None = Field(None, description="the next step")
    errors: list[dict[str, Any]] | None = Field(None, description="per-item or per-field problems, when there are several")


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {400: "malformed body (not JSON, bad gzip, nested too deeply)", 401: "missing or wrong token",
            403: "cross-site or foreign-host request refused", 404: "not found",
            409: "conflict with the current state", 413: "body too large",
            415: "unsupported Content-Type (state-changing routes take application/json)",
            422: "well-formed but invalid input", 503: "the run store is disabled or unavailable"}
    return {c: {"model": ErrorBody, "description": text.get(c, "error")} for c in codes}


# --------------------------------------------------------------------------- ingest
class ClientBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=p.MAX_CLIENT_ID, description="random per process; makes counters idempotent")
    pid: int | None = None
    host: str | None = None
    project: str | None = None
    experiment_name: str | None = None


class SeriesBody(BaseModel):
    k: Literal["g", "c", "h"] = Field(description="gauge, counter (cumulative per client) or histogram")
    n: str = Field(min_length=1, max_length=p.MAX_METRIC_NAME, description="metric name (sanitized for Prometheus)")
    l: dict[str, str | int | float | bool] | None = Field(None, max_length=p.MAX_LABELS, description="labels")  # noqa: E741
    d: str | None = Field(None, description=f"documentation (cut to {p.MAX_DOC} characters)")
    b: list[float] | None = Field(None, max_length=p.MAX_BUCKETS, description="histogram bucket bounds, increasing")
    ns: Literal["client"] | None = Field(None, description="'client' for the client's own delivery metrics")


HistogramValue = tuple[float, int, list[int]]


class SpanBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=p.MAX_ID)
    trace_id: str | None = Field(None, max_length=p.MAX_ID)
    parent_id: str | None = Field(None, max_length=p.MAX_ID)
    name: str = Field(min_length=1, max_length=p.MAX_SPAN_NAME)
    lane: str | None = Field(None, max_length=p.MAX_LANE)
    kind: str | None = Field(None, description="state | state_child | op | span")
    start_ns: int = Field(ge=0, le=p.INT64_MAX, description="epoch nanoseconds")
    end_ns: int | None = Field(None, ge=0, le=p.INT64_MAX, description="absent for a span start")
    attributes: dict[str, Any] | None = Field(None, max_length=p.MAX_ATTRIBUTES)


CompactSpan = tuple[str, Union[str, None], Union[str, None], str, Union[str, None], int, Union[int, None], str, Union[int, None]]


class IngestBody(BaseModel):
    """One batch (protocol 1). Invalid items are refused one by one; the rest of the batch is kept."""

    v: Literal[1, 2] = Field(p.PROTOCOL_VERSION, description="2 adds `span_attrs` and compact spans (see rl_insight/protocol.py)")
    client: ClientBody
    series: list[SeriesBody] = []
    samples: list[tuple[int, float, float | None, Union[float, HistogramValue]]] = Field(
        [], description="[series_index, unix_ts_s, step|null, value]; histogram value [sum, count, [cumulative counts]]")
    span_starts: list[Union[SpanBody, CompactSpan]] = []
    spans: list[Union[SpanBody, CompactSpan]] = []
    span_attrs: list[dict[str, Any]] = Field([], description="protocol 2: attribute table that compact spans index")
    final: bool | None = Field(None, description="the process is done (finish() or exit)")


class ItemProblem(BaseModel):
    section: str
    index: int
    reason: str
    detail: str


class IngestAnswer(BaseModel):
    accepted: int
    rejected: int
    errors: list[ItemProblem] = Field(description=f"the first {p.MAX_ERRORS_REPORTED} refused items")
    boot_id: str = Field(description="changes when the server restarts; the client then resends its totals")
    replaced_strings: int = Field(0, description="strings whose undecodable characters were replaced by U+FFFD")
    protocols: list[int] = Field([1], description="ingest protocol versions this server accepts")
    profile: list[dict[str, Any]] = Field([], description="the run's active profile requests (protocol.ProfileRequest); "
                                          "authoritative: one missing from the list is cancelled or over")
    run_step: int | None = Field(None, description="the run's step clock, for processes that do not log the step metric")
    detail: str | None = None


# --------------------------------------------------------------------------- profiles
class ProfileCreate(BaseModel):
    """A profile request: steps of a run, on the processes whose lanes, roles or ranks match (none: all)."""

    run_id: int | None = Field(None, description="the run (or project + experiment_name)")
    project: str | None = None
    experiment_name: str | None = None
    steps: str = Field(description="one step `120`, a range `120-121`, or `next`: the step after the one running now "
                       "(by the run's step clock when the request is made)", max_length=64)
    lanes: list[str] = Field([], max_length=p.MAX_PROFILE_SELECTORS)
    roles: list[str] = Field([], max_length=p.MAX_PROFILE_SELECTORS)
    ranks: list[int] = Field([], max_length=p.MAX_PROFILE_SELECTORS)
    activities: list[str] = Field(["cpu", "cuda"], max_length=4)
    memory: bool = False
    stack: bool = False
    ttl_s: float = Field(3600.0, description="the request expires when no process has taken it by then")
    max_window_s: float = Field(300.0, description="a window still open after this is closed by the client")
    max_bytes: int = Field(p.DEFAULT_PROFILE_BYTES, description="gzip'd trace size cap per process")
    stage: str = Field("", max_length=p.MAX_SPAN_NAME, description="profile only this state (a trace_state name, e.g. "
                       "actor_update) in the one step given; empty: the whole step(s)")
    origin: Literal["api", "upload"] = Field("api", description="upload: traces verl's own profiler wrote, sent by "
                                             "`rl-insight profile upload` (never delivered to the job's processes)")


# --------------------------------------------------------------------------- targets
class TargetItem(BaseModel):
    target: str = Field(description="host:port")
    labels: dict[str, str | int | float | bool] | None = None


class TargetRegistration(BaseModel):
    """Upstream RL-Insight's body: `targets` as `host:port` strings or {target, labels} objects."""

    model_config = ConfigDict(extra="allow")
    targets: list[Union[str, TargetItem]] = Field(min_length=1)
    job_name: str | None = None
    labels: dict[str, str | int | float | bool] | None = None
    project: str | None = None
    experiment_name: str | None = None


class TargetRegistered(BaseModel):
    status: str
    prometheus_reloaded: bool = Field(description="true: the targets are in effect (the file_sd file Prometheus watches "
                                                  "was written; no reload is needed)")
    reload_needed: bool
    job_name: str
    target_count: int = Field(description="targets now registered for this job")
    targets_file: str
    config_file: str | None = Field(None, description="the rendered prometheus.yml, when this server's stack runs Prometheus")


class LoginBody(BaseModel):
    token: str = Field(max_length=4096)
