"""Request and response bodies as pydantic models, so `/openapi.json` documents the contract.

The ingest route does not parse its body with these models (a batch holds up to hundreds of
thousands of items, and `rl_insight.protocol` validates it item by item without pydantic's cost);
they describe the same shape for the schema and for clients generated from it.
"""

from __future__ import annotations

import copy
import functools
from typing import Annotated, Any, Literal, Optional, Union, cast

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ... import protocol as p
from .params import BodyRunId


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: what was wrong, and usually what to do next."""

    model_config = ConfigDict(extra="allow")
    detail: str = Field(description="what was expected, what was found, and where")
    hint: str | None = Field(None, description="the next step")
    errors: list[dict[str, Any]] | None = Field(None, description="per-item or per-field problems, when there are "
                                                                  "several")


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {400: "malformed body (not JSON, bad gzip, nested too deeply)", 401: "missing or wrong token",
            403: "cross-site or foreign-host request refused", 404: "not found",
            409: "conflict with the current state", 413: "body too large",
            415: "unsupported Content-Type (state-changing routes take application/json)",
            422: "well-formed but invalid input", 429: "too many attempts: retry after Retry-After seconds",
            503: "the run store is disabled or unavailable"}
    # (no "model": app.py's `_document_errors` points every 4xx/5xx at the one ErrorBody schema; a model here made
    # FastAPI build a pydantic field per route and status, about a third of making an app)
    return {c: {"description": text.get(c, "error")} for c in codes}


def typed_answer(kind: Any, description: str = "the answer", errors: tuple[int, ...] = (),
                 status: int = 200) -> dict[str, Any]:
    """A read route's keywords that document its answer as `kind` (server/runstore/results.py) in /openapi.json
    and serialize it as the plain dict it is. Measured side by side (bench/bench_read_answers.py, bench/RESULTS.md):
    FastAPI's validation through the type itself cost 1.47x the time of a 20,000-point series and 1.25x the runs
    list; no response model at all (its Python encoder) 4.4x and 3.1x; this, 1.00x. The query builds exactly that
    shape (mypy checks the keys it writes; tests/unit/server/routes/test_read_results.py the answers). `errors`: the
    error statuses this route documents besides its router's; `status`: the success status (201 for a route that
    makes something: it answers with it too)."""
    return {"response_model": dict[str, Any], **({"status_code": status} if status != 200 else {}),
            "responses": {**error_responses(*errors), status: _answer_document(kind, description)}}


# A named answer type, by the name /openapi.json gives it. Its schema is made once a process (`answer_schemas`), not
# per route and app: a "model" in a route's responses made FastAPI build a pydantic field for each route of each
# app, most of what remained of making an app after error_responses. One name is one type (a second type under a
# name already taken goes the "model" way, where FastAPI tells them apart).
_ANSWER_KINDS: dict[str, Any] = {}


def _answer_document(kind: Any, description: str) -> dict[str, Any]:
    name = getattr(kind, "__name__", None)
    if (not isinstance(kind, type) or name is None or kind.__module__ == "builtins"
            or _ANSWER_KINDS.setdefault(name, kind) is not kind):
        return {"model": kind, "description": description}
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


@functools.lru_cache(maxsize=8)
def _schemas_of(names: frozenset[str]) -> dict[str, Any]:
    probe = FastAPI()
    for name in sorted(names):
        probe.get(f"/{name}", responses={200: {"model": _ANSWER_KINDS[name]}})(lambda: None)
    return dict(probe.openapi().get("components", {}).get("schemas", {}))


def answer_schemas(names: set[str]) -> dict[str, Any]:
    """The component schemas (with the ones they refer to) of the named answer types among `names`, as FastAPI
    writes them; the other names are left out."""
    return copy.deepcopy(_schemas_of(frozenset(n for n in names if n in _ANSWER_KINDS)))


# --------------------------------------------------------------------------- ingest
class ClientBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=p.MAX_CLIENT_ID, description="random per process; makes counters "
                                                                          "idempotent")
    pid: int | None = None
    host: str | None = None
    project: str | None = None
    experiment_name: str | None = None


class SeriesBody(BaseModel):
    k: Literal["g", "c", "h"] = Field(description="gauge, counter (cumulative per client) or histogram")
    n: str = Field(min_length=1, max_length=p.MAX_METRIC_NAME, description="metric name (sanitized for Prometheus)")
    l: dict[str, str | int | float | bool] | None = Field(None, max_length=p.MAX_LABELS, description="labels")  # noqa: E741 - the wire key is `l` (protocol/batch.py)
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
    start_ns: int = Field(ge=0, lt=2**63, description="epoch nanoseconds")
    end_ns: int | None = Field(None, ge=0, le=p.INT64_MAX, description="absent for a span start")
    attributes: dict[str, Any] | None = Field(None, max_length=p.MAX_ATTRIBUTES)


CompactSpan = tuple[
    str, Union[str, None], Union[str, None], str, Union[str, None], int, Union[int, None], str, Union[int, None]
]


class IngestBody(BaseModel):
    """One batch (protocol 1). Invalid items are refused one by one; the rest of the batch is kept."""

    v: Literal[1, 2] = Field(cast(Literal[1, 2], p.PROTOCOL_VERSION),
        description="2 adds `span_attrs` and compact spans (see "
                                                             "rl_insight/protocol/batch.py)")
    client: ClientBody
    series: list[SeriesBody] = []
    samples: list[tuple[int, float, float | None, Union[float, HistogramValue]]] = Field(
        [], description="[series_index, unix_ts_s, step|null, value]; histogram value [sum, count, [cumulative counts]]"
    )
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
    profile: list[dict[str, Any]] = Field(
        [],
        description="the run's active profile requests (protocol.ProfileRequest); "
        "authoritative: one missing from the list is cancelled or over",
    )
    run_step: int | None = Field(None, description="the run's step clock, for processes that do not log the step "
                                                   "metric")
    detail: str | None = None


# --------------------------------------------------------------------------- profiles
def inline_schema(model: Any) -> dict[str, Any]:
    """A model's (or a TypedDict's) JSON schema with its `$defs` written in place, for an `openapi_extra` request body
    (a route that reads its body itself, bounded, and documents it with the model) or an answer documented by hand.
    Each call gets its own copy (FastAPI merges into it); the schema is made once per model."""
    return copy.deepcopy(_inline_schema(model))


@functools.cache
def _inline_schema(model: Any) -> dict[str, Any]:
    schema = model.model_json_schema() if isinstance(model, type) and issubclass(model, BaseModel) else \
        TypeAdapter(model).json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref[8:]])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


STEPS_PATTERN = r"^\s*(next|[0-9]{1,15}(\s*-\s*[0-9]{1,15})?)\s*$"


class SelectorFields(BaseModel):
    """Which processes of the run a control request asks: those with any of these lanes, roles or ranks (none: all
    of them). The body's shape of protocol/control.Selector, which validates it once for every kind."""

    lanes: list[Annotated[str, Field(min_length=1, max_length=p.MAX_LANE)]] = Field(
        [], max_length=p.MAX_PROFILE_SELECTORS
    )
    roles: list[Annotated[str, Field(min_length=1, max_length=p.MAX_LABEL_VALUE)]] = Field(
        [], max_length=p.MAX_PROFILE_SELECTORS
    )
    ranks: list[Annotated[int, Field(ge=0, lt=2**31)]] = Field([], max_length=p.MAX_PROFILE_SELECTORS)


class ProfileCreate(SelectorFields):
    """A profile request: steps of a run, on the processes whose lanes, roles or ranks match (none: all). The run
    is `run_id`, or `project` and `experiment_name`."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["run_id"],
                    "properties": {"run_id": {"type": "integer", "minimum": 0, "maximum": p.MAX_EXACT_INT}},
                },
                {
                    "required": ["project", "experiment_name"],
                    "properties": {
                        "project": {"type": "string", "minLength": 1},
                        "experiment_name": {"type": "string", "minLength": 1},
                    },
                },
            ]
        }
    )

    # at most 2^53: a run id the UI's JavaScript holds exactly (and an integer bound schema tools read exactly)
    run_id: Optional[BodyRunId] = Field(None, description="the run (or project + experiment_name)")
    project: str | None = Field(None, min_length=1, max_length=p.MAX_LABEL_VALUE)
    experiment_name: str | None = Field(None, min_length=1, max_length=p.MAX_LABEL_VALUE)
    steps: str = Field(description="one step `120`, a range `120-121` (first <= last, at most "
                       f"{p.MAX_PROFILE_STEPS} steps), or `next`: the first step every process of the run hears of "
                       "before it begins", max_length=64, pattern=STEPS_PATTERN)
    activities: list[Literal["cpu", "cuda"]] = Field(cast(list[Literal["cpu", "cuda"]],
        list(p.DEFAULT_PROFILE_ACTIVITIES)), min_length=1,
                                                     max_length=len(p.PROFILE_ACTIVITIES))
    memory: bool = False
    stack: bool = False
    ttl_s: float = Field(p.DEFAULT_PROFILE_TTL_S, ge=1, le=p.MAX_PROFILE_TTL_S, description="the request expires "
                                                                                            "when no process has "
                                                                                            "taken it by then")
    max_window_s: float = Field(p.DEFAULT_PROFILE_WINDOW_S, ge=1, le=p.MAX_PROFILE_WINDOW_S,
                                description="a window still open after this is closed by the client")
    max_bytes: int = Field(p.DEFAULT_PROFILE_BYTES, ge=1, le=p.MAX_PROFILE_BYTES, description="gzip'd trace size cap "
                                                                                              "per process")
    stage: str = Field("", max_length=p.MAX_SPAN_NAME, description="profile only this state (a trace_state name, e.g. "
                       "actor_update) in the one step given; empty: the whole step(s)")
    wait_for_run: bool = Field(False, description="the run has not sent data yet (the job is about to start): keep "
                               "the request for it instead of answering 404")
    origin: Literal["api", "upload"] = Field("api", description="upload: traces verl's own profiler wrote, sent by "
                                             "`rl-insight profile upload` (never delivered to the job's processes)")


class StackCreate(SelectorFields):
    """A stack snapshot of a run's live processes: those whose lanes, roles or ranks match (none: all of them)."""

    native: bool = Field(False, description="add native frames (py-spy, where installed and ptrace is permitted)")
    deadline_s: float = Field(p.DEFAULT_STACK_DEADLINE_S, ge=1, le=p.MAX_STACK_DEADLINE_S,
                              description="processes that have not answered by then are listed as not answering "
                                          "(an idle process hears at its heartbeat, every 10 s)")


class ProfileProcess(BaseModel):
    host: str = Field(max_length=1024)
    pid: int = Field(ge=0, lt=2**63)
    rank: int | None = Field(None, ge=0, lt=2**31)
    lanes: list[str] = []
    roles: list[str] = []


class ProfileWindow(BaseModel):
    start_ns: int = Field(ge=0, lt=2**63, description="epoch nanoseconds; start_ns <= end_ns")
    end_ns: int = Field(ge=0, lt=2**63)
    steps: list[Annotated[int, Field(ge=0, le=p.MAX_EXACT_INT)]] | None = Field(None, max_length=p.MAX_PROFILE_STEPS)


class ProfileStatus(BaseModel):
    """What one process did with a profile request (POST /api/v1/profiles/{id}/status; documents the body the
    route reads itself, within 64 KiB)."""

    state: Literal[p.PROCESS_STATES]  # type: ignore[valid-type]  # Literal over the protocol tuple: one list of states for the schema
    process: ProfileProcess
    message: str = Field("", max_length=2000)
    window: ProfileWindow | None = None
    file: str | None = Field(None, max_length=200)


class StackFrame(BaseModel):
    file: str = Field("?", max_length=4096)
    line: int = Field(0, ge=0, lt=2**31)
    func: str = Field("?", max_length=4096)
    code: str | None = Field(None, max_length=4096)


class StackThread(BaseModel):
    id: int = Field(0, ge=0, lt=2**64)
    name: str = Field("?", max_length=4096)
    main: bool = False
    sender: bool = False
    daemon: bool = False
    lanes: list[dict[str, Any]] = Field([], max_length=64)
    frames: list[StackFrame] = Field([], max_length=4096)
    native: list[StackFrame] | None = None


class StackReport(BaseModel):
    """One process's answer to a stack snapshot (POST /api/v1/stacks/{id}/report; documents the body the route
    reads itself, within 1 MiB; protocol/stacks.py is its one validation)."""

    process: ProfileProcess
    threads: list[StackThread] = Field(min_length=1)
    taken_ns: int = Field(0, ge=0, lt=2**63)
    step: int | None = Field(None, ge=0, lt=2**63)
    rss_bytes: int | None = Field(None, ge=0, lt=2**63)
    cpu_s: float | None = Field(None, ge=0, lt=1e12)
    native_state: Literal["not_asked", "ok", "not_installed", "refused", "failed"] = "not_asked"
    native_message: str = Field("", max_length=4096)


# --------------------------------------------------------------------------- targets
# the shape of a target; what a pattern cannot say (the port's range, a valid IPv4/IPv6 address) targets.py checks
TARGET_PATTERN = r"^\s*(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?):[0-9]{1,5}\s*$"
Target = Annotated[str, Field(max_length=300, pattern=TARGET_PATTERN, description="host:port, or [IPv6]:port")]


class TargetItem(BaseModel):
    target: Target
    labels: dict[str, str | int | float | bool] | None = None


class TargetRegistration(BaseModel):
    """Upstream RL-Insight's body: `targets` as `host:port` strings or {target, labels} objects."""

    model_config = ConfigDict(extra="allow")
    targets: list[Union[Target, TargetItem]] = Field(min_length=1)
    job_name: str | None = None
    labels: dict[str, str | int | float | bool] | None = None
    project: str | None = None
    experiment_name: str | None = None


class TargetRegistered(BaseModel):
    status: str
    prometheus_reloaded: bool = Field(
        description="true: the targets are in effect (the file_sd file Prometheus watches "
        "was written; no reload is needed)"
    )
    reload_needed: bool
    job_name: str
    target_count: int = Field(description="targets now registered for this job")
    targets_file: str
    config_file: str | None = Field(None, description="the rendered prometheus.yml, when this server's stack runs "
                                                      "Prometheus")
    project: str | None = Field(None, description="the experiment the targets went to (upstream main); null when "
                                                  "the registration named none")
    experiment_name: str | None = None
    state: str | None = Field(None, description="that experiment's state: active (archived ones refuse with 409)")


class LoginBody(BaseModel):
    token: str = Field(max_length=4096)
