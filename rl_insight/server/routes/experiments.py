"""Experiments API (upstream main): list, show targets, archive and restore an experiment's targets."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ...errors import BadRequestError
from ..access.declared import declare
from ..access.scope import only_visible, require_sees, require_writes
from ..prometheus.answers import ExperimentList, ExperimentListed, ExperimentTargets
from ..prometheus.convergence import prometheus_convergence
from ..routing.body import decode_body, read_body
from ..routing.change_answers import ExperimentChanged
from ..routing.joined import joined
from ..routing.models import error_responses, inline_schema, typed_answer
from ..state import AppState

# what `_identity` keeps: no control character (Python's strip() takes \x1c-\x1f as blanks, a schema's \s does not)
# and something left once stripped, so the schema says exactly what the route accepts
NAME_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"


class ExperimentRef(BaseModel):
    project: str = Field(min_length=1, max_length=2048, pattern=NAME_PATTERN)
    experiment_name: str = Field(min_length=1, max_length=2048, pattern=NAME_PATTERN)


def _identity(project: Optional[str], experiment_name: Optional[str]) -> tuple[str, str]:
    if not project or not project.strip() or not experiment_name or not experiment_name.strip():
        raise BadRequestError("project and experiment_name are both required and must not be blank")
    return project.strip(), experiment_name.strip()


def build_router(st: AppState) -> APIRouter:
    reads = APIRouter(prefix="/api/v1/experiments", tags=["experiments"],
                      responses=error_responses(400, 401, 403, 404))
    writes = APIRouter(
        prefix="/api/v1/experiments",
        tags=["experiments"],
        responses=error_responses(400, 401, 403, 404, 413, 415),
    )

    @reads.get("", **declare(st.auth, "read", "listed"),
               **typed_answer(ExperimentList, "the experiments and their runs' status"))
    def experiments(request: Request, project: Optional[str] = Query(None, max_length=2048)) -> ExperimentList:
        """Every experiment that registered targets: state (active/archived: whether its targets are discovered,
        upstream's meaning), target count, timestamps, and its run's own status (live / idle / finished / lost;
        null without a run store or a run): `active` says nothing about whether the job still runs."""
        items = only_visible(request, st.experiments.list(project), lambda e: e["project"])
        runs = {(r["project"], r["experiment_name"]): r for r in st.reader.runs.of_project(
            st.config.live_window_s, project, st.conditions.all())} if st.reader is not None else {}
        listed: list[ExperimentListed] = []
        for e in items:
            run = runs.get((e["project"], e["experiment_name"]))
            listed.append({**e, "run_id": run["id"] if run else None, "run_status": run["status"] if run else None})
        return {"experiments": listed, "count": len(listed)}

    @reads.get("/targets", **declare(st.auth, "read", "named"),
               **typed_answer(ExperimentTargets, "the experiment and its targets"))
    def experiment_targets(
        request: Request,
        project: Optional[str] = Query(None, max_length=2048, description="required (400 without, as upstream)"),
        experiment_name: Optional[str] = Query(
            None, max_length=2048, description="required (400 without, as upstream)"
        ),
    ) -> ExperimentTargets:
        key = _identity(project, experiment_name)
        require_sees(request, key[0], f"no experiment {key[0]!r}/{key[1]!r} has registered targets",
                     "GET /api/v1/experiments lists them")
        return st.experiments.targets(*key)

    async def _ref(request: Request) -> tuple[str, str]:
        raw = await read_body(request, 64 * 1024)
        body = decode_body(raw, request.headers.get("content-encoding"), 64 * 1024) if raw else {}
        if not isinstance(body, dict):
            raise BadRequestError("body must be an object {\"project\": ..., \"experiment_name\": ...}")
        p, e = body.get("project"), body.get("experiment_name")
        key = _identity(p if isinstance(p, str) else None, e if isinstance(e, str) else None)
        require_writes(request, key[0], "archiving or restoring an experiment")
        return key

    extra = {
        "requestBody": {"required": True, "content": {"application/json": {"schema": inline_schema(ExperimentRef)}}}
    }

    @writes.post("/archive", **declare(st.auth, "ingest", "written"), openapi_extra=extra,
                  **typed_answer(ExperimentChanged, "the experiment, archived"))
    async def archive(request: Request) -> dict[str, Any]:
        """Stop discovery of the experiment's targets (Prometheus keeps what it scraped); idempotent."""
        row = await run_in_threadpool(st.experiments.archive, *await _ref(request))
        return {**row, **await prometheus_convergence(st.prometheus, row)}

    @writes.post("/restore", **declare(st.auth, "ingest", "written"), openapi_extra=extra,
                  **typed_answer(ExperimentChanged, "the experiment, restored"))
    async def restore(request: Request) -> dict[str, Any]:
        """Put an archived experiment's targets back into discovery; idempotent."""
        row = await run_in_threadpool(st.experiments.restore, *await _ref(request))
        return {**row, **await prometheus_convergence(st.prometheus, row)}

    return joined(reads, writes)
