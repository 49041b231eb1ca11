"""`/api/v1/runs/{id}/trajectories…`: agent-loop trajectories per step (table, distributions, waterfall)."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Path, Query

from ....protocol import INT64_MAX
from ...access.declared import declare
from ...routing.models import error_responses, typed_answer
from ...routing.params import RunId
from ...runstore.results import TrajectoryDetail, TrajectoryPage, TrajectoryStats, TrajectorySteps
from ...runstore.trajectories import queries as tq
from ...state import AppState

Step = Query(None, ge=-INT64_MAX, le=INT64_MAX, description="the step (default: the newest with trajectories)")


def build_router(st: AppState) -> APIRouter:
    assert st.reader is not None
    reader = st.reader
    r = APIRouter(
        prefix="/api/v1/runs/{run_id}/trajectories",
        tags=["trajectories"],
        responses=error_responses(401, 403, 404, 422),
    )

    def _step(run_id: int, step: Optional[int], no_step: bool) -> Optional[int]:
        if step is not None or no_step:
            return step
        newest = reader.trajectories.steps(run_id)["steps"]
        return newest[0] if newest else None

    @r.get("/steps", **declare(st.auth, "read", "named"),
           **typed_answer(TrajectorySteps, "the steps with trajectories"))
    def steps(run_id: RunId) -> TrajectorySteps:
        """Steps that have trajectories, newest first; `without_step` when some have none."""
        return reader.trajectories.steps(run_id)

    @r.get("", **declare(st.auth, "read", "named"), **typed_answer(TrajectoryPage, "a page of the step's trajectories"))
    def page(
        run_id: RunId,
        step: Optional[int] = Step,
        no_step: bool = Query(False, description="trajectories without a step"),
        sort: tq.Sort = Query("duration"),
        desc: bool = True,
        status: Optional[str] = Query(None, max_length=64),
        tool: Optional[str] = Query(None, max_length=256),
        replica: Optional[str] = Query(None, max_length=256),
        failed: bool = Query(False, description="only those that ended failed (error, timeout, aborted, …)"),
        tool_errors: bool = Query(False, description="only those with a failed tool call (whatever their ending)"),
        sample: Optional[str] = Query(
            None, max_length=256, description="one sample's trajectories (its rollout group)"
        ),
        min_turns: Optional[int] = Query(None, ge=0, le=1_000_000),
        offset: int = Query(0, ge=0, le=10_000_000),
        limit: int = Query(50, ge=1, le=500),
    ) -> TrajectoryPage:
        """One page of a step's trajectories, sorted and filtered (slowest, most turns, failed, by reward, tool,
        replica)."""
        return reader.trajectories.page(
            run_id,
            _step(run_id, step, no_step),
            sort=sort,
            descending=desc,
            status=status,
            tool=tool,
            replica=replica,
            failed=failed,
            tool_errors=tool_errors,
            min_turns=min_turns,
            sample=sample,
            offset=offset,
            limit=limit,
        )

    @r.get("/stats", **declare(st.auth, "read", "named"), **typed_answer(TrajectoryStats, "the step's distributions"))
    def stats(run_id: RunId, step: Optional[int] = Step, no_step: bool = False) -> TrajectoryStats:
        """A step's distributions: duration quantiles, turns, reward, tokens, tool latency p50/p99 by tool, replicas."""
        return reader.trajectories.stats(run_id, _step(run_id, step, no_step))

    @r.get("/{traj_id}", **declare(st.auth, "read", "named"),
           **typed_answer(TrajectoryDetail, "the trajectory, its turns and the gaps between them"))
    def detail(run_id: RunId, traj_id: int = Path(ge=1, le=INT64_MAX)) -> TrajectoryDetail:
        """One trajectory's turns in time order (generate, tool …) with engine timings and the gaps between them."""
        return reader.trajectories.detail(run_id, traj_id)

    return r
