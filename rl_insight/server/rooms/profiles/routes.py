"""`/api/v1/profiles…`: profile requests (create, list, cancel), what processes report, trace uploads,
and the analysis of what arrived (see server/rooms/profiles/book.py)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from starlette.concurrency import run_in_threadpool

from ....errors import ConflictError, InvalidInputError, NotFoundError
from ....protocol import CLIENT_HEARTBEAT_S, MAX_PROFILE_CHUNK_BYTES, ROUTE_PROFILES, parse_steps
from ...access.declared import Named, declare
from ...access.scope import only_visible, require_sees
from ...routing.body import read_body
from ...routing.joined import joined
from ...routing.models import ProfileCreate, ProfileStatus, error_responses, inline_schema, typed_answer
from ...routing.params import OptionalRunIdQuery
from ...state import AppState
from .book import FILE_NAME, ProfileBook
from .records import ChunkStored, ProfileList, ProfileProcessReported, ProfileView

HEAR_WITHIN_S = CLIENT_HEARTBEAT_S + 1.0  # a heartbeat, and the batch's linger and round trip
ProfileId = Path(pattern=r"^[0-9a-f]{16}$", description="profile request id")
FileName = Path(
    max_length=200,
    pattern=FILE_NAME.pattern,
    description="the trace file's name (letters, digits, . _ = + -; ending in .json.gz, .sqlite, .pickle or .pkl)",
)
ReportName = Path(max_length=200)


def build_router(st: AppState, book: ProfileBook) -> APIRouter:
    write = APIRouter(prefix=ROUTE_PROFILES, tags=["profiles"],
                      responses=error_responses(401, 403, 404, 409, 422))
    read = APIRouter(prefix=ROUTE_PROFILES, tags=["profiles"],
                     responses=error_responses(401, 403, 404))
    # what the UI's buttons do: token or the UI's session cookie (processes' reports and uploads: token only)
    operate = APIRouter(prefix=ROUTE_PROFILES, tags=["profiles"],
                        responses=error_responses(400, 401, 403, 404, 409, 422))
    _add_create(operate, st, book)
    _add_reads(read, st, book)
    _add_operations(operate, st, book)
    _add_process_reports(write, st, book)
    return joined(operate, write, read)


def _named(book: ProfileBook) -> Named:
    """A profile request its path names: a token held to projects touches only their requests (another project's is
    404 to a reader or an operator, as one that does not exist; 403 to an ingest token's process report)."""
    return Named("profile_id", lambda pid: book.get(pid)["request"]["project"],
                 missing="no profile request {}".format, hint="GET /api/v1/profiles lists them",
                 writes="a report on profile request {}".format)


def _run_key(st: AppState, body_run_id: int | None, project: str | None, experiment: str | None) -> tuple[str, str]:
    """The run a request names: by its id in the run store, or by project and experiment_name."""
    if body_run_id is not None:
        if st.reader is None:
            raise InvalidInputError("run ids need the run store; give project and experiment_name")

        run = st.reader.runs.get(body_run_id, st.config.live_window_s, include_config=False)
        if not run["project"] or not run["experiment_name"]:  # data sent without a run identity
            raise ConflictError(f"run {body_run_id} has no project and experiment_name: its processes cannot be "
                                "told a profile request", hint="give the job a run identity (init(project=..., "
                                "experiment_name=...)) to profile it")
        return run["project"], run["experiment_name"]
    if not project or not experiment:
        raise InvalidInputError("say which run: run_id, or project and experiment_name")
    return project, experiment


def _check_run(st: AppState, project: str, experiment: str, body: ProfileCreate) -> None:
    """Refuse at once what would sit pending forever: a run the store never saw (unless the request says it
    waits for the job to start), and selectors that match none of the run's live processes."""
    if body.origin == "upload":
        return
    if st.reader is not None and not body.wait_for_run:

        if st.reader.runs.find_id(project, experiment) is None:
            raise NotFoundError(f"no run {project}/{experiment}: it has not sent any data to this server",
                                hint="check the name (`rl-insight runs list`), or ask before the "
                                     "job starts with wait_for_run (`profile request --before-start`)")
    live = st.run_processes(project, experiment)
    if live and not body.roles:  # roles can come from a process's environment, which the server does not see
        from ....protocol.control import Selector
        from ...control.processes import picked, refusal

        selector = Selector(tuple(body.lanes), (), tuple(body.ranks))
        if not any(picked(selector, p) for p in live):
            raise ConflictError(refusal(project, experiment, live, selector),
                                hint="pick lanes or ranks the run has (the timeline shows its lanes)")


def _steps_asked(st: AppState, project: str, experiment: str, body: ProfileCreate) -> tuple[int, int]:
    """The steps a request names: `next` — the first step that begins after every process of the run has heard of
    the request (an idle process hears at its next batch, at the latest its heartbeat): exact, and never refused as
    already begun — or a range."""
    if body.steps.strip().lower() != "next":
        try:
            return parse_steps(body.steps)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
    first = st.step_clock.first_step_starting_after(project, experiment, time.time() + HEAR_WITHIN_S)
    if first is None and st.reader is not None:  # no step metric since this server started: the store's last step

        run_id = body.run_id if body.run_id is not None else st.reader.runs.find_id(project, experiment)
        if run_id is not None:
            last_step = st.reader.runs.get(run_id, st.config.live_window_s, include_config=False).get(
                "last_step")
            first = int(last_step) + 2 if last_step is not None else None
    first = first if first is not None else 2
    return first, first


def _add_create(operate: APIRouter, st: AppState, book: ProfileBook) -> None:
    """Asking for a profile: the run and its live processes checked before the request is kept."""

    @operate.post("", **declare(st.auth, "operate", "named"),
                   **typed_answer(ProfileView, "the request as kept", status=201))
    def create(body: ProfileCreate, request: Request) -> dict[str, Any]:
        """Profile steps of a run on the matching processes. Delivered on the run's ingest replies; refused at once
        for a run that never sent data (unless `wait_for_run`) or selectors no live process matches; over when
        its first step ends with no process having taken it, or after `ttl_s`."""
        project, experiment = _run_key(st, body.run_id, body.project, body.experiment_name)
        require_sees(request, project, f"no run with id {body.run_id}" if body.run_id is not None else
                     f"no run {project}/{experiment}", "GET /api/v1/runs lists the runs")
        _check_run(st, project, experiment, body)
        first, last = _steps_asked(st, project, experiment, body)
        origin = body.origin if body.origin == "upload" else \
            ("ui" if request.cookies and not request.headers.get("authorization") else "api")
        return book.create(project, experiment, first, last, lanes=body.lanes, roles=body.roles, ranks=body.ranks,
                           activities=list(body.activities), memory=body.memory, stack=body.stack, ttl_s=body.ttl_s,
                           max_window_s=body.max_window_s, max_bytes=body.max_bytes, origin=origin, stage=body.stage)


def _add_reads(read: APIRouter, st: AppState, book: ProfileBook) -> None:
    """What the book holds: the requests, one request, its trace files and its reports."""

    @read.get("", **declare(st.auth, "read", "listed"), **typed_answer(ProfileList, "the requests, newest first"))
    def list_profiles(
        request: Request,
        run_id: OptionalRunIdQuery = None,
        project: str | None = Query(None, max_length=2048),
        experiment_name: str | None = Query(None, max_length=2048),
    ) -> dict[str, Any]:
        if run_id is not None:
            try:
                project, experiment_name = _run_key(st, run_id, None, None)
            except ConflictError:  # a run without an identity can be asked nothing, so it has no requests to list
                return {"profiles": [], "count": 0}
        items = book.list(project, experiment_name)
        items = only_visible(request, items, lambda p: p["request"]["project"])
        return {"profiles": items, "count": len(items)}

    @read.get("/{profile_id}", **declare(st.auth, "read", "named", _named(book)),
              **typed_answer(ProfileView, "the request, its processes, files and analysis"))
    def get(request: Request, profile_id: str = ProfileId) -> dict[str, Any]:
        return book.get(profile_id)

    @read.get("/{profile_id}/files/{name}", **declare(st.auth, "read", "named", _named(book)))
    def download(request: Request, profile_id: str = ProfileId, name: str = FileName) -> FileResponse:
        return FileResponse(book.file(profile_id, name), media_type="application/gzip", filename=name)

    @read.get("/{profile_id}/report/{name}", **declare(st.auth, "read", "named", _named(book)))
    def report(request: Request, profile_id: str = ProfileId, name: str = ReportName) -> FileResponse:
        """The analysis of the uploaded traces: timeline.html (the offline report), trace.perfetto.json,
        summary.json, summary.md."""
        path = book.report_file(profile_id, name)
        media = {"html": "text/html", "json": "application/json", "md": "text/markdown", "csv": "text/csv"}[
            name.rsplit(".", 1)[-1]
        ]
        headers = (
            {
                "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "img-src data:; frame-ancestors 'self'"
            }
            if media == "text/html"
            else {}
        )
        disposition = "attachment" if name.endswith((".perfetto.json", ".csv")) else "inline"
        return FileResponse(path, media_type=media, headers=headers, content_disposition_type=disposition,
                            filename=name if disposition == "attachment" else None)


def _add_operations(operate: APIRouter, st: AppState, book: ProfileBook) -> None:
    """What the UI's buttons do to a request: cancel it, analyse its traces again."""

    @operate.delete("/{profile_id}", **declare(st.auth, "operate", "named", _named(book)),
                     **typed_answer(ProfileView, "the request, cancelled"))
    def cancel(request: Request, profile_id: str = ProfileId) -> dict[str, Any]:
        """Cancel: processes that armed it disarm; one that is profiling stops and discards at its next step
        boundary."""
        return book.cancel(profile_id)

    @operate.post("/{profile_id}/analyze", **declare(st.auth, "operate", "named", _named(book)),
                   **typed_answer(ProfileView, "the request, its analysis pending again", errors=(404, 409)))
    def analyze(request: Request, profile_id: str = ProfileId) -> dict[str, Any]:
        """Analyse the request's stored traces again (a profile taken before, read by this version's analysis: top
        operators and kernels, memory by operator); the analysis goes back to pending and runs in the background."""
        return book.describe(book.reanalyse(profile_id))


def _add_process_reports(write: APIRouter, st: AppState, book: ProfileBook) -> None:
    """What the processes send: their status and their trace, in resumable chunks."""

    @write.post("/{profile_id}/status", **declare(st.auth, "ingest", "written", _named(book)),
                **typed_answer(ProfileProcessReported, "the process's entry and the request's state"),
                openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": inline_schema(ProfileStatus)}}}})
    async def status(request: Request, profile_id: str = ProfileId) -> dict[str, Any]:
        """What one process did with the request (armed, profiling, uploading, uploaded, failed, unsupported, …)."""
        import json

        raw = await read_body(request, 64 * 1024)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            raise InvalidInputError("status body must be JSON (an object, not deeply nested)") from None
        if not isinstance(body, dict):
            raise InvalidInputError("status body must be a JSON object")
        return await run_in_threadpool(book.report, profile_id, body)

    @write.post("/{profile_id}/upload/{name}", **declare(st.auth, "ingest", "written", _named(book)),
                **typed_answer(ChunkStored, "what the server holds of the file now", errors=(409, 413)))
    async def upload(request: Request, profile_id: str = ProfileId, name: str = FileName,
                     offset: int = Query(..., ge=0), total: int = Query(..., ge=1)) -> JSONResponse:
        """One chunk of a gzip'd trace at `offset`. 409 with `size` when the server has a different amount
        (resume from there: after a restart, a lost connection)."""
        data = await read_body(request, MAX_PROFILE_CHUNK_BYTES)
        try:
            out = await run_in_threadpool(book.upload, profile_id, name, offset, total, data)
        except ConflictError as exc:
            size = getattr(exc, "size", None)
            return JSONResponse({"detail": exc.message, "size": size}, status_code=409)
        return JSONResponse(out)
