"""Scrape-target registration (upstream-compatible) and the registry's listing and removal."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from ...errors import BadRequestError, InvalidInputError
from ...protocol import ROUTE_TARGETS
from ..access.declared import declare
from ..access.scope import only_visible, require_every_project, require_sees, require_writes
from ..prometheus.targets import TargetList, parse_registration, registration_identity
from ..routing.body import decode_body, read_body
from ..routing.change_answers import TargetsRemoved
from ..routing.joined import joined
from ..routing.models import (
    TARGET_PATTERN,
    TargetRegistered,
    TargetRegistration,
    error_responses,
    inline_schema,
    typed_answer,
)
from ..state import AppState


def build_router(st: AppState) -> APIRouter:
    writes = APIRouter(tags=["targets"])
    reads = APIRouter(tags=["targets"])

    @writes.post(
        ROUTE_TARGETS, **declare(st.auth, "ingest", "written"),
        response_model=TargetRegistered,
        responses=error_responses(400, 401, 403, 409, 413, 415),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": inline_schema(TargetRegistration)}},
            }
        },
    )
    async def register_targets(request: Request) -> dict[str, Any]:
        """Upstream-compatible registration: `targets` (strings or {target, labels}), `labels`, `job_name`.
        Prometheus watches the file_sd file, so no reload is needed."""
        raw = await read_body(request, st.config.max_body_bytes)
        try:
            payload = decode_body(raw, request.headers.get("content-encoding"), st.config.max_body_bytes)
            job, items = parse_registration(payload)
            identity = registration_identity(payload)
            for _, labels in items:  # each target's project label (the top-level one is copied into each)
                require_writes(request, labels.get("project"), "a target registration")
            # an fsync'd file write: off the event loop; 409 for an archived experiment
            count = await run_in_threadpool(st.experiments.register, job, items, identity)
        except InvalidInputError as exc:
            if exc.http_status == 413:
                raise
            raise BadRequestError(exc.message, hint=exc.hint) from None  # upstream answers 400 here
        # Prometheus watches the file_sd file: once it is written the targets are in effect (within its
        # refresh interval, no reload needed), which is what upstream's clients check this field for.
        # upstream main: the answer names the experiment the targets went to and its state (null: unidentified)
        project, experiment = identity if identity else (None, None)
        state = st.experiments.state(identity) if identity else None
        return {"status": "ok", "prometheus_reloaded": True, "reload_needed": False, "job_name": job,
                "target_count": count, "targets_file": str(st.targets.path),
                "config_file": st.config.prometheus_config_file, "project": project, "experiment_name": experiment,
                "state": state}

    @reads.get("/api/v1/targets", **declare(st.auth, "read", "listed"),
               **typed_answer(TargetList, "the registered scrape targets", errors=(401, 403)))
    async def list_targets(request: Request, job: Optional[str] = Query(None, max_length=200)) -> TargetList:
        found = [t.to_api() for t in only_visible(request, st.targets.list(job), lambda t: t.identity()[0])]
        return {"targets": found, "count": len(found), "targets_file": str(st.targets.path)}

    @writes.delete("/api/v1/targets", **declare(st.auth, "ingest", "named"),
                   **typed_answer(TargetsRemoved, "how many were removed", errors=(401, 403, 422)))
    async def delete_targets(request: Request,
                             target: Optional[str] = Query(None, max_length=300, pattern=TARGET_PATTERN,
                                                           description="host:port, or [IPv6]:port"),
                             job: Optional[str] = Query(None, max_length=200),
                             project: Optional[str] = Query(None, max_length=2048),
                             experiment_name: Optional[str] = Query(None, max_length=2048)) -> dict[str, Any]:
        """Remove one target (`target`, optionally with `job`), a whole `job`, or an experiment's targets. A token
        held to projects names one of them (`project`) and removes only that project's targets."""
        if project is None:
            require_every_project(request, "name the project whose targets to remove (project=…)")
        else:
            require_sees(request, project, f"no targets of project {project[:80]!r}")
        request.state.audit_what = {k: v for k, v in (("name", target), ("job", job), ("project", project),
                                                      ("experiment_name", experiment_name)) if v}  # (audit log)
        removed = await run_in_threadpool(lambda: st.experiments.remove(target=target, job=job, project=project,
                                                                        experiment_name=experiment_name))
        return {"status": "ok", "removed": removed}

    return joined(writes, reads)
