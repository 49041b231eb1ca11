"""Stack snapshots over HTTP (server/rooms/stacks/book.py): ask a run's processes where every thread is, read the
grouped answer; and the route processes answer on.

    POST /api/v1/runs/{run_id}/stacks          ask (the token, or the UI's session: the run page's button)
    GET  /api/v1/runs/{run_id}/stacks          the run's snapshots, newest first (summaries)
    GET  /api/v1/runs/{run_id}/stacks/{id}     one snapshot: groups, units, the sentence; `reports=true` adds the
                                               raw answers
    POST /api/v1/stacks/{id}/report            one process's answer (the ingest token)
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Path, Query, Request
from starlette.concurrency import run_in_threadpool

from ....errors import ConflictError, InvalidInputError
from ....protocol import ROUTE_STACKS
from ....protocol.stacks import MAX_STACK_REPORT_BYTES
from ...access.declared import Named, declare
from ...routing.body import read_body
from ...routing.joined import joined
from ...routing.models import StackCreate, StackReport, error_responses, inline_schema, typed_answer
from ...routing.params import RunId
from ...state import AppState
from .book import StackBook
from .records import SnapshotList, SnapshotView, StackProcessReported, VerdictAnswer

SnapshotId = Path(pattern=r"^[0-9a-f]{16}$", description="stack snapshot id")


def build_router(st: AppState, book: StackBook) -> APIRouter:
    assert st.reader is not None
    operate = APIRouter(prefix="/api/v1/runs", tags=["stacks"],
                        responses=error_responses(401, 403, 404, 409, 422))
    read = APIRouter(prefix="/api/v1/runs", tags=["stacks"],
                     responses=error_responses(401, 403, 404))
    write = APIRouter(prefix=ROUTE_STACKS, tags=["stacks"],
                      responses=error_responses(400, 401, 403, 404, 409, 413, 422))

    def run_key(run_id: int, asking: bool = True) -> tuple[str, str]:
        return _run_key(st, run_id, asking)

    @operate.post("/{run_id}/stacks", **declare(st.auth, "operate", "named"),
                   **typed_answer(SnapshotView, "the snapshot, asked of the processes", status=201))
    def create(run_id: RunId, body: StackCreate) -> dict[str, Any]:
        """Ask the run's live processes for every thread's stack. Complete when all answered or at the deadline;
        poll `GET …/stacks/{id}`."""
        project, experiment = run_key(run_id)
        return book.create(project, experiment, run_id=run_id, lanes=body.lanes, roles=body.roles, ranks=body.ranks,
                           native=body.native, deadline_s=body.deadline_s)

    @read.get("/{run_id}/stacks", **declare(st.auth, "read", "named"),
              **typed_answer(SnapshotList, "the run's snapshots, newest first"))
    def list_snapshots(run_id: RunId) -> dict[str, Any]:
        items = book.list(*run_key(run_id, asking=False))
        return {"run_id": run_id, "snapshots": items, "count": len(items)}

    @read.get("/{run_id}/verdict", **declare(st.auth, "read", "named"),
              **typed_answer(VerdictAnswer, "the run's status and latest verdict"))
    def verdict(run_id: RunId) -> dict[str, Any]:
        """Why the run is stuck, from its latest complete stack snapshot (the server takes one by itself when the run
        stalls; `POST …/stacks` or `rl-insight diagnose` takes one now): class, culprits, collective, phase, step,
        evidence and what to check next."""
        return _verdict_answer(st, book, run_id)

    @read.get("/{run_id}/stacks/{snapshot_id}", **declare(st.auth, "read", "named"),
              **typed_answer(SnapshotView, "the snapshot, grouped"))
    def get(run_id: RunId, snapshot_id: str = SnapshotId,
            reports: bool = Query(False, description="include each process's raw answer"),
            exact: bool = Query(False, description="group by line too (two lines of one function: two places)")
            ) -> dict[str, Any]:
        return book.get(snapshot_id, run_key(run_id, asking=False), reports, exact)

    reported = Named("snapshot_id", book.project_of, writes="a stack report".format)

    @write.post("/{snapshot_id}/report", **declare(st.auth, "ingest", "written", reported),
                **typed_answer(StackProcessReported, "the process's answer, stored"),
                openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": inline_schema(StackReport)}}}})
    async def report(request: Request, snapshot_id: str = SnapshotId) -> dict[str, Any]:
        """One process's stacks (what client/control/stacks/answers.py sends); an ingest token answers for its
        projects' runs only."""
        body = _json(await read_body(request, MAX_STACK_REPORT_BYTES))
        return await run_in_threadpool(book.report, snapshot_id, body)

    return joined(operate, read, write)


def _run_key(st: AppState, run_id: int, asking: bool = True) -> tuple[str, str]:
    """A run's (project, experiment_name): 404 for a run that does not exist; one without them cannot be asked (409),
    and has no snapshot to read (`asking` False: an empty key)."""

    assert st.reader is not None
    run = st.reader.runs.get(run_id, st.config.live_window_s)  # 404 for a run that does not exist
    if not run["project"] or not run["experiment_name"]:
        if not asking:
            return "", ""  # no snapshot can exist: an empty list, a 404 for one
        raise ConflictError(f"run {run_id} has no project and experiment_name: its processes cannot be asked",
                            hint="give the job a run identity (init(project=..., experiment_name=...))")
    return run["project"], run["experiment_name"]


def _verdict_answer(st: AppState, book: StackBook, run_id: int) -> dict[str, Any]:

    assert st.reader is not None
    run = st.reader.runs.get(run_id, st.config.live_window_s, conditions=st.conditions.all())
    key = (run["project"], run["experiment_name"])
    stall = st.conditions.stall(key)
    snap = book.latest_complete(*key) if all(key) else None
    listed = None
    if snap is not None:
        listed = {k: v for k, v in book.describe(snap).items() if k not in ("units", "groups", "expected", "missing",
                                                                             "verdict")}
    return {"run_id": run_id, "status": run["status"],
            "why": (stall.hung or stall.reason) if stall is not None else None,
            "verdict": snap.get("verdict") if snap is not None else None, "snapshot": listed}


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidInputError("a stack report must be JSON (an object, not deeply nested)") from None
