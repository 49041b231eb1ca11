"""Explaining steps and runs over HTTP (runstore/steps/explain.py, semantics/critical_path.py, run_diff.py):

    GET /api/v1/runs/{run_id}/critical-path?step=N[&cut_percent=&stage=&faster_percent=]
        one step's critical path, slacks, gaps and what-if savings (the last complete step without `step`)
    GET /api/v1/runs/{run_id}/explain?steps=a-b[&cut_percent=&stage=&faster_percent=]
        over a window of steps: each what-if's median and total saving, the biggest single fix, where the path runs
    GET /api/v1/runs/{run_id}/ledger[?steps=a-b]
        the goodput ledger: each step's device-seconds by reason (runstore/steps/ledger.py, docs/ledger.md)
    GET /api/v1/runs/diff?a=RUN&b=RUN[&steps=a-b | &a_steps=a-b&b_steps=c-d]
        two runs (or two windows of one run, a = b) aligned by step: the difference by stage, lane class and lane,
        and the sentence

Windows come from stored per-step rows; only one step's path reads spans. The rooms' routes are mounted before the
runs router: `/runs/diff` is not a run id.
"""

from __future__ import annotations

import re
import time
from typing import Any, Optional

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from ....errors import InvalidInputError, NotFoundError
from ....protocol import INT64_MAX
from ....semantics import critical_path as cp
from ....semantics import run_diff
from ...access.declared import declare
from ...routing.models import error_responses, typed_answer
from ...routing.params import RunId, RunIdQuery
from ...runstore.results import Run
from ...runstore.steps import ledger
from ...runstore.steps.answers import CriticalPath, Explanation, Ledger, RunsDiff
from ...state import AppState


# (a fresh Query per parameter: one shared instance would give every parameter the first one's name)
def _steps_param() -> Any:
    return Query(None, max_length=64, pattern=r"^\d{1,18}-\d{1,18}$", description="a step range, e.g. 10-200")


def _range(text: Optional[str]) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.fullmatch(r"(\d+)-(\d+)", text)
    assert m is not None  # the Query pattern checked it
    a, b = int(m[1]), int(m[2])
    if a > b:
        raise InvalidInputError(f"step range {text!r} runs backwards", hint="write the smaller step first: 10-200")
    return a, b


def build_router(st: AppState) -> APIRouter:
    assert st.reader is not None
    reader, cfg = st.reader, st.config
    r = APIRouter(prefix="/api/v1/runs", tags=["explain"],
                  responses=error_responses(401, 403, 404, 422))

    def windows(run_id: int, steps: tuple[int, int] | None) -> tuple[Run, list[tuple[int, int, int]]]:
        return _windows(st, run_id, steps)

    @r.get("/diff", **declare(st.auth, "read", "named"),
           **typed_answer(RunsDiff, "B's time against A's, step by step, and B's biggest fix"))
    async def runs_diff(a: RunIdQuery, b: RunIdQuery, steps: Optional[str] = _steps_param(),
                        a_steps: Optional[str] = _steps_param(), b_steps: Optional[str] = _steps_param()
                        ) -> dict[str, Any]:
        """Where B's time went against A's, step by step (the same run twice with two step ranges compares windows)."""
        def work() -> dict[str, Any]:
            run_a, wa = windows(a, _range(a_steps or steps))
            run_b, wb = windows(b, _range(b_steps or steps))
            by_position = bool(a_steps and b_steps)  # two windows (of one run, or two): aligned by their order
            name_a, name_b = _names(run_a, a_steps, run_b, b_steps)
            now = time.time_ns()
            out = reader.steps.diff((a, wa, name_a), (b, wb, name_b), now, by_position)
            ledgers = [reader.steps.ledger(rid, ws, now, reader.runs.get(rid, cfg.live_window_s,
                                                                                 include_config=True).get("config"))
                       for rid, ws in ((a, wa), (b, wb))]
            return {"a": a, "b": b, **out, "ledger": ledger.ledger_diff(*ledgers)}
        return await run_in_threadpool(work)

    @r.get("/{run_id}/critical-path", **declare(st.auth, "read", "named"),
           **typed_answer(CriticalPath, "the step's critical path and its what-ifs"))
    async def critical_path(run_id: RunId, step: Optional[int] = Query(None, ge=0, le=INT64_MAX),
                            cut_percent: float = Query(10.0, ge=0, le=100),
                            stage: Optional[str] = Query(None, max_length=256),
                            faster_percent: float = Query(50.0, ge=0, le=100)) -> dict[str, Any]:
        """One step's critical path: its chain of states with each one's slack, the idle gaps on it, every other
        state's slack, and the what-if savings (estimates; docs/explain.md)."""
        def work() -> dict[str, Any]:
            w = _step_window(st, run_id, step)
            return {"run_id": run_id, **reader.steps.path(run_id, w, time.time_ns(),
                                                           cut_percent=cut_percent, stage=stage,
                                                           faster_percent=faster_percent if stage else None)}
        return await run_in_threadpool(work)

    @r.get("/{run_id}/ledger", **declare(st.auth, "read", "named"),
           **typed_answer(Ledger, "where the device-seconds went, by step and reason"))
    async def run_ledger(run_id: RunId, steps: Optional[str] = _steps_param()) -> dict[str, Any]:
        """Every device-second of each step accounted to one reason: generating, training, weight sync, waiting for
        the long-tail replica, … (docs/ledger.md); each step's reasons add up to its wall time × devices."""
        def work() -> dict[str, Any]:
            _, ws = windows(run_id, _range(steps))
            config = reader.runs.get(run_id, cfg.live_window_s, include_config=True).get("config")
            return reader.steps.ledger(run_id, ws, time.time_ns(), config, cfg.gpu_hour_cost)
        return await run_in_threadpool(work)

    @r.get("/{run_id}/explain", **declare(st.auth, "read", "named"),
           **typed_answer(Explanation, "the what-ifs over the window"))
    async def run_explain(run_id: RunId, steps: Optional[str] = _steps_param(),
                          cut_percent: int = Query(10, json_schema_extra={"enum": list(cp.CUT_PERCENTS)},
                                                   description="the slowest k % of generation items not waited for: "
                                                   "5, 10 or 20 over a window (kept per step)"),
                          stage: Optional[str] = Query(None, max_length=256),
                          faster_percent: float = Query(50.0, ge=0, le=100)) -> dict[str, Any]:
        """Over a window of steps (default: all): each what-if's median saving per step and total, the biggest single
        fix, and the stages and lanes the critical path runs through (seconds a step)."""
        if cut_percent not in cp.CUT_PERCENTS:
            raise InvalidInputError(f"cut_percent must be one of {list(cp.CUT_PERCENTS)} over a window",
                                    hint="any value for one step: GET …/critical-path?step=N&cut_percent=")
        return await run_in_threadpool(_what_ifs, st, run_id, _range(steps), cut_percent, stage, faster_percent)

    return r


def _windows(st: AppState, run_id: int, steps: tuple[int, int] | None) -> tuple[Run, list[tuple[int, int, int]]]:
    """A run (404 for an unknown one) and its steps' windows, those in `steps` when given."""
    assert st.reader is not None
    run = st.reader.runs.get(run_id, st.config.live_window_s)
    ws = st.reader.steps.windows(run_id, st.config.step_metric)
    if steps is not None:
        ws = [w for w in ws if steps[0] <= w[0] <= steps[1]]
    return run, ws


def _step_window(st: AppState, run_id: int, step: int | None) -> tuple[int, int, int]:
    """One step's window (the last complete one by default); 404 naming the steps there are."""
    _, ws = _windows(st, run_id, None)
    if not ws:
        raise NotFoundError(f"run {run_id} has no complete step yet",
                            hint=f"its steps come from the step metric ({st.config.step_metric})")
    w = ws[-1] if step is None else next((x for x in ws if x[0] == step), None)
    if w is None:
        raise NotFoundError(f"run {run_id} has no step {step}", hint=f"its steps are {ws[0][0]}–{ws[-1][0]}")
    return w


def _names(run_a: Run, a_steps: str | None, run_b: Run, b_steps: str | None) -> tuple[str, str]:
    """What a diff calls its two sides: each run and its steps, A and B when that is all the same."""
    name_a = f"{run_a['project']}/{run_a['experiment_name']}" + (f" steps {a_steps}" if a_steps else "")
    name_b = f"{run_b['project']}/{run_b['experiment_name']}" + (f" steps {b_steps}" if b_steps else "")
    return (f"A ({name_a})", f"B ({name_b})") if name_a == name_b else (name_a, name_b)


def _what_ifs(st: AppState, run_id: int, steps: tuple[int, int] | None, cut_percent: int, stage: str | None,
              faster_percent: float) -> dict[str, Any]:
    """Each what-if's saving over a window of steps, and the biggest single fix."""
    assert st.reader is not None
    _, ws = _windows(st, run_id, steps)
    facts, pending = st.reader.steps.facts(run_id, ws, time.time_ns(), per_lane=False)
    out = run_diff.savings(facts, cut_percent=cut_percent, stage=stage, faster_percent=faster_percent)
    biggest = out["biggest"]
    return {"run_id": run_id, **out, "pending_steps": len(pending),
            "biggest_text": run_diff.describe(biggest) if biggest else None}
